//! The generated CRDs carry Karpenter's names, scopes, defaults, enums, patterns, CEL rules
//! and printer columns.

use clusterapi_api::crds::crds;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

fn crd(name: &str) -> CustomResourceDefinition {
    crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"))
}

fn schema(name: &str) -> Value {
    let crd = crd(name);
    serde_json::to_value(&crd.spec.versions[0].schema).expect("schema")["openAPIV3Schema"].clone()
}

/// The schema at a dotted path of property names (`[]` steps into array items).
fn at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut s = schema;
    for step in path.split('.') {
        s = if step == "[]" {
            &s["items"]
        } else {
            &s["properties"][step]
        };
        assert!(!s.is_null(), "no schema at {path} (step {step})");
    }
    s
}

fn rules(s: &Value) -> Vec<String> {
    s["x-kubernetes-validations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["rule"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn columns(name: &str) -> Vec<(String, i32)> {
    crd(name).spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name, c.priority.unwrap_or(0)))
        .collect()
}

#[test]
fn names_scopes_and_subresources() {
    for (name, kind, short) in [
        ("nodepools.karpenter.sh", "NodePool", None),
        ("nodeclaims.karpenter.sh", "NodeClaim", None),
        ("nodeoverlays.karpenter.sh", "NodeOverlay", Some("overlays")),
        (
            "clusterapinodeclasses.karpenter.cluster.x-k8s.io",
            "ClusterAPINodeClass",
            Some("capinc"),
        ),
    ] {
        let c = crd(name);
        assert_eq!(c.spec.names.kind, kind);
        assert_eq!(c.spec.scope, "Cluster", "{name} is cluster-scoped");
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["karpenter".to_string()][..])
        );
        let v = &c.spec.versions[0];
        assert!(v.served && v.storage);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        if let Some(short) = short {
            assert_eq!(
                c.spec.names.short_names.as_deref(),
                Some(&[short.to_string()][..])
            );
        }
    }
}

#[test]
fn nodepool_defaults_enums_patterns() {
    let s = schema("nodepools.karpenter.sh");
    let spec = &s["properties"]["spec"];
    assert_eq!(at(spec, "weight")["minimum"], 1.0);
    assert_eq!(at(spec, "weight")["maximum"], 100.0);
    let d = at(spec, "disruption");
    assert_eq!(d["default"]["consolidateAfter"], "0s");
    assert_eq!(
        at(d, "consolidationPolicy")["default"],
        "WhenEmptyOrUnderutilized"
    );
    assert_eq!(
        at(d, "consolidationPolicy")["enum"],
        serde_json::json!(["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"])
    );
    assert_eq!(at(d, "budgets")["maxItems"], 50);
    assert_eq!(
        at(d, "budgets")["default"],
        serde_json::json!([{"nodes": "10%"}])
    );
    assert_eq!(
        at(d, "budgets.[].nodes")["pattern"],
        r"^((100|[0-9]{1,2})%|[0-9]+)$"
    );
    assert_eq!(
        at(d, "budgets.[].reasons.[]")["enum"],
        serde_json::json!(["Underutilized", "Empty", "Drifted", "Unhealthy"])
    );
    // consolidateAfter is optional with a default, as in Karpenter v1.15.
    assert_eq!(at(d, "consolidateAfter")["default"], "0s");
    assert!(
        !d["required"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r == "consolidateAfter")
    );
    assert!(
        rules(at(d, "budgets"))
            .iter()
            .any(|r| r.contains("has(x.schedule) == has(x.duration)"))
    );
    let t = at(spec, "template.spec");
    assert_eq!(at(t, "expireAfter")["default"], "720h");
    assert_eq!(
        at(t, "expireAfter")["pattern"],
        r"^(([0-9]+(s|m|h))+|Never)$"
    );
    assert_eq!(
        at(t, "terminationGracePeriod")["pattern"],
        r"^([0-9]+(s|m|h))+$"
    );
    let req = at(t, "requirements");
    assert_eq!(req["maxItems"], 100);
    let req_rules = rules(req);
    assert!(
        req_rules
            .iter()
            .any(|r| r.contains("x.operator == 'In'") && r.contains("size() != 0"))
    );
    assert!(
        req_rules
            .iter()
            .any(|r| r.contains("x.values.size() >= x.minValues"))
    );
    assert!(req_rules.iter().any(|r| r.contains("'Gt'")));
    assert_eq!(at(req, "[].minValues")["minimum"], 1.0);
    assert_eq!(at(req, "[].minValues")["maximum"], 50.0);
    assert_eq!(
        at(req, "[].operator")["enum"].as_array().map(Vec::len),
        Some(8)
    );
    assert!(!rules(at(req, "[].key")).is_empty());
    let ncr = rules(at(t, "nodeClassRef"));
    assert!(ncr.contains(&"self.group == oldSelf.group".to_string()));
    assert!(ncr.contains(&"self.kind == oldSelf.kind".to_string()));
    assert!(!rules(at(spec, "template.metadata.labels")).is_empty());
    assert_eq!(
        at(t, "taints.[].effect")["enum"],
        serde_json::json!(["NoSchedule", "PreferNoSchedule", "NoExecute"])
    );
    assert_eq!(
        at(spec, "limits")["additionalProperties"]["x-kubernetes-int-or-string"],
        true
    );
    assert!(
        !serde_json::to_string(&s)
            .expect("json")
            .contains("nullable")
    );
    for top in ["apiVersion", "kind", "metadata"] {
        assert!(!s["properties"][top].is_null(), "{top}");
    }
}

