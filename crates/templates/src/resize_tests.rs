use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::model::Resources;
use crate::{CatalogSettings, build_catalog};

fn template(kind: &str, annotations: serde_json::Value) -> kube::api::DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "vs", "namespace": "ns", "annotations": annotations},
        "spec": {"template": {"spec": {"numCPUs": 2, "numCoresPerSocket": 2, "memoryMiB": 4096}}}
    }))
    .expect("template")
}

fn vsphere(extra: &[(&str, &str)]) -> kube::api::DynamicObject {
    let mut a = serde_json::Map::new();
    a.insert(ann::RESIZABLE_CPU.into(), json!("2-64/2"));
    a.insert(ann::RESIZABLE_MEMORY.into(), json!("4Gi-512Gi/4Gi"));
    for (k, v) in extra {
        a.insert((*k).into(), json!(v));
    }
    template("VSphereMachineTemplate", serde_json::Value::Object(a))
}

fn catalog(t: &kube::api::DynamicObject) -> crate::Catalog {
    build_catalog(std::slice::from_ref(t), &CatalogSettings::default()).expect("catalog")
}

fn demand(cpu_milli: i64, memory: i64) -> Resources {
    Resources(BTreeMap::from([
        ("cpu".to_string(), cpu_milli),
        ("memory".to_string(), memory),
        ("pods".to_string(), 3),
    ]))
}

#[test]
fn grid_is_bounded_and_inside_the_ranges() {
    let c = catalog(&vsphere(&[(ann::RESIZABLE_MEMORY_PER_CPU, "1Gi-16Gi")]));
    assert!(c.excluded.is_empty(), "{:?}", c.excluded);
    let g = &c.resizable[0];
    let n = c.instance_types.len();
    assert!((20..=MAX_GRID).contains(&n), "{n} types");
    for it in &c.instance_types {
        let (_, size) = c.resizable_of(&it.name).expect("a size");
        assert!(g.spec.contains(size), "{size:?}");
        assert_eq!(it.capacity.cpu_milli(), size.cpu);
        assert_eq!(it.capacity.memory_bytes(), size.memory);
    }
    // Both ends of the cpu range are offered.
    assert!(c.get("vs-2c-4gi").is_some());
    assert!(
        c.instance_types
            .iter()
            .any(|t| t.name.starts_with("vs-64c-"))
    );
    // A size off the grid is made on demand; one outside the bounds is not.
    assert_eq!(
        c.lookup("vs-6c-20gi")
            .expect("on demand")
            .capacity
            .cpu_milli(),
        6000
    );
    assert!(c.lookup("vs-66c-20gi").is_none());
    assert!(c.lookup("vs-3c-20gi").is_none(), "off the cpu lattice");
    assert!(c.lookup("vs-2c-64gi").is_none(), "above 16Gi per cpu");
}

#[test]
fn sizing_shrinks_to_the_smallest_step() {
    let c = catalog(&vsphere(&[]));
    let g = &c.resizable[0];
    // Pods of 5.2 cpu / 18Gi with steps of 2 cpu / 4Gi: 6 cpu / 20Gi, overhead included.
    let size = g.size_for(&demand(5200, 18 << 30)).expect("size");
    assert_eq!(
        size,
        Size {
            cpu: 6000,
            memory: 20 << 30
        }
    );
    // The overhead counts: 5.95 cpu does not fit 6 vCPUs (85m reserved).
    assert_eq!(g.size_for(&demand(5950, 1 << 30)).expect("size").cpu, 8000);
}

#[test]
fn calibration_bumps_the_next_size() {
    // The Nodes of `vs` registered with 2Gi less memory than asked: every size offers 2Gi
    // less, and the 5.2 cpu / 18Gi claim now takes 24Gi.
    let settings = CatalogSettings {
        resize_corrections: BTreeMap::from([(
            "vs".to_string(),
            (String::new(), "2Gi".to_string()),
        )]),
        ..CatalogSettings::default()
    };
    let c = build_catalog(&[vsphere(&[])], &settings).expect("catalog");
    let g = &c.resizable[0];
    let size = g.size_for(&demand(5200, 18 << 30)).expect("size");
    assert_eq!(
        size,
        Size {
            cpu: 6000,
            memory: 24 << 30
        }
    );
    let it = g.instance_type(size).expect("type");
    assert_eq!(it.name, "vs-6c-24gi", "named by the size asked");
    assert_eq!(it.capacity.memory_bytes(), 22 << 30, "what the Nodes get");
}

