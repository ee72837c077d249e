use std::collections::BTreeMap;

use api::consts::labels as label;

use super::*;
use crate::model::Resources;

/// An offering of the provider's `template` (its id and its `…/instance-template` label).
fn offering(template: &str, zone: &str, capacity_type: &str, price: f64) -> Offering {
    let mut o = Offering::new(
        template,
        Some(zone),
        capacity_type,
        price,
        PriceSource::Annotation,
    );
    o.labels
        .insert(label::INSTANCE_TEMPLATE.to_string(), template.to_string());
    o
}

/// An instance type `name` of `cpu` cores with one on-demand offering per zone (a, b) at
/// `price`, launched from the template of the same name.
fn it(name: &str, cpu: i64, price: f64) -> InstanceType {
    let res = Resources(BTreeMap::from([
        ("cpu".to_string(), cpu * 1000),
        ("memory".to_string(), cpu << 32),
    ]));
    let mut offerings = vec![
        offering(name, "zone-a", "on-demand", price),
        offering(name, "zone-b", "on-demand", price),
    ];
    sort_offerings(&mut offerings);
    InstanceType {
        volume_limits: Default::default(),
        devices: None,
        name: name.into(),
        capacity: res.clone(),
        allocatable: res,
        labels: BTreeMap::from([
            (label::INSTANCE_TYPE.to_string(), name.to_string()),
            (label::ARCH.to_string(), "amd64".to_string()),
            (label::INSTANCE_CPU.to_string(), cpu.to_string()),
            (label::INSTANCE_TEMPLATE.to_string(), name.to_string()),
        ]),
        taints: Vec::new(),
        offerings,
        capacity_overlaid: false,
    }
}

fn catalog() -> InstanceTypes {
    let mut instance_types = vec![it("medium", 2, 0.1), it("large", 4, 0.2)];
    sort_instance_types(&mut instance_types);
    InstanceTypes::of(instance_types)
}

fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
    Requirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

fn overlay(name: &str, weight: i32, reqs: Vec<Requirement>) -> Overlay {
    Overlay {
        name: name.into(),
        weight,
        requirements: reqs,
        price: None,
        capacity: BTreeMap::new(),
    }
}

fn priced(name: &str, weight: i32, reqs: Vec<Requirement>, change: &str) -> Overlay {
    Overlay {
        price: PriceChange::parse(change),
        ..overlay(name, weight, reqs)
    }
}

fn with_capacity(name: &str, weight: i32, reqs: Vec<Requirement>, res: &[(&str, i64)]) -> Overlay {
    Overlay {
        capacity: res.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ..overlay(name, weight, reqs)
    }
}

fn of_type(name: &str) -> Vec<Requirement> {
    vec![req(label::INSTANCE_TYPE, Operator::In, &[name])]
}

fn eval(overlays: Vec<Overlay>, catalogs: &[&InstanceTypes]) -> Evaluation {
    let bases: Vec<&[InstanceType]> = catalogs.iter().map(|c| &c.instance_types[..]).collect();
    evaluate(overlays.into_iter().map(Ok).collect(), &bases)
}

fn prices(c: &InstanceTypes, name: &str) -> Vec<f64> {
    let mut p: Vec<f64> = c
        .get(name)
        .map(|it| it.offerings.iter().map(|o| o.price).collect())
        .unwrap_or_default();
    p.sort_by(f64::total_cmp);
    p
}

#[test]
fn price_changes_parse_and_apply_as_karpenter() {
    let at = |s: &str, p: f64| PriceChange::parse(s).map(|c| c.apply(p));
    assert_eq!(at("1.5", 0.2), Some(1.5));
    assert_eq!(at("+0.5", 0.2), Some(0.7));
    assert_eq!(at("-0.5", 0.2), Some(0.0), "never below 0");
    assert_eq!(at("+10%", 2.0), Some(2.2));
    assert_eq!(at("-15%", 2.0), Some(1.7));
    assert_eq!(at("-100%", 2.0), Some(0.0));
    assert_eq!(PriceChange::parse("10%"), None, "a percent is signed");
    assert_eq!(PriceChange::parse("abc"), None);
    assert_eq!(PriceChange::parse("+inf"), None);
}

