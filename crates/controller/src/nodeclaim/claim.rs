//! A NodeClaim as the lifecycle reads it. The loops work on this plain view, taken from the
//! object's JSON (field names are Karpenter's API), so the decisions stay pure and testable.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Deserialize;
use serde_json::Value;

use super::node_sync::ClaimView;
use super::offering::Requirement;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequirementJson {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeClassRefJson {
    #[serde(default)]
    group: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourcesJson {
    #[serde(default)]
    requests: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecJson {
    #[serde(default)]
    requirements: Vec<RequirementJson>,
    #[serde(default)]
    resources: ResourcesJson,
    #[serde(default)]
    node_class_ref: NodeClassRefJson,
    #[serde(default)]
    taints: Vec<Taint>,
    #[serde(default)]
    startup_taints: Vec<Taint>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    #[serde(default, rename = "providerID")]
    provider_id: Option<String>,
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    conditions: Vec<Condition>,
}

/// What the lifecycle needs of a NodeClaim.
#[derive(Clone, Debug, Default)]
pub struct Claim {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub requirements: Vec<Requirement>,
    pub requests: BTreeMap<String, String>,
    pub node_class: String,
    pub node_class_group: String,
    pub node_class_kind: String,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub provider_id: Option<String>,
    pub node_name: Option<String>,
    pub conditions: Vec<Condition>,
}

impl Claim {
    /// Reads a NodeClaim given as JSON (e.g. `serde_json::to_value(&nodeclaim)`).
    pub fn from_json(value: &Value) -> Result<Claim, serde_json::Error> {
        let meta: kube::api::ObjectMeta =
            serde_json::from_value(value.get("metadata").cloned().unwrap_or(Value::Null))?;
        let spec: SpecJson = serde_json::from_value(
            value.get("spec").cloned().unwrap_or(Value::Null),
        )
        .or_else(|e| {
            if value.get("spec").is_none() {
                Ok(SpecJson::default())
            } else {
                Err(e)
            }
        })?;
        let status: StatusJson = match value.get("status") {
            None | Some(Value::Null) => StatusJson::default(),
            Some(s) => serde_json::from_value(s.clone())?,
        };
        Ok(Claim {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            labels: meta.labels.unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
            requirements: spec
                .requirements
                .into_iter()
                .map(|r| Requirement {
                    key: r.key,
                    operator: r.operator,
                    values: r.values,
                })
                .collect(),
            requests: spec.resources.requests,
            node_class: spec.node_class_ref.name,
            node_class_group: spec.node_class_ref.group,
            node_class_kind: spec.node_class_ref.kind,
            taints: spec.taints,
            startup_taints: spec.startup_taints,
            provider_id: status.provider_id.filter(|p| !p.is_empty()),
            node_name: status.node_name.filter(|p| !p.is_empty()),
            conditions: status.conditions,
        })
    }

    /// The condition of `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of `type_` is True.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }

    /// The view registration and initialization work on.
    pub fn view(&self) -> ClaimView {
        ClaimView {
            name: self.name.clone(),
            uid: self.uid.clone(),
            provider_id: self.provider_id.clone(),
            labels: self.labels.clone(),
            annotations: self
                .annotations
                .iter()
                .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints: self.taints.clone(),
            startup_taints: self.startup_taints.clone(),
            extended_resources: self
                .requests
                .keys()
                .filter(|k| k.contains('/'))
                .cloned()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_karpenter_nodeclaim_json() {
        let v = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-x7k2p", "uid": "u1",
                         "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io", "kind": "ClusterAPINodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a", "b"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "Exists"}
                ],
                "resources": {"requests": {"cpu": "1500m", "nvidia.com/gpu": "1"}},
                "startupTaints": [{"key": "agent", "effect": "NoSchedule"}]
            },
            "status": {"providerID": "test://ns/x", "conditions": [
                {"type": "Launched", "status": "True", "reason": "Launched", "message": "",
                 "lastTransitionTime": "2026-11-22T10:00:00Z"}
            ]}
        });
        let c = Claim::from_json(&v).expect("reads");
        assert_eq!(c.name, "default-x7k2p");
        assert_eq!(c.node_class, "default");
        assert_eq!(c.requirements.len(), 2);
        assert_eq!(c.requirements[0].values, ["a", "b"]);
        assert!(c.requirements[1].values.is_empty());
        assert_eq!(c.requests["cpu"], "1500m");
        assert_eq!(c.startup_taints[0].key, "agent");
        assert_eq!(c.provider_id.as_deref(), Some("test://ns/x"));
        assert!(c.is_true("Launched") && !c.is_true("Registered"));
        assert_eq!(c.view().extended_resources, ["nvidia.com/gpu"]);
    }
}