#[test]
fn static_nodepools_replicas_scale_and_rules() {
    let s = schema("nodepools.karpenter.sh");
    let spec = &s["properties"]["spec"];
    assert_eq!(at(spec, "replicas")["minimum"], 0.0);
    assert_eq!(at(spec, "replicas")["format"], "int64");
    let rules: Vec<(String, String)> = spec["x-kubernetes-validations"]
        .as_array()
        .expect("spec rules")
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("rule"), s("fieldPath"))
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("has(self.replicas) == has(oldSelf.replicas)", ".replicas"),
            ("!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))", ".limits"),
            ("!has(self.replicas) || !has(self.weight)", ".weight"),
        ]
        .map(|(r, f)| (r.to_string(), f.to_string()))
    );
    let scale = crd("nodepools.karpenter.sh").spec.versions[0]
        .subresources
        .as_ref()
        .and_then(|s| s.scale.clone())
        .expect("scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.nodes");
    assert_eq!(at(&s, "status.nodes")["default"], 0);
}

#[test]
fn condition_items_as_karpenter_has_them() {
    let required = |crd: &str| {
        let s = schema(crd);
        let item = at(&s, "status.conditions.[]");
        assert_eq!(
            item["properties"]["status"]["enum"],
            serde_json::json!(["True", "False", "Unknown"]),
            "{crd}"
        );
        item["required"].clone()
    };
    assert_eq!(
        required("nodeclaims.karpenter.sh"),
        serde_json::json!(["lastTransitionTime", "status", "type"])
    );
    for crd in ["nodepools.karpenter.sh", "nodeoverlays.karpenter.sh"] {
        assert_eq!(
            required(crd),
            serde_json::json!(["lastTransitionTime", "message", "reason", "status", "type"])
        );
    }
}

