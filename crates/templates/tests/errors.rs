//! Table tests: broken templates are excluded with a typed error naming the template and the
//! field, and never take the good templates down with them.

use std::collections::BTreeMap;
use std::path::Path;

use templates::offline::Inputs;
use templates::{CatalogSettings, SettingsError, TemplateError, build_catalog};

fn templates(yaml: &str) -> Vec<kube::api::DynamicObject> {
    let mut inputs = Inputs::default();
    inputs
        .add_yaml(Path::new("test.yaml"), yaml)
        .expect("test YAML parses");
    inputs.templates
}

const GOOD: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata: {name: good, namespace: default}
status:
  capacity: {cpu: "2", memory: 8Gi}
"#;

/// A template named `bad` with the given metadata/status body.
fn bad(kind: &str, body: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: {kind}\nmetadata:\n  name: bad\n  namespace: default\n{body}"
    )
}

#[test]
fn excluded_with_reason_and_field() {
    // (case, kind, body, expected reason, substring the message must contain)
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        (
            "unparseable annotation quantity",
            "VSphereMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/cpu: \"8\"\n    capacity.cluster-autoscaler.kubernetes.io/memory: 64GB\n",
            "InvalidQuantity",
            "metadata.annotations[capacity.cluster-autoscaler.kubernetes.io/memory]: unparseable quantity \"64GB\"",
        ),
        (
            "unparseable status quantity",
            "OpenStackMachineTemplate",
            "status:\n  capacity: {cpu: four, memory: 8Gi}\n",
            "InvalidQuantity",
            "status.capacity[cpu]",
        ),
        (
            "negative quantity",
            "AzureMachineTemplate",
            "status:\n  capacity: {cpu: \"-2\", memory: 8Gi}\n",
            "NegativeQuantity",
            "status.capacity[cpu]",
        ),
        (
            "non-numeric max-machines",
            "Metal3MachineTemplate",
            "  annotations:\n    karpenter.cluster.x-k8s.io/max-machines: three\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidCount",
            "metadata.annotations[karpenter.cluster.x-k8s.io/max-machines]: bad count \"three\": expected a non-negative integer",
        ),
        (
            "negative node-group max size",
            "Metal3MachineTemplate",
            "  annotations:\n    cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: \"-3\"\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidCount",
            "cluster-api-autoscaler-node-group-max-size]: bad count \"-3\": must not be negative",
        ),
        (
            "available-count with a bad timestamp",
            "Metal3MachineTemplate",
            "  annotations:\n    karpenter.cluster.x-k8s.io/available-count: \"2\"\n    karpenter.cluster.x-k8s.io/available-count-updated: last tuesday\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidCount",
            "available-count-updated]: bad count \"last tuesday\": expected an RFC 3339 timestamp",
        ),
        (
            "no cpu",
            "Metal3MachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/memory: 256Gi\n",
            "NoCPU",
            "no cpu",
        ),
        (
            "zero cpu",
            "Metal3MachineTemplate",
            "status:\n  capacity: {cpu: \"0\", memory: 8Gi}\n",
            "NoCPU",
            "no cpu",
        ),
        (
            "no memory",
            "DockerMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/cpu: \"2\"\n",
            "NoMemory",
            "no memory",
        ),
        (
            "no capacity at all",
            "AWSMachineTemplate",
            "spec:\n  template:\n    spec: {instanceType: m5.large}\n",
            "NoCPU",
            "scale from zero needs cpu and memory",
        ),
        (
            "taint without effect",
            "AWSMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/taints: dedicated=gpu\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidTaint",
            "metadata.annotations[capacity.cluster-autoscaler.kubernetes.io/taints]: bad taint \"dedicated=gpu\"",
        ),
        (
            "taint with unknown effect",
            "AWSMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/taints: a=b:NoSchedule,arch=arm64:NoSchedul\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidTaint",
            "\"arch=arm64:NoSchedul\"",
        ),
        (
            "unknown architecture in nodeInfo",
            "AWSMachineTemplate",
            "status:\n  capacity: {cpu: \"2\", memory: 8Gi}\n  nodeInfo: {architecture: x86_64, operatingSystem: linux}\n",
            "UnknownArchitecture",
            "status.nodeInfo.architecture: unknown architecture \"x86_64\"",
        ),
        (
            "unknown architecture in labels annotation",
            "DockerMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/cpu: \"2\"\n    capacity.cluster-autoscaler.kubernetes.io/memory: 4Gi\n    capacity.cluster-autoscaler.kubernetes.io/labels: kubernetes.io/arch=riscv64\n",
            "UnknownArchitecture",
            "metadata.annotations[capacity.cluster-autoscaler.kubernetes.io/labels]",
        ),
        (
            "unknown operating system",
            "AzureMachineTemplate",
            "status:\n  capacity: {cpu: \"2\", memory: 8Gi}\n  nodeInfo: {architecture: amd64, operatingSystem: plan9}\n",
            "UnknownOperatingSystem",
            "status.nodeInfo.operatingSystem",
        ),
        (
            "negative price",
            "AWSMachineTemplate",
            "  annotations:\n    karpenter.cluster.x-k8s.io/price: \"-0.10\"\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidPrice",
            "metadata.annotations[karpenter.cluster.x-k8s.io/price]: bad price \"-0.10\": negative",
        ),
        (
            "price not a number",
            "AWSMachineTemplate",
            "  annotations:\n    karpenter.cluster.x-k8s.io/price: $0.10\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidPrice",
            "not a decimal number",
        ),
        (
            "price NaN",
            "AWSMachineTemplate",
            "  annotations:\n    karpenter.cluster.x-k8s.io/price: NaN\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidPrice",
            "not finite",
        ),
        (
            "maxPods not an integer",
            "DockerMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/cpu: \"2\"\n    capacity.cluster-autoscaler.kubernetes.io/memory: 4Gi\n    capacity.cluster-autoscaler.kubernetes.io/maxPods: lots\n",
            "InvalidInteger",
            "capacity.cluster-autoscaler.kubernetes.io/maxPods",
        ),
        (
            "gpu-count not an integer",
            "AzureMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/gpu-count: \"1.5\"\nstatus:\n  capacity: {cpu: \"6\", memory: 112Gi}\n",
            "InvalidInteger",
            "capacity.cluster-autoscaler.kubernetes.io/gpu-count",
        ),
        (
            "unknown capacity type",
            "AWSMachineTemplate",
            "  labels:\n    karpenter.sh/capacity-type: preemptible\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "UnknownCapacityType",
            "metadata.labels[karpenter.sh/capacity-type]",
        ),
        (
            "labels annotation without =",
            "VSphereMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/labels: gpu\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidLabel",
            "expected key=value",
        ),
        (
            "restricted label",
            "DockerMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/labels: team=a,karpenter.sh/nodepool=default\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidLabel",
            "bad label \"karpenter.sh/nodepool=default\": restricted label",
        ),
        (
            "restricted label in our domain",
            "DockerMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/labels: karpenter.cluster.x-k8s.io/instance-cpu=64\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidLabel",
            "restricted label",
        ),
        (
            "memory below reservations",
            "DockerMachineTemplate",
            "status:\n  capacity: {cpu: \"1\", memory: 1Gi}\n",
            "NothingAllocatable",
            "allocatable memory",
        ),
        (
            "bad CSI driver limit",
            "AWSMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/csi-driver: ebs.csi.aws.com=25, efs.csi.aws.com=many\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidCSIDriver",
            "metadata.annotations[capacity.cluster-autoscaler.kubernetes.io/csi-driver]: bad CSI driver limit \"efs.csi.aws.com=many\"",
        ),
        (
            "CSI driver limit above int32",
            "AWSMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/csi-driver: ebs.csi.aws.com=2147483648\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidCSIDriver",
            "limit must be an integer from 0 to 2147483647",
        ),
        (
            "CSI driver without a limit",
            "OpenStackMachineTemplate",
            "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/csi-driver: cinder.csi.openstack.org\nstatus:\n  capacity: {cpu: \"2\", memory: 8Gi}\n",
            "InvalidCSIDriver",
            "expected driver=limit",
        ),
        (
            "status.capacity not a map",
            "AWSMachineTemplate",
            "status:\n  capacity: [cpu, memory]\n",
            "InvalidQuantity",
            "status.capacity",
        ),
    ];
    for (name, kind, body, reason, needle) in cases {
        let yaml = format!("{GOOD}---\n{}", bad(kind, body));
        let cat =
            build_catalog(&templates(&yaml), &CatalogSettings::default()).expect("settings valid");
        // The good template still serves.
        assert_eq!(
            cat.instance_types
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["good"],
            "{name}"
        );
        assert_eq!(cat.excluded.len(), 1, "{name}");
        let e = &cat.excluded[0];
        assert_eq!(e.template.name, "bad", "{name}");
        assert_eq!(e.template.kind, *kind, "{name}");
        assert_eq!(e.error.template(), &e.template, "{name}");
        assert_eq!(e.error.reason(), *reason, "{name}: {}", e.error);
        let msg = e.error.to_string();
        assert!(
            msg.starts_with(&format!("{kind} default/bad: ")),
            "{name}: {msg}"
        );
        assert!(msg.contains(needle), "{name}: {msg:?} lacks {needle:?}");
    }
}

