//! The small readers of a claim the loops share: what its labels say of the offering it was
//! launched on and of its NodePool, and what its provider says of that offering where a
//! label does not (`CloudProvider::get`'s instance).

use api::NodeClaim;
use kube::ResourceExt;

use cloudprovider::Instance;

/// The offering a claim was launched on as its provider says (empty before launch, or when
/// the provider does not say).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) instance_type: String,
    pub(crate) zone: Option<String>,
    pub(crate) capacity_type: String,
}

impl Recorded {
    /// What the provider says of the offering of its `instance`.
    pub(crate) fn of(instance: Option<&Instance>) -> Recorded {
        instance
            .map(|i| Recorded {
                instance_type: i.instance_type.clone(),
                zone: i.zone.clone(),
                capacity_type: i.capacity_type.clone(),
            })
            .unwrap_or_default()
    }
}

/// The capacity-type label of a claim (empty before launch).
pub(crate) fn capacity_type_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(api::consts::labels::CAPACITY_TYPE)
        .cloned()
        .unwrap_or_default()
}

/// The zone of a claim: its zone label (the launch records it from the chosen offering);
/// empty when it has none.
pub(crate) fn zone_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(api::consts::labels::ZONE)
        .cloned()
        .unwrap_or_default()
}

/// The NodePool label of a claim (empty for a hand-made claim without one).
pub fn nodepool_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(api::consts::labels::NODEPOOL)
        .cloned()
        .unwrap_or_default()
}
