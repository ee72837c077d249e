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
