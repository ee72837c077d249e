//! What a pass publishes besides its decisions: the `Consolidatable` condition of every
//! NodeClaim (present, `True`, once `consolidateAfter` has elapsed, as in Karpenter; its
//! reason and message are the verdict), Events on NodePools, and the disruption metrics.
//! A condition is written only when it changes, conditional on the resourceVersion it was
//! computed from; a change of the message alone (the verdict's wording, which moves as the
//! cluster fills or drains) at most once per [`MESSAGE_REFRESH`] per NodeClaim.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::claim_writes::ClaimWrites;
use crate::write::Writer;
use api::NodeClaim;
use api::consts::conditions as types;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

use super::{Outcome, Verdict};
use crate::metrics::{EligibleLabels, Metrics, NodePoolLabels, PoolReasonLabels};
use crate::objects::deleting;

/// A NodeClaim's condition message alone is rewritten at most this often (its status and
/// reason at once); `inspect --why` always shows the live verdict.
pub const MESSAGE_REFRESH: Duration = Duration::from_secs(60);

/// The `Consolidatable` condition a NodeClaim should carry: `None` when it does not apply
/// (`consolidateAfter: Never`, not initialized, or not elapsed since the last pod event —
/// Karpenter clears it then), else (status, reason, message).
pub fn condition(v: &Verdict) -> Option<(&'static str, &'static str, String)> {
    if !v.consolidatable? {
        return None;
    }
    let reason = if v.is_candidate() {
        "Candidate"
    } else {
        "Blocked"
    };
    Some((api::conditions::TRUE, reason, v.to_string()))
}

/// What a write of the condition would change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Added, removed, or a new status or reason.
    State,
    /// Only the message.
    Message,
}

/// The claim's status with its `Consolidatable` condition set from `v`, and what changed;
/// `None` if unchanged.
pub fn updated(
    claim: &NodeClaim,
    v: Option<&Verdict>,
    now: Timestamp,
) -> Option<(api::karpenter::NodeClaimStatus, Change)> {
    let mut status = claim.status.clone().unwrap_or_default();
    let before = api::conditions::get(&status.conditions, types::CONSOLIDATABLE)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let changed = match v.and_then(condition) {
        Some((s, reason, message)) => api::conditions::set(
            &mut status.conditions,
            types::CONSOLIDATABLE,
            s,
            reason,
            &message,
            None,
            now,
        ),
        None => api::conditions::remove(&mut status.conditions, types::CONSOLIDATABLE),
    };
    let after = api::conditions::get(&status.conditions, types::CONSOLIDATABLE)
        .map(|c| (c.status.clone(), c.reason.clone()));
    let change = if before == after {
        Change::Message
    } else {
        Change::State
    };
    changed.then_some((status, change))
}

/// When each NodeClaim's condition was last written by this process, and how often a
/// message alone may be rewritten.
#[derive(Debug)]
pub struct Written {
    at: HashMap<String, Instant>,
    refresh: Duration,
}

impl Default for Written {
    fn default() -> Self {
        Written::with_refresh(MESSAGE_REFRESH)
    }
}

impl Written {
    /// A message alone rewritten at most once per `refresh` ([`MESSAGE_REFRESH`]; tests
    /// shorten it).
    pub fn with_refresh(refresh: Duration) -> Self {
        Written {
            at: HashMap::new(),
            refresh,
        }
    }

    /// Whether a change may be written now: a state change always, a message change once
    /// the refresh period has passed since our last write (or after a restart).
    pub fn due(&self, claim: &str, change: Change, now: Instant) -> bool {
        change == Change::State
            || self
                .at
                .get(claim)
                .is_none_or(|t| now.duration_since(*t) >= self.refresh)
    }

    pub fn wrote(&mut self, claim: &str, now: Instant) {
        self.at.insert(claim.to_string(), now);
    }

