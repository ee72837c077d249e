//! Allocation of a pod's ResourceClaims on one device source (see [`super::dra`]):
//! kube-scheduler's, depth first over the claims' requests, `firstAvailable` alternatives in
//! order, constraints checked per device; and the solver's questions to it (an existing
//! node, a candidate type of a planned NodeClaim, the failure to report).

use std::collections::BTreeMap;

use super::dra::{Alt, Planned, State, Static, Taken};
use super::*;
use crate::dra::{AllocationMode, Attribute, ConstraintKind, Device, Quantity};

/// Device tries one allocation may take before it gives up (the search is exponential in
/// the worst case; real claims ask for a few devices).
const BUDGET: u32 = 20_000;

/// What [`Dfs::take`] took of a device, for [`Dfs::give_back`].
enum Took {
    /// An exclusive device, whole.
    Whole,
    /// What the request consumes of a shared device.
    Consumed(BTreeMap<String, Quantity>),
}

/// One allocation attempt on a source.
struct Dfs<'a> {
    st: &'a Static,
    src: usize,
    taken: Taken,
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
            let served;
            let m = if alt.capacity.is_empty() {
                m.as_slice()
            } else {
                let devices = &self.st.sources[self.src].devices;
                served = m
                    .iter()
                    .zip(devices)
                    .map(|(ok, (driver, d))| *ok && d.serves(driver, &alt.capacity))
                    .collect::<Vec<bool>>();
                served.as_slice()
            };
            let ok = match alt.mode {
                AllocationMode::ExactCount(n) => self.pick(i, alt, m, n as usize, 0),
                AllocationMode::All => self.all(i, alt, m),
            };
            if ok {
                return true;
            }
        }
        self.failed = self.failed.max(i);
        false
    }

    fn pick(&mut self, i: usize, alt: &Alt, m: &[bool], left: usize, from: usize) -> bool {
        if left == 0 {
            return self.request(i + 1);
        }
        for d in from..m.len() {
            if self.budget == 0 {
                return false;
            }
            self.budget -= 1;
            if !m[d] || self.taken.whole[d] || !self.constraints_ok(i, d) {
                continue;
            }
            if !self.st.sources[self.src].within_budgets(&self.taken, &[d]) {
                continue;
            }
            let Some(took) = self.take(d, alt) else {
                continue;
            };
            self.chosen[i].push(d);
            if self.pick(i, alt, m, left - 1, d + 1) {
                return true;
            }
            self.chosen[i].pop();
            self.give_back(d, took);
        }
        false
    }

    /// `All`: every matching device, at least one, none taken whole.
    fn all(&mut self, i: usize, alt: &Alt, m: &[bool]) -> bool {
        let all: Vec<usize> = (0..m.len()).filter(|d| m[*d]).collect();
        if all.is_empty() || all.iter().any(|d| self.taken.whole[*d]) {
            return false;
        }
        if !self.st.sources[self.src].within_budgets(&self.taken, &all) {
            return false;
        }
        for &d in &all {
            if !self.constraints_ok(i, d) {
                self.chosen[i].clear();
                return false;
            }
            self.chosen[i].push(d);
        }
        let mut took = Vec::with_capacity(all.len());
        for &d in &all {
            match self.take(d, alt) {
                Some(t) => took.push((d, t)),
                None => break,
            }
        }
        if took.len() == all.len() && self.request(i + 1) {
            return true;
        }
        for (d, t) in took.into_iter().rev() {
            self.give_back(d, t);
        }
        self.chosen[i].clear();
        false
    }

    /// Takes device `d` for `alt`: an exclusive device whole, a shared one by what the request
    /// consumes of it; `None` when a shared device has no room left for it.
    fn take(&mut self, d: usize, alt: &Alt) -> Option<Took> {
        let st = self.st;
        let (driver, device) = &st.sources[self.src].devices[d];
        if !device.multiple {
            self.taken.whole[d] = true;
            return Some(Took::Whole);
        }
        let consumed = device.consumption(driver, &alt.capacity)?;
        self.taken
            .consume(d, &device.capacity, &consumed)
            .then_some(Took::Consumed(consumed))
    }

    /// Undoes [`Self::take`].
    fn give_back(&mut self, d: usize, took: Took) {
        match took {
            Took::Whole => self.taken.whole[d] = false,
            Took::Consumed(consumed) => self.taken.release(d, &consumed),
        }
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
    pub(super) fn to_allocate(&self, pod: &PodData, slot: usize) -> Result<Vec<u32>, Miss> {
        let (Some(pd), Some(state)) = (pod.dra.as_deref(), self.dra.as_deref()) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for &c in &pd.claims {
            if self.needs_devices(state, c, slot)? {
                out.push(c);
            }
        }
        Ok(out)
    }

    /// Whether claim `c` still needs devices at `slot`, or the claim pinned elsewhere.
    fn needs_devices(&self, state: &State, c: u32, slot: usize) -> Result<bool, Miss> {
        let data = &state.st.claims[c as usize];
        match (&data.allocated, state.placed[c as usize]) {
            (Some(Some(node)), _) => {
                if self.nodes.get(slot).is_none_or(|n| n.name != *node) {
                    return Err(Miss::Pinned(c));
                }
                Ok(false)
            }
            (Some(None), _) => Ok(false),
            (None, Some(at)) if at != slot => Err(Miss::Pinned(c)),
            (None, Some(_)) => Ok(false),
            (None, None) => Ok(true),
        }
    }

    /// [`Self::to_allocate`] without the list: whether some claim needs devices (`Err`: one
    /// is pinned elsewhere).
    fn any_to_allocate(&self, pod: &PodData, slot: usize) -> Result<bool, Miss> {
        let (Some(pd), Some(state)) = (pod.dra.as_deref(), self.dra.as_deref()) else {
            return Ok(false);
        };
        let mut any = false;
        for &c in &pd.claims {
            any |= self.needs_devices(state, c, slot)?;
        }
        Ok(any)
    }

    /// Allocates `claims` on source `src` with `taken` already used: the devices taken after.
    pub(super) fn allocate(
        &self,
        claims: &[u32],
        src: Option<u32>,
        taken: Option<&Taken>,
    ) -> Result<Taken, Miss> {
        let Some(state) = self.dra.as_deref() else {
            return Ok(Taken::default());
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
        let taken = taken.unwrap_or(&state.st.sources[src].taken).clone();
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
    pub(super) fn node_devices(&self, ni: usize, pod: &PodData) -> Result<Option<Taken>, Miss> {
        let claims = self.to_allocate(pod, ni)?;
        if claims.is_empty() {
            return Ok(None);
        }
        let n = self.nodes[ni].dev.as_ref();
        self.allocate(&claims, n.map(|d| d.source as u32), n.map(|d| &d.taken))
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

    /// The devices pod `pod` takes on a planned NodeClaim of `pool` at `slot` holding
    /// `planned`, type by type (an error if a claim of it is pinned elsewhere).
    pub(super) fn claim_devices<'a>(
        &self,
        pod: &'a PodData,
        pool: usize,
        slot: usize,
        planned: Option<&'a Planned>,
    ) -> Result<ClaimDevices<'a>, Why> {
        let claims = match pod.dra {
            Some(_) => self.to_allocate(pod, slot).map_err(why)?,
            None => Vec::new(),
        };
        Ok(ClaimDevices {
            claims,
            fresh: pod.dra.as_deref().and_then(|d| d.fresh(pool)),
            planned,
            out: None,
        })
    }

    /// Whether planned claim `ci` may take the pod as far as its claims go: the claim it
    /// shares is not allocated elsewhere, and some candidate type publishes devices if it
    /// needs any (a cheap test before [`Solver::try_claim`]).
    pub(super) fn claim_may_host(&self, ci: usize, pod: &PodData) -> bool {
        let c = &self.claims[ci];
        let Some(ok) = pod.dra.as_deref().and_then(|d| d.ok.get(c.pool)) else {
            return self.any_to_allocate(pod, self.nodes.len() + ci).is_ok();
        };
        match self.any_to_allocate(pod, self.nodes.len() + ci) {
            Err(_) => return false,
            Ok(false) => return true,
            Ok(true) if !c.cands.intersects(ok) => return false,
            Ok(true) => {}
        }
        let min = pod.dra.as_deref().map_or(0, |d| d.min_devices);
        if c.dev.as_deref().is_some_and(|d| d.max_free < min) {
            return false;
        }
        let none = Planned::default();
        let mut free = c.dev.as_deref().unwrap_or(&none).free_at_least(min);
        // Under a price cap the claim would keep only types of `ok`: when even the cheapest
        // of them is over the cap, it is skipped anyway. Its candidates within the cap are
        // `cap_ok` (kept with its price, see `Solver::cap_free`).
        if self.cap.is_finite() {
            return c.cap_ok.iter_and(ok).any(free);
        }
        let p = &self.pools[c.pool];
        c.cands
            .iter_and(ok)
            .any(|t| free(t) && p.types[t].cheapest_available <= f64::INFINITY)
    }

    /// Whether type `t` of `pool` can allocate `claims` after `planned`: its devices taken
    /// after.
    pub(super) fn type_devices(
        &self,
        pool: usize,
        t: usize,
        claims: &[u32],
        planned: Option<&Planned>,
    ) -> Result<Taken, Why> {
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

/// A pod's claims on the candidate types of a planned NodeClaim.
pub(super) struct ClaimDevices<'a> {
    /// Its claims still to allocate (none: no device to find).
    claims: Vec<u32>,
    fresh: Option<&'a BitSet>,
    planned: Option<&'a Planned>,
    /// The devices taken with the pod's, per type that can allocate them.
    out: Option<Box<Planned>>,
}

impl ClaimDevices<'_> {
    /// Allocates the claims on type `t` of `pool`, or why it cannot.
    pub(super) fn take(&mut self, s: &Solver, pool: usize, t: usize) -> Result<(), Why> {
        let Some(&first) = self.claims.first() else {
            return Ok(());
        };
        if s.pools[pool].types[t].dev.is_none() || self.fresh.is_some_and(|ok| !ok.contains(t)) {
            return Err(Why::Devices(first, 0));
        }
        let taken = s.type_devices(pool, t, &self.claims, self.planned)?;
        let planned = self.planned;
        let out = self
            .out
            .get_or_insert_with(|| Box::new(planned.cloned().unwrap_or_default()));
        record(out, t, taken);
        Ok(())
    }

    /// The NodeClaim's devices with the pod's (`None`: the pod allocates none).
    pub(super) fn planned(self) -> Option<Box<Planned>> {
        self.out
    }
}

fn why(m: Miss) -> Why {
    match m {
        Miss::Request(c, r) => Why::Devices(c, r),
        Miss::Pinned(c) => Why::ClaimPinned(c),
    }
}

/// Adds `t`'s devices taken to `planned`.
pub(super) fn record(planned: &mut Planned, t: usize, taken: Taken) {
    let free = taken.free();
    match planned.taken.binary_search_by_key(&t, |(i, _)| *i) {
        Ok(i) => {
            planned.taken[i].1 = taken;
            planned.free[i] = free;
        }
        Err(i) => {
            planned.taken.insert(i, (t, taken));
            planned.free.insert(i, free);
        }
    }
    planned.max_free = planned.free.iter().copied().max().unwrap_or(0);
}
