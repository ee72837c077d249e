//! The disruption side of static pools: a drifted static claim is replaced one for one
//! (surge-first under `limits.nodes`, else delete-first), within the `Drifted` budget, not
//! while the pool scales down; an empty static claim is never consolidated.

use std::sync::Arc;
use std::time::Instant;

use api::NodeClaim;
use api::karpenter::DisruptionReason;
use serde_json::json;

use super::tests::{claim, cluster, node, now, pool_with, running, typed};
use crate::disruption::candidates::Candidate;
use crate::disruption::simulate::Simulate;
use crate::disruption::{Decision, Timers, View, decide, no_catalog};

/// Plans one template claim per static replacement (named after the zone asked for).
struct Template;

impl Simulate for Template {
    fn replacements(&self, _: &View, _: &[&Candidate]) -> Result<Vec<NodeClaim>, String> {
        Ok(Vec::new())
    }

    fn static_replacement(
        &self,
        _: &View,
        pool: &str,
        zone: Option<&str>,
    ) -> Result<NodeClaim, String> {
        Ok(Arc::unwrap_or_clone(claim(
            &format!("{pool}-replacement-{}", zone.unwrap_or("any")),
            json!({}),
        )))
    }
}

fn drifted(name: &str) -> Arc<NodeClaim> {
    running(
        name,
        json!({"status": {"conditions": [
            {"type": "Initialized", "status": "True", "reason": "r", "message": "",
             "lastTransitionTime": "2026-11-24T09:00:00Z"},
            {"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": "hash",
             "lastTransitionTime": "2026-11-24T09:30:00Z"}]}}),
    )
}

/// The decisions of one pass over pool `fixed` (`replicas`, `limits`, `budget`) and the
/// claims `names` (drifted unless listed in `fresh`).
fn decisions(
    replicas: i64,
    limits: serde_json::Value,
    budget: &str,
    names: &[&str],
    fresh: &[&str],
) -> Vec<Decision> {
    let mut pool = (*pool_with(replicas, limits, json!({}))).clone();
    pool.spec.disruption.budgets =
        serde_json::from_value(json!([{"nodes": budget}])).expect("budgets");
    let claims: Vec<_> = names
        .iter()
        .map(|n| {
            if fresh.contains(n) {
                running(n, json!({}))
            } else {
                drifted(n)
            }
        })
        .collect();
    let nodes: Vec<_> = names.iter().map(|n| node(n)).collect();
    let c = cluster(&[Arc::new(pool)], &claims, &nodes, &[]);
    let view = View {
        cluster: &c,
        catalog: &no_catalog,
        manual_drift: &crate::disruption::no_manual_drift,
    };
    decide(
        &view,
        &mut Timers::default(),
        &Template,
        now(),
        Instant::now(),
    )
}

#[test]
fn drifted_static_claims_are_replaced_one_for_one_surge_first() {
    let out = decisions(2, json!({}), "100%", &["a", "b"], &[]);
    assert_eq!(out.len(), 2, "{out:?}");
    for d in &out {
        assert_eq!(d.reason, DisruptionReason::Drifted);
        let surge = d.surge.as_ref().expect("surge-first");
        assert_eq!(surge.replacements.len(), 1);
        assert_eq!(
            surge.replacements[0].metadata.name.as_deref(),
            Some("fixed-replacement-any")
        );
    }
}

#[test]
fn the_drifted_budget_paces_static_replacements() {
    let out = decisions(3, json!({}), "1", &["a", "b", "c"], &[]);
    assert_eq!(out.len(), 1);
    assert_eq!(decisions(3, json!({}), "0", &["a", "b", "c"], &[]).len(), 0);
}

#[test]
fn at_limits_nodes_a_drifted_static_claim_is_deleted_first() {
    // Limit 3, 2 claims: room for one replacement first.
    let out = decisions(2, json!({"nodes": "3"}), "100%", &["a", "b"], &[]);
    assert_eq!(out.len(), 1);
    assert!(out[0].surge.is_some());
    // At the limit: delete-first, the static loop refills.
    let out = decisions(2, json!({"nodes": "2"}), "100%", &["a", "b"], &[]);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|d| d.surge.is_none()), "{out:?}");
}

#[test]
fn a_surge_waits_for_room_being_freed_rather_than_deleting_first() {
    // Limit 3: b's sibling was replaced by r, its old node x is still being deleted; b
    // waits for x to go (then surges) instead of being deleted first.
    let mut pool = (*pool_with(2, json!({"nodes": "3"}), json!({}))).clone();
    pool.spec.disruption.budgets =
        serde_json::from_value(json!([{"nodes": "100%"}])).expect("budgets");
    let gone = running(
        "x",
        json!({"metadata": {"deletionTimestamp": "2026-11-24T09:59:00Z", "finalizers": ["f"]}}),
    );
    let pool = Arc::new(pool);
    let claims = [drifted("b"), running("r", json!({})), gone];
    let nodes = [node("b"), node("r"), node("x")];
    let pass = |claims: &[Arc<NodeClaim>], nodes: &[Arc<k8s_openapi::api::core::v1::Node>]| {
        let c = cluster(std::slice::from_ref(&pool), claims, nodes, &[]);
        let view = View {
            cluster: &c,
            catalog: &no_catalog,
            manual_drift: &crate::disruption::no_manual_drift,
        };
        decide(
            &view,
            &mut Timers::default(),
            &Template,
            now(),
            Instant::now(),
        )
    };
    let out = pass(&claims, &nodes);
    assert!(out.is_empty(), "{out:?}");
    // Once x is gone: b surges.
    let out = pass(&claims[..2], &nodes[..2]);
    assert_eq!(out.len(), 1);
    assert!(out[0].surge.is_some());
}

#[test]
fn no_static_drift_while_the_pool_scales_down() {
    assert!(decisions(1, json!({}), "100%", &["a", "b"], &[]).is_empty());
    assert_eq!(
        decisions(2, json!({}), "100%", &["a", "b"], &[]).len(),
        2,
        "sentinel"
    );
}

#[test]
fn static_claims_are_never_consolidation_candidates() {
    // Empty, initialized an hour ago, consolidateAfter 0s: a dynamic pool's would go.
    let dynamic = typed::<api::NodePool>(json!({"metadata": {"name": "dyn"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}},
            "disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]}}}));
    let dyn_claim = running(
        "d",
        json!({"metadata": {"labels": {"karpenter.sh/nodepool": "dyn"}}}),
    );
    let claims = [running("s", json!({})), dyn_claim];
    let c = cluster(
        &[pool_with(1, json!({}), json!({})), dynamic],
        &claims,
        &[node("s"), node("d")],
        &[],
    );
    let view = View {
        cluster: &c,
        catalog: &no_catalog,
        manual_drift: &crate::disruption::no_manual_drift,
    };
    let out = decide(
        &view,
        &mut Timers::default(),
        &Template,
        now(),
        Instant::now(),
    );
    let taken: Vec<&str> = out.iter().map(|d| d.nodeclaim.as_str()).collect();
    assert_eq!(taken, vec!["d"], "only the dynamic pool's empty node");
    assert_eq!(out[0].reason, DisruptionReason::Empty);
    let fresh = decisions(1, json!({}), "100%", &["a"], &["a"]);
    assert!(fresh.is_empty());
}
