//! Matching a Node against the provider's repair policies (Karpenter v1.15's
//! `RepairPolicyMatcher`; see `cloudprovider::repair` for the policy set's rules).
//!
//! Every Node condition whose type and status some policy names is *covered*: it matches each
//! policy of that pair whose `reasonRegex` finds a match in its reason, else the set's
//! fallback. A match is eligible `toleration` after the condition's last transition (the
//! Node's creation when it has none), and not before `not_before` plus the toleration (when
//! the NodeClaim's last reboot ended). The eligible matches merge into one decision: the most disruptive action; among
//! matches of that action the highest priority, then the earliest eligible, then the lowest
//! condition type; the shortest termination grace period of any eligible match; a score
//! (dense rank of the priority + minutes since eligible / 30, the highest) that orders repairs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cloudprovider::{InvalidPolicies, RepairAction, RepairPolicy, Unhealthy};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use regex::Regex;

/// Minutes of eligibility worth one priority rank (Karpenter's `agingConstant`).
const AGING_MINUTES: f64 = 30.0;

/// A validated, compiled policy set.
#[derive(Debug)]
pub struct Matcher {
    /// Policies with a reason regex, by (condition type, status).
    specific: BTreeMap<(String, String), Vec<(RepairPolicy, Regex)>>,
    fallback: RepairPolicy,
    /// Dense rank of each priority in use.
    ranks: BTreeMap<u8, usize>,
}

impl Matcher {
    /// Compiles `policies`; `None` for an empty set (no repair).
    pub fn new(policies: &[RepairPolicy]) -> Result<Option<Matcher>, InvalidPolicies> {
        cloudprovider::repair::validate(policies)?;
        let Some(fallback) = policies.iter().find(|p| p.is_fallback()).cloned() else {
            return Ok(None);
        };
        let mut specific: BTreeMap<(String, String), Vec<(RepairPolicy, Regex)>> = BTreeMap::new();
        specific
            .entry((
                fallback.condition_type.clone(),
                fallback.condition_status.clone(),
            ))
            .or_default();
        for p in policies.iter().filter(|p| !p.is_fallback()) {
            let regex = Regex::new(&p.reason_regex)
                .map_err(|e| InvalidPolicies(vec![format!("\"{}\": {e}", p.reason_regex)]))?;
            specific
                .entry((p.condition_type.clone(), p.condition_status.clone()))
                .or_default()
                .push((p.clone(), regex));
        }
        let mut priorities: Vec<u8> = policies.iter().map(|p| p.priority).collect();
        priorities.sort_unstable();
        priorities.dedup();
        let ranks = priorities
            .into_iter()
            .enumerate()
            .map(|(rank, p)| (p, rank))
            .collect();
        Ok(Some(Matcher {
            specific,
            fallback,
            ranks,
        }))
    }

    /// Every policy match of `node`'s conditions, tolerated or not.
    pub fn matches(&self, node: &Node) -> Vec<Candidate> {
        let created = node
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
        let conditions = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let mut out = Vec::new();
        for c in conditions {
            let Some(group) = self.specific.get(&(c.type_.clone(), c.status.clone())) else {
                continue;
            };
            let reason = c.reason.as_deref().unwrap_or_default();
            // Without a transition time, the Node's creation. (Karpenter also moves a
            // transition before the Node's creation up to it; a kubelet never reports one,
            // and tests that backdate conditions rely on it not being moved.)
            let since = c.last_transition_time.as_ref().map_or(created, |t| t.0);
            let detail = match reason {
                "" => format!("{}={}", c.type_, c.status),
                r => format!("{}={} ({r})", c.type_, c.status),
            };
            let unhealthy = Unhealthy {
                condition: c.type_.clone(),
                detail,
                since,
            };
            let hits: Vec<&RepairPolicy> = group
                .iter()
                .filter(|(_, re)| re.is_match(reason))
                .map(|(p, _)| p)
                .collect();
            let hits = if hits.is_empty() {
                vec![&self.fallback]
            } else {
                hits
            };
            out.extend(hits.into_iter().map(|p| Candidate {
                unhealthy: unhealthy.clone(),
                toleration: p.toleration,
                action: p.action,
                grace: p.termination_grace_period,
                priority: p.priority,
                rank: self.ranks.get(&p.priority).copied().unwrap_or_default(),
            }));
        }
        out
    }
}

/// A provider's policy set compiled once per set it answers (the provider may change it,
/// e.g. a test's fake).
#[derive(Debug, Default)]
pub struct Compiled(Mutex<Option<CompiledSet>>);

/// A policy set as the provider answered it, and its compilation.
type CompiledSet = (Vec<RepairPolicy>, Option<Arc<Matcher>>);

