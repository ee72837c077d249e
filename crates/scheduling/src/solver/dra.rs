//! Devices in the simulation (Dynamic Resource Allocation): which existing nodes and which
//! instance types of a planned NodeClaim can allocate a pod's ResourceClaims.
//!
//! Setup ([`setup`]) runs only when some pending pod has a claim. It interns the pending
//! pods' claims and their requests, gives each instance type with devices and each existing
//! node a device *source*, and evaluates every distinct selector set (class selectors and
//! request selectors) on every source's devices once: the packing then only walks small
//! boolean vectors. Allocation is kube-scheduler's, pod by pod: a pod's unallocated claims
//! are allocated together (depth first over requests, `firstAvailable` alternatives in order,
//! constraints checked per device) on the devices its node has left; a planned NodeClaim keeps
//! what is taken per candidate instance type and drops the types that cannot allocate.
//!
//! A claim allocated in the cluster pins its pods to its node; one allocated during this
//! solve pins the pods that share it to the node or NodeClaim that took it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub(super) use super::source::{Published, Source, Taken};
use super::*;
use crate::dra::cel::Environment;
use crate::dra::{
    Allocation, AllocationMode, ClaimKey, ConstraintKind, Dra, Quantity, ResourceClaim, Slice,
};

/// The immutable part of the DRA state, shared by the packings' clones.
pub(super) struct Static {
    pub(super) claims: Vec<ClaimData>,
    pub(super) sources: Vec<Source>,
    /// Per selector set, per source: which devices match, or why the source cannot judge.
    pub(super) matches: Vec<Vec<Result<Vec<bool>, String>>>,
}

/// The DRA state of a solve.
#[derive(Clone)]
pub(super) struct State {
    pub(super) st: Arc<Static>,
    /// Per interned claim, the node slot it was allocated on during this solve.
    pub(super) placed: Vec<Option<usize>>,
}

pub(super) struct ClaimData {
    pub(super) key: ClaimKey,
    /// Allocated in the cluster: its node (`None`: any node its selector allows).
    pub(super) allocated: Option<Option<String>>,
    pub(super) requests: Vec<Req>,
    pub(super) constraints: Vec<(Vec<usize>, ConstraintKind)>,
    /// Its shape: claims of one shape (requests' selector sets and modes, constraints) are
    /// allocated alike on any source (see [`fresh_types`]).
    pub(super) shape: u32,
}

/// What allocating a claim reads of it: per request, its alternatives' selector sets, modes
/// and capacity requests; its constraints.
type Shape = (
    Vec<Vec<(usize, AllocationMode, BTreeMap<String, Quantity>)>>,
    Vec<(Vec<usize>, ConstraintKind)>,
);

pub(super) struct Req {
    pub(super) name: String,
    pub(super) alts: Vec<Alt>,
}

pub(super) struct Alt {
    /// Index into [`Static::matches`].
    pub(super) sig: usize,
    pub(super) mode: AllocationMode,
    pub(super) class: String,
    pub(super) selective: bool,
    /// The capacity each device must offer ([`Device::serves`]).
    pub(super) capacity: BTreeMap<String, Quantity>,
}

/// A pod's claims.
#[derive(Clone, Default)]
pub(super) struct PodDra {
    /// Interned claims (deduplicated).
    pub(super) claims: Vec<u32>,
    /// Why no node can take it.
    pub(super) blocked: Option<String>,
    /// Per pool, the types a fresh node of which can allocate its claims not allocated in
    /// the cluster (empty when it has none): a planned NodeClaim with none of them among its
    /// candidates cannot take it.
    pub(super) ok: Vec<BitSet>,
    /// The fewest devices its claims not allocated in the cluster take.
    pub(super) min_devices: usize,
}

impl PodDra {
    /// The types of pool `pool` that can allocate its claims on a fresh node (`None`: it has
    /// none to allocate).
    pub(super) fn fresh(&self, pool: usize) -> Option<&BitSet> {
        self.ok.get(pool)
    }
}

/// A planned NodeClaim's devices taken, per candidate type (sorted by type).
#[derive(Clone, Default)]
pub(super) struct Planned {
    pub(super) taken: Vec<(usize, Taken)>,
    /// Per entry of `taken`, its devices left free (kept by `allocate::record`).
    pub(super) free: Vec<usize>,
    /// The most devices left free on one type of `taken`: every candidate type that can
    /// allocate has an entry once a pod took devices, so a pod needing more fits no type.
    pub(super) max_free: usize,
}

impl Planned {
    pub(super) fn of(&self, t: usize) -> Option<&Taken> {
        self.taken
            .binary_search_by_key(&t, |(i, _)| *i)
            .ok()
            .map(|i| &self.taken[i].1)
    }

