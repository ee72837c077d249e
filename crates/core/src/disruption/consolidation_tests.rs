//! Consolidation decided over a whole pass, on typed fixtures with a priced catalog:
//! delete, replace, multi-node, Balanced, blockers and validation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::{NodeClaim, NodePool};
use cloudprovider::InstanceTypes;
use cloudprovider::{InstanceType, PriceSource, Resources};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::tests::NoSim;
use super::{Outcome, Timers, VALIDATION, View, pass};
use crate::state::{Cluster, Objects};

const TYPES: [(&str, i64, f64); 3] = [("small", 2, 0.1), ("medium", 4, 0.2), ("large", 8, 0.4)];

pub(super) fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture"))
}

fn catalog() -> Arc<InstanceTypes> {
    Arc::new(InstanceTypes {
        instance_types: TYPES
            .iter()
            .map(|(name, cpu, price)| {
                let r = Resources(BTreeMap::from([
                    ("cpu".to_string(), cpu * 1000),
                    ("memory".to_string(), cpu << 31),
                    ("pods".to_string(), 110),
                ]));
                InstanceType {
                    devices: None,
                    volume_limits: Default::default(),
                    name: name.to_string(),
                    capacity: r.clone(),
                    allocatable: r,
                    labels: BTreeMap::new(),
                    taints: Vec::new(),
                    offerings: vec![cloudprovider::Offering::new(
                        "t",
                        Some("z1"),
                        "on-demand",
                        *price,
                        PriceSource::Annotation,
                    )],
                    capacity_overlaid: false,
                }
            })
            .collect(),
        ..InstanceTypes::default()
    })
}

