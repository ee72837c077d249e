//! Surge-first commands as data, and what to do next about them: a pure function
//! ([`steps`]) of the cached NodeClaims and Nodes. [`super::orchestrate`] starts commands
//! and carries the steps out (and re-exports everything here).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::consts::{annotations, conditions as types, labels, taints};
use api::karpenter::DisruptionReason;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::objects::{annotation, claim_condition, claim_node_name, deleting, name};

/// Annotation on candidates (the [`Record`]) and label on replacements (the id).
pub const COMMAND: &str = annotations::DISRUPTION_COMMAND;
/// Default bound on a command (Karpenter: 10 min at least).
pub const TIMEOUT: Duration = Duration::from_secs(600);
/// Annotation on a candidate whose command was rolled back: when.
pub const FAILED: &str = annotations::DISRUPTION_FAILED;
/// A candidate whose command was rolled back is not tried again for this long (a template
/// whose Machines never join would otherwise churn a Machine per pass).
pub const COOLDOWN: Duration = Duration::from_secs(300);
/// What a disruption method asks for: remove `candidates` (NodeClaim names), after
/// `replacements` (NodeClaims to create, possibly none) have initialized.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub reason: DisruptionReason,
    pub nodepool: String,
    pub candidates: Vec<String>,
    pub replacements: Vec<NodeClaim>,
    pub message: String,
    /// `single`, `multi` for consolidation; empty otherwise (metrics label).
    pub consolidation_type: String,
}

/// A command as recorded on each of its candidates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub id: String,
    pub reason: DisruptionReason,
    /// RFC 3339.
    pub started: String,
    /// How many replacements the command creates.
    pub replacements: usize,
    #[serde(default)]
    pub candidates: Vec<String>,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub consolidation_type: String,
}

impl Record {
    /// The record on a NodeClaim (an unreadable one is none: the claim is cleaned up).
    pub fn of(claim: &NodeClaim) -> Option<Record> {
        serde_json::from_str(annotation(claim, COMMAND)?).ok()
    }
}

/// Until when a NodeClaim whose command was rolled back waits before it is tried again
/// (`None`: it may be tried now).
pub fn retry_after(claim: &NodeClaim, now: Timestamp) -> Option<Timestamp> {
    let failed: Timestamp = annotation(claim, FAILED)?.parse().ok()?;
    let until = failed
        .checked_add(k8s_openapi::jiff::SignedDuration::try_from(COOLDOWN).ok()?)
        .ok()?;
    (until > now).then_some(until)
}

/// Whether a NodeClaim is a candidate of a command in flight.
pub fn in_command(claim: &NodeClaim) -> bool {
    annotation(claim, COMMAND).is_some()
}

/// The lowercase metric/event label of a reason.
pub fn reason_label(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Underutilized => "underutilized",
        DisruptionReason::Drifted => "drifted",
        DisruptionReason::Empty => "empty",
    }
}

pub(super) fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Underutilized => api::consts::reasons::UNDERUTILIZED,
        DisruptionReason::Drifted => api::consts::reasons::DRIFTED,
        DisruptionReason::Empty => api::consts::reasons::EMPTY,
    }
}

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

