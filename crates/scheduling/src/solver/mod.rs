//! The scheduling simulation (Karpenter's `Scheduler.Solve`).
//!
//! Setup interns every label key and value, turns resources into dense vectors, precomputes per
//! NodePool the compatible instance types (as bitsets), their allocatable minus daemonset
//! overhead, and the topology groups of every spread / (anti-)affinity term. The solve then pops
//! pods in Karpenter's queue order (a disruption's moving pods after the others) and tries
//! existing nodes, planned NodeClaims (fewest pods first, as Karpenter sorts them) and finally
//! a new NodeClaim per NodePool (by weight); a pod that fits nowhere is relaxed one preference
//! at a time and requeued.
//!
//! A pod's volumes narrow the node it lands on by one topology alternative at a time (see
//! [`pod::PodData::relax`]) and count against per-driver attach limits of existing nodes and
//! of the instance types a planned NodeClaim keeps (see [`volumes`]).

#[cfg(test)]
mod ahead_tests;
mod allocate;
mod build;
mod count_order;
mod dra;
mod groups;
mod helper;
#[cfg(test)]
mod memo_tests;
mod network;
mod output;
mod pack;
mod pod;
mod price;
mod room;
mod selectors;
mod setup_pods;
mod source;
mod topology;
mod volumes;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::Failure;
use crate::intern::{BitSet, HashMap, Interner, Key, Sym};
use crate::model::*;
use crate::requirements::{Operator, Reqs, Requirement, ValueSet};

use count_order::CountOrder;
use pod::PodData;
use topology::Group;
use volumes::Attached;

type IReqs = Reqs<Key, Sym>;
type ISet = ValueSet<Sym>;
/// See [`Solver::compat`]: shared by the packings, which may run on two threads.
type Compat = Arc<std::sync::Mutex<Vec<HashMap<IReqs, Arc<BitSet>>>>>;
/// Namespace and labels of a pod.
type MatchKey = (u32, Vec<(Key, Sym)>);

/// Instance types kept on a NodeClaim, cheapest first.
pub const MAX_INSTANCE_TYPES: usize = 600;

#[derive(Clone)]
struct TypeData {
    name: String,
    reqs: IReqs,
    /// Allocatable minus the pool's daemonset overhead for this type.
    usable: Vec<i64>,
    capacity: Vec<i64>,
    overhead_ds: Vec<i64>,
    /// Reserved first, then by price.
    offerings: Vec<Off>,
    /// The price of its cheapest available offering (infinite: none is available).
    cheapest_available: f64,
    /// Some offering draws from a count.
    counted: bool,
    taints: Vec<Taint>,
    /// Attach limit per interned driver ([`volumes::UNLIMITED`]; empty: none declared).
    vol_limit: Vec<u32>,
    /// Its devices' source (see [`dra`]), when a node of it publishes devices and some pod
    /// claims devices.
    dev: Option<u32>,
}

/// Preference of an offering: not reserved (reserved first), price. See [`by_rank`].
type Rank = (bool, f64);

/// Orders ranks: reserved first, then the cheapest.
fn by_rank(a: Rank, b: Rank) -> std::cmp::Ordering {
    a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
}

/// No count: [`Off::count`] of an unbounded offering.
const UNCOUNTED: u32 = u32::MAX;

/// One offering of a type, interned.
#[derive(Clone, Copy, Debug)]
struct Off {
    zone: Sym,
    ct: Sym,
    price: f64,
    /// `karpenter.sh/capacity-type: reserved`: preferred over any other.
    reserved: bool,
    available: bool,
    /// Index into [`Solver::counts`], or [`UNCOUNTED`].
    count: u32,
}

/// Whether offering counts are checked: not when the pool's types are first filtered (an
/// exhausted count is a failure of its own), else against what a claim holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counts {
    Ignore,
    /// The count the claim holds (one unit), if any.
    Held(Option<u32>),
}

