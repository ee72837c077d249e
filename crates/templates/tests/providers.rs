//! Table tests: templates shaped like the infrastructure providers publish them
//! (Docker/Dev, AWS, Azure, vSphere, Metal3, OpenStack) → instance types.

use std::collections::BTreeMap;
use std::path::Path;

use templates::offline::Inputs;
use templates::{Catalog, CatalogSettings, InstanceType, PriceSource, build_catalog};

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

fn load(yaml: &str) -> Inputs {
    let mut inputs = Inputs::default();
    inputs
        .add_yaml(Path::new("test.yaml"), yaml)
        .expect("test YAML parses");
    inputs
}

fn catalog_with(yaml: &str, settings: &CatalogSettings) -> Catalog {
    build_catalog(&load(yaml).templates, settings).expect("settings are valid")
}

fn catalog(yaml: &str) -> Catalog {
    catalog_with(yaml, &CatalogSettings::default())
}

fn three_fds() -> CatalogSettings {
    CatalogSettings {
        failure_domains: vec!["fd-3".into(), "fd-1".into(), "fd-2".into()],
        ..Default::default()
    }
}

/// What one instance type must look like.
struct Want {
    name: &'static str,
    cpu_milli: i64,
    memory: i64,
    pods: i64,
    gpu: i64,
    arch: &'static str,
    os: &'static str,
    /// (zone, capacity type) per offering, in offering order (cheapest first).
    offerings: &'static [(Option<&'static str>, &'static str)],
    /// Price of the cheapest offering.
    price: f64,
    price_source: PriceSource,
    /// Taints as `key=value:Effect`.
    taints: &'static [&'static str],
    /// Templates (names) the type launches from.
    templates: &'static [&'static str],
}

struct Case {
    name: &'static str,
    yaml: &'static str,
    settings: fn() -> CatalogSettings,
    want: Want,
}

fn check(case: &Case) {
    let cat = catalog_with(case.yaml, &(case.settings)());
    assert!(
        cat.excluded.is_empty(),
        "{}: unexpected exclusions: {:?}",
        case.name,
        cat.excluded
            .iter()
            .map(|e| e.error.to_string())
            .collect::<Vec<_>>()
    );
    assert_eq!(cat.instance_types.len(), 1, "{}", case.name);
    let it = &cat.instance_types[0];
    let w = &case.want;
    let ctx = case.name;
    assert_eq!(it.name, w.name, "{ctx}");
    assert_eq!(it.capacity.cpu_milli(), w.cpu_milli, "{ctx}: cpu");
    assert_eq!(it.capacity.memory_bytes(), w.memory, "{ctx}: memory");
    assert_eq!(it.capacity.pods(), w.pods, "{ctx}: pods");
    assert_eq!(it.capacity.gpu_count(), w.gpu, "{ctx}: gpu");
    assert_eq!(it.labels["kubernetes.io/arch"], w.arch, "{ctx}: arch");
    assert_eq!(it.labels["kubernetes.io/os"], w.os, "{ctx}: os");
    assert_eq!(
        it.labels["node.kubernetes.io/instance-type"], w.name,
        "{ctx}"
    );
    assert_eq!(
        it.labels["karpenter.cluster.x-k8s.io/instance-cpu"],
        (w.cpu_milli / 1000).to_string(),
        "{ctx}"
    );
    assert_eq!(
        it.labels["karpenter.cluster.x-k8s.io/instance-memory"],
        (w.memory / MI).to_string(),
        "{ctx}"
    );
    assert_eq!(
        it.labels["karpenter.cluster.x-k8s.io/instance-gpu-count"],
        w.gpu.to_string(),
        "{ctx}"
    );
    let offerings: Vec<(Option<&str>, &str)> = it
        .offerings
        .iter()
        .map(|o| (o.zone.as_deref(), o.capacity_type.as_str()))
        .collect();
    assert_eq!(offerings, w.offerings, "{ctx}: offerings");
    let cheapest = it.cheapest().expect("has offerings");
    assert!(
        (cheapest.price - w.price).abs() < 1e-9,
        "{ctx}: price {} != {}",
        cheapest.price,
        w.price
    );
    assert_eq!(cheapest.price_source, w.price_source, "{ctx}");
    let taints: Vec<String> = it
        .taints
        .iter()
        .map(|t| match &t.value {
            Some(v) => format!("{}={}:{}", t.key, v, t.effect),
            None => format!("{}:{}", t.key, t.effect),
        })
        .collect();
    assert_eq!(taints, w.taints, "{ctx}: taints");
    let refs = templates::model::templates_of(it);
    let templates: Vec<&str> = refs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(templates, w.templates, "{ctx}: templates");
    // Allocatable never exceeds capacity and is positive for cpu and memory.
    assert!(it.allocatable.cpu_milli() > 0 && it.allocatable.cpu_milli() < w.cpu_milli);
    assert!(it.allocatable.memory_bytes() > 0 && it.allocatable.memory_bytes() < w.memory);
    assert_eq!(it.allocatable.pods(), w.pods);
    assert_eq!(it.allocatable.gpu_count(), w.gpu);
}

