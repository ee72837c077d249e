//! The recorded quick corpus (`tests/conformance/*.json` at the workspace root: Solves of
//! Karpenter v1.15.0's own scheduling tests, recorded by `hack/conformance`): each is replayed
//! through the operator's conversion and our solver, both results are checked, and they must
//! agree (every pod Karpenter schedules we schedule, our placement valid, our price no higher)
//! except in the scenarios listed in [`KNOWN`] with their cause (docs/conformance.md).

use std::collections::BTreeSet;
use std::path::PathBuf;

use conformance::check::{self, Plan};
use conformance::compare;
use conformance::record::{self, Record};
use conformance::replay;

/// Scenarios with a known disagreement, and why (docs/conformance.md, "Disagreements").
const KNOWN: &[(&str, &str)] = &[
    (
        "Scheduling Offering Overrides should only select instance types whose offerings have CapacityOverride when pod requests an override resource",
        "offering capacity overrides are not modelled",
    ),
    (
        "Topology Pod Affinity/Anti-Affinity should allow two nodes to be created when two pods with matching affinities have incompatible selectors",
        "both sides place the pods apart, as the test asserts; the checker (Kubernetes) rejects both",
    ),
];

fn corpus() -> Vec<Record> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    record::load_dir(&dir).expect("tests/conformance")
}

#[test]
fn quick_corpus_agrees_with_karpenter_except_known_disagreements() {
    let records = corpus();
    assert!(records.len() >= 100, "{} records", records.len());
    let mut unexpected = Vec::new();
    let mut disagreeing = BTreeSet::new();
    for r in &records {
        let o = compare::compare(r);
        if o.agrees() {
            continue;
        }
        disagreeing.insert(r.scenario.as_str());
        if !KNOWN.iter().any(|(s, _)| *s == r.scenario) {
            unexpected.push(format!("{}: {:?}", o.id, o.disagreements));
        }
    }
    assert!(
        unexpected.is_empty(),
        "new disagreements:\n{}",
        unexpected.join("\n")
    );
    let resolved: Vec<&str> = KNOWN
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| !disagreeing.contains(s))
        .collect();
    assert!(
        resolved.is_empty(),
        "known disagreements that no longer occur (update KNOWN and docs/conformance.md): {resolved:?}"
    );
}

/// All of a plan's pods on its first NodeClaim.
fn merged(p: &Plan) -> Plan {
    let mut p = p.clone();
    let rest: Vec<String> = p
        .claims
        .iter()
        .skip(1)
        .flat_map(|c| c.pods.clone())
        .collect();
    p.claims.truncate(1);
    if let Some(c) = p.claims.first_mut() {
        c.pods.extend(rest);
    }
    p
}

/// The checker is not a rubber stamp: crammed onto one NodeClaim, Karpenter's own plans break
/// resources, anti-affinity and spread in the corpus.
#[test]
fn checker_rejects_plans_crammed_onto_one_nodeclaim() {
    let mut kinds = BTreeSet::new();
    for r in corpus() {
        let plan = replay::karpenter(&r);
        if plan.claims.len() < 2 || !check::check(&r, &plan).violations.is_empty() {
            continue;
        }
        kinds.extend(
            check::check(&r, &merged(&plan))
                .violations
                .into_iter()
                .map(|v| v.constraint),
        );
    }
    for want in ["resources", "pod anti-affinity", "topology spread"] {
        assert!(
            kinds.contains(want),
            "no crammed plan broke {want}: {kinds:?}"
        );
    }
}
