//! Cluster API Machines as the operator writes and reads them (`cluster.x-k8s.io/v1beta2`).
//! Machines are handled as JSON objects whose field names are CAPI's own, so nothing a newer
//! CAPI adds is lost on a round trip; this module is the one place that knows the paths.

use std::collections::BTreeMap;

use clusterapi_api::Machine;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// `cluster.x-k8s.io/v1beta2` Machine.
pub fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            api::consts::groups::CLUSTER_API,
            api::consts::groups::CLUSTER_API_VERSION,
            "Machine",
        ),
        "machines",
    )
}

/// A `{apiGroup, kind, name}` reference (CAPI v1beta2 ContractVersionedObjectReference).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

impl ObjectRef {
    fn to_json(&self) -> Value {
        json!({"apiGroup": self.api_group, "kind": self.kind, "name": self.name})
    }
}

/// Where the bootstrap data comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    ConfigRef(ObjectRef),
    DataSecretName(String),
}

/// Everything that goes into a Machine we create for a NodeClaim.
#[derive(Clone, Debug, Default)]
pub struct MachineParams {
    pub name: String,
    pub namespace: String,
    pub cluster_name: String,
    /// With the "v" prefix (no defaulting webhook adds it).
    pub version: Option<String>,
    pub failure_domain: Option<String>,
    pub bootstrap: Option<Bootstrap>,
    pub infrastructure: Option<ObjectRef>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub node_drain_timeout_seconds: Option<i64>,
    pub node_volume_detach_timeout_seconds: Option<i64>,
    pub node_deletion_timeout_seconds: Option<i64>,
}

/// Normalises a Kubernetes version to CAPI's form (`1.36.3` → `v1.36.3`).
pub(crate) fn with_v_prefix(version: &str) -> String {
    if version.starts_with('v') {
        version.to_string()
    } else {
        format!("v{version}")
    }
}

/// The Machine object: no ownerReferences (an orphan), no MachineSet labels.
pub(crate) fn build_machine(p: &MachineParams) -> Result<DynamicObject, serde_json::Error> {
    let mut spec = serde_json::Map::new();
    spec.insert("clusterName".into(), json!(p.cluster_name));
    if let Some(v) = &p.version {
        spec.insert("version".into(), json!(with_v_prefix(v)));
    }
    if let Some(fd) = &p.failure_domain {
        spec.insert("failureDomain".into(), json!(fd));
    }
    match &p.bootstrap {
        Some(Bootstrap::ConfigRef(r)) => {
            spec.insert("bootstrap".into(), json!({"configRef": r.to_json()}));
        }
        Some(Bootstrap::DataSecretName(s)) => {
            spec.insert("bootstrap".into(), json!({"dataSecretName": s}));
        }
        None => {}
    }
    if let Some(r) = &p.infrastructure {
        spec.insert("infrastructureRef".into(), r.to_json());
    }
    let mut deletion = serde_json::Map::new();
    for (key, value) in [
        ("nodeDrainTimeoutSeconds", p.node_drain_timeout_seconds),
        (
            "nodeVolumeDetachTimeoutSeconds",
            p.node_volume_detach_timeout_seconds,
        ),
        // CAPI's webhook defaults this to 10; without webhooks we set it ourselves.
        (
            "nodeDeletionTimeoutSeconds",
            p.node_deletion_timeout_seconds.or(Some(10)),
        ),
    ] {
        if let Some(v) = value {
            deletion.insert(key.into(), json!(v));
        }
    }
    spec.insert("deletion".into(), Value::Object(deletion));
    let mut labels = p.labels.clone();
    labels.insert(
        api::consts::labels::CLUSTER_NAME.into(),
        p.cluster_name.clone(),
    );
    for forbidden in [
        api::consts::labels::SET_NAME,
        api::consts::labels::DEPLOYMENT_NAME,
    ] {
        labels.remove(forbidden);
    }
    serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", api::consts::groups::CLUSTER_API, api::consts::groups::CLUSTER_API_VERSION),
        "kind": "Machine",
        "metadata": {
            "name": p.name,
            "namespace": p.namespace,
            "labels": labels,
            "annotations": p.annotations,
        },
        "spec": spec,
    }))
}

/// `spec.providerID`, when set.
pub fn provider_id(m: &Machine) -> Option<&str> {
    m.spec.provider_id.as_deref().filter(|s| !s.is_empty())
}

/// [`provider_id`], the Machines cache's index key: a Node that joined before its
/// NodeClaim's providerID was written finds its claim through its Machine.
pub(crate) fn provider_id_key(m: &Machine) -> Option<String> {
    provider_id(m).map(str::to_owned)
}

/// `status.nodeRef.name`, when set.
pub fn node_name(m: &Machine) -> Option<&str> {
    m.node_name().filter(|s| !s.is_empty())
}

