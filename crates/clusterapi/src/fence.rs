//! Fencing: which Cluster API objects belong to this operator.
//!
//! Several workload clusters may share one management cluster, even one namespace (the
//! split-cluster topology). Everything we create — the Machine, the InfraMachine clone and
//! the bootstrap config clone — carries two marks:
//! - label `karpenter.cluster.x-k8s.io/cluster-id`: the workload cluster that asked for it
//!   (`--cluster-id`, by default the UID of the workload cluster's `kube-system` namespace);
//! - annotation `karpenter.cluster.x-k8s.io/nodeclaim-uid`: the NodeClaim it was made for.
//!
//! Our Machine watch sees only objects with our cluster id; garbage collection, launch
//! adoption and termination act only on objects whose NodeClaim-UID mark is the NodeClaim's
//! own. Objects created before fencing existed carry no cluster-id label: they are adopted
//! (the label is added) by the NodeClaim whose UID their annotation names, when it next
//! reconciles; one whose UID matches none of our NodeClaims is never touched (it may be
//! another workload cluster's).

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client, Resource, ResourceExt};

#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error(
        "--cluster-id '{0}' is not a valid label value (at most 63 characters: letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
    )]
    Invalid(String),
    #[error(
        "reading the UID of namespace kube-system (the default --cluster-id): {0}; set --cluster-id"
    )]
    Namespace(#[source] kube::Error),
    #[error("namespace kube-system has no UID; set --cluster-id")]
    NoUid,
}

/// Whether `v` is a valid, non-empty label value.
pub(crate) fn valid_label_value(v: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !v.is_empty()
        && v.len() <= 63
        && v.starts_with(alnum)
        && v.ends_with(alnum)
        && v.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// The cluster id: `configured`, or the UID of the workload cluster's kube-system namespace.
pub async fn cluster_id(workload: &Client, configured: Option<&str>) -> Result<String, FenceError> {
    if let Some(id) = configured {
        return if valid_label_value(id) {
            Ok(id.to_string())
        } else {
            Err(FenceError::Invalid(id.to_string()))
        };
    }
    let ns: Api<Namespace> = Api::all(workload.clone());
    let found = ns.get("kube-system").await.map_err(FenceError::Namespace)?;
    found.metadata.uid.ok_or(FenceError::NoUid)
}

/// The label selector of our objects: our NodeClaim label and our cluster id.
pub(crate) fn selector(cluster_id: &str) -> String {
    format!(
        "{},{}={cluster_id}",
        api::consts::labels::NODECLAIM,
        api::consts::labels::CLUSTER_ID
    )
}

/// The NodeClaim UID an object is marked with.
pub(crate) fn claim_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(api::consts::annotations::NODECLAIM_UID)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// The cluster id an object is labelled with.
pub(crate) fn cluster_of<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .labels
        .as_ref()?
        .get(api::consts::labels::CLUSTER_ID)
        .map(String::as_str)
}

/// What a NodeClaim (UID `uid`, of cluster `cluster_id`) may do with an object it finds
/// under a name of its plan.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// Ours, marked with our cluster id.
    Ours,
    /// Ours (our NodeClaim UID) but from before fencing: add our cluster id.
    Adopt,
    /// Another NodeClaim's, or another workload cluster's: never touched.
    Foreign,
}

pub(crate) fn ownership<K: Resource>(obj: &K, uid: &str, cluster_id: &str) -> Ownership {
    if uid.is_empty() || claim_uid(obj) != Some(uid) {
        return Ownership::Foreign;
    }
    match cluster_of(obj) {
        Some(c) if c == cluster_id => Ownership::Ours,
        None => Ownership::Adopt,
        Some(_) => Ownership::Foreign,
    }
}

/// `namespace/name` of an object, for logs.
pub(crate) fn key<K: Resource>(obj: &K) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;
    use serde_json::json;

    fn obj(uid: Option<&str>, cluster: Option<&str>) -> DynamicObject {
        let mut meta = json!({"name": "m", "namespace": "ns"});
        if let Some(u) = uid {
            meta["annotations"] = json!({api::consts::annotations::NODECLAIM_UID: u});
        }
        if let Some(c) = cluster {
            meta["labels"] = json!({api::consts::labels::CLUSTER_ID: c});
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "X", "metadata": meta}))
            .expect("fixture")
    }

    #[test]
    fn ownership_needs_our_uid_and_our_cluster() {
        assert_eq!(
            ownership(&obj(Some("u1"), Some("c1")), "u1", "c1"),
            Ownership::Ours
        );
        assert_eq!(
            ownership(&obj(Some("u1"), None), "u1", "c1"),
            Ownership::Adopt
        );
        assert_eq!(
            ownership(&obj(Some("u1"), Some("c2")), "u1", "c1"),
            Ownership::Foreign
        );
        assert_eq!(
            ownership(&obj(Some("u2"), Some("c1")), "u1", "c1"),
            Ownership::Foreign
        );
        assert_eq!(
            ownership(&obj(None, Some("c1")), "u1", "c1"),
            Ownership::Foreign
        );
        assert_eq!(
            ownership(&obj(Some(""), None), "", "c1"),
            Ownership::Foreign
        );
    }

    #[test]
    fn cluster_ids_must_be_label_values() {
        assert!(valid_label_value("0f3c6a4e-1b2d-4c5e-8f90-123456789abc"));
        assert!(valid_label_value("prod.eu-1"));
        for bad in ["", "-a", "a-", "a b", "a/b", &"x".repeat(64)] {
            assert!(!valid_label_value(bad), "{bad:?}");
        }
        assert_eq!(
            selector("c1"),
            "karpenter.cluster.x-k8s.io/nodeclaim,karpenter.cluster.x-k8s.io/cluster-id=c1"
        );
    }
}
