//! Which template an object is: its reference and whether it is an InfrastructureMachineTemplate.

use std::fmt;

use api::consts::groups;
use kube::api::DynamicObject;
use serde::Serialize;

/// Which InfrastructureMachineTemplate an offering launches from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl TemplateRef {
    /// The API group of the template (`infrastructure.cluster.x-k8s.io`).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }
}

impl TemplateRef {
    /// The offering id of this template: `<apiVersion>/<kind>/<namespace>/<name>` (an empty
    /// namespace when it has none); [`TemplateRef::from_id`] reads it back.
    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.api_version,
            self.kind,
            self.namespace.as_deref().unwrap_or(""),
            self.name
        )
    }

    /// The template an offering id names (`None`: not an id of [`TemplateRef::id`]).
    pub fn from_id(id: &str) -> Option<TemplateRef> {
        let mut parts = id.rsplitn(4, '/');
        let name = parts.next()?;
        let namespace = parts.next()?;
        let kind = parts.next()?;
        let api_version = parts.next()?;
        Some(TemplateRef {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for TemplateRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Whether `api_version`/`kind` name an InfrastructureMachineTemplate.
pub(crate) fn is_machine_template(api_version: &str, kind: &str) -> bool {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    kind.ends_with("MachineTemplate")
        && kind != "MachineTemplate"
        && group == groups::INFRASTRUCTURE
}

/// The reference of an object (api version, kind, namespace, name).
pub(crate) fn template_ref(obj: &DynamicObject) -> TemplateRef {
    let (api_version, kind) = obj
        .types
        .as_ref()
        .map(|t| (t.api_version.clone(), t.kind.clone()))
        .unwrap_or_default();
    TemplateRef {
        api_version,
        kind,
        namespace: obj.metadata.namespace.clone(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offering_id_names_its_template() {
        for (api_version, namespace) in [
            ("infrastructure.cluster.x-k8s.io/v1beta1", Some("capi")),
            ("v1", None),
        ] {
            let t = TemplateRef {
                api_version: api_version.into(),
                kind: "Metal3MachineTemplate".into(),
                namespace: namespace.map(Into::into),
                name: "metal".into(),
            };
            assert_eq!(TemplateRef::from_id(&t.id()), Some(t));
        }
        assert_eq!(TemplateRef::from_id("metal"), None);
    }
}
