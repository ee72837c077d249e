//! The offline view over the shipped `examples/templates/` and NodeClass selection.

use std::path::{Path, PathBuf};

use templates::offline::{Inputs, render_json, render_table, render_yaml, reports};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/templates")
}

#[test]
fn examples_catalog() {
    let inputs = Inputs::load(&[examples()]).expect("examples load");
    assert_eq!(inputs.clusters.len(), 1);
    assert_eq!(inputs.node_classes.len(), 1);
    assert_eq!(inputs.templates.len(), 19);
    let reports = reports(&inputs);
    assert_eq!(reports.len(), 1);
    let r = &reports[0];
    assert_eq!(r.node_class.as_deref(), Some("default"));
    assert_eq!(r.cluster.as_deref(), Some("capi-demo/demo"));
    // docker-control-plane is not opted in.
    assert_eq!(
        r.warnings,
        ["ignored (no node.cluster.x-k8s.io/karpenter-member label): docker-control-plane"]
    );
    assert_eq!(r.templates, 18);
    let cat = r.catalog.as_ref().expect("catalog");
    let names: Vec<&str> = cat.instance_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "m7g.xlarge",
            "Standard_D4s_v5",
            "docker-2c4g",
            "a1.large",
            "m5.large",
            "dev-4c8g",
            "m1.large",
            "windows-d4s-v5",
            "vsphere-8c32g",
            "gpu-passthrough",
            "g5.xlarge",
            "bm-64c-256g",
            "gpu-a100x2",
        ]
    );
    // The GPU templates' devices (DRA): copied ResourceSlices and Cluster Autoscaler's form.
    let devices = |t: &str| {
        let d = cat
            .get(t)
            .and_then(|it| it.devices.clone())
            .expect("devices");
        (
            d.drivers().join(","),
            d.slices.iter().map(|s| s.devices.len()).sum::<usize>(),
        )
    };
    assert_eq!(devices("gpu-a100x2"), ("gpu.nvidia.com".to_string(), 2));
    assert_eq!(
        devices("gpu-passthrough"),
        ("gpu.nvidia.com".to_string(), 1)
    );
    let excluded: Vec<(&str, &str)> = cat
        .excluded
        .iter()
        .map(|e| (e.template.name.as_str(), e.error.reason()))
        .collect();
    assert_eq!(
        excluded,
        [
            ("a1-xlarge-arm", "InvalidTaint"),
            ("vsphere-16c64g", "InvalidQuantity")
        ]
    );
    // NodeClass kubelet settings: systemReserved cpu 100m, memory 100Mi; evictionHard 200Mi.
    let m5 = cat.get("m5.large").expect("m5.large");
    assert_eq!(m5.allocatable.cpu_milli(), 2000 - 70 - 100);
    assert_eq!(
        m5.allocatable.memory_bytes(),
        (8 << 30) - ((11 * 110 + 255 + 100 + 200) << 20)
    );
    // Failure domains of the Cluster for zone-less templates.
    let docker = cat.get("docker-2c4g").expect("docker");
    let zones: Vec<&str> = docker
        .offerings
        .iter()
        .filter_map(|o| o.zone.as_deref())
        .collect();
    assert_eq!(zones, ["fd-1", "fd-2", "fd-3"]);
    let win = cat.get("windows-d4s-v5").expect("windows");
    assert_eq!(win.labels["kubernetes.io/os"], "windows");
    assert_eq!(win.labels["node.kubernetes.io/windows-build"], "10.0.20348");

    let table = render_table(&reports);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NodeClass: default   Cluster: capi-demo/demo"));
    assert!(lines[1].starts_with("warning: ignored"));
    assert!(lines[2].starts_with("NAME "));
    assert!(lines[3].starts_with("m7g.xlarge "));
    assert!(table.contains("excluded: VSphereMachineTemplate capi-demo/vsphere-16c64g: InvalidQuantity: metadata.annotations[capacity.cluster-autoscaler.kubernetes.io/memory]"));
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("excluded: "))
            .count(),
        2
    );
}

#[test]
fn json_and_yaml_output() {
    let inputs = Inputs::load(&[examples()]).expect("examples load");
    let reports = reports(&inputs);
    let json: serde_json::Value =
        serde_json::from_str(&render_json(&reports).expect("json")).expect("valid JSON");
    let it = &json[0]["catalog"]["instanceTypes"][0];
    assert_eq!(it["name"], "m7g.xlarge");
    assert_eq!(it["capacity"]["cpu"], "4");
    assert_eq!(it["capacity"]["memory"], "16Gi");
    assert_eq!(it["allocatable"]["cpu"], "3820m");
    assert_eq!(it["offerings"][0]["zone"], "us-east-1a");
    assert_eq!(it["offerings"][0]["capacityType"], "spot");
    assert_eq!(it["offerings"][0]["price"], 0.0652);
    assert_eq!(it["offerings"][0]["template"]["kind"], "AWSMachineTemplate");
    assert_eq!(
        json[0]["catalog"]["excluded"][0]["reason"],
        serde_json::json!("InvalidTaint")
    );
    let yaml = render_yaml(&reports).expect("yaml");
    let back: serde_json::Value = serde_saphyr::from_str(&yaml).expect("YAML parses back");
    assert_eq!(back, json);
}

