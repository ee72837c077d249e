//! The pure part of the orchestration: from the cached NodeClaims and Nodes, what to do
//! next about each disruption command (wait, finish, roll back) and about leftovers (a
//! `disrupted` taint or a `DisruptionReason` no command accounts for).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::consts::{conditions as types, labels, taints};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::objects::{claim_condition, claim_node_name, deleting, name};

use super::command::*;

/// What to do next about the commands and leftovers found on the objects.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Replacements still initializing.
    Wait { id: String, pending: Vec<String> },
    /// Every replacement initialized: delete the candidates.
    Finish {
        record: Record,
        candidates: Vec<Arc<NodeClaim>>,
    },
    /// Undo: delete `delete` (replacements that never initialized), restore the candidates.
    Rollback {
        record: Record,
        candidates: Vec<Arc<NodeClaim>>,
        delete: Vec<Arc<NodeClaim>>,
        why: String,
    },
    /// A `disrupted` taint no command accounts for.
    Untaint(String),
    /// A `DisruptionReason` condition no command accounts for.
    ClearReason(Arc<NodeClaim>),
}

/// Whether a Node carries the `disrupted` taint.
pub fn tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == taints::DISRUPTED))
}

/// The steps for the cached objects at `now`. The caller asks only on caches that show all
/// of its own writes (the orchestrator's read-your-writes expectations), so a command this
/// process just started is seen whole.
pub fn steps(
    nodeclaims: &[Arc<NodeClaim>],
    nodes: &[Arc<Node>],
    now: Timestamp,
    timeout: Duration,
) -> Vec<Step> {
    let mut commands: BTreeMap<String, (Record, Vec<Arc<NodeClaim>>)> = BTreeMap::new();
    let mut replacements: HashMap<&str, Vec<&Arc<NodeClaim>>> = HashMap::new();
    let mut accounted: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for c in nodeclaims {
        if let Some(id) = c.labels().get(labels::DISRUPTION_COMMAND) {
            replacements.entry(id.as_str()).or_default().push(c);
        }
        let Some(record) = Record::of(c) else {
            if deleting(c.as_ref()) {
                if let Some(n) = claim_node_name(c) {
                    accounted.insert(n);
                }
            } else if c.status.as_ref().is_some_and(|s| {
                api::conditions::get(&s.conditions, types::DISRUPTION_REASON).is_some()
            }) {
                out.push(Step::ClearReason(c.clone()));
            }
            continue;
        };
        if let Some(n) = claim_node_name(c) {
            accounted.insert(n);
        }
        if !deleting(c.as_ref()) {
            commands
                .entry(record.id.clone())
                .or_insert_with(|| (record, Vec::new()))
                .1
                .push(c.clone());
        }
    }
    for n in nodes {
        let node = name(n.as_ref());
        if tainted(n) && !accounted.contains(node) {
            out.push(Step::Untaint(node.to_string()));
        }
    }
    for (id, (record, candidates)) in commands {
        let mine = replacements.remove(id.as_str()).unwrap_or_default();
        let alive: Vec<&Arc<NodeClaim>> = mine
            .iter()
            .copied()
            .filter(|r| !deleting(r.as_ref()))
            .collect();
        let pending: Vec<&Arc<NodeClaim>> = alive
            .iter()
            .copied()
            .filter(|r| !claim_condition(r, types::INITIALIZED))
            .collect();
        let age = record
            .started
            .parse::<Timestamp>()
            .ok()
            .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
            .unwrap_or(Duration::MAX);
        // A replacement being deleted failed; one never seen may be a create whose answer
        // was lost (the cache shows it later): vanished only once the command is older
        // than the create lag.
        let failed = mine.len() > alive.len();
        let missing = alive.len() < record.replacements;
        let why = if missing && (failed || age >= crate::write::CREATE_LAG) {
            Some(format!(
                "{} of {} replacement(s) failed or vanished",
                record.replacements - alive.len(),
                record.replacements
            ))
        } else if age >= timeout && !pending.is_empty() {
            Some(format!(
                "replacement(s) {} not initialized within {}s",
                names(&pending).join(", "),
                timeout.as_secs()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            out.push(Step::Rollback {
                record,
                candidates,
                delete: pending.into_iter().cloned().collect(),
                why,
            });
        } else if !missing && pending.is_empty() {
            out.push(Step::Finish { record, candidates });
        } else {
            out.push(Step::Wait {
                id,
                pending: names(&pending),
            });
        }
    }
    out
}

fn names(claims: &[&Arc<NodeClaim>]) -> Vec<String> {
    claims
        .iter()
        .map(|c| name(c.as_ref()).to_string())
        .collect()
}