    /// Forgets NodeClaims not in `claims`.
    pub fn retain(&mut self, claims: &[Arc<NodeClaim>]) {
        let names: std::collections::HashSet<String> =
            claims.iter().map(|c| c.name_any()).collect();
        self.at.retain(|k, _| names.contains(k));
    }
}

/// Writes the changed `Consolidatable` conditions that are due (a 409 means a newer object:
/// the next pass computes again from it). Each write takes the claim's turn
/// ([`ClaimWrites`]); a claim that changed since the pass's copy (`claims`: the pod-event
/// loop wrote its time, or the cache `current` shows another write) is left to the next
/// pass, as its condition was computed from a stale copy.
pub(crate) async fn write_conditions(
    writer: &Writer<NodeClaim>,
    claims: &[Arc<NodeClaim>],
    verdicts: &BTreeMap<String, Verdict>,
    (written, shared): (&mut Written, &ClaimWrites),
    current: impl Fn(&NodeClaim) -> Option<Arc<NodeClaim>>,
) {
    let now = Timestamp::now();
    let instant = Instant::now();
    written.retain(claims);
    for c in claims.iter().filter(|c| !deleting(c.as_ref())) {
        let name = c.name_any();
        let Some((status, change)) = updated(c, verdicts.get(&name), now) else {
            continue;
        };
        if !written.due(&name, change, instant) {
            continue;
        }
        let _turn = shared.turn(c).await;
        let Some(cached) = current(c) else { continue };
        if !shared.unchanged_since(c, &cached) {
            continue;
        }
        written.wrote(&name, instant);
        let result = match condition_ops(c, &status.conditions).and_then(json_patch) {
            Some(ops) => writer.json_patch_status(c, ops).await,
            None => {
                let status = json!({"conditions": status.conditions});
                writer.patch_status(c, status).await
            }
        };
        // (What it wrote, `writer` shares with the pod-event loop.)
        if let Err(e) = result {
            tracing::debug!(nodeclaim = %name, error = %e, "writing Consolidatable failed")
        }
    }
}

/// The JSON patch that turns `claim`'s `Consolidatable` condition into the one in `after`
/// (absent: removed), touching only that entry: replaced or removed at its index behind a
/// `test` of the type there, or appended behind a `test` of the `lastPodEventTime` its
/// presence was computed from. Unlike a merge patch of the whole list (which needs the
/// object's resourceVersion), it is not made stale by the pod-event loop's time writes or by
/// the lifecycle's other conditions — only by a change to what it was computed from.
/// `None` when the claim has no conditions list to append to (the caller merge-patches) or
/// nothing changes.
pub(crate) fn condition_ops(
    claim: &NodeClaim,
    after: &[Condition],
) -> Option<Vec<serde_json::Value>> {
    let status = claim.status.as_ref()?;
    let at = status
        .conditions
        .iter()
        .position(|c| c.type_ == types::CONSOLIDATABLE);
    let want = api::conditions::get(after, types::CONSOLIDATABLE);
    let ops = match (at, want) {
        (Some(i), want) => {
            let path = format!("/status/conditions/{i}");
            let test = json!({"op": "test", "path": format!("{path}/type"), "value": types::CONSOLIDATABLE});
            match want {
                Some(c) if Some(c) == status.conditions.get(i) => return None,
                Some(c) => vec![test, json!({"op": "replace", "path": path, "value": c})],
                None => vec![test, json!({"op": "remove", "path": path})],
            }
        }
        (None, Some(c)) if !status.conditions.is_empty() => {
            let mut ops = Vec::with_capacity(2);
            if let Some(t) = &status.last_pod_event_time {
                ops.push(json!({"op": "test", "path": "/status/lastPodEventTime", "value": t}));
            }
            ops.push(json!({"op": "add", "path": "/status/conditions/-", "value": c}));
            ops
        }
        (None, _) => return None,
    };
    Some(ops)
}

