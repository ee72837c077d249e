//! The disruption counts recorded when a decision is taken and when a NodeClaim is
//! disrupted, with Karpenter's names and labels.

use api::NodeClaim;
use kube::ResourceExt;

use crate::metrics::{
    CreatedLabels, DecisionLabels, Metrics, PodDisruptionLabels, PoolDecisionLabels,
};
use crate::state::ClusterState;

/// A decision taken: `karpenter_voluntary_disruption_decisions_total` and its per-NodePool
/// twin `…_decisions_by_nodepool_total`.
pub fn record_decision(
    metrics: &Metrics,
    nodepool: &str,
    decision: &str,
    reason: &str,
    consolidation_type: &str,
) {
    metrics
        .disruption_decisions
        .get_or_create(&DecisionLabels {
            decision: decision.into(),
            reason: reason.into(),
            consolidation_type: consolidation_type.into(),
        })
        .inc();
    metrics
        .decisions_by_nodepool
        .get_or_create(&PoolDecisionLabels {
            nodepool: nodepool.into(),
            decision: decision.into(),
            reason: reason.into(),
            consolidation_type: consolidation_type.into(),
        })
        .inc();
}

/// The per-NodeClaim disruption counts Karpenter records when a NodeClaim is disrupted:
/// `karpenter_nodeclaims_disrupted_total` (ours: reason and nodepool) and
/// `karpenter_pods_disruption_initiated_total`, by the reschedulable pods on its Node (as
/// of `state`).
pub fn record_disrupted(
    metrics: &Metrics,
    state: &ClusterState,
    claim: &NodeClaim,
    reason: &str,
    nodepool: &str,
) {
    let cluster = state.current();
    let name = claim.name_any();
    let pods = cluster
        .node_of(&name)
        .and_then(|n| cluster.bound(&n.name_any()))
        .map_or(0, |b| {
            b.pods
                .iter()
                .filter(|p| super::blockers::reschedulable(p))
                .count()
        });
    // Karpenter reports a policy for consolidation only.
    let consolidation_policy = match reason {
        "underutilized" | "empty" => cluster
            .nodepools
            .iter()
            .find(|p| p.name_any() == nodepool)
            .map(|p| policy_label(&p.spec.disruption.consolidation_policy))
            .unwrap_or_default(),
        _ => String::new(),
    };
    record_disrupted_pods(metrics, claim, reason, nodepool, pods, consolidation_policy);
}

/// [`record_disrupted`] with the reschedulable pods counted and the consolidation policy
/// label (empty but for consolidation) known.
pub fn record_disrupted_pods(
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

/// A consolidation policy in snake case, as Karpenter's metric labels spell it.
fn policy_label(p: &api::karpenter::ConsolidationPolicy) -> String {
    match p {
        api::karpenter::ConsolidationPolicy::WhenEmpty => "when_empty",
        api::karpenter::ConsolidationPolicy::WhenEmptyOrUnderutilized => {
            "when_empty_or_underutilized"
        }
        api::karpenter::ConsolidationPolicy::Balanced => "balanced",
    }
    .into()
}