#[test]
fn conflicting_shapes_and_duplicates() {
    let yaml = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: a-m5-large
  namespace: default
  labels: {node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: us-east-1a}
status:
  capacity: {cpu: "2", memory: 8Gi}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: b-m5-large-wrong
  namespace: default
  labels: {node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: us-east-1b}
status:
  capacity: {cpu: "4", memory: 8Gi}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: c-m5-large-arm
  namespace: default
  labels: {node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: us-east-1c}
status:
  capacity: {cpu: "2", memory: 8Gi}
  nodeInfo: {architecture: arm64}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: d-m5-large-again
  namespace: default
  labels: {node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: us-east-1a}
status:
  capacity: {cpu: "2", memory: 8Gi}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: e-m5-large-1d
  namespace: default
  labels: {node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: us-east-1d}
status:
  capacity: {cpu: "2", memory: 8Gi}
"#;
    let cat = build_catalog(&templates(yaml), &CatalogSettings::default()).expect("valid");
    let it = cat.get("m5.large").expect("first shape wins");
    let zones: Vec<&str> = it
        .offerings
        .iter()
        .filter_map(|o| o.zone.as_deref())
        .collect();
    assert_eq!(zones, ["us-east-1a", "us-east-1d"]);
    let excluded: BTreeMap<&str, &TemplateError> = cat
        .excluded
        .iter()
        .map(|e| (e.template.name.as_str(), &e.error))
        .collect();
    assert_eq!(excluded.len(), 3);
    let wrong = excluded["b-m5-large-wrong"].to_string();
    assert!(
        wrong.contains("already defined by AWSMachineTemplate default/a-m5-large")
            && wrong.contains("capacity (cpu 2 vs 4)"),
        "{wrong}"
    );
    assert_eq!(excluded["b-m5-large-wrong"].reason(), "ConflictingShape");
    let arm = excluded["c-m5-large-arm"].to_string();
    assert!(
        arm.contains("labels (") && arm.contains("kubernetes.io/arch \"amd64\" vs \"arm64\""),
        "{arm}"
    );
    assert_eq!(excluded["d-m5-large-again"].reason(), "DuplicateOffering");
    assert!(
        excluded["d-m5-large-again"]
            .to_string()
            .contains("zone us-east-1a capacity type on-demand is already offered by AWSMachineTemplate default/a-m5-large")
    );
}