/// JSON patch operations as a [`json_patch::Patch`] (`None` if they do not parse as one).
pub(crate) fn json_patch(ops: Vec<serde_json::Value>) -> Option<json_patch::Patch> {
    serde_json::from_value(serde_json::Value::Array(ops)).ok()
}

/// Sets the gauges from a pass.
pub fn record(metrics: &Metrics, outcome: &Outcome) {
    for (pool, reason, n, disrupting) in &outcome.allowed {
        let labels = PoolReasonLabels {
            nodepool: pool.clone(),
            reason: reason_label(*reason).into(),
        };
        metrics
            .nodepools_allowed_disruptions
            .get_or_create(&labels)
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
        metrics
            .nodes_consuming_budgets
            .get_or_create(&labels)
            .set(i64::try_from(*disrupting).unwrap_or(i64::MAX));
    }
    let mut eligible: BTreeMap<&str, i64> = BTreeMap::new();
    for v in outcome.verdicts.values() {
        if let Some(r) = v.reason.filter(|_| v.is_candidate()) {
            *eligible.entry(reason_label(r)).or_default() += 1;
        }
    }
    for reason in ["underutilized", "empty", "drifted"] {
        metrics
            .voluntary_disruption_eligible_nodes
            .get_or_create(&EligibleLabels {
                reason: reason.into(),
            })
            .set(eligible.get(reason).copied().unwrap_or(0));
    }
    for (pool, score) in &outcome.scores {
        metrics
            .consolidation_score
            .get_or_create(&NodePoolLabels {
                nodepool: pool.clone(),
            })
            .set(if score.is_finite() { *score } else { f64::MAX });
    }
}

/// Karpenter's lower-case reason label.
pub(crate) use super::orchestrate::reason_label;

#[cfg(test)]
mod tests {
    use super::*;
    use api::karpenter::DisruptionReason;

