//! `karpenter.sh/v1alpha1` NodeOverlay, field for field as Karpenter v1.15.0 defines it: a
//! price or capacity change for the instance types its requirements select.
//!
//! Applied to every provider's instance types by `cloudprovider::overlay` (Karpenter's
//! semantics).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::karpenter::Operator;
use crate::schema;

/// A price (absolute, non-negative).
const PRICE: &str = r"^\d+(\.\d+)?$";
/// A price adjustment: a signed absolute change (`-0.5`, `+1.2`), an increase in percent
/// (`+10%`), or a decrease of at most 100 percent (`-15%`).
const PRICE_ADJUSTMENT: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";

const RULE_NOT_IN_VALUES: &str =
    "self.all(x, x.operator == 'NotIn' ? has(x.values) && x.values.size() != 0 : true)";
const MSG_NOT_IN_VALUES: &str = "requirements with operator 'NotIn' must have a value defined";
const RULE_IN_VALUES: &str =
    "self.all(x, x.operator == 'In' ? has(x.values) && x.values.size() != 0 : true)";
const MSG_IN_VALUES: &str = "requirements with operator 'In' must have a value defined";
const RULE_NUMERIC: &str = "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (has(x.values) && x.values.size() == 1 && int(x.values[0]) >= 0) : true)";
const MSG_NUMERIC: &str =
    "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value";
const RULE_ONE_PRICE: &str = "!has(self.price) || !has(self.priceAdjustment)";
const MSG_ONE_PRICE: &str = "cannot set both 'price' and 'priceAdjustment'";

/// NodeOverlay: changes the price or adds extended resources to the instance types its
/// requirements select, during scheduling simulations. Higher weights win; equal weights
/// are merged by name.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    status = "NodeOverlayStatus",
    category = "karpenter",
    shortname = "overlays",
    derive = "PartialEq",
    doc = "NodeOverlay is the Schema for the NodeOverlays API",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","priority":1,"jsonPath":".spec.weight"}"#
)]
#[x_kube(validation = Rule::new(RULE_ONE_PRICE).message(MSG_ONE_PRICE))]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which instance types (offerings) the overlay applies to: well-known labels
    /// (`node.kubernetes.io/instance-type`, `karpenter.sh/nodepool`, ...) and the labels of
    /// NodePool templates.
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new(RULE_NOT_IN_VALUES).message(MSG_NOT_IN_VALUES))]
    #[x_kube(validation = Rule::new(RULE_IN_VALUES).message(MSG_IN_VALUES))]
    #[x_kube(validation = Rule::new(RULE_NUMERIC).message(MSG_NUMERIC))]
    pub requirements: Vec<OverlayRequirement>,
    /// A change of the matching offerings' price: signed absolute (`-0.5`, `+1.2`) or in
    /// percent (`+10%`, `-15%`). Not with `price`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE_ADJUSTMENT))]
    pub price_adjustment: Option<String>,
    /// The matching offerings' price. Not with `priceAdjustment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = PRICE))]
    pub price: Option<String>,
    /// Extended resources added to the matching instance types (never cpu, memory,
    /// ephemeral-storage or pods).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::overlay_capacity")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Precedence among overlays (unset: 0): higher weights win; equal weights are merged
    /// in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A node selector requirement of a NodeOverlay (no `minValues`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverlayRequirement {
    #[schemars(schema_with = "schema::overlay_requirement_key")]
    pub key: String,
    /// Represents a key's relationship to a set of values.
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::requirement_values")]
    pub values: Vec<String>,
}

/// Observed state of a NodeOverlay.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// ValidationSucceeded (False with reason `Conflict` when overlays of equal weight
    /// disagree), Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
}