#[test]
fn invalid_nodeclass_settings_fail_the_catalog() {
    let s = CatalogSettings {
        eviction_hard: BTreeMap::from([("memory.available".into(), "a lot".into())]),
        ..Default::default()
    };
    let err = build_catalog(&templates(GOOD), &s).expect_err("invalid settings");
    assert!(
        matches!(err, SettingsError::Quantity { ref field, .. } if field == "spec.kubelet.evictionHard.memory.available")
    );
}

#[test]
fn nodeclass_reservations_can_leave_nothing() {
    let s = CatalogSettings {
        system_reserved: BTreeMap::from([("cpu".into(), "2".into())]),
        ..Default::default()
    };
    let cat = build_catalog(&templates(GOOD), &s).expect("valid");
    assert!(cat.instance_types.is_empty());
    let msg = cat.excluded[0].error.to_string();
    assert_eq!(cat.excluded[0].error.reason(), "NothingAllocatable");
    assert!(msg.contains("allocatable cpu is -70m"), "{msg}");
}

#[test]
fn non_templates_are_rejected_by_the_pure_part() {
    let obj: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "workers"},
    }))
    .expect("object");
    let cat = build_catalog(&[obj], &CatalogSettings::default()).expect("valid");
    assert!(cat.instance_types.is_empty());
    assert_eq!(cat.excluded[0].error.reason(), "NotATemplate");
}

