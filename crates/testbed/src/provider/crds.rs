//! The provider's resources and CRDs.

use super::*;

pub(super) fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, VERSION, kind), plural)
}

pub(crate) fn test_cluster_resource() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, TEST_CLUSTER_KIND, "testclusters")
}
pub fn test_machine_resource() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, TEST_MACHINE_KIND, "testmachines")
}
pub fn test_machine_template_resource() -> ApiResource {
    resource(
        INFRASTRUCTURE_GROUP,
        TEST_MACHINE_TEMPLATE_KIND,
        "testmachinetemplates",
    )
}
pub fn test_control_plane_resource() -> ApiResource {
    resource(
        CONTROL_PLANE_GROUP,
        TEST_CONTROL_PLANE_KIND,
        "testcontrolplanes",
    )
}
/// `cluster.x-k8s.io/v1beta2` Cluster.
pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
    )
}
/// `cluster.x-k8s.io/v1beta2` Machine.
pub fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
        "machines",
    )
}
pub(super) fn kubeadm_config_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfig"),
        "kubeadmconfigs",
    )
}

// --- CRDs ------------------------------------------------------------------------------

pub(super) fn open_object() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// Schema of a TestMachine spec (also a TestMachineTemplate's `spec.template.spec`).
/// Declared fields are documentation; anything else is kept.
pub(super) fn machine_spec_schema() -> Value {
    let quantities = json!({
        "type": "object",
        "additionalProperties": {"x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}]}
    });
    json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "providerID": {"type": "string"},
            "instanceType": {"type": "string"},
            "nodeName": {"type": "string"},
            "capacity": quantities,
            "allocatable": quantities,
            "nodeInfo": {"type": "object", "properties": {
                "architecture": {"type": "string"},
                "operatingSystem": {"type": "string"}
            }},
            "nodeLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "nodeTaints": {"type": "array", "items": {
                "type": "object",
                "required": ["key", "effect"],
                "properties": {
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]}
                }
            }}
        }
    })
}

pub(super) fn crd(group: &str, kind: &str, plural: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{group}"),
            "labels": {
                "cluster.x-k8s.io/v1beta2": VERSION,
                "cluster.x-k8s.io/provider": if group == CONTROL_PLANE_GROUP { "control-plane-test" } else { "infrastructure-test" }
            }
        },
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "categories": ["cluster-api"]
            },
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status
                    }
                }}
            }]
        }
    })
}

/// The test provider's CRDs: TestCluster, TestMachine, TestMachineTemplate
/// (`infrastructure.cluster.x-k8s.io`) and TestControlPlane (`controlplane.cluster.x-k8s.io`),
/// all `v1beta2` with the contract label `cluster.x-k8s.io/v1beta2: v1beta2`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let template_status = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "capacity": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true,
                "anyOf": [{"type": "integer"}, {"type": "string"}]}},
            "nodeInfo": {"type": "object", "properties": {
                "architecture": {"type": "string"},
                "operatingSystem": {"type": "string"}
            }}
        }
    });
    let template_spec = json!({
        "type": "object",
        "required": ["template"],
        "properties": {"template": {
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}}
                }},
                "spec": machine_spec_schema()
            }
        }}
    });
    [
        crd(
            INFRASTRUCTURE_GROUP,
            TEST_CLUSTER_KIND,
            "testclusters",
            open_object(),
            open_object(),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            TEST_MACHINE_KIND,
            "testmachines",
            machine_spec_schema(),
            open_object(),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            TEST_MACHINE_TEMPLATE_KIND,
            "testmachinetemplates",
            template_spec,
            template_status,
        ),
        crd(
            CONTROL_PLANE_GROUP,
            TEST_CONTROL_PLANE_KIND,
            "testcontrolplanes",
            open_object(),
            open_object(),
        ),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("static CRD definitions are valid"))
    .collect()
}

/// The CRDs as multi-document YAML: `crds/test-provider.yaml`, which `hack/testbed/up.sh` and
/// kubectl apply (written and checked by the `crd_file` test).
#[cfg(test)]
pub(crate) fn crds_yaml() -> Result<String> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).map_err(|e| Error::Invalid {
            kind: "CustomResourceDefinition",
            name: crd.name_any(),
            message: e.to_string(),
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_carry_contract_labels() {
        let crds = crds();
        assert_eq!(crds.len(), 4);
        for crd in &crds {
            assert_eq!(
                crd.labels()
                    .get("cluster.x-k8s.io/v1beta2")
                    .map(String::as_str),
                Some(VERSION),
                "{}",
                crd.name_any()
            );
        }
        assert!(
            crds.iter()
                .any(|c| c.name_any() == "testmachinetemplates.infrastructure.cluster.x-k8s.io")
        );
    }
}

#[cfg(test)]
mod crd_file {
    /// `crates/testbed/crds/test-provider.yaml` is generated from [`super::crds`]; regenerate
    /// with `TESTBED_UPDATE_CRDS=1 cargo test -p testbed --lib`.
    #[test]
    fn crd_yaml_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/test-provider.yaml");
        let want = format!(
            "# Generated from crates/testbed/src/provider/crds.rs (crds()); do not edit.\n{}",
            super::crds_yaml().expect("CRDs serialize")
        );
        if std::env::var_os("TESTBED_UPDATE_CRDS").is_some() {
            std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir crds");
            std::fs::write(&path, &want).expect("write CRD YAML");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is stale: run TESTBED_UPDATE_CRDS=1 cargo test -p testbed --lib",
            path.display()
        );
    }
}
