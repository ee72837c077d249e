//! Static NodePools (`spec.replicas`) in a snapshot: the NodeClaims their loop would create
//! (the operator's own `static_pools::scale::plan` and template), in the plan beside the
//! provisioner's; a pool that `limits.nodes` holds below its replicas, or that is over its
//! replicas, is a warning.

use std::collections::BTreeMap;

use controller::objects::name;
use controller::provisioning::convert;
use controller::state::Cluster;
use controller::static_pools::{scale, template};

use super::Loaded;
use super::counts::Counted;
use super::plan::{Catalogs, NodePoolSummary, PlannedNodeClaim, planned_node_claim};

/// The NodeClaims the static pools of `cluster` would get now.
pub(super) fn planned(
    loaded: &Loaded,
    cluster: &Cluster,
    catalogs: &Catalogs,
    counted: &Counted,
    warnings: &mut Vec<String>,
) -> Vec<PlannedNodeClaim> {
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
            template::zones(pool, catalog, counted)
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
            match template::planned(pool, catalog, counted, slot.zone.as_deref()) {
                Ok(c) => out.push(planned_node_claim(loaded, catalogs, &c)),
                Err(why) => {
                    warnings.push(format!("NodePool {pool_name}: no static NodeClaim: {why}"));
                    break;
                }
            }
        }
    }
    out
}

/// The static pools' compatible instance types in their summaries (the provisioner's
/// snapshot leaves static pools out).
pub(super) fn summaries(
    cluster: &Cluster,
    catalogs: &Catalogs,
    counted: &Counted,
    summaries: &mut [NodePoolSummary],
) {
    for pool in cluster
        .nodepools
        .iter()
        .filter(|p| p.spec.replicas.is_some())
    {
        let Some(catalog) = catalogs.get(&pool.spec.template.spec.node_class_ref.name) else {
            continue;
        };
        let mut p = convert::node_pool(pool);
        p.instance_types = catalog
            .instance_types
            .iter()
            .map(|it| convert::instance_type(it, counted))
            .collect();
        if let Some(s) = summaries.iter_mut().find(|s| s.name == p.name) {
            s.instance_types = super::plan::compatible_instance_types(&p);
        }
    }
}
