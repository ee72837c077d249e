//! A ClusterAPINodeClass as the launch reads it (from the object's JSON; field names are the
//! `karpenter.cluster.x-k8s.io/v1alpha1` API's).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Deserialize;
use serde_json::Value;

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRef {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRefJson {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapJson {
    #[serde(default)]
    pub config_template_ref: Option<TemplateRefJson>,
    #[serde(default)]
    pub data_secret_name: Option<String>,
    /// Inject `karpenter.sh/unregistered:NoExecute` into KubeadmConfig join taints
    /// (default true).
    #[serde(default)]
    pub inject_unregistered_taint: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MachineJson {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub node_drain_timeout: Option<String>,
    #[serde(default)]
    pub node_volume_detach_timeout: Option<String>,
    #[serde(default)]
    pub node_deletion_timeout: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecJson {
    #[serde(default)]
    cluster_ref: ClusterRef,
    #[serde(default)]
    bootstrap: BootstrapJson,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    machine: MachineJson,
    #[serde(default)]
    launch_timeout: Option<String>,
    #[serde(default)]
    registration_timeout: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct StatusJson {
    #[serde(default)]
    conditions: Vec<Condition>,
}

/// Defaults of the API (`launchTimeout` 10m, `registrationTimeout` 15m).
pub const DEFAULT_LAUNCH_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_REGISTRATION_TIMEOUT: Duration = Duration::from_secs(900);

/// What launch and liveness need of a NodeClass.
#[derive(Clone, Debug, Default)]
pub struct NodeClass {
    pub name: String,
    pub generation: i64,
    pub cluster: ClusterRef,
    pub bootstrap: BootstrapJson,
    pub version: Option<String>,
    pub machine: MachineJson,
    pub launch_timeout: Duration,
    pub registration_timeout: Duration,
    pub conditions: Vec<Condition>,
}

impl NodeClass {
    pub fn from_json(value: &Value) -> Result<NodeClass, serde_json::Error> {
        let meta: kube::api::ObjectMeta =
            serde_json::from_value(value.get("metadata").cloned().unwrap_or(Value::Null))?;
        let spec: SpecJson = match value.get("spec") {
            None | Some(Value::Null) => SpecJson::default(),
            Some(s) => serde_json::from_value(s.clone())?,
        };
        let status: StatusJson = match value.get("status") {
            None | Some(Value::Null) => StatusJson::default(),
            Some(s) => serde_json::from_value(s.clone())?,
        };
        Ok(NodeClass {
            name: meta.name.unwrap_or_default(),
            generation: meta.generation.unwrap_or_default(),
            cluster: spec.cluster_ref,
            bootstrap: spec.bootstrap,
            version: spec.version,
            machine: spec.machine,
            launch_timeout: spec
                .launch_timeout
                .as_deref()
                .and_then(parse_duration)
                .unwrap_or(DEFAULT_LAUNCH_TIMEOUT),
            registration_timeout: spec
                .registration_timeout
                .as_deref()
                .and_then(parse_duration)
                .unwrap_or(DEFAULT_REGISTRATION_TIMEOUT),
            conditions: status.conditions,
        })
    }

    /// Whether the status controller has written a `Ready` condition for this generation.
    /// The launch view of a typed ClusterAPINodeClass.
    pub fn from_typed(nc: &api::ClusterAPINodeClass) -> NodeClass {
        let spec = &nc.spec;
        let machine = spec.machine.clone().unwrap_or_default();
        NodeClass {
            name: nc.metadata.name.clone().unwrap_or_default(),
            generation: nc.metadata.generation.unwrap_or_default(),
            cluster: ClusterRef {
                namespace: spec.cluster_ref.namespace.clone(),
                name: spec.cluster_ref.name.clone(),
            },
            bootstrap: BootstrapJson {
                config_template_ref: spec.bootstrap.config_template_ref.as_ref().map(|r| {
                    TemplateRefJson {
                        api_group: r.api_group.clone(),
                        kind: r.kind.clone(),
                        name: r.name.clone(),
                    }
                }),
                data_secret_name: spec.bootstrap.data_secret_name.clone(),
                inject_unregistered_taint: spec.bootstrap.inject_unregistered_taint,
            },
            version: spec.version.clone(),
            machine: MachineJson {
                labels: machine.labels,
                annotations: machine.annotations,
                node_drain_timeout: machine.node_drain_timeout,
                node_volume_detach_timeout: machine.node_volume_detach_timeout,
                node_deletion_timeout: machine.node_deletion_timeout,
            },
            launch_timeout: parse_duration(&spec.launch_timeout).unwrap_or(DEFAULT_LAUNCH_TIMEOUT),
            registration_timeout: parse_duration(&spec.registration_timeout)
                .unwrap_or(DEFAULT_REGISTRATION_TIMEOUT),
            conditions: nc
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
        }
    }

    pub fn readiness_reported(&self) -> bool {
        self.conditions.iter().any(|c| {
            c.type_ == "Ready" && c.observed_generation.is_none_or(|g| g >= self.generation)
        })
    }

    /// `Ready` condition: (is ready, message when not).
    pub fn readiness(&self) -> (bool, String) {
        match self.conditions.iter().find(|c| c.type_ == "Ready") {
            Some(c) if c.status == "True" => (true, String::new()),
            Some(c) => (false, format!("{}: {}", c.reason, c.message)),
            None => (false, "Ready condition not reported yet".into()),
        }
    }
}

pub use api::duration::parse_duration;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_nodeclass_json() {
        let nc = NodeClass::from_json(&json!({
            "metadata": {"name": "default", "generation": 3},
            "spec": {
                "clusterRef": {"namespace": "prod", "name": "c1"},
                "bootstrap": {"configTemplateRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                              "kind": "KubeadmConfigTemplate", "name": "workers"}},
                "machine": {"labels": {"team": "a"}, "nodeDrainTimeout": "5m"},
                "launchTimeout": "2m"
            },
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ClusterNotFound",
                "message": "Cluster prod/c1 not found", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
        .expect("reads");
        assert_eq!(nc.cluster.name, "c1");
        assert_eq!(
            nc.bootstrap
                .config_template_ref
                .as_ref()
                .map(|r| r.kind.as_str()),
            Some("KubeadmConfigTemplate")
        );
        assert_eq!(nc.launch_timeout, Duration::from_secs(120));
        assert_eq!(nc.registration_timeout, DEFAULT_REGISTRATION_TIMEOUT);
        assert_eq!(
            nc.readiness(),
            (false, "ClusterNotFound: Cluster prod/c1 not found".into())
        );
        assert_eq!(nc.machine.labels["team"], "a");
    }
}
