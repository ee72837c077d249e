//! Which templates a NodeClass selects: those that carry the opt-in label
//! `node.cluster.x-k8s.io/karpenter-member`, live in its Cluster's namespace, match
//! `spec.machineTemplateSelector`, and whose kind is in `spec.machineTemplateKinds`
//! (`[{apiGroup, kind}]`, when set). Shared by the offline command and the watching index.

use std::collections::BTreeMap;

use api::consts::labels as label;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::DynamicObject;
use serde_json::Value;

/// A NodeClass's template selection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// Namespace of the Cluster; `None` selects every namespace.
    pub namespace: Option<String>,
    /// `spec.machineTemplateSelector`; `None` selects every template.
    pub selector: Option<LabelSelector>,
    /// `spec.machineTemplateKinds` as (apiGroup, kind); `None` allows every kind. An empty
    /// apiGroup matches any group.
    pub kinds: Option<Vec<(String, String)>>,
}

impl Selection {
    /// The selection of a (typed) ClusterAPINodeClass: namespace from `spec.clusterRef`
    /// (else the object's own), its selector and kinds.
    pub fn from_node_class(nc: &clusterapi_api::ClusterAPINodeClass) -> Self {
        let namespace = Some(nc.spec.cluster_ref.namespace.as_str())
            .filter(|n| !n.is_empty())
            .or(nc.metadata.namespace.as_deref())
            .map(str::to_string);
        let kinds = (!nc.spec.machine_template_kinds.is_empty()).then(|| {
            nc.spec
                .machine_template_kinds
                .iter()
                .map(|k| (k.api_group.clone(), k.kind.clone()))
                .collect()
        });
        Self {
            namespace,
            selector: nc.spec.machine_template_selector.clone(),
            kinds,
        }
    }

    /// Reads a ClusterAPINodeClass given as JSON: namespace from `spec.clusterRef.namespace`
    /// (else the object's own namespace), the selector, and the kinds (`{apiGroup, kind}`
    /// objects; plain strings are taken as kinds of any group).
    pub(crate) fn from_node_class_json(nc: &Value) -> Self {
        let namespace = nc
            .pointer("/spec/clusterRef/namespace")
            .and_then(Value::as_str)
            .or_else(|| nc.pointer("/metadata/namespace").and_then(Value::as_str))
            .map(str::to_string);
        let selector = nc
            .pointer("/spec/machineTemplateSelector")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let kinds = nc
            .pointer("/spec/machineTemplateKinds")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|k| match k {
                        Value::String(s) => Some((String::new(), s.clone())),
                        Value::Object(o) => {
                            let kind = o.get("kind").and_then(Value::as_str)?;
                            let group = o.get("apiGroup").and_then(Value::as_str).unwrap_or("");
                            Some((group.to_string(), kind.to_string()))
                        }
                        _ => None,
                    })
                    .collect()
            });
        Self {
            namespace,
            selector,
            kinds,
        }
    }

    /// Whether the NodeClass selects `template` (never one that is being deleted).
    pub fn matches(&self, template: &DynamicObject) -> bool {
        if !is_opted_in(template) || template.metadata.deletion_timestamp.is_some() {
            return false;
        }
        if let Some(ns) = &self.namespace
            && template.metadata.namespace.as_ref() != Some(ns)
        {
            return false;
        }
        if let Some(sel) = &self.selector {
            let empty = BTreeMap::new();
            if !selector_matches(sel, template.metadata.labels.as_ref().unwrap_or(&empty)) {
                return false;
            }
        }
        if let Some(kinds) = &self.kinds {
            let (api_version, kind) = template
                .types
                .as_ref()
                .map(|t| (t.api_version.as_str(), t.kind.as_str()))
                .unwrap_or(("", ""));
            let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            if !kinds
                .iter()
                .any(|(g, k)| k == kind && (g.is_empty() || g == group))
            {
                return false;
            }
        }
        true
    }
}

/// Whether a template carries the opt-in label `node.cluster.x-k8s.io/karpenter-member`.
pub(crate) fn is_opted_in(template: &DynamicObject) -> bool {
    template
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(label::KARPENTER_MEMBER))
}