#[test]
fn a_pod_above_the_largest_size_is_refused() {
    let c = catalog(&vsphere(&[]));
    let e = c.resizable[0]
        .size_for(&demand(70_000, 1 << 30))
        .expect_err("70 cpu > 64");
    let msg = e.to_string();
    assert!(msg.contains("70 cpu") && msg.contains("vs"), "{msg}");
    // Nor does any grid type fit it.
    assert!(
        c.instance_types
            .iter()
            .all(|t| t.allocatable.cpu_milli() < 70_000)
    );
}

#[test]
fn headroom_and_memory_per_cpu_raise_the_size() {
    let c = catalog(&vsphere(&[(ann::RESIZABLE_HEADROOM, "50")]));
    assert_eq!(
        c.resizable[0]
            .size_for(&demand(3000, 1 << 30))
            .expect("size")
            .cpu,
        6000
    );
    let c = catalog(&vsphere(&[(ann::RESIZABLE_MEMORY_PER_CPU, "4Gi-8Gi")]));
    let s = c.resizable[0]
        .size_for(&demand(7000, 1 << 30))
        .expect("size");
    assert_eq!(
        s,
        Size {
            cpu: 8000,
            memory: 32 << 30
        },
        "memory raised to 4Gi per cpu"
    );
    let s = c.resizable[0]
        .size_for(&demand(1000, 60 << 30))
        .expect("size");
    assert!(
        s.memory <= 8 * (s.cpu / 1000) * (1 << 30),
        "{s:?}: cpu raised to 8Gi per cpu"
    );
}

#[test]
fn prices_come_from_the_per_unit_annotations() {
    let c = catalog(&vsphere(&[
        (ann::PRICE_PER_CPU, "0.02"),
        (ann::PRICE_PER_GIB, "0.005"),
    ]));
    let it = c.get("vs-2c-4gi").expect("smallest");
    assert_eq!(it.offerings[0].price, 0.06);
    assert_eq!(c.instance_types[0].name, "vs-2c-4gi", "cheapest first");
}

#[test]
fn bad_annotations_exclude_the_template_naming_the_annotation() {
    for (key, value, extra) in [
        (ann::RESIZABLE_CPU, "64-2/2", None),
        (ann::RESIZABLE_CPU, "2-64", None),
        (ann::RESIZABLE_CPU, "1500m-4/1", None),
        (ann::RESIZABLE_MEMORY, "4GB-8GB/1GB", None),
        (ann::RESIZABLE_MEMORY_PER_CPU, "16Gi-1Gi", None),
        (ann::RESIZABLE_MEMORY_PER_CPU, "600Gi-700Gi", None),
        (ann::PRICE_PER_CPU, "-1", None),
        (ann::RESIZABLE_HEADROOM, "lots", None),
        (ann::RESIZABLE_FIELDS, "cpu=numCPUs", None),
        (
            ann::RESIZABLE_FIELDS,
            "memory=spec.template.spec.m:TB",
            None,
        ),
        (ann::RESIZABLE_CPU, "2-8/2", Some("only cpu")),
    ] {
        let t = match extra {
            Some(_) => template("VSphereMachineTemplate", json!({ (key): value })),
            None => vsphere(&[(key, value)]),
        };
        let c = catalog(&t);
        assert!(c.instance_types.is_empty(), "{key}={value}");
        let e = &c.excluded[0].error;
        assert_eq!(e.reason(), "InvalidResizable", "{key}={value}");
        // Each row names its own annotation and value (not merely one that contains it:
        // `resizable-memory` is a prefix of `resizable-memory-per-cpu`).
        let TemplateError::Resizable {
            field,
            value: named,
            reason,
            ..
        } = e
        else {
            panic!("{key}={value}: {e:?}");
        };
        assert_eq!(
            (field.as_str(), named.as_str()),
            (format!("metadata.annotations[{key}]").as_str(), value),
            "{key}={value}: {e}"
        );
        if extra.is_some() {
            assert_eq!(
                reason,
                &format!("needs {} too", ann::RESIZABLE_MEMORY),
                "{e}"
            );
        }
    }
    // An unknown kind needs the field map.
    let t = template(
        "FooMachineTemplate",
        json!({
        (ann::RESIZABLE_CPU): "2-8/2", (ann::RESIZABLE_MEMORY): "4Gi-8Gi/4Gi"}),
    );
    let c = catalog(&t);
    assert!(
        c.excluded[0]
            .error
            .to_string()
            .contains(ann::RESIZABLE_FIELDS)
    );
}

