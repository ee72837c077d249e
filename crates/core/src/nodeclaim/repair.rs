//! Node repair (Karpenter's repair method, v1.15).
//!
//! An instance whose remediation the provider says belongs to someone else
//! (`Instance::remediated_elsewhere`; for Cluster API, a MachineHealthCheck selecting its
//! Machine) is not repaired here: the lifecycle only replaces it when that remediator asks
//! the instance's owner to (`liveness`).
//!
//! What is unhealthy is the provider's to say (`CloudProvider::repair_policies`, each a Node
//! condition held for its toleration; for Cluster API the Node's `Ready` False or Unknown
//! for `--node-repair-after`), plus the provider's own health signal of the instance
//! (`Instance::unhealthy` from `CloudProvider::get`, e.g. a Machine's `NodeHealthy=False`;
//! tolerated for `--node-repair-after`). A provider without repair policies gets nothing
//! repaired, as Karpenter runs no node repair then.
//!
//! A NodeClaim past its toleration is repaired unless, in this order:
//! 1. it or its Node is annotated `karpenter.sh/do-not-repair: "true"` (the operator's
//!    veto; a `DisruptionBlocked` event says so);
//! 2. its pool is over the safety threshold (Karpenter's, and CAPI MachineHealthCheck's
//!    `maxUnhealthy`): the unhealthy Nodes of its NodePool — every Node a policy matches,
//!    still inside its toleration or already being repaired, plus the repairs this process
//!    has started that the cache does not show yet — are more than ceil(20 %) of the pool's
//!    Nodes (cluster-wide for NodeClaims without a pool). More unhealthy than that looks
//!    like a partition or a bad rollout, not a broken machine: nothing of the pool is
//!    repaired, a `NodeRepairBlocked` event goes to the NodeClaim and its NodePool. A
//!    partition of half a pool therefore repairs nothing; a pool of 5 with one broken Node
//!    repairs it;
//! 3. its NodePool's disruption budgets for reason `Unhealthy` (budgets listing it, and
//!    budgets without reasons, like the default `10%`) are used up. As Karpenter counts
//!    them: over the pool's initialized NodeClaims not `InstanceTerminating`, those being
//!    deleted (for any reason, repairs included) or in a disruption command consume the
//!    budget, merely unhealthy ones do not (they are what repair fixes); an uninitialized
//!    NodeClaim neither needs nor consumes budget. Within the budget the eligible NodeClaims
//!    go in Karpenter's order: longest eligible first, then the lowest disruption cost
//!    ([`crate::cost::node_disruption_cost`]), then by name. One waiting for budget gets a
//!    `DisruptionBlocked` event.
//!
//! A repair deletes the NodeClaim, so it consumes the budget of every reason until it is
//! gone (the disruption loop counts NodeClaims being deleted).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use api::NodeClaim;
use api::consts::annotations::{DISRUPTION_COMMAND, DO_NOT_REPAIR};
use api::consts::conditions::{self, REBOOTING};
use api::karpenter::{Budget, DisruptionReason, NodeClaimStatus};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

pub use cloudprovider::Unhealthy;

/// Share of a pool's Nodes that may be under repair at once, in percent.
pub(crate) const MAX_UNHEALTHY_PERCENT: usize = 20;

use super::repair_policy::{Candidate, decide};
pub use super::repair_policy::{Decision as Matched, Matcher};

impl Matched {
    /// When the toleration runs out.
    pub fn due(&self) -> Timestamp {
        self.eligible_at
    }
}

/// The provider's compiled repair policies and how long its own health signal
/// ([`cloudprovider::Instance::unhealthy`]) is tolerated.
#[derive(Clone, Copy, Debug)]
pub struct Policies<'a> {
    /// `None`: the provider has no repair policies (nothing is repaired).
    pub matcher: Option<&'a Matcher>,
    pub provider_toleration: Duration,
}

/// What repair would do about a registered NodeClaim's Node at `now`: the provider's
/// policies matched against the Node's conditions, with the provider's own signal
/// (`provider`, e.g. a Machine's `NodeHealthy=False`, replaced after the provider
/// toleration), merged (see `repair_policy`); no toleration starts before `not_before` (the
/// end of the NodeClaim's last reboot). A provider without repair policies repairs nothing
/// (Karpenter does not run node repair then).
pub fn unhealthy(
    node: Option<&Node>,
    provider: Option<Unhealthy>,
    policies: Policies,
    now: Timestamp,
    not_before: Option<Timestamp>,
) -> Option<Matched> {
    let matcher = policies.matcher?;
    let mut candidates = node.map(|n| matcher.matches(n)).unwrap_or_default();
    candidates.extend(provider.map(|u| Candidate::provider(u, policies.provider_toleration)));
    decide(&candidates, now, not_before)
}

