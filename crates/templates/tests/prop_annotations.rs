//! Property tests of what users write on InfrastructureMachineTemplates: label keys and
//! values, the cluster-autoscaler `…/labels` and `…/taints` annotations, and the
//! scale-from-zero capacity annotations read by `template_shape` / `build_catalog`.
//! Oracles are the Kubernetes validation regular expressions. Case counts:
//! `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "../../../tests/common/prop_cases.rs"]
mod prop_cases;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use api::consts::{annotations as ann, labels as label};
use api::csi::parse_csi_drivers;
use proptest::prelude::*;
use regex::Regex;
use serde_json::{Value, json};
use templates::labels::{parse_labels, parse_taints, validate_label_key, validate_label_value};
use templates::quantity::{parse_milli, parse_value};
use templates::shape::template_shape;
use templates::{CatalogSettings, build_catalog};

/// `IsValidLabelValue` / the name part of `IsQualifiedName` (apimachinery validation).
static NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").unwrap());
/// `IsDNS1123Subdomain`.
static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap()
});

/// `csiDriverNameRexpFmt` (core validation, `ValidateCSIDriverName`).
static CSI_DRIVER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z0-9][-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9]$").unwrap());

fn oracle_value(v: &str) -> bool {
    v.len() <= 63 && NAME.is_match(v)
}

fn oracle_key(k: &str) -> bool {
    let parts: Vec<&str> = k.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => return false,
    };
    let prefix_ok = prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && SUBDOMAIN.is_match(p));
    prefix_ok && !name.is_empty() && oracle_value(name)
}

/// Keys near the grammar: optional prefix, name, stray characters.
fn near_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "([a-zA-Z0-9.-]{0,12}/)?[A-Za-z0-9._ -]{0,66}",
        "([a-z0-9]{1,62}\\.){0,5}[a-z0-9]{1,10}/[a-z]{1,3}",
        "[a-z/]{0,5}",
    ]
}

fn near_value() -> impl Strategy<Value = String> {
    prop_oneof!["[A-Za-z0-9._ -]{0,66}", "[a-z0-9=:,/]{0,6}"]
}

fn valid_key() -> impl Strategy<Value = String> {
    "(([a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?\\.){0,2}[a-z0-9]{1,8}/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?"
}

fn valid_value() -> impl Strategy<Value = String> {
    "([A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?)?"
}

const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Valid taints with distinct (key, effect): `(key, value, effect)`.
fn valid_taints() -> impl Strategy<Value = Vec<(String, String, String)>> {
    prop::collection::vec(
        (
            valid_key(),
            valid_value(),
            prop::sample::select(EFFECTS.to_vec()),
        ),
        0..5,
    )
    .prop_map(|ts| {
        let mut seen = std::collections::HashSet::new();
        ts.into_iter()
            .filter(|(k, _, e)| seen.insert((k.clone(), *e)))
            .map(|(k, v, e)| (k, v, e.to_string()))
            .collect()
    })
}

/// The annotation text of taints: `key=value:Effect`, or `key:Effect` without a value.
fn render_taints(taints: &[(String, String, String)], sep: &str) -> String {
    let entries: Vec<String> = taints
        .iter()
        .map(|(k, v, e)| match v.as_str() {
            "" => format!("{k}:{e}"),
            v => format!("{k}={v}:{e}"),
        })
        .collect();
    entries.join(sep)
}

/// Mostly valid quantities of the given form, some huge, some broken.
fn quantity_text(valid: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        12 => valid,
        1 => "[1-9][0-9]{0,20}(e[0-9]{1,2}|Ei|E|P|Pi)?",
        1 => "[-+ ]?[0-9.]{0,6}[a-zA-Z]{0,2}",
    ]
}

fn cpu_text() -> impl Strategy<Value = String> {
    quantity_text("[1-9][0-9]{0,2}(\\.[0-9])?|[1-9][0-9]{2,5}m")
}