fn defaults() -> CatalogSettings {
    CatalogSettings::default()
}

const DOCKER_ANNOTATION_ONLY: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: docker-2c4g
  namespace: default
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "2"
    capacity.cluster-autoscaler.kubernetes.io/memory: 4Gi
    capacity.cluster-autoscaler.kubernetes.io/maxPods: "110"
spec:
  template:
    spec:
      customImage: kindest/node:v1.34.0
"#;

const DEV_STATUS: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata:
  name: dev-4c8g
  namespace: default
spec:
  template:
    spec:
      backend:
        inMemory: {}
status:
  capacity:
    cpu: 4
    memory: 8Gi
    pods: 64
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
"#;

const AWS_TWO_ZONES: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: m5-large-us-east-1b
  namespace: default
  labels:
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1b
spec:
  template:
    spec:
      instanceType: m5.large
      iamInstanceProfile: nodes.cluster-api-provider-aws.sigs.k8s.io
status:
  capacity: {cpu: "2", memory: 8Gi}
  nodeInfo: {architecture: amd64, operatingSystem: linux}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: m5-large-us-east-1a
  namespace: default
  labels:
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1a
spec:
  template:
    spec:
      instanceType: m5.large
      iamInstanceProfile: nodes.cluster-api-provider-aws.sigs.k8s.io
status:
  capacity: {cpu: "2", memory: 8Gi}
  nodeInfo: {architecture: amd64, operatingSystem: linux}
"#;

const AWS_ARM64_SPOT_PRICED: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: m7g-xlarge-spot
  namespace: default
  labels:
    node.kubernetes.io/instance-type: m7g.xlarge
    karpenter.sh/capacity-type: spot
    topology.kubernetes.io/zone: us-west-2c
  annotations:
    karpenter.cluster.x-k8s.io/price: "0.0652"
spec:
  template:
    spec:
      instanceType: m7g.xlarge
      spotMarketOptions: {maxPrice: "0.10"}
status:
  capacity: {cpu: "4", memory: 16Gi}
  nodeInfo: {architecture: arm64, operatingSystem: linux}
"#;

const AWS_GPU_STATUS: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: g5-xlarge
  namespace: default
  labels:
    node.kubernetes.io/instance-type: g5.xlarge
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/taints: nvidia.com/gpu=true:NoSchedule
spec:
  template:
    spec:
      instanceType: g5.xlarge
status:
  capacity:
    cpu: "4"
    memory: 16Gi
    nvidia.com/gpu: "1"
  nodeInfo: {architecture: amd64, operatingSystem: linux}
"#;

const AZURE_GPU_ANNOTATIONS: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: AzureMachineTemplate
metadata:
  name: nc6s-v3
  namespace: default
  labels:
    node.kubernetes.io/instance-type: Standard_NC6s_v3
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "6"
    capacity.cluster-autoscaler.kubernetes.io/memory: 112Gi
    capacity.cluster-autoscaler.kubernetes.io/gpu-count: "1"
    capacity.cluster-autoscaler.kubernetes.io/gpu-type: nvidia.com/gpu
    capacity.cluster-autoscaler.kubernetes.io/taints: sku=gpu:NoSchedule
