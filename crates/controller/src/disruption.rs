//! Disruption, the parts Karpenter applies without a replacement: expiration (a NodeClaim
//! older than `expireAfter` is deleted, budgets do not apply), emptiness (a NodeClaim whose
//! Node has had no reschedulable pod for `consolidateAfter` is deleted) and single-node
//! delete consolidation (under `WhenEmptyOrUnderutilized`: a NodeClaim whose pods have not
//! changed for `consolidateAfter` and would all fit on the other nodes' free capacity, by
//! the same scheduling simulation the provisioner runs, is deleted, one per pass and not
//! while pods are pending), both within the NodePool's disruption budgets. Deleting the
//! NodeClaim runs the usual termination: the Machine is deleted, Cluster API drains and
//! removes the Node.
//!
//! Not built: replace consolidation (a cheaper node for the pods) and drift.
//!
//! The decisions are pure functions of cached objects; the loop only deletes NodeClaims, so
//! a restart anywhere is safe (emptiness timers restart from zero, which only delays).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use api::consts::annotations::DO_NOT_DISRUPT;
use api::karpenter::{Budget, ConsolidationPolicy, DisruptionReason, NodePoolSpec};
use k8s_openapi::jiff::{Timestamp, tz::TimeZone};
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use serde_json::Value;

use crate::cache::values;
use crate::metrics::{CreatedLabels, Metrics};
use crate::nodeclass::parse_duration;
use crate::provisioning::snapshot::{condition_true, deleting};

/// How often candidates are evaluated (Karpenter: 10 s).
const TICK: Duration = Duration::from_secs(5);
/// A node must stay empty this long beyond `consolidateAfter` before it is removed, so a
/// node whose pods are about to be bound is not taken (Karpenter validates for 15 s).
pub const VALIDATION: Duration = Duration::from_secs(15);

/// Whether `budget` is active at `now`: always without a schedule; with one, during
/// `duration` after each schedule hit (UTC). An unparsable schedule or duration is active
/// (so it can only restrict: fail closed).
pub fn budget_active(budget: &Budget, now: Timestamp) -> bool {
    let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) else {
        return true;
    };
    let (Ok(cron), Some(duration)) = (
        schedule.parse::<croner::Cron>(),
        parse_duration(duration).and_then(|d| k8s_openapi::jiff::SignedDuration::try_from(d).ok()),
    ) else {
        return true;
    };
    let Ok(from) = now.checked_sub(duration) else {
        return true;
    };
    let from = from.to_zoned(TimeZone::UTC);
    cron.find_next_occurrence(&from, true)
        .is_ok_and(|hit| hit.timestamp() <= now)
}

/// How many of `total` nodes `budget` allows to be disrupted at once (percentages round up,
/// as Karpenter does); an invalid value allows none.
pub fn budget_nodes(budget: &Budget, total: usize) -> usize {
    let v = budget.nodes.trim();
    match v.strip_suffix('%') {
        Some(p) => p
            .parse::<usize>()
            .map_or(0, |p| (total * p.min(100)).div_ceil(100)),
        None => v.parse().unwrap_or(0),
    }
}

/// The most restrictive active budget for `reason` (budgets without reasons apply to all).
pub fn allowed(
    budgets: &[Budget],
    reason: DisruptionReason,
    total: usize,
    now: Timestamp,
) -> usize {
    budgets
        .iter()
        .filter(|b| b.reasons.as_ref().is_none_or(|r| r.contains(&reason)))
        .filter(|b| budget_active(b, now))
        .map(|b| budget_nodes(b, total))
        .min()
        .unwrap_or(usize::MAX)
}

/// Whether a pod keeps its node from being empty: not owned by a DaemonSet or the Node
/// (static), not finished, not terminating.
pub fn reschedulable(pod: &Value) -> bool {
    let owned_by_node = pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|os| {
            os.iter()
                .any(|o| o["kind"] == "DaemonSet" || o["kind"] == "Node")
        });
    let mirror = !pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_null();
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    let terminating = deleting(pod);
    !(owned_by_node || mirror || phase == "Succeeded" || phase == "Failed" || terminating)
}

/// Whether a pod may be moved by consolidation: owned by a controller (a bare pod would be
/// gone for good) and not annotated `karpenter.sh/do-not-disrupt`.
fn movable(pod: &Value) -> bool {
    let controlled = pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|os| os.iter().any(|o| o["controller"] == true));
    controlled && !annotated_do_not_disrupt(pod)
}

