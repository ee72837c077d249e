//! Cloning a Cluster API template (`*MachineTemplate`, `*ConfigTemplate`) into the object it
//! describes, the way a MachineSet does (see `shared/reference/cluster-api.md`, "Creating a
//! Machine from templates"). One place for it; launch calls it for both templates.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{DynamicObject, ObjectMeta, TypeMeta};
use serde_json::{Map, Value};

/// Why a template cannot be cloned.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum CloneError {
    #[error("template {name}: kind {kind:?} does not end in \"Template\"")]
    NotATemplate { name: String, kind: String },
    #[error("template {name}: missing apiVersion/kind")]
    Untyped { name: String },
    #[error("template {name}: spec.template.{field} is not an object")]
    Malformed { name: String, field: &'static str },
}

/// What the clone is for.
#[derive(Clone, Debug)]
pub(crate) struct CloneTarget<'a> {
    /// Name of the new object (the Machine's name: deterministic, so a restart adopts it).
    pub name: &'a str,
    /// Namespace of the new object (the Cluster's namespace).
    pub namespace: &'a str,
    /// The CAPI Cluster name (`cluster.x-k8s.io/cluster-name`).
    pub cluster_name: &'a str,
    /// Labels the Machine carries; they are added to the clone's labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// Builds the object described by `template.spec.template`: its metadata and spec, kind