    /// A test of "type `t` has at least `min` devices free (or none taken yet)" for types
    /// asked in ascending order: it walks `taken` once instead of searching it per type.
    pub(super) fn free_at_least(&self, min: usize) -> impl FnMut(usize) -> bool + '_ {
        let mut at = 0;
        move |t| {
            while self.taken.get(at).is_some_and(|(i, _)| *i < t) {
                at += 1;
            }
            match self.taken.get(at) {
                Some((i, _)) if *i == t => self.free[at] >= min,
                _ => true,
            }
        }
    }
}

/// An existing node's device source and what is taken on it.
#[derive(Clone)]
pub(super) struct NodeDev {
    pub(super) source: usize,
    pub(super) taken: Taken,
}

/// Interns the DRA side of `input` into `s` (pods, types, nodes); nothing when no pending pod
/// claims devices.
pub(super) fn setup(s: &mut Solver, input: &Input, dra: &Dra) {
    if dra.is_empty() {
        return;
    }
    let mut b = Builder::default();
    let env = Environment::new();
    // Pods' claims.
    for (pi, p) in input.pods.iter().enumerate() {
        let key = (p.namespace.clone(), p.name.clone());
        let keys = dra.pod_claims.get(&key).map_or(&[][..], Vec::as_slice);
        let blocked = dra.blocked.get(&key);
        if keys.is_empty() && blocked.is_none() {
            continue;
        }
        let mut pd = b.pod(s, pi, keys, dra, &env);
        if let Some(why) = blocked {
            pd.blocked = Some(why.clone());
        }
        s.pod_mut(pi).dra = Some(Box::new(pd));
    }
    // Sources: instance types, then existing nodes.
    let mut by_type: HashMap<String, usize> = HashMap::default();
    for p in 0..s.pools.len() {
        s.pools[p].dev_types = BitSet::new(s.pools[p].types.len());
        for t in 0..s.pools[p].types.len() {
            let name = s.pools[p].types[t].name.clone();
            let Some(slices) = dra.instance_types.get(&name).filter(|v| !v.is_empty()) else {
                continue;
            };
            let src = *by_type
                .entry(name)
                .or_insert_with(|| b.source(slices, Published::No, dra));
            s.pools[p].types[t].dev = Some(src as u32);
            s.pools[p].dev_types.insert(t);
        }
    }
    for (ni, n) in input.nodes.iter().enumerate() {
        let slices = dra.nodes.get(&n.name).or_else(|| {
            n.labels
                .get(LABEL_INSTANCE_TYPE)
                .and_then(|t| dra.instance_types.get(t))
        });
        let Some(slices) = slices else { continue };
        let source = b.source(slices, Published::Node(&n.name), dra);
        let taken = b.sources[source].taken.clone();
        s.nodes[ni].dev = Some(NodeDev { source, taken });
    }
    // Network pools (ResourceSlices for many nodes): their allocated devices are taken.
    let network: Vec<usize> = dra
        .network
        .iter()
        .map(|p| b.source(&p.slices, Published::Network, dra))
        .collect();
    b.evaluate(s, &env);
    let placed = vec![None; b.claims.len()];
    s.dra = Some(Box::new(State {
        st: Arc::new(Static {
            claims: b.claims,
            sources: b.sources,
            matches: b.matches,
        }),
        placed,
    }));
    super::network::allocate(s, dra, &network);
    fresh_types(s);
}

impl Solver {
    /// The drivers whose devices planned claim `c` (of pool `p`) takes on every one of its
    /// candidate `types` (sorted): the launched type, whichever it is, must publish them.
    pub(super) fn claim_drivers(
        &self,
        c: &Claim,
        p: &PoolData,
        types: impl Iterator<Item = usize>,
    ) -> Vec<String> {
        let (Some(planned), Some(state)) = (c.dev.as_deref(), self.dra.as_deref()) else {
            return Vec::new();
        };
        let mut common: Option<BTreeSet<&str>> = None;
        for t in types {
            let none = Taken::default();
            let taken = planned.of(t).unwrap_or(&none);
            let drivers: BTreeSet<&str> = p.types[t]
                .dev
                .and_then(|src| state.st.sources.get(src as usize))
                .map(|src| {
                    src.devices
                        .iter()
                        .enumerate()
                        .filter(|(d, _)| taken.used(*d))
                        .map(|(_, (driver, _))| driver.as_str())
                        .collect()
                })
                .unwrap_or_default();
            common = Some(match common {
                None => drivers,
                Some(c) => c.intersection(&drivers).copied().collect(),
            });
        }
        common
            .unwrap_or_default()
            .into_iter()
            .map(str::to_string)
            .collect()
    }
}

