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

use std::collections::BTreeSet;
use std::sync::Arc;

use super::*;
use crate::dra::cel::{Environment, SelectorError, device_value, literals};
use crate::dra::{
    Allocation, AllocationMode, Attribute, ClaimKey, ConstraintKind, Device, Dra, ResourceClaim,
    Slice,
};

/// Device tries one allocation may take before it gives up (the search is exponential in
/// the worst case; real claims ask for a few devices).
const BUDGET: u32 = 20_000;

/// The immutable part of the DRA state, shared by the packings' clones.
pub(super) struct Static {
    claims: Vec<ClaimData>,
    sources: Vec<Source>,
    /// Per selector set, per source: which devices match, or why the source cannot judge.
    matches: Vec<Vec<Result<Vec<bool>, String>>>,
}

/// The DRA state of a solve.
#[derive(Clone)]
pub(super) struct State {
    st: Arc<Static>,
    /// Per interned claim, the node slot it was allocated on during this solve.
    placed: Vec<Option<usize>>,
}

struct ClaimData {
    key: ClaimKey,
    /// Allocated in the cluster: its node (`None`: any node its selector allows).
    allocated: Option<Option<String>>,
    requests: Vec<Req>,
    constraints: Vec<(Vec<usize>, ConstraintKind)>,
}

struct Req {
    name: String,
    alts: Vec<Alt>,
}

struct Alt {
    /// Index into [`Static::matches`].
    sig: usize,
    mode: AllocationMode,
    class: String,
    selective: bool,
}

/// The devices one node (or a node of one instance type) publishes.
struct Source {
    devices: Vec<(String, Device)>,
    /// Taken before the solve (allocated claims' devices).
    taken: Vec<bool>,
}

/// A pod's claims.
#[derive(Clone, Default)]
pub(super) struct PodDra {
    /// Interned claims (deduplicated).
    claims: Vec<u32>,
    /// Why no node can take it.
    pub(super) blocked: Option<String>,
    /// Per pool, the types a fresh node of which can allocate its claims not allocated in
    /// the cluster (empty when it has none): a planned NodeClaim with none of them among its
    /// candidates cannot take it.
    ok: Vec<BitSet>,
    /// The fewest devices its claims not allocated in the cluster take.
    min_devices: usize,
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
    taken: Vec<(usize, Vec<bool>)>,
}

impl Planned {
    fn of(&self, t: usize) -> Option<&[bool]> {
        self.taken
            .binary_search_by_key(&t, |(i, _)| *i)
            .ok()
            .map(|i| self.taken[i].1.as_slice())
    }
}

/// An existing node's device source and what is taken on it.
#[derive(Clone)]
pub(super) struct NodeDev {
    source: usize,
    taken: Vec<bool>,
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
        s.pods[pi].dra = Some(Box::new(pd));
    }
    // Sources: instance types, then existing nodes.
    let mut by_type: HashMap<String, usize> = HashMap::new();
    for p in 0..s.pools.len() {
        s.pools[p].dev_types = BitSet::new(s.pools[p].types.len());
        for t in 0..s.pools[p].types.len() {
            let name = s.pools[p].types[t].name.clone();
            let Some(slices) = dra.instance_types.get(&name).filter(|v| !v.is_empty()) else {
                continue;
            };
            let src = *by_type
                .entry(name)
                .or_insert_with(|| b.source(slices, None, dra));
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
        let source = b.source(slices, Some(&n.name), dra);
        let taken = b.sources[source].taken.clone();
        s.nodes[ni].dev = Some(NodeDev { source, taken });
    }
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
    fresh_types(s);
}