/// Reboots of one NodeClaim within this window before the next repair replaces it.
const ESCALATION_WINDOW: Duration = Duration::from_secs(24 * 3600);
const ESCALATION_REBOOTS: usize = 2;

/// When the NodeClaim's last reboot ended (`Rebooting=False`): no repair toleration starts
/// before.
pub(crate) fn not_before(claim: &NodeClaim) -> Option<Timestamp> {
    let c = api::conditions::get(&claim.status.as_ref()?.conditions, REBOOTING)?;
    (c.status == api::conditions::FALSE).then_some(c.last_transition_time.0)
}

/// The reboots this process requested, by NodeClaim UID (Karpenter's `RebootHistory`).
#[derive(Debug, Default)]
pub struct History(Mutex<HashMap<String, Vec<Timestamp>>>);

impl History {
    /// Whether the NodeClaim was rebooted often enough lately that repair replaces it.
    pub(crate) fn escalated(&self, uid: &str, now: Timestamp) -> bool {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let recent = held.entry(uid.to_string()).or_default();
        recent.retain(|t| now.duration_since(*t).as_secs_f64() < ESCALATION_WINDOW.as_secs_f64());
        recent.len() >= ESCALATION_REBOOTS
    }

    pub(crate) fn record(&self, uid: &str, now: Timestamp) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        held.entry(uid.to_string()).or_default().push(now);
    }
}

/// Keeps the `ExternalRemediation` condition on a registered NodeClaim whose instance's
/// remediation belongs to someone else (`by`, e.g. `MachineHealthCheck ns/name`), and off it
/// otherwise.
pub(crate) fn mark_remediator(status: &mut NodeClaimStatus, by: Option<&str>, now: Timestamp) {
    match by {
        Some(by) => {
            api::conditions::set(
                &mut status.conditions,
                conditions::EXTERNAL_REMEDIATION,
                api::conditions::TRUE,
                "RemediatedElsewhere",
                &format!("the operator's repair leaves this node to {by}"),
                None,
                now,
            );
        }
        None => {
            api::conditions::remove(&mut status.conditions, conditions::EXTERNAL_REMEDIATION);
        }
    }
}

/// How many Nodes of a pool of `nodes` may be under repair at once: ceil(20 %).
pub fn allowed(nodes: usize) -> usize {
    (nodes * MAX_UNHEALTHY_PERCENT).div_ceil(100)
}

/// Whether `claim` or its `node` vetoes repair (`karpenter.sh/do-not-repair: "true"`).
pub(crate) fn do_not_repair(claim: &NodeClaim, node: Option<&Node>) -> bool {
    crate::objects::flag(claim, DO_NOT_REPAIR) == Ok(true)
        || node.is_some_and(|n| crate::objects::flag(n, DO_NOT_REPAIR) == Ok(true))
}

/// Repair refused, and why.
#[derive(Debug, PartialEq, Eq)]
pub enum Blocked {
    /// Over the safety threshold: unhealthy Nodes of the pool, how many may be, its Nodes.
    Cap {
        unhealthy: usize,
        allowed: usize,
        nodes: usize,
    },
    /// The pool's `Unhealthy` budget is used up: what it allows, how many of its nodes
    /// consume it, how many eligible NodeClaims go first.
    Budget {
        allowed: usize,
        disrupting: usize,
        ahead: usize,
    },
}

/// The repairs this process started, by NodeClaim UID (value: its pool), until the cache
/// shows the NodeClaim gone: the cap and the budget count them even before the cache shows
/// the deletion.
#[derive(Debug, Default)]
pub struct Repairs(Mutex<HashMap<String, String>>);