/// A shared count: its key, the units at the start, the units left.
#[derive(Clone)]
struct Count {
    key: String,
    available: u32,
    left: i64,
}

#[derive(Clone)]
struct PoolData {
    name: String,
    taints: Vec<Taint>,
    startup_taints: Vec<Taint>,
    reqs: IReqs,
    types: Vec<TypeData>,
    base: BitSet,
    remaining: Vec<i64>,
    nodes_remaining: Option<i64>,
    /// Some type has a counted offering.
    counted: bool,
    /// The types whose nodes publish devices (empty unless some pod claims devices).
    dev_types: BitSet,
    /// Its types with an offering, by the rank of their best offering (then by index): no
    /// offering of a later type ranks before that (see [`Solver::claim_launch`]).
    launch_order: Vec<(Rank, usize)>,
    /// How many capacity types its offerings have.
    capacity_types: usize,
}

#[derive(Clone)]
struct NodeData {
    name: String,
    labels: Vec<(Key, Sym)>,
    taints: Vec<Taint>,
    free: Vec<i64>,
    ports: Vec<HostPort>,
    refuses_moving: bool,
    attached: Attached,
    /// Attach limit per interned driver (empty: none declared).
    vol_limit: Vec<u32>,
    /// Its devices and those taken (see [`dra`]).
    dev: Option<dra::NodeDev>,
}

#[derive(Clone)]
struct Claim {
    pool: usize,
    reqs: IReqs,
    cands: BitSet,
    used: Vec<i64>,
    max_free: Vec<i64>,
    pods: Vec<usize>,
    ports: Vec<HostPort>,
    /// The union of its pods' volumes.
    attached: Attached,
    /// The devices its pods' claims take, per candidate type (see [`dra`]).
    dev: Option<Box<dra::Planned>>,
    /// The count unit this claim holds (its preferred offering's), if any.
    held: Option<u32>,
    /// A `minValues` of its requirements was relaxed.
    relaxed: bool,
    /// Its launch price now; kept only under a price cap ([`Solver::cap`]).
    price: f64,
    /// Under a price cap: the type it launches now (`usize::MAX`: none), the most room
    /// left on a candidate that could launch within the cap, and those candidates (see
    /// [`Solver::cap_free`]).
    launch: usize,
    cap_free: Vec<i64>,
    cap_ok: BitSet,
}

#[derive(Clone)]
struct Solver {
    names: Interner,
    res_names: Vec<String>,
    well_known: Vec<Key>,
    zone_key: Key,
    ct_key: Key,
    it_key: Key,
    pools: Vec<PoolData>,
    nodes: Vec<NodeData>,
    /// The order existing nodes are tried in (Karpenter's): initialized first, then by name.
    node_order: Vec<usize>,
    claims: Vec<Claim>,
    /// Planned claims ordered by pod count ascending (Karpenter tries the emptiest first), with
    /// the room a pod needs to fit in to join each (its `max_free`, under a price cap its
    /// `cap_free`): [`Solver::add`] visits only the claims whose room holds the pod.
    by_count: CountOrder,
    /// The hostname groups written as resources of [`Solver::by_count`]'s rooms: (group, its
    /// `maxSkew`, 0 for anti-affinity); see [`room`].
    host_cols: Vec<(usize, i64)>,
    /// The other topology keys whose domains [`Solver::by_count`] keeps per claim as sets:
    /// each key with its domains, in bit order; see [`room`].
    mask_keys: Vec<(Key, Vec<Sym>)>,
    groups: Vec<Group>,
    /// Per non-hostname key: every known domain, in name order.
    universe: HashMap<Key, Vec<Sym>>,
    /// Shared by the packings' clones until one changes a pod (relaxes it).
    pods: Vec<Arc<PodData>>,
    placements: Vec<(usize, usize)>,
    /// Offering counts shared by every pool, by key.
    counts: Vec<Count>,
    /// CSI drivers of pending pods' volumes, and each interned volume's driver (see
    /// [`volumes`]).
    drivers: Vec<String>,
    vol_driver: Vec<u32>,
    /// The pending pods' ResourceClaims and the devices they can take (`None`: no pod
    /// claims devices).
    dra: Option<Box<dra::State>>,
    /// `minValues` is relaxed rather than failed ([`crate::MinValuesPolicy::BestEffort`]).
    best_effort: bool,
    /// Price cap of planned NodeClaims (`INFINITY`: first-fit, Karpenter's packing): a pod joins
    /// a planned claim only if that leaves its price at most `max(cap, price before)`; see
    /// [`price`].
    cap: f64,
    /// Under a cap: the planned claims' prices so far, summed (a claim's price never drops as
    /// pods join, so the plan costs at least this), and the price of the best plan already
    /// found, above which the packing stops.
    spent: f64,
    budget: f64,
    /// Per pool, by requirements, the pool's types compatible with them
    /// ([`Solver::type_ok`] without counts): a pure function of the input, shared by the
    /// packings' clones (see [`Solver::compatible_types`]).
    compat: Compat,
}

