//! Packing: existing nodes, planned NodeClaims (fewest pods first), new NodeClaims.

use super::topology::{DomainRule, TopoPlan, lookup};
use super::*;

/// Result of a successful tentative add to a claim.
pub(super) struct ClaimUpdate {
    pub(super) reqs: Option<IReqs>,
    pub(super) cands: BitSet,
    pub(super) used: Vec<i64>,
    pub(super) max_free: Vec<i64>,
    /// A `minValues` was relaxed to get here.
    pub(super) relaxed: bool,
    /// The claim's volumes with the pod's (`None`: the pod has none).
    pub(super) attached: Option<Attached>,
    /// The claim's devices with the pod's claims' (`None`: the pod allocates none).
    pub(super) dev: Option<Box<super::dra::Planned>>,
}

/// Why a claim's candidate types all failed a pod, as [`Solver::try_claim`] saw them.
#[derive(Default)]
struct Misses {
    /// Some type met the requirements, taints and counts.
    any_req_ok: bool,
    /// The first resource short on a type that met them.
    best_short: Option<usize>,
    /// (type, taint index) of the first taint not tolerated.
    untolerated_taint: Option<(usize, usize)>,
    /// The first count exhausted.
    exhausted: Option<u32>,
    /// The first driver whose attach limit excluded a type with room.
    vol_limited: Option<u32>,
    /// The first device request that excluded a type with room.
    devices: Option<Why>,
}

impl Misses {
    fn why(self, pool: usize) -> Why {
        match self {
            Misses {
                any_req_ok: false,
                exhausted: Some(c),
                ..
            } => Why::CountExhausted(c),
            Misses {
                any_req_ok: false,
                untolerated_taint: Some((t, i)),
                ..
            } => Why::Taint(pool, t, i),
            Misses {
                any_req_ok: false, ..
            } => Why::NoCompatibleInstanceType,
            // Some type had room: the attach limit is what excluded it.
            Misses {
                vol_limited: Some(d),
                ..
            } => Why::VolumeLimit(d),
            // Some type had room: its devices are what excluded it.
            Misses {
                devices: Some(w), ..
            } => w,
            Misses { best_short, .. } => Why::InsufficientResources(best_short.unwrap_or(0)),
        }
    }
}

impl Solver {
    pub(super) fn pool_check(&self, pool: usize, pod: &PodData) -> Result<(), Failure> {
        let p = &self.pools[pool];
        if let Some(t) = untolerated(&p.taints, &pod.tolerations) {
            return Err(taint_failure(t));
        }
        p.reqs
            .compatible(&pod.reqs, |k| self.allow_undefined(k))
            .map_err(|e| Failure::Requirements(self.key_name(incompat_key(e))))
    }