#[test]
fn requirements_match_offering_and_instance_type_labels() {
    let c = catalog();
    let large = c.get("large").expect("large");
    let (a, b) = (&large.offerings[0], &large.offerings[1]);
    assert_eq!(a.zone.as_deref(), Some("zone-a"));
    let m = |reqs: Vec<Requirement>, o: &Offering| overlay("o", 1, reqs).matches(large, o);
    assert!(m(of_type("large"), a));
    assert!(!m(of_type("medium"), a));
    assert!(m(vec![req(label::ZONE, Operator::In, &["zone-a"])], a));
    assert!(!m(vec![req(label::ZONE, Operator::In, &["zone-a"])], b));
    assert!(m(
        vec![req(label::INSTANCE_TEMPLATE, Operator::In, &["large"])],
        a
    ));
    assert!(m(
        vec![req(label::CAPACITY_TYPE, Operator::In, &["on-demand"])],
        a
    ));
    assert!(m(vec![req(label::INSTANCE_CPU, Operator::Gt, &["2"])], a));
    assert!(!m(vec![req(label::INSTANCE_CPU, Operator::Lt, &["4"])], a));
    assert!(m(vec![req(label::INSTANCE_CPU, Operator::Lte, &["4"])], a));
    assert!(m(vec![req(label::ARCH, Operator::Exists, &[])], a));
    assert!(!m(vec![req(label::ARCH, Operator::DoesNotExist, &[])], a));
    // Undefined keys: denied, unless the operator excludes.
    assert!(!m(vec![req("example.com/team", Operator::In, &["x"])], a));
    assert!(!m(vec![req("example.com/team", Operator::Exists, &[])], a));
    assert!(m(vec![req("example.com/team", Operator::NotIn, &["x"])], a));
    assert!(m(
        vec![req("example.com/team", Operator::DoesNotExist, &[])],
        a
    ));
    assert!(!m(
        vec![req(label::NODEPOOL, Operator::In, &["default"])],
        a
    ));
    // No requirement: everything.
    assert!(m(Vec::new(), a));
    // The offering's labels, read one by one as matching reads them.
    for (k, v) in a.labels() {
        assert_eq!(a.label(&k), Some(v.as_str()));
    }
    assert_eq!(a.label(label::ARCH), None);
}

#[test]
fn price_overlay_reorders_the_catalog() {
    let c = catalog();
    assert_eq!(c.instance_types[0].name, "medium");
    let e = eval(
        vec![priced("cheap-large", 1, of_type("large"), "0.05")],
        &[&c],
    );
    let out = apply(&c, &e.applied);
    assert_eq!(out.instance_types[0].name, "large");
    assert_eq!(prices(&out, "large"), vec![0.05, 0.05]);
    assert_eq!(prices(&out, "medium"), vec![0.1, 0.1]);
    assert!(
        out.instance_types[0]
            .offerings
            .iter()
            .all(|o| o.price_source == PriceSource::Overlay)
    );
    assert_eq!(
        e.outcomes["cheap-large"],
        Outcome {
            verdict: Verdict::Applied,
            matched: 2
        }
    );
    assert_eq!(out.overlay_marks(&["large".into()]), (true, false));
    assert_eq!(out.overlay_marks(&["medium".into()]), (false, false));
    // Nothing applied: the catalog as it was.
    assert_eq!(apply(&c, &[]), c);
}

#[test]
fn percent_and_zone_scoped_adjustments() {
    let c = catalog();
    let e = eval(
        vec![priced(
            "zone-a-up",
            1,
            vec![req(label::ZONE, Operator::In, &["zone-a"])],
            "+50%",
        )],
        &[&c],
    );
    let out = apply(&c, &e.applied);
    let large = out.get("large").expect("large");
    // zone-b (unchanged, cheaper) now first.
    assert_eq!(large.offerings[0].zone.as_deref(), Some("zone-b"));
    assert_eq!(large.offerings[0].price, 0.2);
    assert!((large.offerings[1].price - 0.3).abs() < 1e-9);
    assert_eq!(e.outcomes["zone-a-up"].matched, 2, "one per instance type");
}

