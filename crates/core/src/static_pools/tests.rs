//! The static loop's decisions on typed fixtures: scale up within `limits.nodes`, scale-down
//! order, crash safety of the creates, zone spread, the template claim; and the disruption
//! side: static drift replaced one for one, static pools never consolidated.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use api::{NodeClaim, NodePool};
use cloudprovider::InstanceTypes;
use cloudprovider::{InstanceType, PriceSource, Resources};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::scale::{Plan, plan, slot_name};
use crate::state::{Cluster, Objects};

pub(super) fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture"))
}

pub(super) fn now() -> Timestamp {
    "2026-11-24T10:00:00Z".parse().expect("timestamp")
}

pub(super) fn pool_with(replicas: i64, limits: Value, annotations: Value) -> Arc<NodePool> {
    typed(
        json!({"metadata": {"name": "fixed", "uid": "pool-uid", "annotations": annotations},
        "spec": {"replicas": replicas, "limits": limits,
            "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                "requirements": []}},
            "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "message": "", "lastTransitionTime": "2026-11-24T09:00:00Z"}]}}),
    )
}

fn pool(replicas: i64) -> Arc<NodePool> {
    pool_with(replicas, json!({}), json!({}))
}

/// A claim of pool `fixed`, merged with `extra`.
pub(super) fn claim(name: &str, extra: Value) -> Arc<NodeClaim> {
    let mut v = json!({"metadata": {"name": name, "creationTimestamp": "2026-11-24T09:00:00Z",
            "labels": {"karpenter.sh/nodepool": "fixed"}},
        "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}}});
    json_patch::merge(&mut v, &extra);
    typed(v)
}

/// A launched, registered, initialized claim on Node `node-<name>`.
pub(super) fn running(name: &str, extra: Value) -> Arc<NodeClaim> {
    let mut v = json!({"status": {"providerID": format!("kwok://{name}"),
        "nodeName": format!("node-{name}"),
        "conditions": [{"type": "Initialized", "status": "True", "reason": "r", "message": "",
            "lastTransitionTime": "2026-11-24T09:00:00Z"}]}});
    json_patch::merge(&mut v, &extra);
    claim(name, v)
}

pub(super) fn node(name: &str) -> Arc<Node> {
    typed(json!({"metadata": {"name": format!("node-{name}")},
        "spec": {"providerID": format!("kwok://{name}")}}))
}

fn pod(name: &str, on: &str, extra: Value) -> Arc<Pod> {
    let mut v = json!({"metadata": {"name": name, "namespace": "d",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
        "spec": {"nodeName": format!("node-{on}"), "containers": []},
        "status": {"phase": "Running"}});
    json_patch::merge(&mut v, &extra);
    typed(v)
}

pub(super) fn cluster(
    pools: &[Arc<NodePool>],
    claims: &[Arc<NodeClaim>],
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
) -> Cluster {
    Cluster::new(Objects {
        nodepools: pools.to_vec(),
        nodeclaims: claims.to_vec(),
        nodes: nodes.to_vec(),
        pods: pods.to_vec(),
        ..Objects::default()
    })
}

fn names(plan: &Plan) -> Vec<String> {
    plan.create.iter().map(|s| s.name.clone()).collect()
}

#[test]
fn scales_up_to_replicas_with_deterministic_distinct_names() {
    let p = pool(3);
    let c = cluster(std::slice::from_ref(&p), &[], &[], &[]);
    let out = plan(&p, &c, &BTreeMap::new(), &[], now());
    let want: Vec<String> = (0..3).map(|i| slot_name(&p, i)).collect();
    assert_eq!(names(&out), want);
    assert!(out.delete.is_empty() && !out.at_limit);
    assert_eq!(
        BTreeSet::from_iter(want.iter()).len(),
        3,
        "distinct slot names"
    );
    assert!(want[0].starts_with("fixed-") && want[0].len() == "fixed-".len() + 8);
    // One claim exists (slot 1): the two missing go to the lowest free slots.
    let c = cluster(
        std::slice::from_ref(&p),
        &[claim(&want[1], json!({}))],
        &[],
        &[],
    );
    let out = plan(&p, &c, &BTreeMap::new(), &[], now());
    assert_eq!(names(&out), vec![want[0].clone(), want[2].clone()]);
    // Another pool (another uid) never derives the same names.
    let other = typed::<NodePool>(json!({"metadata": {"name": "fixed", "uid": "other"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}}}}));
    assert_ne!(slot_name(&other, 0), want[0]);
}

#[test]
fn limits_nodes_caps_the_pool_counting_claims_being_deleted_and_in_flight() {
    let p = pool_with(5, json!({"nodes": "3"}), json!({}));
    let deleting = claim(
        "old",
        json!({"metadata": {"deletionTimestamp": "2026-11-24T09:59:00Z", "finalizers": ["f"]}}),
    );
    let in_flight = BTreeMap::from([("fixed-inflight".to_string(), None)]);
    let c = cluster(std::slice::from_ref(&p), &[deleting], &[], &[]);
    let out = plan(&p, &c, &in_flight, &[], now());
    assert_eq!(out.create.len(), 1, "3 allowed, 1 deleting, 1 in flight");
    assert!(out.at_limit);
    let out = plan(&p, &c, &BTreeMap::new(), &[], now());
    assert_eq!(out.create.len(), 2);
    // Creates in flight count: nothing more while the cache has not seen them.
    let p = pool(2);
    let two = BTreeMap::from([(slot_name(&p, 0), None), (slot_name(&p, 1), None)]);
    let c = cluster(std::slice::from_ref(&p), &[], &[], &[]);
    assert_eq!(plan(&p, &c, &two, &[], now()), Plan::default());
}

/// Karpenter #2534: a crash mid-scale must never leave more than `replicas` NodeClaims. The
/// API is a set of names; the operator creates one claim at a time and crashes after any
/// number of them; the restarted one decides from a cache that may lag anywhere between
/// "nothing" and the truth, without its in-flight records. Creates of a name that exists are
/// refused (409).
#[test]
fn a_crash_at_any_point_of_a_scale_never_exceeds_replicas() {
    const REPLICAS: usize = 4;
    let p = pool(REPLICAS as i64);
    let apply = |api: &mut BTreeSet<String>, out: &Plan, upto: usize| {
        for slot in out.create.iter().take(upto) {
            api.insert(slot.name.clone()); // an existing name: 409, no second object
            assert!(api.len() <= REPLICAS, "more than replicas: {api:?}");
        }
    };
    let view = |api: &BTreeSet<String>, seen: usize| {
        let claims: Vec<Arc<NodeClaim>> =
            api.iter().take(seen).map(|n| claim(n, json!({}))).collect();
        cluster(std::slice::from_ref(&p), &claims, &[], &[])
    };
    for crash_after in 0..=REPLICAS {
        for cache_sees in 0..=crash_after {
            let mut api = BTreeSet::new();
            let first = plan(&p, &view(&api, 0), &BTreeMap::new(), &[], now());
            apply(&mut api, &first, crash_after);
            // Restarted: a lagging cache, no in-flight records.
            let again = plan(&p, &view(&api, cache_sees), &BTreeMap::new(), &[], now());
            apply(&mut api, &again, usize::MAX);
            assert_eq!(
                api.len(),
                REPLICAS,
                "crash after {crash_after}, cache saw {cache_sees}"
            );
            // Caught up: nothing more to do.
            let settled = plan(&p, &view(&api, usize::MAX), &BTreeMap::new(), &[], now());
            assert_eq!(settled, Plan::default());
        }
    }
}

#[test]
fn scales_down_unresolved_then_empty_then_cheapest_do_not_disrupt_last() {
    let p = pool(1);
    let claims = [
        running("busy", json!({})),
        running("cheap", json!({})),
        running("protected", json!({})),
        running("empty", json!({})),
        claim("unlaunched", json!({})),
    ];
    let nodes = ["busy", "cheap", "protected", "empty"].map(node);
    let pods = [
        pod("a", "busy", json!({})),
        pod("b", "busy", json!({})),
        pod("c", "cheap", json!({})),
        pod(
            "d",
            "protected",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
        ),
        // A DaemonSet pod does not make a node non-empty.
        pod(
            "ds",
            "empty",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "v", "controller": true}]}}),
        ),
    ];
    let c = cluster(std::slice::from_ref(&p), &claims, &nodes, &pods);
    let out = plan(&p, &c, &BTreeMap::new(), &[], now());
    assert_eq!(out.delete, vec!["unlaunched", "empty", "cheap", "busy"]);
    assert!(out.create.is_empty());
    // Replicas 3: the first two only.
    let p3 = pool(3);
    let c = cluster(std::slice::from_ref(&p3), &claims, &nodes, &pods);
    assert_eq!(
        plan(&p3, &c, &BTreeMap::new(), &[], now()).delete,
        vec!["unlaunched", "empty"]
    );
}