/// Whether every reschedulable pod on `node` fits on the other Ready nodes (and in-flight
/// NodeClaims), by the provisioner's scheduling simulation with no NodePool to launch from.
fn fits_elsewhere(view: &View, node: &str, claim: &Value) -> bool {
    let claim_name = claim["metadata"]["name"].as_str().unwrap_or_default();
    let (moving, staying): (Vec<Value>, Vec<Value>) = view
        .pods
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
        })
        .cloned()
        .partition(|p| p["spec"]["nodeName"] == node);
    let moving: Vec<Value> = moving.into_iter().filter(reschedulable).collect();
    let state = crate::provisioning::snapshot::State {
        pods: staying,
        nodes: view
            .nodes
            .iter()
            .filter(|n| n["metadata"]["name"] != node)
            .cloned()
            .collect(),
        nodeclaims: view
            .nodeclaims
            .iter()
            .filter(|c| c["metadata"]["name"] != claim_name && !deleting(c))
            .cloned()
            .collect(),
        nodepools: Vec::new(),
        daemonsets: Vec::new(),
    };
    let snapshot =
        crate::provisioning::snapshot::build(&state, &moving, &|_| None, &|_, _, _| true);
    let out = scheduling::solve(&snapshot.input);
    out.unschedulable.is_empty() && out.new_node_claims.is_empty()
}

fn annotated_do_not_disrupt(obj: &Value) -> bool {
    obj["metadata"]["annotations"][DO_NOT_DISRUPT] == "true"
}

fn created(obj: &Value) -> Option<Timestamp> {
    obj["metadata"]["creationTimestamp"].as_str()?.parse().ok()
}

/// What to delete now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub nodeclaim: String,
    pub nodepool: String,
    pub reason: DisruptionReason,
    /// `Expired` is not a budgeted reason in Karpenter; we report it apart.
    pub expired: bool,
    pub message: String,
}

/// The cluster as the caches see it.
pub struct View<'a> {
    pub nodepools: &'a [Value],
    pub nodeclaims: &'a [Value],
    pub nodes: &'a [Value],
    pub pods: &'a [Value],
}

/// Timers per NodeClaim (by name): since when it has been seen empty, and since when its
/// set of reschedulable pods has been unchanged (Karpenter's last pod event).
#[derive(Debug, Default)]
pub struct EmptySince(
    HashMap<String, Instant>,
    HashMap<String, (Vec<String>, Instant)>,
);