    #[test]
    fn the_condition_follows_the_verdict_and_is_written_only_on_change() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}}
        }))
        .expect("claim");
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("ts");
        // Not elapsed: absent, as in Karpenter — nothing to write for a fresh claim.
        let waiting = Verdict::blocked("consolidateAfter 30s not elapsed since the last pod event")
            .consolidatable(Some(false));
        assert_eq!(
            updated(&claim, Some(&waiting), now),
            None,
            "absent stays absent"
        );
        let blocked = Verdict::blocked("no cheaper option").consolidatable(Some(true));
        let (status, change) = updated(&claim, Some(&blocked), now).expect("added");
        assert_eq!(change, Change::State);
        let c = api::conditions::get(&status.conditions, types::CONSOLIDATABLE).expect("condition");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Blocked"));
        assert_eq!(c.message, "no cheaper option");
        let claim = NodeClaim {
            status: Some(status),
            ..claim
        };
        assert_eq!(
            updated(&claim, Some(&blocked), now),
            None,
            "no change, no write"
        );
        let other = Verdict::blocked("pods do not fit elsewhere").consolidatable(Some(true));
        let (_, change) = updated(&claim, Some(&other), now).expect("message changed");
        assert_eq!(change, Change::Message);
        let candidate = Verdict::candidate(
            "replace",
            vec!["c".into()],
            Some("small".into()),
            0.26,
            DisruptionReason::Underutilized,
        )
        .consolidatable(Some(true));
        let (status, change) = updated(&claim, Some(&candidate), now).expect("changed");
        assert_eq!(change, Change::State);
        let c = api::conditions::get(&status.conditions, types::CONSOLIDATABLE).expect("condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Candidate")
        );
        assert_eq!(c.message, "candidate: replace with small (saves 0.26/h)");
        // A new pod event, Never, or not initialized: the condition goes away.
        let claim = NodeClaim {
            status: Some(status),
            ..claim
        };
        let (status, change) = updated(&claim, Some(&waiting), now).expect("removed");
        assert_eq!(change, Change::State);
        assert!(api::conditions::get(&status.conditions, types::CONSOLIDATABLE).is_none());
        let off = Verdict::blocked("consolidateAfter is Never");
        let (status, _) = updated(&claim, Some(&off), now).expect("removed");
        assert!(api::conditions::get(&status.conditions, types::CONSOLIDATABLE).is_none());
    }

    #[test]
    fn the_condition_is_patched_alone_behind_a_test_of_what_it_was_computed_from() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("ts");
        let claim: NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
            "status": {
                "lastPodEventTime": "2026-11-22T09:00:00Z",
                "conditions": [
                    {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-11-22T08:00:00Z"},
                    {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": "2026-11-22T08:01:00Z"}
                ]
            }
        }))
        .expect("claim");
        // Absent: appended, behind the pod-event time its presence was computed from.
        let blocked = Verdict::blocked("no cheaper option").consolidatable(Some(true));
        let (status, _) = updated(&claim, Some(&blocked), now).expect("added");
        let ops = condition_ops(&claim, &status.conditions).expect("ops");
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/status/lastPodEventTime", "value": "2026-11-22T09:00:00Z"})
        );
        assert_eq!(ops[1]["op"], "add");
        assert_eq!(ops[1]["path"], "/status/conditions/-");
        assert_eq!(ops[1]["value"]["reason"], "Blocked");
        assert!(json_patch(ops.clone()).is_some(), "a valid JSON patch");
        // Applied, the patch gives exactly the merge patch's status.
        let mut doc = serde_json::to_value(&claim).expect("json");
        json_patch::patch(&mut doc, &json_patch(ops).expect("patch")).expect("applies");
        assert_eq!(
            doc["status"]["conditions"],
            serde_json::to_value(&status.conditions).expect("json")
        );
        // Present at index 2: replaced or removed there, behind a test of the type at 2.
        let claim = NodeClaim {
            status: Some(status),
            ..claim
        };
        let candidate = Verdict::candidate(
            "delete",
            vec!["c".into()],
            None,
            0.1,
            DisruptionReason::Empty,
        )
        .consolidatable(Some(true));
        let (changed, _) = updated(&claim, Some(&candidate), now).expect("changed");
        let ops = condition_ops(&claim, &changed.conditions).expect("ops");
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/status/conditions/2/type", "value": "Consolidatable"})
        );
        assert_eq!(
            (ops[1]["op"].as_str(), ops[1]["path"].as_str()),
            (Some("replace"), Some("/status/conditions/2"))
        );
        let waiting = Verdict::blocked("not elapsed").consolidatable(Some(false));
        let (removed, _) = updated(&claim, Some(&waiting), now).expect("removed");
        let ops = condition_ops(&claim, &removed.conditions).expect("ops");
        assert_eq!(
            ops[1],
            json!({"op": "remove", "path": "/status/conditions/2"})
        );
        // A stale position fails the test: the API server refuses it (a conflict), never
        // removes another condition.
        let mut moved = serde_json::to_value(&claim).expect("json");
        moved["status"]["conditions"]
            .as_array_mut()
            .expect("list")
            .remove(0);
        assert!(json_patch::patch(&mut moved, &json_patch(ops).expect("patch")).is_err());
        // Unchanged: nothing; no list at all: the caller's merge patch.
        assert_eq!(
            condition_ops(&claim, &claim.status.as_ref().expect("status").conditions),
            None
        );
        let bare = NodeClaim {
            status: None,
            ..claim
        };
        assert_eq!(condition_ops(&bare, &changed.conditions), None);
    }

    #[test]
    fn a_message_alone_is_refreshed_at_most_once_a_minute() {
        let mut w = Written::default();
        let t0 = Instant::now();
        assert!(w.due("a", Change::Message, t0), "never written: due");
        w.wrote("a", t0);
        assert!(!w.due("a", Change::Message, t0 + Duration::from_secs(59)));
        assert!(w.due("a", Change::State, t0 + Duration::from_secs(1)));
        assert!(w.due("a", Change::Message, t0 + MESSAGE_REFRESH));
    }
}
