//! What launch and liveness read of a ClusterAPINodeClass: a view over the typed object
//! (`clusterapi_api::ClusterAPINodeClass`, the one model of the API) with the API's defaults applied.

use std::time::Duration;

use api::duration::parse_duration;
use clusterapi_api::nodeclass::{Bootstrap, ClusterReference, MachineSettings};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Defaults of the API (`launchTimeout` 10m, `registrationTimeout` 15m).
pub(crate) const DEFAULT_LAUNCH_TIMEOUT: Duration = cloudprovider::Timeouts::DEFAULT.launch;
pub(crate) const DEFAULT_REGISTRATION_TIMEOUT: Duration =
    cloudprovider::Timeouts::DEFAULT.registration;

/// What launch and liveness need of a NodeClass.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeClass {
    pub name: String,
    pub generation: i64,
    pub cluster: ClusterReference,
    pub bootstrap: Bootstrap,
    pub version: Option<String>,
    /// Cluster API's `machineset.cluster.x-k8s.io/skip-preflight-checks` annotation.
    pub skip_preflight_checks: Option<String>,
    pub machine: MachineSettings,
    pub launch_timeout: Duration,
    pub registration_timeout: Duration,
    pub conditions: Vec<Condition>,
}

impl NodeClass {
    /// The launch view of a typed ClusterAPINodeClass.
    pub(crate) fn from_typed(nc: &clusterapi_api::ClusterAPINodeClass) -> NodeClass {
        let spec = &nc.spec;
        NodeClass {
            name: nc.metadata.name.clone().unwrap_or_default(),
            generation: nc.metadata.generation.unwrap_or_default(),
            cluster: spec.cluster_ref.clone(),
            bootstrap: spec.bootstrap.clone(),
            version: spec.version.clone(),
            skip_preflight_checks: nc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::preflight::SKIP_ANNOTATION))
                .cloned(),
            machine: spec.machine.clone().unwrap_or_default(),
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

    /// Whether the status controller has written a `Ready` condition for this generation.
    pub(crate) fn readiness_reported(&self) -> bool {
        self.conditions.iter().any(|c| {
            c.type_ == "Ready" && c.observed_generation.is_none_or(|g| g >= self.generation)
        })
    }

    /// `Ready` condition: (is ready, message when not).
    pub(crate) fn readiness(&self) -> (bool, String) {
        match self.conditions.iter().find(|c| c.type_ == "Ready") {
            Some(c) if c.status == "True" => (true, String::new()),
            Some(c) => (false, format!("{}: {}", c.reason, c.message)),
            None => (false, "Ready condition not reported yet".into()),
        }
    }
}

/// NodePool status's view of the ClusterAPINodeClasses in `store` (another kind: not found).
pub(crate) fn readiness_lookup(
    store: kube::runtime::reflector::Store<clusterapi_api::ClusterAPINodeClass>,
) -> karpenter_core::nodepool_status::NodeClassLookup {
    std::sync::Arc::new(move |group: &str, kind: &str, name: &str| {
        if group != api::consts::groups::NODECLASS || kind != api::consts::groups::NODECLASS_KIND {
            return None;
        }
        let nc = store.get(&kube::runtime::reflector::ObjectRef::new(name))?;
        Some(karpenter_core::nodepool_status::NodeClassReadiness {
            generation: nc.metadata.generation,
            conditions: nc
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_typed_nodeclass_with_the_api_defaults() {
        let typed: clusterapi_api::ClusterAPINodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
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
        .expect("a valid ClusterAPINodeClass");
        let nc = NodeClass::from_typed(&typed);
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
        assert!(nc.readiness_reported());
        assert_eq!(
            nc.readiness(),
            (false, "ClusterNotFound: Cluster prod/c1 not found".into())
        );
        assert_eq!(nc.machine.labels["team"], "a");
        assert_eq!(nc.machine.node_drain_timeout.as_deref(), Some("5m"));
    }
}