/// Per pod with claims to allocate, the types of each pool that can allocate them alone.
/// Pods whose claims have the same shapes (claims of one ResourceClaimTemplate) get the same
/// types: each distinct list of shapes is allocated once.
fn fresh_types(s: &mut Solver) {
    let mut memo: HashMap<Vec<u32>, (Vec<BitSet>, usize)> = HashMap::default();
    for pi in 0..s.pods.len() {
        let Some(pd) = s.pods[pi].dra.as_deref() else {
            continue;
        };
        let Some(state) = s.dra.as_deref() else {
            return;
        };
        let claims: Vec<u32> = pd
            .claims
            .iter()
            .copied()
            .filter(|c| state.st.claims[*c as usize].allocated.is_none())
            .collect();
        if claims.is_empty() {
            continue;
        }
        let shapes: Vec<u32> = claims
            .iter()
            .map(|c| state.st.claims[*c as usize].shape)
            .collect();
        if let Some((ok, min_devices)) = memo.get(&shapes).cloned()
            && let Some(pd) = Arc::make_mut(&mut s.pods[pi]).dra.as_deref_mut()
        {
            pd.ok = ok;
            pd.min_devices = min_devices;
            continue;
        }
        let ok: Vec<BitSet> = (0..s.pools.len())
            .map(|p| {
                let mut set = BitSet::new(s.pools[p].types.len());
                for t in s.pools[p].dev_types.iter() {
                    if s.allocate(&claims, s.pools[p].types[t].dev, None).is_ok() {
                        set.insert(t);
                    }
                }
                set
            })
            .collect();
        let min_devices = claims
            .iter()
            .flat_map(|c| &state.st.claims[*c as usize].requests)
            .map(|r| {
                r.alts
                    .iter()
                    .map(|a| match a.mode {
                        AllocationMode::ExactCount(n) => n as usize,
                        AllocationMode::All => 1,
                    })
                    .min()
                    .unwrap_or(0)
            })
            .sum();
        memo.insert(shapes, (ok.clone(), min_devices));
        if let Some(pd) = s.pod_mut(pi).dra.as_deref_mut() {
            pd.ok = ok;
            pd.min_devices = min_devices;
        }
    }
}

#[derive(Default)]
struct Builder {
    claims: Vec<ClaimData>,
    index: HashMap<ClaimKey, u32>,
    /// Distinct selector sets, and the signature index.
    sigs: Vec<Vec<String>>,
    sig_index: HashMap<Vec<String>, usize>,
    sources: Vec<Source>,
    matches: Vec<Vec<Result<Vec<bool>, String>>>,
    /// Each distinct expression's compile result (claims of one template repeat them).
    compiled: HashMap<String, Result<(), String>>,
    /// Distinct claim shapes ([`ClaimData::shape`]).
    shapes: HashMap<Shape, u32>,
}

impl Builder {
    /// A pending pod's claims, interned; `blocked` says why none can be allocated.
    fn pod(
        &mut self,
        s: &mut Solver,
        pi: usize,
        keys: &[ClaimKey],
        dra: &Dra,
        env: &Environment,
    ) -> PodDra {
        let mut pd = PodDra::default();
        for key in keys {
            let id = match self.claim(key, dra, env) {
                Ok(id) => id,
                Err(why) => {
                    pd.blocked.get_or_insert(why);
                    continue;
                }
            };
            if !pd.claims.contains(&id) {
                pd.claims.push(id);
            }
            if let Some(Allocation { node_selector, .. }) =
                dra.claims.get(key).and_then(|c| c.allocation.as_ref())
            {
                // Karpenter ANDs the terms of an allocation's node selector.
                for term in node_selector {
                    let r = s.ireqs(term);
                    s.pod_mut(pi).selector_reqs.intersect(&r);
                }
                s.pod_mut(pi).rebuild_reqs();
            }
        }
        pd
    }

    fn claim(&mut self, key: &ClaimKey, dra: &Dra, env: &Environment) -> Result<u32, String> {
        if let Some(&id) = self.index.get(key) {
            return Ok(id);
        }
        let c = dra
            .claims
            .get(key)
            .ok_or_else(|| format!("resourceclaim {}/{} does not exist", key.0, key.1))?;
        let data = self.claim_data(key, c, dra, env)?;
        let id = self.claims.len() as u32;
        self.claims.push(data);
        self.index.insert(key.clone(), id);
        Ok(id)
    }

