//! Counted offerings in a snapshot: each template with a count (max-machines, the
//! cluster-autoscaler node-group max size, a fresh reported count), what the snapshot's
//! NodeClaims already use of it, and how many of the plan's NodeClaims it takes.

use std::collections::BTreeMap;

use serde::Serialize;

use controller::counts::{DEFAULT_STALENESS, OfferingCounts, Offerings};
use controller::state::Cluster;
use templates::model::{InstanceType, Offering};

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

impl Offerings for Counted {
    fn count(&self, it: &InstanceType, offering: &Offering) -> Option<scheduling::OfferingCount> {
        self.0.scheduling(it, offering)
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
                let Some(a) = counted.0.available(it, o) else {
                    continue;
                };
                by_template
                    .entry(o.template.to_string())
                    .or_insert_with(|| CountedTemplate {
                        template: o.template.to_string(),
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
        if let Some(t) = chosen.and_then(|o| by_template.get_mut(&o.template.to_string())) {
            t.planned += 1;
        }
    }
    by_template.into_values().collect()
}
