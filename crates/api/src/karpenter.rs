//! `karpenter.sh/v1` NodePool and NodeClaim, field for field as Karpenter v1 defines them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

// ---------------------------------------------------------------------------------------
// Shared by NodePool and NodeClaim
// ---------------------------------------------------------------------------------------

/// The effect of a taint.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A taint (core/v1 Taint with Karpenter's validation).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key to be applied to a node.
    #[schemars(length(min = 1), regex(pattern = schema::QUALIFIED_NAME))]
    pub key: String,
    /// The taint value corresponding to the taint key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = schema::LABEL_VALUE))]
    pub value: Option<String>,
    /// The effect of the taint on pods that do not tolerate the taint.
    pub effect: TaintEffect,
    /// The time the taint was added (NoExecute taints only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

impl From<&Taint> for k8s_openapi::api::core::v1::Taint {
    fn from(t: &Taint) -> Self {
        k8s_openapi::api::core::v1::Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().to_string(),
            time_added: t.time_added.clone(),
        }
    }
}

/// A requirement operator.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

/// A node selector requirement with an optional minimum number of distinct values the
/// scheduler must keep available (flexibility).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    #[schemars(schema_with = "schema::requirement_key")]
    pub key: String,
    /// Represents a key's relationship to a set of values.
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::requirement_values")]
    pub values: Vec<String>,
    /// The minimum number of unique values required to define the flexibility of the
    /// requirement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i32>,
}

/// Reference to the provider-specific node class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
pub struct NodeClassReference {
    /// Group of the referent.
    #[schemars(regex(pattern = r"^[^/]*$"))]
    #[x_kube(validation = Rule::new("self != ''").message("group may not be empty"))]
    pub group: String,
    /// Kind of the referent.
    #[schemars(regex(pattern = r"^[^/]*$"))]
    #[x_kube(validation = Rule::new("self != ''").message("kind may not be empty"))]
    pub kind: String,
    /// Name of the referent.
    #[x_kube(validation = Rule::new("self != ''").message("name may not be empty"))]
    pub name: String,
}

const RULE_IN_VALUES: &str =
    "self.all(x, x.operator == 'In' ? has(x.values) && x.values.size() != 0 : true)";
const MSG_IN_VALUES: &str = "requirements with operator 'In' must have a value defined";
const RULE_NUMERIC: &str = "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (has(x.values) && x.values.size() == 1 && int(x.values[0]) >= 0) : true)";
const MSG_NUMERIC: &str =
    "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value";
const RULE_MIN_VALUES: &str = "self.all(x, (x.operator == 'In' && has(x.minValues)) ? has(x.values) && x.values.size() >= x.minValues : true)";
const MSG_MIN_VALUES: &str = "requirements with 'minValues' must have at least that many values specified in the 'values' field";

fn default_expire_after() -> String {
    "720h".into()
}

/// Resources a NodeClaim requests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// Minimum resources the node must provide.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub requests: BTreeMap<String, Quantity>,
}

// ---------------------------------------------------------------------------------------
// NodeClaim
// ---------------------------------------------------------------------------------------

/// NodeClaim: a request for one node, satisfied by one Cluster API Machine. The spec is
/// immutable.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    status = "NodeClaimStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Drifted","type":"string","jsonPath":".status.conditions[?(@.type==\"Drifted\")].status"}"#,
    printcolumn = r#"{"name":"Disruption","type":"string","jsonPath":".status.conditions[?(@.type==\"DisruptionReason\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Machine","type":"string","priority":1,"jsonPath":".metadata.annotations.cluster\\.x-k8s\\.io/machine"}"#,
    printcolumn = r#"{"name":"ProviderID","type":"string","priority":1,"jsonPath":".status.providerID"}"#,
    printcolumn = r#"{"name":"NodePool","type":"string","priority":1,"jsonPath":".metadata.labels.karpenter\\.sh/nodepool"}"#,
    printcolumn = r#"{"name":"NodeClass","type":"string","priority":1,"jsonPath":".spec.nodeClassRef.name"}"#
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable"))]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    /// Taints applied to the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints applied at creation that a daemon is expected to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Requirements are layered with labels and applied to every node.
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new(RULE_IN_VALUES).message(MSG_IN_VALUES))]
    #[x_kube(validation = Rule::new(RULE_NUMERIC).message(MSG_NUMERIC))]
    #[x_kube(validation = Rule::new(RULE_MIN_VALUES).message(MSG_MIN_VALUES))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Minimum resources the node must provide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The node class the node is launched from.
    pub node_class_ref: NodeClassReference,
    /// Maximum time the node may spend draining before it is forcibly deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = schema::DURATION))]
    pub termination_grace_period: Option<String>,
    /// Lifetime of the node from creation, or `Never`.
    #[serde(default = "default_expire_after")]
    #[schemars(regex(pattern = schema::DURATION_OR_NEVER))]
    pub expire_after: String,
}

/// Observed state of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node that registered for this NodeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Provider ID of the launched instance.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Image of the launched instance.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Capacity of the node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Allocatable capacity of the node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Lifecycle conditions (Launched, Registered, Initialized, Ready, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::claim_conditions")]
    pub conditions: Vec<Condition>,
    /// Last time a pod was scheduled to or removed from the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

// ---------------------------------------------------------------------------------------
// NodePool
// ---------------------------------------------------------------------------------------

