//! The NodeClass status, computed purely: the `status.instanceTypes` summary ([`summarize`])
//! and the conditions `ClusterReady`, `TemplatesReady` and `BootstrapReady` with precise
//! reasons and messages. The NodeClass status controller gathers the inputs (Cluster,
//! bootstrap source, catalog from [`crate::watch::TemplateIndex`]), sets `Ready` from these
//! three and writes the result.

use api::consts::labels as label;
use api::consts::{conditions as types, reasons};
use clusterapi_api::Cluster;
use clusterapi_api::nodeclass::{DriverDevices, InstanceTypeSummary};

use crate::error::SettingsError;
use crate::model::{Catalog, InstanceType};
use crate::quantity::{format_bytes, format_milli};

fn sorted_unique(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

/// One line of the NodeClass `status.instanceTypes`.
pub fn summary(it: &InstanceType) -> InstanceTypeSummary {
    InstanceTypeSummary {
        name: it.name.clone(),
        cpu: format_milli(it.capacity.cpu_milli()),
        memory: format_bytes(it.capacity.memory_bytes()),
        pods: it.capacity.pods(),
        gpus: it.capacity.gpu_count(),
        arch: it.labels.get(label::ARCH).cloned().unwrap_or_default(),
        os: it.labels.get(label::OS).cloned().unwrap_or_default(),
        zones: sorted_unique(it.offerings.iter().filter_map(|o| o.zone.clone()).collect()),
        capacity_types: sorted_unique(
            it.offerings
                .iter()
                .map(|o| o.capacity_type.clone())
                .collect(),
        ),
        price: it
            .cheapest()
            .map(|o| format!("{:.4}", o.price))
            .unwrap_or_default(),
        max_price: it
            .offerings
            .iter()
            .map(|o| o.price)
            .reduce(f64::max)
            .map(|p| format!("{p:.4}"))
            .unwrap_or_default(),
        templates: crate::model::templates_of(it)
            .into_iter()
            .map(|t| t.name)
            .collect(),
        devices: it
            .devices
            .iter()
            .flat_map(|d| &d.slices)
            .map(|s| DriverDevices {
                driver: s.driver.clone(),
                count: i64::try_from(s.devices.len()).unwrap_or(i64::MAX),
            })
            .collect(),
        device_source: it.devices.as_ref().map(|d| {
            match d.source {
                cloudprovider::DeviceSource::Learned => "Learned",
                cloudprovider::DeviceSource::Declared => "Declared",
            }
            .to_string()
        }),
    }
}

/// The instance-type summary of a catalog, in catalog order (cheapest first).
pub fn summarize(catalog: &Catalog) -> Vec<InstanceTypeSummary> {
    catalog.instance_types.iter().map(summary).collect()
}

/// A condition to set (type, status, reason, message); the controller adds times and
/// observedGeneration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionValue {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// `TemplatesReady` for a NodeClass: True while at least one instance type is available
/// (excluded templates are named in the message but do not block the good ones), False when
/// no template is selected, none is valid, or the kubelet settings are invalid.
/// How many excluded templates a condition message names (the rest are counted).
pub(crate) const NAMED_EXCLUDED: usize = 3;
/// At most this much of one excluded template's reason goes into a message.
const EXCLUDED_DETAIL: usize = 200;

/// The first [`NAMED_EXCLUDED`] of `excluded` in full (each reason cut at a whole-word
/// length), then how many more: a message never stops in the middle of a name.
pub(crate) fn name_first(excluded: &[String]) -> String {
    let mut parts: Vec<String> = excluded
        .iter()
        .take(NAMED_EXCLUDED)
        .map(|e| api::conditions::truncate(e, EXCLUDED_DETAIL))
        .collect();
    if excluded.len() > NAMED_EXCLUDED {
        parts.push(format!(
            "and {} more (`karpenter-capi instance-types` lists them all)",
            excluded.len() - NAMED_EXCLUDED
        ));
    }
    parts.join("; ")
}

pub fn templates_ready(catalog: &Result<std::sync::Arc<Catalog>, SettingsError>) -> ConditionValue {
    let cond = |status, reason, message: String| ConditionValue {
        type_: types::TEMPLATES_READY,
        status,
        reason,
        message,
    };
    let catalog = match catalog {
        Err(e) => {
            return cond(
                "False",
                reasons::INVALID_KUBELET_CONFIGURATION,
                format!("spec.kubelet is invalid: {e}"),
            );
        }
        Ok(c) => c,
    };
    // Every selected template either serves an instance type or is excluded.
    let selected_templates = catalog
        .instance_types
        .iter()
        .map(|it| crate::model::templates_of(it).len())
        .sum::<usize>()
        + catalog.excluded.len();
    if selected_templates == 0 {
        return cond(
            "False",
            reasons::NO_TEMPLATES,
            "no InfrastructureMachineTemplate in the Cluster's namespace matches spec.machineTemplateSelector".into(),
        );
    }
    let excluded: Vec<String> = catalog
        .excluded
        .iter()
        .map(|e| format!("{}: {}", e.template, e.error.detail()))
        .collect();
    let n = catalog.instance_types.len();
    if n == 0 {
        return cond(
            "False",
            reasons::NO_VALID_TEMPLATES,
            format!(
                "all {} selected templates are excluded: {}",
                excluded.len(),
                name_first(&excluded)
            ),
        );
    }
    let mut message = format!("{n} instance types from {selected_templates} templates");
    if !catalog.defaults_applied.is_empty() {
        let mut fields: Vec<String> = catalog
            .defaults_applied
            .iter()
            .map(|d| format!("{}={}", d.field, d.value))
            .collect();
        fields.sort();
        fields.dedup();
        message.push_str(&format!("; defaults applied: {}", fields.join(", ")));
    }
    if excluded.is_empty() {
        cond("True", reasons::TEMPLATES_READY, message)
    } else {
        cond(
            "True",
            reasons::TEMPLATES_EXCLUDED,
            format!(
                "{message}; {} excluded: {}",
                excluded.len(),
                name_first(&excluded)
            ),
        )
    }
}

/// Where a NodeClass's bootstrap data comes from, as found in the Cluster's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapState {
    /// `configTemplateRef` names an object that exists.
    TemplateFound { kind: String, name: String },
    /// `configTemplateRef` names an object that does not exist (or whose kind is not served).
    TemplateMissing { kind: String, name: String },
    /// `dataSecretName` names a Secret that exists.
    SecretFound { name: String },
    /// `dataSecretName` names a Secret that does not exist.
    SecretMissing { name: String },
    /// Neither or both sources set.
    Invalid(String),
}

