//! The drifted NodeClaims of a snapshot (`Drifted=True`) and what replacing each would
//! take: the disruption loop's own simulation of its pods with the NodeClaim gone.

use std::collections::HashMap;
use std::sync::Arc;

use api::consts::conditions as types;
use karpenter_core::disruption::simulate;
use karpenter_core::objects::{claim_node_name, name};
use karpenter_core::provisioning::snapshot;
use serde::Serialize;
use templates::model::Catalog;

use super::pod_ref;
use karpenter_core::state::Cluster;

/// One drifted NodeClaim.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftedNodeClaim {
    pub node_claim: String,
    /// The `Drifted` reason and message.
    pub reason: String,
    pub message: String,
    /// The cheapest instance type of each replacement NodeClaim (none: the pods fit on
    /// other nodes).
    pub replacements: Vec<String>,
    /// Pods that would fit nowhere (the replacement is blocked).
    pub blocked: Vec<String>,
}

/// The drifted NodeClaims of the snapshot, in name order.
pub(super) fn drifted(
    cluster: &Cluster,
    catalogs: &HashMap<String, Arc<Catalog>>,
) -> Vec<DriftedNodeClaim> {
    let mut out: Vec<DriftedNodeClaim> = cluster
        .nodeclaims
        .iter()
        .filter_map(|c| {
            let cond = api::conditions::get(&c.status.as_ref()?.conditions, types::DRIFTED)
                .filter(|d| d.status == api::conditions::TRUE)?;
            let claim = name(c.as_ref());
            let nodes: Vec<&str> = claim_node_name(c).into_iter().collect();
            let w = simulate::without(cluster, &nodes, &[claim]);
            let snap: snapshot::Snapshot = w.snapshot(
                &w.rest.nodepools,
                &|nc| catalogs.get(nc).map(|c| c.types.clone()),
                karpenter_core::model::convert::Availability::Ignored,
            );
            let output = scheduling::solve(&snap.input);
            Some(DriftedNodeClaim {
                node_claim: claim.to_string(),
                reason: cond.reason.clone(),
                message: cond.message.clone(),
                replacements: w
                    .replacements(&output)
                    .map(|n| n.cheapest.instance_type.clone())
                    .collect(),
                blocked: w
                    .own_unschedulable(&output)
                    .map(|u| pod_ref(&u.pod))
                    .collect(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.node_claim.cmp(&b.node_claim));
    out
}