/// Decides which NodeClaims to delete. `empty_since` is updated (claims no longer empty or
/// gone are forgotten).
pub fn decide(
    view: &View,
    empty_since: &mut EmptySince,
    now: Timestamp,
    instant: Instant,
) -> Vec<Decision> {
    let mut pods_on: HashMap<&str, Vec<&Value>> = HashMap::new();
    for p in view.pods {
        if let Some(n) = p["spec"]["nodeName"].as_str()
            && reschedulable(p)
        {
            pods_on.entry(n).or_default().push(p);
        }
    }
    let nodes: HashMap<&str, &Value> = view
        .nodes
        .iter()
        .filter_map(|n| Some((n["metadata"]["name"].as_str()?, n)))
        .collect();
    let mut by_pool: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for c in view.nodeclaims {
        if let Some(p) = c["metadata"]["labels"][scheduling::LABEL_NODEPOOL].as_str() {
            by_pool.entry(p).or_default().push(c);
        }
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    // One consolidation per pass across pools: two would plan onto the same free capacity.
    // None while pods wait for capacity: the room a move would take may be what they need.
    let mut consolidated = view
        .pods
        .iter()
        .any(crate::provisioning::convert::provisionable);
    for pool in view.nodepools {
        let Some(name) = pool["metadata"]["name"].as_str() else {
            continue;
        };
        let Ok(spec) = serde_json::from_value::<NodePoolSpec>(pool["spec"].clone()) else {
            continue;
        };
        let claims = by_pool.get(name).map(Vec::as_slice).unwrap_or_default();
        let disrupting = claims.iter().filter(|c| deleting(c)).count();
        let consolidate_after = match spec.disruption.consolidate_after.as_str() {
            "Never" => None,
            d => parse_duration(d),
        };
        let empties = matches!(
            spec.disruption.consolidation_policy,
            ConsolidationPolicy::WhenEmpty
                | ConsolidationPolicy::WhenEmptyOrUnderutilized
                | ConsolidationPolicy::Balanced
        );
        let mut candidates: Vec<(Instant, &str)> = Vec::new();
        let mut consolidatable: Vec<(usize, &str, &str, &Value)> = Vec::new();
        let underutilized = matches!(
            spec.disruption.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized | ConsolidationPolicy::Balanced
        );
        for c in claims {
            let Some(claim) = c["metadata"]["name"].as_str() else {
                continue;
            };
            seen.insert(claim.to_string());
            if deleting(c) {
                continue;
            }
            // Expiration (no budget).
            let expire_after = c["spec"]["expireAfter"].as_str().unwrap_or("Never");
            if let (Some(age), Some(ttl)) = (
                created(c).and_then(|t| Duration::try_from(now.duration_since(t)).ok()),
                (expire_after != "Never")
                    .then(|| parse_duration(expire_after))
                    .flatten(),
            ) && age >= ttl
            {
                out.push(Decision {
                    nodeclaim: claim.to_string(),
                    nodepool: name.to_string(),
                    reason: DisruptionReason::Empty,
                    expired: true,
                    message: format!("expired after {expire_after}"),
                });
                continue;
            }
            // Emptiness.
            let node = c["status"]["nodeName"]
                .as_str()
                .and_then(|n| nodes.get(n).copied());
            let empty = empties
                && consolidate_after.is_some()
                && condition_true(c, "Initialized")
                && !annotated_do_not_disrupt(c)
                && node.is_some_and(|n| {
                    !annotated_do_not_disrupt(n)
                        && n["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| !pods_on.contains_key(n))
                });
            if !empty {
                empty_since.0.remove(claim);
                if let (true, Some(after), Some(n)) = (underutilized, consolidate_after, node)
                    && condition_true(c, "Initialized")
                    && !annotated_do_not_disrupt(c)
                    && !annotated_do_not_disrupt(n)
                    && let Some(node_name) = n["metadata"]["name"].as_str()
                {
                    let pods = pods_on
                        .get(node_name)
                        .map(Vec::as_slice)
                        .unwrap_or_default();
                    let mut names: Vec<String> = pods
                        .iter()
                        .map(|p| {
                            format!(
                                "{}/{}",
                                p["metadata"]["namespace"].as_str().unwrap_or_default(),
                                p["metadata"]["name"].as_str().unwrap_or_default()
                            )
                        })
                        .collect();
                    names.sort();
                    let entry = empty_since
                        .1
                        .entry(claim.to_string())
                        .or_insert_with(|| (names.clone(), instant));
                    if entry.0 != names {
                        *entry = (names, instant);
                    }
                    let movable = pods.iter().all(|p| movable(p));
                    if movable && instant.duration_since(entry.1) >= after + VALIDATION {
                        consolidatable.push((pods.len(), claim, node_name, *c));
                    }
                }
                continue;
            }
            empty_since.1.remove(claim);
            let since = *empty_since.0.entry(claim.to_string()).or_insert(instant);
            let wait = consolidate_after.unwrap_or_default() + VALIDATION;
            if instant.duration_since(since) >= wait {
                candidates.push((since, claim));
            }
        }
        let budget = allowed(
            &spec.disruption.budgets,
            DisruptionReason::Empty,
            claims.len(),
            now,
        )
        .saturating_sub(disrupting);
        candidates.sort();
        let emptied = candidates.len().min(budget);
        // One underutilized node per pass (Karpenter: one consolidation decision per loop),
        // the one with the fewest pods first, and only if nothing else is in flight.
        let underutilized_budget = allowed(
            &spec.disruption.budgets,
            DisruptionReason::Underutilized,
            claims.len(),
            now,
        )
        .saturating_sub(disrupting + emptied);
        if !consolidated && underutilized_budget > 0 && emptied == 0 && disrupting == 0 {
            consolidatable.sort_by_key(|(n, claim, _, _)| (*n, *claim));
            if let Some((n, claim, _, _)) = consolidatable
                .iter()
                .find(|(_, _, node, c)| fits_elsewhere(view, node, c))
            {
                out.push(Decision {
                    nodeclaim: claim.to_string(),
                    nodepool: name.to_string(),
                    reason: DisruptionReason::Underutilized,
                    expired: false,
                    message: format!("underutilized: its {n} pod(s) fit on other nodes"),
                });
                consolidated = true;
            }
        }
        for (_, claim) in candidates.into_iter().take(budget) {
            out.push(Decision {
                nodeclaim: claim.to_string(),
                nodepool: name.to_string(),
                reason: DisruptionReason::Empty,
                expired: false,
                message: format!(
                    "empty for {}s (consolidateAfter {})",
                    VALIDATION.as_secs() + consolidate_after.unwrap_or_default().as_secs(),
                    spec.disruption.consolidate_after
                ),
            });
        }
    }
    empty_since.0.retain(|k, _| seen.contains(k));
    empty_since.1.retain(|k, _| seen.contains(k));
    out
}

/// What the loop reads and writes.
#[derive(Clone)]
pub struct Disruption {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub nodepools: Store<api::NodePool>,
    pub nodeclaims: Store<api::NodeClaim>,
    pub nodes: Store<k8s_openapi::api::core::v1::Node>,
    pub pods: Store<k8s_openapi::api::core::v1::Pod>,
}

impl Disruption {
    async fn act(&self, d: &Decision) {
        let api: Api<api::NodeClaim> = Api::all(self.client.clone());
        let obj = match api.get_opt(&d.nodeclaim).await {
            Ok(Some(o)) => o,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(nodeclaim = %d.nodeclaim, error = %e, "reading NodeClaim failed");
                return;
            }
        };
        let reason = match (d.expired, d.reason) {
            (true, _) => "expired",
            (false, DisruptionReason::Underutilized) => "underutilized",
            (false, DisruptionReason::Drifted) => "drifted",
            (false, DisruptionReason::Empty) => "empty",
        };
        tracing::info!(nodeclaim = %d.nodeclaim, nodepool = %d.nodepool, reason, message = %d.message, "disrupting");
        let note = format!("Disrupting NodeClaim: {} ({})", reason, d.message);
        let event = Event {
            type_: EventType::Normal,
            reason: "DisruptionTerminating".into(),
            note: Some(note),
            action: "Disrupt".into(),
            secondary: None,
        };
        use kube::Resource;
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing event failed");
        }
        // Preconditioned on the uid we decided about: a recreated claim of the same name is
        // not deleted by mistake.
        let params = DeleteParams {
            preconditions: obj
                .metadata
                .uid
                .clone()
                .map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
            ..DeleteParams::default()
        };
        match api.delete(&d.nodeclaim, &params).await {
            Ok(_) => {
                self.metrics
                    .nodeclaims_disrupted
                    .get_or_create(&CreatedLabels {
                        reason: reason.into(),
                        nodepool: d.nodepool.clone(),
                    })
                    .inc();
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(nodeclaim = %d.nodeclaim, error = %e, "deleting NodeClaim failed")
            }
        }
    }
}