spec:
  template:
    spec:
      vmSize: Standard_NC6s_v3
      osDisk: {diskSizeGB: 128, osType: Linux}
"#;

const AZURE_WINDOWS: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: AzureMachineTemplate
metadata:
  name: win-d4s-v5
  namespace: default
spec:
  template:
    spec:
      vmSize: Standard_D4s_v5
      osDisk: {diskSizeGB: 128, osType: Windows}
status:
  capacity: {cpu: "4", memory: 16Gi}
  nodeInfo: {architecture: amd64, operatingSystem: windows}
"#;

const VSPHERE_FD: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: VSphereMachineTemplate
metadata:
  name: vsphere-8c32g
  namespace: default
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "8"
    capacity.cluster-autoscaler.kubernetes.io/memory: 32768Mi
    capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk: 80Gi
spec:
  template:
    spec:
      datacenter: dc0
      numCPUs: 8
      memoryMiB: 32768
      diskGiB: 80
      template: ubuntu-2404-kube-v1.34.0
"#;

const METAL3_PRICED: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: bm-64c-256g
  namespace: metal3
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "64"
    capacity.cluster-autoscaler.kubernetes.io/memory: 256Gi
    capacity.cluster-autoscaler.kubernetes.io/maxPods: "250"
    capacity.cluster-autoscaler.kubernetes.io/labels: kubernetes.io/arch=amd64,kubernetes.io/os=linux,hardware=dell-r650
    karpenter.cluster.x-k8s.io/price: "1.20"
spec:
  template:
    spec:
      hostSelector:
        matchLabels: {hardware-profile: dell-r650}
      image:
        url: http://images.example.com/ubuntu-2404.img
        checksum: http://images.example.com/ubuntu-2404.img.sha256sum
"#;

const OPENSTACK_OVERRIDE: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: OpenStackMachineTemplate
metadata:
  name: m1-xlarge
  namespace: default
  labels:
    node.kubernetes.io/instance-type: m1.xlarge
    topology.kubernetes.io/zone: nova
  annotations:
    # the annotation wins over status (flavor resized, status not yet refreshed)
    capacity.cluster-autoscaler.kubernetes.io/cpu: "8"
spec:
  template:
    spec:
      flavor: m1.xlarge
      image: {filter: {name: ubuntu-2404-kube-v1.34.0}}
status:
  capacity: {cpu: "4", memory: 16Gi, ephemeral-storage: 160Gi}
  nodeInfo: {architecture: amd64, operatingSystem: linux}
"#;

const OPENSTACK_ARM64_AMD_GPU: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: OpenStackMachineTemplate
metadata:
  name: a1-gpu
  namespace: default
spec:
  template:
    spec:
      flavor: a1.gpu
status:
  capacity: {cpu: 1500m, memory: "3221225472", amd.com/gpu: "2"}
  nodeInfo: {architecture: arm64, operatingSystem: linux}
"#;

