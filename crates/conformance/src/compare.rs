//! One record, both sides: Karpenter's recorded plan and ours, each checked, then compared on
//! pods scheduled, NodeClaims and price; and the table over a corpus.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::check::{self, Report};
use crate::record::Record;
use crate::replay;

/// Relative slack for price comparisons (sums of float prices).
const EPSILON: f64 = 1e-9;

/// A difference that counts against us.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Disagreement {
    /// Karpenter schedules pods we leave unscheduled (with our first reason).
    Unscheduled { pods: usize, reason: String },
    /// Our placement breaks a constraint.
    Invalid { constraint: String, detail: String },
    /// Our NodeClaims cost more.
    Price { karpenter: String, ours: String },
}

impl Disagreement {
    /// The cause's category, for the table.
    pub fn category(&self) -> String {
        match self {
            Disagreement::Unscheduled { reason, .. } => format!("unscheduled: {}", generic(reason)),
            Disagreement::Invalid { constraint, .. } => format!("invalid: {constraint}"),
            Disagreement::Price { .. } => "price higher".into(),
        }
    }
}

/// A reason without its specifics: the part before the first comma or parenthesis, without
/// quoted names and words with digits (generated names, amounts).
pub fn generic(reason: &str) -> String {
    let r = reason.split([',', '(', ';']).next().unwrap_or(reason);
    r.split_whitespace()
        .filter(|w| !w.contains('"') && !w.chars().any(|c| c.is_ascii_digit()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Everything about one record.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub id: String,
    pub scenario: String,
    pub karpenter: Report,
    pub ours: Report,
    pub disagreements: Vec<Disagreement>,
    /// Pods we schedule that Karpenter does not.
    pub more: BTreeSet<String>,
    /// What the record uses that our model does not have.
    pub unmodelled: Vec<&'static str>,
}

impl Outcome {
    pub fn agrees(&self) -> bool {
        self.disagreements.is_empty()
    }
}

fn unmodelled(rec: &Record) -> Vec<&'static str> {
    let mut out = Vec::new();
    let reserved = rec
        .input
        .instance_types
        .values()
        .flatten()
        .flat_map(|it| &it.offerings)
        .any(|o| o.capacity_type == "reserved");
    if reserved {
        out.push("reserved offerings");
    }
    if rec.input.volume_requirements {
        out.push("volume topology");
    }
    if rec.input.dra {
        out.push("DRA");
    }
    out
}

/// Replays and compares one record.
pub fn compare(rec: &Record) -> Outcome {
    let k_plan = replay::karpenter(rec);
    let o_plan = replay::ours(rec);
    let karpenter = check::check(rec, &k_plan);
    let ours = check::check(rec, &o_plan);
    let mut disagreements = Vec::new();
    let missing: Vec<&String> = karpenter.scheduled.difference(&ours.scheduled).collect();
    if let Some(first) = missing.first() {
        let reason = o_plan
            .failed
            .get(*first)
            .cloned()
            .unwrap_or_else(|| "not placed".into());
        disagreements.push(Disagreement::Unscheduled {
            pods: missing.len(),
            reason,
        });
    }
    for v in &ours.violations {
        disagreements.push(Disagreement::Invalid {
            constraint: v.constraint.to_string(),
            detail: v.detail.clone(),
        });
    }
    if !cheaper(&karpenter, &ours) {
        disagreements.push(Disagreement::Price {
            karpenter: format!("{:.4} ({} NodeClaims)", karpenter.price, karpenter.claims),
            ours: format!("{:.4} ({} NodeClaims)", ours.price, ours.claims),
        });
    }
    Outcome {
        id: rec.id(),
        scenario: rec.scenario.clone(),
        more: ours
            .scheduled
            .difference(&karpenter.scheduled)
            .cloned()
            .collect(),
        karpenter,
        ours,
        disagreements,
        unmodelled: unmodelled(rec),
    }
}

/// Our price is at most Karpenter's, compared where both schedule the same pods (else the
/// prices are of different work and not compared).
fn cheaper(karpenter: &Report, ours: &Report) -> bool {
    karpenter.scheduled != ours.scheduled
        || ours.price <= karpenter.price * (1.0 + EPSILON) + EPSILON
}

/// Why Karpenter left pending a pod we schedule (its error, generic).
pub fn more_reason(rec: &Record, o: &Outcome) -> Option<String> {
    let first = o.more.iter().next()?;
    Some(generic(
        rec.karpenter
            .pod_errors
            .get(first)
            .map_or("not placed", String::as_str),
    ))
}

fn pct(n: usize, of: usize) -> String {
    if of == 0 {
        return "–".into();
    }
    format!("{:.1} %", 100.0 * n as f64 / of as f64)
}

/// The summary table (Markdown) over `outcomes` (with the records, for Karpenter's reasons).
pub fn table(records: &[Record], outcomes: &[Outcome]) -> String {
    let n = outcomes.len();
    let scenarios: BTreeSet<&str> = outcomes.iter().map(|o| o.scenario.as_str()).collect();
    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let agree = count(&|o| o.agrees());
    let all_k = count(&|o| o.karpenter.scheduled.is_subset(&o.ours.scheduled));
    let valid = count(&|o| o.ours.violations.is_empty());
    let k_valid = count(&|o| o.karpenter.violations.is_empty());
    let same = count(&|o| o.ours.scheduled == o.karpenter.scheduled);
    let cheaper =
        count(&|o| o.ours.scheduled == o.karpenter.scheduled && cheaper(&o.karpenter, &o.ours));
    let same_claims = count(&|o| o.ours.claims == o.karpenter.claims);
    let more = count(&|o| !o.more.is_empty());
    let mut s = String::new();
    let _ = writeln!(s, "| | records (Solves) | share |\n|---|---:|---:|");
    let _ = writeln!(s, "| scenarios (test specs) | {} | |", scenarios.len());
    let _ = writeln!(s, "| Solves replayed | {n} | |");
    let _ = writeln!(
        s,
        "| agreements (no disagreement below) | {agree} | {} |",
        pct(agree, n)
    );
    let _ = writeln!(
        s,
        "| every pod Karpenter schedules, we schedule | {all_k} | {} |",
        pct(all_k, n)
    );
    let _ = writeln!(s, "| our placement valid | {valid} | {} |", pct(valid, n));
    let _ = writeln!(
        s,
        "| Karpenter's placement valid | {k_valid} | {} |",
        pct(k_valid, n)
    );
    let _ = writeln!(s, "| same pods scheduled | {same} | {} |", pct(same, n));
    let _ = writeln!(
        s,
        "| … of which our price ≤ Karpenter's | {cheaper} | {} of {same} |",
        pct(cheaper, same)
    );
    let _ = writeln!(
        s,
        "| same NodeClaim count | {same_claims} | {} |",
        pct(same_claims, n)
    );
    let _ = writeln!(
        s,
        "| we schedule pods Karpenter does not | {more} | {} |",
        pct(more, n)
    );
    let mut causes: BTreeMap<String, usize> = BTreeMap::new();
    for o in outcomes {
        let cats: BTreeSet<String> = o.disagreements.iter().map(Disagreement::category).collect();
        for c in cats {
            *causes.entry(c).or_default() += 1;
        }
    }
    let _ = writeln!(s, "\n| disagreement (by cause) | records |\n|---|---:|");
    for (c, k) in &causes {
        let _ = writeln!(s, "| {} | {k} |", c.replace('|', "\\|"));
    }
    let mut k_bad: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes {
        let cats: BTreeSet<&str> = o
            .karpenter
            .violations
            .iter()
            .map(|v| v.constraint)
            .collect();
        for c in cats {
            *k_bad.entry(c).or_default() += 1;
        }
    }
    let mut more_by: BTreeMap<String, usize> = BTreeMap::new();
    for (r, o) in records.iter().zip(outcomes) {
        if let Some(why) = more_reason(r, o) {
            let tag = if o.unmodelled.is_empty() {
                String::new()
            } else {
                format!(" [{}]", o.unmodelled.join(", "))
            };
            *more_by.entry(format!("{why}{tag}")).or_default() += 1;
        }
    }
    let _ = writeln!(
        s,
        "\n| we schedule pods Karpenter leaves pending (its reason) | records |\n|---|---:|"
    );
    for (c, k) in &more_by {
        let _ = writeln!(s, "| {} | {k} |", c.replace('|', "\\|"));
    }
    let _ = writeln!(
        s,
        "\n| Karpenter's placement breaks (checker) | records |\n|---|---:|"
    );
    for (c, k) in &k_bad {
        let _ = writeln!(s, "| {c} | {k} |");
    }
    s
}

/// Every disagreement and every Karpenter violation, one line each (Markdown list).
pub fn details(outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    for o in outcomes {
        let flags = if o.unmodelled.is_empty() {
            String::new()
        } else {
            format!(" [uses: {}]", o.unmodelled.join(", "))
        };
        for d in &o.disagreements {
            let _ = writeln!(s, "- {}{flags}: {d:?}", o.id);
        }
        for v in &o.karpenter.violations {
            let _ = writeln!(
                s,
                "- {}{flags}: Karpenter {}: {}",
                o.id, v.constraint, v.detail
            );
        }
        if !o.more.is_empty() {
            let _ = writeln!(s, "- {}{flags}: we also schedule {:?}", o.id, o.more);
        }
    }
    s
}
