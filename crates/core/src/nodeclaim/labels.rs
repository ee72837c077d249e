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

/// The offering labels a launched claim lacks, from what its provider says of its instance
/// (Karpenter's launch writes the labels `Create` returns, the claim's own winning): a
/// provider that records its offering before it launches leaves nothing to add.
pub(crate) fn missing_offering_labels(
    claim: &NodeClaim,
    instance: &Instance,
) -> std::collections::BTreeMap<String, String> {
    use api::consts::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
    let have = claim.labels();
    [
        (INSTANCE_TYPE, Some(&instance.instance_type)),
        (ZONE, instance.zone.as_ref()),
        (CAPACITY_TYPE, Some(&instance.capacity_type)),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v.filter(|v| !v.is_empty())?)))
    .filter(|(k, _)| !have.contains_key(*k))
    .map(|(k, v)| (k.to_string(), v.clone()))
    .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_offering_labels_the_claim_lacks_are_added() {
        let mut claim = NodeClaim::new("c", Default::default());
        let instance = Instance {
            instance_type: "small".into(),
            zone: Some("zone-a".into()),
            capacity_type: "on-demand".into(),
            ..Instance::default()
        };
        let missing = missing_offering_labels(&claim, &instance);
        assert_eq!(missing.len(), 3, "{missing:?}");
        assert_eq!(missing[api::consts::labels::INSTANCE_TYPE], "small");
        // The claim's own label wins, and an empty answer adds nothing.
        claim
            .labels_mut()
            .insert(api::consts::labels::CAPACITY_TYPE.into(), "spot".into());
        let zoneless = Instance {
            zone: None,
            instance_type: String::new(),
            ..instance
        };
        assert!(missing_offering_labels(&claim, &zoneless).is_empty());
    }
}