    fn claim_data(
        &mut self,
        key: &ClaimKey,
        c: &ResourceClaim,
        dra: &Dra,
        env: &Environment,
    ) -> Result<ClaimData, String> {
        let mut requests = Vec::new();
        for r in &c.requests {
            let mut alts = Vec::new();
            for a in &r.alternatives {
                let class = dra.classes.get(&a.device_class).ok_or_else(|| {
                    format!(
                        "resourceclaim {}/{}: device class {} does not exist",
                        key.0, key.1, a.device_class
                    )
                })?;
                let selectors: Vec<String> = class
                    .selectors
                    .iter()
                    .chain(&a.selectors)
                    .cloned()
                    .collect();
                for e in &selectors {
                    self.compiled
                        .entry(e.clone())
                        .or_insert_with(|| env.compile(e).map(drop).map_err(|e| e.to_string()))
                        .clone()
                        .map_err(|e| format!("resourceclaim {}/{}: {e}", key.0, key.1))?;
                }
                if matches!(a.mode, AllocationMode::ExactCount(0)) {
                    return Err(format!(
                        "resourceclaim {}/{}: request {} asks for 0 devices",
                        key.0, key.1, r.name
                    ));
                }
                let sig = self.sig(selectors);
                alts.push(Alt {
                    sig,
                    mode: a.mode,
                    class: a.device_class.clone(),
                    selective: !a.selectors.is_empty(),
                    capacity: a.capacity.clone(),
                });
            }
            requests.push(Req {
                name: r.name.clone(),
                alts,
            });
        }
        let constraints: Vec<(Vec<usize>, ConstraintKind)> = c
            .constraints
            .iter()
            .map(|k| {
                let covered = (0..c.requests.len())
                    .filter(|i| k.requests.is_empty() || k.requests.contains(&c.requests[*i].name))
                    .collect();
                (covered, k.kind.clone())
            })
            .collect();
        let shape: Shape = (
            requests
                .iter()
                .map(|r| {
                    r.alts
                        .iter()
                        .map(|a| (a.sig, a.mode, a.capacity.clone()))
                        .collect()
                })
                .collect(),
            constraints.clone(),
        );
        let next = self.shapes.len() as u32;
        let shape = *self.shapes.entry(shape).or_insert(next);
        Ok(ClaimData {
            key: key.clone(),
            allocated: c.allocation.as_ref().map(|a| a.node_name.clone()),
            requests,
            constraints,
            shape,
        })
    }

    fn sig(&mut self, selectors: Vec<String>) -> usize {
        if let Some(&i) = self.sig_index.get(&selectors) {
            return i;
        }
        self.sigs.push(selectors.clone());
        self.sig_index.insert(selectors, self.sigs.len() - 1);
        self.sigs.len() - 1
    }

    /// A source of `slices`, published as `published` says.
    fn source(&mut self, slices: &[Slice], published: Published, dra: &Dra) -> usize {
        self.sources.push(Source::of(slices, published, dra));
        self.sources.len() - 1
    }

    /// Every selector set on every source's devices (see [`super::selectors`]).
    fn evaluate(&mut self, s: &mut Solver, env: &Environment) {
        let (matches, unevaluable) = super::selectors::evaluate(env, &self.sigs, &self.sources);
        self.matches = matches;
        // A selector that cannot be evaluated blocks every pod that uses it.
        for pd in s
            .pods
            .iter_mut()
            .filter_map(|p| Arc::make_mut(p).dra.as_deref_mut())
        {
            if pd.blocked.is_some() {
                continue;
            }
            let why = pd.claims.iter().find_map(|c| {
                self.claims[*c as usize]
                    .requests
                    .iter()
                    .flat_map(|r| &r.alts)
                    .find_map(|a| unevaluable[a.sig].clone())
            });
            pd.blocked = why;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::allocate::record;
    use super::{Planned, Taken};

    #[test]
    fn free_at_least_reads_each_type_as_counting_its_devices_would() {
        let mut p = Planned::default();
        let taken = |whole: Vec<bool>| Taken {
            whole,
            ..Taken::default()
        };
        record(&mut p, 7, taken(vec![true, true, false]));
        record(&mut p, 2, taken(vec![true, false, false]));
        record(&mut p, 9, taken(vec![true, true, true]));
        // A type taken again replaces its entry and its count.
        record(&mut p, 7, taken(vec![true, true, true, false, false]));
        assert_eq!(p.max_free, 2);
        for min in 0..4 {
            let mut free = p.free_at_least(min);
            let got: Vec<bool> = (0..12).map(&mut free).collect();
            let want: Vec<bool> = (0..12)
                .map(|t| {
                    p.of(t)
                        .is_none_or(|taken| taken.whole.iter().filter(|x| !**x).count() >= min)
                })
                .collect();
            assert_eq!(got, want, "min {min}");
        }
        // Positive control: a full type says no, one never taken says yes.
        let mut free = p.free_at_least(1);
        assert!(free(2) && free(5) && free(7) && !free(9) && free(11));
    }
}
