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
    /// Pods Karpenter schedules that we do not, matched by class ([`matched`]).
    pub missing: BTreeSet<String>,
    /// Pods we schedule that Karpenter does not, matched by class.
    pub more: BTreeSet<String>,
    /// What the record uses that our model does not have.
    pub unmodelled: Vec<&'static str>,
}

impl Outcome {
    pub fn agrees(&self) -> bool {
        self.disagreements.is_empty()
    }

    /// Both sides schedule the same pods (up to interchangeable ones).
    pub fn same_pods(&self) -> bool {
        self.missing.is_empty() && self.more.is_empty()
    }
}

/// Each pod to schedule (`namespace/name`) with its class: pods of one class (same namespace,
/// labels, annotations, owners, and spec but for container names: replicas) schedule alike.
/// Karpenter breaks ties between equally counted spread domains in Go map order, at random, so
/// which of several such pods it leaves pending varies from run to run.
fn classes(rec: &Record) -> BTreeMap<String, String> {
    rec.pods
        .iter()
        .map(|p| {
            let key = crate::pod_key(p);
            let m = &p.metadata;
            // Container names (random in Karpenter's tests) do not change where a pod fits.
            let spec = p.spec.clone().map(|mut s| {
                s.containers.iter_mut().for_each(|c| c.name.clear());
                s.init_containers
                    .iter_mut()
                    .flatten()
                    .for_each(|c| c.name.clear());
                s
            });
            let what = (
                &m.namespace,
                &m.labels,
                &m.annotations,
                &m.owner_references,
                &spec,
            );
            // A pod that does not serialize is a class of its own.
            let class = serde_json::to_string(&what).unwrap_or_else(|_| key.clone());
            (key, class)
        })
        .collect()
}

/// The pods only Karpenter schedules and those only we schedule, after pairing each pod only
/// one side schedules with one of its class only the other side schedules (same count of a
/// class scheduled: no difference, whichever replicas).
fn matched(
    classes: &BTreeMap<String, String>,
    karpenter: &BTreeSet<String>,
    ours: &BTreeSet<String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let class = |p: &String| classes.get(p).unwrap_or(p).clone();
    let mut by_class: BTreeMap<String, (Vec<&String>, Vec<&String>)> = BTreeMap::new();
    for p in karpenter.difference(ours) {
        by_class.entry(class(p)).or_default().0.push(p);
    }
    for p in ours.difference(karpenter) {
        by_class.entry(class(p)).or_default().1.push(p);
    }
    let (mut missing, mut more) = (BTreeSet::new(), BTreeSet::new());
    for (k_only, o_only) in by_class.values() {
        let paired = k_only.len().min(o_only.len());
        missing.extend(k_only[paired..].iter().map(|p| (*p).clone()));
        more.extend(o_only[paired..].iter().map(|p| (*p).clone()));
    }
    (missing, more)
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
    out.extend(unmodelled_dra(rec));
    out
}

