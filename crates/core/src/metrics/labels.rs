//! The label sets of the operator's metrics (see the metrics module).

use prometheus_client::encoding::EncodeLabelSet;

/// No labels of its own: a per-cluster series that carries only `cluster` (in hub mode).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NoLabels {}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolLabels {
    pub nodepool: String,
}

/// A preflight check that held a launch, and the nodeclaim's nodepool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreflightLabels {
    pub check: String,
    pub nodepool: String,
}

/// An offering: its template, zone (empty when zone-less) and capacity type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct OfferingLabels {
    pub template: String,
    pub zone: String,
    pub capacity_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete`, `replace` or `terminate-first`.
    pub decision: String,
    /// `drifted`, `empty`, `underutilized`.
    pub reason: String,
    /// `single`, `multi`, `empty`, or empty for drift.
    pub consolidation_type: String,
}

/// `karpenter_nodeclaims_drifted_total`: the drift type (the Drifted condition's reason)
/// and the nodepool, as Karpenter's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    pub r#type: String,
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminatedLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
}

/// `karpenter_nodes_{created,terminated}_total`: nodepool and zone, as Karpenter's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub nodepool: String,
    pub zone: String,
}

/// `karpenter_voluntary_disruption_decisions_by_nodepool_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolDecisionLabels {
    pub nodepool: String,
    /// `delete`, `replace` or `terminate-first`.
    pub decision: String,
    pub reason: String,
    pub consolidation_type: String,
}

/// `karpenter_voluntary_disruption_terminate_first_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminateFirstLabels {
    pub nodepool: String,
    pub reason: String,
    pub terminate_first_reason: String,
}

/// `karpenter_pods_disruption_initiated_total`: Karpenter's labels of a disrupted NodeClaim.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodDisruptionLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
    /// The NodePool's consolidation policy in snake case for consolidation, else empty.
    pub consolidation_policy: String,
    /// `graceful` (no terminationGracePeriod), `eventual`, or `forceful` (zero).
    pub termination_mode: String,
}

/// A reboot's `result`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// Karpenter's labels of `karpenter_nodeclaims_unhealthy_disrupted_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnhealthyLabels {
    pub condition: String,
    pub nodepool: String,
    pub capacity_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub nodepool: String,
    pub resource_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClassLabels {
    pub nodeclass: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OverlayLabels {
    pub nodeoverlay: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EligibleLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolReasonLabels {
    pub nodepool: String,
    pub reason: String,
}

/// `karpenter_capi_launch_step_duration_seconds`: nodepool and step.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub nodepool: String,
    pub step: String,
}

/// Hub mode's per-cluster series: the engaged Cluster as `<namespace>/<name>`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub cluster: String,
}

/// Hub mode's count of Clusters by state (see `hub::status`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

/// `karpenter_pods_eviction_requests_total`: the Eviction API's response code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: String,
}

/// `karpenter_pods_drained_total`: why the pod's Node was drained.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainedLabels {
    pub reason: String,
}