fn memory_text() -> impl Strategy<Value = String> {
    quantity_text("[1-9][0-9]{0,2}Gi|[2-9][0-9]{3,5}Mi|[1-9]T")
}

fn count_text() -> impl Strategy<Value = String> {
    prop_oneof![12 => "[0-9]{1,3}", 1 => "[-+ ]?[0-9]{0,20}"]
}

/// A `*MachineTemplate` with any of the scale-from-zero annotations, near-valid values.
fn template() -> impl Strategy<Value = Value> {
    let annotation = |key: &'static str, value: BoxedStrategy<String>| {
        let p = if key == ann::CA_CPU || key == ann::CA_MEMORY {
            0.8
        } else {
            0.4
        };
        prop::option::weighted(p, value).prop_map(move |v| v.map(|v| (key.to_string(), v)))
    };
    let kvs = prop_oneof![
        4 => prop::collection::vec((valid_key(), valid_value()), 0..3),
        1 => prop::collection::vec((near_key(), near_value()), 0..3),
    ];
    let labels = kvs.prop_map(|kvs| {
        kvs.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    });
    let taints = prop::collection::vec(
        (
            near_key(),
            near_value(),
            "[A-Za-z]{0,3}|NoSchedule|NoExecute",
        ),
        0..3,
    )
    .prop_map(|ts| {
        ts.iter()
            .map(|(k, v, e)| format!("{k}={v}:{e}"))
            .collect::<Vec<_>>()
            .join(",")
    });
    (
        (
            annotation(ann::CA_CPU, cpu_text().boxed()),
            annotation(ann::CA_MEMORY, memory_text().boxed()),
            annotation(ann::CA_EPHEMERAL_DISK, memory_text().boxed()),
            annotation(ann::CA_GPU_COUNT, count_text().boxed()),
            annotation(ann::CA_GPU_TYPE, prop_oneof![4 => valid_key(), 1 => near_key()].boxed()),
            annotation(ann::CA_MAX_PODS, count_text().boxed()),
            annotation(ann::CA_LABELS, labels.boxed()),
            annotation(ann::CA_TAINTS, taints.boxed()),
            annotation(
                ann::PRICE,
                prop_oneof![6 => "0\\.[0-9]{1,4}|[1-9]", 1 => "[-+]?[0-9.]{0,8}(e[0-9]{1,3})?|inf|NaN"].boxed(),
            ),
        ),
        prop::option::of((cpu_text(), memory_text(), count_text())),
        prop::option::of(("amd64|arm64|x86|", "linux|windows|")),
        // Mostly absent: an instance-type label is usually invalid when generated.
        prop::option::weighted(0.2, near_value()),
        "[a-z]([a-z0-9-]{0,10}[a-z0-9])?",
    )
        .prop_map(|(anns, status_cap, node_info, instance_type, name)| {
            let (a, b, c, d, e, f, g, h, i) = anns;
            let annotations: BTreeMap<String, String> =
                [a, b, c, d, e, f, g, h, i].into_iter().flatten().collect();
            let mut labels = BTreeMap::new();
            if let Some(it) = instance_type {
                labels.insert(label::INSTANCE_TYPE.to_string(), it);
            }
            let mut status = json!({});
            if let Some((cpu, memory, pods)) = status_cap {
                status["capacity"] = json!({"cpu": cpu, "memory": memory, "pods": pods});
            }
            if let Some((arch, os)) = node_info {
                status["nodeInfo"] = json!({"architecture": arch, "operatingSystem": os});
            }
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "DockerMachineTemplate",
                "metadata": {"name": name, "namespace": "default",
                             "annotations": annotations, "labels": labels},
                "status": status,
            })
        })
}

