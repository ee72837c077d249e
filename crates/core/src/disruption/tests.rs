//! Decisions of a whole pass, on typed fixtures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use api::karpenter::DisruptionReason;
use api::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::candidates::Candidate;
use super::simulate::Simulate;
use super::{Timers, View, decide};
use crate::state::{Cluster, Objects};

/// A simulation in which every candidate's pods fit elsewhere (no replacements).
pub(super) struct NoSim;

impl Simulate for NoSim {
    fn replacements(&self, _: &View, _: &[&Candidate]) -> Result<Vec<NodeClaim>, String> {
        Ok(Vec::new())
    }
}

fn cluster(
    nodepools: &[Arc<NodePool>],
    nodeclaims: &[Arc<NodeClaim>],
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
) -> Cluster {
    Cluster::new(Objects {
        nodepools: nodepools.to_vec(),
        nodeclaims: nodeclaims.to_vec(),
        nodes: nodes.to_vec(),
        pods: pods.to_vec(),
        ..Objects::default()
    })
}

fn view(cluster: &Cluster) -> View<'_> {
    View {
        cluster,
        catalog: &super::no_catalog,
        manual_drift: &super::no_manual_drift,
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
    let c = cluster(&pools, &claims, &nodes, &pods);
    let view = view(&c);
    let mut timers = Timers::default();
    let t0 = Instant::now();
    // Initialized at 10:00:00, consolidateAfter 10s, validation 15s: due at 10:00:25.
    assert!(pass(&view, &mut timers, at("2026-11-22T10:00:24Z"), t0).is_empty());
    let now = at("2026-11-22T10:00:25Z");
    let d = pass(&view, &mut timers, now, t0);
    // Budget 1: only one of a and b, never c.
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].nodeclaim == "a" || d[0].nodeclaim == "b");
    assert!(!d[0].expired);
    // While one is being deleted, the budget is used up.
    let mut deleting = claims.clone();
    let mut first = claim_json("a", "2026-11-22T10:00:00Z", "Never");
    first["metadata"]["deletionTimestamp"] = json!("2026-11-22T11:00:00Z");
    deleting[0] = typed(first);
    let c = cluster(&pools, &deleting, &nodes, &pods);
    let view = super::View {
        cluster: &c,
        ..view
    };
    assert!(pass(&view, &mut timers, now, t0 + Duration::from_secs(30)).is_empty());
}

#[test]
fn a_pool_without_consolidate_after_consolidates_after_0s_as_karpenter_defaults_it() {
    // Karpenter v1.15: consolidateAfter is optional, default 0s (with or without a
    // `disruption` block).
    let mut without = pool_json("unused", json!([{"nodes": "10"}]));
    let disruption = without["spec"]["disruption"]
        .as_object_mut()
        .expect("disruption");
    disruption.remove("consolidateAfter");
    let mut bare = without.clone();
    bare["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("disruption");
    for pool in [typed::<NodePool>(without), typed(bare)] {
        assert_eq!(pool.spec.disruption.consolidate_after, "0s");
        assert_eq!(
            super::candidates::consolidate_after(&pool.spec),
            Some(Duration::ZERO)
        );
        let claims = [claim("idle", "2026-11-22T10:00:00Z", "Never")];
        let c = cluster(&[pool], &claims, &[node("idle")], &[]);
        let v = view(&c);
        let mut timers = Timers::default();
        let t0 = Instant::now();
        // Initialized at 10:00:00, consolidateAfter 0s, validation 15s: due at 10:00:15.
        assert!(pass(&v, &mut timers, at("2026-11-22T10:00:14Z"), t0).is_empty());
        let d = pass(&v, &mut timers, at("2026-11-22T10:00:15Z"), t0);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].nodeclaim, "idle");
    }
}

