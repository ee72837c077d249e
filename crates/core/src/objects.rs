//! Typed reads shared by the loops that decide from cached objects (provisioning,
//! disruption, NodePool status): conditions, deletion, where a pod runs, which NodePool a
//! NodeClaim belongs to.

use api::conditions as cond;
use api::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;

/// Whether `obj` has a deletionTimestamp.
pub fn deleting<K: Resource>(obj: &K) -> bool {
    obj.meta().deletion_timestamp.is_some()
}

/// Whether a Node's `Ready` condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a NodeClaim has condition `type_` True.
pub(crate) fn claim_condition(claim: &NodeClaim, type_: &str) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| cond::is_true(&s.conditions, type_))
}

/// Whether a NodeClaim is being rebooted by repair (`Rebooting` True): excluded from other
/// disruption, and counted against every budget.
pub(crate) fn rebooting(claim: &NodeClaim) -> bool {
    claim_condition(claim, api::consts::conditions::REBOOTING)
}

/// Whether a NodePool has condition `type_` True.
pub(crate) fn pool_condition(pool: &NodePool, type_: &str) -> bool {
    pool.status
        .as_ref()
        .is_some_and(|s| cond::is_true(&s.conditions, type_))
}

/// The NodePool a NodeClaim belongs to (its `karpenter.sh/nodepool` label).
pub fn nodepool_of(claim: &NodeClaim) -> Option<&str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get(scheduling::LABEL_NODEPOOL)
        .map(String::as_str)
}

/// The Node a NodeClaim registered as (empty names are none).
pub fn claim_node_name(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// The Node a pod is bound to (empty names are none).
pub fn pod_node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// Whether a pod has finished (`Succeeded` or `Failed`).
pub fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether an owner reference of `obj` is of `kind`.
pub fn owned_by<K: Resource>(obj: &K, kinds: &[&str]) -> bool {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| kinds.contains(&o.kind.as_str()))
}

/// Annotation `key` of `obj`.
pub fn annotation<'a, K: Resource>(obj: &'a K, key: &str) -> Option<&'a str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// A boolean annotation (`"true"` on): `Ok(true)` for `"true"`, `Ok(false)` when absent or
/// `"false"`; any other value is off too, returned as `Err(value)` so the caller can warn
/// ([`unknown_flag_note`]) instead of leaving a typo silently off.
pub fn flag<'a, K: Resource>(obj: &'a K, key: &str) -> Result<bool, &'a str> {
    match annotation(obj, key) {
        Some("true") => Ok(true),
        None | Some("false") => Ok(false),
        Some(other) => Err(other),
    }
}

/// The note of an `UnknownAnnotationValue` Warning about [`flag`] `key` holding `value`.
pub(crate) fn unknown_flag_note(key: &str, value: &str) -> String {
    format!(
        "annotation {key} is \"{value}\", read as off: only \"true\" turns it on (\"false\" or none: off)"
    )
}

/// `namespace/name` of a namespaced object.
pub fn namespaced_name<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// The name of `obj` (empty when unset).
pub fn name<K: Resource>(obj: &K) -> &str {
    obj.meta().name.as_deref().unwrap_or_default()
}

/// FNV-1a 64 of `text`: a hash that is stable across processes and versions.
pub fn fnv64(text: &str) -> u64 {
    api::hash::fnv1a_64(text.as_bytes())
}

/// `v` without nulls, empty objects and empty arrays (at any depth), so that an absent
/// field and an empty one hash alike.
pub fn pruned(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let empty = |v: &Value| {
        v.is_null()
            || v.as_object().is_some_and(|o| o.is_empty())
            || v.as_array().is_some_and(|a| a.is_empty())
    };
    match v {
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (k, pruned(v)))
                .filter(|(_, v)| !empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(pruned).collect()),
        other => other,
    }
}

/// Karpenter's provisionable pod.
pub fn provisionable(p: &Pod) -> bool {
    let spec = p.spec.as_ref();
    let status = p.status.as_ref();
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    let bound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let owned_by_node = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" || o.kind == "Node");
    let terminating = p.metadata.deletion_timestamp.is_some();
    let preempting = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    unschedulable && !bound && !owned_by_node && !terminating && !preempting
}

/// Whether a pod asks not to run on a Karpenter node: `karpenter.sh/nodepool DoesNotExist`
/// among the requirements Karpenter reads from it (its first required node selector term
/// and its heaviest preferred one). Karpenter ignores such pods, without an event.
pub fn avoids_karpenter(p: &Pod) -> bool {
    let Some(affinity) = p
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return false;
    };
    let required = affinity
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .and_then(|r| r.node_selector_terms.first());
    let preferred = affinity
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .max_by_key(|t| t.weight)
        .map(|t| &t.preference);
    required.into_iter().chain(preferred).any(|term| {
        term.match_expressions
            .iter()
            .flatten()
            .any(|e| e.key == api::consts::labels::NODEPOOL && e.operator == "DoesNotExist")
    })
}

/// The UID of an object (empty when the API server did not set one).
pub fn uid_of<K: Resource>(obj: &K) -> String {
    obj.meta().uid.clone().unwrap_or_default()
}

pub use cloudprovider::provider::claim_requests;

/// Whether a NodeClaim is a candidate of a disruption command in flight (it carries the
/// command's annotation).
pub(crate) fn in_command(claim: &NodeClaim) -> bool {
    annotation(claim, api::consts::annotations::DISRUPTION_COMMAND).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(affinity: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "affinity": affinity}
        }))
        .expect("pod")
    }

    #[test]
    fn a_flag_is_true_false_or_a_value_to_warn_about() {
        let with = |v: Option<&str>| -> Pod {
            let mut p = pod(serde_json::json!(null));
            p.metadata.annotations =
                v.map(|v| std::iter::once(("k".to_string(), v.to_string())).collect());
            p
        };
        assert_eq!(flag(&with(Some("true")), "k"), Ok(true));
        assert_eq!(flag(&with(Some("false")), "k"), Ok(false));
        assert_eq!(flag(&with(None), "k"), Ok(false));
        for odd in ["yes", "True", "1", ""] {
            assert_eq!(flag(&with(Some(odd)), "k"), Err(odd));
        }
        assert_eq!(
            unknown_flag_note("k", "yes"),
            "annotation k is \"yes\", read as off: only \"true\" turns it on (\"false\" or none: off)"
        );
    }

    #[test]
    fn a_pod_requiring_no_nodepool_label_avoids_karpenter_as_karpenter_reads_it() {
        let expr = |op: &str| serde_json::json!({"key": "karpenter.sh/nodepool", "operator": op});
        let required = |terms: serde_json::Value| {
            pod(
                serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}),
            )
        };
        assert!(avoids_karpenter(&required(
            serde_json::json!([{"matchExpressions": [expr("DoesNotExist")]}])
        )));
        // Only the first term is read (the others are alternatives Karpenter relaxes to).
        assert!(!avoids_karpenter(&required(
            serde_json::json!([{"matchExpressions": [expr("Exists")]}, {"matchExpressions": [expr("DoesNotExist")]}])
        )));
        // The heaviest preference counts, a lighter one does not.
        let preferred = |heavy: &str, light: &str| {
            pod(
                serde_json::json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [expr(light)]}},
                    {"weight": 90, "preference": {"matchExpressions": [expr(heavy)]}}
                ]}}),
            )
        };
        assert!(avoids_karpenter(&preferred("DoesNotExist", "Exists")));
        assert!(!avoids_karpenter(&preferred("Exists", "DoesNotExist")));
        assert!(!avoids_karpenter(&pod(serde_json::json!(null))));
    }
}
