//! Schema fragments schemars cannot derive: quantity maps, constrained label maps,
//! requirement values. Public for the other API crates (the Cluster API NodeClass). Patterns are Karpenter's own, so the same objects are accepted and
//! rejected as upstream.

use schemars::{Schema, SchemaGenerator, json_schema};

/// resource.Quantity.
pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A label value (may be empty).
pub const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A qualified name (label key, taint key).
pub const QUALIFIED_NAME: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// A duration in s/m/h, or `Never`.
pub const DURATION_OR_NEVER: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// A duration in s/m/h.
pub const DURATION: &str = r"^([0-9]+(s|m|h))+$";
/// A duration in ms/s/m/h (our own timeouts).
pub const TIMEOUT: &str = r"^([0-9]+(ms|s|m|h))+$";
/// Budget `nodes`: a count or a percentage.
pub const BUDGET_NODES: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
/// Budget `duration`: minutes and hours only (cron has no seconds).
pub const BUDGET_DURATION: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";
/// Budget `schedule`: a cron expression or macro.
pub const BUDGET_SCHEDULE: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";
/// A Kubernetes version (`v` optional; the operator adds it).
pub const VERSION: &str =
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]*)?$";

/// The domain of a label key (`x.find(...)` in CEL).
const DOMAIN: &str = r#"find("^([^/]+)")"#;

/// `map[string]resource.Quantity`.
pub fn quantity_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "pattern": QUANTITY,
        },
    })
}

/// `map[string]string`.
pub fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"},
    })
}

/// CEL rules restricting a label key (`key` is the CEL expression of the key), as Karpenter
/// restricts requirement keys and template labels: the `kubernetes.io`, `k8s.io` and
/// `karpenter.sh` domains and our own are reserved except for their well-known labels, and
/// `kubernetes.io/hostname` is never allowed. One deliberate difference from Karpenter:
/// `*.x-k8s.io` domains are not part of the reserved `k8s.io` domain (Cluster API's
/// `node.cluster.x-k8s.io` labels and our own well-known labels live there).
fn label_key_rules(key: &str, all: bool) -> Vec<serde_json::Value> {
    let wrap = |rule: String| {
        if all {
            format!("self.all(x, {rule})")
        } else {
            rule
        }
    };
    let kubernetes_io = r#"["beta.kubernetes.io/instance-type", "failure-domain.beta.kubernetes.io/region", "beta.kubernetes.io/os", "beta.kubernetes.io/arch", "failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "node.kubernetes.io/instance-type", "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/windows-build"]"#;
    use crate::consts::labels;
    let ours = cel_list(&[
        labels::INSTANCE_CPU,
        labels::INSTANCE_MEMORY,
        labels::INSTANCE_GPU_COUNT,
        labels::INSTANCE_TEMPLATE,
    ]);
    let [karpenter_sh, hostname] = karpenter_key_rules(key, all);
    vec![
        serde_json::json!({
            "message": "label domain \"kubernetes.io\" is restricted",
            "rule": wrap(format!(
                "{key} in {kubernetes_io} || {key}.{DOMAIN}.endsWith(\"node.kubernetes.io\") || {key}.{DOMAIN}.endsWith(\"node-restriction.kubernetes.io\") || !{key}.{DOMAIN}.endsWith(\"kubernetes.io\")"
            )),
        }),
        serde_json::json!({
            "message": "label domain \"k8s.io\" is restricted",
            "rule": wrap(format!(
                "{key}.{DOMAIN}.endsWith(\"kops.k8s.io\") || {key}.{DOMAIN}.endsWith(\"x-k8s.io\") || !{key}.{DOMAIN}.endsWith(\"k8s.io\")"
            )),
        }),
        karpenter_sh,
        serde_json::json!({
            "message": "label domain \"karpenter.cluster.x-k8s.io\" is restricted",
            "rule": wrap(format!(
                "{key} in {ours} || !{key}.{DOMAIN}.endsWith(\"karpenter.cluster.x-k8s.io\")"
            )),
        }),
        hostname,
    ]
}

/// The two label-key rules every Karpenter object has: the `karpenter.sh` domain is reserved
/// except for its well-known labels, and `kubernetes.io/hostname` is never allowed.
fn karpenter_key_rules(key: &str, all: bool) -> [serde_json::Value; 2] {
    let wrap = |rule: String| {
        if all {
            format!("self.all(x, {rule})")
        } else {
            rule
        }
    };
    [
        serde_json::json!({
            "message": "label domain \"karpenter.sh\" is restricted",
            "rule": wrap(format!(
                "{key} in [\"karpenter.sh/capacity-type\", \"karpenter.sh/nodepool\"] || !{key}.{DOMAIN}.endsWith(\"karpenter.sh\")"
            )),
        }),
        serde_json::json!({
            "message": "label \"kubernetes.io/hostname\" is restricted",
            "rule": wrap(format!("{key} != \"kubernetes.io/hostname\"")),
        }),
    ]
}

