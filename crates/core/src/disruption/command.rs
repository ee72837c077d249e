//! A disruption command as recorded on its candidates: the annotations, the [`Record`], and
//! the questions every method asks of them (in a command? cooling down after a rollback?).

use std::time::Duration;

use api::NodeClaim;
use api::consts::annotations;
use api::karpenter::DisruptionReason;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::objects::annotation;

/// Annotation on candidates (the [`Record`]) and label on replacements (the id).
pub const COMMAND: &str = annotations::DISRUPTION_COMMAND;
/// Default bound on a command (Karpenter: 10 min at least).
pub const TIMEOUT: Duration = Duration::from_secs(600);
/// Annotation on a candidate whose command was rolled back: when.
pub(crate) const FAILED: &str = annotations::DISRUPTION_FAILED;
/// A candidate whose command was rolled back is not tried again for this long (a template
/// whose Machines never join would otherwise churn a Machine per pass).
pub(crate) const COOLDOWN: Duration = Duration::from_secs(300);

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
pub(crate) fn retry_after(claim: &NodeClaim, now: Timestamp) -> Option<Timestamp> {
    let failed: Timestamp = annotation(claim, FAILED)?.parse().ok()?;
    let until = failed
        .checked_add(k8s_openapi::jiff::SignedDuration::try_from(COOLDOWN).ok()?)
        .ok()?;
    (until > now).then_some(until)
}

pub(crate) use crate::objects::in_command;

/// The lowercase metric/event label of a reason.
pub(crate) fn reason_label(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Underutilized => "underutilized",
        DisruptionReason::Drifted => "drifted",
        DisruptionReason::Empty => "empty",
        DisruptionReason::Unhealthy => "unhealthy",
    }
}

pub(super) fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Underutilized => api::consts::reasons::UNDERUTILIZED,
        DisruptionReason::Drifted => api::consts::reasons::DRIFTED,
        DisruptionReason::Empty => api::consts::reasons::EMPTY,
        DisruptionReason::Unhealthy => api::consts::reasons::UNHEALTHY,
    }
}

/// A command id: short, a valid label value, unique per candidate set and start time.
pub(crate) fn command_id(candidates: &[String], now: Timestamp) -> String {
    let text = format!("{}@{}", candidates.join(","), now.as_nanosecond());
    format!("d{:016x}", crate::objects::fnv64(&text))
}