pub(super) fn pool(policy: &str, budgets: Value) -> Arc<NodePool> {
    typed(json!({"metadata": {"name": "default"}, "spec": {
        "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
        "disruption": {"consolidateAfter": "30s", "consolidationPolicy": policy, "budgets": budgets}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "",
                                   "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}))
}

fn labels(name: &str, it: &str) -> Value {
    json!({"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": it,
           "topology.kubernetes.io/zone": "z1", "karpenter.sh/capacity-type": "on-demand",
           "kubernetes.io/hostname": format!("node-{name}")})
}

fn claim(name: &str, it: &str, annotations: Value) -> Arc<NodeClaim> {
    typed(
        json!({"metadata": {"name": name, "labels": labels(name, it), "annotations": annotations},
        "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
        "status": {"nodeName": format!("node-{name}"),
                   "lastPodEventTime": "2026-11-22T10:50:00Z",
                   "conditions": [{"type": "Initialized", "status": "True", "reason": "r",
                                   "message": "", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}),
    )
}

fn node(name: &str, it: &str) -> Arc<Node> {
    let cpu = TYPES.iter().find(|t| t.0 == it).expect("type").1;
    typed(
        json!({"metadata": {"name": format!("node-{name}"), "labels": labels(name, it)},
        "status": {"allocatable": {"cpu": cpu.to_string(), "memory": format!("{}Gi", cpu * 2), "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
}

pub(super) fn pod(name: &str, node: &str, cpu: &str, annotations: Value) -> Arc<Pod> {
    typed(
        json!({"metadata": {"name": name, "namespace": "default", "uid": name,
            "labels": {"app": "web"}, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
        "spec": {"nodeName": format!("node-{node}"),
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running", "startTime": "2026-11-22T10:00:00Z",
                   "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
}

pub(super) struct World {
    pub(super) pools: Vec<Arc<NodePool>>,
    pub(super) claims: Vec<Arc<NodeClaim>>,
    pub(super) nodes: Vec<Arc<Node>>,
    pub(super) pods: Vec<Arc<Pod>>,
    pub(super) pdbs: Vec<Arc<PodDisruptionBudget>>,
}

impl World {
    pub(super) fn new(policy: &str, nodes: &[(&str, &str)], pods: Vec<Arc<Pod>>) -> Self {
        World {
            pools: vec![pool(policy, json!([{"nodes": "100%"}]))],
            claims: nodes
                .iter()
                .map(|(n, it)| claim(n, it, json!({})))
                .collect(),
            nodes: nodes.iter().map(|(n, it)| node(n, it)).collect(),
            pods,
            pdbs: Vec::new(),
        }
    }

    /// The world as a cluster, with `pods`.
    pub(super) fn cluster(&self, pods: Vec<Arc<Pod>>) -> Cluster {
        Cluster::new(Objects {
            nodepools: self.pools.clone(),
            nodeclaims: self.claims.clone(),
            nodes: self.nodes.clone(),
            pods,
            pdbs: self.pdbs.clone(),
            ..Objects::default()
        })
    }

    /// A pass at `now`, then one after the validation: the second decides.
    pub(super) fn run(&self, now: &str) -> (Outcome, Outcome) {
        self.run_with(now, &mut Timers::default())
    }

    /// [`Self::run`] with `timers`.
    pub(super) fn run_with(&self, now: &str, timers: &mut Timers) -> (Outcome, Outcome) {
        let cat = catalog();
        let lookup = move |_: &str| Some(Arc::clone(&cat));
        let cluster = self.cluster(self.pods.clone());
        let view = View {
            cluster: &cluster,
            catalog: &lookup,
            manual_drift: &crate::disruption::no_manual_drift,
        };
        let now: Timestamp = now.parse().expect("ts");
        let t0 = Instant::now();
        let first = pass(&view, timers, &NoSim, now, t0);
        let second = pass(
            &view,
            timers,
            &NoSim,
            now,
            t0 + VALIDATION + Duration::from_secs(1),
        );
        (first, second)
    }
}

pub(super) const LATER: &str = "2026-11-22T11:00:00Z";

pub(super) fn why(o: &Outcome, claim: &str) -> String {
    o.verdicts
        .get(claim)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

#[test]
fn a_large_node_with_small_pods_is_replaced_by_a_cheaper_type_after_validation() {
    let pods = (0..3)
        .map(|i| pod(&format!("p{i}"), "a", "300m", json!({})))
        .collect();
    let w = World::new("WhenEmptyOrUnderutilized", &[("a", "large")], pods);
    let (first, second) = w.run(LATER);
    assert!(first.decisions.is_empty(), "validation first");
    assert_eq!(
        why(&first, "a"),
        "candidate: replace with small (saves 0.30/h)"
    );
    assert_eq!(second.decisions.len(), 1);
    let mv = second.decisions[0].command.as_ref().expect("a move");
    assert_eq!(mv.kind(), "replace");
    let super::plan::Action::Replace(rs) = &mv.action else {
        unreachable!()
    };
    assert_eq!(rs.len(), 1);
    assert_eq!(
        rs[0].claim.instance_types(),
        ["small", "medium"],
        "strictly cheaper than large"
    );
}

#[test]
fn the_smallest_node_is_never_replaced_like_for_like() {
    let w = World::new(
        "WhenEmptyOrUnderutilized",
        &[("a", "small")],
        vec![pod("p", "a", "300m", json!({}))],
    );
    let (first, second) = w.run(LATER);
    assert!(second.decisions.is_empty());
    assert_eq!(why(&first, "a"), "no cheaper option");
}

#[test]
fn three_half_empty_nodes_split_onto_cheaper_ones() {
    // 4.5 cpu in three pods: first-fit's one large (0.4) saves 0.2; three smalls (0.3) save
    // 0.3, and that is the move: N into M nodes, surge-first like any replace.
    let w = half_empty_mediums();
    let (first, second) = w.run(LATER);
    assert_eq!(
        why(&first, "a"),
        "candidate: replace 3 nodes with small ×3 (saves 0.30/h); \
         first-fit packing would launch 0.40/h"
    );
    assert_eq!(second.decisions.len(), 1, "{:?}", second.decisions);
    let surge = second.decisions[0].surge.as_ref().expect("surge");
    assert_eq!(surge.with, ["b", "c"]);
    assert_eq!(surge.replacements.len(), 3, "one NodeClaim per replacement");
    assert_eq!(surge.consolidation_type, "multi");
    let mv = second.decisions[0].command.as_ref().expect("move");
    assert!((mv.savings - 0.3).abs() < 1e-9);
    let super::plan::Action::Replace(rs) = &mv.action else {
        unreachable!()
    };
    for r in rs {
        assert_eq!(r.claim.instance_types(), ["small"], "cheap enough alone");
        assert_eq!(r.claim.pods.len(), 1);
    }
}

#[test]
fn one_dear_node_splits_onto_cheaper_ones_only_when_that_saves() {
    // Two 1500m pods on a large (0.4): two smalls (0.2) replace it; first-fit's one medium
    // (0.2) is as cheap with fewer nodes and wins the tie.
    let (first, _) = pods_on("large", 2).run(LATER);
    assert_eq!(
        why(&first, "a"),
        "candidate: replace with medium (saves 0.20/h)"
    );
    // Three 1500m pods on a large: a large again (first-fit) is no saving, two mediums are
    // 0.4 too; three smalls (0.3) save 0.1.
    let (first, second) = pods_on("large", 3).run(LATER);
    assert_eq!(
        why(&first, "a"),
        "candidate: replace with small ×3 (saves 0.10/h); first-fit packing would launch 0.40/h"
    );
    let surge = second.decisions[0].surge.as_ref().expect("surge");
    assert_eq!(surge.replacements.len(), 3);
    assert_eq!(surge.consolidation_type, "single");
    // Control: on a medium (0.2) the same two pods have no cheaper home (two smalls cost 0.2).
    let (first, second) = pods_on("medium", 2).run(LATER);
    assert!(second.decisions.is_empty());
    assert_eq!(why(&first, "a"), "no cheaper option");
}

#[test]
fn pods_that_fit_on_other_nodes_mean_a_delete() {
    // a+b need a large, b's own type, not cheaper than b: a goes alone, onto b.
    let w = one_pod_each(&[("a", "medium", "500m"), ("b", "large", "6")]);
    let (first, second) = w.run(LATER);
    assert!(
        why(&first, "a").starts_with("candidate: delete"),
        "{}",
        why(&first, "a")
    );
    assert!(second.decisions.iter().any(|d| d.nodeclaim == "a"));
}

#[test]
fn blockers_are_named() {
    let pods = vec![
        pod(
            "db-0",
            "a",
            "300m",
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        ),
        pod("web-0", "b", "300m", json!({})),
    ];
    let mut w = World::new(
        "WhenEmptyOrUnderutilized",
        &[("a", "large"), ("b", "large"), ("c", "large")],
        pods,
    );
    w.pods.push(pod("x", "c", "300m", json!({})));
    w.pdbs.push(typed(json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}})));
    let (first, second) = w.run(LATER);
    assert!(second.decisions.is_empty());
    assert_eq!(why(&first, "a"), "pod default/db-0 has do-not-disrupt");
    assert_eq!(
        why(&first, "b"),
        "PDB default/web allows 0 (pod default/web-0)"
    );
    // consolidateAfter counts from the last pod event.
    w.pdbs.clear();
    let (first, _) = w.run("2026-11-22T10:50:10Z");
    assert_eq!(
        why(&first, "c"),
        "consolidateAfter 30s not elapsed since the last pod event"
    );
}

#[test]
fn budgets_by_reason_hold_consolidation() {
    let mut w = World::new(
        "WhenEmptyOrUnderutilized",
        &[("a", "large")],
        vec![pod("p", "a", "300m", json!({}))],
    );
    w.pools = vec![pool(
        "WhenEmptyOrUnderutilized",
        json!([{"nodes": "0", "reasons": ["Underutilized"]}]),
    )];
    let (first, second) = w.run(LATER);
    assert!(second.decisions.is_empty());
    assert_eq!(why(&first, "a"), "budget Underutilized: 0 allowed");
}

#[test]
fn balanced_refuses_a_tiny_saving_and_accepts_a_large_one() {
    // Tiny: a medium (0.2) with 6 pods among nine full mediums (one pod each); replacing
    // it by a small saves 0.1 of 2.0/h (5 %) while disrupting 7 of the pool's 25 (28 %).
    let mut nodes = vec![("a", "medium")];
    let others = ["b", "c", "d", "e", "f", "g", "h", "i", "j"];
    nodes.extend(others.iter().map(|n| (*n, "medium")));
    let mut pods: Vec<Arc<Pod>> = (0..6)
        .map(|i| pod(&format!("a{i}"), "a", "250m", json!({})))
        .collect();
    for n in others {
        pods.push(pod(&format!("{n}0"), n, "3900m", json!({})));
    }
    let w = World::new("Balanced", &nodes, pods);
    let (first, second) = w.run(LATER);
    assert!(second.decisions.is_empty(), "{:?}", second.decisions);
    assert!(
        why(&first, "a").starts_with("Balanced: score"),
        "{}",
        why(&first, "a")
    );
    assert!(first.scores.iter().all(|(_, s)| *s < 0.5));
    // Large: one large (0.4 of 0.8/h) with one pod next to a busy large: replaced by a small.
    let pods = vec![
        pod("p", "a", "300m", json!({})),
        pod("q", "b", "7900m", json!({})),
    ];
    let w = World::new("Balanced", &[("a", "large"), ("b", "large")], pods);
    let (first, second) = w.run(LATER);
    assert_eq!(
        why(&first, "a"),
        "candidate: replace with small (saves 0.30/h)"
    );
    assert!(
        first
            .notes
            .iter()
            .any(|n| n.reason == "ConsolidationApproved")
    );
    assert_eq!(second.decisions.len(), 1);
}

#[test]
fn validation_drops_a_move_whose_candidate_changed() {
    let pods = (0..3)
        .map(|i| pod(&format!("p{i}"), "a", "300m", json!({})))
        .collect();
    let w = World::new("WhenEmptyOrUnderutilized", &[("a", "large")], pods);
    let cat = catalog();
    let lookup = move |_: &str| Some(Arc::clone(&cat));
    let now: Timestamp = LATER.parse().expect("ts");
    let mut timers = Timers::default();
    let t0 = Instant::now();
    let cluster = w.cluster(w.pods.clone());
    let view = View {
        cluster: &cluster,
        catalog: &lookup,
        manual_drift: &crate::disruption::no_manual_drift,
    };
    assert!(
        pass(&view, &mut timers, &NoSim, now, t0)
            .decisions
            .is_empty()
    );
    // A do-not-disrupt pod arrives during validation.
    let mut pods = w.pods.clone();
    pods.push(pod(
        "late",
        "a",
        "100m",
        json!({"karpenter.sh/do-not-disrupt": "true"}),
    ));
    let cluster = w.cluster(pods);
    let view = View {
        cluster: &cluster,
        ..view
    };
    let out = pass(&view, &mut timers, &NoSim, now, t0 + VALIDATION);
    assert!(out.decisions.is_empty());
    assert!(
        out.notes
            .iter()
            .any(|n| n.reason == "ConsolidationRejected"),
        "{:?}",
        out.notes
    );
}

#[test]
fn a_node_inside_its_consolidate_after_window_takes_no_moved_pods() {
    // a's pod fits only on b; b just got a pod (last pod event 10:59:50, consolidateAfter
    // 30s) and its own pod may not move (do-not-disrupt).
    let pods = vec![
        pod("p", "a", "1500m", json!({})),
        pod(
            "q",
            "b",
            "6",
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        ),
    ];
    let mut w = World::new(
        "WhenEmptyOrUnderutilized",
        &[("a", "medium"), ("b", "large")],
        pods,
    );
    let mut b = (*w.claims[1]).clone();
    b.status.as_mut().expect("status").last_pod_event_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-22T10:59:50Z".parse().expect("ts"),
        ));
    w.claims[1] = Arc::new(b);
    // Inside b's window: a cannot be deleted onto b; it is replaced by a small instead.
    let (first, second) = w.run(LATER);
    assert_eq!(
        why(&first, "a"),
        "candidate: replace with small (saves 0.10/h)"
    );
    assert_eq!(second.decisions.len(), 1);
    assert_eq!(
        second.decisions[0].command.as_ref().map(|m| m.kind()),
        Some("replace")
    );
    // Once b's window has elapsed (11:00:20), a's pod moves onto b: a delete.
    let (first, second) = w.run("2026-11-22T11:00:30Z");
    assert_eq!(why(&first, "a"), "candidate: delete (saves 0.20/h)");
    assert_eq!(
        second.decisions[0].command.as_ref().map(|m| m.kind()),
        Some("delete")
    );
}

/// Nodes `(name, type, cpu)` each running one pod `p-<name>` of `cpu`.
pub(super) fn one_pod_each(nodes: &[(&str, &str, &str)]) -> World {
    let pods = nodes
        .iter()
        .map(|(n, _, cpu)| pod(&format!("p-{n}"), n, cpu, json!({})))
        .collect();
    let types: Vec<(&str, &str)> = nodes.iter().map(|(n, t, _)| (*n, *t)).collect();
    World::new("WhenEmptyOrUnderutilized", &types, pods)
}

/// Node `a` of type `it` running `n` pods of 1500m.
fn pods_on(it: &str, n: usize) -> World {
    let pods = (0..n)
        .map(|i| pod(&format!("p{i}"), "a", "1500m", json!({})))
        .collect();
    World::new("WhenEmptyOrUnderutilized", &[("a", it)], pods)
}

pub(super) fn half_empty_mediums() -> World {
    one_pod_each(&[
        ("a", "medium", "1500m"),
        ("b", "medium", "1500m"),
        ("c", "medium", "1500m"),
    ])
}