/// Runs until `shutdown`.
pub async fn run(d: Disruption, shutdown: impl std::future::Future<Output = ()> + Send) {
    tokio::pin!(shutdown);
    let mut empty_since = EmptySince::default();
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(TICK) => {}
        }
        // The pass (a snapshot and possibly a scheduling simulation) is CPU work: off the
        // async workers.
        let stores = d.clone();
        let pass = tokio::task::spawn_blocking(move || {
            let (nodepools, nodeclaims, nodes, pods) = (
                values(&stores.nodepools),
                values(&stores.nodeclaims),
                values(&stores.nodes),
                values(&stores.pods),
            );
            let view = View {
                nodepools: &nodepools,
                nodeclaims: &nodeclaims,
                nodes: &nodes,
                pods: &pods,
            };
            let decisions = decide(&view, &mut empty_since, Timestamp::now(), Instant::now());
            (decisions, empty_since)
        })
        .await;
        let decisions = match pass {
            Ok((decisions, timers)) => {
                empty_since = timers;
                decisions
            }
            Err(e) => {
                tracing::error!(error = %e, "disruption pass failed; timers restart");
                empty_since = EmptySince::default();
                continue;
            }
        };
        for decision in decisions {
            d.act(&decision).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn budget(nodes: &str, schedule: Option<&str>, duration: Option<&str>) -> Budget {
        Budget {
            reasons: None,
            nodes: nodes.into(),
            schedule: schedule.map(str::to_string),
            duration: duration.map(str::to_string),
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn budgets_round_percentages_up_and_take_the_minimum_active_one() {
        assert_eq!(budget_nodes(&budget("10%", None, None), 5), 1);
        assert_eq!(budget_nodes(&budget("10%", None, None), 0), 0);
        assert_eq!(budget_nodes(&budget("50%", None, None), 5), 3);
        assert_eq!(budget_nodes(&budget("3", None, None), 5), 3);
        assert_eq!(budget_nodes(&budget("x", None, None), 5), 0);
        let now = at("2026-11-22T10:30:00Z");
        let nightly_freeze = budget("0", Some("0 10 * * *"), Some("1h"));
        assert!(budget_active(&nightly_freeze, now));
        assert!(!budget_active(&nightly_freeze, at("2026-11-22T11:30:00Z")));
        let budgets = [budget("100%", None, None), nightly_freeze];
        assert_eq!(allowed(&budgets, DisruptionReason::Empty, 4, now), 0);
        assert_eq!(
            allowed(
                &budgets,
                DisruptionReason::Empty,
                4,
                at("2026-11-22T12:00:00Z")
            ),
            4
        );
        let drift_only = Budget {
            reasons: Some(vec![DisruptionReason::Drifted]),
            ..budget("0", None, None)
        };
        assert_eq!(
            allowed(&[drift_only], DisruptionReason::Empty, 4, now),
            usize::MAX
        );
    }

    fn pool(consolidate_after: &str, budgets: Value) -> Value {
        json!({"metadata": {"name": "default"}, "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}},
            "disruption": {"consolidateAfter": consolidate_after, "budgets": budgets}}})
    }

    fn claim(name: &str, created: &str, expire: &str) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": created,
                            "labels": {"karpenter.sh/nodepool": "default"}},
               "spec": {"expireAfter": expire},
               "status": {"nodeName": format!("node-{name}"),
                          "conditions": [{"type": "Initialized", "status": "True"}]}})
    }

    fn node(name: &str) -> Value {
        json!({"metadata": {"name": format!("node-{name}")}})
    }

    #[test]
    fn empty_nodes_go_after_consolidate_after_plus_validation_within_budget() {
        let pools = [pool("10s", json!([{"nodes": "1"}]))];
        let claims = [
            claim("a", "2026-11-22T10:00:00Z", "Never"),
            claim("b", "2026-11-22T10:00:00Z", "Never"),
            claim("c", "2026-11-22T10:00:00Z", "Never"),
        ];
        let nodes = [node("a"), node("b"), node("c")];
        let pods = [
            // c runs a workload; a runs only a DaemonSet pod; b a finished pod.
            json!({"metadata": {"name": "w"}, "spec": {"nodeName": "node-c"}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "ds", "ownerReferences": [{"kind": "DaemonSet"}]},
                   "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "done"}, "spec": {"nodeName": "node-b"}, "status": {"phase": "Succeeded"}}),
        ];
        let view = View {
            nodepools: &pools,
            nodeclaims: &claims,
            nodes: &nodes,
            pods: &pods,
        };
        let mut timers = EmptySince::default();
        let t0 = Instant::now();
        let now = at("2026-11-22T11:00:00Z");
        assert!(decide(&view, &mut timers, now, t0).is_empty());
        assert!(decide(&view, &mut timers, now, t0 + Duration::from_secs(24)).is_empty());
        let d = decide(&view, &mut timers, now, t0 + Duration::from_secs(25));
        // Budget 1: only one of a and b, never c.
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].nodeclaim == "a" || d[0].nodeclaim == "b");
        assert!(!d[0].expired);
        // While one is being deleted, the budget is used up.
        let mut deleting = claims.clone();
        deleting[0]["metadata"]["deletionTimestamp"] = json!("2026-11-22T11:00:00Z");
        let view = View {
            nodeclaims: &deleting,
            ..view
        };
        assert!(decide(&view, &mut timers, now, t0 + Duration::from_secs(30)).is_empty());
    }

    #[test]
    fn do_not_disrupt_never_and_uninitialized_claims_are_kept() {
        let nodes = [node("a")];
        let mut timers = EmptySince::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(3600);
        let now = at("2026-11-22T11:00:00Z");
        let mut annotated = claim("a", "2026-11-22T10:00:00Z", "Never");
        annotated["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        let mut uninitialized = claim("a", "2026-11-22T10:00:00Z", "Never");
        uninitialized["status"]["conditions"] = json!([]);
        for (p, c) in [
            (pool("0s", json!([{"nodes": "10"}])), annotated),
            (
                pool("Never", json!([{"nodes": "10"}])),
                claim("a", "2026-11-22T10:00:00Z", "Never"),
            ),
            (pool("0s", json!([{"nodes": "10"}])), uninitialized),
            (
                pool("0s", json!([{"nodes": "0"}])),
                claim("a", "2026-11-22T10:00:00Z", "Never"),
            ),
        ] {
            let (pools, claims) = ([p], [c]);
            let view = View {
                nodepools: &pools,
                nodeclaims: &claims,
                nodes: &nodes,
                pods: &[],
            };
            decide(&view, &mut timers, now, t0);
            assert!(decide(&view, &mut timers, now, later).is_empty());
        }
    }

    fn ready_node(name: &str, cpu: &str) -> Value {
        json!({"metadata": {"name": format!("node-{name}")},
               "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn pod_on(name: &str, node: &str, cpu: &str, controlled: bool) -> Value {
        let owners = if controlled {
            json!([{"kind": "ReplicaSet", "name": "rs", "controller": true}])
        } else {
            json!([])
        };
        json!({"metadata": {"name": name, "namespace": "d", "ownerReferences": owners},
               "spec": {"nodeName": format!("node-{node}"),
                        "containers": [{"resources": {"requests": {"cpu": cpu}}}]},
               "status": {"phase": "Running"}})
    }

    #[test]
    fn an_underutilized_node_whose_pods_fit_elsewhere_is_consolidated_one_at_a_time() {
        let pools = [json!({"metadata": {"name": "default"}, "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}},
            "disruption": {"consolidateAfter": "30s", "consolidationPolicy": "WhenEmptyOrUnderutilized",
                           "budgets": [{"nodes": "100%"}]}}})];
        let claims = [
            claim("a", "2026-11-22T10:00:00Z", "Never"),
            claim("b", "2026-11-22T10:00:00Z", "Never"),
            claim("c", "2026-11-22T10:00:00Z", "Never"),
        ];
        let nodes = [
            ready_node("a", "4"),
            ready_node("b", "4"),
            ready_node("c", "4"),
        ];
        let now = at("2026-11-22T11:00:00Z");
        let t0 = Instant::now();
        let after = t0 + Duration::from_secs(45);
        let run = |pods: &[Value], timers: &mut EmptySince| {
            let view = View {
                nodepools: &pools,
                nodeclaims: &claims,
                nodes: &nodes,
                pods,
            };
            decide(&view, timers, now, t0);
            decide(&view, timers, now, after)
        };
        // a: 1 cpu, b: 2 cpu, c: 3.5 cpu. a fits on b (or c); only one goes per pass.
        let pods = [
            pod_on("p1", "a", "1", true),
            pod_on("p2", "b", "2", true),
            pod_on("p3", "c", "3500m", true),
        ];
        let d = run(&pods, &mut EmptySince::default());
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].nodeclaim, "a");
        assert_eq!(d[0].reason, DisruptionReason::Underutilized);
        // Not while a pod is pending for capacity.
        let mut with_pending = pods.to_vec();
        with_pending.push(json!({"metadata": {"name": "pending", "namespace": "d"}, "spec": {},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}));
        assert!(run(&with_pending, &mut EmptySince::default()).is_empty());
        // Not before consolidateAfter + validation.
        let view = View {
            nodepools: &pools,
            nodeclaims: &claims,
            nodes: &nodes,
            pods: &pods,
        };
        let mut timers = EmptySince::default();
        decide(&view, &mut timers, now, t0);
        assert!(decide(&view, &mut timers, now, t0 + Duration::from_secs(44)).is_empty());
        // A bare pod (no controller) is never moved; a pod that fits nowhere blocks too.
        let pods = [
            pod_on("p1", "a", "1", false),
            pod_on("p2", "b", "3500m", true),
            pod_on("p3", "c", "3500m", true),
        ];
        assert!(run(&pods, &mut EmptySince::default()).is_empty());
    }

    #[test]
    fn expired_claims_go_regardless_of_budgets() {
        let pools = [pool("Never", json!([{"nodes": "0"}]))];
        let claims = [
            claim("old", "2026-11-22T10:00:00Z", "30m"),
            claim("young", "2026-11-22T10:45:00Z", "30m"),
        ];
        let pods = [
            json!({"metadata": {"name": "w"}, "spec": {"nodeName": "node-old"}, "status": {"phase": "Running"}}),
        ];
        let view = View {
            nodepools: &pools,
            nodeclaims: &claims,
            nodes: &[node("old"), node("young")],
            pods: &pods,
        };
        let d = decide(
            &view,
            &mut EmptySince::default(),
            at("2026-11-22T11:00:00Z"),
            Instant::now(),
        );
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].nodeclaim.as_str(), d[0].expired), ("old", true));
    }
}