#[test]
fn provider_shapes() {
    let cases = [
        Case {
            name: "Docker annotation-only, no zones",
            yaml: DOCKER_ANNOTATION_ONLY,
            settings: defaults,
            want: Want {
                name: "docker-2c4g",
                cpu_milli: 2000,
                memory: 4 * GI,
                pods: 110,
                gpu: 0,
                arch: "amd64",
                os: "linux",
                offerings: &[(None, "on-demand")],
                price: 0.076,
                price_source: PriceSource::Default,
                taints: &[],
                templates: &["docker-2c4g"],
            },
        },
        Case {
            name: "Dev capacity in status, pods from status, failure domains",
            yaml: DEV_STATUS,
            settings: three_fds,
            want: Want {
                name: "dev-4c8g",
                cpu_milli: 4000,
                memory: 8 * GI,
                pods: 64,
                gpu: 0,
                arch: "amd64",
                os: "linux",
                offerings: &[
                    (Some("fd-1"), "on-demand"),
                    (Some("fd-2"), "on-demand"),
                    (Some("fd-3"), "on-demand"),
                ],
                price: 0.152,
                price_source: PriceSource::Default,
                taints: &[],
                templates: &["dev-4c8g"],
            },
        },
        Case {
            name: "AWS zone-labelled templates merge (zone label beats failure domains)",
            yaml: AWS_TWO_ZONES,
            settings: three_fds,
            want: Want {
                name: "m5.large",
                cpu_milli: 2000,
                memory: 8 * GI,
                pods: 110,
                gpu: 0,
                arch: "amd64",
                os: "linux",
                offerings: &[
                    (Some("us-east-1a"), "on-demand"),
                    (Some("us-east-1b"), "on-demand"),
                ],
                price: 0.092,
                price_source: PriceSource::Default,
                taints: &[],
                templates: &["m5-large-us-east-1a", "m5-large-us-east-1b"],
            },
        },
        Case {
            name: "AWS arm64 spot priced",
            yaml: AWS_ARM64_SPOT_PRICED,
            settings: defaults,
            want: Want {
                name: "m7g.xlarge",
                cpu_milli: 4000,
                memory: 16 * GI,
                pods: 110,
                gpu: 0,
                arch: "arm64",
                os: "linux",
                offerings: &[(Some("us-west-2c"), "spot")],
                price: 0.0652,
                price_source: PriceSource::Annotation,
                taints: &[],
                templates: &["m7g-xlarge-spot"],
            },
        },
        Case {
            name: "AWS GPU in status with taint",
            yaml: AWS_GPU_STATUS,
            settings: defaults,
            want: Want {
                name: "g5.xlarge",
                cpu_milli: 4000,
                memory: 16 * GI,
                pods: 110,
                gpu: 1,
                arch: "amd64",
                os: "linux",
                offerings: &[(None, "on-demand")],
                price: 0.12 + 0.064 + 0.5,
                price_source: PriceSource::Default,
                taints: &["nvidia.com/gpu=true:NoSchedule"],
                templates: &["g5-xlarge"],
            },
        },
        Case {
            name: "Azure GPU from gpu-count/gpu-type annotations",
            yaml: AZURE_GPU_ANNOTATIONS,
            settings: defaults,
            want: Want {
                name: "Standard_NC6s_v3",
                cpu_milli: 6000,
                memory: 112 * GI,
                pods: 110,
                gpu: 1,
                arch: "amd64",
                os: "linux",
                offerings: &[(None, "on-demand")],
                price: 0.18 + 0.448 + 0.5,
                price_source: PriceSource::Default,
                taints: &["sku=gpu:NoSchedule"],
                templates: &["nc6s-v3"],
            },
        },
        Case {
            name: "Azure windows from status.nodeInfo",
            yaml: AZURE_WINDOWS,
            settings: defaults,
            want: Want {
                name: "win-d4s-v5",
                cpu_milli: 4000,
                memory: 16 * GI,
                pods: 110,
                gpu: 0,
                arch: "amd64",
                os: "windows",
                offerings: &[(None, "on-demand")],
                price: 0.184,
                price_source: PriceSource::Default,
                taints: &[],
                templates: &["win-d4s-v5"],
            },
        },
        Case {
            name: "vSphere annotation-only, zones from failure domains",
            yaml: VSPHERE_FD,
            settings: three_fds,
            want: Want {
                name: "vsphere-8c32g",
                cpu_milli: 8000,
                memory: 32 * GI,
                pods: 110,
                gpu: 0,
                arch: "amd64",
                os: "linux",
                offerings: &[
                    (Some("fd-1"), "on-demand"),
                    (Some("fd-2"), "on-demand"),
                    (Some("fd-3"), "on-demand"),
                ],
                price: 0.368,
                price_source: PriceSource::Default,
                taints: &[],
                templates: &["vsphere-8c32g"],
            },
        },
        Case {
            name: "Metal3 annotation-only with labels annotation, maxPods, price",
            yaml: METAL3_PRICED,
            settings: defaults,
            want: Want {
                name: "bm-64c-256g",
                cpu_milli: 64000,
                memory: 256 * GI,
                pods: 250,
                gpu: 0,
                arch: "amd64",
                os: "linux",
                offerings: &[(None, "on-demand")],
                price: 1.2,
                price_source: PriceSource::Annotation,
                taints: &[],
                templates: &["bm-64c-256g"],
            },
        },
        Case {
            name: "OpenStack annotation overrides status",
            yaml: OPENSTACK_OVERRIDE,
            settings: three_fds,
            want: Want {
                name: "m1.xlarge",
                cpu_milli: 8000,
                memory: 16 * GI,
                pods: 110,
                gpu: 0,
                arch: "amd64",
                os: "linux",
                offerings: &[(Some("nova"), "on-demand")],
                price: 0.24 + 0.064,
                price_source: PriceSource::Default,
                taints: &[],
                templates: &["m1-xlarge"],
            },
        },
        Case {
            name: "OpenStack arm64 with AMD GPUs and fractional cpu",
            yaml: OPENSTACK_ARM64_AMD_GPU,
            settings: defaults,
            want: Want {
                name: "a1-gpu",
                cpu_milli: 1500,
                memory: 3 * GI,
                pods: 110,
                gpu: 2,
                arch: "arm64",
                os: "linux",
                offerings: &[(None, "on-demand")],
                price: 0.045 + 0.012 + 1.0,
                price_source: PriceSource::Default,
                taints: &[],
                templates: &["a1-gpu"],
            },
        },
    ];
    for case in &cases {
        check(case);
    }
}

