//! Property tests of node-selector requirements (`Requirements::from_list`, the algebra
//! behind it, and `to_requirements`): every list of requirements means what Kubernetes
//! means by it (an independent oracle evaluates each requirement on a label set), the
//! intersection of requirements on one key is exact, rendering and reading back keeps the
//! meaning, and `intersects` never refuses a pair that a label set satisfies.
//! Case counts: `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "../../../tests/common/prop_cases.rs"]
mod prop_cases;

use std::collections::BTreeMap;

use proptest::prelude::*;
use scheduling::{Operator, Requirement, Requirements};

const KEYS: [&str; 2] = ["k1", "k2"];

/// Label values: words, small integers, the i64 extremes and beyond, odd integer spellings.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "a",
            "b",
            "",
            "x1",
            "007",
            "+5",
            "-0",
            " 1",
            "-9223372036854775808",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775807",
            "9223372036854775806",
        ])
        .prop_map(str::to_string),
        (-4i64..=4).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ]
}

const OPERATORS: [Operator; 8] = [
    Operator::In,
    Operator::NotIn,
    Operator::Exists,
    Operator::DoesNotExist,
    Operator::Gt,
    Operator::Lt,
    Operator::Gte,
    Operator::Lte,
];

/// Requirements as the API admits them: `In`/`NotIn` with values, numeric operators with one
/// (sometimes none or two, which must not panic and satisfy nothing / use the first).
fn requirement() -> impl Strategy<Value = Requirement> {
    (
        prop::sample::select(KEYS.to_vec()),
        prop::sample::select(OPERATORS.to_vec()),
        prop::collection::vec(value(), 1..4),
        0usize..3,
        prop::option::of(1u32..4),
    )
        .prop_map(|(key, operator, mut values, numeric_len, min_values)| {
            match operator {
                Operator::Exists | Operator::DoesNotExist => values.clear(),
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                    values.truncate(if numeric_len == 0 { 0 } else { 1 })
                }
                _ => {}
            }
            Requirement {
                key: key.to_string(),
                operator,
                values,
                min_values,
            }
        })
}

fn int(s: &str) -> Option<i64> {
    s.parse().ok()
}

/// What Kubernetes means by one requirement on a node whose label `key` is `label`.
fn oracle(r: &Requirement, label: Option<&str>) -> bool {
    let bound = r.values.first().and_then(|b| int(b));
    let compare = |f: fn(i64, i64) -> bool| match (label.and_then(int), bound) {
        (Some(v), Some(b)) => f(v, b),
        _ => false,
    };
    match r.operator {
        Operator::In => label.is_some_and(|v| r.values.iter().any(|x| x == v)),
        Operator::NotIn => label.is_none_or(|v| r.values.iter().all(|x| x != v)),
        Operator::Exists => label.is_some(),
        Operator::DoesNotExist => label.is_none(),
        Operator::Gt => compare(|v, b| v > b),
        Operator::Lt => compare(|v, b| v < b),
        Operator::Gte => compare(|v, b| v >= b),
        Operator::Lte => compare(|v, b| v <= b),
    }
}

/// Label sets to probe with: each key absent or set to one of the requirements' own values,
/// their neighbours, or a generated value.
fn probes(reqs: &[Requirement], extra: &[String]) -> Vec<BTreeMap<String, String>> {
    let mut candidates: Vec<Option<String>> = vec![None];
    for v in reqs.iter().flat_map(|r| &r.values).chain(extra) {
        candidates.push(Some(v.clone()));
        if let Some(n) = int(v) {
            for d in [n.checked_sub(1), n.checked_add(1)].into_iter().flatten() {
                candidates.push(Some(d.to_string()));
            }
        }
    }
    candidates.sort();
    candidates.dedup();
    let mut out = Vec::new();
    for a in &candidates {
        for b in &candidates {
            let mut labels = BTreeMap::new();
            for (k, v) in KEYS.iter().zip([a, b]) {
                if let Some(v) = v {
                    labels.insert(k.to_string(), v.clone());
                }
            }
            out.push(labels);
        }
    }
    out
}

fn holds(reqs: &[Requirement], labels: &BTreeMap<String, String>) -> bool {
    reqs.iter()
        .all(|r| oracle(r, labels.get(&r.key).map(String::as_str)))
}

proptest! {
    #![proptest_config(prop_cases::config(256, 100_000))]

    #[test]
    fn requirements_mean_what_kubernetes_means(
        reqs in prop::collection::vec(requirement(), 1..5),
        extra in prop::collection::vec(value(), 0..3),
    ) {
        let set = Requirements::from_list(&reqs);
        for labels in probes(&reqs, &extra) {
            prop_assert_eq!(set.allows(&labels), holds(&reqs, &labels), "{:?} on {:?}", reqs, labels);
        }
    }

    #[test]
    fn rendered_requirements_read_back_to_the_same_meaning(
        reqs in prop::collection::vec(requirement(), 1..5),
        extra in prop::collection::vec(value(), 0..3),
    ) {
        let set = Requirements::from_list(&reqs);
        let rendered = set.to_requirements(String::clone);
        let back = Requirements::from_list(&rendered);
        for labels in probes(&reqs, &extra) {
            prop_assert_eq!(back.allows(&labels), set.allows(&labels), "{:?} rendered {:?} on {:?}", reqs, rendered, labels);
        }
        // And rendering is stable.
        prop_assert_eq!(back.to_requirements(String::clone), rendered);
    }

    #[test]
    fn intersects_never_refuses_a_satisfiable_pair(
        a in prop::collection::vec(requirement(), 1..4),
        b in prop::collection::vec(requirement(), 1..4),
    ) {
        let (ra, rb) = (Requirements::from_list(&a), Requirements::from_list(&b));
        let all: Vec<Requirement> = a.iter().chain(&b).cloned().collect();
        if let Some(witness) = probes(&all, &[]).into_iter().find(|l| holds(&a, l) && holds(&b, l)) {
            prop_assert!(ra.intersects(&rb).is_ok(), "{:?} and {:?} both hold on {:?}", a, b, witness);
        }
    }
}