    /// Tries to add pod to a claim state (existing claim or a fresh one).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn try_claim(
        &self,
        pool: usize,
        reqs: &IReqs,
        cands: &BitSet,
        used: &[i64],
        ports: &[HostPort],
        attached: &Attached,
        planned: Option<&super::dra::Planned>,
        slot: usize,
        held: Option<u32>,
        pod: &PodData,
        plan: &TopoPlan,
    ) -> Result<ClaimUpdate, Why> {
        self.claim_prechecks(reqs, ports, slot, pod, plan)?;
        let p = &self.pools[pool];
        let new_reqs = self.claim_reqs(pool, reqs, cands, used, pod, plan)?;
        let new_used: Vec<i64> = used.iter().zip(&pod.requests).map(|(a, b)| a + b).collect();
        let mut out = BitSet::new(p.types.len());
        let mut max_free = vec![i64::MIN; new_used.len()];
        let mut miss = Misses::default();
        let mut devices = self.claim_devices(pod, pool, slot, planned)?;
        // Per driver of the pod's volumes, the claim's distinct volumes with them.
        let vol_counts = if pod.vols.is_empty() {
            Vec::new()
        } else {
            attached.with(&pod.vols, &self.vol_driver)
        };
        let compat = new_reqs.as_ref().map(|r| self.compatible_types(pool, r));
        for t in cands.iter() {
            let td = &p.types[t];
            if compat.as_ref().is_some_and(|ok| !ok.contains(t)) {
                continue;
            }
            if let Some(i) = td
                .taints
                .iter()
                .position(|t| !pod.tolerations.iter().any(|tol| tol.tolerates(t)))
            {
                miss.untolerated_taint.get_or_insert((t, i));
                continue;
            }
            if td.counted
                && self
                    .preferred_offering(td, new_reqs.as_ref().unwrap_or(reqs), Counts::Held(held))
                    .is_none()
            {
                miss.exhausted = miss.exhausted.or(td
                    .offerings
                    .iter()
                    .map(|o| o.count)
                    .find(|c| *c != UNCOUNTED));
                continue;
            }
            miss.any_req_ok = true;
            if !fits(&new_used, &td.usable) {
                if miss.best_short.is_none() {
                    miss.best_short = new_used.iter().zip(&td.usable).position(|(u, a)| u > a);
                }
                continue;
            }
            if let Some(d) = volumes::exceeded(&td.vol_limit, &vol_counts) {
                miss.vol_limited.get_or_insert(d);
                continue;
            }
            if let Err(w) = devices.take(self, pool, t) {
                miss.devices.get_or_insert(w);
                continue;
            }
            out.insert(t);
            for (m, (a, u)) in max_free.iter_mut().zip(td.usable.iter().zip(&new_used)) {
                *m = (*m).max(a - u);
            }
        }
        if out.is_empty() {
            return Err(miss.why(pool));
        }
        let (new_reqs, relaxed) = self.min_values(pool, new_reqs, reqs, &out)?;
        Ok(ClaimUpdate {
            reqs: new_reqs,
            cands: out,
            used: new_used,
            max_free,
            relaxed,
            attached: (!pod.vols.is_empty()).then(|| {
                let mut a = attached.clone();
                a.add(&pod.vols, &self.vol_driver);
                a
            }),
            dev: devices.planned(),
        })
    }

    /// A claim's requirements with the pod's and its topology rules applied (`None`: unchanged).
    fn claim_reqs(
        &self,
        pool: usize,
        reqs: &IReqs,
        cands: &BitSet,
        used: &[i64],
        pod: &PodData,
        plan: &TopoPlan,
    ) -> Result<Option<IReqs>, Why> {
        if pod.reqs.is_empty() && plan.rules.is_empty() {
            return Ok(None);
        }
        let p = &self.pools[pool];
        let mut r = reqs.clone();
        r.intersect(&pod.reqs);
        // Some candidate type has an offering in the picked domains and room for the pod.
        let feasible = |r: &IReqs| {
            cands.iter().any(|t| {
                let td = &p.types[t];
                let room = used.iter().zip(&pod.requests).zip(&td.usable);
                room.into_iter().all(|((u, q), a)| u + q <= *a)
                    && self.type_ok(td, r, Counts::Ignore)
            })
        };
        self.apply_rules_jointly(plan, &mut r, &feasible)?;
        Ok(if r == *reqs { None } else { Some(r) })
    }

    /// The claim's requirements after the `minValues` check over candidates `cands`
    /// (`new_reqs`, else `reqs`): unchanged when met; relaxed (and `true`) under BestEffort;
    /// else the failure.
    fn min_values(
        &self,
        pool: usize,
        new_reqs: Option<IReqs>,
        reqs: &IReqs,
        cands: &BitSet,
    ) -> Result<(Option<IReqs>, bool), Why> {
        let final_reqs = new_reqs.as_ref().unwrap_or(reqs);
        match self.check_min_values(pool, final_reqs, cands) {
            Ok(()) => Ok((new_reqs, false)),
            Err(Why::MinValues { .. }) if self.best_effort => {
                Ok((Some(self.relax_min_values(pool, final_reqs, cands)), true))
            }
            Err(e) => Err(e),
        }
    }

    /// How many distinct values of `set` (on key `k`) the candidates `cands` offer.
    fn distinct_values(&self, pool: usize, k: &Key, set: &ISet, cands: &BitSet) -> u32 {
        let mut vals: Vec<Sym> = Vec::new();
        for t in cands.iter() {
            if let Some(ts) = self.pools[pool].types[t].reqs.get(k) {
                vals.extend(ts.values.iter().filter(|v| set.has(v)));
            }
        }
        vals.sort();
        vals.dedup();
        u32::try_from(vals.len()).unwrap_or(u32::MAX)
    }

    /// `reqs` with every `minValues` the candidates `cands` do not reach lowered to what
    /// they reach (Karpenter's BestEffort).
    fn relax_min_values(&self, pool: usize, reqs: &IReqs, cands: &BitSet) -> IReqs {
        let mut relaxed = reqs.clone();
        for (k, set) in reqs.entries() {
            let Some(min) = set.min_values else { continue };
            let got = self.distinct_values(pool, k, set, cands);
            if got < min {
                relaxed.set_min_values(k, Some(got));
            }
        }
        relaxed
    }

    pub(super) fn check_min_values(
        &self,
        pool: usize,
        reqs: &IReqs,
        cands: &BitSet,
    ) -> Result<(), Why> {
        for (k, set) in reqs.entries() {
            let Some(min) = set.min_values else { continue };
            let got = self.distinct_values(pool, k, set, cands);
            if got < min {
                return Err(Why::MinValues {
                    key: *k,
                    want: min,
                    got,
                });
            }
        }
        Ok(())
    }

    pub(super) fn try_existing(&self, ni: usize, pod: &PodData, plan: &TopoPlan) -> bool {
        let n = &self.nodes[ni];
        if pod.moving && n.refuses_moving {
            return false;
        }
        if !fits(&pod.requests, &n.free) {
            return false;
        }
        if untolerated(&n.taints, &pod.tolerations).is_some() {
            return false;
        }
        if pod.reqs.matches_labels(|k| lookup(&n.labels, *k)).is_err() {
            return false;
        }
        if pod.host_ports_conflict(&n.ports).is_some() {
            return false;
        }
        if self.host_ok(plan, ni).is_err() {
            return false;
        }
        if !self.node_volumes_ok(ni, pod) {
            return false;
        }
        if pod.dra.is_some() && self.node_devices(ni, pod).is_err() {
            return false;
        }
        // The node's domain is its label; a node without the label is no domain of the
        // constraint (only an exclusion can hold there).
        plan.rules.iter().all(|r| match lookup(&n.labels, r.key) {
            None => matches!(&r.rule, DomainRule::Narrow(set) if set.complement),
            Some(d) => match &r.rule {
                DomainRule::Pick(order) | DomainRule::Bootstrap(order) => order.contains(&d),
                DomainRule::Narrow(set) => set.has(&d),
            },
        })
    }

    /// Schedules one pod; Err carries the per-pool failures.
    pub(super) fn add(&mut self, pi: usize) -> Result<(), Vec<(usize, Failure)>> {
        let plan = self.plan(&self.pods[pi]);
        // 1. Existing and in-flight nodes.
        for oi in 0..self.node_order.len() {
            let ni = self.node_order[oi];
            if self.try_existing(ni, &self.pods[pi], &plan) {
                let req = self.pods[pi].requests.clone();
                let n = &mut self.nodes[ni];
                for (f, r) in n.free.iter_mut().zip(&req) {
                    *f -= r;
                }
                n.ports.extend(self.pods[pi].host_ports());
                n.attached.add(&self.pods[pi].vols, &self.vol_driver);
                self.commit_node_devices(pi, ni);
                self.record(pi, ni, None);
                self.placements.push((pi, ni));
                return Ok(());
            }
        }
        // 2. Planned NodeClaims, fewest pods first.
        let pool_ok: smallvec::SmallVec<[Result<(), Failure>; 2]> = (0..self.pools.len())
            .map(|p| self.pool_check(p, &self.pods[pi]))
            .collect();
        let base = self.nodes.len();
        // Under a price cap: the first claim skipped for its price, taken if nothing else can.
        let mut skipped: Option<(usize, ClaimUpdate)> = None;
        let want = self.wanted(pi, &plan);
        // A pod whose rule allows no domain it does goes on no claim (their checks say so).
        let needed = self.needed_domains(&plan, &self.pods[pi]);
        let mut next = if needed.is_some() { 0 } else { usize::MAX };
        let needed = needed.unwrap_or_default();
        while let Some(oi) = self.by_count.next_fit(next, &want, &needed) {
            next = oi + 1;
            let ci = self.by_count.order[oi];
            if self.host_ok(&plan, base + ci).is_err() {
                continue;
            }
            let c = &self.claims[ci];
            if pool_ok[c.pool].is_err() {
                continue;
            }
            if self.pods[pi].dra.is_some() && !self.claim_may_host(ci, &self.pods[pi]) {
                continue;
            }
            // Once a claim was skipped for its price, one that is sure to be needs no check.
            if skipped.is_some() && !self.cap_holds(ci, &self.pods[pi].requests) {
                continue;
            }
            if let Ok(u) = self.try_claim(
                c.pool,
                &c.reqs,
                &c.cands,
                &c.used,
                &c.ports,
                &c.attached,
                c.dev.as_deref(),
                base + ci,
                c.held,
                &self.pods[pi],
                &plan,
            ) {
                if self.over_cap(ci, &u) {
                    skipped = skipped.or(Some((ci, u)));
                    continue;
                }
                self.commit(pi, ci, u);
                return Ok(());
            }
        }
        // 3. A new NodeClaim, pools by weight.
        let mut failures = Vec::new();
        for (pool, ok) in pool_ok.into_iter().enumerate() {
            if let Err(f) = ok {
                failures.push((pool, f));
                continue;
            }
            match self.new_claim(pool, pi, &plan) {
                Ok(()) => return Ok(()),
                Err(f) => failures.push((pool, f)),
            }
        }
        if let Some((ci, u)) = skipped {
            self.commit(pi, ci, u);
            return Ok(());
        }
        Err(failures)
    }

    pub(super) fn new_claim(
        &mut self,
        pool: usize,
        pi: usize,
        plan: &TopoPlan,
    ) -> Result<(), Failure> {
        let p = &self.pools[pool];
        if p.nodes_remaining.is_some_and(|n| n <= 0) {
            return Err(Failure::Limits("nodes".into()));
        }
        let mut cands = BitSet::new(p.types.len());
        let mut limited: Option<usize> = None;
        for t in p.base.iter() {
            let cap = &p.types[t].capacity;
            match cap.iter().zip(&p.remaining).position(|(c, r)| c > r) {
                None => cands.insert(t),
                Some(r) => limited = limited.or(Some(r)),
            }
        }
        if cands.is_empty() {
            return Err(match limited {
                Some(r) => Failure::Limits(self.res_names[r].clone()),
                None => Failure::NoCompatibleInstanceType,
            });
        }
        let used = vec![0; self.res_names.len()];
        let slot = self.nodes.len() + self.claims.len();
        let u = match self.try_claim(
            pool,
            &p.reqs,
            &cands,
            &used,
            &[],
            &Attached::default(),
            None,
            slot,
            None,
            &self.pods[pi],
            plan,
        ) {
            Ok(u) => u,
            // A type above the limit would have fitted: the limit is what failed.
            Err(Why::InsufficientResources(_)) if let Some(r) = limited => {
                return Err(Failure::Limits(self.res_names[r].clone()));
            }
            Err(e) => return Err(self.expand(e)),
        };
        let reqs = self.pools[pool].reqs.clone();
        self.claims.push(Claim {
            pool,
            reqs,
            cands: BitSet::new(0),
            used,
            max_free: Vec::new(),
            pods: Vec::new(),
            ports: Vec::new(),
            attached: Attached::default(),
            dev: None,
            held: None,
            relaxed: false,
            price: f64::INFINITY,
            launch: usize::MAX,
            cap_free: Vec::new(),
            cap_ok: BitSet::new(0),
        });
        let ci = self.claims.len() - 1;
        self.by_count.push(ci);
        self.commit(pi, ci, u);
        // Limits: subtract the largest candidate capacity.
        let p = &mut self.pools[pool];
        let mut maxcap = vec![0i64; p.remaining.len()];
        for t in self.claims[ci].cands.iter() {
            for (m, c) in maxcap.iter_mut().zip(&p.types[t].capacity) {
                *m = (*m).max(*c);
            }
        }
        for (r, m) in p.remaining.iter_mut().zip(&maxcap) {
            if *r != i64::MAX {
                *r -= m;
            }
        }
        if let Some(n) = p.nodes_remaining.as_mut() {
            *n -= 1;
        }
        Ok(())
    }

    pub(super) fn commit(&mut self, pi: usize, ci: usize, u: ClaimUpdate) {
        let slot = self.nodes.len() + ci;
        let before = self.claims[ci].pods.len();
        if before > 0 {
            self.by_count.increment(ci, before);
        }
        let ports = self.pods[pi].host_ports();
        let c = &mut self.claims[ci];
        // Under a cap: the same requirements and candidates keep the launch type and price,
        // and the room within the cap shrinks by the pod (see `Solver::cap_free`).
        let same = self.cap.is_finite()
            && !self.pools[c.pool].counted
            && u.reqs.is_none()
            && u.cands == c.cands;
        // Fewer candidates that keep the launch type, under the same requirements, launch
        // it still: it was the first cheapest of more (as `Solver::over_cap` reads it).
        let keeps_launch = self.cap.is_finite()
            && !self.pools[c.pool].counted
            && u.reqs.is_none()
            && c.launch != usize::MAX
            && u.cands.contains(c.launch);
        if let Some(r) = u.reqs {
            c.reqs = r;
        }
        c.cands = u.cands;
        c.relaxed |= u.relaxed;
        c.used = u.used;
        c.max_free = u.max_free;
        c.pods.push(pi);
        c.ports.extend(ports);
        if let Some(a) = u.attached {
            c.attached = a;
        }
        if let Some(d) = u.dev {
            c.dev = Some(d);
        }
        // Lent to `record` (which reads the claim's requirements only through it), not copied.
        let reqs = std::mem::replace(&mut c.reqs, IReqs::new());
        self.record(pi, slot, Some(&reqs));
        self.claims[ci].reqs = reqs;
        self.place_claims(pi, slot);
        self.hold(ci);
        if same && self.claims[ci].price.is_finite() {
            let requests = &self.pods[pi].requests;
            for (f, r) in self.claims[ci].cap_free.iter_mut().zip(requests) {
                *f = f.saturating_sub(*r);
            }
        } else if self.cap.is_finite() {
            let c = &self.claims[ci];
            let (price, launch) = if keeps_launch {
                (c.price, c.launch)
            } else {
                self.claim_launch(c.pool, &c.reqs, &c.cands, c.held)
            };
            let (cap_free, cap_ok) = self.cap_free(c, price);
            let c = &mut self.claims[ci];
            let before = if c.price.is_finite() { c.price } else { 0.0 };
            self.spent += price - before;
            (c.price, c.launch, c.cap_free, c.cap_ok) = (price, launch, cap_free, cap_ok);
        }
        self.keep_room(ci);
    }

    /// Moves claim `ci`'s unit to the count of its preferred offering now (reserved first,
    /// then the cheapest; ties by type name, as the NodeClaim lists them): a count is
    /// reserved within the solve, across every pool that shares it.
    fn hold(&mut self, ci: usize) {
        let c = &self.claims[ci];
        let p = &self.pools[c.pool];
        if !p.counted {
            return;
        }
        let best = c
            .cands
            .iter()
            .filter_map(|t| {
                let td = &p.types[t];
                let o = self.preferred_offering(td, &c.reqs, Counts::Held(c.held))?;
                Some((self.rank(&o), td.name.as_str(), o.count))
            })
            .min_by(|a, b| by_rank(a.0, b.0).then(a.1.cmp(b.1)));
        let now = best.map(|b| b.2).filter(|c| *c != UNCOUNTED);
        let before = c.held;
        if now == before {
            return;
        }
        if let Some(b) = before {
            self.counts[b as usize].left += 1;
        }
        if let Some(n) = now {
            self.counts[n as usize].left -= 1;
        }
        self.claims[ci].held = now;
    }
}
