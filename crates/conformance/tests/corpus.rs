//! The recorded quick corpus (`tests/conformance/*.json` at the workspace root: Solves of
//! Karpenter v1.15.0's own scheduling tests, recorded by `hack/conformance`): each is replayed
//! through the operator's conversion and our solver, both results are checked, and they must
//! agree (every pod Karpenter schedules we schedule, our placement valid, our price no higher)
//! except for the disagreements listed by scenario and kind in `crates/conformance/known.json`
//! (the list `hack/conformance/run.sh` judges the full run by; causes in docs/conformance.md).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::OnceLock;

use conformance::check::{self, Plan};
use conformance::compare::{self, Outcome};
use conformance::known;
use conformance::record::{self, Record};
use conformance::replay;

/// Instance-selection specs on Karpenter's assorted catalog the corpus must hold
/// (`--large "Instance Type Selection=N"` when packing; docs/conformance.md).
const LARGE_SELECTION: usize = 8;
/// Default topology spread specs (`Topology DefaultConstraints …`) the corpus must hold.
const DEFAULT_SPREAD: usize = 12;
/// DRA specs (Karpenter's `Dynamic Resource Allocation …`, claims and devices recorded) the
/// corpus must hold: every one that makes such a Solve (2026-11-28: 38).
const DRA_SPECS: usize = 38;

/// The corpus, loaded once for every test of this binary.
fn corpus() -> &'static [Record] {
    static CORPUS: OnceLock<Vec<Record>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
        record::load_dir(&dir).expect("tests/conformance")
    })
}

#[test]
fn quick_corpus_agrees_with_karpenter_except_known_disagreements() {
    let records = corpus();
    assert!(records.len() >= 150, "{} records", records.len());
    let excuses = known::builtin().expect("known.json");
    let outcomes: Vec<Outcome> = records.iter().map(compare::compare).collect();
    let verdict = known::judge(&outcomes, &excuses);
    assert!(verdict.passes(), "{verdict}");

    // Positive control: a disagreement of another kind in an excused scenario fails. The
    // mutual-affinity Solve (our placement breaks pod affinity) relabelled as the excused
    // offering-override scenario (excused only for pods left unscheduled) is not excused, though
    // its scenario is listed; and the affinity excuse it no longer uses is stale.
    let affinity = excuses
        .iter()
        .find(|e| e.kind == "invalid: pod affinity")
        .expect("the mutual-affinity excuse");
    let other = excuses
        .iter()
        .find(|e| e.kind != affinity.kind && e.scenario != affinity.scenario)
        .expect("an excuse of another kind");
    let relabelled: Vec<Outcome> = outcomes
        .iter()
        .filter(|o| o.scenario == affinity.scenario && !o.agrees())
        .map(|o| Outcome {
            scenario: other.scenario.clone(),
            ..o.clone()
        })
        .collect();
    assert!(
        !relabelled.is_empty(),
        "no disagreeing Solve of {}",
        affinity.scenario
    );
    let rest: Vec<Outcome> = outcomes
        .iter()
        .filter(|o| o.scenario != affinity.scenario)
        .cloned()
        .chain(relabelled)
        .collect();
    let control = known::judge(&rest, &excuses);
    assert!(
        !control.unexcused.is_empty()
            && control.unexcused.iter().all(|u| u.contains(&affinity.kind)),
        "{control}"
    );
    assert_eq!(
        control.stale,
        [format!("{}: {}", affinity.scenario, affinity.kind)]
    );
}

/// Karpenter's instance-selection specs on its assorted catalog (hundreds of instance types)
/// and the default topology spread specs stay in the corpus when it is refreshed.
#[test]
fn quick_corpus_holds_large_catalogs_and_default_spread() {
    let records = corpus();
    let large: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.scenario.starts_with("Instance Type Selection"))
        .filter(|r| r.input.instance_types.values().any(|v| v.len() > 100))
        .map(|r| r.scenario.as_str())
        .collect();
    assert!(
        large.len() >= LARGE_SELECTION,
        "{} large-catalog instance-selection specs",
        large.len()
    );
    let defaults: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.scenario.starts_with("Topology DefaultConstraints"))
        .map(|r| r.scenario.as_str())
        .collect();
    assert!(
        defaults.len() >= DEFAULT_SPREAD,
        "{} default-spread specs",
        defaults.len()
    );
    // Karpenter's DRA specs (DRA on), with their claims and the types' devices recorded.
    let dra: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.input.dra && r.scenario.starts_with("Dynamic Resource Allocation"))
        .filter(|r| !r.input.resource_claims.is_empty())
        .filter(|r| {
            r.input
                .instance_types
                .values()
                .flatten()
                .any(|it| !it.resource_slice_templates.is_empty())
        })
        .map(|r| r.scenario.as_str())
        .collect();
    assert!(dra.len() >= DRA_SPECS, "{} DRA specs", dra.len());
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
/// resources, anti-affinity, spread, attach limits and devices in the corpus.
#[test]
fn checker_rejects_plans_crammed_onto_one_nodeclaim() {
    let mut kinds = BTreeSet::new();
    for r in corpus() {
        let plan = replay::karpenter(r);
        if plan.claims.len() < 2 || !check::check(r, &plan).violations.is_empty() {
            continue;
        }
        kinds.extend(
            check::check(r, &merged(&plan))
                .violations
                .into_iter()
                .map(|v| v.constraint),
        );
    }
    for want in [
        "resources",
        "pod anti-affinity",
        "topology spread",
        "volume limits",
        "devices",
    ] {
        assert!(
            kinds.contains(want),
            "no crammed plan broke {want}: {kinds:?}"
        );
    }
}