/// What the cap and the budget are computed from, for one pool.
#[derive(Debug, Default)]
pub struct PoolView {
    /// NodeClaims of the pool with a Node.
    pub nodes: usize,
    /// UIDs of the pool's NodeClaims whose Node matches a policy (tolerated or not, being
    /// deleted or not).
    pub unhealthy: HashSet<String>,
    /// UIDs of every NodeClaim the cache holds.
    pub existing: HashSet<String>,
    /// The pool's `Unhealthy` budget (none for NodeClaims without a pool).
    pub budget: Option<BudgetView>,
}

/// A pool's `Unhealthy` budget, over its counted (initialized, not `InstanceTerminating`)
/// NodeClaims.
#[derive(Debug, Default)]
pub struct BudgetView {
    /// Disruptions the pool's budgets allow for reason `Unhealthy`.
    pub allowed: usize,
    /// UIDs of counted NodeClaims being disrupted (deleted, or in a disruption command).
    pub disrupting: HashSet<String>,
    /// UIDs of counted NodeClaims repair would act on (past their toleration, not vetoed,
    /// not being disrupted), best first.
    pub queue: Vec<String>,
}

impl Repairs {
    /// Records the repair of `uid` (unhealthy, in `pool`) if the pool is within the cap and
    /// its budget, or says why not. Atomic: two reconciles of one pool decide one after the
    /// other.
    pub fn reserve(&self, uid: &str, pool: &str, view: &PoolView) -> Result<(), Blocked> {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|u, _| view.existing.contains(u));
        let ours: HashSet<&String> = held
            .iter()
            .filter(|(_, p)| p.as_str() == pool)
            .map(|(u, _)| u)
            .collect();
        let mut unhealthy: HashSet<&str> = view.unhealthy.iter().map(String::as_str).collect();
        unhealthy.extend(ours.iter().map(|u| u.as_str()));
        unhealthy.insert(uid);
        let allowed = allowed(view.nodes);
        if unhealthy.len() > allowed {
            return Err(Blocked::Cap {
                unhealthy: unhealthy.len(),
                allowed,
                nodes: view.nodes,
            });
        }
        if let Some(budget) = &view.budget {
            budget.admits(uid, &ours)?;
        }
        held.insert(uid.to_string(), pool.to_string());
        Ok(())
    }

    /// The repair of `uid` did not happen (its delete failed).
    pub fn release(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }
}

impl BudgetView {
    /// Whether the budget admits repairing `uid`, with `ours` (repairs of the pool this
    /// process started) consuming it too. A NodeClaim not in the queue is not counted
    /// (uninitialized): it needs no budget.
    fn admits(&self, uid: &str, ours: &HashSet<&String>) -> Result<(), Blocked> {
        let mut disrupting: HashSet<&str> = self.disrupting.iter().map(String::as_str).collect();
        disrupting.extend(ours.iter().map(|u| u.as_str()));
        disrupting.remove(uid);
        let Some(ahead) = self
            .queue
            .iter()
            .filter(|u| !disrupting.contains(u.as_str()))
            .position(|u| u == uid)
        else {
            return Ok(());
        };
        if ahead < self.allowed.saturating_sub(disrupting.len()) {
            return Ok(());
        }
        Err(Blocked::Budget {
            allowed: self.allowed,
            disrupting: disrupting.len(),
            ahead,
        })
    }
}

/// What [`pool_view`] reads of the cluster besides the NodeClaims.
pub struct Lookups<'a> {
    /// A Node by name.
    pub node: &'a dyn Fn(&str) -> Option<std::sync::Arc<Node>>,
    /// The provider's health signal of a NodeClaim.
    pub provider: &'a dyn Fn(&NodeClaim) -> Option<Unhealthy>,
    /// The provider's repair policies.
    pub policies: Policies<'a>,
    /// A NodeClaim's disruption cost (repair's tie-break).
    pub cost: &'a dyn Fn(&NodeClaim) -> f64,
    /// The pool's disruption budgets (None: no pool, no budget).
    pub budgets: Option<&'a [Budget]>,
    pub now: Timestamp,
}

/// Counted by budgets: initialized and not `InstanceTerminating`.
fn counted(claim: &NodeClaim) -> bool {
    crate::objects::claim_condition(claim, conditions::INITIALIZED)
        && !crate::objects::claim_condition(claim, conditions::INSTANCE_TERMINATING)
}

/// Being disrupted: deleted, in a disruption command, or rebooting (a reboot counts against
/// every budget, as in Karpenter).
fn disrupting(claim: &NodeClaim) -> bool {
    crate::objects::deleting(claim)
        || crate::objects::annotation(claim, DISRUPTION_COMMAND).is_some()
        || crate::objects::rebooting(claim)
}

