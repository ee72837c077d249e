//! Terminate-first drift: a drifted node on finite hardware (its offering counted, none
//! left) is deleted before its replacement, because the replacement can only launch on the
//! unit it frees; surge-first wherever a replacement can launch first.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use api::NodeClaim;
use cloudprovider::{InstanceType, InstanceTypes, OfferingCount, PriceSource, Resources};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use super::View;
use super::candidates::Candidate;
use super::consolidation_tests::{pool, typed};
use super::simulate::{Simulate, Simulator};
use super::{Timers, pass};
use crate::model::convert::Availability;
use crate::state::{Cluster, Objects};

/// How the one offering of type `metal` (z1) is marked.
#[derive(Clone, Copy)]
enum Mark {
    /// Counted, `n` left.
    Counted(u32),
    /// Not counted, backed off (unavailable for a reason the candidate does not free).
    BackedOff,
}

fn catalog(mark: Mark) -> Arc<InstanceTypes> {
    let r = Resources(BTreeMap::from([
        ("cpu".to_string(), 4000),
        ("memory".to_string(), 8 << 30),
        ("pods".to_string(), 110),
    ]));
    let mut offering =
        cloudprovider::Offering::new("t", Some("z1"), "on-demand", 0.1, PriceSource::Annotation);
    match mark {
        Mark::Counted(n) => {
            offering.count = Some(OfferingCount {
                key: "template metal, inventory".into(),
                available: n,
                exhausted: "template metal: 0 of 2 hosts available".into(),
            })
        }
        Mark::BackedOff => offering.available = false,
    }
    Arc::new(InstanceTypes {
        instance_types: vec![InstanceType {
            devices: None,
            volume_limits: BTreeMap::new(),
            name: "metal".into(),
            capacity: r.clone(),
            allocatable: r,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            offerings: vec![offering],
            capacity_overlaid: false,
        }],
        ..InstanceTypes::default()
    })
}