impl Compiled {
    /// The provider's current set, compiled; `None` for an empty or invalid set (an invalid
    /// one is refused at startup; should a provider answer one later, nothing is repaired
    /// and an error is logged).
    pub fn get(&self, provider: &dyn cloudprovider::CloudProvider) -> Option<Arc<Matcher>> {
        let policies = provider.repair_policies();
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((set, matcher)) = held.as_ref()
            && *set == policies
        {
            return matcher.clone();
        }
        let matcher = match Matcher::new(&policies) {
            Ok(m) => m.map(Arc::new),
            Err(e) => {
                tracing::error!(provider = provider.name(), error = %e, "invalid repair policies: node repair is off");
                None
            }
        };
        *held = Some((policies, matcher.clone()));
        matcher
    }
}

/// One policy matching one condition (or the provider's own health signal).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub unhealthy: Unhealthy,
    pub toleration: Duration,
    pub action: RepairAction,
    pub grace: Option<Duration>,
    pub priority: u8,
    pub rank: usize,
}

impl Candidate {
    /// The provider's own health signal: replace, after `toleration`, lowest priority.
    pub fn provider(unhealthy: Unhealthy, toleration: Duration) -> Candidate {
        Candidate {
            unhealthy,
            toleration,
            action: RepairAction::ReplaceNode,
            grace: None,
            priority: 0,
            rank: 0,
        }
    }

    /// When it becomes eligible: its condition's transition plus the toleration, never
    /// before `not_before` plus the toleration.
    fn eligible_at(&self, not_before: Option<Timestamp>) -> Timestamp {
        let start = not_before.map_or(self.unhealthy.since, |n| n.max(self.unhealthy.since));
        start.checked_add(self.toleration).unwrap_or(Timestamp::MAX)
    }
}

/// What repair would do about a Node, and when.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The condition the action comes from.
    pub unhealthy: Unhealthy,
    pub toleration: Duration,
    pub action: RepairAction,
    /// The shortest termination grace period among the eligible matches.
    pub grace: Option<Duration>,
    /// When it is (or becomes) eligible.
    pub eligible_at: Timestamp,
    /// Urgency: repairs go highest first.
    pub score: f64,
}

/// Merges `candidates` at `now`: the decision over the eligible ones, or, when none is
/// eligible yet, the one eligible first (not to act on: to look again then).
pub fn decide(
    candidates: &[Candidate],
    now: Timestamp,
    not_before: Option<Timestamp>,
) -> Option<Decision> {
    let timed: Vec<(&Candidate, Timestamp)> = candidates
        .iter()
        .map(|c| (c, c.eligible_at(not_before)))
        .collect();
    let eligible: Vec<&(&Candidate, Timestamp)> =
        timed.iter().filter(|(_, at)| *at <= now).collect();
    if eligible.is_empty() {
        let (c, at) = timed.iter().min_by_key(|(_, at)| *at)?;
        return Some(decision(c, *at, None, 0.0));
    }
    let (chosen, at) = eligible.iter().copied().min_by(|(a, at_a), (b, at_b)| {
        b.action
            .cmp(&a.action)
            .then(b.priority.cmp(&a.priority))
            .then(at_a.cmp(at_b))
            .then_with(|| a.unhealthy.condition.cmp(&b.unhealthy.condition))
    })?;
    let grace = eligible.iter().filter_map(|(c, _)| c.grace).min();
    let score = eligible
        .iter()
        .map(|(c, at)| {
            let minutes = now.duration_since(*at).as_secs_f64().max(0.0) / 60.0;
            c.rank as f64 + minutes / AGING_MINUTES
        })
        .fold(0.0, f64::max);
    Some(decision(chosen, *at, grace, score))
}

