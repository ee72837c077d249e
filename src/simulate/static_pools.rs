//! Static NodePools (`spec.replicas`) in a snapshot: the NodeClaims their loop would create
//! (the operator's own `static_pools::scale::plan` and template), in the plan beside the
//! provisioner's; a pool that `limits.nodes` holds below its replicas, or that is over its
//! replicas, is a warning.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use karpenter_core::model::convert::{self, Availability};
use karpenter_core::objects::name;
use karpenter_core::state::Cluster;
use karpenter_core::static_pools::{scale, template};

use templates::model::Catalog;

/// Each NodeClass's catalog, by name (as the plan builds them).
type Catalogs = HashMap<String, Arc<Catalog>>;

/// The NodeClaims the static pools of `cluster` would get now (as the solver's claims).
pub(super) fn planned(
    cluster: &Cluster,
    catalogs: &Catalogs,
    warnings: &mut Vec<String>,
) -> Vec<scheduling::NewNodeClaim> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut out = Vec::new();
    for pool in cluster
        .nodepools
        .iter()
        .filter(|p| p.spec.replicas.is_some())
    {
        let pool_name = name(pool.as_ref());
        let Some(catalog) = catalogs.get(&pool.spec.template.spec.node_class_ref.name) else {
            continue; // warned about with the pool's summary
        };
        let zones = if template::spreads(pool) {
            template::zones(pool, catalog, Availability::Offered)
        } else {
            Vec::new()
        };
        let plan = scale::plan(pool, cluster, &BTreeMap::new(), &zones, now);
        if plan.at_limit {
            warnings.push(format!(
                "NodePool {pool_name}: limits.nodes keeps it below its {} replicas",
                pool.spec.replicas.unwrap_or_default()
            ));
        }
        if !plan.delete.is_empty() {
            warnings.push(format!(
                "NodePool {pool_name}: over its replicas, these NodeClaims would be deleted: {}",
                plan.delete.join(", ")
            ));
        }
        for slot in &plan.create {
            match template::planned(pool, catalog, Availability::Offered, slot.zone.as_deref()) {
                Ok(c) => out.push(c),
                Err(why) => {
                    warnings.push(format!("NodePool {pool_name}: no static NodeClaim: {why}"));
                    break;
                }
            }
        }
    }
    out
}

/// The static pools of `cluster` as the solver's pools, with their instance types (the
/// provisioner's snapshot leaves static pools out): for their summaries.
pub(super) fn pools(cluster: &Cluster, catalogs: &Catalogs) -> Vec<scheduling::NodePool> {
    cluster
        .nodepools
        .iter()
        .filter(|p| p.spec.replicas.is_some())
        .filter_map(|pool| {
            let catalog = catalogs.get(&pool.spec.template.spec.node_class_ref.name)?;
            let mut p = convert::node_pool(pool);
            p.instance_types = catalog
                .instance_types
                .iter()
                .map(|it| convert::instance_type(it, Availability::Offered))
                .collect();
            Some(p)
        })
        .collect()
}