/// Per pod with claims to allocate, the types of each pool that can allocate them alone.
fn fresh_types(s: &mut Solver) {
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
        if let Some(pd) = s.pods[pi].dra.as_deref_mut() {
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
                    s.pods[pi].selector_reqs.intersect(&r);
                }
                s.pods[pi].rebuild_reqs();
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
                    env.compile(e)
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
                });
            }
            requests.push(Req {
                name: r.name.clone(),
                alts,
            });
        }
        let constraints = c
            .constraints
            .iter()
            .map(|k| {
                let covered = (0..c.requests.len())
                    .filter(|i| k.requests.is_empty() || k.requests.contains(&c.requests[*i].name))
                    .collect();
                (covered, k.kind.clone())
            })
            .collect();
        Ok(ClaimData {
            key: key.clone(),
            allocated: c.allocation.as_ref().map(|a| a.node_name.clone()),
            requests,
            constraints,
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

    /// A source of `slices`; `node`: an existing node's, whose allocated devices are taken.
    fn source(&mut self, slices: &[Slice], node: Option<&str>, dra: &Dra) -> usize {
        let devices: Vec<(String, Device)> = slices
            .iter()
            .flat_map(|sl| sl.devices.iter().map(|d| (sl.driver.clone(), d.clone())))
            .collect();
        let mut taken = vec![false; devices.len()];
        if let Some(node) = node {
            let pools: Vec<&str> = slices.iter().map(|sl| sl.pool.as_str()).collect();
            for a in dra.claims.values().filter_map(|c| c.allocation.as_ref()) {
                let here = a.node_name.as_deref() == Some(node);
                for id in &a.devices {
                    if !(here || pools.contains(&id.pool.as_str()) && !id.pool.is_empty()) {
                        continue;
                    }
                    if let Some(i) = devices
                        .iter()
                        .position(|(drv, d)| *drv == id.driver && d.name == id.device)
                    {
                        taken[i] = true;
                    }
                }
            }
        }
        self.sources.push(Source { devices, taken });
        self.sources.len() - 1
    }

    /// Every selector set on every source's devices.
    fn evaluate(&mut self, s: &mut Solver, env: &Environment) {
        let mut domains: BTreeSet<String> = BTreeSet::new();
        for e in self.sigs.iter().flatten() {
            domains.extend(literals(e));
        }
        let root = env.context();
        let compiled: Vec<Vec<_>> = self
            .sigs
            .iter()
            .map(|set| set.iter().filter_map(|e| env.compile(e).ok()).collect())
            .collect();
        let mut unevaluable: Vec<Option<String>> = vec![None; self.sigs.len()];
        self.matches = vec![Vec::with_capacity(self.sources.len()); self.sigs.len()];
        for src in &self.sources {
            let values: Vec<_> = src
                .devices
                .iter()
                .map(|(drv, d)| device_value(drv, d, &domains))
                .collect();
            for (sig, sels) in compiled.iter().enumerate() {
                let mut out: Result<Vec<bool>, String> = Ok(Vec::with_capacity(values.len()));
                for (v, (drv, d)) in values.iter().zip(&src.devices) {
                    let mut ok = true;
                    for sel in sels {
                        match env.matches(&root, sel, v, &format!("{drv}/{}", d.name)) {
                            Ok(true) => {}
                            Ok(false) => {
                                ok = false;
                                break;
                            }
                            Err(e @ SelectorError::Device { .. }) => {
                                out = Err(e.to_string());
                                break;
                            }
                            Err(e) => {
                                unevaluable[sig].get_or_insert(e.to_string());
                                out = Err(e.to_string());
                                break;
                            }
                        }
                    }
                    match &mut out {
                        Ok(m) => m.push(ok),
                        Err(_) => break,
                    }
                }
                self.matches[sig].push(out);
            }
        }
        // A selector that cannot be evaluated blocks every pod that uses it.
        for pd in s.pods.iter_mut().filter_map(|p| p.dra.as_deref_mut()) {
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

/// One allocation attempt on a source.
struct Dfs<'a> {
    st: &'a Static,
    src: usize,
    taken: Vec<bool>,
    items: Vec<(u32, usize)>,
    /// Per item, the devices chosen (for constraints).
    chosen: Vec<Vec<usize>>,
    budget: u32,
    /// The furthest item that could not be allocated.
    failed: usize,
}

impl Dfs<'_> {
    fn request(&mut self, i: usize) -> bool {
        if i == self.items.len() {
            return true;
        }
        let (c, r) = self.items[i];
        let req = &self.st.claims[c as usize].requests[r];
        for alt in &req.alts {
            let Ok(m) = &self.st.matches[alt.sig][self.src] else {
                continue;
            };
            let ok = match alt.mode {
                AllocationMode::ExactCount(n) => self.pick(i, m, n as usize, 0),
                AllocationMode::All => self.all(i, m),
            };
            if ok {
                return true;
            }
        }
        self.failed = self.failed.max(i);
        false
    }

    fn pick(&mut self, i: usize, m: &[bool], left: usize, from: usize) -> bool {
        if left == 0 {
            return self.request(i + 1);
        }
        for d in from..m.len() {
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            if !m[d] || self.taken[d] || !self.constraints_ok(i, d) {
                continue;
            }
            self.taken[d] = true;
            self.chosen[i].push(d);
            if self.pick(i, m, left - 1, d + 1) {
                return true;
            }
            self.chosen[i].pop();
            self.taken[d] = false;
        }
        false
    }

    /// `All`: every matching device, at least one, none taken.
    fn all(&mut self, i: usize, m: &[bool]) -> bool {
        let all: Vec<usize> = (0..m.len()).filter(|d| m[*d]).collect();
        if all.is_empty() || all.iter().any(|d| self.taken[*d]) {
            return false;
        }
        for &d in &all {
            if !self.constraints_ok(i, d) {
                self.chosen[i].clear();
                return false;
            }
            self.chosen[i].push(d);
        }
        for &d in &all {
            self.taken[d] = true;
        }
        if self.request(i + 1) {
            return true;
        }
        for &d in &all {
            self.taken[d] = false;
        }
        self.chosen[i].clear();
        false
    }

    /// Whether device `d` for item `i` keeps its claim's constraints.
    fn constraints_ok(&self, i: usize, d: usize) -> bool {
        let (c, r) = self.items[i];
        let claim = &self.st.claims[c as usize];
        let device = &self.st.sources[self.src].devices[d];
        for (covered, kind) in &claim.constraints {
            if !covered.contains(&r) {
                continue;
            }
            let name = match kind {
                ConstraintKind::MatchAttribute(n) | ConstraintKind::DistinctAttribute(n) => n,
            };
            let Some(v) = attribute(device, name) else {
                return false;
            };
            let others = self.items[..=i]
                .iter()
                .zip(&self.chosen)
                .filter(|((oc, or), _)| *oc == c && covered.contains(or))
                .flat_map(|(_, ch)| ch.iter())
                .filter_map(|o| attribute(&self.st.sources[self.src].devices[*o], name));
            let ok = match kind {
                ConstraintKind::MatchAttribute(_) => others.into_iter().all(|o| o == v),
                ConstraintKind::DistinctAttribute(_) => others.into_iter().all(|o| o != v),
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

fn attribute<'a>((driver, d): &'a (String, Device), name: &str) -> Option<&'a Attribute> {
    d.attributes.get(name).or_else(|| {
        // A bare id in the constraint is in the driver's domain.
        name.strip_prefix(driver.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|id| d.attributes.get(id))
    })
}

/// Why a pod's claims cannot go somewhere.
pub(super) enum Miss {
    /// No device set for this request (claim, request).
    Request(u32, usize),
    /// The claim is allocated elsewhere.
    Pinned(u32),
}

impl Solver {
    /// The claims of pod `pod` that still need devices, or the claim pinned elsewhere than
    /// `slot` (`slot` is a node index or `nodes.len() + claim index`).
    fn to_allocate(&self, pod: &PodData, slot: usize) -> Result<Vec<u32>, Miss> {
        let (Some(pd), Some(state)) = (pod.dra.as_deref(), self.dra.as_deref()) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for &c in &pd.claims {
            let data = &state.st.claims[c as usize];
            match (&data.allocated, state.placed[c as usize]) {
                (Some(Some(node)), _) => {
                    if self.nodes.get(slot).is_none_or(|n| n.name != *node) {
                        return Err(Miss::Pinned(c));
                    }
                }
                (Some(None), _) => {}
                (None, Some(at)) if at != slot => return Err(Miss::Pinned(c)),
                (None, Some(_)) => {}
                (None, None) => out.push(c),
            }
        }
        Ok(out)
    }

    /// Allocates `claims` on source `src` with `taken` already used: the devices taken after.
    fn allocate(
        &self,
        claims: &[u32],
        src: Option<u32>,
        taken: Option<&[bool]>,
    ) -> Result<Vec<bool>, Miss> {
        let Some(state) = self.dra.as_deref() else {
            return Ok(Vec::new());
        };
        let items: Vec<(u32, usize)> = claims
            .iter()
            .flat_map(|c| (0..state.st.claims[*c as usize].requests.len()).map(move |r| (*c, r)))
            .collect();
        let Some(src) = src else {
            return Err(items
                .first()
                .map_or(Miss::Pinned(0), |(c, r)| Miss::Request(*c, *r)));
        };
        let src = src as usize;
        let taken = taken.map_or_else(|| state.st.sources[src].taken.clone(), <[bool]>::to_vec);
        let n = items.len();
        let mut dfs = Dfs {
            st: &state.st,
            src,
            taken,
            items,
            chosen: vec![Vec::new(); n],
            budget: BUDGET,
            failed: 0,
        };
        if dfs.request(0) {
            Ok(dfs.taken)
        } else {
            let (c, r) = dfs.items[dfs.failed.min(n.saturating_sub(1))];
            Err(Miss::Request(c, r))
        }
    }

    /// Whether existing node `ni` can allocate the pod's claims: the devices taken after
    /// (`None`: nothing to allocate).
    pub(super) fn node_devices(&self, ni: usize, pod: &PodData) -> Result<Option<Vec<bool>>, Miss> {
        let claims = self.to_allocate(pod, ni)?;
        if claims.is_empty() {
            return Ok(None);
        }
        let n = self.nodes[ni].dev.as_ref();
        self.allocate(
            &claims,
            n.map(|d| d.source as u32),
            n.map(|d| d.taken.as_slice()),
        )
        .map(Some)
    }

    /// Places pod `pi`'s claims on existing node `ni` (after [`Self::node_devices`] said yes).
    pub(super) fn commit_node_devices(&mut self, pi: usize, ni: usize) {
        if self.pods[pi].dra.is_none() {
            return;
        }
        if let Ok(Some(taken)) = self.node_devices(ni, &self.pods[pi])
            && let Some(d) = self.nodes[ni].dev.as_mut()
        {
            d.taken = taken;
        }
        self.place_claims(pi, ni);
    }

    /// Records that pod `pi`'s claims are allocated at `slot`.
    pub(super) fn place_claims(&mut self, pi: usize, slot: usize) {
        let Some(pd) = self.pods[pi].dra.as_deref() else {
            return;
        };
        let Some(state) = self.dra.as_deref_mut() else {
            return;
        };
        for &c in &pd.claims {
            let p = &mut state.placed[c as usize];
            if p.is_none() && state.st.claims[c as usize].allocated.is_none() {
                *p = Some(slot);
            }
        }
    }

    /// For a planned NodeClaim at `slot` holding `planned`, the claims the pod still needs
    /// (an error if one is pinned elsewhere).
    pub(super) fn claim_devices_needed(&self, pod: &PodData, slot: usize) -> Result<Vec<u32>, Why> {
        self.to_allocate(pod, slot).map_err(why)
    }

    /// Whether planned claim `ci` may take the pod as far as its claims go: the claim it
    /// shares is not allocated elsewhere, and some candidate type publishes devices if it
    /// needs any (a cheap test before [`Solver::try_claim`]).
    pub(super) fn claim_may_host(&self, ci: usize, pod: &PodData) -> bool {
        let c = &self.claims[ci];
        let Some(ok) = pod.dra.as_deref().and_then(|d| d.ok.get(c.pool)) else {
            return self.to_allocate(pod, self.nodes.len() + ci).is_ok();
        };
        match self.to_allocate(pod, self.nodes.len() + ci) {
            Err(_) => return false,
            Ok(need) if need.is_empty() => return true,
            Ok(_) if !c.cands.intersects(ok) => return false,
            Ok(_) => {}
        }
        let min = pod.dra.as_deref().map_or(0, |d| d.min_devices);
        // Under a price cap the claim would keep only types of `ok`: when even the cheapest
        // of them is over the cap, it is skipped anyway.
        let limit = if self.cap.is_finite() {
            self.cap.max(c.price)
        } else {
            f64::INFINITY
        };
        let p = &self.pools[c.pool];
        c.cands.iter().filter(|t| ok.contains(*t)).any(|t| {
            let free = c
                .dev
                .as_deref()
                .and_then(|d| d.of(t))
                .is_none_or(|taken| taken.iter().filter(|x| !**x).count() >= min);
            free && p.types[t]
                .offerings
                .iter()
                .any(|o| o.available && o.price <= limit)
        })
    }

    /// Whether type `t` of `pool` can allocate `claims` after `planned`: its devices taken
    /// after.
    pub(super) fn type_devices(
        &self,
        pool: usize,
        t: usize,
        claims: &[u32],
        planned: Option<&Planned>,
    ) -> Result<Vec<bool>, Why> {
        let src = self.pools[pool].types[t].dev;
        self.allocate(claims, src, planned.and_then(|p| p.of(t)))
            .map_err(why)
    }

    /// Whether pod `pi` is blocked by its claims, and why.
    pub(super) fn dra_blocked(&self, pi: usize) -> Option<&str> {
        self.pods[pi]
            .dra
            .as_deref()
            .and_then(|d| d.blocked.as_deref())
    }

    /// The failure of a request that no type could allocate.
    pub(super) fn device_failure(&self, claim: u32, request: usize) -> Failure {
        let Some(state) = self.dra.as_deref() else {
            return Failure::NoCompatibleInstanceType;
        };
        let c = &state.st.claims[claim as usize];
        let Some(r) = c.requests.get(request) else {
            return Failure::NoCompatibleInstanceType;
        };
        let what = r
            .alts
            .iter()
            .map(|a| {
                let n = match a.mode {
                    AllocationMode::ExactCount(1) => "1 device".to_string(),
                    AllocationMode::ExactCount(n) => format!("{n} devices"),
                    AllocationMode::All => "all devices".to_string(),
                };
                let sel = if a.selective {
                    " matching its selectors"
                } else {
                    ""
                };
                format!("{n} of class {}{sel}", a.class)
            })
            .collect::<Vec<_>>()
            .join(" or ");
        Failure::Devices {
            devices: what,
            claim: format!("{}/{}", c.key.0, c.key.1),
            request: r.name.clone(),
        }
    }

    pub(super) fn pinned_failure(&self, claim: u32) -> Failure {
        let Some(state) = self.dra.as_deref() else {
            return Failure::NoCompatibleInstanceType;
        };
        let c = &state.st.claims[claim as usize];
        let at = match (&c.allocated, state.placed[claim as usize]) {
            (Some(Some(node)), _) => format!("allocated on node {node}"),
            (_, Some(slot)) if slot < self.nodes.len() => {
                format!("allocated on node {} by another pod", self.nodes[slot].name)
            }
            _ => "allocated on another new node by another pod".to_string(),
        };
        Failure::ClaimPinned {
            claim: format!("{}/{}", c.key.0, c.key.1),
            at,
        }
    }
}

fn why(m: Miss) -> Why {
    match m {
        Miss::Request(c, r) => Why::Devices(c, r),
        Miss::Pinned(c) => Why::ClaimPinned(c),
    }
}

/// Adds `t`'s devices taken to `planned`.
pub(super) fn record(planned: &mut Planned, t: usize, taken: Vec<bool>) {
    match planned.taken.binary_search_by_key(&t, |(i, _)| *i) {
        Ok(i) => planned.taken[i].1 = taken,
        Err(i) => planned.taken.insert(i, (t, taken)),
    }
}