fn decision(c: &Candidate, at: Timestamp, grace: Option<Duration>, score: f64) -> Decision {
    Decision {
        unhealthy: c.unhealthy.clone(),
        toleration: c.toleration,
        action: c.action,
        grace,
        eligible_at: at,
        score,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const MIN: Duration = Duration::from_secs(60);

    fn t(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    fn node(conditions: &[(&str, &str, &str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.creation_timestamp = Some(Time(t("2026-11-28T09:00:00Z")));
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(
                        |(ty, st, reason, at)| k8s_openapi::api::core::v1::NodeCondition {
                            type_: ty.to_string(),
                            status: st.to_string(),
                            reason: Some(reason.to_string()),
                            last_transition_time: Some(Time(t(at))),
                            ..Default::default()
                        },
                    )
                    .collect(),
            ),
            ..Default::default()
        });
        n
    }

    /// Karpenter's kwok set: Ready=False fallback, Ready=Unknown `.*`, and a reboot for a
    /// kernel deadlock.
    fn policies() -> Vec<RepairPolicy> {
        vec![
            RepairPolicy::replace("Ready", "False", 10 * MIN).fallback(),
            RepairPolicy::replace("Ready", "Unknown", 10 * MIN),
            RepairPolicy {
                reason_regex: "^KernelDeadlock$".into(),
                toleration: MIN,
                termination_grace_period: Some(Duration::from_secs(30)),
                priority: 50,
                action: RepairAction::RebootNode,
                ..RepairPolicy::replace("Ready", "False", MIN)
            },
            RepairPolicy {
                priority: 80,
                termination_grace_period: Some(Duration::from_secs(45)),
                ..RepairPolicy::replace("DiskFailed", "True", 2 * MIN)
            },
        ]
    }

    fn matcher() -> Matcher {
        Matcher::new(&policies())
            .expect("valid")
            .expect("not empty")
    }

    #[test]
    fn a_reason_picks_its_policy_and_any_other_falls_back() {
        let m = matcher();
        let deadlock = m.matches(&node(&[(
            "Ready",
            "False",
            "KernelDeadlock",
            "2026-11-28T10:00:00Z",
        )]));
        assert_eq!(deadlock.len(), 1);
        assert_eq!(deadlock[0].action, RepairAction::RebootNode);
        assert_eq!(deadlock[0].toleration, MIN);
        // The control: another reason of the same pair gets the fallback.
        let other = m.matches(&node(&[(
            "Ready",
            "False",
            "KubeletDown",
            "2026-11-28T10:00:00Z",
        )]));
        assert_eq!(other.len(), 1);
        assert_eq!(other[0].action, RepairAction::ReplaceNode);
        assert_eq!(other[0].toleration, 10 * MIN);
        // Unanchored search, as Go's MatchString: `.*` matches an empty reason.
        let unknown = m.matches(&node(&[("Ready", "Unknown", "", "2026-11-28T10:00:00Z")]));
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].toleration, 10 * MIN);
        // An uncovered condition matches nothing.
        assert!(
            m.matches(&node(&[("Ready", "True", "", "2026-11-28T10:00:00Z")]))
                .is_empty()
        );
    }

    #[test]
    fn eligibility_waits_for_the_toleration_and_the_last_reboot() {
        let m = matcher();
        let c = m.matches(&node(&[(
            "Ready",
            "False",
            "KernelDeadlock",
            "2026-11-28T10:00:00Z",
        )]));
        let early = decide(&c, t("2026-11-28T10:00:30Z"), None).expect("decision");
        assert_eq!(early.eligible_at, t("2026-11-28T10:01:00Z"));
        assert!(early.eligible_at > t("2026-11-28T10:00:30Z"));
        let due = decide(&c, t("2026-11-28T10:01:00Z"), None).expect("decision");
        assert_eq!(due.action, RepairAction::RebootNode);
        assert_eq!(due.grace, Some(Duration::from_secs(30)));
        // A reboot that ended at 10:05 restarts the toleration.
        let after = decide(
            &c,
            t("2026-11-28T10:05:30Z"),
            Some(t("2026-11-28T10:05:00Z")),
        )
        .expect("decision");
        assert_eq!(after.eligible_at, t("2026-11-28T10:06:00Z"));
    }

    #[test]
    fn the_most_disruptive_action_wins_and_the_shortest_grace_bounds_it() {
        let m = matcher();
        let c = m.matches(&node(&[
            ("Ready", "False", "KernelDeadlock", "2026-11-28T10:00:00Z"),
            ("DiskFailed", "True", "Smart", "2026-11-28T10:00:00Z"),
        ]));
        let d = decide(&c, t("2026-11-28T10:30:00Z"), None).expect("decision");
        assert_eq!(d.action, RepairAction::ReplaceNode);
        assert_eq!(d.unhealthy.condition, "DiskFailed");
        assert_eq!(d.grace, Some(Duration::from_secs(30)));
        // Before the disk policy is eligible only the reboot is.
        let d = decide(&c, t("2026-11-28T10:01:30Z"), None).expect("decision");
        assert_eq!(d.action, RepairAction::RebootNode);
    }

    #[test]
    fn priority_and_age_order_repairs() {
        let m = matcher();
        let disk = m.matches(&node(&[("DiskFailed", "True", "", "2026-11-28T10:00:00Z")]));
        let ready = m.matches(&node(&[("Ready", "False", "X", "2026-11-28T10:00:00Z")]));
        let now = t("2026-11-28T10:12:00Z");
        let disk = decide(&disk, now, None).expect("disk");
        let ready = decide(&ready, now, None).expect("ready");
        // Priority 80 ranks 2 (0, 50, 80): ahead of an older priority-0 match.
        assert!(disk.score > ready.score, "{disk:?} {ready:?}");
        assert!((disk.score - (2.0 + 10.0 / 30.0)).abs() < 1e-9, "{disk:?}");
    }

    #[test]
    fn an_empty_set_repairs_nothing_and_a_bad_one_is_refused() {
        assert!(Matcher::new(&[]).expect("valid").is_none());
        let mut bad = policies();
        bad[2].reason_regex = "(".into();
        assert!(Matcher::new(&bad).is_err());
    }
}
