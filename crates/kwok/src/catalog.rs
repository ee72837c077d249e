//! Karpenter kwok's instance types as the seam takes them: the neutral
//! [`cloudprovider::InstanceTypes`]; an offering's opaque id names the KWOKNodeClass; offering labels other than zone and
//! capacity type are not carried.

use std::collections::BTreeMap;

use api::consts::labels as label;
use cloudprovider::InstanceTypes;
use cloudprovider::model::{self, PriceSource};

use crate::instance_types::InstanceType;
use crate::nodeclass;

/// The catalog of `nodeclass`: every instance type with its available offerings, cheapest
/// first (ties: name).
pub(crate) fn to_catalog(types: &[InstanceType], nodeclass: &str) -> InstanceTypes {
    // Every offering launches the same way (a Node of the KWOKNodeClass): one opaque id.
    let id = format!("{}/{}", nodeclass::KIND, nodeclass);
    let mut instance_types: Vec<model::InstanceType> = types
        .iter()
        .map(|it| {
            let mut offerings: Vec<model::Offering> = it
                .offerings
                .iter()
                .filter(|o| o.available)
                .map(|o| model::Offering {
                    zone: o.zone().map(str::to_string),
                    capacity_type: o.capacity_type().to_string(),
                    price: o.price,
                    // The file's price, as given.
                    price_source: PriceSource::Annotation,
                    id: id.clone(),
                    reservation_id: None,
                    labels: BTreeMap::new(),
                    available: true,
                    count: None,
                })
                .collect();
            offerings.sort_by(|a, b| {
                (!a.is_reserved(), a.price, &a.zone, &a.capacity_type)
                    .partial_cmp(&(!b.is_reserved(), b.price, &b.zone, &b.capacity_type))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let mut labels: BTreeMap<String, String> = it.labels.clone();
            let mut types = offerings.iter().map(|o| o.capacity_type.as_str());
            if let Some(first) = types.next()
                && types.all(|t| t == first)
            {
                labels.insert(label::CAPACITY_TYPE.to_string(), first.to_string());
            }
            model::InstanceType {
                volume_limits: it.volume_limits.clone(),
                devices: None,
                name: it.name.clone(),
                capacity: it.capacity.clone(),
                allocatable: it.allocatable.clone(),
                labels,
                taints: Vec::new(),
                offerings,
                capacity_overlaid: false,
            }
        })
        .collect();
    instance_types.sort_by(|a, b| {
        let price = |t: &model::InstanceType| t.cheapest().map_or(f64::MAX, |o| o.price);
        price(a)
            .total_cmp(&price(b))
            .then_with(|| a.name.cmp(&b.name))
    });
    InstanceTypes::of(instance_types)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_types_become_a_catalog_cheapest_first() {
        let bench = include_str!("../../../hack/bench/e2e/kwok-instance-types.json");
        let types = crate::instance_types::parse(bench.as_bytes(), "bench").expect("reads");
        let catalog = to_catalog(&types, "default");
        let names: Vec<&str> = catalog
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["small", "medium", "large"]);
        let small = &catalog.instance_types[0];
        assert_eq!(small.offerings.len(), 2);
        assert_eq!(small.offerings[0].zone.as_deref(), Some("zone-a"));
        assert_eq!(small.offerings[0].id, "KWOKNodeClass/default");
        assert_eq!(small.labels[label::CAPACITY_TYPE], "on-demand");
        assert_eq!(small.allocatable.cpu_milli(), 1900);
    }
}