/// without the `Template` suffix, the template's apiVersion, labels = template labels +
/// machine labels + cluster-name, annotations = template annotations + cloned-from-name and
/// cloned-from-groupkind. No resourceVersion, uid, finalizers or ownerReferences (the
/// Machine controller sets itself as the controller owner).
pub(crate) fn clone_template(
    template: &DynamicObject,
    target: &CloneTarget<'_>,
) -> Result<DynamicObject, CloneError> {
    let name = template.name_any();
    let types = template
        .types
        .as_ref()
        .ok_or_else(|| CloneError::Untyped { name: name.clone() })?;
    let kind = types
        .kind
        .strip_suffix("Template")
        .filter(|k| !k.is_empty())
        .ok_or_else(|| CloneError::NotATemplate {
            name: name.clone(),
            kind: types.kind.clone(),
        })?;
    let group = types.api_version.split('/').next().unwrap_or_default();
    let inner = template
        .data
        .get("spec")
        .and_then(|s| s.get("template"))
        .cloned()
        .unwrap_or(Value::Object(Map::new()));
    let Value::Object(mut inner) = inner else {
        return Err(CloneError::Malformed {
            name,
            field: "template",
        });
    };
    let meta = inner
        .remove("metadata")
        .unwrap_or(Value::Object(Map::new()));
    let string_map = |field: &'static str| -> Result<BTreeMap<String, String>, CloneError> {
        match meta.get(field) {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => Ok(m
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()),
            Some(_) => Err(CloneError::Malformed {
                name: name.clone(),
                field,
            }),
        }
    };
    let mut labels = string_map("labels")?;
    let mut annotations = string_map("annotations")?;
    labels.extend(target.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(
        api::consts::labels::CLUSTER_NAME.to_string(),
        target.cluster_name.to_string(),
    );
    annotations.insert(
        api::consts::annotations::CLONED_FROM_NAME.to_string(),
        name.clone(),
    );
    annotations.insert(
        api::consts::annotations::CLONED_FROM_GROUPKIND.to_string(),
        format!("{}.{}", types.kind, group),
    );
    let spec = inner.remove("spec").unwrap_or(Value::Object(Map::new()));
    let mut data = Map::new();
    data.insert("spec".into(), spec);
    Ok(DynamicObject {
        types: Some(TypeMeta {
            api_version: types.api_version.clone(),
            kind: kind.to_string(),
        }),
        metadata: ObjectMeta {
            name: Some(target.name.to_string()),
            namespace: Some(target.namespace.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        data: Value::Object(data),
    })
}

/// Adds the `karpenter.sh/unregistered:NoExecute` taint to a cloned KubeadmConfig's join
/// configuration, so the Node registers with it as Karpenter requires. Returns whether it
/// was added (false when it is already there).
pub(crate) fn inject_unregistered_taint(kubeadm_config: &mut DynamicObject) -> bool {
    let spec = kubeadm_config
        .data
        .as_object_mut()
        .map(|d| d.entry("spec").or_insert_with(|| Value::Object(Map::new())));
    let Some(Value::Object(spec)) = spec else {
        return false;
    };
    let mut path = spec;
    for field in ["joinConfiguration", "nodeRegistration"] {
        let next = path
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !next.is_object() {
            *next = Value::Object(Map::new());
        }
        let Value::Object(next) = next else {
            return false;
        };
        path = next;
    }
    let taints = path
        .entry("taints")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !taints.is_array() {
        *taints = Value::Array(Vec::new());
    }
    let Value::Array(taints) = taints else {
        return false;
    };
    let present = taints
        .iter()
        .any(|t| t.get("key").and_then(Value::as_str) == Some(api::consts::taints::UNREGISTERED));
    if !present {
        taints.push(serde_json::json!({
            "key": api::consts::taints::UNREGISTERED,
            "effect": "NoExecute",
        }));
    }
    !present
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "DockerMachineTemplate",
            "metadata": {
                "name": "workers-large", "namespace": "prod", "uid": "u-1",
                "resourceVersion": "42", "finalizers": ["x"],
                "labels": {"node.cluster.x-k8s.io/karpenter-member": ""}
            },
            "spec": {"template": {
                "metadata": {"labels": {"tier": "workers"}, "annotations": {"note": "a"}},
                "spec": {"customImage": "kindest/node:v1.36.3", "extraMounts": []}
            }}
        }))
        .expect("fixture")
    }

    #[test]
    fn clones_like_a_machineset() {
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "default".to_string())]);
        let target = CloneTarget {
            name: "default-abcde",
            namespace: "prod",
            cluster_name: "c1",
            labels: &labels,
        };
        let clone = clone_template(&template(), &target).expect("clones");
        let types = clone.types.as_ref().expect("typed");
        assert_eq!(types.kind, "DockerMachine");
        assert_eq!(types.api_version, "infrastructure.cluster.x-k8s.io/v1beta2");
        assert_eq!(clone.metadata.name.as_deref(), Some("default-abcde"));
        assert_eq!(clone.metadata.namespace.as_deref(), Some("prod"));
        assert!(clone.metadata.uid.is_none() && clone.metadata.resource_version.is_none());
        assert!(clone.metadata.finalizers.is_none() && clone.metadata.owner_references.is_none());
        let l = clone.metadata.labels.as_ref().expect("labels");
        assert_eq!(l["tier"], "workers");
        assert_eq!(l["karpenter.sh/nodepool"], "default");
        assert_eq!(l["cluster.x-k8s.io/cluster-name"], "c1");
        assert!(
            !l.contains_key("node.cluster.x-k8s.io/karpenter-member"),
            "the template object's own labels are not copied, only spec.template.metadata's"
        );
        let a = clone.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(a["note"], "a");
        assert_eq!(a["cluster.x-k8s.io/cloned-from-name"], "workers-large");
        assert_eq!(
            a["cluster.x-k8s.io/cloned-from-groupkind"],
            "DockerMachineTemplate.infrastructure.cluster.x-k8s.io"
        );
        assert_eq!(clone.data["spec"]["customImage"], "kindest/node:v1.36.3");
        assert!(clone.data.get("status").is_none());
    }

    #[test]
    fn rejects_non_templates() {
        let mut t = template();
        t.types.as_mut().expect("typed").kind = "DockerMachine".into();
        let labels = BTreeMap::new();
        let target = CloneTarget {
            name: "n",
            namespace: "ns",
            cluster_name: "c",
            labels: &labels,
        };
        assert!(matches!(
            clone_template(&t, &target),
            Err(CloneError::NotATemplate { .. })
        ));
        t.types = None;
        assert!(matches!(
            clone_template(&t, &target),
            Err(CloneError::Untyped { .. })
        ));
    }

    #[test]
    fn injects_unregistered_taint_once() {
        let mut cfg: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": "n"},
            "spec": {"joinConfiguration": {"nodeRegistration": {
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
            }}}
        }))
        .expect("fixture");
        assert!(inject_unregistered_taint(&mut cfg));
        assert!(!inject_unregistered_taint(&mut cfg), "idempotent");
        let taints = cfg.data["spec"]["joinConfiguration"]["nodeRegistration"]["taints"]
            .as_array()
            .expect("taints");
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[1]["key"], "karpenter.sh/unregistered");
        assert_eq!(taints[1]["effect"], "NoExecute");

        let mut empty: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": "n"}
        }))
        .expect("fixture");
        assert!(inject_unregistered_taint(&mut empty));
        assert_eq!(
            empty.data["spec"]["joinConfiguration"]["nodeRegistration"]["taints"][0]["key"],
            "karpenter.sh/unregistered"
        );
    }
}