#[test]
fn higher_weight_wins_per_offering() {
    let c = catalog();
    let e = eval(
        vec![
            priced("low", 10, Vec::new(), "9"),
            priced("high", 20, of_type("large"), "1"),
        ],
        &[&c],
    );
    assert!(e.outcomes.values().all(|o| o.verdict == Verdict::Applied));
    let out = apply(&c, &e.applied);
    assert_eq!(prices(&out, "large"), vec![1.0, 1.0]);
    assert_eq!(prices(&out, "medium"), vec![9.0, 9.0]);
}

#[test]
fn equal_weights_on_the_same_offering_conflict_even_with_the_same_value() {
    let c = catalog();
    for (pa, pb) in [("1.03", "23"), ("100", "100"), ("+54", "-2")] {
        let e = eval(
            vec![
                priced("overlay-a", 10, of_type("large"), pa),
                priced("overlay-b", 10, Vec::new(), pb),
            ],
            &[&c],
        );
        // The later name is walked first and applies; the other conflicts with it.
        assert_eq!(e.outcomes["overlay-b"].verdict, Verdict::Applied);
        assert_eq!(
            e.outcomes["overlay-a"].verdict,
            Verdict::Conflict {
                with: "overlay-b".into(),
                what: "price of large".into()
            }
        );
        assert_eq!(e.outcomes["overlay-a"].matched, 2);
        assert_eq!(e.applied.len(), 1);
    }
}

#[test]
fn equal_weights_on_disjoint_offerings_do_not_conflict() {
    let c = catalog();
    let e = eval(
        vec![
            priced("a", 10, of_type("large"), "1"),
            priced("b", 10, of_type("medium"), "2"),
            // A different field on the same offering: no conflict either.
            with_capacity("c", 10, of_type("large"), &[("example.com/fuse", 1)]),
        ],
        &[&c],
    );
    assert!(e.outcomes.values().all(|o| o.verdict == Verdict::Applied));
}

#[test]
fn conflict_is_against_the_lowest_weight_recorded() {
    // Karpenter's walk: high (20) records the price, c (10) lowers the record's weight to
    // 10 without changing the price, b (10) then conflicts with c.
    let c = catalog();
    let e = eval(
        vec![
            priced("high", 20, Vec::new(), "5"),
            priced("b", 10, of_type("large"), "6"),
            priced("c", 10, of_type("large"), "7"),
        ],
        &[&c],
    );
    assert_eq!(e.outcomes["c"].verdict, Verdict::Applied);
    assert!(matches!(&e.outcomes["b"].verdict, Verdict::Conflict { with, .. } if with == "c"));
    let out = apply(&c, &e.applied);
    assert_eq!(prices(&out, "large"), vec![5.0, 5.0]);
}

#[test]
fn capacity_is_merged_per_resource_and_conflicts_only_on_shared_resources() {
    let c = catalog();
    let e = eval(
        vec![
            with_capacity(
                "high",
                20,
                of_type("large"),
                &[("example.com/fuse", 2), ("nvidia.com/gpu", 1)],
            ),
            with_capacity(
                "low",
                10,
                Vec::new(),
                &[("example.com/fuse", 9), ("example.com/nic", 4)],
            ),
        ],
        &[&c],
    );
    let out = apply(&c, &e.applied);
    let large = out.get("large").expect("large");
    assert_eq!(large.capacity.get("example.com/fuse"), 2);
    assert_eq!(large.capacity.get("example.com/nic"), 4);
    assert_eq!(large.allocatable.get("nvidia.com/gpu"), 1);
    assert_eq!(large.capacity.cpu_milli(), 4000, "standard resources kept");
    assert!(large.capacity_overlaid);
    let medium = out.get("medium").expect("medium");
    assert_eq!(medium.capacity.get("example.com/fuse"), 9);
    assert_eq!(out.overlay_marks(&["medium".into()]), (false, true));

    let e = eval(
        vec![
            with_capacity("a", 10, of_type("large"), &[("example.com/fuse", 1)]),
            with_capacity("b", 10, Vec::new(), &[("example.com/fuse", 1)]),
        ],
        &[&c],
    );
    assert!(matches!(&e.outcomes["a"].verdict,
        Verdict::Conflict { with, what } if with == "b" && what == "capacity example.com/fuse of large"));
    let e = eval(
        vec![
            with_capacity("a", 10, of_type("large"), &[("example.com/fuse", 1)]),
            with_capacity("b", 10, Vec::new(), &[("example.com/nic", 1)]),
        ],
        &[&c],
    );
    assert!(e.outcomes.values().all(|o| o.verdict == Verdict::Applied));
}