/// `BootstrapReady`.
pub fn bootstrap_ready(state: &BootstrapState, namespace: &str) -> ConditionValue {
    let cond = |status, reason, message: String| ConditionValue {
        type_: types::BOOTSTRAP_READY,
        status,
        reason,
        message,
    };
    match state {
        BootstrapState::TemplateFound { kind, name } => cond(
            "True",
            reasons::BOOTSTRAP_READY,
            format!("{kind} {namespace}/{name} is cloned for each Machine"),
        ),
        BootstrapState::SecretFound { name } => cond(
            "True",
            reasons::BOOTSTRAP_READY,
            format!("Machines use bootstrap data Secret {namespace}/{name}"),
        ),
        BootstrapState::TemplateMissing { kind, name } => cond(
            "False",
            "BootstrapTemplateNotFound",
            format!("{kind} {namespace}/{name} (spec.bootstrap.configTemplateRef) not found"),
        ),
        BootstrapState::SecretMissing { name } => cond(
            "False",
            "BootstrapSecretNotFound",
            format!("Secret {namespace}/{name} (spec.bootstrap.dataSecretName) not found"),
        ),
        BootstrapState::Invalid(why) => cond("False", "InvalidBootstrap", why.clone()),
    }
}

/// `ClusterReady`: the Cluster exists, is not paused or deleting, its infrastructure is
/// provisioned and its control plane initialized (`status.initialization`, or the
/// `ControlPlaneInitialized` condition), so Machines can join. `None` when not found.
pub fn cluster_ready(cluster: Option<&Cluster>, namespace: &str, name: &str) -> ConditionValue {
    let cond = |status, reason, message: String| ConditionValue {
        type_: types::CLUSTER_READY,
        status,
        reason,
        message,
    };
    let Some(c) = cluster else {
        return cond(
            "False",
            reasons::CLUSTER_NOT_FOUND,
            format!("Cluster {namespace}/{name} (spec.clusterRef) not found"),
        );
    };
    if c.metadata.deletion_timestamp.is_some() {
        return cond(
            "False",
            "ClusterDeleting",
            format!("Cluster {namespace}/{name} is being deleted"),
        );
    }
    if c.spec.paused == Some(true) {
        return cond(
            "False",
            "ClusterPaused",
            format!("Cluster {namespace}/{name} is paused"),
        );
    }
    let status = c.status.as_ref();
    let init = status.and_then(|s| s.initialization.as_ref());
    let infra = init.is_some_and(|i| i.infrastructure_provisioned == Some(true));
    if !infra {
        return cond(
            "False",
            "InfrastructureNotProvisioned",
            format!("Cluster {namespace}/{name}: infrastructure not provisioned yet"),
        );
    }
    let cp = init.is_some_and(|i| i.control_plane_initialized == Some(true))
        || status.is_some_and(|s| {
            api::conditions::is_true(&s.conditions, types::CLUSTER_CONTROL_PLANE_INITIALIZED)
        });
    if !cp {
        return cond(
            "False",
            "ControlPlaneNotInitialized",
            format!("Cluster {namespace}/{name}: control plane not initialized yet"),
        );
    }
    cond(
        "True",
        reasons::CLUSTER_READY,
        format!("Cluster {namespace}/{name} is provisioned and its control plane initialized"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CatalogSettings, build_catalog};
    use kube::api::DynamicObject;
    use serde_json::json;

    fn tpl(name: &str, cpu: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "DockerMachineTemplate",
            "metadata": {"name": name, "namespace": "ns", "annotations": {
                "capacity.cluster-autoscaler.kubernetes.io/cpu": cpu,
                "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"}},
        }))
        .expect("template")
    }

    #[test]
    fn conditions() {
        let s = CatalogSettings {
            failure_domains: vec!["fd-1".into()],
            ..Default::default()
        };
        let good = build_catalog(&[tpl("a", "2")], &s).map(std::sync::Arc::new);
        let c = templates_ready(&good);
        assert_eq!((c.status, c.reason), ("True", "TemplatesReady"));
        assert!(
            c.message.starts_with(
                "1 instance types from 1 templates; defaults applied: kubernetes.io/arch=amd64"
            ),
            "{}",
            c.message
        );
        let summary = summarize(good.as_ref().expect("ok"));
        assert_eq!(summary[0].cpu, "2");
        assert_eq!(summary[0].memory, "4Gi");
        assert_eq!(summary[0].zones, ["fd-1"]);
        assert_eq!(summary[0].price, "0.0760");
        assert_eq!(summary[0].max_price, "0.0760");
        // The node facts of each instance type: arch and os (defaulted here, as the template
        // reports no status.nodeInfo), pods (the kubelet default), no GPUs.
        assert_eq!(summary[0].arch, "amd64");
        assert_eq!(summary[0].os, "linux");
        assert_eq!(summary[0].pods, 110);
        assert_eq!(summary[0].gpus, 0);
        assert_eq!(summary[0].templates, ["a"]);

        let mixed = build_catalog(&[tpl("a", "2"), tpl("b", "two")], &s).map(std::sync::Arc::new);
        let c = templates_ready(&mixed);
        assert_eq!((c.status, c.reason), ("True", "TemplatesExcluded"));
        assert!(c.message.contains("1 excluded: DockerMachineTemplate ns/b: metadata.annotations[capacity.cluster-autoscaler.kubernetes.io/cpu]"), "{}", c.message);

        let bad = build_catalog(&[tpl("b", "two")], &s).map(std::sync::Arc::new);
        let c = templates_ready(&bad);
        assert_eq!((c.status, c.reason), ("False", "NoValidTemplates"));

        let c = templates_ready(&build_catalog(&[], &s).map(std::sync::Arc::new));
        assert_eq!((c.status, c.reason), ("False", "NoTemplates"));

        let invalid = CatalogSettings {
            max_pods: Some(-3),
            ..Default::default()
        };
        let c =
            templates_ready(&build_catalog(&[tpl("a", "2")], &invalid).map(std::sync::Arc::new));
        assert_eq!(
            (c.status, c.reason),
            ("False", "InvalidKubeletConfiguration")
        );
        assert!(c.message.contains("spec.kubelet.maxPods"));
    }

    fn cluster(v: serde_json::Value) -> Cluster {
        let mut obj = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns"}, "spec": {}});
        if let (Some(o), Some(extra)) = (obj.as_object_mut(), v.as_object()) {
            for (k, x) in extra {
                match (o.get_mut(k), x) {
                    (Some(serde_json::Value::Object(m)), serde_json::Value::Object(e)) => {
                        m.extend(e.clone())
                    }
                    _ => {
                        o.insert(k.clone(), x.clone());
                    }
                }
            }
        }
        serde_json::from_value(obj).expect("Cluster")
    }

    #[test]
    fn cluster_and_bootstrap() {
        let c = cluster_ready(None, "ns", "c1");
        assert_eq!((c.status, c.reason), ("False", "ClusterNotFound"));
        assert_eq!(c.message, "Cluster ns/c1 (spec.clusterRef) not found");
        let v1beta2 = cluster(json!({"status": {"initialization": {
            "infrastructureProvisioned": true, "controlPlaneInitialized": true}}}));
        assert_eq!(cluster_ready(Some(&v1beta2), "ns", "c1").status, "True");
        let by_condition = cluster(json!({"status": {
            "initialization": {"infrastructureProvisioned": true},
            "conditions": [{"type": "ControlPlaneInitialized", "status": "True", "reason": "r",
                            "message": "", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}));
        assert_eq!(
            cluster_ready(Some(&by_condition), "ns", "c1").status,
            "True"
        );
        let no_cp =
            cluster(json!({"status": {"initialization": {"infrastructureProvisioned": true}}}));
        assert_eq!(
            cluster_ready(Some(&no_cp), "ns", "c1").reason,
            "ControlPlaneNotInitialized"
        );
        assert_eq!(
            cluster_ready(Some(&cluster(json!({}))), "ns", "c1").reason,
            "InfrastructureNotProvisioned"
        );
        let paused = cluster(
            json!({"spec": {"paused": true}, "status": {"initialization": {
            "infrastructureProvisioned": true, "controlPlaneInitialized": true}}}),
        );
        assert_eq!(
            cluster_ready(Some(&paused), "ns", "c1").reason,
            "ClusterPaused"
        );
        let deleting = cluster(json!({"metadata": {"deletionTimestamp": "2026-11-22T10:00:00Z"}}));
        assert_eq!(
            cluster_ready(Some(&deleting), "ns", "c1").reason,
            "ClusterDeleting"
        );

        let b = bootstrap_ready(
            &BootstrapState::TemplateMissing {
                kind: "KubeadmConfigTemplate".into(),
                name: "workers".into(),
            },
            "ns",
        );
        assert_eq!((b.status, b.reason), ("False", "BootstrapTemplateNotFound"));
        assert_eq!(
            b.message,
            "KubeadmConfigTemplate ns/workers (spec.bootstrap.configTemplateRef) not found"
        );
        let ok_b = bootstrap_ready(
            &BootstrapState::SecretFound {
                name: "data".into(),
            },
            "ns",
        );
        assert_eq!(ok_b.status, "True");
    }
}
