//! `karpenter.cluster.x-k8s.io/v1alpha1` ClusterAPINodeClass: which Cluster API templates
//! Karpenter may launch standalone Machines from, and how to bootstrap them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema;
use api::schema::{TIMEOUT, VERSION};

fn default_launch_timeout() -> String {
    "10m".into()
}

fn default_registration_timeout() -> String {
    "15m".into()
}

/// ClusterAPINodeClass: the Cluster API side of a NodePool. Machines are created in the
/// Cluster's namespace, one per NodeClaim, from templates carrying the opt-in label
/// `node.cluster.x-k8s.io/karpenter-member`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ClusterAPINodeClass",
    plural = "clusterapinodeclasses",
    shortname = "capinc",
    category = "karpenter",
    status = "ClusterAPINodeClassStatus",
    derive = "PartialEq",
    doc = "ClusterAPINodeClass is the Schema for the ClusterAPINodeClasses API",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterRef.name"}"#,
    printcolumn = r#"{"name":"Types","type":"integer","jsonPath":".status.instanceTypeCount"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAPINodeClassSpec {
    /// The Cluster API Cluster the Machines join. Machines, templates and bootstrap objects
    /// live in its namespace.
    pub cluster_ref: ClusterReference,
    /// Selects among the InfrastructureMachineTemplates in the Cluster's namespace that carry
    /// the label `node.cluster.x-k8s.io/karpenter-member` (all of them when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_template_selector: Option<LabelSelector>,
    /// Restricts the template kinds considered (all contract-labelled kinds when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machine_template_kinds: Vec<GroupKind>,
    /// Where each Machine's bootstrap data comes from.
    pub bootstrap: Bootstrap,
    /// Kubernetes version of the Machines; defaults to the Cluster's (topology or control
    /// plane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = VERSION))]
    pub version: Option<String>,
    /// Kubelet reservations used to compute allocatable (they must match what the bootstrap
    /// configuration passes to the kubelet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Settings copied onto every Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineSettings>,
    /// A Machine without a providerID after this long is deleted and its NodeClaim retried.
    #[serde(default = "default_launch_timeout")]
    #[schemars(regex(pattern = TIMEOUT))]
    pub launch_timeout: String,
    /// A launched Machine whose Node has not registered after this long is deleted.
    #[serde(default = "default_registration_timeout")]
    #[schemars(regex(pattern = TIMEOUT))]
    pub registration_timeout: String,
    /// What happens to drifted nodes (Kubernetes version, templates, NodePool changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// Counts the hosts each template can still become (bare metal, or any provider whose
    /// machines are drawn from a pool of objects): a template with no free host left is not
    /// offered, and a freed host offers it again at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,
}

/// Host inventory: which objects a template can become and when one is free. Exactly one of
/// `preset` or `hosts`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.preset) != has(self.hosts)").message("exactly one of preset or hosts must be set"))]
pub struct Inventory {
    /// A built-in description of a provider's hosts. `Metal3`: BareMetalHosts
    /// (`metal3.io/v1alpha1`) in the template's namespace matching the template's
    /// `spec.template.spec.hostSelector`, without `spec.consumerRef`, not being deleted, with
    /// `status.provisioning.state` `available` or `ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::inventory_preset")]
    pub preset: Option<InventoryPreset>,
    /// The hosts of any other provider, described field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<HostKind>,
    /// A host label whose value is the zone of the host (e.g. `topology.kubernetes.io/zone`):
    /// the count is then kept per zone, and an offering in a zone counts only its hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    pub zone_label: Option<String>,
}

/// See [`Inventory::preset`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InventoryPreset {
    Metal3,
}

/// A kind of host object, in the template's namespace, and how to read it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostKind {
    /// API version of the host kind (`group/version`).
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Dot-separated path, in the InfrastructureMachineTemplate, of a label selector
    /// (`matchLabels`, `matchExpressions`) choosing the hosts the template can become. A
    /// template without one can become any host of the namespace.
    #[schemars(length(min = 1, max = 253))]
    pub selector_path: String,
    /// Dot-separated path, in a host, of the name of the object using it (e.g.
    /// `spec.consumerRef.name`): a launch whose InfraMachine already holds a host is not
    /// counted twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub consumer_path: Option<String>,
    /// When a host is free: every rule must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub available: Vec<AvailabilityRule>,
}

/// One condition on a host field: the field is absent (`absent: true`), or its value (as a
/// string) is one of `values`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.absent) && self.absent) != (has(self.values) && size(self.values) > 0)").message("exactly one of absent: true or values must be set"))]
pub struct AvailabilityRule {
    /// Dot-separated path of the field in the host (e.g. `status.provisioning.state`).
    #[schemars(length(min = 1, max = 253))]
    pub field: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub absent: bool,
}

/// Drift handling of a NodeClass's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// `Replace` (default): drifted nodes are replaced, surge-first, within the NodePool's
    /// `Drifted` budgets. `Manual`: the `Drifted` condition and events only; a node is
    /// rolled when its NodeClaim is deleted (e.g. by the platform's upgrade process).
    #[serde(default)]
    pub policy: DriftPolicy,
}

/// See [`Drift::policy`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DriftPolicy {
    #[default]
    Replace,
    Manual,
}

/// A namespaced reference to a Cluster API Cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReference {
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// An API group and kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupKind {
    #[schemars(length(min = 1, max = 253))]
    pub api_group: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

