//! What is counted when a NodeClaim is disrupted (by disruption, repair or liveness).

use api::NodeClaim;

use crate::metrics::{CreatedLabels, Metrics, PodDisruptionLabels};

/// The per-NodeClaim disruption counts Karpenter records when a NodeClaim is disrupted
/// (`karpenter_nodeclaims_disrupted_total`, `karpenter_pods_disruption_initiated_total`),
/// with the reschedulable pods counted and the consolidation policy label (empty but for
/// consolidation) known.
pub(crate) fn record_disrupted_pods(
    metrics: &Metrics,
    claim: &NodeClaim,
    reason: &str,
    nodepool: &str,
    pods: usize,
    consolidation_policy: String,
) {
    metrics
        .nodeclaims_disrupted
        .get_or_create(&CreatedLabels {
            reason: reason.into(),
            nodepool: nodepool.into(),
        })
        .inc();
    let termination_mode = match claim
        .spec
        .termination_grace_period
        .as_deref()
        .map(api::duration::parse_duration)
    {
        None => "graceful",
        Some(Some(d)) if d.is_zero() => "forceful",
        Some(_) => "eventual",
    };
    metrics
        .pods_disruption_initiated
        .get_or_create(&PodDisruptionLabels {
            reason: reason.into(),
            nodepool: nodepool.into(),
            capacity_type: crate::nodeclaim::labels::capacity_type_of(claim),
            consolidation_policy,
            termination_mode: termination_mode.into(),
        })
        .inc_by(pods as u64);
}
