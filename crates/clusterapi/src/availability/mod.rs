//! Offering availability, the Cluster API provider's own (Karpenter's providers keep theirs
//! too: the AWS provider's unavailable-offerings cache): which offerings can be launched now
//! and how many more of each. [`resolve`] marks a catalog's offerings with it before
//! `instance_types` hands the catalog to the core, which reads only
//! `Offering::available` and `Offering::count`.
//!
//! - [`unavailable`]: the launch-failure backoff per offering (template, zone, capacity type).
//! - [`counts`]: counted offerings: a template's use (NodeClaims planned on it, Machines
//!   from it) against its count annotations and free hosts.
//! - [`hosts`]: the host inventory (e.g. Metal3 BareMetalHosts) a NodeClass counts.

pub mod counts;
pub mod hosts;
pub mod unavailable;

use std::sync::Arc;

use templates::model::Catalog;

pub use counts::{DEFAULT_STALENESS, LaunchState, OfferingCounts};

/// `catalog` with each offering marked as `state` says: `available` false while it is backed
/// off after a failed launch, its count (and what to say once it is exhausted) when it is
/// counted. The catalog itself when nothing is backed off or counted (no copy).
pub fn resolve(catalog: &Arc<Catalog>, state: &LaunchState<'_>) -> Arc<Catalog> {
    let marks: Vec<Vec<_>> = catalog
        .instance_types
        .iter()
        .map(|it| {
            it.offerings
                .iter()
                .map(|o| (state.available(o), state.counts.count(catalog, it, o)))
                .collect()
        })
        .collect();
    let unchanged = marks
        .iter()
        .flatten()
        .all(|(available, count)| *available && count.is_none());
    if unchanged {
        return Arc::clone(catalog);
    }
    let mut resolved = Catalog::clone(catalog);
    for (it, marks) in resolved.instance_types.iter_mut().zip(marks) {
        for (o, (available, count)) in it.offerings.iter_mut().zip(marks) {
            o.available = available;
            o.count = count;
        }
    }
    Arc::new(resolved)
}

/// What the provisioner hears of the offerings: host changes of the NodeClasses'
/// inventories, each first ending the backoff of the templates a host was freed for.
pub(crate) fn changes(
    inventory: hosts::Inventory,
    unavailable: Arc<unavailable::UnavailableOfferings>,
) -> karpenter_core::provisioning::OfferingChanges {
    let free_hosts = std::sync::Mutex::new(std::collections::HashMap::new());
    let changes = inventory.subscribe();
    let seen = move || {
        let mut free = free_hosts.lock().unwrap_or_else(|p| p.into_inner());
        inventory.forgive_freed(&mut free, &unavailable);
    };
    karpenter_core::provisioning::OfferingChanges {
        changes,
        seen: Some(Arc::new(seen)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use templates::count::CountLimits;
    use templates::model::{InstanceType, PriceSource, TemplateRef};

    fn catalog() -> Arc<Catalog> {
        let template = |name: &str| TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
            kind: "Metal3MachineTemplate".into(),
            namespace: Some("capi".into()),
            name: name.into(),
        };
        let o = |t: &str, zone: &str| {
            templates::model::offering(
                &template(t),
                Some(zone.into()),
                "on-demand",
                1.0,
                PriceSource::Default,
            )
        };
        let limits = CountLimits {
            max_machines: Some(2),
            ..CountLimits::default()
        };
        Arc::new(Catalog {
            limits: [(template("counted").id(), limits)].into(),
            ..Catalog::of(vec![InstanceType {
                devices: None,
                volume_limits: Default::default(),
                name: "metal".into(),
                capacity: Default::default(),
                allocatable: Default::default(),
                labels: Default::default(),
                taints: Vec::new(),
                offerings: vec![o("counted", "z1"), o("free", "z1"), o("free", "z2")],
                capacity_overlaid: false,
            }])
        })
    }

    #[test]
    fn offerings_carry_the_backoff_and_the_count() {
        let c = catalog();
        let unavailable = unavailable::UnavailableOfferings::default();
        let counts = OfferingCounts::default();
        let now = std::time::Instant::now();
        let backed_off = &c.instance_types[0].offerings[2];
        unavailable.mark(
            unavailable::OfferingKey::of(backed_off),
            "InsufficientCapacity",
            now,
        );
        let state = LaunchState {
            unavailable: &unavailable,
            counts: &counts,
            now,
        };
        let resolved = resolve(&c, &state);
        let marks: Vec<(bool, Option<u32>)> = resolved.instance_types[0]
            .offerings
            .iter()
            .map(|o| (o.available, o.count.as_ref().map(|c| c.available)))
            .collect();
        assert_eq!(marks, [(true, Some(2)), (true, None), (false, None)]);
        // Nothing backed off or counted: the catalog as it is, not a copy.
        let plain = Arc::new(Catalog {
            limits: Default::default(),
            ..Catalog::clone(&c)
        });
        let fresh = unavailable::UnavailableOfferings::default();
        let state = LaunchState {
            unavailable: &fresh,
            counts: &counts,
            now,
        };
        assert!(Arc::ptr_eq(&resolve(&plain, &state), &plain));
    }
}