/// `status.phase`, when set.
pub fn phase(m: &Machine) -> Option<&str> {
    m.status
        .as_ref()?
        .phase
        .as_deref()
        .filter(|s| !s.is_empty())
}

/// A condition's (status, reason, message).
pub fn condition<'a>(m: &'a Machine, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let c = api::conditions::get(&m.status.as_ref()?.conditions, type_)?;
    Some((c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// Why the Machine's infrastructure failed, if it did: phase Failed (with the v1beta1
/// failure message), or `InfrastructureReady=False` with a failure reason.
pub(crate) fn infrastructure_failure(m: &Machine) -> Option<String> {
    if phase(m) == Some("Failed") {
        let message = m
            .status
            .as_ref()
            .and_then(|s| s.deprecated.as_ref())
            .and_then(|d| d.v1beta1.as_ref())
            .and_then(|v| v.failure_message.as_deref())
            .filter(|s| !s.is_empty());
        return Some(message.unwrap_or("Machine phase Failed").to_string());
    }
    match condition(m, "InfrastructureReady") {
        Some(("False", reason, message)) if reason.contains("Fail") || reason.contains("Error") => {
            Some(format!("{reason}: {message}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphan_machine_shape() {
        let m = build_machine(&MachineParams {
            name: "default-abc".into(),
            namespace: "prod".into(),
            cluster_name: "c1".into(),
            version: Some("1.36.3".into()),
            failure_domain: Some("zone-a".into()),
            bootstrap: Some(Bootstrap::DataSecretName("boot".into())),
            infrastructure: Some(ObjectRef {
                api_group: "infrastructure.cluster.x-k8s.io".into(),
                kind: "DockerMachine".into(),
                name: "default-abc".into(),
            }),
            labels: BTreeMap::from([
                ("karpenter.sh/nodepool".into(), "default".into()),
                (
                    "cluster.x-k8s.io/set-name".into(),
                    "must-not-be-copied".into(),
                ),
            ]),
            ..MachineParams::default()
        })
        .expect("builds");
        assert_eq!(m.data["spec"]["clusterName"], "c1");
        assert_eq!(m.data["spec"]["version"], "v1.36.3");
        assert_eq!(m.data["spec"]["failureDomain"], "zone-a");
        assert_eq!(m.data["spec"]["bootstrap"]["dataSecretName"], "boot");
        assert_eq!(m.data["spec"]["infrastructureRef"]["kind"], "DockerMachine");
        assert_eq!(m.data["spec"]["deletion"]["nodeDeletionTimeoutSeconds"], 10);
        let labels = m.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels["cluster.x-k8s.io/cluster-name"], "c1");
        assert!(!labels.contains_key("cluster.x-k8s.io/set-name"));
        assert!(m.metadata.owner_references.is_none());
    }

    #[test]
    fn reads_status() {
        let m: Machine = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m"},
            "spec": {"clusterName": "c", "providerID": "test://ns/m",
                     "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "m"}},
            "status": {"phase": "Running", "nodeRef": {"name": "n1"},
                "conditions": [{"type": "InfrastructureReady", "status": "False",
                                "reason": "ProvisioningFailed", "message": "no capacity",
                                "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
        .expect("fixture");
        assert_eq!(provider_id(&m), Some("test://ns/m"));
        assert_eq!(node_name(&m), Some("n1"));
        assert_eq!(phase(&m), Some("Running"));
        assert_eq!(
            infrastructure_failure(&m).as_deref(),
            Some("ProvisioningFailed: no capacity")
        );
        let failed: Machine = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m"},
            "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "m"}},
            "status": {"phase": "Failed", "deprecated": {"v1beta1": {"failureMessage": "quota exceeded"}}}
        }))
        .expect("fixture");
        assert_eq!(
            infrastructure_failure(&failed).as_deref(),
            Some("quota exceeded")
        );
    }

    #[test]
    fn a_machine_not_node_healthy_is_the_providers_repair_signal() {
        let machine: clusterapi_api::Machine = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": {"name": "m"},
            "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "m"}},
            "status": {"conditions": [{"type": "NodeHealthy", "status": "False",
                "reason": "NodeConditionsFailed", "message": "",
                "lastTransitionTime": "2026-11-22T09:00:00Z"}]}
        }))
        .expect("fixture");
        let u = crate::instances::machine_unhealthy(&machine).expect("unhealthy");
        assert_eq!(u.condition, "NodeHealthy");
        assert_eq!(
            u.since,
            "2026-11-22T09:00:00Z"
                .parse::<k8s_openapi::jiff::Timestamp>()
                .expect("time")
        );
        let mut healthy = machine.clone();
        if let Some(s) = healthy.status.as_mut() {
            s.conditions.clear();
        }
        assert_eq!(crate::instances::machine_unhealthy(&healthy), None);
    }
}