/// The steps for the cached objects at `now`. `recent` says whether a command id (or a
/// candidate name) was started by this process within [`CACHE_LAG`].
pub fn steps(
    nodeclaims: &[Arc<NodeClaim>],
    nodes: &[Arc<Node>],
    now: Timestamp,
    timeout: Duration,
    recent: &dyn Fn(&str) -> bool,
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
            if deleting(c.as_ref()) || recent(name(c.as_ref())) {
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
        if tainted(n) && !accounted.contains(node) && !recent(node) {
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
        let why = if alive.len() < record.replacements && !recent(&id) {
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
        } else if alive.len() >= record.replacements && pending.is_empty() {
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

/// A command id: short, a valid label value, unique per candidate set and start time.
pub fn command_id(candidates: &[String], now: Timestamp) -> String {
    let text = format!("{}@{}", candidates.join(","), now.as_nanosecond());
    format!("d{:016x}", crate::objects::fnv64(&text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn claim(v: Value) -> Arc<NodeClaim> {
        Arc::new(serde_json::from_value(v).expect("fixture"))
    }

    fn node(name: &str, disrupted: bool) -> Arc<Node> {
        let taints = if disrupted {
            json!([{"key": taints::DISRUPTED, "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}}))
                .expect("node"),
        )
    }

    fn record(replacements: usize, started: &str) -> String {
        serde_json::to_string(&Record {
            id: "d1".into(),
            reason: DisruptionReason::Drifted,
            started: started.into(),
            replacements,
            candidates: vec!["old".into()],
            message: "m".into(),
            consolidation_type: String::new(),
        })
        .expect("json")
    }

    fn candidate(rec: &str) -> Arc<NodeClaim> {
        claim(json!({
            "metadata": {"name": "old", "annotations": {COMMAND: rec}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"nodeName": "n-old", "conditions": [
                {"type": "DisruptionReason", "status": "True", "reason": "Drifted", "message": "",
                 "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
    }

    fn replacement(name: &str, initialized: bool, deleting: bool) -> Arc<NodeClaim> {
        let mut v = json!({
            "metadata": {"name": name, "labels": {labels::DISRUPTION_COMMAND: "d1"}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"conditions": [{"type": "Initialized",
                "status": if initialized { "True" } else { "Unknown" }, "reason": "x", "message": "",
                "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-11-22T10:01:00Z");
        }
        claim(v)
    }

    const START: &str = "2026-11-22T10:00:00Z";

    fn at(s: &str) -> Timestamp {
        s.parse().expect("ts")
    }

    fn run(claims: &[Arc<NodeClaim>], nodes: &[Arc<Node>], now: &str) -> Vec<Step> {
        steps(claims, nodes, at(now), Duration::from_secs(300), &|_| false)
    }

    #[test]
    fn waits_then_finishes_when_every_replacement_initialized() {
        let old = candidate(&record(2, START));
        let nodes = [node("n-old", true)];
        let waiting = run(
            &[
                old.clone(),
                replacement("r1", true, false),
                replacement("r2", false, false),
            ],
            &nodes,
            "2026-11-22T10:01:00Z",
        );
        assert_eq!(
            waiting,
            [Step::Wait {
                id: "d1".into(),
                pending: vec!["r2".into()]
            }]
        );
        let done = run(
            &[
                old.clone(),
                replacement("r1", true, false),
                replacement("r2", true, false),
            ],
            &nodes,
            "2026-11-22T10:01:00Z",
        );
        assert!(
            matches!(&done[..], [Step::Finish { candidates, .. }] if candidates.len() == 1),
            "{done:?}"
        );
    }

    #[test]
    fn a_command_without_replacements_finishes_at_once() {
        let old = candidate(&record(0, START));
        let out = run(&[old], &[node("n-old", true)], START);
        assert!(matches!(&out[..], [Step::Finish { .. }]), "{out:?}");
    }

    #[test]
    fn rolls_back_on_timeout_deleting_only_uninitialized_replacements() {
        let old = candidate(&record(2, START));
        let out = run(
            &[
                old,
                replacement("r1", true, false),
                replacement("r2", false, false),
            ],
            &[node("n-old", true)],
            "2026-11-22T10:05:00Z",
        );
        match &out[..] {
            [Step::Rollback { delete, why, .. }] => {
                assert_eq!(delete.len(), 1);
                assert_eq!(name(delete[0].as_ref()), "r2");
                assert!(why.contains("not initialized within 300s"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rolls_back_when_a_replacement_vanished_unless_just_started_here() {
        let old = candidate(&record(2, START));
        let claims = [
            old,
            replacement("r1", false, false),
            replacement("r2", false, true),
        ];
        let out = run(&claims, &[], "2026-11-22T10:00:10Z");
        assert!(
            matches!(&out[..], [Step::Rollback { why, delete, .. }] if why.contains("1 of 2") && delete.len() == 1),
            "{out:?}"
        );
        let lagging = steps(
            &claims,
            &[],
            at("2026-11-22T10:00:10Z"),
            Duration::from_secs(300),
            &|k| k == "d1",
        );
        assert!(matches!(&lagging[..], [Step::Wait { .. }]), "{lagging:?}");
    }

    #[test]
    fn stale_taints_and_reasons_are_cleaned_up_but_not_those_of_commands_or_deletions() {
        let stale = claim(json!({
            "metadata": {"name": "s"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"nodeName": "n-s", "conditions": [
                {"type": "DisruptionReason", "status": "True", "reason": "Drifted", "message": "",
                 "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }));
        let going = claim(json!({
            "metadata": {"name": "g", "deletionTimestamp": START},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"nodeName": "n-g"}
        }));
        let old = candidate(&record(1, START));
        let nodes = [
            node("n-s", true),
            node("n-g", true),
            node("n-old", true),
            node("n-free", false),
        ];
        let out = run(
            &[stale.clone(), going, old, replacement("r1", false, false)],
            &nodes,
            "2026-11-22T10:00:30Z",
        );
        assert!(out.contains(&Step::ClearReason(stale)), "{out:?}");
        assert!(out.contains(&Step::Untaint("n-s".into())), "{out:?}");
        assert_eq!(
            out.len(),
            3,
            "n-g (deleting) and n-old (command) kept: {out:?}"
        );
    }

    #[test]
    fn command_ids_are_label_values() {
        let id = command_id(&["a".into(), "b".into()], at(START));
        assert!(id.len() <= 63 && id.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(id, command_id(&["a".into()], at(START)));
    }
}