fn res_index(res_names: &mut Vec<String>, name: &str) -> usize {
    if let Some(i) = res_names.iter().position(|n| n == name) {
        return i;
    }
    res_names.push(name.to_string());
    res_names.len() - 1
}

fn dense(res_names: &[String], r: &Resources) -> Vec<i64> {
    res_names
        .iter()
        .map(|n| r.get(n).copied().unwrap_or(0))
        .collect()
}

fn fits(req: &[i64], avail: &[i64]) -> bool {
    req.iter().zip(avail).all(|(r, a)| r <= a)
}

impl Solver {
    fn allow_undefined(&self, k: &Key) -> bool {
        self.well_known.contains(k)
    }

    /// Whether `o` can be launched: available, and its count has a unit left (or is the one
    /// the claim holds).
    fn launchable(&self, o: &Off, counts: Counts) -> bool {
        o.available
            && match counts {
                Counts::Ignore => true,
                Counts::Held(held) => {
                    o.count == UNCOUNTED
                        || held == Some(o.count)
                        || self.counts[o.count as usize].left > 0
                }
            }
    }

    /// The preferred launchable offering compatible with `reqs` (reserved first, then the
    /// cheapest).
    fn preferred_offering(&self, t: &TypeData, reqs: &IReqs, counts: Counts) -> Option<Off> {
        let z = reqs.get(&self.zone_key);
        let c = reqs.get(&self.ct_key);
        t.offerings
            .iter()
            .find(|o| {
                self.launchable(o, counts)
                    && z.is_none_or(|s| s.has(&o.zone))
                    && c.is_none_or(|s| s.has(&o.ct))
            })
            .copied()
    }

    fn type_ok(&self, t: &TypeData, reqs: &IReqs, counts: Counts) -> bool {
        t.reqs.intersects(reqs).is_ok() && self.preferred_offering(t, reqs, counts).is_some()
    }

    /// The types of pool `pool` that `type_ok` accepts under `reqs`, counts ignored
    /// (remembered: claims of one workload meet the same requirements again and again).
    fn compatible_types(&self, pool: usize, reqs: &IReqs) -> Arc<BitSet> {
        // Per pool, by requirements: looked up without a copy of them. A lock poisoned by a
        // panic elsewhere still holds answers: every entry is complete when inserted.
        let lock = || self.compat.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = lock().get(pool).and_then(|m| m.get(reqs)) {
            return Arc::clone(set);
        }
        let types = &self.pools[pool].types;
        let mut set = BitSet::new(types.len());
        for (t, td) in types.iter().enumerate() {
            if self.type_ok(td, reqs, Counts::Ignore) {
                set.insert(t);
            }
        }
        let set = Arc::new(set);
        let mut compat = lock();
        if compat.len() <= pool {
            compat.resize_with(pool + 1, HashMap::default);
        }
        compat[pool].insert(reqs.clone(), Arc::clone(&set));
        set
    }