proptest! {
    #![proptest_config(prop_cases::config(512, 100_000))]

    #[test]
    fn label_values_match_the_kubernetes_rule(v in prop_oneof![near_value(), valid_value(), any::<String>()]) {
        prop_assert_eq!(validate_label_value(&v).is_ok(), oracle_value(&v), "{:?}", v);
    }

    #[test]
    fn label_keys_match_the_kubernetes_rule(k in prop_oneof![near_key(), valid_key(), any::<String>()]) {
        prop_assert_eq!(validate_label_key(&k).is_ok(), oracle_key(&k), "{:?}", k);
    }

    #[test]
    fn labels_annotation_never_panics_and_yields_valid_labels(
        s in prop_oneof![any::<String>(), "[a-zA-Z0-9=:,./ _-]{0,80}"],
    ) {
        if let Ok(labels) = parse_labels(&s) {
            for (k, v) in &labels {
                prop_assert!(oracle_key(k) && oracle_value(v), "{:?} gave {:?}={:?}", s, k, v);
            }
        }
    }

    #[test]
    fn labels_annotation_round_trips(labels in prop::collection::btree_map(valid_key(), valid_value(), 0..6), spaced in any::<bool>()) {
        let sep = if spaced { " , " } else { "," };
        let text = labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(sep);
        prop_assert_eq!(parse_labels(&text), Ok(labels));
    }

    #[test]
    fn taints_annotation_never_panics_and_yields_valid_taints(
        s in prop_oneof![any::<String>(), "[a-zA-Z0-9=:,./ _-]{0,80}", "([a-z/.]{0,6}(=[a-z]{0,3})?:(NoSchedule|NoExecute|[A-Z][a-z]{0,3}),?){0,4}"],
    ) {
        if let Ok(taints) = parse_taints(&s) {
            let mut seen = std::collections::HashSet::new();
            for t in &taints {
                prop_assert!(oracle_key(&t.key), "{:?} gave key {:?}", s, t.key);
                prop_assert!(t.value.as_deref().is_none_or(|v| !v.is_empty() && oracle_value(v)));
                prop_assert!(EFFECTS.contains(&t.effect.as_str()));
                prop_assert!(seen.insert((t.key.clone(), t.effect.clone())), "duplicate in {:?}", s);
            }
        }
    }

    #[test]
    fn csi_driver_annotation_never_panics_and_yields_valid_drivers(
        s in prop_oneof![any::<String>(), "[a-zA-Z0-9=,./ _-]{0,60}", "([a-z.]{0,8}=[-+ ]?[0-9]{0,11},?){0,4}"],
    ) {
        if let Ok(drivers) = parse_csi_drivers(&s) {
            for (d, limit) in &drivers {
                prop_assert!(CSI_DRIVER.is_match(d), "{:?} gave driver {:?}", s, d);
                prop_assert!(i32::try_from(*limit).is_ok());
            }
        }
    }

    #[test]
    fn csi_driver_annotation_round_trips(
        drivers in prop::collection::btree_map("[a-z0-9][a-z0-9.-]{0,20}[a-z0-9]", 0..=i32::MAX as u32, 0..5),
        spaced in any::<bool>(),
    ) {
        let sep = if spaced { " , " } else { "," };
        let text = drivers.iter().map(|(d, l)| format!("{d}={l}")).collect::<Vec<_>>().join(sep);
        prop_assert_eq!(parse_csi_drivers(&text), Ok(drivers));
    }

    #[test]
    fn taints_annotation_round_trips(taints in valid_taints(), spaced in any::<bool>()) {
        let text = render_taints(&taints, if spaced { " , " } else { "," });
        let parsed = parse_taints(&text).map(|ts| {
            ts.into_iter()
                .map(|t| (t.key, t.value.unwrap_or_default(), t.effect))
                .collect::<Vec<_>>()
        });
        prop_assert_eq!(parsed, Ok(taints));
    }
}