#[test]
fn nodeclass_selection_and_missing_cluster() {
    let yaml = r#"
apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
kind: ClusterAPINodeClass
metadata: {name: gpu}
spec:
  clusterRef: {name: prod, namespace: team-a}
  machineTemplateSelector:
    matchExpressions:
      - {key: pool, operator: In, values: [gpu]}
  machineTemplateKinds:
    - {apiGroup: infrastructure.cluster.x-k8s.io, kind: AWSMachineTemplate}
  kubelet: {maxPods: 30}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata: {name: g5, namespace: team-a, labels: {pool: gpu, node.cluster.x-k8s.io/karpenter-member: "true"}}
status: {capacity: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata: {name: g5-other-ns, namespace: team-b, labels: {pool: gpu, node.cluster.x-k8s.io/karpenter-member: "true"}}
status: {capacity: {cpu: "4", memory: 16Gi}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata: {name: m5, namespace: team-a, labels: {pool: general, node.cluster.x-k8s.io/karpenter-member: "true"}}
status: {capacity: {cpu: "2", memory: 8Gi}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: AzureMachineTemplate
metadata: {name: nc6, namespace: team-a, labels: {pool: gpu, node.cluster.x-k8s.io/karpenter-member: "true"}}
status: {capacity: {cpu: "6", memory: 112Gi}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata: {name: g5-not-opted-in, namespace: team-a, labels: {pool: gpu}}
status: {capacity: {cpu: "4", memory: 16Gi}}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata: {name: workers, namespace: team-a}
"#;
    let mut inputs = Inputs::default();
    inputs.add_yaml(Path::new("x.yaml"), yaml).expect("parses");
    assert_eq!(inputs.ignored, ["KubeadmConfigTemplate workers"]);
    let reports = reports(&inputs);
    let r = &reports[0];
    assert_eq!(r.templates, 1);
    assert_eq!(r.cluster, None);
    assert_eq!(
        r.warnings,
        [
            "ignored (no node.cluster.x-k8s.io/karpenter-member label): g5-not-opted-in",
            "Cluster team-a/prod (spec.clusterRef) not in the input: no failure domains"
        ]
    );
    let cat = r.catalog.as_ref().expect("catalog");
    assert_eq!(cat.instance_types.len(), 1);
    assert_eq!(cat.instance_types[0].name, "g5");
    assert_eq!(cat.instance_types[0].capacity.pods(), 30);
}

#[test]
fn load_errors_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("broken.yaml");
    std::fs::write(&p, "kind: [unclosed\n").expect("write");
    let err = Inputs::load(std::slice::from_ref(&p)).expect_err("invalid YAML");
    assert!(err.to_string().contains("broken.yaml"), "{err}");
    let p2 = dir.path().join("numbers.yaml");
    std::fs::write(
        &p2,
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: AWSMachineTemplate\nmetadata:\n  name: x\n  annotations:\n    karpenter.cluster.x-k8s.io/price: 0.1\n",
    )
    .expect("write");
    let err = Inputs::load(&[p2]).expect_err("annotation must be a string");
    assert!(
        err.to_string()
            .contains("numbers.yaml: document 1: AWSMachineTemplate \"x\""),
        "{err}"
    );
    // Non-YAML files in directories are skipped; a missing path is an error.
    std::fs::write(dir.path().join("README.md"), "# not yaml: [").expect("write");
    std::fs::remove_file(&p).expect("rm");
    let inputs = Inputs::load(&[dir.path().to_path_buf()]);
    assert!(inputs.is_err(), "numbers.yaml is still broken");
    assert!(Inputs::load(&[dir.path().join("missing")]).is_err());
}

#[test]
fn examples_readme_shows_the_current_table() {
    let readme =
        std::fs::read_to_string(examples().join("README.md")).expect("examples README exists");
    let table = render_table(&reports(
        &Inputs::load(&[examples()]).expect("examples load"),
    ));
    assert!(
        readme.contains(&table),
        "examples/templates/README.md is stale; regenerate it with\n\
         karpenter-capi instance-types -f examples/templates/\n{table}"
    );
}