/// A reference to an object in the Cluster's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateReference {
    #[schemars(length(min = 1, max = 253))]
    pub api_group: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Bootstrap source: exactly one of a config template (cloned per Machine) or a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.configTemplateRef) != has(self.dataSecretName)").message("exactly one of configTemplateRef or dataSecretName must be set"))]
pub struct Bootstrap {
    /// A bootstrap config template (e.g. KubeadmConfigTemplate) cloned for each Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_template_ref: Option<TemplateReference>,
    /// A Secret (key `value`) with ready-made bootstrap data, used by every Machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub data_secret_name: Option<String>,
    /// Add `karpenter.sh/unregistered:NoExecute` to the cloned KubeadmConfig's join taints
    /// (default true), so Nodes register with it as Karpenter expects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject_unregistered_taint: Option<bool>,
}

/// Kubelet settings that affect allocatable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// Resources reserved for Kubernetes system daemons.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::reserved_resources")]
    pub kube_reserved: BTreeMap<String, Quantity>,
    /// Resources reserved for OS system daemons.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::reserved_resources")]
    pub system_reserved: BTreeMap<String, Quantity>,
    /// Hard eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "schema::eviction_thresholds")]
    pub eviction_hard: BTreeMap<String, String>,
    /// Maximum pods per node (otherwise the template's, or 110).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
}

/// Settings copied onto every Machine (labels and annotations also let users add Cluster
/// API pre-drain / pre-terminate hooks).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSettings {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "api::schema::string_map")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "api::schema::string_map")]
    pub annotations: BTreeMap<String, String>,
    /// Machine `spec.deletion.nodeDrainTimeoutSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = TIMEOUT))]
    pub node_drain_timeout: Option<String>,
    /// Machine `spec.deletion.nodeVolumeDetachTimeoutSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = TIMEOUT))]
    pub node_volume_detach_timeout: Option<String>,
    /// Machine `spec.deletion.nodeDeletionTimeoutSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = TIMEOUT))]
    pub node_deletion_timeout: Option<String>,
}

/// Observed state of a ClusterAPINodeClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAPINodeClassStatus {
    /// Ready, ClusterReady, TemplatesReady, BootstrapReady.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "api::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The instance types offered, cheapest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_types: Vec<InstanceTypeSummary>,
    /// How many instance types are offered (the `Types` printer column).
    #[serde(default)]
    pub instance_type_count: i64,
    /// Resizable templates whose Nodes registered with less than the size asked: the
    /// shortfall, subtracted from every size of the template by later solves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resize_corrections: Vec<ResizeCorrection>,
    /// The offerings that are counted or backed off after a failed launch (any other is
    /// unbounded and available), by template, zone and capacity type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offerings: Vec<OfferingState>,
    /// The devices (Dynamic Resource Allocation) a running Node of a template published:
    /// later solves expect them of the template's Nodes, over what its annotations declare.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub learned_devices: Vec<LearnedDevices>,
}

/// What the Nodes of one template publish, learned from one of them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LearnedDevices {
    /// The template's name (in the Cluster's namespace).
    pub template: String,
    /// The Node they were learned from.
    pub node: String,
    /// The Node's complete ResourceSlice pools as a JSON list of `{driver, devices}`: the
    /// form of the `karpenter.cluster.x-k8s.io/resource-slices` template annotation.
    pub resource_slices: String,
}

/// One offering's count and availability.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OfferingState {
    /// The template's name.
    pub template: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub capacity_type: String,
    /// How many more Machines it can become now (absent: unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<i64>,
    /// What set the count (the smallest source): an annotation's name, or `inventory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The source's own number: the max, the reported count, or the hosts matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// Why it is not offered now: a launch failure, or no count left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
    /// Until when a failed launch keeps it unavailable (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_until: Option<String>,
}

/// What the Nodes of one resizable template lack against the size asked (the largest
/// shortfall seen).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResizeCorrection {
    /// The template's name (in the Cluster's namespace).
    pub template: String,
    /// cpu missing (quantity).
    #[serde(default)]
    pub cpu: String,
    /// Memory missing (quantity).
    #[serde(default)]
    pub memory: String,
}

/// One instance type of a NodeClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeSummary {
    pub name: String,
    #[serde(default)]
    pub cpu: String,
    #[serde(default)]
    pub memory: String,
    #[serde(default)]
    pub pods: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpus: i64,
    #[serde(default)]
    pub arch: String,
    #[serde(default)]
    pub os: String,
    /// Zones of the offerings (empty when zone-less).
    #[serde(default)]
    pub zones: Vec<String>,
    #[serde(default)]
    pub capacity_types: Vec<String>,
    /// Cheapest offering, per hour, as a decimal string.
    #[serde(default)]
    pub price: String,
    /// Dearest offering, per hour, as a decimal string: with `price`, the price range.
    #[serde(default)]
    pub max_price: String,
    /// Names of the templates providing this instance type.
    #[serde(default)]
    pub templates: Vec<String>,
    /// Its devices (Dynamic Resource Allocation) per driver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DriverDevices>,
    /// Where they are known from: `Learned` (a running Node published them, see
    /// `status.learnedDevices`) or `Declared` (the template's annotations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_source: Option<String>,
}

/// How many devices of one driver a node of an instance type publishes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverDevices {
    pub driver: String,
    pub count: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl ClusterAPINodeClass {
    /// Whether its drift is left to the user (`spec.drift.policy: Manual`).
    pub fn manual_drift(&self) -> bool {
        self.spec
            .drift
            .as_ref()
            .is_some_and(|d| d.policy == DriftPolicy::Manual)
    }
}