#[test]
fn scale_down_skips_claims_being_replaced_or_deleted_and_waits_for_creates() {
    let p = pool(1);
    let in_command = running(
        "candidate",
        json!({"metadata": {"annotations": {api::consts::annotations::DISRUPTION_COMMAND: "{}"}}}),
    );
    let gone = running(
        "gone",
        json!({"metadata": {"deletionTimestamp": "2026-11-24T09:59:00Z", "finalizers": ["f"]}}),
    );
    // A surge-first replacement in progress: candidate + replacement = replicas + 1.
    let claims = [in_command, gone, running("replacement", json!({}))];
    let nodes = ["candidate", "gone", "replacement"].map(node);
    let c = cluster(std::slice::from_ref(&p), &claims, &nodes, &[]);
    assert_eq!(plan(&p, &c, &BTreeMap::new(), &[], now()), Plan::default());
    // Two running, one too many, but a create is in flight: wait.
    let claims = [running("x", json!({})), running("y", json!({}))];
    let c = cluster(
        std::slice::from_ref(&p),
        &claims,
        &[node("x"), node("y")],
        &[],
    );
    let in_flight = BTreeMap::from([("z".to_string(), None)]);
    assert!(plan(&p, &c, &in_flight, &[], now()).delete.is_empty());
    assert_eq!(plan(&p, &c, &BTreeMap::new(), &[], now()).delete.len(), 1);
}

