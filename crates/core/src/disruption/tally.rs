//! The disruption counts recorded when a decision is taken and when a NodeClaim is
//! disrupted, with Karpenter's names and labels.

use api::NodeClaim;
use kube::ResourceExt;

use crate::metrics::{DecisionLabels, Metrics, PoolDecisionLabels, TerminateFirstLabels};
use crate::state::ClusterState;

/// A decision taken: `karpenter_voluntary_disruption_decisions_total` and its per-NodePool
/// twin `…_decisions_by_nodepool_total`.
pub(crate) fn record_decision(
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

/// A NodeClaim deleted before its replacement launches:
/// `karpenter_voluntary_disruption_terminate_first_decisions_total`.
pub(crate) fn record_terminate_first(metrics: &Metrics, nodepool: &str, reason: &str, why: &str) {
    metrics
        .terminate_first_decisions
        .get_or_create(&TerminateFirstLabels {
            nodepool: nodepool.into(),
            reason: reason.into(),
            terminate_first_reason: why.into(),
        })
        .inc();
}

/// The per-NodeClaim disruption counts Karpenter records when a NodeClaim is disrupted:
/// `karpenter_nodeclaims_disrupted_total` (ours: reason and nodepool) and
/// `karpenter_pods_disruption_initiated_total`, by the reschedulable pods on its Node (as
/// of `state`).
pub(crate) fn record_disrupted(
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
                .filter(|p| crate::blockers::reschedulable(p))
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
    crate::nodeclaim::disrupted::record_disrupted_pods(
        metrics,
        claim,
        reason,
        nodepool,
        pods,
        consolidation_policy,
    );
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
