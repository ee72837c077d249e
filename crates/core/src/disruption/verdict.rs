//! "Why (not)": the disruption verdict of every NodeClaim after a pass — the move it is part
//! of, or what keeps it. One function ([`verdicts`]) serves the loop (the `Consolidatable`
//! condition's message), `karpenter-capi inspect --why` and `simulate`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use api::karpenter::DisruptionReason;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::{Timers, View};

/// The verdict of one NodeClaim.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// `delete` or `replace` when it is part of a move; absent when blocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The NodeClaims of the move (itself included).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// The instance type a replace launches (the cheapest option).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// What the move saves per hour.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings_per_hour: Option<f64>,
    /// The disruption reason of the move.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<DisruptionReason>,
    /// What Karpenter's first-fit packing of the move's pods would launch per hour, when the
    /// move's price-aware plan beat it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_fit_price_per_hour: Option<f64>,
    /// What keeps it (when not part of a move).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
    /// Whether `consolidateAfter` has elapsed since its last pod event (`None`: the
    /// condition does not apply — `Never`, or not initialized).
    #[serde(skip)]
    pub consolidatable: Option<bool>,
}

impl Verdict {
    /// A NodeClaim kept by `why`.
    pub fn blocked(why: impl fmt::Display) -> Self {
        Verdict {
            action: None,
            nodes: Vec::new(),
            replacement: None,
            savings_per_hour: None,
            reason: None,
            first_fit_price_per_hour: None,
            blocker: Some(why.to_string()),
            consolidatable: None,
        }
    }

    /// A NodeClaim that is part of a move.
    pub fn candidate(
        action: &str,
        nodes: Vec<String>,
        replacement: Option<String>,
        savings: f64,
        reason: DisruptionReason,
    ) -> Self {
        Verdict {
            action: Some(action.to_string()),
            nodes,
            replacement,
            savings_per_hour: Some(savings),
            reason: Some(reason),
            first_fit_price_per_hour: None,
            blocker: None,
            consolidatable: Some(true),
        }
    }

    /// With the price of the first-fit plan the move's plan beat, if it did.
    pub fn first_fit(mut self, price: Option<f64>) -> Self {
        self.first_fit_price_per_hour = price;
        self
    }

    /// With the `Consolidatable` state set.
    pub fn consolidatable(mut self, c: Option<bool>) -> Self {
        self.consolidatable = c;
        self
    }

    pub(crate) fn is_candidate(&self) -> bool {
        self.action.is_some()
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.action, &self.blocker) {
            (Some(action), _) => {
                write!(f, "candidate: {action}")?;
                if self.nodes.len() > 1 {
                    write!(f, " {} nodes", self.nodes.len())?;
                }
                if let Some(r) = &self.replacement {
                    write!(f, " with {r}")?;
                }
                match self.savings_per_hour {
                    Some(s) if s > 0.0 => write!(f, " (saves {s:.2}/h)")?,
                    _ => {}
                }
                match self.first_fit_price_per_hour {
                    Some(p) => write!(f, "; first-fit packing would launch {p:.2}/h"),
                    None => Ok(()),
                }
            }
            (None, Some(b)) => f.write_str(b),
            (None, None) => f.write_str("no verdict"),
        }
    }
}

/// The verdict of every NodeClaim of `view` at `now`, from a fresh pass (no timers, no
/// pending validation): what the loop would consider now.
pub fn verdicts(view: &View, now: Timestamp) -> BTreeMap<String, Verdict> {
    let mut timers = Timers::default();
    let simulator = super::simulate::Simulator {
        catalog: view.catalog,
        available: crate::model::convert::Availability::Ignored,
    };
    super::pass(view, &mut timers, &simulator, now, Instant::now()).verdicts
}
