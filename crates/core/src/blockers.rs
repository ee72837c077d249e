//! What keeps a node from being disrupted gracefully (emptiness, consolidation), as Karpenter
//! defines it: `karpenter.sh/do-not-disrupt` on the Node or NodeClaim (`"true"`) or on any
//! active pod (`"true"`, or a duration counted from the pod's start), a PodDisruptionBudget
//! that allows no disruption (or more than one matching an evictable pod), and pods no
//! controller owns (they would be gone for good). The cost of disrupting a node's pods is
//! [`crate::cost`]'s.
//! Pure functions of typed objects.

use std::collections::BTreeMap;
use std::fmt;

use api::consts::annotations::DO_NOT_DISRUPT;
use api::selector::selector_matches;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

pub(crate) use crate::cost::disruption_cost;
use crate::objects::{annotation, deleting, namespaced_name, owned_by, terminal};

/// Whether a pod keeps its node from being empty: not owned by a DaemonSet or the Node
/// (static), not a mirror pod, not finished, not terminating.
pub(crate) fn reschedulable(pod: &Pod) -> bool {
    let mirror = annotation(pod, "kubernetes.io/config.mirror").is_some();
    !(owned_by(pod, &["DaemonSet", "Node"]) || mirror || terminal(pod) || deleting(pod))
}

/// Why a node may not be disrupted gracefully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// `karpenter.sh/do-not-disrupt: "true"` on the Node or its NodeClaim.
    NodeDoNotDisrupt { kind: &'static str, name: String },
    /// `karpenter.sh/do-not-disrupt` on a pod (`"true"` or a duration not yet elapsed).
    PodDoNotDisrupt { pod: String },
    /// A PDB matching an evictable pod allows no disruption now.
    PdbAllowsNone { pod: String, pdb: String },
    /// More than one PDB matches an evictable pod (the eviction API refuses those).
    PdbMultiple { pod: String, pdbs: Vec<String> },
    /// A pod no controller owns would not come back.
    NotControllerOwned { pod: String },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::NodeDoNotDisrupt { kind, name } => {
                write!(f, "{kind} {name} has do-not-disrupt")
            }
            Blocker::PodDoNotDisrupt { pod } => write!(f, "pod {pod} has do-not-disrupt"),
            Blocker::PdbAllowsNone { pod, pdb } => {
                write!(f, "PDB {pdb} allows 0 (pod {pod})")
            }
            Blocker::PdbMultiple { pod, pdbs } => {
                write!(
                    f,
                    "pod {pod} matches {} PDBs ({})",
                    pdbs.len(),
                    pdbs.join(", ")
                )
            }
            Blocker::NotControllerOwned { pod } => {
                write!(f, "pod {pod} is not owned by a controller")
            }
        }
    }
}

/// Whether `obj` carries `karpenter.sh/do-not-disrupt: "true"` (Nodes and NodeClaims accept
/// only that exact value).
pub(crate) fn do_not_disrupt<K: Resource>(obj: &K) -> bool {
    annotation(obj, DO_NOT_DISRUPT) == Some("true")
}

/// Whether a pod's `karpenter.sh/do-not-disrupt` holds at `now`: `"true"`, or a positive
/// duration not yet elapsed since the pod started (no start time: it holds). An invalid
/// value is ignored, as Karpenter does.
pub(crate) fn pod_do_not_disrupt(pod: &Pod, now: Timestamp) -> bool {
    let Some(value) = annotation(pod, DO_NOT_DISRUPT) else {
        return false;
    };
    if value == "true" {
        return true;
    }
    let Some(d) = api::duration::parse_duration(value).filter(|d| !d.is_zero()) else {
        return false;
    };
    let Some(start) = pod.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return true;
    };
    let Ok(d) = k8s_openapi::jiff::SignedDuration::try_from(d) else {
        return true;
    };
    start.0.checked_add(d).is_ok_and(|until| until > now)
}

/// Whether a pod is active (not finished, not terminating).
pub(crate) fn active(pod: &Pod) -> bool {
    !terminal(pod) && !deleting(pod)
}

/// Whether a pod tolerates `karpenter.sh/disrupted:NoSchedule` (it would come back).
pub(crate) fn tolerates_disrupted(pod: &Pod) -> bool {
    let taint = scheduling::Taint::new(
        api::consts::taints::DISRUPTED,
        "",
        scheduling::TaintEffect::NoSchedule,
    );
    crate::model::convert::pod(pod)
        .tolerations
        .iter()
        .any(|t| t.tolerates(&taint))
}

/// Whether the eviction API is used for a pod during a drain (so PDBs apply): active, not a
/// mirror pod, not tolerating the disrupted taint.
pub(crate) fn evictable(pod: &Pod) -> bool {
    active(pod)
        && annotation(pod, "kubernetes.io/config.mirror").is_none()
        && !tolerates_disrupted(pod)
}

/// Whether a pod has an owner reference marked `controller`.
pub(crate) fn controller_owned(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

/// Whether a pod is Ready.
fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The PDBs matching a pod (same namespace, selector matches).
pub(crate) fn matching_pdbs<'a>(
    pod: &Pod,
    pdbs: &'a [&'a PodDisruptionBudget],
) -> Vec<&'a PodDisruptionBudget> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    pdbs.iter()
        .copied()
        .filter(|b| b.metadata.namespace == pod.metadata.namespace)
        .filter(|b| {
            b.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .is_some_and(|s| selector_matches(s, labels))
        })
        .collect()
}

