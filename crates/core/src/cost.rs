//! What disrupting a node costs, as Karpenter v1.15 counts it (`pkg/utils/disruption`):
//!
//! - a pod's eviction cost: 1, plus its `karpenter.sh/disruption-cost` / 2^27 (an int32;
//!   only when that annotation is absent, its `controller.kubernetes.io/pod-deletion-cost`
//!   instead; a value that is not a base-10 int32 counts as absent but still hides the
//!   fallback), plus its priority / 2^25, clamped to ±10;
//! - a node's reschedule cost (what consolidation weighs and sorts by, price per cost):
//!   1 + Σ max(0, eviction cost) over its reschedulable pods;
//! - a node's disruption cost (what repair breaks ties with, cheapest first): Σ eviction
//!   cost over all its pods, times the share of its lifetime (`expireAfter`) left.
//!
//! Pure functions of typed objects.

use api::NodeClaim;
use api::consts::annotations::{DISRUPTION_COST, POD_DELETION_COST};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::objects::annotation;

/// The user's cost of evicting `pod` (the annotation's value / 2^27), if it states one.
fn annotated(pod: &Pod) -> f64 {
    let value = match annotation(pod, DISRUPTION_COST) {
        Some(v) => Some(v),
        None => annotation(pod, POD_DELETION_COST),
    };
    value
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(0.0, |v| f64::from(v) / 2f64.powi(27))
}

/// The cost of evicting one pod (Karpenter's `EvictionCost`).
pub(crate) fn eviction_cost(pod: &Pod) -> f64 {
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    (1.0 + annotated(pod) + f64::from(priority) / 2f64.powi(25)).clamp(-10.0, 10.0)
}

/// A node's `RescheduleDisruptionCost`: 1 + Σ max(0, eviction cost) over its reschedulable
/// pods.
pub(crate) fn disruption_cost(reschedulable: &[&Pod]) -> f64 {
    1.0 + reschedulable
        .iter()
        .map(|p| eviction_cost(p).max(0.0))
        .sum::<f64>()
}

/// The share of `claim`'s lifetime left at `now`, in [0, 1]: 1 without an `expireAfter`
/// (`Never`, or unreadable), falling to 0 as it nears expiry (Karpenter's
/// `LifetimeRemaining`).
pub(crate) fn lifetime_remaining(claim: &NodeClaim, now: Timestamp) -> f64 {
    let Some(total) = api::duration::parse_duration(&claim.spec.expire_after) else {
        return 1.0;
    };
    let total = total.as_secs_f64();
    if total <= 0.0 {
        return 0.0;
    }
    let created = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let age = now.duration_since(created).as_secs_f64();
    ((total - age) / total).clamp(0.0, 1.0)
}

/// A node's disruption cost (Karpenter's candidate `DisruptionCost`): Σ eviction cost over
/// all its `pods` (not only the reschedulable ones), times its lifetime remaining.
pub(crate) fn node_disruption_cost(pods: &[&Pod], claim: &NodeClaim, now: Timestamp) -> f64 {
    pods.iter().map(|p| eviction_cost(p)).sum::<f64>() * lifetime_remaining(claim, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn web(annotations: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "w", "namespace": "default", "annotations": annotations},
            "spec": {"containers": []}
        }))
        .expect("pod")
    }

    #[test]
    fn disruption_cost_counts_priority_and_deletion_cost() {
        let plain = web(json!({}));
        assert_eq!(eviction_cost(&plain), 1.0);
        let cheap = web(json!({POD_DELETION_COST: "-2147483648"}));
        assert_eq!(eviction_cost(&cheap), -10.0_f64.max(1.0 - 16.0));
        let mut important = web(json!({}));
        important.spec.as_mut().expect("spec").priority = Some(1 << 26);
        assert_eq!(eviction_cost(&important), 3.0);
        assert_eq!(disruption_cost(&[&plain, &cheap, &important]), 5.0);
        assert_eq!(disruption_cost(&[]), 1.0);
    }

    #[test]
    fn disruption_cost_annotation_wins_over_pod_deletion_cost() {
        let two = 1i64 << 27;
        // karpenter.sh/disruption-cost alone, and over pod-deletion-cost.
        let own = web(json!({DISRUPTION_COST: two.to_string()}));
        assert_eq!(eviction_cost(&own), 2.0);
        let both = web(json!({DISRUPTION_COST: two.to_string(), POD_DELETION_COST: "-2147483648"}));
        assert_eq!(eviction_cost(&both), 2.0);
        // Only pod-deletion-cost: the fallback.
        let fallback = web(json!({POD_DELETION_COST: two.to_string()}));
        assert_eq!(eviction_cost(&fallback), 2.0);
        // Present but not an int32: ignored, and the fallback is not read either.
        for bad in ["x", "1.5", "99999999999", "0xff", "", " 100 "] {
            let p = web(json!({DISRUPTION_COST: bad, POD_DELETION_COST: "2000000000"}));
            assert_eq!(eviction_cost(&p), 1.0, "{bad:?}");
        }
        let p = web(json!({POD_DELETION_COST: "lots"}));
        assert_eq!(eviction_cost(&p), 1.0);
    }

    fn claim(created: &str, expire_after: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "creationTimestamp": created},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                     "requirements": [], "expireAfter": expire_after}
        }))
        .expect("claim")
    }

    #[test]
    fn lifetime_remaining_scales_the_node_cost_down_towards_expiry() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("now");
        let young = claim("2026-11-22T10:00:00Z", "10h");
        let half = claim("2026-11-22T05:00:00Z", "10h");
        let old = claim("2026-11-21T10:00:00Z", "10h");
        let never = claim("2026-11-01T10:00:00Z", "Never");
        assert_eq!(lifetime_remaining(&young, now), 1.0);
        assert_eq!(lifetime_remaining(&half, now), 0.5);
        assert_eq!(lifetime_remaining(&old, now), 0.0);
        assert_eq!(lifetime_remaining(&never, now), 1.0);
        let (a, b) = (web(json!({})), web(json!({})));
        assert_eq!(node_disruption_cost(&[&a, &b], &young, now), 2.0);
        assert_eq!(node_disruption_cost(&[&a, &b], &half, now), 1.0);
        assert_eq!(node_disruption_cost(&[], &young, now), 0.0);
    }
}