#[test]
fn emptiness_counts_from_the_objects_so_a_restart_loses_nothing() {
    let pools = [pool("1m", json!([{"nodes": "10"}]))];
    let mut recent = claim_json("busy-until-now", "2026-11-22T10:00:00Z", "Never");
    recent["status"]["lastPodEventTime"] = json!("2026-11-22T10:59:30Z");
    let claims = [
        claim("idle", "2026-11-22T10:00:00Z", "Never"),
        typed(recent),
    ];
    let nodes = [node("idle"), node("busy-until-now")];
    let c = cluster(&pools, &claims, &nodes, &[]);
    let v = view(&c);
    let now = at("2026-11-22T11:00:00Z");
    // A process that just started (fresh timers, first pass): the idle node has been
    // consolidatable since 10:01 and goes at once; the other's last pod left 30 s ago.
    let out = super::pass(&v, &mut Timers::default(), &NoSim, now, Instant::now());
    let names: Vec<&str> = out.decisions.iter().map(|d| d.nodeclaim.as_str()).collect();
    assert_eq!(names, ["idle"]);
    assert_eq!(out.decisions[0].reason, DisruptionReason::Empty);
    let waiting = &out.verdicts["busy-until-now"];
    assert_eq!(
        waiting.to_string(),
        "empty; deleted 15s after consolidateAfter elapses"
    );
    assert_eq!(waiting.consolidatable, Some(false));
    // Another fresh start 45 s later (1m + 15s after the last pod event): it goes too.
    let later = at("2026-11-22T11:00:45Z");
    let d = pass(&v, &mut Timers::default(), later, Instant::now());
    assert!(d.iter().any(|d| d.nodeclaim == "busy-until-now"), "{d:?}");
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
        let c = cluster(&pools, &claims, &nodes, &[]);
        let view = view(&c);
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
    let c = cluster(&pools, &claims, &nodes, &pods);
    let view = view(&c);
    let d = pass(
        &view,
        &mut Timers::default(),
        at("2026-11-22T11:00:00Z"),
        Instant::now(),
    );
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].nodeclaim.as_str(), d[0].expired), ("old", true));
}