pub use api::selector::selector_matches;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tpl(ns: &str, kind: &str, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": kind,
            "metadata": {"name": "t", "namespace": ns, "labels": labels},
        }))
        .expect("object")
    }

    #[test]
    fn selection() {
        let s = Selection::from_node_class_json(&json!({"spec": {
            "clusterRef": {"name": "c", "namespace": "a"},
            "machineTemplateSelector": {
                "matchLabels": {"pool": "gpu"},
                "matchExpressions": [
                    {"key": "tier", "operator": "NotIn", "values": ["test"]},
                    {"key": "opt-in", "operator": "Exists"}
                ]
            },
            "machineTemplateKinds": [
                {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "AWSMachineTemplate"},
                {"apiGroup": "example.com", "kind": "DockerMachineTemplate"},
                "AzureMachineTemplate"
            ]
        }}));
        assert_eq!(s.namespace.as_deref(), Some("a"));
        let ok =
            json!({"pool": "gpu", "opt-in": "", "node.cluster.x-k8s.io/karpenter-member": "true"});
        // Without the opt-in label nothing is selected.
        assert!(!s.matches(&tpl(
            "a",
            "AWSMachineTemplate",
            json!({"pool": "gpu", "opt-in": ""})
        )));
        assert!(s.matches(&tpl("a", "AWSMachineTemplate", ok.clone())));
        assert!(s.matches(&tpl("a", "AzureMachineTemplate", ok.clone())));
        assert!(!s.matches(&tpl("b", "AWSMachineTemplate", ok.clone())));
        assert!(!s.matches(&tpl("a", "DockerMachineTemplate", ok)));
        assert!(!s.matches(&tpl("a", "AWSMachineTemplate", json!({"pool": "gpu"}))));
        assert!(!s.matches(&tpl(
            "a",
            "AWSMachineTemplate",
            json!({"pool": "gpu", "opt-in": "", "tier": "test", "node.cluster.x-k8s.io/karpenter-member": ""})
        )));
        assert!(Selection::default().matches(&tpl(
            "x",
            "AnyMachineTemplate",
            json!({"node.cluster.x-k8s.io/karpenter-member": "true"})
        )));
        assert!(!Selection::default().matches(&tpl("x", "AnyMachineTemplate", json!({}))));
        let mut deleting = tpl(
            "x",
            "AnyMachineTemplate",
            json!({"node.cluster.x-k8s.io/karpenter-member": "true"}),
        );
        deleting.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-11-22T10:00:00Z")).expect("time"));
        assert!(!Selection::default().matches(&deleting));
        let bad_op: LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        )
        .expect("selector");
        assert!(!selector_matches(
            &bad_op,
            &BTreeMap::from([("a".into(), "2".into())])
        ));
    }

    /// The same answers as kube's `Selector` (which the matcher once built per call).
    #[test]
    fn selector_matches_as_kube_selector_does() {
        use kube::core::{Selector, SelectorExt};
        let selectors = [
            json!({}),
            json!({"matchLabels": {"app": "web"}}),
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "In"}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn"}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}),
        ];
        let label_sets = [
            json!({}),
            json!({"app": "web"}),
            json!({"app": "web", "tier": "a"}),
            json!({"app": "web", "tier": "c"}),
            json!({"tier": "b"}),
        ];
        let mut matched = 0;
        for sel in &selectors {
            let sel: LabelSelector = serde_json::from_value(sel.clone()).expect("selector");
            for labels in &label_sets {
                let labels: BTreeMap<String, String> =
                    serde_json::from_value(labels.clone()).expect("labels");
                let kube = Selector::try_from(sel.clone()).is_ok_and(|s| s.matches(&labels));
                assert_eq!(
                    selector_matches(&sel, &labels),
                    kube,
                    "{sel:?} on {labels:?}"
                );
                matched += usize::from(kube);
            }
        }
        // Both answers occur: the table is not all-false or all-true.
        assert!(matched > 5 && matched < selectors.len() * label_sets.len() - 5);
    }
}
