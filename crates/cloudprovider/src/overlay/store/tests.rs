//! The decorator over the fake provider: price, priceAdjustment, capacity, requirements that
//! match nothing, weight order; each overlay's effect checked against the undecorated
//! answer (the control), and an answer overlaid once however often it is asked for.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::consts::labels as label;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;

use super::*;
use crate::fake::FakeCloudProvider;
use crate::model::{InstanceType, Offering, PriceSource, Resources};

fn instance_type(name: &str, cpu: i64, price: f64) -> InstanceType {
    let res = Resources(BTreeMap::from([
        ("cpu".to_string(), cpu * 1000),
        ("memory".to_string(), cpu << 32),
    ]));
    InstanceType {
        volume_limits: Default::default(),
        devices: None,
        name: name.into(),
        capacity: res.clone(),
        allocatable: res,
        labels: BTreeMap::from([(label::INSTANCE_TYPE.to_string(), name.to_string())]),
        taints: Vec::new(),
        offerings: vec![Offering::new(
            name,
            Some("zone-a"),
            "on-demand",
            price,
            PriceSource::Annotation,
        )],
        capacity_overlaid: false,
    }
}

fn overlay(name: &str, spec: serde_json::Value) -> api::NodeOverlay {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name, "generation": 1}, "spec": spec,
    }))
    .expect("overlay")
}

fn of_type(name: &str) -> serde_json::Value {
    serde_json::json!([{"key": label::INSTANCE_TYPE, "operator": "In", "values": [name]}])
}

/// A fake serving `small` (0.1) and `large` (0.4) for NodeClass `default`, decorated.
fn decorated() -> (FakeCloudProvider, Overlaid, Writer<api::NodeOverlay>) {
    let fake = FakeCloudProvider::default();
    let mut types = vec![
        instance_type("small", 1, 0.1),
        instance_type("large", 4, 0.4),
    ];
    crate::model::sort_instance_types(&mut types);
    fake.state(|s| {
        s.catalogs
            .insert("default".into(), Arc::new(InstanceTypes::of(types)))
    });
    let (store, writer) = reflector::store();
    let lister: NodeClassLister = Box::new(|| vec!["default".to_string()]);
    let overlaid = Overlaid::new(
        Arc::new(fake.clone()),
        Arc::new(OverlayStore::new(store, lister)),
    );
    (fake, overlaid, writer)
}

fn price(p: &dyn CloudProvider, name: &str) -> Option<f64> {
    let types = p.instance_types("default")?;
    Some(types.get(name)?.offerings.first()?.price)
}

#[test]
fn the_decorator_applies_overlays_to_any_providers_answer() {
    let (fake, overlaid, mut writer) = decorated();
    // Control: no overlay, the provider's answer as it is.
    assert_eq!(price(&overlaid, "large"), Some(0.4));
    assert_eq!(
        overlaid.instance_types("default"),
        fake.instance_types("default")
    );
    assert_eq!(overlaid.instance_types("other"), None);

    // An absolute price makes `large` the cheapest: it comes first.
    writer.apply_watcher_event(&Event::Apply(overlay(
        "cheap-large",
        serde_json::json!({"requirements": of_type("large"), "price": "0.05", "weight": 10}),
    )));
    let types = overlaid.instance_types("default").expect("types");
    assert_eq!(types.instance_types[0].name, "large");
    assert_eq!(types.instance_types[0].offerings[0].price, 0.05);
    assert_eq!(
        types.instance_types[0].offerings[0].price_source,
        PriceSource::Overlay
    );
    assert_eq!(
        price(&fake, "large"),
        Some(0.4),
        "the provider is untouched"
    );

    // A priceAdjustment on `small`, applied once however often the types are asked for.
    writer.apply_watcher_event(&Event::Apply(overlay(
        "dearer-small",
        serde_json::json!({"requirements": of_type("small"), "priceAdjustment": "+0.1"}),
    )));
    for _ in 0..3 {
        assert_eq!(price(&overlaid, "small"), Some(0.2));
    }
    // Decorating the decorated answer again would adjust it twice: what a provider that
    // applied overlays itself, under the decorator, would do.
    let twice = OverlayStore::new(
        {
            let (s, mut w) = reflector::store();
            w.apply_watcher_event(&Event::Apply(overlay(
                "dearer-small",
                serde_json::json!({"requirements": of_type("small"), "priceAdjustment": "+0.1"}),
            )));
            s
        },
        Box::new(|| vec!["default".to_string()]),
    );
    let doubled = Overlaid::new(Arc::new(overlaid), Arc::new(twice));
    let p = price(&doubled, "small").expect("small");
    assert!((p - 0.3).abs() < 1e-9, "twice: {p}");

    // Requirements that match nothing change nothing.
    let (fake, overlaid, mut writer) = decorated();
    writer.apply_watcher_event(&Event::Apply(overlay(
        "nowhere",
        serde_json::json!({"requirements": of_type("xlarge"), "price": "0.01"}),
    )));
    assert_eq!(
        overlaid.instance_types("default"),
        fake.instance_types("default")
    );
    let e = overlaid.evaluation();
    assert_eq!(e.outcomes["nowhere"].matched, 0);
    assert_eq!(
        e.outcomes["nowhere"].verdict,
        crate::overlay::Verdict::Applied
    );
}