    /// Sort key of an offering: reserved first, then price.
    fn rank(&self, o: &Off) -> Rank {
        (!o.reserved, o.price)
    }

    /// Pod `pi`, to change: this solver's own copy from now on.
    fn pod_mut(&mut self, pi: usize) -> &mut PodData {
        Arc::make_mut(&mut self.pods[pi])
    }

    fn key_name(&self, k: Key) -> String {
        self.names.name(k).to_string()
    }
}

fn incompat_key(e: crate::requirements::Incompatibility<Key>) -> Key {
    match e {
        crate::requirements::Incompatibility::NoCommonValue(k)
        | crate::requirements::Incompatibility::Undefined(k) => k,
    }
}

/// A failure without allocation (ids instead of names); see [`Solver::expand`].
#[derive(Clone, Copy, Debug)]
enum Why {
    Requirements(Key),
    /// Every otherwise compatible shape has a taint the pod does not tolerate: pool, type
    /// and taint index.
    Taint(usize, usize, usize),
    NoCompatibleInstanceType,
    InsufficientResources(usize),
    MinValues {
        key: Key,
        want: u32,
        got: u32,
    },
    TopologySpread(Key),
    PodAffinity(Key),
    PodAntiAffinity(Key),
    HostPort(u16),
    /// Every otherwise fitting type's offerings draw from exhausted counts (one of them).
    CountExhausted(u32),
    /// Every type with room for the pod would exceed this driver's attach limit.
    VolumeLimit(u32),
    /// No type with room for the pod can allocate this request (claim, request).
    Devices(u32, usize),
    /// The pod's claim is allocated on another node.
    ClaimPinned(u32),
}

fn taint_failure(t: &Taint) -> Failure {
    Failure::Taint(format!("{}={}:{:?}", t.key, t.value, t.effect))
}

impl Solver {
    fn expand(&self, w: Why) -> Failure {
        match w {
            Why::Requirements(k) => Failure::Requirements(self.key_name(k)),
            Why::NoCompatibleInstanceType => Failure::NoCompatibleInstanceType,
            Why::Taint(pool, t, i) => match self.pools[pool].types[t].taints.get(i) {
                Some(taint) => taint_failure(taint),
                None => Failure::NoCompatibleInstanceType,
            },
            Why::InsufficientResources(r) => {
                Failure::InsufficientResources(self.res_names.get(r).cloned().unwrap_or_default())
            }
            Why::MinValues { key, want, got } => Failure::MinValues {
                key: self.key_name(key),
                want,
                got,
            },
            Why::TopologySpread(k) => Failure::TopologySpread(self.key_name(k)),
            Why::PodAffinity(k) => Failure::PodAffinity(self.key_name(k)),
            Why::PodAntiAffinity(k) => Failure::PodAntiAffinity(self.key_name(k)),
            Why::HostPort(p) => Failure::HostPort(p),
            Why::CountExhausted(c) => match self.counts.get(c as usize) {
                Some(c) => Failure::CountExhausted {
                    key: c.key.clone(),
                    available: c.available,
                },
                None => Failure::NoCompatibleInstanceType,
            },
            Why::VolumeLimit(d) => Failure::VolumeLimit {
                driver: self.driver_name(d),
            },
            Why::Devices(c, r) => self.device_failure(c, r),
            Why::ClaimPinned(c) => self.pinned_failure(c),
        }
    }
}

/// Runs one scheduling simulation. Deterministic: the same input gives the same output.
///
/// The plan is the cheapest of Karpenter's first-fit packing and a few price-capped packings
/// ([`price`]); [`Output::first_fit_price`] says what first-fit would have cost when it lost.
pub fn solve(input: &Input) -> Output {
    price::cheapest(input, &crate::dra::Dra::default())
}

/// [`solve`] with the pods' ResourceClaims: a pod with claims goes only where its claims can
/// be allocated (see [`crate::dra`]).
pub fn solve_with_devices(input: &Input, dra: &crate::dra::Dra) -> Output {
    price::cheapest(input, dra)
}

