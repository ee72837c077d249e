//! `karpenter.kwok.sh/v1alpha1` KWOKNodeClass, field for field as Karpenter's kwok provider
//! defines it (`kwok/apis/v1alpha1`): cluster-scoped, one optional registration delay, and a
//! status whose `Ready` condition defaults to True.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;

/// The API group of [`KWOKNodeClass`] (also the prefix of the kwok instance-type labels).
pub const GROUP: &str = "karpenter.kwok.sh";
/// The kind a NodePool's `nodeClassRef` names.
pub const KIND: &str = "KWOKNodeClass";

// KWOKNodeClass: the kwok side of a NodePool. Nodes are made directly by the provider; kwok
// then runs them. The spec may be left out (`kubectl apply` of a bare KWOKNodeClass, as
// Karpenter's examples do): the schema defaults it to `{}`, so every object read has one.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.kwok.sh",
    version = "v1alpha1",
    kind = "KWOKNodeClass",
    plural = "kwoknodeclasses",
    shortname = "kwoknc",
    shortname = "kwokncs",
    category = "karpenter",
    status = "KWOKNodeClassStatus",
    derive = "PartialEq",
    doc = "KWOKNodeClass is the Schema for the KWOKNodeClass API"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("default" = {}))]
pub struct KWOKNodeClassSpec {
    /// NodeRegistrationDelay is a delay for KWOK nodes to register to the cluster.
    /// This is meant to model instance startup time that can happen when hardware
    /// needs to start on providers that are backed by real instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(s|m|h))+$"))]
    pub node_registration_delay: Option<String>,
}

/// KWOKNodeClassStatus contains the resolved state of the KwokNodeClass
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("default" = {"conditions": [{
    "type": "Ready", "status": "True", "reason": "Ready",
    "lastTransitionTime": "2024-01-01T01:01:01Z", "message": ""
}]}))]
pub struct KWOKNodeClassStatus {
    /// Conditions contains signals for health and readiness
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl KWOKNodeClass {
    /// Whether the NodeClass is Ready: a `Ready` condition other than True says not (the
    /// API server defaults it to True; an object without it is Ready, as in Karpenter).
    pub fn not_ready(&self) -> Option<String> {
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice())?;
        let ready = api::conditions::get(conditions, "Ready")?;
        (ready.status != api::conditions::TRUE).then(|| {
            if ready.message.is_empty() {
                format!(
                    "KWOKNodeClass {} is not Ready",
                    self.metadata.name.as_deref().unwrap_or("")
                )
            } else {
                ready.message.clone()
            }
        })
    }

    /// The registration delay (zero when unset).
    pub fn registration_delay(&self) -> Result<Duration, Error> {
        match &self.spec.node_registration_delay {
            None => Ok(Duration::ZERO),
            Some(d) => api::duration::parse_duration(d).ok_or_else(|| Error::NodeClass {
                name: self.metadata.name.clone().unwrap_or_default(),
                message: format!("spec.nodeRegistrationDelay {d:?} is not a duration"),
            }),
        }
    }
}

/// The KWOKNodeClass CRD as installed (the derived schema finished as crates/api finishes
/// its own).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = api::crds::finish(KWOKNodeClass::crd());
    // The spec is optional, as in Karpenter's (defaulted to `{}`).
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema.required = None;
        }
    }
    crd
}

/// Header of the generated file.
const HEADER: &str =
    "# Generated from crates/kwok (`cargo run -p kwok --example crd -- crds`); do not edit.\n";

/// The CRD as (file name, YAML): `karpenter.kwok.sh_kwoknodeclasses.yaml`, as controller-gen
/// names it.
pub fn rendered() -> Result<(String, String), Error> {
    let crd = crd();
    let yaml = serde_saphyr::to_string(&crd).map_err(|e| Error::Render(e.to_string()))?;
    Ok((api::crds::file_name(&crd), format!("{HEADER}{yaml}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_is_cluster_scoped_with_karpenters_names_and_ready_default() {
        let crd = crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.kind, KIND);
        assert_eq!(
            crd.spec.names.short_names,
            Some(vec!["kwoknc".to_string(), "kwokncs".to_string()])
        );
        let (name, yaml) = rendered().expect("renders");
        assert_eq!(name, "karpenter.kwok.sh_kwoknodeclasses.yaml");
        assert!(!yaml.contains("nullable"), "{yaml}");
        assert!(yaml.contains("^([0-9]+(s|m|h))+$"), "{yaml}");
        assert!(
            yaml.contains("2024-01-01T01:01:01Z"),
            "status default: {yaml}"
        );
    }

    #[test]
    fn readiness_and_delay() {
        let mut nc = KWOKNodeClass::new("default", KWOKNodeClassSpec::default());
        assert_eq!(nc.not_ready(), None, "no status: Ready");
        assert_eq!(nc.registration_delay().expect("delay"), Duration::ZERO);
        nc.spec.node_registration_delay = Some("1m30s".into());
        assert_eq!(
            nc.registration_delay().expect("delay"),
            Duration::from_secs(90)
        );
        nc.spec.node_registration_delay = Some("soon".into());
        assert!(nc.registration_delay().is_err());
        nc.status = Some(KWOKNodeClassStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "Broken".into(),
                message: "not today".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }],
        });
        assert_eq!(nc.not_ready().as_deref(), Some("not today"));
    }
}