#[test]
fn a_conflict_in_one_catalog_applies_the_overlay_nowhere() {
    let c1 = catalog();
    let c2 = InstanceTypes::of(vec![it("small", 1, 0.05)]);
    let e = eval(
        vec![
            priced("a", 10, Vec::new(), "3"),
            priced("b", 10, of_type("small"), "4"),
        ],
        &[&c1, &c2],
    );
    assert!(matches!(e.outcomes["a"].verdict, Verdict::Conflict { .. }));
    assert_eq!(e.outcomes["a"].matched, 6);
    let out = apply(&c1, &e.applied);
    assert_eq!(
        out, c1,
        "a is not applied to the catalog it did not conflict in"
    );
}

fn api_overlay(name: &str, spec: serde_json::Value) -> api::NodeOverlay {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("overlay")
}

#[test]
fn runtime_validation_of_api_objects() {
    let ok = Overlay::from_api(&api_overlay(
        "ok",
        serde_json::json!({
            "requirements": [{"key": label::INSTANCE_TEMPLATE, "operator": "In", "values": ["large"]}],
            "priceAdjustment": "-10%", "weight": 5,
            "capacity": {"example.com/fuse": "2", "hugepages-2Mi": "1Gi"},
        }),
    ))
    .expect("valid");
    assert_eq!(ok.weight, 5);
    assert_eq!(ok.price, Some(PriceChange::Percent(-10.0)));
    assert_eq!(ok.capacity["hugepages-2Mi"], 1 << 30);
    let bad = |spec: serde_json::Value| Overlay::from_api(&api_overlay("bad", spec)).err();
    let why = bad(serde_json::json!({"requirements": [], "capacity": {"cpu": "2"}}));
    assert!(why.is_some_and(|w| w.contains("cpu")));
    assert!(bad(serde_json::json!({"requirements": [], "price": "-1"})).is_some());
    assert!(bad(serde_json::json!({"requirements": [], "priceAdjustment": "1"})).is_some());
    assert!(
        bad(serde_json::json!({"requirements": [{"key": "a", "operator": "Gt", "values": ["x"]}]}))
            .is_some()
    );
    assert!(bad(serde_json::json!({"requirements": [{"key": "a", "operator": "In"}]})).is_some());
    assert!(
        bad(serde_json::json!({"requirements": [], "capacity": {"example.com/x": "lots"}}))
            .is_some()
    );
    // An invalid overlay is reported and skipped; the others still apply.
    let e = evaluate(
        vec![
            Err(("bad".into(), 50, "invalid capacity".into())),
            Ok(priced("good", 1, Vec::new(), "1")),
        ],
        &[&catalog().instance_types[..]],
    );
    assert!(matches!(e.outcomes["bad"].verdict, Verdict::Invalid(_)));
    assert_eq!(e.outcomes["good"].verdict, Verdict::Applied);
}

#[test]
fn order_is_weight_then_later_name_first() {
    let mut v = vec![(0, "a"), (10, "a"), (10, "b"), (5, "z")];
    order(&mut v, |(w, n)| (*w, n));
    assert_eq!(v, vec![(10, "b"), (10, "a"), (5, "z"), (0, "a")]);
}
