//! A consolidation or drift replacement keeps each stateful pod's zone: the pods a candidate
//! moves carry their volumes' requirements into the replacement (the cluster without the
//! candidate keeps its claims and volumes).

use std::collections::BTreeMap;
use std::sync::Arc;

use api::NodeClaim;
use cloudprovider::InstanceTypes;
use cloudprovider::{InstanceType, PriceSource, Resources};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::json;

use super::View;
use super::candidates::Candidate;
use super::consolidation_tests::{pool, typed};
use super::simulate::{Simulate, Simulator};
use crate::model::convert::Availability;
use crate::state::{Cluster, Objects};

/// One type, offered in z1 (cheaper) and z2.
fn catalog() -> Arc<InstanceTypes> {
    let r = Resources(BTreeMap::from([
        ("cpu".to_string(), 4000),
        ("memory".to_string(), 8 << 30),
        ("pods".to_string(), 110),
    ]));
    let offering = |zone: &str, price| {
        cloudprovider::Offering::new("t", Some(zone), "on-demand", price, PriceSource::Annotation)
    };
    Arc::new(InstanceTypes {
        instance_types: vec![InstanceType {
            devices: None,
            volume_limits: BTreeMap::new(),
            name: "medium".into(),
            capacity: r.clone(),
            allocatable: r,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            offerings: vec![offering("z1", 0.1), offering("z2", 0.2)],
            capacity_overlaid: false,
        }],
        ..InstanceTypes::default()
    })
}

/// Node `a` in z2 running `db-0`; with `volume`, db-0's claim is bound to a volume in z2.
fn cluster(volume: bool) -> Cluster {
    let labels = json!({"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "medium",
        "topology.kubernetes.io/zone": "z2", "karpenter.sh/capacity-type": "on-demand",
        "kubernetes.io/hostname": "node-a"});
    let claim: Arc<NodeClaim> = typed(json!({"metadata": {"name": "a", "labels": labels},
        "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
        "status": {"nodeName": "node-a", "conditions": [{"type": "Initialized", "status": "True",
            "reason": "r", "message": "", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}));
    let node: Arc<Node> = typed(json!({"metadata": {"name": "node-a", "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}));
    let volumes = if volume {
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}])
    } else {
        json!([])
    };
    let pod: Arc<Pod> = typed(
        json!({"metadata": {"name": "db-0", "namespace": "default", "uid": "db-0",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u", "controller": true}]},
        "spec": {"nodeName": "node-a", "volumes": volumes,
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    let pvc: Arc<PersistentVolumeClaim> = typed(
        json!({"metadata": {"name": "data-db-0", "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "pv-db-0", "storageClassName": "zonal"}, "status": {"phase": "Bound"}}),
    );
    let pv: Arc<PersistentVolume> = typed(json!({"metadata": {"name": "pv-db-0"},
        "spec": {"csi": {"driver": "d.csi", "volumeHandle": "h"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]}]}]}}}}));
    Cluster::new(Objects {
        nodepools: vec![pool("WhenEmptyOrUnderutilized", json!([{"nodes": "100%"}]))],
        nodeclaims: vec![claim],
        nodes: vec![node],
        pods: vec![pod],
        pvcs: vec![pvc],
        pvs: vec![pv],
        ..Objects::default()
    })
}

/// The zone the replacement of node `a` is planned in.
fn replacement_zone(volume: bool) -> Vec<String> {
    let cluster = cluster(volume);
    let catalog = catalog();
    let lookup = move |_: &str| Some(Arc::clone(&catalog));
    let view = View {
        cluster: &cluster,
        catalog: &lookup,
        manual_drift: &crate::disruption::no_manual_drift,
    };
    let claim = cluster.nodeclaims[0].as_ref();
    let node = cluster.nodes[0].as_ref();
    let pods: Vec<&Pod> = cluster.pods.iter().map(AsRef::as_ref).collect();
    let candidate = Candidate {
        claim,
        name: "a",
        node: Some(node),
        pods: pods.clone(),
        bound: pods,
    };
    let sim = Simulator {
        catalog: &lookup,
        available: Availability::Offered,
    };
    let replacements = sim
        .replacements(&view, &[&candidate])
        .expect("a replacement");
    assert_eq!(replacements.len(), 1, "{replacements:?}");
    replacements[0]
        .spec
        .requirements
        .iter()
        .find(|r| r.key == "topology.kubernetes.io/zone")
        .map(|r| r.values.clone())
        .unwrap_or_default()
}

#[test]
fn a_replacement_stays_in_the_zone_of_the_pods_volume() {
    assert_eq!(replacement_zone(true), ["z2"]);
    // The positive control: without the volume the replacement is not held to z2 (no zone
    // requirement: the launch takes the cheaper z1).
    let free = replacement_zone(false);
    assert!(
        free.is_empty() || free.contains(&"z1".to_string()),
        "{free:?}"
    );
}