#[test]
fn hostile_input_never_panics() {
    let bodies = [
        "status: 7\n",
        "status:\n  capacity: {cpu: {nested: 1}, memory: [1]}\n",
        "status:\n  nodeInfo: \"amd64\"\n  capacity: {cpu: \"1e400\", memory: 8Gi}\n",
        "status:\n  capacity: {cpu: \"99999999999999999999999999999999999999Ei\", memory: 1}\n",
        "status:\n  capacity: {cpu: \"ß\", memory: \"é\"}\n",
        "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/taints: \":,=:,é=é:NoSchedule\"\nstatus:\n  capacity: {cpu: \"1\", memory: 8Gi}\n",
        "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/labels: \"=,==,é=ü\"\nstatus:\n  capacity: {cpu: \"1\", memory: 8Gi}\n",
        "  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/cpu: \"\"\n    capacity.cluster-autoscaler.kubernetes.io/memory: \"-\"\n",
        "  labels:\n    node.kubernetes.io/instance-type: \"\"\nstatus:\n  capacity: {cpu: \"1\", memory: 8Gi}\n",
        "  labels:\n    node.kubernetes.io/instance-type: \"this-name-is-far-too-long-to-be-a-kubernetes-label-value-at-all-really\"\nstatus:\n  capacity: {cpu: \"1\", memory: 8Gi}\n",
    ];
    for body in bodies {
        let yaml = bad("AWSMachineTemplate", body);
        let cat = build_catalog(&templates(&yaml), &CatalogSettings::default()).expect("valid");
        assert!(cat.instance_types.is_empty(), "{body}");
        assert_eq!(cat.excluded.len(), 1, "{body}");
    }
}

#[test]
fn counts_and_reservations_reach_the_offerings() {
    let yaml = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: Metal3MachineTemplate
metadata:
  name: metal-large
  namespace: default
  labels: {karpenter.sh/capacity-type: reserved}
  annotations:
    karpenter.cluster.x-k8s.io/max-machines: "3"
    cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: "5"
status:
  capacity: {cpu: "32", memory: 256Gi}
"#;
    let objs = templates(&format!("{yaml}---{GOOD}"));
    let c = build_catalog(&objs, &CatalogSettings::default()).expect("settings are valid");
    assert!(c.excluded.is_empty(), "{:?}", c.excluded);
    let metal = c.get("metal-large").expect("metal-large");
    let o = &metal.offerings[0];
    assert_eq!(c.limits_of(o).max_machines, Some(3));
    assert_eq!(c.limits_of(o).node_group_max_size, Some(5));
    assert_eq!(o.reservation_id.as_deref(), Some("metal-large"));
    assert_eq!(
        metal.node_labels(o)["karpenter.cluster.x-k8s.io/reservation-id"],
        "metal-large"
    );
    let good = c.get("good").expect("good");
    assert!(c.limits_of(&good.offerings[0]).is_empty());
    assert_eq!(good.offerings[0].reservation_id, None);
}

#[test]
fn csi_driver_limits_reach_the_instance_type_and_must_agree() {
    let template = |name: &str, zone: &str, csi: Option<&str>| {
        let annotations = csi
            .map(|c| format!("  annotations:\n    capacity.cluster-autoscaler.kubernetes.io/csi-driver: \"{c}\"\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: AWSMachineTemplate\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: {zone}}}\n{annotations}status:\n  capacity: {{cpu: \"2\", memory: 8Gi}}\n---\n"
        )
    };
    let yaml = [
        template(
            "a",
            "us-east-1a",
            Some("ebs.csi.aws.com=25, efs.csi.aws.com=0"),
        ),
        // The same limits written differently: one instance type.
        template(
            "b",
            "us-east-1b",
            Some(" efs.csi.aws.com = 0 ,ebs.csi.aws.com=25,"),
        ),
        template("c", "us-east-1c", Some("ebs.csi.aws.com=39")),
        template("d", "us-east-1d", None),
        template(
            "e",
            "us-east-1e",
            Some("ebs.csi.aws.com=25,other.example.com=4"),
        ),
    ]
    .concat();
    let cat = build_catalog(&templates(&yaml), &CatalogSettings::default()).expect("valid");
    let it = cat.get("m5.large").expect("the first shape");
    assert_eq!(
        it.volume_limits,
        BTreeMap::from([("ebs.csi.aws.com".to_string(), 25)]),
        "0 is unlimited: no entry"
    );
    assert_eq!(it.offerings.len(), 2);
    let excluded: BTreeMap<&str, String> = cat
        .excluded
        .iter()
        .map(|e| (e.template.name.as_str(), e.error.to_string()))
        .collect();
    assert_eq!(excluded.len(), 3, "{excluded:?}");
    for (name, diff) in [
        ("c", "volume limits (ebs.csi.aws.com 25 vs 39)"),
        ("d", "volume limits (ebs.csi.aws.com 25 vs unlimited)"),
        ("e", "volume limits (other.example.com unlimited vs 4)"),
    ] {
        assert!(
            excluded[name].contains("already defined by AWSMachineTemplate default/a")
                && excluded[name].contains(diff),
            "{name}: {}",
            excluded[name]
        );
    }

    // A template without the annotation has no limits.
    let cat = build_catalog(&templates(GOOD), &CatalogSettings::default()).expect("valid");
    assert!(cat.get("good").expect("good").volume_limits.is_empty());
}
