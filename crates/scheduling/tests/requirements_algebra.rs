//! The requirement algebra on plain strings (what the controller uses).
use std::collections::BTreeMap;

use scheduling::{Operator, Requirement, Requirements, ValueSet};

fn reqs(list: &[(&str, Operator, &[&str])]) -> Requirements {
    Requirements::from_list(
        &list
            .iter()
            .map(|(k, o, v)| Requirement::new(*k, *o, v))
            .collect::<Vec<_>>(),
    )
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn in_intersect_not_in() {
    let mut r = reqs(&[("zone", Operator::In, &["a", "b", "c"])]);
    r.intersect(&reqs(&[("zone", Operator::NotIn, &["b"])]));
    let z = r.get(&"zone".to_string()).unwrap();
    assert_eq!(z.operator(), Operator::In);
    assert_eq!(z.values, vec!["a".to_string(), "c".to_string()]);
}

#[test]
fn disjoint_in_sets_do_not_intersect_but_two_exclusions_do() {
    let a = reqs(&[("zone", Operator::In, &["a"])]);
    let b = reqs(&[("zone", Operator::In, &["b"])]);
    assert!(a.intersects(&b).is_err());
    let c = reqs(&[("zone", Operator::NotIn, &["a"])]);
    let d = reqs(&[("zone", Operator::DoesNotExist, &[])]);
    assert!(c.intersects(&d).is_ok());
}

#[test]
fn compatibility_with_undefined_keys() {
    let pool = reqs(&[("team", Operator::In, &["a"])]);
    let pod = reqs(&[("kubernetes.io/arch", Operator::In, &["arm64"])]);
    assert!(pool.compatible(&pod, |_| false).is_err());
    assert!(pool.compatible(&pod, |k| k == "kubernetes.io/arch").is_ok());
    let pod_not_in = reqs(&[("gpu", Operator::NotIn, &["true"])]);
    assert!(pool.compatible(&pod_not_in, |_| false).is_ok());
}

#[test]
fn numeric_bounds() {
    let r = reqs(&[
        ("gen", Operator::Gt, &["3"]),
        ("gen", Operator::Lte, &["5"]),
    ]);
    assert!(!r.allows(&labels(&[("gen", "3")])));
    assert!(r.allows(&labels(&[("gen", "4")])));
    assert!(r.allows(&labels(&[("gen", "5")])));
    assert!(!r.allows(&labels(&[("gen", "6")])));
    assert!(!r.allows(&labels(&[("gen", "x")])));
    assert!(!r.allows(&labels(&[])));
    let empty = reqs(&[("gen", Operator::Gt, &["5"]), ("gen", Operator::Lt, &["6"])]);
    assert!(empty.get(&"gen".to_string()).unwrap().is_empty());
    let bad = reqs(&[("gen", Operator::Gte, &["not-a-number"])]);
    assert!(bad.get(&"gen".to_string()).unwrap().is_empty());
}

#[test]
fn label_set_allowed() {
    let r = reqs(&[
        ("zone", Operator::In, &["a"]),
        ("spot", Operator::DoesNotExist, &[]),
        ("arch", Operator::Exists, &[]),
    ]);
    assert!(r.allows(&labels(&[("zone", "a"), ("arch", "amd64")])));
    assert!(!r.allows(&labels(&[("zone", "a")])));
    assert!(!r.allows(&labels(&[("zone", "a"), ("arch", "amd64"), ("spot", "1")])));
    assert!(!r.allows(&labels(&[("zone", "b"), ("arch", "amd64")])));
}

#[test]
fn min_values_survive_intersection() {
    let a = ValueSet::from_operator(Operator::Exists, Vec::<String>::new(), Some(3));
    let b = ValueSet::in_values(vec!["x".to_string(), "y".to_string()]);
    let c = a.intersection(&b);
    assert_eq!(c.min_values, Some(3));
    assert_eq!(c.operator(), Operator::In);
}

// Found by tests/prop_requirements.rs (each failed before absence was tracked explicitly and
// bounds became inclusive).

#[test]
fn contradictions_are_not_satisfied_by_an_absent_label() {
    let none = labels(&[]);
    for contradiction in [
        reqs(&[("k", Operator::In, &["a"]), ("k", Operator::In, &["b"])]),
        reqs(&[("k", Operator::In, &["a"]), ("k", Operator::NotIn, &["a"])]),
        reqs(&[
            ("k", Operator::Exists, &[]),
            ("k", Operator::DoesNotExist, &[]),
        ]),
        reqs(&[("k", Operator::Gt, &["5"]), ("k", Operator::Lt, &["3"])]),
    ] {
        assert!(!contradiction.allows(&none), "{contradiction:?}");
        assert!(
            reqs(&[("k", Operator::DoesNotExist, &[])])
                .intersects(&contradiction)
                .is_err()
        );
    }
    // Still fine: both sides only exclude.
    let excluded = reqs(&[
        ("k", Operator::NotIn, &["a"]),
        ("k", Operator::DoesNotExist, &[]),
    ]);
    assert!(excluded.allows(&none));
}

#[test]
fn numeric_operators_need_the_label_even_with_exclusions_or_a_bad_value() {
    let none = labels(&[]);
    assert!(!reqs(&[("k", Operator::Gt, &[])]).allows(&none));
    assert!(!reqs(&[("k", Operator::Gt, &["x"])]).allows(&none));
    let r = reqs(&[
        ("k", Operator::Gt, &["007"]),
        ("k", Operator::NotIn, &["a"]),
    ]);
    assert!(!r.allows(&none));
    assert!(r.allows(&labels(&[("k", "8")])));
}

#[test]
fn bounds_at_the_ends_of_i64() {
    let min = i64::MIN.to_string();
    let max = i64::MAX.to_string();
    assert!(reqs(&[("k", Operator::Gte, &[&min])]).allows(&labels(&[("k", &min)])));
    assert!(reqs(&[("k", Operator::Lte, &[&max])]).allows(&labels(&[("k", &max)])));
    assert!(!reqs(&[("k", Operator::Gt, &[&max])]).allows(&labels(&[("k", &max)])));
}

#[test]
fn rendering_keeps_both_bounds_and_exclusions() {
    let r = reqs(&[
        ("k", Operator::Gt, &["2"]),
        ("k", Operator::Lt, &["8"]),
        ("k", Operator::NotIn, &["5"]),
    ]);
    let rendered = r.to_requirements(String::clone);
    let ops: Vec<Operator> = rendered.iter().map(|q| q.operator).collect();
    assert_eq!(ops, [Operator::Gt, Operator::Lt, Operator::NotIn]);
    let back = Requirements::from_list(&rendered);
    for (v, want) in [("3", true), ("5", false), ("9", false), ("1", false)] {
        assert_eq!(back.allows(&labels(&[("k", v)])), want, "{v}");
    }
    // A lower bound of 0 stays non-negative (NodeClaim validation).
    let gte0 = reqs(&[("k", Operator::Gte, &["0"])]).to_requirements(String::clone);
    assert_eq!(
        (gte0[0].operator, gte0[0].values.clone()),
        (Operator::Gte, vec!["0".to_string()])
    );
    let back = Requirements::from_list(&gte0);
    for (v, want) in [("0", true), ("-1", false)] {
        assert_eq!(back.allows(&labels(&[("k", v)])), want, "{v}");
    }
}
