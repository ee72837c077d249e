//! The NodeClass status, computed purely: the `instanceTypes` summary and the conditions
//! `ClusterReady`, `TemplatesReady`, `BootstrapReady` and `Ready` with precise reasons and
//! messages. The NodeClass status controller gathers the inputs (Cluster, bootstrap source,
//! catalog from [`crate::watch::TemplateIndex`]) and writes the result.

use serde::Serialize;

use crate::error::SettingsError;
use crate::model::{Catalog, InstanceType};
use crate::names::{LABEL_ARCH, LABEL_OS};
use crate::quantity::{format_bytes, format_milli};

/// Longest condition message we write (the API allows 32768; keep status readable).
pub const MAX_MESSAGE: usize = 1024;

/// One line of the NodeClass `status.instanceTypes`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeSummary {
    pub name: String,
    pub cpu: String,
    pub memory: String,
    pub pods: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub gpus: i64,
    pub arch: String,
    pub os: String,
    /// Zones of the offerings (empty when zone-less).
    pub zones: Vec<String>,
    pub capacity_types: Vec<String>,
    /// Cheapest offering, per hour, as a decimal string.
    pub price: String,
    /// Template names.
    pub templates: Vec<String>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn sorted_unique(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

impl From<&InstanceType> for InstanceTypeSummary {
    fn from(it: &InstanceType) -> Self {
        Self {
            name: it.name.clone(),
            cpu: format_milli(it.capacity.cpu_milli()),
            memory: format_bytes(it.capacity.memory_bytes()),
            pods: it.capacity.pods(),
            gpus: it.capacity.gpu_count(),
            arch: it.labels.get(LABEL_ARCH).cloned().unwrap_or_default(),
            os: it.labels.get(LABEL_OS).cloned().unwrap_or_default(),
            zones: sorted_unique(it.offerings.iter().filter_map(|o| o.zone.clone()).collect()),
            capacity_types: sorted_unique(
                it.offerings
                    .iter()
                    .map(|o| o.capacity_type.clone())
                    .collect(),
            ),
            price: it
                .cheapest()
                .map(|o| format!("{}", o.price))
                .unwrap_or_default(),
            templates: it.templates.iter().map(|t| t.name.clone()).collect(),
        }
    }
}

/// The instance-type summary of a catalog, in catalog order (cheapest first).
pub fn summarize(catalog: &Catalog) -> Vec<InstanceTypeSummary> {
    catalog.instance_types.iter().map(Into::into).collect()
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

fn truncate(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// `TemplatesReady` for a NodeClass: True while at least one instance type is available
/// (excluded templates are named in the message but do not block the good ones), False when
/// no template is selected, none is valid, or the kubelet settings are invalid.
pub fn templates_ready(
    catalog: &Result<Catalog, SettingsError>,
    selected_templates: usize,
) -> ConditionValue {
    let cond = |status, reason, message: String| ConditionValue {
        type_: "TemplatesReady",
        status,
        reason,
        message: truncate(message),
    };
    let catalog = match catalog {
        Err(e) => {
            return cond(
                "False",
                "InvalidKubeletConfiguration",
                format!("spec.kubelet is invalid: {e}"),
            );
        }
        Ok(c) => c,
    };
    if selected_templates == 0 {
        return cond(
            "False",
            "NoTemplates",
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
            "NoValidTemplates",
            format!(
                "all {} selected templates are excluded: {}",
                excluded.len(),
                excluded.join("; ")
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
        cond("True", "TemplatesReady", message)
    } else {
        cond(
            "True",
            "TemplatesExcluded",
            format!(
                "{message}; {} excluded: {}",
                excluded.len(),
                excluded.join("; ")
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
        type_: "BootstrapReady",
        status,
        reason,
        message: truncate(message),
    };
    match state {
        BootstrapState::TemplateFound { kind, name } => cond(
            "True",
            "BootstrapReady",
            format!("{kind} {namespace}/{name} is cloned for each Machine"),
        ),
        BootstrapState::SecretFound { name } => cond(
            "True",
            "BootstrapReady",
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

fn truthy(v: Option<&serde_json::Value>) -> bool {
    v.and_then(serde_json::Value::as_bool).unwrap_or(false)
}

fn condition_true(cluster: &serde_json::Value, type_: &str) -> bool {
    cluster
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(serde_json::Value::as_str) == Some(type_)
                    && c.get("status").and_then(serde_json::Value::as_str) == Some("True")
            })
        })
}

/// `ClusterReady`: the Cluster exists, is not paused or deleting, its infrastructure is
/// provisioned and its control plane initialized (v1beta2 `status.initialization`, or the
/// v1beta1 `status.infrastructureReady` / `ControlPlaneInitialized` fallbacks), so Machines
/// can join. `cluster` is the Cluster as JSON, `None` when not found.
pub fn cluster_ready(
    cluster: Option<&serde_json::Value>,
    namespace: &str,
    name: &str,
) -> ConditionValue {
    let cond = |status, reason, message: String| ConditionValue {
        type_: "ClusterReady",
        status,
        reason,
        message: truncate(message),
    };
    let Some(c) = cluster else {
        return cond(
            "False",
            "ClusterNotFound",
            format!("Cluster {namespace}/{name} (spec.clusterRef) not found"),
        );
    };
    if c.pointer("/metadata/deletionTimestamp").is_some() {
        return cond(
            "False",
            "ClusterDeleting",
            format!("Cluster {namespace}/{name} is being deleted"),
        );
    }
    if truthy(c.pointer("/spec/paused")) {
        return cond(
            "False",
            "ClusterPaused",
            format!("Cluster {namespace}/{name} is paused"),
        );
    }
    let infra = truthy(c.pointer("/status/initialization/infrastructureProvisioned"))
        || truthy(c.pointer("/status/infrastructureReady"));
    if !infra {
        return cond(
            "False",
            "InfrastructureNotProvisioned",
            format!("Cluster {namespace}/{name}: infrastructure not provisioned yet"),
        );
    }
    let cp = truthy(c.pointer("/status/initialization/controlPlaneInitialized"))
        || condition_true(c, "ControlPlaneInitialized")
        || truthy(c.pointer("/status/controlPlaneReady"));
    if !cp {
        return cond(
            "False",
            "ControlPlaneNotInitialized",
            format!("Cluster {namespace}/{name}: control plane not initialized yet"),
        );
    }
    cond(
        "True",
        "ClusterReady",
        format!("Cluster {namespace}/{name} is provisioned and its control plane initialized"),
    )
}

/// `Ready`: True when every other condition is True; otherwise False with the reason and
/// message of the first one that is not.
pub fn ready(conditions: &[ConditionValue]) -> ConditionValue {
    match conditions
        .iter()
        .find(|c| c.type_ != "Ready" && c.status != "True")
    {
        Some(c) => ConditionValue {
            type_: "Ready",
            status: "False",
            reason: c.reason,
            message: truncate(format!("{}: {}", c.type_, c.message)),
        },
        None => ConditionValue {
            type_: "Ready",
            status: "True",
            reason: "Ready",
            message: String::new(),
        },
    }
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
        let good = build_catalog(&[tpl("a", "2")], &s);
        let c = templates_ready(&good, 1);
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
        assert_eq!(summary[0].price, "0.076");

        let mixed = build_catalog(&[tpl("a", "2"), tpl("b", "two")], &s);
        let c = templates_ready(&mixed, 2);
        assert_eq!((c.status, c.reason), ("True", "TemplatesExcluded"));
        assert!(c.message.contains("1 excluded: DockerMachineTemplate ns/b: metadata.annotations[capacity.cluster-autoscaler.kubernetes.io/cpu]"), "{}", c.message);

        let bad = build_catalog(&[tpl("b", "two")], &s);
        let c = templates_ready(&bad, 1);
        assert_eq!((c.status, c.reason), ("False", "NoValidTemplates"));

        let c = templates_ready(&build_catalog(&[], &s), 0);
        assert_eq!((c.status, c.reason), ("False", "NoTemplates"));

        let invalid = CatalogSettings {
            max_pods: Some(-3),
            ..Default::default()
        };
        let c = templates_ready(&build_catalog(&[tpl("a", "2")], &invalid), 1);
        assert_eq!(
            (c.status, c.reason),
            ("False", "InvalidKubeletConfiguration")
        );
        assert!(c.message.contains("spec.kubelet.maxPods"));

        let many: Vec<DynamicObject> = (0..200).map(|i| tpl(&format!("bad-{i}"), "x")).collect();
        let c = templates_ready(&build_catalog(&many, &s), 200);
        assert!(c.message.len() <= MAX_MESSAGE && c.message.ends_with("..."));
    }

    #[test]
    fn cluster_bootstrap_and_ready() {
        let c = cluster_ready(None, "ns", "c1");
        assert_eq!((c.status, c.reason), ("False", "ClusterNotFound"));
        assert_eq!(c.message, "Cluster ns/c1 (spec.clusterRef) not found");
        let v1beta2 = json!({"status": {"initialization": {
            "infrastructureProvisioned": true, "controlPlaneInitialized": true}}});
        assert_eq!(cluster_ready(Some(&v1beta2), "ns", "c1").status, "True");
        let v1beta1 = json!({"status": {"infrastructureReady": true, "conditions": [
            {"type": "ControlPlaneInitialized", "status": "True"}]}});
        assert_eq!(cluster_ready(Some(&v1beta1), "ns", "c1").status, "True");
        let no_cp = json!({"status": {"initialization": {"infrastructureProvisioned": true}}});
        assert_eq!(
            cluster_ready(Some(&no_cp), "ns", "c1").reason,
            "ControlPlaneNotInitialized"
        );
        assert_eq!(
            cluster_ready(Some(&json!({})), "ns", "c1").reason,
            "InfrastructureNotProvisioned"
        );
        let paused = json!({"spec": {"paused": true}, "status": {"initialization": {
            "infrastructureProvisioned": true, "controlPlaneInitialized": true}}});
        assert_eq!(
            cluster_ready(Some(&paused), "ns", "c1").reason,
            "ClusterPaused"
        );
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-11-22T10:00:00Z"}});
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

        let s = CatalogSettings::default();
        let t = templates_ready(&build_catalog(&[tpl("a", "2")], &s), 1);
        let all = [
            cluster_ready(Some(&v1beta2), "ns", "c1"),
            t.clone(),
            ok_b.clone(),
        ];
        let r = ready(&all);
        assert_eq!((r.status, r.reason), ("True", "Ready"));
        let some = [cluster_ready(Some(&v1beta2), "ns", "c1"), t, b];
        let r = ready(&some);
        assert_eq!((r.status, r.reason), ("False", "BootstrapTemplateNotFound"));
        assert!(
            r.message
                .starts_with("BootstrapReady: KubeadmConfigTemplate ns/workers")
        );
    }
}
