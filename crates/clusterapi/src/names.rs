//! Deterministic names of what the Cluster API provider creates. Labels, annotations,
//! taints and finalizers are `api::consts`, the project's single list.

use api::hash::fnv1a_32 as fnv1a;

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