/// The cap's and the budget's inputs for `pool` ("" = NodeClaims without a pool: the whole
/// cluster, no budget) from the cached NodeClaims and Nodes and the provider's signals.
pub(crate) fn pool_view(
    claims: &[std::sync::Arc<NodeClaim>],
    pool: &str,
    look: &Lookups,
) -> PoolView {
    let in_pool = |c: &NodeClaim| {
        pool.is_empty() || crate::objects::nodepool_of(c).unwrap_or_default() == pool
    };
    let mut view = PoolView::default();
    let mut total = 0;
    let mut budget = BudgetView::default();
    // (score, cost, name, uid)
    let mut queue: Vec<(f64, f64, String, String)> = Vec::new();
    for c in claims {
        let uid = crate::objects::uid_of(c.as_ref());
        view.existing.insert(uid.clone());
        if !in_pool(c) {
            continue;
        }
        let node = c
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|n| (look.node)(n));
        let is_counted = counted(c);
        total += usize::from(is_counted);
        if is_counted && disrupting(c) {
            budget.disrupting.insert(uid.clone());
        }
        if c.status
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none()
        {
            continue;
        }
        view.nodes += 1;
        let Some(m) = unhealthy(
            node.as_deref(),
            (look.provider)(c),
            look.policies,
            look.now,
            not_before(c),
        ) else {
            continue;
        };
        view.unhealthy.insert(uid.clone());
        let eligible = m.due() <= look.now;
        if eligible && is_counted && !disrupting(c) && !do_not_repair(c, node.as_deref()) {
            queue.push((m.score, (look.cost)(c), c.name_any(), uid));
        }
    }
    // Karpenter's order: the most urgent (priority, then time since eligible) first, then
    // the lowest disruption cost, then by name.
    queue.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(a.1.total_cmp(&b.1))
            .then_with(|| a.2.cmp(&b.2))
    });
    budget.queue = queue.into_iter().map(|e| e.3).collect();
    view.budget = look.budgets.map(|b| BudgetView {
        allowed: crate::budgets::allowed(b, DisruptionReason::Unhealthy, total, look.now),
        ..budget
    });
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_percent_rounded_up() {
        let table = [
            (0, 0),
            (1, 1),
            (4, 1),
            (5, 1),
            (6, 2),
            (10, 2),
            (11, 3),
            (100, 20),
            (101, 21),
        ];
        for (nodes, want) in table {
            assert_eq!(allowed(nodes), want, "{nodes} nodes");
        }
    }

    fn view(nodes: usize, unhealthy: &[&str], existing: &[&str]) -> PoolView {
        PoolView {
            nodes,
            unhealthy: unhealthy.iter().map(|s| s.to_string()).collect(),
            existing: existing.iter().map(|s| s.to_string()).collect(),
            budget: None,
        }
    }

    const FIVE: [&str; 5] = ["a", "b", "c", "d", "e"];

    #[test]
    fn one_broken_node_of_five_is_repaired() {
        let r = Repairs::default();
        assert_eq!(r.reserve("a", "p", &view(5, &["a"], &FIVE)), Ok(()));
        // Reconciling it again (the deletion not cached yet) still decides the same.
        assert_eq!(r.reserve("a", "p", &view(5, &["a"], &FIVE)), Ok(()));
    }

    #[test]
    fn three_of_five_unhealthy_is_a_partition_and_repairs_none() {
        let r = Repairs::default();
        for uid in ["a", "b", "c"] {
            assert_eq!(
                r.reserve(uid, "p", &view(5, &["a", "b", "c"], &FIVE)),
                Err(Blocked::Cap {
                    unhealthy: 3,
                    allowed: 1,
                    nodes: 5
                })
            );
        }
    }

    #[test]
    fn a_repair_not_yet_cached_counts() {
        let r = Repairs::default();
        assert_eq!(r.reserve("a", "p", &view(5, &["a"], &FIVE)), Ok(()));
        // b turns unhealthy; the cache no longer shows a's Node (deleted) but a's NodeClaim
        // is still there: a still counts, so b waits.
        assert_eq!(
            r.reserve("b", "p", &view(5, &["b"], &FIVE)),
            Err(Blocked::Cap {
                unhealthy: 2,
                allowed: 1,
                nodes: 5
            })
        );
        // Another pool has its own cap.
        assert_eq!(r.reserve("x", "q", &view(5, &["x"], &["x"])), Ok(()));
        // a is gone from the cache: b may go.
        assert_eq!(
            r.reserve("b", "p", &view(4, &["b"], &["b", "c", "d", "e"])),
            Ok(())
        );
        r.release("b");
        assert_eq!(
            r.reserve("c", "p", &view(4, &["c"], &["b", "c", "d", "e"])),
            Ok(())
        );
    }

    #[test]
    fn ten_nodes_allow_two() {
        let r = Repairs::default();
        let all: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        assert!(r.reserve("0", "p", &view(10, &["0", "1"], &all)).is_ok());
        assert!(r.reserve("1", "p", &view(10, &["0", "1"], &all)).is_ok());
        assert_eq!(
            r.reserve("2", "p", &view(10, &["0", "1", "2"], &all)),
            Err(Blocked::Cap {
                unhealthy: 3,
                allowed: 2,
                nodes: 10
            })
        );
    }

    /// The Cluster API provider's policies: `Ready` False or Unknown for 10 minutes.
    fn ready_policies() -> Matcher {
        Matcher::new(&cloudprovider::RepairPolicy::node_not_ready(
            Duration::from_secs(600),
        ))
        .expect("valid")
        .expect("not empty")
    }

    const NOW: &str = "2026-11-22T10:30:00Z";

    fn now() -> Timestamp {
        NOW.parse().expect("now")
    }

    #[test]
    fn policies_match_node_ready_and_machine_signals() {
        let ready_policies = ready_policies();
        let policies = Policies {
            matcher: Some(&ready_policies),
            provider_toleration: Duration::from_secs(600),
        };
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
        .expect("fixture");
        let u = unhealthy(Some(&node), None, policies, now(), None).expect("matches");
        assert_eq!(
            (u.unhealthy.condition.as_str(), u.unhealthy.detail.as_str()),
            ("Ready", "Ready=Unknown")
        );
        assert_eq!(u.toleration, Duration::from_secs(600));
        assert_eq!(
            unhealthy(
                Some(&node),
                None,
                Policies {
                    matcher: None,
                    provider_toleration: Duration::from_secs(1)
                },
                now(),
                None
            ),
            None,
            "no policies, no repair"
        );
        // The provider's own signal (e.g. a Machine's NodeHealthy=False), held since before
        // the Node's: due first with the same toleration.
        let signal = Unhealthy {
            condition: "NodeHealthy".into(),
            detail: "NodeHealthy=False (NodeConditionsFailed)".into(),
            since: "2026-11-22T09:00:00Z".parse().expect("time"),
        };
        let u =
            unhealthy(Some(&node), Some(signal.clone()), policies, now(), None).expect("matches");
        assert_eq!(
            u.unhealthy.condition, "NodeHealthy",
            "the signal eligible first wins"
        );
        // Tolerated for less, a later signal is due first.
        let short = Policies {
            matcher: Some(&ready_policies),
            provider_toleration: Duration::from_secs(60),
        };
        let later = Unhealthy {
            since: "2026-11-22T10:05:00Z".parse().expect("time"),
            ..signal.clone()
        };
        assert_eq!(
            unhealthy(Some(&node), Some(later), short, now(), None).map(|m| m.toleration),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            unhealthy(
                None,
                Some(signal),
                Policies {
                    matcher: None,
                    provider_toleration: Duration::from_secs(1)
                },
                now(),
                None
            ),
            None,
            "no policies: not even the provider's signal repairs"
        );
        let ready: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("fixture");
        assert_eq!(unhealthy(Some(&ready), None, policies, now(), None), None);
        assert_eq!(unhealthy(None, None, policies, now(), None), None);
    }

    fn budget(allowed: usize, disrupting: &[&str], queue: &[&str]) -> Option<BudgetView> {
        Some(BudgetView {
            allowed,
            disrupting: disrupting.iter().map(|s| s.to_string()).collect(),
            queue: queue.iter().map(|s| s.to_string()).collect(),
        })
    }

    const TEN: [&str; 10] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];

    #[test]
    fn an_unhealthy_budget_of_one_repairs_the_first_in_order_then_the_next() {
        let r = Repairs::default();
        let both = |disrupting: &[&str]| PoolView {
            budget: budget(1, disrupting, &["a", "b"]),
            ..view(10, &["a", "b"], &TEN)
        };
        // b is second in Karpenter's order: it waits, a goes.
        assert_eq!(
            r.reserve("b", "p", &both(&[])),
            Err(Blocked::Budget {
                allowed: 1,
                disrupting: 0,
                ahead: 1
            })
        );
        assert_eq!(r.reserve("a", "p", &both(&[])), Ok(()));
        // a's repair (ours, not cached as deleting yet) consumes the budget: b still waits,
        // and so it does once the cache shows a being deleted.
        assert_eq!(
            r.reserve("b", "p", &both(&[])),
            Err(Blocked::Budget {
                allowed: 1,
                disrupting: 1,
                ahead: 0
            })
        );
        assert!(r.reserve("b", "p", &both(&["a"])).is_err());
        // a is gone: b goes.
        let nine = &TEN[1..];
        let after = PoolView {
            budget: budget(1, &[], &["b"]),
            ..view(9, &["b"], nine)
        };
        assert_eq!(r.reserve("b", "p", &after), Ok(()));
    }

    #[test]
    fn any_disruption_of_the_pool_consumes_the_unhealthy_budget() {
        let r = Repairs::default();
        // c is being deleted by consolidation: a budget of 1 is used up.
        let v = PoolView {
            budget: budget(1, &["c"], &["a"]),
            ..view(10, &["a"], &TEN)
        };
        assert_eq!(
            r.reserve("a", "p", &v),
            Err(Blocked::Budget {
                allowed: 1,
                disrupting: 1,
                ahead: 0
            })
        );
        // A budget of 2 leaves room for one.
        let v = PoolView {
            budget: budget(2, &["c"], &["a", "b"]),
            ..view(10, &["a", "b"], &TEN)
        };
        assert_eq!(r.reserve("a", "p", &v), Ok(()));
        assert!(r.reserve("b", "p", &v).is_err());
        // A budget of 0 (e.g. `reasons: [Unhealthy]`, `nodes: "0"`) repairs nothing counted.
        let r = Repairs::default();
        let v = PoolView {
            budget: budget(0, &[], &["a"]),
            ..view(10, &["a"], &TEN)
        };
        assert!(r.reserve("a", "p", &v).is_err());
        // An uninitialized NodeClaim is not counted: it needs no budget.
        let v = PoolView {
            budget: budget(0, &[], &[]),
            ..view(10, &["z"], &TEN)
        };
        assert_eq!(r.reserve("z", "p", &v), Ok(()));
    }

    #[test]
    fn the_threshold_still_stops_repair_within_budget() {
        let r = Repairs::default();
        let v = PoolView {
            budget: budget(10, &[], &["a", "b", "c"]),
            ..view(5, &["a", "b", "c"], &FIVE)
        };
        assert!(matches!(r.reserve("a", "p", &v), Err(Blocked::Cap { .. })));
    }

    fn claim(name: &str, json_extra: serde_json::Value) -> std::sync::Arc<NodeClaim> {
        let mut v = serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "uid": name, "labels": {"karpenter.sh/nodepool": "p"},
                         "creationTimestamp": "2026-11-22T08:00:00Z"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"nodeName": name, "conditions": [
                {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                 "lastTransitionTime": "2026-11-22T08:00:00Z"}]}
        });
        json_patch::merge(&mut v, &json_extra);
        std::sync::Arc::new(serde_json::from_value(v).expect("claim"))
    }

    fn node(name: &str, ready: &str, since: &str, annotations: serde_json::Value) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                "lastTransitionTime": since}]}
        }))
        .expect("node")
    }

    #[test]
    fn the_view_orders_eligible_claims_and_counts_budgets_as_karpenter_does() {
        use serde_json::json;
        let claims = vec![
            claim("old", json!({})),
            claim("new-cheap", json!({})),
            claim("new-dear", json!({})),
            claim("young", json!({})),
            claim(
                "vetoed",
                json!({"metadata": {"annotations": {DO_NOT_REPAIR: "true"}}}),
            ),
            claim(
                "deleting",
                json!({"metadata": {"deletionTimestamp": "2026-11-22T09:00:00Z", "finalizers": ["f"]}}),
            ),
            claim("fresh", json!({"status": {"conditions": []}})),
            claim("healthy", json!({})),
        ];
        let nodes: HashMap<String, std::sync::Arc<Node>> = [
            ("old", "False", "2026-11-22T09:00:00Z"),
            ("new-cheap", "Unknown", "2026-11-22T09:30:00Z"),
            ("new-dear", "Unknown", "2026-11-22T09:30:00Z"),
            ("young", "False", "2026-11-22T09:58:00Z"),
            ("vetoed", "False", "2026-11-22T09:00:00Z"),
            ("deleting", "False", "2026-11-22T09:00:00Z"),
            ("fresh", "False", "2026-11-22T09:00:00Z"),
            ("healthy", "True", "2026-11-22T09:00:00Z"),
        ]
        .into_iter()
        .map(|(n, r, t)| (n.to_string(), std::sync::Arc::new(node(n, r, t, json!({})))))
        .collect();
        let budgets: Vec<Budget> = serde_json::from_value(json!([
            {"nodes": "50%"},
            {"nodes": "3", "reasons": ["Unhealthy"]},
            {"nodes": "0", "reasons": ["Drifted"]}
        ]))
        .expect("budgets");
        let v = pool_view(
            &claims,
            "p",
            &Lookups {
                node: &|n| nodes.get(n).cloned(),
                provider: &|_| None,
                cost: &|c| if c.name_any() == "new-dear" { 5.0 } else { 1.0 },
                budgets: Some(&budgets),
                policies: Policies {
                    matcher: Some(&ready_policies()),
                    provider_toleration: Duration::from_secs(600),
                },
                now: "2026-11-22T10:00:00Z".parse().expect("now"),
            },
        );
        let b = v.budget.expect("a pool has a budget");
        // Oldest first; equal ages by disruption cost; `young` is inside its toleration,
        // `vetoed` vetoed, `deleting` being disrupted, `fresh` not counted.
        assert_eq!(b.queue, ["old", "new-cheap", "new-dear"]);
        assert_eq!(b.disrupting, HashSet::from(["deleting".to_string()]));
        // 7 counted NodeClaims (not `fresh`): min(50 % rounded up = 4, 3) for Unhealthy.
        assert_eq!(b.allowed, 3);
        assert_eq!(v.nodes, 8);
        assert_eq!(v.unhealthy.len(), 7);
        // The Node's annotation vetoes as well.
        let vetoed = node(
            "n",
            "False",
            "2026-11-22T09:00:00Z",
            json!({DO_NOT_REPAIR: "true"}),
        );
        assert!(do_not_repair(&claims[0], Some(&vetoed)));
        assert!(do_not_repair(&claims[4], None));
        assert!(!do_not_repair(&claims[0], Some(&nodes["old"])));
        let no = node(
            "n",
            "False",
            "2026-11-22T09:00:00Z",
            json!({DO_NOT_REPAIR: "false"}),
        );
        assert!(!do_not_repair(&claims[0], Some(&no)));
    }

    #[test]
    fn two_reboots_within_a_day_escalate_to_replace() {
        let h = History::default();
        let t0: Timestamp = "2026-11-28T10:00:00Z".parse().expect("time");
        assert!(!h.escalated("a", t0));
        h.record("a", t0);
        assert!(!h.escalated("a", t0));
        h.record("a", t0);
        assert!(
            h.escalated("a", t0),
            "two reboots: the next repair replaces"
        );
        assert!(!h.escalated("b", t0), "per NodeClaim");
        let later = "2026-11-29T10:00:01Z".parse().expect("time");
        assert!(
            !h.escalated("a", later),
            "a day later the count starts over"
        );
    }

    #[test]
    fn the_external_remediator_is_named_while_it_owns_the_node() {
        let mut status = NodeClaimStatus::default();
        let now: Timestamp = "2026-11-28T10:00:00Z".parse().expect("now");
        mark_remediator(&mut status, Some("MachineHealthCheck ns/workers"), now);
        let c = api::conditions::get(&status.conditions, conditions::EXTERNAL_REMEDIATION)
            .expect("set");
        assert_eq!(c.status, "True");
        assert!(c.message.contains("MachineHealthCheck ns/workers"), "{c:?}");
        mark_remediator(&mut status, None, now);
        assert!(
            api::conditions::get(&status.conditions, conditions::EXTERNAL_REMEDIATION).is_none()
        );
    }
}