#[test]
fn zone_spread_fills_the_emptiest_zone_first() {
    let p = pool(5);
    let zones = ["z1", "z2", "z3"].map(String::from);
    let in_z1 = claim(
        "a",
        json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "z1"}}}),
    );
    let in_z2 = claim(
        "b",
        json!({"spec": {"requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]}]}}),
    );
    let in_flight = BTreeMap::from([("c".to_string(), Some("z1".to_string()))]);
    let c = cluster(std::slice::from_ref(&p), &[in_z1, in_z2], &[], &[]);
    let out = plan(&p, &c, &in_flight, &zones, now());
    let got: Vec<Option<&str>> = out.create.iter().map(|s| s.zone.as_deref()).collect();
    assert_eq!(got, vec![Some("z3"), Some("z2")], "z1: 2, z2: 1, z3: 0");
    let out = plan(&p, &c, &in_flight, &[], now());
    assert!(out.create.iter().all(|s| s.zone.is_none()), "no spread");
}

const TYPES: [(&str, i64, f64, &str); 3] = [
    ("big", 8, 0.8, "z1"),
    ("small", 2, 0.2, "z2"),
    ("mid", 4, 0.4, "z1"),
];

fn catalog() -> InstanceTypes {
    InstanceTypes {
        instance_types: TYPES
            .iter()
            .map(|(name, cpu, price, zone)| {
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
                    labels: BTreeMap::from([("kubernetes.io/arch".into(), "amd64".into())]),
                    taints: Vec::new(),
                    offerings: vec![cloudprovider::Offering::new(
                        "t",
                        Some(zone),
                        "on-demand",
                        *price,
                        PriceSource::Annotation,
                    )],
                    capacity_overlaid: false,
                }
            })
            .collect(),
        ..InstanceTypes::default()
    }
}

#[test]
fn the_template_claim_lists_compatible_types_cheapest_first_and_asks_for_nothing() {
    let p = pool_with(2, json!({}), json!({}));
    let mut p = (*p).clone();
    p.spec.template.spec.taints = vec![api::karpenter::Taint {
        key: "dedicated".into(),
        value: Some("x".into()),
        effect: api::karpenter::TaintEffect::NoSchedule,
        time_added: None,
    }];
    let any = crate::model::convert::Availability::Ignored;
    let nc = super::template::claim(&p, &catalog(), any, None, Some("fixed-0")).expect("claim");
    let v = serde_json::to_value(&nc).expect("json");
    assert_eq!(v["metadata"]["name"], "fixed-0");
    assert!(v["metadata"].get("generateName").is_none());
    assert_eq!(v["metadata"]["labels"]["karpenter.sh/nodepool"], "fixed");
    assert_eq!(
        v["spec"]["taints"][0]["key"], "dedicated",
        "the pool's taints"
    );
    let types = nc
        .spec
        .requirements
        .iter()
        .find(|r| r.key == scheduling::LABEL_INSTANCE_TYPE)
        .map(|r| r.values.clone());
    assert_eq!(
        types,
        Some(vec!["small".into(), "mid".into(), "big".into()])
    );
    let requests = nc.spec.resources.as_ref().map(|r| r.requests.len());
    assert_eq!(requests, Some(0), "requests nothing");
    // In a zone: only the types offered there.
    let nc = super::template::claim(&p, &catalog(), any, Some("z1"), None).expect("claim");
    let types = nc
        .spec
        .requirements
        .iter()
        .find(|r| r.key == scheduling::LABEL_INSTANCE_TYPE)
        .map(|r| r.values.clone());
    assert_eq!(types, Some(vec!["mid".into(), "big".into()]));
    assert_eq!(nc.metadata.generate_name.as_deref(), Some("fixed-"));
    assert_eq!(
        super::template::zones(&p, &catalog(), any),
        vec!["z1", "z2"]
    );
    // Requirements no offering meets: an error, not a claim.
    p.spec.template.spec.requirements =
        vec![api::karpenter::NodeSelectorRequirementWithMinValues {
            key: "kubernetes.io/arch".into(),
            operator: api::karpenter::Operator::In,
            values: vec!["arm64".into()],
            min_values: None,
        }];
    assert!(super::template::claim(&p, &catalog(), any, None, None).is_err());
}

#[test]
fn in_flight_creates_are_dropped_once_cached_or_stale() {
    let flight = super::InFlight::default();
    let t0 = Instant::now();
    flight.record("a", "fixed", Some("z1".into()), t0);
    flight.record("b", "fixed", None, t0);
    flight.record("c", "other", None, t0);
    let p = pool(3);
    let c = cluster(std::slice::from_ref(&p), &[claim("a", json!({}))], &[], &[]);
    let got = flight.of_pool("fixed", &c, t0);
    assert_eq!(
        got,
        BTreeMap::from([("b".to_string(), None)]),
        "a is cached"
    );
    let later = t0 + super::IN_FLIGHT_TTL;
    assert!(flight.of_pool("fixed", &c, later).is_empty(), "b is stale");
    flight.record("d", "fixed", None, later);
    flight.forget("d");
    assert!(flight.of_pool("fixed", &c, later).is_empty(), "refused");
}