/// Karpenter's first-fit packing alone (a planned NodeClaim takes every pod one of its
/// instance types still holds): the plan [`solve`] starts from and compares against.
pub fn solve_first_fit(input: &Input) -> Output {
    solve_first_fit_with_devices(input, &crate::dra::Dra::default())
}

/// [`solve_first_fit`] with the pods' ResourceClaims.
pub fn solve_first_fit_with_devices(input: &Input, dra: &crate::dra::Dra) -> Output {
    let mut s = build::build(input, dra);
    // Without a cap nothing is priced on the way, so the packing runs to the end.
    let queue = Queue::of(&s, input);
    let (failed, errors) = pack_all(&mut s, &queue).unwrap_or_default();
    output::output(&s, input, failed, errors, output::Refs::default())
}

/// Pods left unscheduled, and the failures of each pod that failed last time it was tried.
type Unplaced = (Vec<usize>, HashMap<usize, Vec<(usize, Failure)>>);

/// Packs every pending pod of `s` in `order` (Karpenter's queue order); `None` when
/// a capped packing's claims already cost more than [`Solver::budget`] (it cannot win).
/// A pod that fails goes to the back of the queue (relaxed when it has preferences left);
/// packing ends when every pod left has failed since the last success or relaxation.
fn pack_all(s: &mut Solver, order: &Queue) -> Option<Unplaced> {
    let mut queue: std::collections::VecDeque<usize> = order.pending.iter().copied().collect();
    // Kept by pod only for the few that fail: most never do.
    let mut errors: HashMap<usize, Vec<(usize, Failure)>> = HashMap::default();
    // Failures in a row, none relaxing a pod: once the whole queue, nothing can change.
    let mut stuck = 0;
    while let Some(pi) = queue.pop_front() {
        match s.add(pi) {
            Ok(()) if s.spent > s.budget => return None,
            Ok(()) => {
                stuck = 0;
                if !errors.is_empty() {
                    errors.remove(&pi);
                }
            }
            Err(f) => {
                errors.insert(pi, f);
                let relaxed = s.pod_mut(pi).relax();
                queue.push_back(pi);
                stuck = if relaxed { 0 } else { stuck + 1 };
                if stuck == queue.len() {
                    break;
                }
            }
        }
    }
    let unplaceable = order.unplaceable.iter().copied();
    Some((queue.into_iter().chain(unplaceable).collect(), errors))
}

/// The pods of a solver in Karpenter's queue order (the same for every packing of one input).
struct Queue {
    /// Pods to pack: the ones not [`Pod::moving`](crate::Pod::moving) first, then cpu desc,
    /// memory desc, creation, uid.
    pending: Vec<usize>,
    /// Pods no node can take (their reason is known before packing).
    unplaceable: Vec<usize>,
}

impl Queue {
    fn of(s: &Solver, input: &Input) -> Self {
        let cpu = 0;
        let mem = 1;
        let (pending, unplaceable): (Vec<usize>, Vec<usize>) = (0..s.pods.len()).partition(|&pi| {
            input.pods[s.pods[pi].input].unplaceable.is_none() && s.dra_blocked(pi).is_none()
        });
        // Not moving first, then (cpu, memory) descending, creation, uid: one key per pod,
        // sorted once.
        let mut keyed: Vec<(bool, i64, i64, i64, &str, usize)> = pending
            .iter()
            .map(|&pi| {
                let (p, ip) = (&s.pods[pi], &input.pods[s.pods[pi].input]);
                let r = |i: usize| p.requests.get(i).copied().unwrap_or(0);
                (
                    ip.moving,
                    -r(cpu),
                    -r(mem),
                    ip.creation,
                    ip.uid.as_str(),
                    pi,
                )
            })
            .collect();
        keyed.sort_unstable();
        Queue {
            pending: keyed.into_iter().map(|k| k.5).collect(),
            unplaceable,
        }
    }
}

// The packings of one solve may run on two threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Solver>();
};