#[test]
fn field_maps_write_each_provider_s_fields() {
    let size = Size {
        cpu: 6000,
        memory: 20 << 30,
    };
    let spec = json!({"spec": {"template": {"spec": {"numCoresPerSocket": 4, "vcpusPerSocket": 2, "numCores": 4}}}});
    let writes = |kind: &str| -> BTreeMap<String, serde_json::Value> {
        FieldMap::parse(builtin_fields(kind).expect(kind))
            .expect("parses")
            .writes(size, &spec)
            .into_iter()
            .map(|w| (w.path, w.value))
            .collect()
    };
    let v = writes("VSphereMachineTemplate");
    assert_eq!(v["spec.numCPUs"], 6);
    assert_eq!(v["spec.numCoresPerSocket"], 2, "4 does not divide 6: gcd");
    assert_eq!(v["spec.memoryMiB"], 20480);
    let n = writes("NutanixMachineTemplate");
    assert_eq!(
        (
            n["spec.vcpuSockets"].clone(),
            n["spec.vcpusPerSocket"].clone()
        ),
        (json!(3), json!(2))
    );
    assert_eq!(n["spec.memorySize"], "20Gi");
    let p = writes("ProxmoxMachineTemplate");
    assert_eq!(
        (p["spec.numSockets"].clone(), p["spec.numCores"].clone()),
        (json!(3), json!(2))
    );
    assert_eq!(writes("ElfMachineTemplate")["spec.numCPUS"], 6);
    let k = writes("KubevirtMachineTemplate");
    assert_eq!(
        k["spec.virtualMachineTemplate.spec.template.spec.domain.cpu.cores"],
        6
    );
    assert_eq!(
        k["spec.virtualMachineTemplate.spec.template.spec.domain.memory.guest"],
        "20Gi"
    );
    let t = writes("TestMachineTemplate");
    assert_eq!(
        (
            t["spec.capacity.cpu"].clone(),
            t["spec.capacity.memory"].clone()
        ),
        (json!("6"), json!("20Gi"))
    );
    // Applied to a clone: nested objects are created.
    let mut clone = json!({"spec": {"x": 1}});
    for w in FieldMap::parse(builtin_fields("KubevirtMachineTemplate").expect("kv"))
        .expect("p")
        .writes(size, &spec)
    {
        assert!(w.apply(&mut clone));
    }
    assert_eq!(
        clone["spec"]["virtualMachineTemplate"]["spec"]["template"]["spec"]["domain"]["cpu"]["cores"],
        6
    );
    assert_eq!(clone["spec"]["x"], 1);
}

#[test]
fn names_round_trip() {
    for s in [
        Size {
            cpu: 2000,
            memory: 4 << 30,
        },
        Size {
            cpu: 64_000,
            memory: 1536 << 20,
        },
    ] {
        assert_eq!(parse_sized_name("a-b", &sized_name("a-b", s)), Some(s));
    }
    assert_eq!(parse_sized_name("a", "ab-2c-4gi"), None);
    assert_eq!(parse_sized_name("a", "a-2c-4tb"), None);
}

proptest! {
    /// The chosen size holds the demand, and one step less of cpu or memory would not.
    #[test]
    fn chosen_size_fits_and_is_within_one_step(cpu in 100i64..60_000, mem_mi in 64i64..400_000) {
        let c = catalog(&vsphere(&[]));
        let g = &c.resizable[0];
        let d = demand(cpu, mem_mi << 20);
        let s = g.size_for(&d).expect("fits the ranges");
        let it = g.instance_type(s).expect("a size");
        prop_assert!(it.allocatable.cpu_milli() >= cpu && it.allocatable.memory_bytes() >= mem_mi << 20);
        if s.cpu > g.spec.cpu.min {
            let smaller = g.make(Size { cpu: s.cpu - g.spec.cpu.step, ..s }).expect("smaller");
            prop_assert!(smaller.allocatable.cpu_milli() < cpu);
        }
        if s.memory > g.spec.memory.min {
            let smaller = g.make(Size { memory: s.memory - g.spec.memory.step, ..s }).expect("smaller");
            prop_assert!(smaller.allocatable.memory_bytes() < mem_mi << 20);
        }
    }
}

#[test]
fn sized_shapes_keep_the_volume_limits() {
    let c = catalog(&vsphere(&[(
        ann::CA_CSI_DRIVER,
        "csi.vsphere.vmware.com=59",
    )]));
    assert!(c.excluded.is_empty(), "{:?}", c.excluded);
    let want = BTreeMap::from([("csi.vsphere.vmware.com".to_string(), 59)]);
    for it in &c.instance_types {
        assert_eq!(it.volume_limits, want, "{}", it.name);
    }
    let made = c.lookup("vs-6c-20gi").expect("on demand");
    assert_eq!(made.volume_limits, want);
}
