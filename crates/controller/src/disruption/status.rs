//! What a pass publishes besides its decisions: the `Consolidatable` condition of every
//! NodeClaim (status from `consolidateAfter`, message = its verdict), Events on NodePools,
//! and the disruption metrics. A condition is written only when it changes, conditional on
//! the resourceVersion it was computed from.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::NodeClaim;
use api::consts::conditions as types;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Outcome, Verdict};
use crate::metrics::{EligibleLabels, Metrics, NodePoolLabels, PoolReasonLabels};
use crate::objects::deleting;

/// The `Consolidatable` condition a NodeClaim should carry: `None` when it does not apply
/// (`consolidateAfter: Never`, not initialized), else (status, reason, message).
pub fn condition(v: &Verdict) -> Option<(&'static str, &'static str, String)> {
    let elapsed = v.consolidatable?;
    let reason = match (v.is_candidate(), elapsed) {
        (true, _) => "Candidate",
        (false, false) => "ConsolidateAfterNotElapsed",
        (false, true) => "Blocked",
    };
    let status = if elapsed {
        api::conditions::TRUE
    } else {
        api::conditions::FALSE
    };
    Some((status, reason, v.to_string()))
}

/// The claim's status with its `Consolidatable` condition set from `v`; `None` if unchanged.
pub fn updated(
    claim: &NodeClaim,
    v: Option<&Verdict>,
    now: Timestamp,
) -> Option<api::karpenter::NodeClaimStatus> {
    let mut status = claim.status.clone().unwrap_or_default();
    let changed = match v.and_then(condition) {
        Some((s, reason, message)) => api::conditions::set(
            &mut status.conditions,
            types::CONSOLIDATABLE,
            s,
            reason,
            &message,
            None,
            now,
        ),
        None => api::conditions::remove(&mut status.conditions, types::CONSOLIDATABLE),
    };
    changed.then_some(status)
}

/// Writes the changed `Consolidatable` conditions (a 409 means a newer object: the next
/// pass computes again from it).
pub async fn write_conditions(
    client: &kube::Client,
    claims: &[Arc<NodeClaim>],
    verdicts: &BTreeMap<String, Verdict>,
) {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let now = Timestamp::now();
    for c in claims.iter().filter(|c| !deleting(c.as_ref())) {
        let Some(status) = updated(c, verdicts.get(&c.name_any()), now) else {
            continue;
        };
        patch_status(
            &api,
            c,
            json!({"conditions": status.conditions}),
            "Consolidatable",
        )
        .await;
    }
}

/// Merge-patches part of a NodeClaim's status, conditional on the resourceVersion it was
/// computed from (a 404 or 409 means a newer object: the next pass decides on it).
pub async fn patch_status(
    api: &Api<NodeClaim>,
    c: &NodeClaim,
    status: serde_json::Value,
    what: &str,
) {
    let patch = json!({
        "metadata": {"resourceVersion": c.resource_version()},
        "status": status,
    });
    match api
        .patch_status(
            &c.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => {
            tracing::debug!(nodeclaim = %c.name_any(), error = %e, what, "writing NodeClaim status failed")
        }
    }
}

/// Sets the gauges from a pass.
pub fn record(metrics: &Metrics, outcome: &Outcome) {
    for (pool, reason, n) in &outcome.allowed {
        metrics
            .nodepools_allowed_disruptions
            .get_or_create(&PoolReasonLabels {
                nodepool: pool.clone(),
                reason: reason_label(*reason).into(),
            })
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
    let mut eligible: BTreeMap<&str, i64> = BTreeMap::new();
    for v in outcome.verdicts.values() {
        if let Some(r) = v.reason.filter(|_| v.is_candidate()) {
            *eligible.entry(reason_label(r)).or_default() += 1;
        }
    }
    for reason in ["underutilized", "empty", "drifted"] {
        metrics
            .voluntary_disruption_eligible_nodes
            .get_or_create(&EligibleLabels {
                reason: reason.into(),
            })
            .set(eligible.get(reason).copied().unwrap_or(0));
    }
    for (pool, score) in &outcome.scores {
        metrics
            .consolidation_score
            .get_or_create(&NodePoolLabels {
                nodepool: pool.clone(),
            })
            .set(if score.is_finite() { *score } else { f64::MAX });
    }
}

/// Karpenter's lower-case reason label.
pub use super::orchestrate::reason_label;

#[cfg(test)]
mod tests {
    use super::*;
    use api::karpenter::DisruptionReason;

    #[test]
    fn the_condition_follows_the_verdict_and_is_written_only_on_change() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}}
        }))
        .expect("claim");
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("ts");
        let waiting =
            Verdict::blocked("consolidateAfter not elapsed (4m left)").consolidatable(Some(false));
        let status = updated(&claim, Some(&waiting), now).expect("added");
        let c = api::conditions::get(&status.conditions, types::CONSOLIDATABLE).expect("condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "ConsolidateAfterNotElapsed")
        );
        assert_eq!(c.message, "consolidateAfter not elapsed (4m left)");
        let claim = NodeClaim {
            status: Some(status),
            ..claim
        };
        assert_eq!(
            updated(&claim, Some(&waiting), now),
            None,
            "no change, no write"
        );
        let candidate = Verdict::candidate(
            "replace",
            vec!["c".into()],
            Some("small".into()),
            0.26,
            DisruptionReason::Underutilized,
        );
        let status = updated(&claim, Some(&candidate), now).expect("changed");
        let c = api::conditions::get(&status.conditions, types::CONSOLIDATABLE).expect("condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Candidate")
        );
        assert_eq!(c.message, "candidate: replace with small (saves 0.26/h)");
        // Never / not initialized: the condition goes away.
        let claim = NodeClaim {
            status: Some(status),
            ..claim
        };
        let off = Verdict::blocked("consolidateAfter is Never");
        let status = updated(&claim, Some(&off), now).expect("removed");
        assert!(api::conditions::get(&status.conditions, types::CONSOLIDATABLE).is_none());
    }
}