#[test]
fn capacity_and_weight_order() {
    let (fake, overlaid, mut writer) = decorated();
    assert_eq!(
        fake.instance_types("default")
            .and_then(|t| t.get("large").map(|it| it.capacity.get("example.com/fuse"))),
        Some(0),
        "control: the provider has no fuse"
    );
    // Two overlays on `large`: the higher weight wins the price; capacities merge per
    // resource, the higher weight first.
    writer.apply_watcher_event(&Event::Apply(overlay(
        "low",
        serde_json::json!({"requirements": of_type("large"), "price": "0.3", "weight": 1,
                           "capacity": {"example.com/fuse": "1", "example.com/other": "7"}}),
    )));
    writer.apply_watcher_event(&Event::Apply(overlay(
        "high",
        serde_json::json!({"requirements": of_type("large"), "price": "0.2", "weight": 100,
                           "capacity": {"example.com/fuse": "4"}}),
    )));
    let types = overlaid.instance_types("default").expect("types");
    let large = types.get("large").expect("large");
    assert_eq!(large.offerings[0].price, 0.2, "the higher weight's price");
    assert_eq!(large.capacity.get("example.com/fuse"), 4);
    assert_eq!(large.allocatable.get("example.com/fuse"), 4);
    assert_eq!(large.capacity.get("example.com/other"), 7);
    assert!(large.capacity_overlaid);
    assert_eq!(types.overlay_marks(&["large".into()]), (true, true));
    assert_eq!(types.overlay_marks(&["small".into()]), (false, false));
    // Equal weights on the same price conflict: the later name applies, the other nowhere.
    let (_, overlaid, mut writer) = decorated();
    for (name, p) in [("a", "0.3"), ("b", "0.2")] {
        writer.apply_watcher_event(&Event::Apply(overlay(
            name,
            serde_json::json!({"requirements": of_type("large"), "price": p, "weight": 5}),
        )));
    }
    assert_eq!(price(&overlaid, "large"), Some(0.2));
    let e = overlaid.evaluation();
    assert!(matches!(
        &e.outcomes["a"].verdict,
        crate::overlay::Verdict::Conflict { with, .. } if with == "b"
    ));
}

#[test]
fn the_evaluation_is_memoized_until_an_overlay_spec_or_an_answer_changes() {
    let (fake, overlaid, mut writer) = decorated();
    writer.apply_watcher_event(&Event::Apply(overlay(
        "cheap",
        serde_json::json!({"requirements": [], "price": "0.1"}),
    )));
    let e1 = overlaid.evaluation();
    assert!(Arc::ptr_eq(&e1, &overlaid.evaluation()));
    let a1 = overlaid.instance_types("default").expect("types");
    assert!(Arc::ptr_eq(
        &a1,
        &overlaid.instance_types("default").expect("types")
    ));
    // A status write (same generation) keeps it; a spec change (new generation) not.
    let mut written = overlay(
        "cheap",
        serde_json::json!({"requirements": [], "price": "0.1"}),
    );
    written.status = Some(Default::default());
    writer.apply_watcher_event(&Event::Apply(written));
    assert!(Arc::ptr_eq(&e1, &overlaid.evaluation()));
    let mut edited = overlay(
        "cheap",
        serde_json::json!({"requirements": [], "price": "0.2"}),
    );
    edited.metadata.generation = Some(2);
    writer.apply_watcher_event(&Event::Apply(edited));
    let e2 = overlaid.evaluation();
    assert!(!Arc::ptr_eq(&e1, &e2));
    assert_eq!(price(&overlaid, "large"), Some(0.2));
    // The provider's answer changed: evaluated again, over the new answer.
    fake.state(|s| {
        s.catalogs.insert(
            "default".into(),
            Arc::new(InstanceTypes::of(vec![instance_type("huge", 8, 1.0)])),
        )
    });
    assert!(!Arc::ptr_eq(&e2, &overlaid.evaluation()));
    assert_eq!(price(&overlaid, "huge"), Some(0.2));
}