/// Drifted NodeClaim `a` of type `metal` in z1, its Node running one 3-cpu pod (it fits no
/// other node: there is none).
fn cluster() -> Cluster {
    let labels = json!({"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "metal",
        "topology.kubernetes.io/zone": "z1", "karpenter.sh/capacity-type": "on-demand",
        "kubernetes.io/hostname": "node-a"});
    let claim: Arc<NodeClaim> = typed(json!({"metadata": {"name": "a", "labels": labels,
            "creationTimestamp": "2026-11-22T09:00:00Z"},
        "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
        "status": {"nodeName": "node-a", "conditions": [
            {"type": "Initialized", "status": "True", "reason": "r", "message": "",
             "lastTransitionTime": "2026-11-22T10:00:00Z"},
            {"type": "Drifted", "status": "True", "reason": "NodeClassDrifted",
             "message": "Kubernetes version v1.35.0 -> v1.36.0",
             "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}));
    let node: Arc<Node> = typed(json!({"metadata": {"name": "node-a", "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}));
    let pod: Arc<Pod> = typed(
        json!({"metadata": {"name": "web-0", "namespace": "default", "uid": "web-0",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]},
        "spec": {"nodeName": "node-a",
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    Cluster::new(Objects {
        nodepools: vec![pool("WhenEmptyOrUnderutilized", json!([{"nodes": "1"}]))],
        nodeclaims: vec![claim],
        nodes: vec![node],
        pods: vec![pod],
        ..Objects::default()
    })
}

/// The pass's decision for `a` with the offering marked `mark`: (surge replacements, or
/// `None` for a delete; terminate-first reason), or the blocked message.
fn decide(mark: Mark) -> Result<(Option<usize>, Option<&'static str>), String> {
    let cluster = cluster();
    with_simulator(&cluster, mark, decide_on)
}

/// `f` on a view of `cluster` and the real simulator, with the offering marked `mark`.
fn with_simulator<R>(cluster: &Cluster, mark: Mark, f: impl FnOnce(&View, &Simulator) -> R) -> R {
    let catalog = catalog(mark);
    let lookup = move |_: &str| Some(Arc::clone(&catalog));
    let view = View {
        cluster,
        catalog: &lookup,
        manual_drift: &crate::disruption::no_manual_drift,
    };
    let sim = Simulator {
        catalog: &lookup,
        available: Availability::Offered,
    };
    f(&view, &sim)
}

fn decide_on(
    view: &View,
    sim: &Simulator,
) -> Result<(Option<usize>, Option<&'static str>), String> {
    let now = "2026-11-22T11:00:00Z".parse().expect("time");
    let mut timers = Timers::default();
    let out = pass(view, &mut timers, sim, now, Instant::now());
    match out.decisions.as_slice() {
        [d] => {
            assert_eq!(d.nodeclaim, "a");
            if d.terminate_first.is_some() {
                assert!(
                    d.message
                        .contains("terminate-first: no replacement can launch before it goes")
                        && d.message.contains("no count left"),
                    "{}",
                    d.message
                );
            }
            Ok((
                d.surge.as_ref().map(|s| s.replacements.len()),
                d.terminate_first,
            ))
        }
        [] => Err(timers
            .blocked()
            .into_iter()
            .map(|b| b.message)
            .collect::<Vec<_>>()
            .join("; ")),
        more => panic!("one decision at most: {more:?}"),
    }
}

#[test]
fn a_drifted_node_whose_replacement_can_only_use_its_own_host_goes_first() {
    // No host left: surge is impossible, the host it frees is enough.
    assert_eq!(
        decide(Mark::Counted(0)),
        Ok((None, Some("no-available-capacity")))
    );
    // Positive control: a free host, so surge-first (one replacement first).
    assert_eq!(decide(Mark::Counted(1)), Ok((Some(1), None)));
    // An offering unavailable for another reason (backed off) is not freed by deleting the
    // node: drift stays blocked.
    let blocked = decide(Mark::BackedOff).expect_err("blocked");
    assert!(
        blocked.starts_with("drifted (NodeClassDrifted); blocked: its pods cannot be placed"),
        "{blocked}"
    );
}

#[test]
fn the_credit_is_one_unit_of_the_candidates_own_offering() {
    let cluster = cluster();
    with_simulator(&cluster, Mark::Counted(0), |view, sim| {
        credit(&cluster, view, sim)
    });
}

fn credit(cluster: &Cluster, view: &View, sim: &Simulator) {
    let pods: Vec<&Pod> = cluster.pods.iter().map(AsRef::as_ref).collect();
    let candidate = Candidate {
        claim: cluster.nodeclaims[0].as_ref(),
        name: "a",
        node: cluster.nodes.first().map(AsRef::as_ref),
        pods: pods.clone(),
        bound: pods,
    };
    assert!(sim.replacements(view, &[&candidate]).is_err());
    let plan = sim
        .terminate_first(view, &candidate)
        .expect("fits once its host is free");
    assert_eq!(plan.len(), 1, "{plan:?}");
    // A candidate whose labels name no offering of the catalog frees nothing known.
    let mut other = cluster.nodeclaims[0].as_ref().clone();
    other
        .metadata
        .labels
        .get_or_insert_default()
        .insert("topology.kubernetes.io/zone".into(), "z9".into());
    let elsewhere = Candidate {
        claim: &other,
        ..candidate
    };
    assert_eq!(
        sim.terminate_first(view, &elsewhere),
        Err("its offering is not counted".to_string())
    );
}

/// [`cluster`] plus NodeClaim `x`, launched on the last host and not initialized (in
/// flight, room for one pod), and, if `waiting`, the pod `web-1` (3 cpu, newer than `a`'s
/// pod) pending for it: the replacement of a node deleted a moment ago.
fn with_in_flight(waiting: bool) -> Cluster {
    let base = cluster();
    let labels = json!({"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "metal",
        "topology.kubernetes.io/zone": "z1", "karpenter.sh/capacity-type": "on-demand"});
    let x: Arc<NodeClaim> = typed(json!({"metadata": {"name": "x", "labels": labels,
            "creationTimestamp": "2026-11-22T10:59:00Z"},
        "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "conditions": [
            {"type": "Launched", "status": "True", "reason": "r", "message": "",
             "lastTransitionTime": "2026-11-22T10:59:00Z"}]}}));
    let pending: Arc<Pod> = typed(
        json!({"metadata": {"name": "web-1", "namespace": "default", "uid": "web-1",
            "creationTimestamp": "2026-11-22T10:58:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable"}]}}),
    );
    let mut objects = base.objects().clone();
    objects.nodeclaims.push(x);
    if waiting {
        objects.pods.push(pending);
    }
    Cluster::new(objects)
}

#[test]
fn a_drifted_nodes_pods_never_count_on_a_node_that_has_not_initialized() {
    // `x` has room, but it has not initialized (it may never): drift waits, as Karpenter's
    // simulation fails a pod placed on an uninitialized node.
    let cluster = with_in_flight(false);
    let blocked = with_simulator(&cluster, Mark::Counted(0), decide_on).expect_err("blocked");
    assert!(
        blocked.contains("pods would land on uninitialized node x"),
        "{blocked}"
    );
}

#[test]
fn a_drifted_nodes_pods_never_take_the_room_a_pending_pod_waits_for() {
    // `web-1` waits for `x` (the provisioner planned it there): placed first, it keeps that
    // room although `a`'s pod is older, so `a` goes terminate-first onto the host it frees,
    // rather than being deleted for room that is spoken for.
    let cluster = with_in_flight(true);
    assert_eq!(
        with_simulator(&cluster, Mark::Counted(0), decide_on),
        Ok((None, Some("no-available-capacity")))
    );
    // Positive control: with a host left, surge-first onto it (`x` stays `web-1`'s).
    assert_eq!(
        with_simulator(&cluster, Mark::Counted(1), decide_on),
        Ok((Some(1), None))
    );
}