/// NodeClass `spec.kubelet` settings: reservations, eviction thresholds, maxPods.
fn settings() -> impl Strategy<Value = CatalogSettings> {
    let resource = prop::sample::select(vec!["cpu", "memory", "ephemeral-storage", "pods"]);
    let reserved = prop::collection::btree_map(
        resource.prop_map(str::to_string),
        prop_oneof![cpu_text(), memory_text(), "-[0-9]{1,3}"],
        0..3,
    );
    let signal = prop::sample::select(vec![
        "memory.available",
        "nodefs.available",
        "imagefs.available",
    ]);
    let threshold = prop_oneof![
        "[0-9]{1,3}(\\.[0-9]{1,3})?%",
        "[ -]?[0-9.]{0,5}%|NaN%|inf%",
        memory_text(),
    ];
    let eviction = prop::collection::btree_map(signal.prop_map(str::to_string), threshold, 0..3);
    (
        reserved.clone(),
        reserved,
        eviction,
        prop::option::of(any::<i32>()),
    )
        .prop_map(
            |(kube_reserved, system_reserved, eviction_hard, max_pods)| CatalogSettings {
                resize_corrections: Default::default(),
                learned_devices: Default::default(),
                kube_reserved,
                system_reserved,
                eviction_hard,
                max_pods,
                failure_domains: Vec::new(),
            },
        )
}

proptest! {
    #![proptest_config(prop_cases::config(256, 50_000))]

    #[test]
    fn kubelet_settings_never_panic_and_leave_allocatable_within_capacity(
        t in template(),
        settings in settings(),
    ) {
        let obj: kube::api::DynamicObject = serde_json::from_value(t).expect("object");
        if let Ok(Ok(shape)) = template_shape(&obj, &settings) {
            for (res, cap) in &shape.capacity.0 {
                let alloc = shape.allocatable.get(res);
                prop_assert!((0..=*cap).contains(&alloc), "{} {} {}", res, cap, alloc);
            }
            if let Some(p) = settings.max_pods {
                prop_assert_eq!(shape.capacity.pods(), i64::from(p));
            }
        }
    }

    #[test]
    fn scale_from_zero_annotations_never_panic_and_are_read_exactly(t in template()) {
        let obj: kube::api::DynamicObject = serde_json::from_value(t.clone()).expect("object");
        let ann = |k: &str| t["metadata"]["annotations"][k].as_str().map(str::to_string);
        let Ok(Ok(shape)) = template_shape(&obj, &CatalogSettings::default()) else {
            return Ok(());
        };
        // What the annotations say is what the capacity holds.
        for (key, res, parse) in [
            (ann::CA_CPU, "cpu", parse_milli as fn(&str) -> _),
            (ann::CA_MEMORY, "memory", parse_value),
            (ann::CA_EPHEMERAL_DISK, "ephemeral-storage", parse_value),
        ] {
            if let Some(v) = ann(key) {
                prop_assert_eq!(Ok(shape.capacity.get(res)), parse(&v), "{} {:?}", key, v);
            }
        }
        for (res, cap) in &shape.capacity.0 {
            let alloc = shape.allocatable.get(res);
            prop_assert!(*cap >= 0 && (0..=*cap).contains(&alloc), "{} {} {}", res, cap, alloc);
        }
        prop_assert!(shape.capacity.cpu_milli() > 0 && shape.capacity.memory_bytes() > 0);
        prop_assert!(shape.price.is_finite() && shape.price >= 0.0);
        let taints = ann(ann::CA_TAINTS).map(|s| parse_taints(&s)).unwrap_or(Ok(Vec::new()));
        prop_assert_eq!(Ok(shape.taints.clone()), taints);
        for (k, v) in &shape.labels {
            prop_assert!(oracle_key(k) && oracle_value(v), "label {:?}={:?}", k, v);
        }
    }

    #[test]
    fn catalogs_of_generated_templates_never_panic(ts in prop::collection::vec(template(), 1..4)) {
        let objs: Vec<kube::api::DynamicObject> =
            ts.into_iter().map(|t| serde_json::from_value(t).expect("object")).collect();
        let catalog = build_catalog(&objs, &CatalogSettings::default()).expect("default settings");
        // Without failure domains every template gives one offering or is excluded.
        let offerings: usize = catalog.instance_types.iter().map(|it| it.offerings.len()).sum();
        prop_assert_eq!(offerings + catalog.excluded.len(), objs.len());
    }
}