#[test]
fn nodeoverlay_schema_rules_and_columns() {
    let c = crd("nodeoverlays.karpenter.sh");
    assert_eq!(c.spec.versions[0].name, "v1alpha1");
    let s = schema("nodeoverlays.karpenter.sh");
    let spec = &s["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["requirements"]));
    assert_eq!(at(spec, "weight")["minimum"], 1.0);
    assert_eq!(at(spec, "weight")["maximum"], 10000.0);
    assert_eq!(
        rules(spec),
        ["!has(self.price) || !has(self.priceAdjustment)"]
    );
    assert_eq!(rules(at(spec, "requirements")).len(), 3);
    assert_eq!(rules(at(spec, "requirements.[].key")).len(), 2);
    assert!(rules(at(spec, "capacity"))[0].contains("'ephemeral-storage'"));
    assert_eq!(at(spec, "price")["pattern"], r"^\d+(\.\d+)?$");
    assert!(at(spec, "priceAdjustment")["pattern"].is_string());
    assert_eq!(
        columns("nodeoverlays.karpenter.sh"),
        [
            ("Ready".to_string(), 0),
            ("Age".to_string(), 0),
            ("Weight".to_string(), 1)
        ]
    );
}

#[test]
fn nodeclaim_spec_is_immutable() {
    let s = schema("nodeclaims.karpenter.sh");
    assert_eq!(
        rules(&s["properties"]["spec"]),
        vec!["self == oldSelf".to_string()]
    );
    let required = &s["properties"]["spec"]["required"];
    assert_eq!(
        required,
        &serde_json::json!(["nodeClassRef", "requirements"])
    );
    let status = &s["properties"]["status"];
    for field in [
        "nodeName",
        "providerID",
        "imageID",
        "capacity",
        "allocatable",
        "conditions",
        "lastPodEventTime",
    ] {
        assert!(!status["properties"][field].is_null(), "status.{field}");
    }
}

#[test]
fn nodeclass_exactly_one_bootstrap_source() {
    let s = schema("clusterapinodeclasses.karpenter.cluster.x-k8s.io");
    let spec = &s["properties"]["spec"];
    assert_eq!(
        rules(at(spec, "bootstrap")),
        vec!["has(self.configTemplateRef) != has(self.dataSecretName)".to_string()]
    );
    assert_eq!(at(spec, "launchTimeout")["default"], "10m");
    assert_eq!(at(spec, "registrationTimeout")["default"], "15m");
    assert_eq!(
        spec["required"],
        serde_json::json!(["bootstrap", "clusterRef"])
    );
    for field in [
        "machineTemplateSelector",
        "machineTemplateKinds",
        "version",
        "kubelet",
        "machine",
    ] {
        assert!(!spec["properties"][field].is_null(), "spec.{field}");
    }
    let summary = at(&s["properties"]["status"], "instanceTypes.[]");
    for field in [
        "name",
        "cpu",
        "memory",
        "pods",
        "gpus",
        "zones",
        "capacityTypes",
        "price",
        "maxPrice",
        "templates",
    ] {
        assert!(
            !summary["properties"][field].is_null(),
            "instanceTypes[].{field}"
        );
    }
}

#[test]
fn printer_columns() {
    let names = |cols: Vec<(String, i32)>, priority: i32| -> Vec<String> {
        cols.into_iter()
            .filter(|(_, p)| *p == priority)
            .map(|(n, _)| n.to_uppercase())
            .collect()
    };
    assert_eq!(
        names(columns("nodeclaims.karpenter.sh"), 0),
        [
            "TYPE",
            "CAPACITY",
            "ZONE",
            "NODE",
            "READY",
            "DRIFTED",
            "DISRUPTION",
            "AGE"
        ]
    );
    let wide = names(columns("nodeclaims.karpenter.sh"), 1);
    for c in ["MACHINE", "PROVIDERID", "NODEPOOL"] {
        assert!(wide.contains(&c.to_string()), "NodeClaim wide column {c}");
    }
    assert_eq!(
        names(columns("nodepools.karpenter.sh"), 0),
        ["NODECLASS", "NODES", "READY", "WEIGHT", "AGE"]
    );
    assert_eq!(
        names(
            columns("clusterapinodeclasses.karpenter.cluster.x-k8s.io"),
            0
        ),
        ["CLUSTER", "TYPES", "READY", "AGE"]
    );
}

#[test]
fn capi_types_are_typed_clients_only() {
    use kube::Resource;
    assert_eq!(
        clusterapi_api::Machine::api_version(&()),
        "cluster.x-k8s.io/v1beta2"
    );
    assert_eq!(clusterapi_api::Cluster::plural(&()), "clusters");
    assert_eq!(clusterapi_api::Machine::plural(&()), "machines");
    assert!(crds().iter().all(|c| c.spec.group != "cluster.x-k8s.io"));
    let cluster: clusterapi_api::Cluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"topology": {"classRef": {"name": "quick-start"}, "version": "v1.36.3"},
                 "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "cp"},
                 "clusterNetwork": {"pods": {"cidrBlocks": ["10.0.0.0/16"]}}},
        "status": {"failureDomains": [{"name": "b", "controlPlane": true}, {"name": "a"}],
                   "phase": "Provisioned",
                   "conditions": [{"type": "Available", "status": "True", "reason": "Available",
                                   "message": "", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
    }))
    .expect("Cluster parses");
    assert_eq!(cluster.topology_version(), Some("v1.36.3"));
    assert_eq!(cluster.failure_domain_names(), ["a", "b"]);
    let machine: clusterapi_api::Machine = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {"clusterName": "demo", "bootstrap": {"dataSecretName": "boot"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "m"},
                 "version": "v1.36.3", "providerID": "docker:////m",
                 "deletion": {"nodeDeletionTimeoutSeconds": 10}},
        "status": {"nodeRef": {"name": "node-1"}, "phase": "Running",
                   "initialization": {"infrastructureProvisioned": true}}
    }))
    .expect("Machine parses");
    assert_eq!(machine.node_name(), Some("node-1"));
    assert_eq!(machine.spec.provider_id.as_deref(), Some("docker:////m"));
}
