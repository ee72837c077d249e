//! The joins of [`Cluster`], and [`ClusterState`] following the caches' writes.

use std::sync::Arc;

use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::*;
use crate::cache::Feed;
use crate::objects::name;

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture")
}

fn node(name: &str, provider_id: &str) -> Node {
    typed(json!({
        "metadata": {"name": name},
        "spec": {"providerID": provider_id},
        "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

/// A NodeClaim of pool `default`; `status` merged in.
fn claim(name: &str, status: Value) -> NodeClaim {
    typed(json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
        "status": status
    }))
}

fn pod(name: &str, node: Option<&str>, phase: &str, owner: Option<&str>) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "d", "uid": name},
        "spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}}]},
        "status": {"phase": phase}
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
    }
    if let Some(kind) = owner {
        v["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u"}]);
    }
    if phase == "Pending" {
        v["status"]["conditions"] =
            json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]);
    }
    typed(v)
}

fn deleted<K: kube::Resource>(mut obj: K) -> K {
    obj.meta_mut().deletion_timestamp = Some(typed(json!("2026-11-22T10:00:00Z")));
    obj.meta_mut().finalizers = Some(vec!["f".into()]);
    obj
}

fn objects(nodes: Vec<Node>, claims: Vec<NodeClaim>, pods: Vec<Pod>) -> Objects {
    Objects {
        nodes: nodes.into_iter().map(Arc::new).collect(),
        nodeclaims: claims.into_iter().map(Arc::new).collect(),
        pods: pods.into_iter().map(Arc::new).collect(),
        ..Objects::default()
    }
}

#[test]
fn nodeclaims_join_their_nodes_by_provider_id_then_node_name() {
    let c = Cluster::new(objects(
        vec![node("n1", "p://1"), node("n2", "p://2"), node("n3", "")],
        vec![
            // Registered by providerID, status.nodeName not written yet.
            claim("by-pid", json!({"providerID": "p://1"})),
            // No providerID known: by the Node it names.
            claim("by-name", json!({"nodeName": "n3"})),
            // Launched, no Node yet.
            claim("launching", json!({"providerID": "p://9"})),
        ],
        vec![],
    ));
    assert_eq!(c.node_of("by-pid").map(|n| name(n.as_ref())), Some("n1"));
    assert_eq!(c.claim_of("n1").map(|x| name(x.as_ref())), Some("by-pid"));
    assert_eq!(c.node_of("by-name").map(|n| name(n.as_ref())), Some("n3"));
    assert!(c.node_of("launching").is_none());
    assert!(c.claim_of("n2").is_none(), "a Node without a NodeClaim");
    let pool: Vec<&str> = c
        .claims_of_pool("default")
        .map(|(x, _)| name(x.as_ref()))
        .collect();
    assert_eq!(pool, ["by-name", "by-pid", "launching"], "name order");
}

#[test]
fn in_flight_claims_have_no_node_with_room_and_are_not_deleting() {
    let mut not_ready = node("n2", "p://2");
    not_ready.status = None;
    // Cordoned (e.g. by Cluster API's drain of a Machine deleted behind our back): no room,
    // and no capacity coming either.
    let mut cordoned = node("n3", "p://3");
    cordoned.spec.get_or_insert_default().unschedulable = Some(true);
    let c = Cluster::new(objects(
        vec![node("n1", "p://1"), not_ready, cordoned],
        vec![
            claim("ready", json!({"providerID": "p://1"})),
            claim("node-not-ready", json!({"providerID": "p://2"})),
            claim("cordoned", json!({"providerID": "p://3"})),
            claim("launching", json!({})),
            deleted(claim("going", json!({}))),
        ],
        vec![],
    ));
    let in_flight: Vec<&str> = c.in_flight().map(|x| name(x.as_ref())).collect();
    assert_eq!(in_flight, ["node-not-ready", "launching"]);
    let deleting: Vec<&str> = c.deleting_claims().map(|x| name(x.as_ref())).collect();
    assert_eq!(deleting, ["going"]);
}

#[test]
fn nodes_leave_when_they_or_their_nodeclaims_are_deleted() {
    let mut cordoned = node("n4", "p://4");
    cordoned.spec.get_or_insert_default().unschedulable = Some(true);
    let c = Cluster::new(objects(
        vec![
            node("n1", "p://1"),
            deleted(node("n2", "p://2")),
            node("n3", "p://3"),
            cordoned,
        ],
        vec![deleted(claim("c1", json!({"providerID": "p://1"})))],
        vec![],
    ));
    assert!(c.leaving("n1"), "its NodeClaim is being deleted");
    assert!(c.leaving("n2"), "being deleted itself");
    assert!(!c.leaving("n3"));
    let room: Vec<&str> = c
        .nodes
        .iter()
        .filter(|n| c.has_room(n))
        .map(|n| name(n.as_ref()))
        .collect();
    assert_eq!(room, ["n3"], "cordoned and leaving Nodes have no room");
}

