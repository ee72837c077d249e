//! Devices a template declares (Dynamic Resource Allocation): the resource-slices annotation
//! (ResourceSlices copied from a running node) and Cluster Autoscaler's dra-driver with
//! gpu-count; bad values exclude the template with a typed error naming the annotation.

use std::path::Path;

use cloudprovider::DeviceSource;
use templates::offline::Inputs;
use templates::{CatalogSettings, TemplateError, build_catalog};

/// A template `name` with `annotations` (YAML lines, indented by 4).
fn template(name: &str, annotations: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: DockerMachineTemplate\nmetadata:\n  name: {name}\n  namespace: default\n  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/cpu: \"8\"\n    capacity.cluster-autoscaler.kubernetes.io/memory: 32Gi\n{annotations}spec: {{template: {{spec: {{}}}}}}\n---\n"
    )
}

fn catalog(yaml: &str) -> templates::model::Catalog {
    let mut inputs = Inputs::default();
    inputs
        .add_yaml(Path::new("test.yaml"), yaml)
        .expect("test YAML parses");
    build_catalog(&inputs.templates, &CatalogSettings::default()).expect("catalog")
}

const COPIED: &str = r#"    karpenter.cluster.x-k8s.io/resource-slices: |
      apiVersion: v1
      kind: List
      items:
      - apiVersion: resource.k8s.io/v1
        kind: ResourceSlice
        metadata: {name: worker-3-gpu}
        spec:
          driver: gpu.example.com
          nodeName: worker-3
          pool: {name: worker-3, generation: 1, resourceSliceCount: 1}
          devices:
          - name: gpu-0
            attributes: {model: {string: A100}, driverVersion: {version: 1.2.0}}
            capacity: {memory: {value: 80Gi}}
          - name: gpu-1
            attributes: {model: {string: A100}}
            capacity: {memory: {value: 80Gi}}
      - spec:
          driver: nic.example.com
          pool: {name: worker-3, generation: 1, resourceSliceCount: 1}
          devices: [{name: eth1}]
"#;

#[test]
fn both_forms_declare_devices() {
    let ca = "    capacity.cluster-autoscaler.kubernetes.io/dra-driver: gpu.example.com\n    capacity.cluster-autoscaler.kubernetes.io/gpu-count: \"3\"\n";
    let yaml = [
        template("copied", COPIED),
        template("ca", ca),
        template("plain", ""),
        // dra-driver without a count: no devices (as Cluster Autoscaler).
        template(
            "no-count",
            "    capacity.cluster-autoscaler.kubernetes.io/dra-driver: gpu.example.com\n",
        ),
    ]
    .concat();
    let cat = catalog(&yaml);
    assert!(cat.excluded.is_empty(), "{:?}", cat.excluded);
    let copied = cat
        .get("copied")
        .and_then(|t| t.devices.as_ref())
        .expect("copied");
    assert_eq!(copied.source, DeviceSource::Declared);
    assert_eq!(copied.drivers(), vec!["gpu.example.com", "nic.example.com"]);
    let gpu = &copied.slices[0].devices[0];
    assert_eq!(gpu.name, "gpu-0");
    let mem = gpu
        .capacity
        .as_ref()
        .and_then(|c| c.get("memory"))
        .expect("memory");
    assert_eq!(mem.value.0, "80Gi");

    let ca = cat.get("ca").and_then(|t| t.devices.as_ref()).expect("ca");
    let names: Vec<&str> = ca.slices[0]
        .devices
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["gpu-0", "gpu-1", "gpu-2"]);
    let ty = ca.slices[0].devices[0]
        .attributes
        .as_ref()
        .and_then(|a| a.get("type"))
        .and_then(|a| a.string.as_deref());
    assert_eq!(ty, Some("gpu"));
    // With a DRA driver the GPUs are devices, not the nvidia.com/gpu extended resource.
    assert_eq!(cat.get("ca").expect("ca").capacity.get("nvidia.com/gpu"), 0);

    // Controls: no annotation, or no count, no devices.
    assert!(cat.get("plain").expect("plain").devices.is_none());
    assert!(cat.get("no-count").expect("no-count").devices.is_none());

    // The JSON of instance-types shows them.
    let json = serde_json::to_value(cat.get("ca").expect("ca")).expect("json");
    assert_eq!(json["devices"]["source"], "Declared");
    assert_eq!(json["devices"]["slices"][0]["driver"], "gpu.example.com");
    assert_eq!(json["devices"]["slices"][0]["devices"][2]["name"], "gpu-2");
    assert!(
        serde_json::to_value(cat.get("plain").expect("plain")).expect("json")["devices"].is_null()
    );
}

