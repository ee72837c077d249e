//! The "Disruption" section of a plan: for a snapshot with existing NodeClaims, the verdict
//! the disruption loop would reach on them now — the same [`verdicts`] function the operator
//! and `inspect --why` run, fed the snapshot's objects and its catalogs' prices.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use templates::model::Catalog;

use karpenter_core::disruption::{View, verdicts};
use karpenter_core::objects::name;

use karpenter_core::state::Cluster;

/// One NodeClaim's disruption verdict.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionVerdict {
    pub node_claim: String,
    pub node_pool: String,
    /// Its Node (`-` when it has none yet).
    pub node: String,
    pub instance_type: String,
    /// `delete`, `replace` or `none` (kept: see `blocker`).
    pub action: String,
    /// The NodeClaims of the move (itself included).
    pub nodes: Vec<String>,
    /// The instance type a replace launches.
    pub replacement: Option<String>,
    pub savings_per_hour: Option<f64>,
    /// What keeps it, when it is not part of a move.
    pub blocker: Option<String>,
    /// The verdict as `inspect --why` and the `Consolidatable` condition word it.
    pub message: String,
}

/// The verdict of every NodeClaim of the snapshot at `now` (empty without NodeClaims).
pub(super) fn disruption(
    cluster: &Cluster,
    catalogs: &HashMap<String, Arc<Catalog>>,
    manual_drift: &dyn Fn(&str) -> bool,
    now: Timestamp,
) -> Vec<DisruptionVerdict> {
    if cluster.nodeclaims.is_empty() {
        return Vec::new();
    }
    let catalog = |nc: &str| catalogs.get(nc).map(|c| c.types.clone());
    let view = View {
        cluster,
        catalog: &catalog,
        manual_drift,
    };
    let verdicts = verdicts(&view, now);
    cluster
        .nodeclaims
        .iter()
        .map(|c| {
            let claim = name(c.as_ref()).to_string();
            let label = |key: &str| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .cloned()
                    .unwrap_or_else(|| "-".into())
            };
            let v = verdicts.get(&claim);
            DisruptionVerdict {
                node_pool: label(api::consts::labels::NODEPOOL),
                node: c
                    .status
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| "-".into()),
                instance_type: label(scheduling::LABEL_INSTANCE_TYPE),
                action: v
                    .and_then(|v| v.action.clone())
                    .unwrap_or_else(|| "none".into()),
                nodes: v.map(|v| v.nodes.clone()).unwrap_or_default(),
                replacement: v.and_then(|v| v.replacement.clone()),
                savings_per_hour: v.and_then(|v| v.savings_per_hour),
                blocker: v.and_then(|v| v.blocker.clone()),
                message: v.map_or_else(|| "no verdict".into(), ToString::to_string),
                node_claim: claim,
            }
        })
        .collect()
}
