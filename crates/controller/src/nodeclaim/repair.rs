//! Node repair, capped (Karpenter's node health controller; CAPI's MachineHealthCheck does
//! not remediate orphan Machines, so we repair ours).
//!
//! Repair policies, each tolerated for `--node-repair-after`:
//! - the Node's `Ready` condition False or Unknown;
//! - the Machine's `NodeHealthy` condition False (Cluster API's view of the Node);
//! - the Machine's infrastructure failed (phase Failed, `InfrastructureReady=False` with a
//!   failure reason) after the Node registered (before that it is a launch failure).
//!
//! The cap (Karpenter's, and CAPI MachineHealthCheck's `maxUnhealthy`): a NodeClaim is
//! repaired only while the unhealthy Nodes of its NodePool — every Node a policy matches,
//! still inside its toleration or already being repaired, plus the repairs this process has
//! started that the cache does not show yet — are at most ceil(20 %) of the pool's Nodes;
//! cluster-wide for NodeClaims without a pool. More unhealthy than that looks like a
//! partition or a bad rollout, not a broken machine: nothing of the pool is repaired, a
//! `NodeRepairBlocked` event goes to the NodeClaim and its NodePool, and it is looked at
//! again later. A partition of half a pool therefore repairs nothing; a pool of 5 with one
//! broken Node repairs it; a pool of 10 repairs up to 2 at once.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use api::NodeClaim;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

/// Share of a pool's Nodes that may be under repair at once, in percent.
pub const MAX_UNHEALTHY_PERCENT: usize = 20;

/// A matched repair policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    /// The condition that failed (the metric's `condition` label).
    pub condition: &'static str,
    /// e.g. `Ready=Unknown`, `NodeHealthy=False (NodeConditionsFailed)`.
    pub detail: String,
    /// Since when.
    pub since: Timestamp,
}

fn condition_time(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Timestamp {
    t.map(|t| t.0).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The repair policies that match a registered NodeClaim's Node, with the provider's own
/// signal (`provider`, e.g. a Machine's `NodeHealthy=False`); the one that
/// matched first (longest unhealthy) wins.
pub fn unhealthy(node: Option<&Node>, provider: Option<Unhealthy>) -> Option<Unhealthy> {
    let mut found: Vec<Unhealthy> = Vec::new();
    if let Some(c) = node
        .and_then(|n| n.status.as_ref()?.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        && c.status != "True"
    {
        found.push(Unhealthy {
            condition: "Ready",
            detail: format!("Ready={}", c.status),
            since: condition_time(c.last_transition_time.as_ref()),
        });
    }
    found.extend(provider);
    found.into_iter().min_by_key(|u| u.since)
}

/// How many Nodes of a pool of `nodes` may be under repair at once: ceil(20 %).
pub fn allowed(nodes: usize) -> usize {
    (nodes * MAX_UNHEALTHY_PERCENT).div_ceil(100)
}

/// Repair refused: unhealthy Nodes of the pool, how many may be, the pool's Nodes.
#[derive(Debug, PartialEq, Eq)]
pub struct Blocked {
    pub unhealthy: usize,
    pub allowed: usize,
    pub nodes: usize,
}

/// The repairs this process started, by NodeClaim UID (value: its pool), until the cache
/// shows the NodeClaim gone: the cap counts them even before the cache shows the deletion.
#[derive(Debug, Default)]
pub struct Repairs(Mutex<HashMap<String, String>>);

/// What the cap is computed from, for one pool.
pub struct PoolView {
    /// NodeClaims of the pool with a Node.
    pub nodes: usize,
    /// UIDs of the pool's NodeClaims whose Node matches a policy (tolerated or not, being
    /// deleted or not).
    pub unhealthy: HashSet<String>,
    /// UIDs of every NodeClaim the cache holds.
    pub existing: HashSet<String>,
}

impl Repairs {
    /// Records the repair of `uid` (unhealthy, in `pool`) if the pool is within the cap,
    /// or says why not. Atomic: two reconciles of one pool decide one after the other.
    pub fn reserve(&self, uid: &str, pool: &str, view: &PoolView) -> Result<(), Blocked> {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|u, _| view.existing.contains(u));
        let mut unhealthy = view.unhealthy.clone();
        unhealthy.extend(
            held.iter()
                .filter(|(_, p)| p.as_str() == pool)
                .map(|(u, _)| u.clone()),
        );
        unhealthy.insert(uid.to_string());
        let allowed = allowed(view.nodes);
        if unhealthy.len() > allowed {
            return Err(Blocked {
                unhealthy: unhealthy.len(),
                allowed,
                nodes: view.nodes,
            });
        }
        held.insert(uid.to_string(), pool.to_string());
        Ok(())
    }

    /// The repair of `uid` did not happen (its delete failed).
    pub fn release(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }
}

/// The cap's inputs for `pool` ("" = NodeClaims without a pool: the whole cluster) from the
/// cached NodeClaims, Nodes and Machines.
pub fn pool_view(
    claims: &[std::sync::Arc<NodeClaim>],
    pool: &str,
    node: impl Fn(&str) -> Option<std::sync::Arc<Node>>,
    provider: impl Fn(&NodeClaim) -> Option<Unhealthy>,
) -> PoolView {
    let in_pool = |c: &NodeClaim| {
        pool.is_empty() || crate::objects::nodepool_of(c).unwrap_or_default() == pool
    };
    let mut view = PoolView {
        nodes: 0,
        unhealthy: HashSet::new(),
        existing: HashSet::new(),
    };
    for c in claims {
        let uid = crate::objects::uid_of(c.as_ref());
        view.existing.insert(uid.clone());
        if !in_pool(c) {
            continue;
        }
        let Some(n) = c.status.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        view.nodes += 1;
        if unhealthy(node(n).as_deref(), provider(c)).is_some() {
            view.unhealthy.insert(uid);
        }
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::Machine;

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
                Err(Blocked {
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
            Err(Blocked {
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
            Err(Blocked {
                unhealthy: 3,
                allowed: 2,
                nodes: 10
            })
        );
    }

    #[test]
    fn policies_match_node_ready_and_machine_signals() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
        .expect("fixture");
        let u = unhealthy(Some(&node), None).expect("matches");
        assert_eq!((u.condition, u.detail.as_str()), ("Ready", "Ready=Unknown"));
        let machine: Machine = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": {"name": "m"},
            "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "m"}},
            "status": {"conditions": [{"type": "NodeHealthy", "status": "False",
                "reason": "NodeConditionsFailed", "message": "",
                "lastTransitionTime": "2026-11-22T09:00:00Z"}]}
        }))
        .expect("fixture");
        let u = unhealthy(
            Some(&node),
            crate::cloudprovider::inventory::machine_unhealthy(&machine),
        )
        .expect("matches");
        assert_eq!(u.condition, "NodeHealthy", "the older signal wins");
        let ready: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("fixture");
        assert_eq!(unhealthy(Some(&ready), None), None);
        assert_eq!(unhealthy(None, None), None);
    }
}
