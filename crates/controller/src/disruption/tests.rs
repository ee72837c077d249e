//! Decisions of a whole pass, on typed fixtures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use api::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::candidates::Candidate;
use super::simulate::Simulate;
use super::{Timers, View, decide};

/// A simulation in which every candidate's pods fit elsewhere (no replacements).
pub(super) struct NoSim;

impl Simulate for NoSim {
    fn replacements(&self, _: &View, _: &[&Candidate]) -> Result<Vec<NodeClaim>, String> {
        Ok(Vec::new())
    }
}

fn view<'a>(
    nodepools: &'a [Arc<NodePool>],
    nodeclaims: &'a [Arc<NodeClaim>],
    nodes: &'a [Arc<Node>],
    pods: &'a [Arc<Pod>],
) -> View<'a> {
    View {
        nodepools,
        nodeclaims,
        nodes,
        pods,
        daemonsets: &[],
        pdbs: &[],
        nodeclasses: &[],
        catalog: &super::no_catalog,
    }
}

/// One pass with [`NoSim`].
fn pass(view: &View, timers: &mut Timers, now: Timestamp, at: Instant) -> Vec<super::Decision> {
    decide(view, timers, &NoSim, now, at)
}

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture"))
}

fn pool_json(consolidate_after: &str, budgets: Value) -> Value {
    json!({"metadata": {"name": "default"}, "spec": {
        "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}},
        "disruption": {"consolidateAfter": consolidate_after, "budgets": budgets}}})
}

fn pool(consolidate_after: &str, budgets: Value) -> Arc<NodePool> {
    typed(pool_json(consolidate_after, budgets))
}

fn claim_json(name: &str, created: &str, expire: &str) -> Value {
    json!({"metadata": {"name": name, "creationTimestamp": created,
                        "labels": {"karpenter.sh/nodepool": "default"}},
           "spec": {"expireAfter": expire, "requirements": [],
                    "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
           "status": {"nodeName": format!("node-{name}"),
                      "conditions": [{"type": "Initialized", "status": "True", "reason": "r",
                                      "message": "", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}})
}

fn claim(name: &str, created: &str, expire: &str) -> Arc<NodeClaim> {
    typed(claim_json(name, created, expire))
}

fn node(name: &str) -> Arc<Node> {
    typed(json!({"metadata": {"name": format!("node-{name}")}}))
}

fn pod(v: Value) -> Arc<Pod> {
    typed(v)
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
        pod(
            json!({"metadata": {"name": "w"}, "spec": {"nodeName": "node-c"}, "status": {"phase": "Running"}}),
        ),
        pod(
            json!({"metadata": {"name": "ds", "ownerReferences": [{"kind": "DaemonSet"}]},
               "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}}),
        ),
        pod(
            json!({"metadata": {"name": "done"}, "spec": {"nodeName": "node-b"}, "status": {"phase": "Succeeded"}}),
        ),
    ];
    let view = view(&pools, &claims, &nodes, &pods);
    let mut timers = Timers::default();
    let t0 = Instant::now();
    let now = at("2026-11-22T11:00:00Z");
    assert!(pass(&view, &mut timers, now, t0).is_empty());
    assert!(pass(&view, &mut timers, now, t0 + Duration::from_secs(24)).is_empty());
    let d = pass(&view, &mut timers, now, t0 + Duration::from_secs(25));
    // Budget 1: only one of a and b, never c.
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].nodeclaim == "a" || d[0].nodeclaim == "b");
    assert!(!d[0].expired);
    // While one is being deleted, the budget is used up.
    let mut deleting = claims.clone();
    let mut first = claim_json("a", "2026-11-22T10:00:00Z", "Never");
    first["metadata"]["deletionTimestamp"] = json!("2026-11-22T11:00:00Z");
    deleting[0] = typed(first);
    let view = View {
        nodeclaims: &deleting,
        ..view
    };
    assert!(pass(&view, &mut timers, now, t0 + Duration::from_secs(30)).is_empty());
}

#[test]
fn do_not_disrupt_never_and_uninitialized_claims_are_kept() {
    let nodes = [node("a")];
    let mut timers = Timers::default();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(3600);
    let now = at("2026-11-22T11:00:00Z");
    let mut annotated = claim_json("a", "2026-11-22T10:00:00Z", "Never");
    annotated["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    let mut uninitialized = claim_json("a", "2026-11-22T10:00:00Z", "Never");
    uninitialized["status"]["conditions"] = json!([]);
    let plain = || claim("a", "2026-11-22T10:00:00Z", "Never");
    for (p, c) in [
        (pool("0s", json!([{"nodes": "10"}])), typed(annotated)),
        (pool("Never", json!([{"nodes": "10"}])), plain()),
        (pool("0s", json!([{"nodes": "10"}])), typed(uninitialized)),
        (pool("0s", json!([{"nodes": "0"}])), plain()),
    ] {
        let (pools, claims) = ([p], [c]);
        let view = view(&pools, &claims, &nodes, &[]);
        pass(&view, &mut timers, now, t0);
        assert!(pass(&view, &mut timers, now, later).is_empty());
    }
}

#[test]
fn expired_claims_go_regardless_of_budgets() {
    let pools = [pool("Never", json!([{"nodes": "0"}]))];
    let claims = [
        claim("old", "2026-11-22T10:00:00Z", "30m"),
        claim("young", "2026-11-22T10:45:00Z", "30m"),
    ];
    let pods = [pod(
        json!({"metadata": {"name": "w"}, "spec": {"nodeName": "node-old"}, "status": {"phase": "Running"}}),
    )];
    let nodes = [node("old"), node("young")];
    let view = view(&pools, &claims, &nodes, &pods);
    let d = pass(
        &view,
        &mut Timers::default(),
        at("2026-11-22T11:00:00Z"),
        Instant::now(),
    );
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].nodeclaim.as_str(), d[0].expired), ("old", true));
}