/// The rule keeping `karpenter.sh/nodepool` out of a NodePool's requirements and labels
/// (the operator sets it).
fn nodepool_label_rule(key: &str) -> serde_json::Value {
    serde_json::json!({
        "message": "label \"karpenter.sh/nodepool\" is restricted",
        "rule": format!("{key} != \"karpenter.sh/nodepool\""),
    })
}

/// A CEL list literal of strings.
fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A requirement `key`.
pub fn requirement_key(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "The label key that the selector applies to.",
        "type": "string",
        "maxLength": 316,
        "pattern": QUALIFIED_NAME,
        "x-kubernetes-validations": label_key_rules("self", false),
    })
}

/// NodePool template requirements (`T`, a list of requirements): the key is also never
/// `karpenter.sh/nodepool` (the operator sets that label).
pub fn with_nodepool_key_rule<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut list = generator.subschema_for::<T>();
    if let Some(rules) = list
        .get_mut("items")
        .and_then(|i| i.get_mut("properties"))
        .and_then(|p| p.get_mut("key"))
        .and_then(|k| k.get_mut("x-kubernetes-validations"))
        .and_then(|r| r.as_array_mut())
    {
        rules.push(nodepool_label_rule("self"));
    }
    list
}

/// A NodeOverlay requirement `key`: only Karpenter's own restrictions (an overlay selects
/// instance types; it labels nothing).
pub fn overlay_requirement_key(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "The label key that the selector applies to.",
        "type": "string",
        "maxLength": 316,
        "pattern": QUALIFIED_NAME,
        "x-kubernetes-validations": karpenter_key_rules("self", false),
    })
}

/// NodeOverlay `capacity`: extended resources only.
pub fn overlay_capacity(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Extended resources added to the capacity of matching instance types; never cpu, memory, ephemeral-storage or pods.",
        "type": "object",
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "pattern": QUANTITY,
        },
        "x-kubernetes-validations": [{
            "message": "invalid resource restricted",
            "rule": "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
        }],
    })
}

/// Requirement `values`.
pub fn requirement_values(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "An array of string values. If the operator is In or NotIn, the values array must be non-empty. If the operator is Exists or DoesNotExist, the values array must be empty. If the operator is Gt, Lt, Gte or Lte, the values array must have a single element, which will be interpreted as an integer.",
        "type": "array",
        "items": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
        "x-kubernetes-list-type": "atomic",
    })
}

/// NodePool `template.metadata.labels`.
pub fn template_labels(_: &mut SchemaGenerator) -> Schema {
    let mut rules = label_key_rules("x", true);
    let mut nodepool = nodepool_label_rule("x");
    nodepool["rule"] = format!(
        "self.all(x, {})",
        nodepool["rule"].as_str().unwrap_or_default()
    )
    .into();
    rules.push(nodepool);
    json_schema!({
        "description": "Labels applied to every NodeClaim and Node launched from this NodePool.",
        "type": "object",
        "maxProperties": 100,
        "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
        "x-kubernetes-validations": rules,
    })
}

/// metav1 `Condition` list (status), every field of an item required but
/// `observedGeneration`, as Karpenter's NodePool and NodeOverlay have it.
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    condition_list(
        generator,
        &["lastTransitionTime", "message", "reason", "status", "type"],
    )
}

/// metav1 `Condition` list as Karpenter's NodeClaim has it: `message` and `reason` optional.
pub fn claim_conditions(generator: &mut SchemaGenerator) -> Schema {
    condition_list(generator, &["lastTransitionTime", "status", "type"])
}

fn condition_list(generator: &mut SchemaGenerator, required: &[&str]) -> Schema {
    let mut item =
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>();
    if let Some(props) = item.get_mut("properties").and_then(|p| p.as_object_mut())
        && let Some(status) = props.get_mut("status").and_then(|s| s.as_object_mut())
    {
        status.insert(
            "enum".into(),
            serde_json::json!(["True", "False", "Unknown"]),
        );
    }
    item.insert("required".into(), serde_json::json!(required));
    json_schema!({
        "description": "Conditions contains signals for health and readiness.",
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}
