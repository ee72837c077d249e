//! The drifted NodeClaims of a snapshot (`Drifted=True`) and what replacing each would
//! take: the disruption loop's own simulation of its pods with the NodeClaim gone.

use std::collections::HashMap;
use std::sync::Arc;

use api::consts::conditions as types;
use controller::disruption::{View, simulate};
use controller::objects::{claim_node_name, name};
use controller::provisioning::snapshot;
use serde::Serialize;
use templates::model::Catalog;

use super::{Loaded, pod_ref};

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
    loaded: &Loaded,
    catalogs: &HashMap<String, Arc<Catalog>>,
) -> Vec<DriftedNodeClaim> {
    let state = &loaded.state;
    let view = View {
        nodepools: &state.nodepools,
        nodeclaims: &state.nodeclaims,
        nodes: &state.nodes,
        pods: &state.pods,
        daemonsets: &state.daemonsets,
        pdbs: &[],
        nodeclasses: &[],
        catalog: &|nc| catalogs.get(nc).cloned(),
    };
    let mut out: Vec<DriftedNodeClaim> = state
        .nodeclaims
        .iter()
        .filter_map(|c| {
            let cond = api::conditions::get(&c.status.as_ref()?.conditions, types::DRIFTED)
                .filter(|d| d.status == api::conditions::TRUE)?;
            let claim = name(c.as_ref());
            let nodes: Vec<&str> = claim_node_name(c).into_iter().collect();
            let (without, moving) = simulate::without(
                &view,
                &nodes,
                &[claim],
                state.nodepools.clone(),
                state.daemonsets.clone(),
            );
            let snap: snapshot::Snapshot = snapshot::build(
                &without,
                &moving,
                &|nc| catalogs.get(nc).cloned(),
                &|_, _, _| true,
            );
            let output = scheduling::solve(&snap.input);
            Some(DriftedNodeClaim {
                node_claim: claim.to_string(),
                reason: cond.reason.clone(),
                message: cond.message.clone(),
                replacements: output
                    .new_node_claims
                    .iter()
                    .map(|n| n.cheapest.instance_type.clone())
                    .collect(),
                blocked: output
                    .unschedulable
                    .iter()
                    .map(|u| pod_ref(&u.pod))
                    .collect(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.node_claim.cmp(&b.node_claim));
    out
}
