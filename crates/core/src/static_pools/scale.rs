//! Pure: what a static NodePool needs now — the NodeClaims to create (named, zoned) or the
//! ones to delete — from the cluster state and the creates not cached yet.
//!
//! - **Scale up** (Karpenter's static provisioning): while the pool's NodeClaims (those
//!   being deleted included, plus the creates in flight) are fewer than `replicas`, create
//!   the missing ones, no more than `limits.nodes` allows.
//! - **Scale down** (Karpenter's static deprovisioning, budgets do not apply): while the
//!   NodeClaims running (not being deleted, not a candidate of a disruption command) are
//!   more than `replicas`, delete the surplus: unresolved first (no providerID yet), then
//!   empty (no reschedulable pod, no do-not-disrupt pod), then the lowest disruption cost,
//!   nodes with a do-not-disrupt pod last. Never while a create is in flight.
//! - **Names** are deterministic: `<pool>-<hash of the pool's uid and a slot>`, the lowest
//!   slot no NodeClaim (cached or in flight) holds. A create repeated from a cache that has
//!   not seen the first — after a restart, a failover, a lost response — names the same
//!   object and gets "exists", never a second NodeClaim (Karpenter #2534).

use std::collections::{BTreeMap, BTreeSet};

use api::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::blockers::{disruption_cost, pod_do_not_disrupt, reschedulable};
use crate::objects::in_command;
use crate::objects::{deleting, name};
use crate::state::Cluster;

/// A NodeClaim to create: its name, and its zone when the pool spreads over zones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub name: String,
    pub zone: Option<String>,
}

/// What a static pool needs now.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    pub create: Vec<Slot>,
    /// NodeClaims to delete, in Karpenter's order.
    pub delete: Vec<String>,
    /// `limits.nodes` keeps the pool below `replicas`.
    pub at_limit: bool,
}

/// `spec.replicas`, for a static pool.
pub fn replicas(pool: &NodePool) -> Option<usize> {
    pool.spec
        .replicas
        .map(|r| usize::try_from(r.max(0)).unwrap_or(usize::MAX))
}

/// `limits.nodes`, if set and parsable.
pub(crate) fn node_limit(pool: &NodePool) -> Option<usize> {
    let limits = crate::model::convert::resources(&pool.spec.limits);
    limits
        .get("nodes")
        .map(|n| usize::try_from((*n).max(0)).unwrap_or(usize::MAX))
}

/// The deterministic name of slot `slot` of `pool` (see the module documentation).
pub fn slot_name(pool: &NodePool, slot: usize) -> String {
    let uid = pool.metadata.uid.as_deref().unwrap_or_default();
    let hash = api::hash::fnv1a_32(format!("{uid}/{slot}").as_bytes());
    let suffix = format!("{hash:08x}");
    let stem = name(pool);
    // Names are DNS subdomains: at most 253 characters.
    let keep = stem.len().min(253 - 1 - suffix.len());
    format!("{}-{suffix}", &stem[..keep])
}

/// The zone a NodeClaim is in or asks for: its label, or a single-valued zone requirement.
pub fn zone_of(claim: &NodeClaim) -> Option<&str> {
    if let Some(z) = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(scheduling::LABEL_ZONE))
    {
        return Some(z);
    }
    claim
        .spec
        .requirements
        .iter()
        .find(|r| {
            r.key == scheduling::LABEL_ZONE
                && r.operator == api::karpenter::Operator::In
                && r.values.len() == 1
        })
        .map(|r| r.values[0].as_str())
}