/// The DRA features a record uses that our model lacks: Karpenter's DRA switched off
/// (`IgnoreDRARequests`, its default) while a pending pod claims devices; attribute
/// bindings.
fn unmodelled_dra(rec: &Record) -> Vec<&'static str> {
    let mut out = Vec::new();
    let claiming = rec.pods.iter().any(|p| {
        p.spec.as_ref().is_some_and(|s| {
            s.resource_claims.as_ref().is_some_and(|c| !c.is_empty())
                || s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .any(|c| {
                        c.resources
                            .as_ref()
                            .and_then(|r| r.claims.as_ref())
                            .is_some_and(|c| !c.is_empty())
                    })
        })
    });
    if claiming && !rec.input.dra {
        out.push("DRA off in Karpenter");
    }
    if !rec.input.dra {
        return out;
    }
    if rec
        .input
        .instance_types
        .values()
        .flatten()
        .any(|it| it.attribute_bindings > 0)
    {
        out.push("DRA attribute bindings");
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
    let (missing, more) = matched(&classes(rec), &karpenter.scheduled, &ours.scheduled);
    if let Some(first) = missing.first() {
        let reason = o_plan
            .failed
            .get(first)
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
    if missing.is_empty() && more.is_empty() && !cheaper(&karpenter, &ours) {
        disagreements.push(Disagreement::Price {
            karpenter: format!("{:.4} ({} NodeClaims)", karpenter.price, karpenter.claims),
            ours: format!("{:.4} ({} NodeClaims)", ours.price, ours.claims),
        });
    }
    Outcome {
        id: rec.id(),
        scenario: rec.scenario.clone(),
        missing,
        more,
        karpenter,
        ours,
        disagreements,
        unmodelled: unmodelled(rec),
    }
}

/// Our price is at most Karpenter's; compare only where both schedule the same pods (else the
/// prices are of different work).
fn cheaper(karpenter: &Report, ours: &Report) -> bool {
    ours.price <= karpenter.price * (1.0 + EPSILON) + EPSILON
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
    let all_k = count(&|o| o.missing.is_empty());
    let valid = count(&|o| o.ours.violations.is_empty());
    let k_valid = count(&|o| o.karpenter.violations.is_empty());
    let same = count(&|o| o.same_pods());
    let strictly: Vec<&Outcome> = outcomes
        .iter()
        // Karpenter's price is not within tolerance of ours or below it.
        .filter(|o| o.same_pods() && !cheaper(&o.ours, &o.karpenter))
        .collect();
    let saved: f64 = strictly
        .iter()
        .map(|o| o.karpenter.price - o.ours.price)
        .sum();
    let k_total: f64 = strictly.iter().map(|o| o.karpenter.price).sum();
    let cheaper = count(&|o| o.same_pods() && cheaper(&o.karpenter, &o.ours));
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
        "| … of which our price < Karpenter's | {} | saves {saved:.4}/h of their {k_total:.4}/h ({}) |",
        strictly.len(),
        if k_total > 0.0 {
            format!("{:.1} %", 100.0 * saved / k_total)
        } else {
            "–".into()
        }
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
    breakdowns(&mut s, records, outcomes);
    s
}

/// The tables by cause under the summary: our disagreements, the pods only we schedule (with
/// Karpenter's reason), and what Karpenter's placements break.
fn breakdowns(s: &mut String, records: &[Record], outcomes: &[Outcome]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pods: &[&str]) -> BTreeSet<String> {
        pods.iter().map(|p| format!("default/{p}")).collect()
    }

    /// A record whose pods to schedule are `pods` (name, `app` label).
    fn record(pods: &[(&str, &str)]) -> Record {
        let pods: Vec<serde_json::Value> = pods
            .iter()
            .map(|(name, app)| {
                serde_json::json!({
                    "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
                    "spec": {"containers": [{"name": format!("c-{name}"), "image": "i"}]}
                })
            })
            .collect();
        let rec = serde_json::json!({
            "scenario": "s", "solve": 1, "input": {}, "pods": pods, "karpenter": {}
        });
        serde_json::from_value(rec).expect("record")
    }

    #[test]
    fn replicas_left_pending_are_interchangeable() {
        // Karpenter places a and b, we place b and c: the same two of three replicas.
        let rec = record(&[("a", "web"), ("b", "web"), ("c", "web")]);
        let (missing, more) = matched(&classes(&rec), &set(&["a", "b"]), &set(&["b", "c"]));
        assert!(missing.is_empty(), "{missing:?}");
        assert!(more.is_empty(), "{more:?}");
    }

    #[test]
    fn pods_of_different_classes_are_not_interchangeable() {
        // c differs from a by its label: a is missed, c is one more, however many are placed.
        let rec = record(&[("a", "web"), ("b", "web"), ("c", "db")]);
        let (missing, more) = matched(&classes(&rec), &set(&["a", "b"]), &set(&["b", "c"]));
        assert_eq!(missing, set(&["a"]));
        assert_eq!(more, set(&["c"]));
    }

    #[test]
    fn fewer_replicas_scheduled_is_a_miss_of_the_difference() {
        let rec = record(&[("a", "web"), ("b", "web"), ("c", "web"), ("d", "web")]);
        let (missing, more) = matched(&classes(&rec), &set(&["a", "b", "c"]), &set(&["d"]));
        assert_eq!(missing.len(), 2, "{missing:?}");
        assert!(more.is_empty(), "{more:?}");
    }
}