#[test]
fn labels_and_extra_resources() {
    let it = catalog(METAL3_PRICED).instance_types.remove(0);
    assert_eq!(it.labels["hardware"], "dell-r650");
    assert_eq!(it.labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(
        it.labels["karpenter.cluster.x-k8s.io/instance-template"],
        "bm-64c-256g"
    );
    assert_eq!(
        it.labels["karpenter.cluster.x-k8s.io/instance-memory"],
        "262144"
    );
    assert!(!it.labels.contains_key("topology.kubernetes.io/zone"));
    let os = catalog(OPENSTACK_OVERRIDE).instance_types.remove(0);
    assert_eq!(os.capacity.get("ephemeral-storage"), 160 * GI);
    let gpu = catalog(AZURE_GPU_ANNOTATIONS).instance_types.remove(0);
    assert_eq!(gpu.capacity.get("nvidia.com/gpu"), 1);
    let amd = catalog(OPENSTACK_ARM64_AMD_GPU).instance_types.remove(0);
    assert_eq!(amd.capacity.get("amd.com/gpu"), 2);
    assert_eq!(amd.labels["karpenter.cluster.x-k8s.io/instance-cpu"], "1");
    // Offering-level labels for a node of a zoned offering.
    let aws = catalog(AWS_TWO_ZONES).instance_types.remove(0);
    let node = aws.node_labels(&aws.offerings[1]);
    assert_eq!(node["topology.kubernetes.io/zone"], "us-east-1b");
    assert_eq!(
        node["karpenter.cluster.x-k8s.io/instance-template"],
        "m5-large-us-east-1b"
    );
    // Two templates: the template label is per offering only.
    assert!(
        !aws.labels
            .contains_key("karpenter.cluster.x-k8s.io/instance-template")
    );
}

#[test]
fn allocatable_default_and_nodeclass_values() {
    // Defaults: m5.large 2 cpu / 8Gi / 110 pods.
    let it = catalog(AWS_TWO_ZONES).instance_types.remove(0);
    assert_eq!(it.allocatable.cpu_milli(), 2000 - 70);
    assert_eq!(
        it.allocatable.memory_bytes(),
        8 * GI - (11 * 110 + 255) * MI - 100 * MI
    );
    // NodeClass kubelet settings override key by key; maxPods changes pods and the default
    // kube-reserved memory.
    let settings = CatalogSettings {
        kube_reserved: BTreeMap::from([("cpu".into(), "250m".into())]),
        system_reserved: BTreeMap::from([
            ("cpu".into(), "100m".into()),
            ("memory".into(), "200Mi".into()),
        ]),
        eviction_hard: BTreeMap::from([
            ("memory.available".into(), "500Mi".into()),
            ("nodefs.available".into(), "15%".into()),
        ]),
        max_pods: Some(58),
        failure_domains: vec![],
        resize_corrections: BTreeMap::new(),
        learned_devices: BTreeMap::new(),
    };
    let it = catalog_with(AWS_TWO_ZONES, &settings)
        .instance_types
        .remove(0);
    assert_eq!(it.capacity.pods(), 58);
    assert_eq!(it.allocatable.cpu_milli(), 2000 - 250 - 100);
    assert_eq!(
        it.allocatable.memory_bytes(),
        8 * GI - (11 * 58 + 255) * MI - 200 * MI - 500 * MI
    );
    // ephemeral-storage: capacity − 1Gi kube default − 15%.
    let os = catalog_with(OPENSTACK_OVERRIDE, &settings)
        .instance_types
        .remove(0);
    let eph = 160 * GI;
    assert_eq!(
        os.allocatable.get("ephemeral-storage"),
        eph - GI - (eph * 15).div_euclid(100)
    );
}

#[test]
fn spot_and_on_demand_templates_merge() {
    let yaml = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: AzureMachineTemplate
metadata:
  name: d4s-v5
  labels: {node.kubernetes.io/instance-type: Standard_D4s_v5}
status:
  capacity: {cpu: "4", memory: 16Gi}
  nodeInfo: {architecture: amd64, operatingSystem: linux}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: AzureMachineTemplate
metadata:
  name: d4s-v5-spot
  labels:
    node.kubernetes.io/instance-type: Standard_D4s_v5
    karpenter.sh/capacity-type: spot
spec:
  template:
    spec:
      spotVMOptions: {evictionPolicy: Delete}
status:
  capacity: {cpu: "4", memory: 16Gi}
  nodeInfo: {architecture: amd64, operatingSystem: linux}
"#;
    let cat = catalog_with(yaml, &three_fds());
    assert!(cat.excluded.is_empty());
    let it = cat.get("Standard_D4s_v5").expect("merged type");
    assert_eq!(it.offerings.len(), 6);
    // Spot is cheaper by default and listed first.
    assert!(it.offerings[..3].iter().all(|o| o.capacity_type == "spot"));
    assert!(
        it.offerings[3..]
            .iter()
            .all(|o| o.capacity_type == "on-demand")
    );
    assert!(it.offerings[0].price < it.offerings[3].price);
    assert!(!it.labels.contains_key("karpenter.sh/capacity-type"));
    assert_eq!(templates::model::templates_of(it).len(), 2);
}

#[test]
fn smaller_shapes_are_cheaper_by_default() {
    let cat = catalog(&format!(
        "{DOCKER_ANNOTATION_ONLY}---{DEV_STATUS}---{VSPHERE_FD}---{AZURE_WINDOWS}"
    ));
    let names: Vec<&str> = cat.instance_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["docker-2c4g", "dev-4c8g", "win-d4s-v5", "vsphere-8c32g"]
    );
    let prices: Vec<f64> = cat
        .instance_types
        .iter()
        .map(|t: &InstanceType| t.offerings[0].price)
        .collect();
    assert!(prices.windows(2).all(|w| w[0] < w[1]), "{prices:?}");
}

#[test]
fn defaults_are_reported() {
    let cat = catalog(&format!("{DOCKER_ANNOTATION_ONLY}---{DEV_STATUS}"));
    let notes: Vec<(String, String, String)> = cat
        .defaults_applied
        .iter()
        .map(|d| (d.template.name.clone(), d.field.clone(), d.value.clone()))
        .collect();
    assert!(notes.contains(&(
        "docker-2c4g".into(),
        "kubernetes.io/arch".into(),
        "amd64".into()
    )));
    assert!(notes.contains(&(
        "docker-2c4g".into(),
        "kubernetes.io/os".into(),
        "linux".into()
    )));
    // The Dev template states its node info and pods: nothing defaulted.
    assert!(notes.iter().all(|(t, _, _)| t != "dev-4c8g"), "{notes:?}");
}