/// The plan for `pool` in `cluster`. `in_flight`: NodeClaims of the pool this process
/// created that the cache does not show yet (name → zone); `zones`: where its claims may go
/// when it spreads (empty: no spread).
pub fn plan(
    pool: &NodePool,
    cluster: &Cluster,
    in_flight: &BTreeMap<String, Option<String>>,
    zones: &[String],
    now: Timestamp,
) -> Plan {
    let Some(replicas) = replicas(pool) else {
        return Plan::default();
    };
    let claims: Vec<(&NodeClaim, Option<&Node>)> = cluster
        .claims_of_pool(name(pool))
        .map(|(c, n)| (c.as_ref(), n.map(|n| n.as_ref())))
        .collect();
    let total = claims.len() + in_flight.len();
    if total < replicas {
        let mut wanted = replicas - total;
        let mut at_limit = false;
        if let Some(limit) = node_limit(pool) {
            let room = limit.saturating_sub(total);
            at_limit = room < wanted;
            wanted = wanted.min(room);
        }
        let taken: BTreeSet<&str> = claims
            .iter()
            .map(|(c, _)| name(*c))
            .chain(in_flight.keys().map(String::as_str))
            .collect();
        let names = free_slots(pool, &taken, wanted);
        let zones = spread(&claims, in_flight, zones, wanted);
        return Plan {
            create: names
                .into_iter()
                .zip(zones)
                .map(|(name, zone)| Slot { name, zone })
                .collect(),
            delete: Vec::new(),
            at_limit,
        };
    }
    let running: Vec<(&NodeClaim, Option<&Node>)> = claims
        .into_iter()
        .filter(|(c, _)| !deleting(*c) && !in_command(c))
        .collect();
    if !in_flight.is_empty() || running.len() <= replicas || deleting(pool) {
        return Plan::default();
    }
    let surplus = running.len() - replicas;
    Plan {
        delete: scale_down_order(cluster, &running, now)
            .into_iter()
            .take(surplus)
            .map(str::to_string)
            .collect(),
        ..Plan::default()
    }
}

/// The names of the `n` lowest slots of `pool` not `taken`.
fn free_slots(pool: &NodePool, taken: &BTreeSet<&str>, n: usize) -> Vec<String> {
    (0..)
        .map(|slot| slot_name(pool, slot))
        .filter(|s| !taken.contains(s.as_str()))
        .take(n)
        .collect()
}

/// The zones of `n` new claims: each to the zone holding the fewest of the pool's claims
/// (not being deleted) and creates in flight, ties in zone order; all `None` without zones.
fn spread(
    claims: &[(&NodeClaim, Option<&Node>)],
    in_flight: &BTreeMap<String, Option<String>>,
    zones: &[String],
    n: usize,
) -> Vec<Option<String>> {
    if zones.is_empty() {
        return vec![None; n];
    }
    let mut count: BTreeMap<&str, usize> = zones.iter().map(|z| (z.as_str(), 0)).collect();
    let held = claims
        .iter()
        .filter(|(c, _)| !deleting(*c))
        .filter_map(|(c, _)| zone_of(c))
        .chain(in_flight.values().filter_map(|z| z.as_deref()));
    for z in held {
        if let Some(k) = count.get_mut(z) {
            *k += 1;
        }
    }
    (0..n)
        .map(|_| {
            let (zone, k) = count
                .iter_mut()
                .min_by_key(|(z, k)| (**k, **z))
                .map(|(z, k)| (z.to_string(), k))?;
            *k += 1;
            Some(zone)
        })
        .collect()
}

/// The running claims in the order Karpenter scales a static pool down.
fn scale_down_order<'a>(
    cluster: &'a Cluster,
    running: &[(&'a NodeClaim, Option<&'a Node>)],
    now: Timestamp,
) -> Vec<&'a str> {
    // (class, cost, creation) per claim.
    type Key = (u8, u64, Option<Timestamp>);
    let mut keyed: Vec<(Key, &str)> = running
        .iter()
        .map(|(c, node)| {
            let unresolved = c
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_none_or(str::is_empty);
            let bound: Vec<&Pod> = node
                .and_then(|n| cluster.bound(name(n)))
                .map(|b| b.pods.iter().map(|p| p.as_ref()).collect())
                .unwrap_or_default();
            let pods: Vec<&Pod> = bound.iter().copied().filter(|p| reschedulable(p)).collect();
            let protected = bound.iter().any(|p| pod_do_not_disrupt(p, now));
            let class = match (unresolved, pods.is_empty(), protected) {
                (true, _, _) => 0,
                (false, true, false) => 1,
                (false, false, false) => 2,
                (false, _, true) => 3,
            };
            let cost = if class == 2 {
                disruption_cost(&pods).to_bits()
            } else {
                0
            };
            // Newest first among equals: the one that has done the least.
            let age = c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            ((class, cost, age), name(*c))
        })
        .collect();
    keyed.sort_by(|(a, an), (b, bn)| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| b.2.cmp(&a.2))
            .then_with(|| an.cmp(bn))
    });
    keyed.into_iter().map(|(_, n)| n).collect()
}