/// A running pod of a ReplicaSet on `node-<node>` requesting `cpu`.
fn pod_on(name: &str, node: &str, cpu: &str) -> Arc<Pod> {
    pod(json!({"metadata": {"name": name, "namespace": "d",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
        "spec": {"nodeName": format!("node-{node}"),
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"}}))
}

/// One replacement per candidate, except for `misfit` whose pods fit nowhere.
struct OneEach {
    misfit: &'static str,
}

impl Simulate for OneEach {
    fn replacements(&self, _: &View, cs: &[&Candidate]) -> Result<Vec<NodeClaim>, String> {
        if cs.iter().any(|c| c.name == self.misfit) {
            return Err("no room".into());
        }
        Ok(cs
            .iter()
            .map(|c| (*claim(&format!("{}-new", c.name), "2026-11-22T11:00:00Z", "Never")).clone())
            .collect())
    }
}

fn drifted_claim(name: &str, created: &str) -> Value {
    let mut c = claim_json(name, created, "Never");
    c["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(
            json!({"type": "Drifted", "status": "True", "reason": "NodeClassDrifted",
                     "message": "Kubernetes version v1.35.0 -> v1.36.0",
                     "lastTransitionTime": "2026-11-22T10:00:00Z"}),
        );
    c
}

#[test]
fn drift_replaces_the_oldest_empty_first_one_per_pass_within_budget() {
    let pools = [pool("Never", json!([{"nodes": "2"}]))];
    let claims = [
        typed(drifted_claim("young-empty", "2026-11-22T10:30:00Z")),
        typed(drifted_claim("old-busy", "2026-11-22T09:00:00Z")),
        typed(drifted_claim("old-empty", "2026-11-22T10:00:00Z")),
        claim("fresh", "2026-11-22T10:00:00Z", "Never"),
    ];
    let nodes = [
        node("young-empty"),
        node("old-busy"),
        node("old-empty"),
        node("fresh"),
    ];
    let pods = [pod_on("p", "old-busy", "1")];
    let c = cluster(&pools, &claims, &nodes, &pods);
    let v = view(&c);
    let now = at("2026-11-22T11:00:00Z");
    let sim = OneEach { misfit: "" };
    let d = decide(&v, &mut Timers::default(), &sim, now, Instant::now());
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].nodeclaim, "old-empty");
    assert_eq!(d[0].reason, DisruptionReason::Drifted);
    assert!(
        d[0].message.contains("NodeClassDrifted"),
        "{}",
        d[0].message
    );
    let surge = d[0].surge.as_ref().expect("surge-first");
    assert_eq!(surge.replacements.len(), 1);
    // With old-empty in a command (budget 2, one used), young-empty goes next; then the
    // budget is spent.
    let mut in_command = drifted_claim("old-empty", "2026-11-22T10:00:00Z");
    in_command["metadata"]["annotations"] = json!({super::orchestrate::COMMAND: "{\"id\":\"d1\",\"reason\":\"Drifted\",\"started\":\"2026-11-22T11:00:00Z\",\"replacements\":1}"});
    let claims2 = [
        claims[0].clone(),
        claims[1].clone(),
        typed(in_command),
        claims[3].clone(),
    ];
    let c = cluster(&pools, &claims2, &nodes, &pods);
    let v = view(&c);
    let mut timers = Timers::default();
    let d = decide(&v, &mut timers, &sim, now, Instant::now());
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].nodeclaim, "young-empty");
    let mut both = claims2.clone();
    both[0] = typed({
        let mut c = drifted_claim("young-empty", "2026-11-22T10:30:00Z");
        c["metadata"]["deletionTimestamp"] = json!("2026-11-22T11:00:00Z");
        c
    });
    let c = cluster(&pools, &both, &nodes, &pods);
    let v = view(&c);
    assert!(decide(&v, &mut timers, &sim, now, Instant::now()).is_empty());
    let blocked = timers.blocked();
    assert!(
        blocked.iter().any(|b| b.nodeclaim == "old-busy"
            && b.message == "drifted (NodeClassDrifted); blocked: budget Drifted: 0 allowed"),
        "{blocked:?}"
    );
}

#[test]
fn drift_is_blocked_by_pdbs_do_not_disrupt_misfits_and_manual_policy() {
    let pools = [pool("Never", json!([{"nodes": "10"}]))];
    let claims = [typed(drifted_claim("a", "2026-11-22T10:00:00Z"))];
    let nodes = [node("a")];
    let now = at("2026-11-22T11:00:00Z");
    let mut labelled = (*pod_on("p", "a", "1")).clone();
    labelled.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    let pods = [Arc::new(labelled)];
    let pdb = |allowed: i32| -> Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
        typed(json!({"metadata": {"name": "web", "namespace": "d"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1}}))
    };
    let run = |claims: &[Arc<NodeClaim>],
               pods: &[Arc<Pod>],
               pdbs: &[Arc<_>],
               manual: &[&str],
               sim: &OneEach| {
        let c = Cluster::new(Objects {
            pdbs: pdbs.to_vec(),
            ..cluster(&pools, claims, &nodes, pods).objects().clone()
        });
        let manual_drift = |nodeclass: &str| manual.contains(&nodeclass);
        let v = View {
            manual_drift: &manual_drift,
            ..view(&c)
        };
        let mut timers = Timers::default();
        let out = super::pass(&v, &mut timers, sim, now, Instant::now());
        let why: Vec<String> = timers.blocked().into_iter().map(|b| b.message).collect();
        // The verdict (`inspect --why`, the Consolidatable message) says what the event says.
        if let Some(w) = why.first() {
            assert_eq!(out.verdicts["a"].to_string(), *w);
        }
        (out.decisions.len(), why)
    };
    let fits = OneEach { misfit: "" };
    assert_eq!(
        run(&claims, &pods, &[pdb(1)], &[], &fits).0,
        1,
        "PDB allows one"
    );
    let (n, why) = run(&claims, &pods, &[pdb(0)], &[], &fits);
    assert_eq!(n, 0);
    assert_eq!(
        why,
        ["drifted (NodeClassDrifted); blocked: PDB d/web allows 0 (pod d/p)"]
    );
    // A terminationGracePeriod lets drift go ahead (the drain is bounded).
    let mut tgp = drifted_claim("a", "2026-11-22T10:00:00Z");
    tgp["spec"]["terminationGracePeriod"] = json!("1h");
    assert_eq!(run(&[typed(tgp)], &pods, &[pdb(0)], &[], &fits).0, 1);
    let mut keep = (*pods[0]).clone();
    keep.metadata.annotations = Some(
        [(
            "karpenter.sh/do-not-disrupt".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let (n, why) = run(&claims, &[Arc::new(keep)], &[], &[], &fits);
    assert_eq!(n, 0);
    assert_eq!(
        why,
        ["drifted (NodeClassDrifted); blocked: pod d/p has do-not-disrupt"]
    );
    let (n, why) = run(&claims, &pods, &[], &[], &OneEach { misfit: "a" });
    assert_eq!(n, 0);
    assert!(
        why[0].starts_with("drifted (NodeClassDrifted); blocked: its pods cannot be placed"),
        "{why:?}"
    );
    // The claims' NodeClass `n` leaves drift to the user (the provider says so).
    let (n, why) = run(&claims, &pods, &[], &["n"], &fits);
    assert_eq!(n, 0);
    assert!(
        why[0].starts_with(
            "drifted (NodeClassDrifted); blocked: its NodeClass's drift policy is Manual"
        ),
        "{why:?}"
    );
}

#[test]
fn a_rolled_back_candidate_waits_for_the_cooldown() {
    let pools = [pool("Never", json!([{"nodes": "10"}]))];
    let mut failed = drifted_claim("a", "2026-11-22T10:00:00Z");
    failed["metadata"]["annotations"] = json!({super::orchestrate::FAILED: "2026-11-22T10:58:00Z"});
    let claims = [typed(failed)];
    let nodes = [node("a")];
    let c = cluster(&pools, &claims, &nodes, &[]);
    let v = view(&c);
    let sim = OneEach { misfit: "" };
    let mut timers = Timers::default();
    let d = decide(
        &v,
        &mut timers,
        &sim,
        at("2026-11-22T11:00:00Z"),
        Instant::now(),
    );
    assert!(d.is_empty(), "{d:?}");
    let blocked = timers.blocked();
    assert!(
        blocked[0].message.contains("a replacement failed"),
        "{blocked:?}"
    );
    let d = decide(
        &v,
        &mut timers,
        &sim,
        at("2026-11-22T11:03:01Z"),
        Instant::now(),
    );
    assert_eq!(d.len(), 1, "tried again after 5 min");
}

#[test]
fn a_held_verdict_stands_unless_the_claim_is_part_of_a_move() {
    use super::Verdict;
    use std::collections::BTreeMap;
    let held = |why: &str| Verdict::blocked(why);
    let mut verdicts = BTreeMap::from([
        (
            "kept".to_string(),
            Verdict::blocked("pod d/p has do-not-disrupt").consolidatable(Some(true)),
        ),
        (
            "moved".to_string(),
            Verdict::candidate(
                "delete",
                vec!["moved".into()],
                None,
                0.1,
                DisruptionReason::Underutilized,
            ),
        ),
    ]);
    super::hold(
        &mut verdicts,
        BTreeMap::from([
            (
                "kept".to_string(),
                held("drifted (X); blocked: pod d/p has do-not-disrupt"),
            ),
            (
                "moved".to_string(),
                held("drifted (X); blocked: budget Drifted: 0 allowed"),
            ),
            (
                "alone".to_string(),
                held("drifted (X); blocked: budget Drifted: 0 allowed"),
            ),
        ]),
    );
    assert_eq!(
        verdicts["kept"],
        held("drifted (X); blocked: pod d/p has do-not-disrupt").consolidatable(Some(true)),
        "the drift verdict, with consolidation's Consolidatable state"
    );
    assert!(verdicts["moved"].is_candidate(), "a move wins");
    assert_eq!(verdicts["alone"].consolidatable, None);
    assert_eq!(
        verdicts["alone"].to_string(),
        "drifted (X); blocked: budget Drifted: 0 allowed"
    );
}

#[test]
fn a_pod_event_ends_the_consolidatable_condition_in_the_same_write() {
    use super::podevents::ending_consolidatable;
    let at = |s: &str| -> Timestamp { s.parse().expect("ts") };
    let mut v = claim_json("a", "2026-11-22T10:00:00Z", "Never");
    v["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(
            json!({"type": "Consolidatable", "status": "True", "reason": "Blocked",
                     "message": "m", "lastTransitionTime": "2026-11-22T10:00:10Z"}),
        );
    let with: Arc<NodeClaim> = typed(v);
    let without = claim("b", "2026-11-22T10:00:00Z", "Never");
    let now = at("2026-11-22T10:05:00Z");
    // consolidateAfter 10s counts again from the pod event: the condition goes with it.
    let status =
        ending_consolidatable(&with, &[pool("10s", json!([]))], now, now).expect("condition ends");
    assert_eq!(status.last_pod_event_time.map(|t| t.0), Some(now));
    assert!(
        api::conditions::get(&status.conditions, api::consts::conditions::CONSOLIDATABLE).is_none(),
        "Consolidatable removed"
    );
    assert!(
        api::conditions::get(&status.conditions, api::consts::conditions::INITIALIZED).is_some(),
        "other conditions kept"
    );
    // Nothing to end: no condition, or still elapsed (consolidateAfter 0s, or an old event).
    assert_eq!(
        ending_consolidatable(&without, &[pool("10s", json!([]))], now, now),
        None
    );
    assert_eq!(
        ending_consolidatable(&with, &[pool("0s", json!([]))], now, now),
        None
    );
    assert_eq!(
        ending_consolidatable(
            &with,
            &[pool("10s", json!([]))],
            at("2026-11-22T10:04:00Z"),
            now
        ),
        None
    );
}