#[test]
fn bad_device_annotations_exclude_the_template_naming_the_annotation() {
    let slices = |body: &str| {
        format!(
            "    karpenter.cluster.x-k8s.io/resource-slices: |\n{}",
            body.lines()
                .map(|l| format!("      {l}\n"))
                .collect::<String>()
        )
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (slices("[unclosed"), "resource-slices", "not YAML"),
        (slices("- devices: []"), "resource-slices", "spec.driver is missing"),
        (slices("- driver: Bad_Driver"), "resource-slices", "not a DNS subdomain"),
        (
            slices("- driver: gpu.example.com\n  devices: [{name: a}, {name: a}]"),
            "resource-slices",
            "device a listed twice",
        ),
        (
            slices("- driver: gpu.example.com\n  devices: [{name: a, attributes: {x: {int: 1, string: s}}}]"),
            "resource-slices",
            "exactly one of int, bool, string, version",
        ),
        (
            slices("- driver: gpu.example.com\n  devices: [{name: a, capacity: {memory: {value: 80GB}}}]"),
            "resource-slices",
            "capacity memory",
        ),
        (
            slices("- driver: gpu.example.com\n  sharedCounters: [{name: c, counters: {}}]"),
            "resource-slices",
            "partitionable devices",
        ),
        (
            "    capacity.cluster-autoscaler.kubernetes.io/dra-driver: gpu.example.com\n    capacity.cluster-autoscaler.kubernetes.io/gpu-count: two\n".into(),
            "gpu-count",
            "not a non-negative integer",
        ),
        (
            "    capacity.cluster-autoscaler.kubernetes.io/dra-driver: \"not a driver\"\n    capacity.cluster-autoscaler.kubernetes.io/gpu-count: \"2\"\n".into(),
            "dra-driver",
            "not a DNS subdomain",
        ),
    ];
    for (annotations, field, why) in &cases {
        let yaml = template("bad", annotations) + &template("good", "");
        let mut inputs = Inputs::default();
        // gpu-count: two is also read as a capacity count first; either error names it.
        inputs.add_yaml(Path::new("t.yaml"), &yaml).expect("yaml");
        let cat = build_catalog(&inputs.templates, &CatalogSettings::default()).expect("catalog");
        assert_eq!(cat.excluded.len(), 1, "{why}: {:?}", cat.excluded);
        let e = &cat.excluded[0].error;
        let msg = e.to_string();
        assert!(msg.contains("default/bad"), "{msg}");
        assert!(msg.contains(field), "{field}: {msg}");
        if *field != "gpu-count" {
            assert!(matches!(e, TemplateError::Devices { .. }), "{msg}");
            assert_eq!(e.reason(), "InvalidDevices");
            assert!(msg.contains(why), "{why}: {msg}");
        }
        // Control: the good template is still there.
        assert!(cat.get("good").is_some(), "{why}");
    }
}

#[test]
fn devices_learned_from_a_node_win_over_the_declared_ones() {
    let ca = "    capacity.cluster-autoscaler.kubernetes.io/dra-driver: gpu.example.com\n    capacity.cluster-autoscaler.kubernetes.io/gpu-count: \"2\"\n";
    let yaml = [template("ca", ca), template("other", ca)].concat();
    let mut inputs = Inputs::default();
    inputs
        .add_yaml(Path::new("test.yaml"), &yaml)
        .expect("test YAML parses");
    let learned = serde_json::json!([{"driver": "gpu.example.com", "devices": [
        {"name": "gpu-0", "attributes": {"model": {"string": "A100"}}, "capacity": {"memory": {"value": "80Gi"}}},
        {"name": "gpu-1", "attributes": {"model": {"string": "A100"}}, "capacity": {"memory": {"value": "80Gi"}}}
    ]}])
    .to_string();
    let build = |learned: &[(&str, &str)]| {
        let settings = CatalogSettings {
            learned_devices: learned
                .iter()
                .map(|(t, v)| (t.to_string(), v.to_string()))
                .collect(),
            ..CatalogSettings::default()
        };
        build_catalog(&inputs.templates, &settings).expect("catalog")
    };
    let model = |c: &templates::model::Catalog, t: &str| {
        let d = c.get(t).and_then(|it| it.devices.clone()).expect("devices");
        let attr = d.slices[0].devices[0]
            .attributes
            .as_ref()
            .and_then(|a| a.get("model"))
            .and_then(|a| a.string.clone());
        (d.source, attr)
    };
    // The control: declared only, Cluster Autoscaler's devices have no model.
    let declared = build(&[]);
    assert_eq!(model(&declared, "ca"), (DeviceSource::Declared, None));
    let with = build(&[("ca", &learned)]);
    assert_eq!(
        model(&with, "ca"),
        (DeviceSource::Learned, Some("A100".to_string()))
    );
    assert_eq!(
        model(&with, "other"),
        (DeviceSource::Declared, None),
        "only the template it was learned for"
    );
    // What does not read is ignored: the declared devices stand.
    let bad = build(&[("ca", "{not a list")]);
    assert_eq!(model(&bad, "ca"), (DeviceSource::Declared, None));
}
