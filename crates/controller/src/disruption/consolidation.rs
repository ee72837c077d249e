//! Single-node delete consolidation (pools under `WhenEmptyOrUnderutilized` or `Balanced`):
//! a NodeClaim whose pods have not changed for `consolidateAfter` (plus [`VALIDATION`]) and
//! would all fit on the other nodes' free capacity, by the same scheduling simulation the
//! provisioner runs, is deleted. One per pass across all pools (two would plan onto the same
//! free capacity), the one with the fewest pods first, only when nothing else of its pool is
//! being disrupted and no pod is waiting for capacity.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use api::karpenter::DisruptionReason;
use k8s_openapi::api::core::v1::Pod;

use super::budgets::PoolBudget;
use super::candidates::{Pool, movable, reschedulable};
use super::{Clock, Decision, Method, Pass, VALIDATION, View};
use crate::objects::{deleting, name, pod_node_name};
use crate::provisioning::snapshot;

/// Per NodeClaim (by name): its reschedulable pods, and since when they have been those.
#[derive(Debug, Default)]
pub struct Consolidation {
    stable: HashMap<String, (Vec<String>, Instant)>,
}

impl Method for Consolidation {
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        let Some(after) = pool.consolidate_after else {
            return Vec::new();
        };
        let mut ready = Vec::new();
        for c in &pool.candidates {
            if c.empty() {
                // Emptiness's business.
                self.stable.remove(c.name);
                continue;
            }
            if !pool.consolidates_underutilized() || !c.disruptable() {
                continue;
            }
            let names = c.pod_names();
            let entry = self
                .stable
                .entry(c.name.to_string())
                .or_insert_with(|| (names.clone(), clock.instant));
            if entry.0 != names {
                *entry = (names, clock.instant);
            }
            if c.pods.iter().all(|p| movable(p))
                && clock.instant.duration_since(entry.1) >= after + VALIDATION
            {
                ready.push(c);
            }
        }
        if pass.consolidated
            || budget.remaining(DisruptionReason::Underutilized) == 0
            || !budget.idle()
        {
            return Vec::new();
        }
        ready.sort_by_key(|c| (c.pods.len(), c.name));
        let Some(c) = ready.into_iter().find(|c| {
            c.node
                .is_some_and(|n| fits_elsewhere(pass.view, name(n), c.name))
        }) else {
            return Vec::new();
        };
        pass.consolidated = true;
        budget.take(1);
        vec![Decision {
            nodeclaim: c.name.to_string(),
            nodepool: pool.name.to_string(),
            reason: DisruptionReason::Underutilized,
            expired: false,
            message: format!(
                "underutilized: its {} pod(s) fit on other nodes",
                c.pods.len()
            ),
        }]
    }

    fn forget(&mut self, keep: &HashSet<String>) {
        self.stable.retain(|k, _| keep.contains(k));
    }
}

/// Whether every reschedulable pod on `node` fits on the other Ready nodes (and in-flight
/// NodeClaims), by the provisioner's scheduling simulation with no NodePool to launch from.
fn fits_elsewhere(view: &View, node: &str, claim: &str) -> bool {
    let (moving, staying): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) = view
        .pods
        .iter()
        .filter(|p| pod_node_name(p).is_some())
        .cloned()
        .partition(|p| pod_node_name(p) == Some(node));
    let moving: Vec<Arc<Pod>> = moving.into_iter().filter(|p| reschedulable(p)).collect();
    let state = snapshot::State {
        pods: staying,
        nodes: view
            .nodes
            .iter()
            .filter(|n| name(n.as_ref()) != node)
            .cloned()
            .collect(),
        nodeclaims: view
            .nodeclaims
            .iter()
            .filter(|c| name(c.as_ref()) != claim && !deleting(c.as_ref()))
            .cloned()
            .collect(),
        nodepools: Vec::new(),
        daemonsets: Vec::new(),
    };
    let snapshot = snapshot::build(&state, &moving, &|_| None, &|_, _, _| true);
    let out = scheduling::solve(&snapshot.input);
    out.unschedulable.is_empty() && out.new_node_claims.is_empty()
}
