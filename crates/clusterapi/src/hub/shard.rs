//! Which replica of a hub owns which Cluster (issue 24, item 6).
//!
//! - **Rendezvous** (highest random weight) hashing over the live peers ([`owner`]): each
//!   Cluster goes to the peer with the highest [`hash`]`("<ns>/<name>|<peer>")`, ties to the
//!   greater peer id. Every replica computes the same owner from the same peer set; a peer
//!   that leaves moves only its own Clusters, one that joins takes only the Clusters it now
//!   wins (multicluster-runtime's sharded coordinator does the same).
//! - **Static** shards (`--shard-count N --shard-index I`, [`static_shard`]): Cluster
//!   `ns/name` belongs to shard [`hash`]`("<ns>/<name>") % N`; no peer Leases.
//!
//! Whoever owns a Cluster also holds its fence Lease ([`fence_name`]) before it engages it;
//! the hash only says who should, the Lease guarantees one at a time.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Ownership;
use crate::catalogs::ClusterKey;

/// Where the hub's Leases (peers and fences) live and how long they last: the leader
/// election settings of `run` (namespace, this replica's identity, duration, renew grace).
#[derive(Clone, Debug)]
pub struct Fencing {
    pub namespace: String,
    pub identity: String,
    /// A Lease's validity after its last renewal (fences and peers alike).
    pub duration: Duration,
    /// Renew this long before expiry.
    pub grace: Duration,
}

impl Fencing {
    /// How often a held Lease is renewed.
    pub(crate) fn renew_every(&self) -> Duration {
        self.duration
            .saturating_sub(self.grace)
            .max(Duration::from_secs(1))
    }
}

/// `--shard-count N --shard-index I`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticShard {
    pub count: u32,
    pub index: u32,
}

/// FNV-1a, 64 bits: stable across releases and platforms (unlike `std`'s hasher).
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The hash of sharding: FNV-1a 64 then MurmurHash3's 64-bit finalizer. FNV-1a alone
/// mixes its low bits badly (its lowest bit is the parity of the bytes' lowest bits), and
/// `% N` reads exactly those.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut h = fnv1a64(bytes);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The peer that owns `cluster` among `peers` (rendezvous hashing); `None` without peers.
pub fn owner<'a>(cluster: &ClusterKey, peers: &'a [String]) -> Option<&'a str> {
    peers
        .iter()
        .map(|p| (hash(format!("{cluster}|{p}").as_bytes()), p.as_str()))
        .max()
        .map(|(_, p)| p)
}

/// Whether shard `shard` owns `cluster`.
pub fn static_shard(cluster: &ClusterKey, shard: StaticShard) -> bool {
    shard.count > 0
        && hash(cluster.to_string().as_bytes()) % u64::from(shard.count) == u64::from(shard.index)
}

/// The longest name of an object (a DNS subdomain).
const MAX_NAME: usize = 253;

/// The fence Lease of `cluster`: `karpenter-capi-cluster-<ns>.<name>` (a namespace has no
/// dot, so no two Clusters share one), or `karpenter-capi-cluster-<hash>` when too long.
pub fn fence_name(cluster: &ClusterKey) -> String {
    let name = format!(
        "karpenter-capi-cluster-{}.{}",
        cluster.namespace, cluster.name
    );
    if name.len() <= MAX_NAME {
        return name;
    }
    format!(
        "karpenter-capi-cluster-{:016x}",
        fnv1a64(cluster.to_string().as_bytes())
    )
}

/// The peer Lease of replica `identity`: `karpenter-capi-peer-<identity>`, the identity
/// made a valid name (lowercase letters, digits, `-`, `.`), hashed when too long.
pub fn peer_lease_name(identity: &str) -> String {
    let clean: String = identity
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let clean = clean.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let name = format!("karpenter-capi-peer-{clean}");
    if !clean.is_empty() && name.len() <= MAX_NAME && clean == identity {
        return name;
    }
    // Changed or too long: a hash keeps two identities that clean up alike apart.
    let short: String = clean.chars().take(40).collect();
    let short = short.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    format!(
        "karpenter-capi-peer-{short}-{:016x}",
        fnv1a64(identity.as_bytes())
    )
}

/// Rendezvous ownership over the live peers the peer registry publishes.
pub struct Rendezvous {
    pub identity: String,
    pub peers: watch::Receiver<Vec<String>>,
}

impl Ownership for Rendezvous {
    fn owns(&self, cluster: &ClusterKey) -> bool {
        let peers = self.peers.borrow();
        owner(cluster, &peers) == Some(self.identity.as_str())
    }

    fn changes(&self) -> Option<watch::Receiver<Vec<String>>> {
        Some(self.peers.clone())
    }
}

/// `--shard-count/--shard-index` ownership.
pub struct Static(pub StaticShard);

impl Ownership for Static {
    fn owns(&self, cluster: &ClusterKey) -> bool {
        static_shard(cluster, self.0)
    }
}