#[test]
fn bound_pods_count_on_their_node_until_they_finish() {
    let c = Cluster::new(objects(
        vec![node("n1", "p://1")],
        vec![],
        vec![
            pod("web", Some("n1"), "Running", Some("ReplicaSet")),
            pod("agent", Some("n1"), "Running", Some("DaemonSet")),
            pod("done", Some("n1"), "Succeeded", None),
            pod("waiting", None, "Pending", None),
        ],
    ));
    let b = c.bound("n1").expect("pods on n1");
    let names: Vec<&str> = b.pods.iter().map(|p| name(p.as_ref())).collect();
    assert_eq!(names, ["web", "agent"], "finished pods do not count");
    assert_eq!(b.requests["cpu"], 1000);
    assert_eq!(b.requests[scheduling::PODS], 2);
    assert_eq!(b.limits["cpu"], 2000);
    assert_eq!(b.daemon_requests["cpu"], 500);
    assert_eq!(b.daemon_limits["cpu"], 1000);
    let pending: Vec<&str> = c.pending().iter().map(|p| name(p.as_ref())).collect();
    assert_eq!(pending, ["waiting"]);
}

/// Detached caches for every kind a cluster state reads, and the pod, Node and NodeClaim
/// feeds.
fn detached() -> (ClusterState, Feed<Pod>, Feed<Node>, Feed<NodeClaim>) {
    let (pods, pod_feed) = Cache::detached();
    let (nodes, node_feed) = Cache::detached();
    let (nodeclaims, claim_feed) = Cache::detached();
    let state = ClusterState::new(Sources {
        storageclasses: Cache::empty(),
        csinodes: Cache::empty(),
        dra: crate::cache::DraCaches::empty(),
        pvcs: Cache::empty(),
        pvs: Cache::empty(),
        pods,
        nodes,
        nodeclaims,
        nodepools: Cache::detached().0,
        daemonsets: Cache::detached().0,
        pdbs: Cache::detached().0,
    });
    (state, pod_feed, node_feed, claim_feed)
}

#[test]
fn the_state_follows_cache_writes_and_is_kept_while_nothing_changes() {
    let (state, mut pods, mut nodes, mut claims) = detached();
    assert!(!state.synced());
    pods.apply(Event::Init);
    nodes.apply(Event::Init);
    claims.apply(Event::Init);
    pods.apply(Event::InitDone);
    nodes.apply(Event::InitDone);
    assert!(!state.synced(), "the NodeClaims are not listed yet");
    claims.apply(Event::InitDone);
    assert!(state.synced());
    let empty = state.current();
    assert!(empty.nodes.is_empty());
    assert!(
        Arc::ptr_eq(&empty, &state.current()),
        "no write: the same join"
    );

    nodes.apply(Event::Apply(node("n1", "p://1")));
    claims.apply(Event::Apply(claim("c1", json!({"providerID": "p://1"}))));
    pods.apply(Event::Apply(pod("web", Some("n1"), "Running", None)));
    let joined = state.current();
    assert!(!Arc::ptr_eq(&empty, &joined));
    assert_eq!(joined.node_of("c1").map(|n| name(n.as_ref())), Some("n1"));
    assert_eq!(joined.bound("n1").map(|b| b.pods.len()), Some(1));
    assert!(joined.in_flight().next().is_none());

    // A pod goes: unbound from its node.
    pods.apply(Event::Delete(pod("web", Some("n1"), "Running", None)));
    let after = state.current();
    assert!(after.bound("n1").is_none());
    // The NodeClaim is marked for deletion: its Node leaves, the claim is not in flight.
    claims.apply(Event::Apply(deleted(claim(
        "c1",
        json!({"providerID": "p://1"}),
    ))));
    let after = state.current();
    assert!(after.leaving("n1"));
    assert_eq!(after.deleting_claims().count(), 1);
    assert!(after.in_flight().next().is_none());
    // The Node goes: the NodeClaim has no Node; once the claim goes too, nothing is left.
    nodes.apply(Event::Delete(node("n1", "p://1")));
    assert!(state.current().node_of("c1").is_none());
    claims.apply(Event::Delete(claim("c1", json!({}))));
    assert!(state.current().nodeclaims.is_empty());
}
