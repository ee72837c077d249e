//! The small readers of a claim the loops share: what its labels say of the offering it was
//! launched on and of its NodePool, and what its provider recorded of that offering where a
//! label does not say (the Cluster API launch plan, `cloudprovider::clusterapi::plan`).

use api::NodeClaim;
use kube::ResourceExt;

use crate::cloudprovider::clusterapi::plan::Plan;

/// The offering a claim was launched on as its provider recorded it (empty before launch,
/// or when nothing was recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) instance_type: String,
    pub(crate) zone: Option<String>,
    pub(crate) capacity_type: String,
}

/// What the provider recorded of the offering `claim` was launched on.
pub(crate) fn recorded(claim: &NodeClaim) -> Recorded {
    Plan::of(claim)
        .map(|p| Recorded {
            instance_type: p.instance_type,
            zone: p.zone,
            capacity_type: p.capacity_type,
        })
        .unwrap_or_default()
}

/// The capacity-type label of a claim (empty before launch).
pub(crate) fn capacity_type_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(api::consts::labels::CAPACITY_TYPE)
        .cloned()
        .unwrap_or_default()
}

/// The zone of a claim: its zone label (the launch sets it from the chosen offering), else
/// the zone its provider recorded; empty when neither says.
pub(crate) fn zone_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(api::consts::labels::ZONE)
        .cloned()
        .or_else(|| recorded(claim).zone)
        .unwrap_or_default()
}

/// The NodePool label of a claim (empty for a hand-made claim without one).
pub(crate) fn nodepool_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(api::consts::labels::NODEPOOL)
        .cloned()
        .unwrap_or_default()
}
