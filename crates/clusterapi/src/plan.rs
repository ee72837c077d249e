//! The launch plan: what launch decided and recorded on the NodeClaim before any side
//! effect (the offering, the deterministic names of every object it creates, the template
//! hashes drift compares with). The small readers of a claim the loops share are the
//! NodeClaim lifecycle's (`nodeclaim::labels`).

use std::collections::BTreeMap;

use api::NodeClaim;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};

use super::machine::ObjectRef as CapiRef;
use karpenter_core::objects::{fnv64, pruned};

/// A `{apiVersion, kind, name}` of an object launch created or read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TypedRef {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) name: String,
}

impl TypedRef {
    pub(crate) fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }
    pub(crate) fn capi_ref(&self) -> CapiRef {
        CapiRef {
            api_group: self.group().to_string(),
            kind: self.kind.clone(),
            name: self.name.clone(),
        }
    }
}

/// The launch plan, recorded on the NodeClaim before any side effect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Plan {
    pub(crate) namespace: String,
    pub(crate) machine: String,
    pub(crate) cluster: String,
    pub(crate) instance_type: String,
    pub(crate) zone: Option<String>,
    pub(crate) capacity_type: String,
    pub(crate) price: f64,
    /// The InfrastructureMachineTemplate, and the InfraMachine cloned from it.
    pub(crate) infrastructure_template: TypedRef,
    pub(crate) infrastructure: TypedRef,
    /// Hash of the InfrastructureMachineTemplate's `spec` when planned (drift detection);
    /// absent on plans of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) infrastructure_template_hash: Option<String>,
    /// The bootstrap config template and its clone, when a template is used.
    pub(crate) bootstrap_template: Option<TypedRef>,
    pub(crate) bootstrap: Option<TypedRef>,
    /// Hash of the bootstrap config template's `spec` when planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bootstrap_template_hash: Option<String>,
    pub(crate) data_secret_name: Option<String>,
    pub(crate) failure_domain: Option<String>,
    /// Labels the NodeClaim (and then its Node) gets from the chosen offering.
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) capacity: BTreeMap<String, String>,
    pub(crate) allocatable: BTreeMap<String, String>,
    /// For a resizable template: the size chosen and the clone's fields it sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resize: Option<PlanSize>,
}

/// The size of a NodeClaim of a resizable template, as launch writes it into the clone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PlanSize {
    pub(crate) size: templates::resize::Size,
    pub(crate) fields: Vec<templates::resize::FieldWrite>,
}

impl Plan {
    pub(crate) fn from_annotations(annotations: &BTreeMap<String, String>) -> Option<Plan> {
        annotations
            .get(api::consts::annotations::LAUNCH_PLAN)
            .and_then(|s| serde_json::from_str(s).ok())
    }

    /// The recorded plan of a NodeClaim.
    pub(crate) fn of(claim: &NodeClaim) -> Option<Plan> {
        Self::from_annotations(claim.annotations())
    }
}

pub(crate) fn kind_without_template(kind: &str) -> String {
    kind.strip_suffix("Template").unwrap_or(kind).to_string()
}

/// The hash of an object's `spec` (canonical JSON, empty values dropped), as the launch
/// plan records it.
pub(crate) fn spec_hash(obj: &DynamicObject) -> String {
    let spec = obj.data.get("spec").cloned().unwrap_or_default();
    format!("{:016x}", fnv64(&pruned(spec).to_string()))
}