/// The PDB blocker of one evictable pod: more than one matching PDB, or one allowing no
/// disruption (an `AlwaysAllow` PDB lets an unready pod go).
pub(crate) fn pdb_blocker(pod: &Pod, pdbs: &[&PodDisruptionBudget]) -> Option<Blocker> {
    let matching = matching_pdbs(pod, pdbs);
    let pod_name = namespaced_name(pod);
    if matching.len() > 1 {
        let mut names: Vec<String> = matching.iter().map(|b| namespaced_name(*b)).collect();
        names.sort();
        return Some(Blocker::PdbMultiple {
            pod: pod_name,
            pdbs: names,
        });
    }
    let pdb = matching.first()?;
    let allowed = pdb
        .status
        .as_ref()
        .and_then(|s| s.disruptions_allowed)
        .unwrap_or(0);
    let always_allow = pdb
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
        == Some("AlwaysAllow");
    (allowed <= 0 && (!always_allow || pod_ready(pod))).then(|| Blocker::PdbAllowsNone {
        pod: pod_name,
        pdb: namespaced_name(*pdb),
    })
}

/// The first pod blocker among the pods bound to a node (`pods`: every pod on it,
/// DaemonSet and mirror pods included): do-not-disrupt on an active pod, a PDB of an
/// evictable pod, a reschedulable pod no controller owns. Pods in name order, so the answer
/// is stable.
pub(crate) fn pod_blocker(
    pods: &[&Pod],
    pdbs: &[&PodDisruptionBudget],
    now: Timestamp,
) -> Option<Blocker> {
    let mut sorted: Vec<&Pod> = pods.to_vec();
    sorted.sort_by_key(|p| namespaced_name(*p));
    for p in sorted.iter().filter(|p| active(p)) {
        if pod_do_not_disrupt(p, now) {
            return Some(Blocker::PodDoNotDisrupt {
                pod: namespaced_name(*p),
            });
        }
    }
    for p in sorted.iter().filter(|p| evictable(p)) {
        if let Some(b) = pdb_blocker(p, pdbs) {
            return Some(b);
        }
    }
    sorted
        .iter()
        .find(|p| reschedulable(p) && !controller_owned(p))
        .map(|p| Blocker::NotControllerOwned {
            pod: namespaced_name(*p),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    fn pdb(name: &str, selector: Value, allowed: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
        }))
        .expect("pdb")
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn web(name: &str, annotations: Value) -> Pod {
        pod(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]},
            "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": "Running", "startTime": "2026-11-22T10:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
    }

    #[test]
    fn do_not_disrupt_true_or_a_duration_from_start() {
        let now = at("2026-11-22T10:30:00Z");
        assert!(pod_do_not_disrupt(
            &web("a", json!({DO_NOT_DISRUPT: "true"})),
            now
        ));
        assert!(!pod_do_not_disrupt(
            &web("a", json!({DO_NOT_DISRUPT: "false"})),
            now
        ));
        assert!(pod_do_not_disrupt(
            &web("a", json!({DO_NOT_DISRUPT: "1h"})),
            now
        ));
        assert!(!pod_do_not_disrupt(
            &web("a", json!({DO_NOT_DISRUPT: "20m"})),
            now
        ));
        assert!(
            !pod_do_not_disrupt(&web("a", json!({DO_NOT_DISRUPT: "soon"})), now),
            "invalid is ignored"
        );
        let mut unstarted = web("a", json!({DO_NOT_DISRUPT: "20m"}));
        unstarted.status.as_mut().expect("status").start_time = None;
        assert!(pod_do_not_disrupt(&unstarted, now), "no start time: held");
    }

    #[test]
    fn pdbs_block_at_zero_allowed_or_when_two_match() {
        let p = web("web-0", json!({}));
        let zero = pdb("web", json!({"matchLabels": {"app": "web"}}), 0);
        let one = pdb(
            "web-1",
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}),
            1,
        );
        let other = pdb("db", json!({"matchLabels": {"app": "db"}}), 0);
        assert_eq!(pdb_blocker(&p, &[&other]), None);
        assert_eq!(pdb_blocker(&p, &[&one, &other]), None);
        assert_eq!(
            pdb_blocker(&p, &[&zero]).map(|b| b.to_string()).as_deref(),
            Some("PDB default/web allows 0 (pod default/web-0)")
        );
        assert!(matches!(
            pdb_blocker(&p, &[&zero, &one]),
            Some(Blocker::PdbMultiple { .. })
        ));
        // AlwaysAllow lets an unready pod go.
        let mut always = zero.clone();
        always
            .spec
            .as_mut()
            .expect("spec")
            .unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
        let mut unready = p.clone();
        unready.status.as_mut().expect("status").conditions = None;
        assert_eq!(pdb_blocker(&unready, &[&always]), None);
        assert!(pdb_blocker(&p, &[&always]).is_some());
    }

    #[test]
    fn pod_blockers_in_order_and_daemonsets_exempt_from_ownership() {
        let now = at("2026-11-22T10:30:00Z");
        let plain = web("a", json!({}));
        let held = web("b", json!({DO_NOT_DISRUPT: "true"}));
        let bare = pod(json!({"metadata": {"name": "bare", "namespace": "default"},
            "spec": {"containers": []}, "status": {"phase": "Running"}}));
        let ds = pod(json!({"metadata": {"name": "ds", "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]},
            "spec": {"containers": []}, "status": {"phase": "Running"}}));
        assert_eq!(pod_blocker(&[&plain, &ds], &[], now), None);
        assert_eq!(
            pod_blocker(&[&plain, &bare], &[], now),
            Some(Blocker::NotControllerOwned {
                pod: "default/bare".into()
            })
        );
        assert_eq!(
            pod_blocker(&[&bare, &held], &[], now),
            Some(Blocker::PodDoNotDisrupt {
                pod: "default/b".into()
            }),
            "do-not-disrupt is reported first"
        );
    }
}
