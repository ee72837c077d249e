//! The known disagreements (`crates/conformance/known.json`), each excused by scenario *and*
//! kind ([`Disagreement::category`]), so a new kind of disagreement in a listed scenario still
//! counts; and the verdict over a set of outcomes. One list for the quick corpus
//! (`tests/corpus.rs`) and the full run (`hack/conformance/run.sh`, through the example).

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

use crate::compare::{Disagreement, Outcome};

/// The checked-in list.
const KNOWN: &str = include_str!("../known.json");

/// One excused disagreement.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Excuse {
    /// The spec's full text, as recorded.
    pub scenario: String,
    /// The disagreement's category ([`Disagreement::category`]).
    pub kind: String,
    /// Its cause (docs/conformance.md, "Disagreements by cause").
    pub why: String,
}

/// Reading the list fails as reading a corpus does.
pub use crate::record::Error;

/// The checked-in list (`crates/conformance/known.json`).
pub fn builtin() -> Result<Vec<Excuse>, Error> {
    serde_json::from_str(KNOWN).map_err(|e| Error::Json("known.json".into(), e))
}

/// A list in the same format from a file (an empty `[]` excuses nothing).
pub fn load(path: &Path) -> Result<Vec<Excuse>, Error> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io(shown.clone(), e))?;
    serde_json::from_str(&text).map_err(|e| Error::Json(shown, e))
}

/// What a set of outcomes shows against the list.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Disagreements no excuse covers (`id: kind: detail`).
    pub unexcused: Vec<String>,
    /// Excuses no disagreement uses any more (`scenario: kind`).
    pub stale: Vec<String>,
}

impl Verdict {
    pub fn passes(&self) -> bool {
        self.unexcused.is_empty() && self.stale.is_empty()
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for u in &self.unexcused {
            writeln!(f, "disagreement not in known.json: {u}")?;
        }
        for s in &self.stale {
            writeln!(
                f,
                "known disagreement that no longer occurs (update known.json and docs/conformance.md): {s}"
            )?;
        }
        Ok(())
    }
}

/// Every disagreement in `outcomes` must be excused by (scenario, kind), and every excuse must
/// still be used.
pub fn judge(outcomes: &[Outcome], excuses: &[Excuse]) -> Verdict {
    let mut used = BTreeSet::new();
    let mut verdict = Verdict::default();
    for o in outcomes {
        for d in &o.disagreements {
            let kind = d.category();
            match excuses
                .iter()
                .position(|e| e.scenario == o.scenario && e.kind == kind)
            {
                Some(i) => {
                    used.insert(i);
                }
                None => verdict
                    .unexcused
                    .push(format!("{}: {kind}: {}", o.id, detail(d))),
            }
        }
    }
    verdict.stale = excuses
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains(i))
        .map(|(_, e)| format!("{}: {}", e.scenario, e.kind))
        .collect();
    verdict
}

fn detail(d: &Disagreement) -> String {
    match d {
        Disagreement::Unscheduled { pods, reason } => format!("{pods} pods: {reason}"),
        Disagreement::Invalid { detail, .. } => detail.clone(),
        Disagreement::Price { karpenter, ours } => format!("Karpenter {karpenter}, ours {ours}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_list_parses_and_names_each_pair_once() {
        let list = builtin().expect("known.json");
        assert!(!list.is_empty());
        let pairs: BTreeSet<_> = list.iter().map(|e| (&e.scenario, &e.kind)).collect();
        assert_eq!(pairs.len(), list.len(), "a (scenario, kind) listed twice");
        assert!(
            list.iter().all(|e| !e.why.is_empty()),
            "every excuse says why"
        );
    }

    fn outcome(scenario: &str, disagreements: Vec<Disagreement>) -> Outcome {
        Outcome {
            id: format!("#1 {scenario}"),
            scenario: scenario.into(),
            karpenter: Default::default(),
            ours: Default::default(),
            disagreements,
            missing: BTreeSet::new(),
            more: BTreeSet::new(),
            unmodelled: Vec::new(),
        }
    }

    fn excuse(scenario: &str, kind: &str) -> Excuse {
        Excuse {
            scenario: scenario.into(),
            kind: kind.into(),
            why: "w".into(),
        }
    }

    fn affinity() -> Disagreement {
        Disagreement::Invalid {
            constraint: "pod affinity".into(),
            detail: "d".into(),
        }
    }

    fn price() -> Disagreement {
        Disagreement::Price {
            karpenter: "1".into(),
            ours: "2".into(),
        }
    }

    #[test]
    fn an_excuse_covers_its_kind_in_its_scenario_only() {
        let list = [excuse("s", "invalid: pod affinity")];
        // Positive control: the listed pair passes.
        assert!(judge(&[outcome("s", vec![affinity()])], &list).passes());
        // Another kind in the listed scenario, and the listed kind in another scenario, fail.
        let v = judge(&[outcome("s", vec![affinity(), price()])], &list);
        assert_eq!(v.unexcused, ["#1 s: price higher: Karpenter 1, ours 2"]);
        assert!(v.stale.is_empty());
        let v = judge(&[outcome("t", vec![affinity()])], &list);
        assert_eq!(v.unexcused.len(), 1, "{v}");
        assert_eq!(v.stale, ["s: invalid: pod affinity"]);
    }

    #[test]
    fn an_excuse_nothing_uses_is_stale() {
        let list = [excuse("s", "invalid: pod affinity")];
        let v = judge(&[outcome("s", Vec::new())], &list);
        assert!(v.unexcused.is_empty());
        assert_eq!(v.stale, ["s: invalid: pod affinity"]);
        assert!(!v.passes());
    }
}