/// NodePool: constraints and disruption settings for the nodes Karpenter launches.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    status = "NodePoolStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodePool is the Schema for the NodePools API",
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","jsonPath":".status.resources.nodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"CPU","type":"string","priority":1,"jsonPath":".status.resources.cpu"}"#,
    printcolumn = r#"{"name":"Memory","type":"string","priority":1,"jsonPath":".status.resources.memory"}"#,
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    )
)]
#[x_kube(validation = Rule::new(RULE_STATIC_SWITCH).message(MSG_STATIC_SWITCH).field_path(".replicas"))]
#[x_kube(validation = Rule::new(RULE_STATIC_LIMITS).message(MSG_STATIC_LIMITS).field_path(".limits"))]
#[x_kube(validation = Rule::new(RULE_STATIC_WEIGHT).message(MSG_STATIC_WEIGHT).field_path(".weight"))]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// Template of the NodeClaims this NodePool launches.
    pub template: NodeClaimTemplate,
    /// How Karpenter may disrupt this NodePool's nodes.
    #[serde(default)]
    pub disruption: Disruption,
    /// Bounds on the total capacity this NodePool may launch (`nodes` counts nodes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub limits: BTreeMap<String, Quantity>,
    /// Priority among NodePools: higher weights are tried first. Not supported on static
    /// pools (`replicas` set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Static pool (alpha in Karpenter): the number of nodes to keep, whatever the pods. A pool
    /// is static or dynamic for life; a static pool supports only `limits.nodes` and no
    /// `weight`, and ignores `consolidationPolicy` and `consolidateAfter`. The operator keeps
    /// exactly this many NodeClaims, whatever the pods (scaled up within `limits.nodes`, the
    /// surplus deleted), and never provisions for pending pods on a static pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

// Karpenter v1.15.0's rules on the NodePool spec (static pools), with a field path added so
// the API server names the offending field.
const RULE_STATIC_SWITCH: &str = "has(self.replicas) == has(oldSelf.replicas)";
const MSG_STATIC_SWITCH: &str = "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes";
const RULE_STATIC_LIMITS: &str = "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))";
const MSG_STATIC_LIMITS: &str = "only 'limits.nodes' is supported on static NodePools";
const RULE_STATIC_WEIGHT: &str = "!has(self.replicas) || !has(self.weight)";
const MSG_STATIC_WEIGHT: &str = "'weight' is not supported on static NodePools";

/// The NodeClaim template of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "NodeClaimTemplateMetadata::is_empty")]
    pub metadata: NodeClaimTemplateMetadata,
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations put on every NodeClaim and Node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::template_labels")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::string_map")]
    pub annotations: BTreeMap<String, String>,
}

impl NodeClaimTemplateMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The NodeClaim spec inside a NodePool template (group/kind of the node class immutable).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new(RULE_IN_VALUES).message(MSG_IN_VALUES))]
    #[x_kube(validation = Rule::new(RULE_NUMERIC).message(MSG_NUMERIC))]
    #[x_kube(validation = Rule::new(RULE_MIN_VALUES).message(MSG_MIN_VALUES))]
    #[schemars(
        schema_with = "schema::with_nodepool_key_rule::<Vec<NodeSelectorRequirementWithMinValues>>"
    )]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[x_kube(validation = Rule::new("self.group == oldSelf.group").message("nodeClassRef.group is immutable"))]
    #[x_kube(validation = Rule::new("self.kind == oldSelf.kind").message("nodeClassRef.kind is immutable"))]
    pub node_class_ref: NodeClassReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = schema::DURATION))]
    pub termination_grace_period: Option<String>,
    #[serde(default = "default_expire_after")]
    #[schemars(regex(pattern = schema::DURATION_OR_NEVER))]
    pub expire_after: String,
}

/// Which nodes consolidation may remove.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    Balanced,
}

/// A disruption reason a budget applies to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
    /// Repair of unhealthy nodes (paces repair, see the NodeClaim lifecycle's repair).
    Unhealthy,
}

fn default_consolidate_after() -> String {
    "0s".into()
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget::default()]
}

fn default_budget_nodes() -> String {
    "10%".into()
}

/// Disruption settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long a node must be consolidatable before it is consolidated, or `Never`
    /// (default `0s`).
    #[serde(default = "default_consolidate_after")]
    #[schemars(regex(pattern = schema::DURATION_OR_NEVER))]
    pub consolidate_after: String,
    /// Which nodes consolidation may remove.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// Budgets limit how many nodes may be disrupted at once; the most restrictive active
    /// one applies.
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50))]
    #[x_kube(validation = Rule::new("self.all(x, has(x.schedule) == has(x.duration))").message("'schedule' must be set with 'duration'"))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

/// A disruption budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Disruption reasons this budget applies to (all when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// Maximum nodes disrupted at once: a count or a percentage of the NodePool's nodes.
    #[serde(default = "default_budget_nodes")]
    #[schemars(regex(pattern = schema::BUDGET_NODES))]
    pub nodes: String,
    /// When the budget becomes active (cron, UTC); requires `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = schema::BUDGET_SCHEDULE))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit; requires `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = schema::BUDGET_DURATION))]
    pub duration: Option<String>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            reasons: None,
            nodes: default_budget_nodes(),
            schedule: None,
            duration: None,
        }
    }
}

/// Observed state of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Total capacity of the NodePool's nodes (`nodes` counts them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::quantity_map")]
    pub resources: BTreeMap<String, Quantity>,
    /// Number of nodes: the pool's NodeClaims not being deleted (the scale subresource's
    /// current replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// Generation of the node class last checked by the NodePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// ValidationSucceeded, NodeClassReady, NodeRegistrationHealthy, Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
}