/// The ownership a hub uses: static shards when given, else rendezvous over `peers` when
/// fenced, else every Cluster.
pub fn ownership(
    shard: Option<StaticShard>,
    fencing: Option<&Fencing>,
    peers: Option<watch::Receiver<Vec<String>>>,
) -> Arc<dyn Ownership> {
    match (shard, fencing, peers) {
        (Some(s), _, _) => Arc::new(Static(s)),
        (None, Some(f), Some(peers)) => Arc::new(Rendezvous {
            identity: f.identity.clone(),
            peers,
        }),
        _ => Arc::new(super::AllClusters),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn key(i: usize) -> ClusterKey {
        ClusterKey {
            namespace: format!("tenant-{}", i % 7),
            name: format!("cluster-{i}"),
        }
    }

    fn peers(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fnv_is_the_reference_function() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn rendezvous_is_deterministic_and_independent_of_peer_order() {
        let a = peers(&["hub-0", "hub-1", "hub-2"]);
        let b = peers(&["hub-2", "hub-0", "hub-1"]);
        for i in 0..200 {
            assert_eq!(owner(&key(i), &a), owner(&key(i), &b));
        }
        assert_eq!(owner(&key(0), &[]), None);
        assert_eq!(owner(&key(0), &peers(&["only"])), Some("only"));
    }

    #[test]
    fn rendezvous_spreads_clusters_over_peers() {
        let ps = peers(&["hub-0", "hub-1", "hub-2"]);
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for i in 0..3000 {
            *count
                .entry(owner(&key(i), &ps).expect("owner"))
                .or_default() += 1;
        }
        assert_eq!(count.len(), 3, "{count:?}");
        for (p, n) in &count {
            assert!((800..=1200).contains(n), "{p} owns {n} of 3000: {count:?}");
        }
    }

    #[test]
    fn removing_a_peer_moves_only_its_clusters_and_adding_one_only_takes() {
        let before = peers(&["hub-0", "hub-1", "hub-2", "hub-3"]);
        let after = peers(&["hub-0", "hub-1", "hub-3"]);
        let mut moved = 0;
        for i in 0..1000 {
            let (was, is) = (owner(&key(i), &before), owner(&key(i), &after));
            if was == Some("hub-2") {
                moved += 1;
                assert_ne!(is, Some("hub-2"));
            } else {
                assert_eq!(was, is, "{} moved though its owner stayed", key(i));
            }
        }
        assert!(moved > 0);
        // Adding hub-2 back: every Cluster that moves, moves to hub-2.
        for i in 0..1000 {
            let (was, is) = (owner(&key(i), &after), owner(&key(i), &before));
            if was != is {
                assert_eq!(is, Some("hub-2"), "{}", key(i));
            }
        }
    }

    #[test]
    fn static_shards_are_balanced_even_for_two() {
        for count in [2u32, 4] {
            for index in 0..count {
                let n = (0..1000)
                    .filter(|i| static_shard(&key(*i), StaticShard { count, index }))
                    .count();
                let even = 1000 / count as usize;
                assert!(n.abs_diff(even) < even / 5, "shard {index}/{count}: {n}");
            }
        }
    }

    #[test]
    fn static_shards_partition_the_clusters() {
        for count in 1..5u32 {
            for i in 0..300 {
                let owners: Vec<u32> = (0..count)
                    .filter(|index| {
                        static_shard(
                            &key(i),
                            StaticShard {
                                count,
                                index: *index,
                            },
                        )
                    })
                    .collect();
                assert_eq!(owners.len(), 1, "{} in {count} shards: {owners:?}", key(i));
            }
        }
        let k = key(42);
        let shard = (hash(b"tenant-0/cluster-42") % 3) as u32;
        assert!(static_shard(
            &k,
            StaticShard {
                count: 3,
                index: shard
            }
        ));
        assert!(
            !static_shard(&k, StaticShard { count: 0, index: 0 }),
            "no shard of zero"
        );
    }

    #[test]
    fn lease_names_are_valid_and_distinct() {
        let k = ClusterKey {
            namespace: "a-b".into(),
            name: "c".into(),
        };
        let other = ClusterKey {
            namespace: "a".into(),
            name: "b-c".into(),
        };
        assert_eq!(fence_name(&k), "karpenter-capi-cluster-a-b.c");
        assert_ne!(fence_name(&k), fence_name(&other));
        let long = ClusterKey {
            namespace: "n".repeat(63),
            name: "x".repeat(200),
        };
        let name = fence_name(&long);
        assert!(
            name.len() <= MAX_NAME && name.starts_with("karpenter-capi-cluster-"),
            "{name}"
        );
        assert_eq!(peer_lease_name("hub-0"), "karpenter-capi-peer-hub-0");
        let odd = peer_lease_name("Hub_0");
        assert!(odd.starts_with("karpenter-capi-peer-hub-0-"), "{odd}");
        assert_ne!(odd, peer_lease_name("hub-0"));
        assert!(peer_lease_name(&"h".repeat(300)).len() <= MAX_NAME);
    }
}
