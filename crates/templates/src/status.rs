//! What the NodeClass status shows about its catalog: the `instanceTypes` summary and the
//! `TemplatesReady` condition. Pure; the NodeClass status controller writes it.

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
}
