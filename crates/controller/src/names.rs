//! The names the control loops use, under the names the loops know them by. Every value
//! comes from `api::consts`, the project's single list of labels, annotations, taints and
//! finalizers.

use api::consts::{annotations, finalizers, groups, labels, taints};
use api::hash::fnv1a_32 as fnv1a;

pub const CAPI_GROUP: &str = groups::CLUSTER_API;
pub const CAPI_VERSION: &str = groups::CLUSTER_API_VERSION;
pub const CAPI_CLUSTER_NAME_LABEL: &str = labels::CLUSTER_NAME;
pub const CAPI_SET_NAME_LABEL: &str = labels::SET_NAME;
pub const CAPI_DEPLOYMENT_NAME_LABEL: &str = labels::DEPLOYMENT_NAME;
pub const CAPI_CLONED_FROM_NAME_ANNOTATION: &str = annotations::CLONED_FROM_NAME;
pub const CAPI_CLONED_FROM_GROUPKIND_ANNOTATION: &str = annotations::CLONED_FROM_GROUPKIND;
pub const DO_NOT_SYNC_TAINTS_LABEL: &str = labels::DO_NOT_SYNC_TAINTS;
pub const NODE_REGISTERED_LABEL: &str = labels::REGISTERED;
pub const NODE_INITIALIZED_LABEL: &str = labels::INITIALIZED;
pub const UNREGISTERED_TAINT_KEY: &str = taints::UNREGISTERED;
pub const TERMINATION_FINALIZER: &str = finalizers::TERMINATION;
/// Taints expected while a node starts (Karpenter's known ephemeral taints).
pub const EPHEMERAL_TAINT_KEYS: &[&str] = taints::EPHEMERAL;
pub const READINESS_TAINT_PREFIX: &str = taints::READINESS_PREFIX;
pub const NODEPOOL_LABEL: &str = labels::NODEPOOL;
pub const NODECLAIM_LABEL: &str = labels::NODECLAIM;
pub const KARPENTER_MEMBER_LABEL: &str = labels::KARPENTER_MEMBER;
/// On a NodeClaim: `<namespace>/<name>` of its Machine.
pub const CAPI_MACHINE_ANNOTATION: &str = annotations::MACHINE;
/// On a NodeClaim: the launch plan (JSON), written before anything is created.
pub const LAUNCH_PLAN_ANNOTATION: &str = annotations::LAUNCH_PLAN;
/// On the Machine and its clones: the UID of the NodeClaim they were created for.
pub const NODECLAIM_UID_ANNOTATION: &str = annotations::NODECLAIM_UID;
/// On the Machine and its clones: the workload cluster that asked for them.
pub const CLUSTER_ID_LABEL: &str = labels::CLUSTER_ID;

/// The name of the Machine (and of its clones) of NodeClaim `claim` for workload cluster
/// `cluster_id`: the NodeClaim's name plus a short, stable hash of the cluster id, so that
/// two workload clusters sharing a management namespace never pick the same name, and a
/// restarted operator derives the same name again (and adopts what it finds).
pub fn object_name(claim: &str, cluster_id: &str) -> String {
    let suffix = format!("{:08x}", fnv1a(cluster_id.as_bytes()));
    // Object names are DNS subdomains (at most 253 characters).
    let keep = claim.len().min(253 - 1 - suffix.len());
    let mut stem: String = claim
        .char_indices()
        .take_while(|(i, c)| i + c.len_utf8() <= keep)
        .map(|(_, c)| c)
        .collect();
    while stem.ends_with(['-', '.']) {
        stem.pop();
    }
    format!("{stem}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_differ_per_cluster_and_are_stable() {
        let a = object_name("default-x7k2p", "cluster-a");
        let b = object_name("default-x7k2p", "cluster-b");
        assert_ne!(a, b, "same NodeClaim name, two workload clusters");
        assert_eq!(
            a,
            object_name("default-x7k2p", "cluster-a"),
            "deterministic"
        );
        assert!(a.starts_with("default-x7k2p-") && a.len() == "default-x7k2p-".len() + 8);
        // Pinned: a restart of a newer release must derive the same names.
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        let long = object_name(&"n".repeat(300), "c");
        assert_eq!(long.len(), 253);
    }
}
