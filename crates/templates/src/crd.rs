//! A CustomResourceDefinition as template discovery reads it: its labels, group, kind,
//! plural, scope and which versions are served — nothing of the schemas.
//!
//! Discovery lists and watches every CRD of the management cluster. Deserialized as
//! `k8s_openapi`'s `CustomResourceDefinition`, each one's OpenAPI schema becomes a tree of
//! `JSONSchemaProps` (Cluster API's alone are megabytes): measured with heaptrack on the e2e
//! bench, the operator's start-up list held 12 MB of them at once, more than its caches at
//! 1000 pods. Serde skips the fields this type does not name without allocating them.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// The parts of a CRD that decide whether it is a template kind (discovery's
/// `template_kind_from_crd`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CrdSummary {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CrdSpec,
}

/// `spec` of a CRD, as far as discovery reads it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CrdSpec {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub names: CrdNames,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub versions: Vec<CrdVersion>,
}

/// `spec.names` of a CRD.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CrdNames {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub plural: String,
}

/// One of `spec.versions`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CrdVersion {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub served: bool,
}

impl kube::Resource for CrdSummary {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "CustomResourceDefinition".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "apiextensions.k8s.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "customresourcedefinitions".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_discovery_needs_and_skips_the_schema() {
        let crd: CrdSummary = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "dockermachinetemplates.infrastructure.cluster.x-k8s.io",
                         "labels": {"cluster.x-k8s.io/v1beta2": "v1beta2"}},
            "spec": {
                "group": "infrastructure.cluster.x-k8s.io",
                "scope": "Namespaced",
                "names": {"kind": "DockerMachineTemplate", "plural": "dockermachinetemplates"},
                "versions": [
                    {"name": "v1beta1", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}},
                    {"name": "v1beta2", "served": true, "storage": true}
                ]
            }
        }))
        .expect("a CRD");
        assert_eq!(crd.spec.group, "infrastructure.cluster.x-k8s.io");
        assert_eq!(crd.spec.names.kind, "DockerMachineTemplate");
        assert_eq!(crd.spec.names.plural, "dockermachinetemplates");
        assert_eq!(crd.spec.scope, "Namespaced");
        let served: Vec<(&str, bool)> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served))
            .collect();
        assert_eq!(served, [("v1beta1", false), ("v1beta2", true)]);
        assert_eq!(
            <CrdSummary as kube::Resource>::url_path(&(), None),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        );
    }
}
