//! Counted offerings in a snapshot: each template with a count (max-machines, the
//! cluster-autoscaler node-group max size, a fresh reported count, the free hosts of a
//! NodeClass's inventory among the snapshot's objects), what the snapshot's NodeClaims
//! already use of it, and how many of the plan's NodeClaims it takes.

use std::collections::BTreeMap;

use serde::Serialize;

use clusterapi::availability::unavailable::UnavailableOfferings;
use clusterapi::availability::{DEFAULT_STALENESS, LaunchState, OfferingCounts, resolve};
use karpenter_core::state::Cluster;
use kube::api::DynamicObject;
use templates::inventory::{HostQuery, HostTally, selector_of, tally};
use templates::model::launched_from as template;

/// Each NodeClass's catalog, by name (as the plan builds them).
type Catalogs = std::collections::HashMap<String, std::sync::Arc<templates::model::Catalog>>;

/// Offerings as the snapshot states them: all available (no launch has failed offline),
/// counted from the templates' annotations and the snapshot's NodeClaims.
pub(super) struct Counted(pub(super) OfferingCounts);

impl Counted {
    pub(super) fn of(cluster: &Cluster) -> Counted {
        Counted(OfferingCounts::new(
            &cluster.nodeclaims,
            &[],
            k8s_openapi::jiff::Timestamp::now(),
            DEFAULT_STALENESS,
        ))
    }
}

impl Counted {
    /// With the hosts of the snapshot that the NodeClasses' inventories count.
    pub(super) fn with_hosts(self, loaded: &super::Loaded, catalogs: &Catalogs) -> Counted {
        let mut tallies = clusterapi::availability::hosts::Tallies::new();
        for nc in &loaded.inputs.node_classes {
            let Some(query) = inventory_of(nc) else {
                continue;
            };
            let name = nc.metadata.name.as_deref().unwrap_or_default();
            let Some(catalog) = catalogs.get(name) else {
                continue;
            };
            let hosts: Vec<&DynamicObject> = loaded
                .others
                .iter()
                .filter(|h| {
                    h.types
                        .as_ref()
                        .is_some_and(|t| t.api_version == query.api_version && t.kind == query.kind)
                })
                .collect();
            for t in catalog
                .instance_types
                .iter()
                .flat_map(templates::model::templates_of)
            {
                let ns = t.namespace.clone().unwrap_or_default();
                let Some(obj) = loaded.inputs.templates.iter().find(|o| {
                    o.metadata.name.as_deref() == Some(t.name.as_str())
                        && o.metadata.namespace.as_deref().unwrap_or_default() == ns
                        && o.types.as_ref().is_some_and(|ty| ty.kind == t.kind)
                }) else {
                    continue;
                };
                let tally = match selector_of(obj, &query) {
                    Ok(sel) => tally(&query, &sel, &ns, hosts.iter().copied()),
                    Err(_) => HostTally::none(query.zone_label.is_some()),
                };
                tallies.entry((ns, t.name.clone())).or_insert(tally);
            }
        }
        Counted(self.0.with_hosts(tallies))
    }
}

/// A snapshot NodeClass's inventory, if it has one.
fn inventory_of(nc: &DynamicObject) -> Option<HostQuery> {
    let inv: clusterapi_api::nodeclass::Inventory =
        serde_json::from_value(nc.data["spec"]["inventory"].clone()).ok()?;
    HostQuery::of(&inv)
}

/// The host kinds the snapshot's NodeClasses count (read, not ignored).
pub(super) fn inventory_kinds(loaded: &super::Loaded) -> Vec<String> {
    loaded
        .inputs
        .node_classes
        .iter()
        .filter_map(inventory_of)
        .map(|q| q.kind)
        .collect()
}

impl Counted {
    /// The catalogs with their offerings counted, as the provider hands them to the core
    /// (none backed off: no launch has failed offline).
    pub(super) fn offer(&self, catalogs: &Catalogs) -> Catalogs {
        let none_failed = UnavailableOfferings::default();
        let state = LaunchState {
            unavailable: &none_failed,
            counts: &self.0,
            now: std::time::Instant::now(),
        };
        catalogs
            .iter()
            .map(|(name, c)| (name.clone(), resolve(c, &state)))
            .collect()
    }
}

/// One counted template in the plan.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CountedTemplate {
    /// `Kind namespace/name`.
    pub template: String,
    /// The annotation whose count is the smallest.
    pub source: String,
    /// Its number (the max, or the reported count).
    pub limit: u32,
    /// NodeClaims of the snapshot launched from it.
    pub live: u32,
    /// Available before this plan.
    pub available: u32,
    /// The plan's new NodeClaims whose preferred offering is this template's.
    pub planned: u32,
}

/// Every counted template of the catalogs, with what `output` plans on it.
pub(super) fn counted_templates(
    counted: &Counted,
    catalogs: &Catalogs,
    output: &scheduling::Output,
) -> Vec<CountedTemplate> {
    let mut by_template: BTreeMap<String, CountedTemplate> = BTreeMap::new();
    for catalog in catalogs.values() {
        for it in &catalog.instance_types {
            for o in &it.offerings {
                let Some(a) = counted.0.available(catalog, it, o) else {
                    continue;
                };
                by_template
                    .entry(template(o).to_string())
                    .or_insert_with(|| CountedTemplate {
                        template: template(o).to_string(),
                        source: a.source.annotation().to_string(),
                        limit: a.limit,
                        live: counted.0.use_of(it, o).live,
                        available: a.count,
                        planned: 0,
                    });
            }
        }
    }
    for c in &output.new_node_claims {
        let chosen = catalogs.values().find_map(|cat| {
            cat.get(&c.cheapest.instance_type)?
                .offerings
                .iter()
                .find(|o| {
                    o.zone.clone().unwrap_or_default() == c.cheapest.zone
                        && o.capacity_type == c.cheapest.capacity_type
                })
        });
        if let Some(t) = chosen.and_then(|o| by_template.get_mut(&template(o).to_string())) {
            t.planned += 1;
        }
    }
    by_template.into_values().collect()
}
