//! Price-aware packing: the cheapest of Karpenter's first-fit plan and a few price-capped plans.
//!
//! First-fit (Karpenter's `NodeClaim.Add`) lets a planned NodeClaim take pods while any of its
//! instance types still holds them, so a claim grows into the largest types whatever they cost
//! per CPU. A capped packing runs the same simulation with one extra rule: a pod joins a planned
//! claim only if that leaves the claim's launch price at most `max(cap, its price before)`;
//! otherwise it tries the next claim and then a new one (and takes the first claim it skipped
//! if no new claim can hold it). Every other rule of the simulation is unchanged, so every
//! constraint holds on a capped plan as it does on first-fit's.
//!
//! The caps, at most [`MAX_CAPS`]: first each pool's **fair cap**, the price of its cheapest
//! type that holds the average of its first-fit claims. Where a workload needs many nodes
//! anyway (hostname spread or anti-affinity make first-fit plan one per replica), first-fit
//! still lets the first claims grow large and lopsided, and nodes of the average size, each
//! filled to a balanced mix, carry the same pods for less: on Karpenter's own benchmark this
//! cap alone gives a plan 26–27 % cheaper, on a linearly priced catalog. Then the prices of
//! the instance types that could save the most: per first-fit claim pricier than the type, its
//! price minus the type's price × the fewest nodes of the type its requests need (`ceil` per
//! resource), summed, only when that bound exceeds [`MIN_SAVING`] of first-fit's price (big
//! nodes that cost more per CPU); such a cap is tried only while that bound exceeds what the
//! plan kept so far already saves over first-fit. The plan kept is the cheapest that
//! schedules no fewer pods than first-fit; equal prices go to fewer NodeClaims, then to
//! first-fit. Deterministic: the caps and the comparison depend on the input only.
//!
//! The fair cap's packing usually runs beside first-fit's, on a second thread: in a solve of at
//! least [`AHEAD_PODS`] pods, the cap is guessed before packing ([`Solver::likely_fair_cap`]),
//! and when first-fit's plan asks for that very cap, that packing stands for the one that
//! would have run after it (it is the same simulation on the same setup); a guess not asked
//! for is dropped. The plan never depends on the guess, only the time does.

use super::*;

/// Capped packings tried at most, besides first-fit.
pub(super) const MAX_CAPS: usize = 2;

/// Relative tolerance of price comparisons (sums of the same prices in another order).
const EPSILON: f64 = 1e-9;

/// A cap is tried only if it could save more than this share of first-fit's price.
const MIN_SAVING: f64 = 1e-3;

/// Pending pods from which the likely fair cap's packing runs beside first-fit's, on a second
/// thread ([`first_fit_and_ahead`]); a smaller solve is over before a thread would start.
const AHEAD_PODS: usize = 256;

/// The cheapest plan for `input`; see the module documentation.
pub(super) fn cheapest(input: &Input, dra: &crate::dra::Dra) -> Output {
    let guess = |s: &Solver, queue: &Queue| {
        (queue.pending.len() >= AHEAD_PODS)
            .then(|| s.likely_fair_cap(queue))
            .flatten()
    };
    plan(input, dra, guess).0
}

/// What became of the packing run beside first-fit's ([`first_fit_and_ahead`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ahead {
    /// None ran: no guess.
    NotRun,
    /// Its cap was tried: its packing stood for that cap's.
    Taken,
    /// Its cap was tried, and its claims cost more than the plan to beat: dropped, as the
    /// packing of that cap stops on the way.
    OverBudget,
    /// Its cap was not among those tried: dropped.
    Dropped,
}

/// [`cheapest`], with the cap packed beside first-fit's guessed by `guess` (`None`: no
/// packing beside it); and what became of that packing.
pub(super) fn plan(
    input: &Input,
    dra: &crate::dra::Dra,
    guess: impl FnOnce(&Solver, &Queue) -> Option<f64>,
) -> (Output, Ahead) {
    let base = build::build(input, dra);
    let queue = Queue::of(&base, input);
    let guess = guess(&base, &queue);
    let (mut first_fit, mut ahead, refs) = first_fit_and_ahead(&base, &queue, input, guess);
    let mut fate = if ahead.is_some() {
        Ahead::Dropped
    } else {
        Ahead::NotRun
    };
    let mut best: Option<Packed> = None;
    let caps = first_fit.solver.caps();
    let mut base = Some(base);
    for (i, &(cap, score)) in caps.iter().enumerate() {
        let to_beat = best.as_ref().unwrap_or(&first_fit).price;
        // A scored cap whose estimate cannot save more than the plan kept already does.
        if score.is_some_and(|saving| first_fit.price - to_beat >= saving) {
            continue;
        }
        // A packing whose claims already cost more than the best plan cannot win.
        let budget = to_beat * (1.0 + EPSILON) + EPSILON;
        let cand = match ahead.take_if(|(c, _)| *c == cap) {
            // Packed beside first-fit, before the budget was known: the packing below would
            // have stopped exactly when its claims' final price (which only grows on the
            // way) is over it.
            Some((_, packed)) if packed.solver.spent > budget => {
                fate = Ahead::OverBudget;
                None
            }
            Some((_, packed)) => {
                fate = Ahead::Taken;
                Some(packed)
            }
            None => {
                // The last packing takes the setup itself, uncloned.
                let last = i + 1 == caps.len();
                let Some(mut s) = (if last { base.take() } else { base.clone() }) else {
                    break;
                };
                s.cap = cap;
                // About as many claims as first-fit's: grown once, not by doubling.
                s.claims.reserve(first_fit.solver.claims.len());
                s.budget = budget;
                pack_all(&mut s, &queue).map(|unplaced| Packed::of(s, unplaced))
            }
        };
        if let Some(cand) = cand
            && cand.beats(best.as_ref().unwrap_or(&first_fit), &first_fit)
        {
            best = Some(cand);
        }
    }
    let out = match &mut best {
        Some(b) => {
            let mut out = b.output(input, refs);
            out.first_fit_price = Some(first_fit.price);
            out
        }
        None => first_fit.output(input, refs),
    };
    // A large solve's packings are freed on the worker, after the caller has its plan; a
    // small one's here (no worker to wake for them).
    if fate != Ahead::NotRun {
        helper::dispose((first_fit, best, base, ahead));
    }
    (out, fate)
}

/// First-fit's packing of `base`; and, given a `guess` of the cap first-fit's plan will ask
/// for first (in a solve of at least [`AHEAD_PODS`] pods, [`Solver::likely_fair_cap`]), the
/// packing under it, run at the same time on a second thread, with its cap. The caps tried
/// are still read from first-fit's plan: when the guess is not among them its packing is
/// dropped, and the plan is the same either way. Meanwhile the output's pod references are
/// made (first-fit's packing ends first, as it has no cap to check).
fn first_fit_and_ahead(
    base: &Solver,
    queue: &Queue,
    input: &Input,
    guess: Option<f64>,
) -> (Packed, Option<(f64, Packed)>, output::Refs) {
    // Without a budget nothing stops a packing on the way.
    let pack = |mut s: Solver| {
        let unplaced = pack_all(&mut s, queue).unwrap_or_default();
        Packed::of(s, unplaced)
    };
    let Some(cap) = guess else {
        return (pack(base.clone()), None, output::Refs::default());
    };
    let mut capped = base.clone();
    capped.cap = cap;
    // Its own memo of compatible types: one shared by two threads at once costs more in
    // contention than it saves.
    capped.compat = Compat::default();
    let mut capped = Some(capped);
    let ((first_fit, refs), ahead) = helper::beside(
        || capped.take().map(pack),
        || (pack(base.clone()), output::Refs::all(base, input)),
    );
    // No second thread to be had: the capped packing runs after first-fit's.
    let ahead = ahead.flatten().or_else(|| capped.take().map(pack));
    (first_fit, ahead.map(|a| (cap, a)), refs)
}

/// `types` with an offering, by the rank of their best offering, then by index (see
/// [`Solver::claim_launch`]).
pub(super) fn launch_order(types: &[TypeData]) -> Vec<(Rank, usize)> {
    let mut order: Vec<(Rank, usize)> = types
        .iter()
        .enumerate()
        .filter_map(|(t, td)| {
            td.offerings
                .iter()
                .map(|o| (!o.reserved, o.price))
                .min_by(|a, b| by_rank(*a, *b))
                .map(|r| (r, t))
        })
        .collect();
    order.sort_by(|a, b| by_rank(a.0, b.0).then(a.1.cmp(&b.1)));
    order
}

/// A finished packing, priced as its output will be.
struct Packed {
    solver: Solver,
    unplaced: Unplaced,
    /// The claims' launch prices, summed in output order ([`Output::price`]).
    price: f64,
    /// Claims with a launchable offering (those the output lists).
    claims: usize,
}

impl Packed {
    fn of(solver: Solver, unplaced: Unplaced) -> Self {
        let mut price = 0.0;
        let mut claims = 0;
        for c in &solver.claims {
            let p = solver.claim_price(c.pool, &c.reqs, &c.cands, c.held);
            if p.is_finite() {
                price += p;
                claims += 1;
            }
        }
        Packed {
            solver,
            unplaced,
            price,
            claims,
        }
    }

    /// Whether this plan beats `best`: it schedules no fewer pods than `first_fit` and is
    /// cheaper, or as cheap with fewer NodeClaims.
    fn beats(&self, best: &Packed, first_fit: &Packed) -> bool {
        if self.unplaced.0.len() > first_fit.unplaced.0.len() {
            return false;
        }
        let eps = EPSILON * best.price.abs().max(1.0);
        self.price < best.price - eps
            || (self.price <= best.price + eps && self.claims < best.claims)
    }

    fn output(&mut self, input: &Input, refs: output::Refs) -> Output {
        let (failed, errors) = std::mem::take(&mut self.unplaced);
        output::output(&self.solver, input, failed, errors, refs)
    }
}

impl Solver {
    /// The launch price of a claim: its preferred launchable offering's (reserved first, then
    /// the cheapest), as the output lists it; `INFINITY` when it has none.
    pub(super) fn claim_price(
        &self,
        pool: usize,
        reqs: &IReqs,
        cands: &BitSet,
        held: Option<u32>,
    ) -> f64 {
        self.claim_launch(pool, reqs, cands, held).0
    }

    /// [`Self::claim_price`] and the type it launches (`usize::MAX`: none): the candidate
    /// whose preferred offering ranks first, the lowest index among equals. The types are
    /// visited by the rank of their best offering ([`PoolData::launch_order`]), so the
    /// search stops at the first type whose every offering ranks after the best found.
    pub(super) fn claim_launch(
        &self,
        pool: usize,
        reqs: &IReqs,
        cands: &BitSet,
        held: Option<u32>,
    ) -> (f64, usize) {
        let p = &self.pools[pool];
        let mut best: Option<(Rank, usize)> = None;
        for &(floor, t) in &p.launch_order {
            if best.is_some_and(|(r, _)| by_rank(floor, r).is_gt()) {
                break;
            }
            if !cands.contains(t) {
                continue;
            }
            let Some(o) = self.preferred_offering(&p.types[t], reqs, Counts::Held(held)) else {
                continue;
            };
            let r = self.rank(&o);
            let better = best.is_none_or(|(br, bt)| by_rank(r, br).then(t.cmp(&bt)).is_lt());
            if better {
                best = Some((r, t));
            }
        }
        best.map_or((f64::INFINITY, usize::MAX), |(r, t)| (r.1, t))
    }

    /// Per resource, the most room left on a candidate of claim `c` that could launch at most
    /// at `max(cap, price)` (its cheapest available offering is no dearer): a pod needing more
    /// cannot join it within the cap, whatever the rest of the check says. And those
    /// candidates ([`Claim::cap_ok`]).
    pub(super) fn cap_free(&self, c: &Claim, price: f64) -> (Vec<i64>, BitSet) {
        let limit = self.cap.max(price);
        let p = &self.pools[c.pool];
        let mut free = vec![i64::MIN; c.used.len()];
        let mut ok = BitSet::new(p.types.len());
        for t in c.cands.iter() {
            let td = &p.types[t];
            if td.cheapest_available > limit {
                continue;
            }
            ok.insert(t);
            for (f, (a, u)) in free.iter_mut().zip(td.usable.iter().zip(&c.used)) {
                *f = (*f).max(a - u);
            }
        }
        (free, ok)
    }

    /// Whether a type of claim `ci` that could launch within the cap ([`Claim::cap_ok`]) holds
    /// `requests` besides its pods' (as [`Solver::try_claim`] checks them). If none does,
    /// [`Solver::over_cap`] would reject any way the pod joins: every type left costs more.
    pub(super) fn cap_holds(&self, ci: usize, requests: &[i64]) -> bool {
        let c = &self.claims[ci];
        let types = &self.pools[c.pool].types;
        c.cap_ok.iter().any(|t| {
            c.used
                .iter()
                .zip(requests)
                .zip(&types[t].usable)
                .all(|((u, r), a)| u + r <= *a)
        })
    }

    /// Whether adding a pod to claim `ci` as `u` says would raise its price above the cap
    /// (never under first-fit, whose cap is infinite).
    pub(super) fn over_cap(&self, ci: usize, u: &pack::ClaimUpdate) -> bool {
        if !self.cap.is_finite() {
            return false;
        }
        let c = &self.claims[ci];
        // The type it launches still holds the pod, under the same requirements: same price.
        if u.reqs.is_none() && c.launch != usize::MAX && u.cands.contains(c.launch) {
            return false;
        }
        let reqs = u.reqs.as_ref().unwrap_or(&c.reqs);
        let limit = self.cap.max(c.price);
        // Without a reserved offering the price is the cheapest preferred offering's: the
        // first candidate within the limit settles it (the full minimum is the slow path).
        let p = &self.pools[c.pool];
        let mut reserved = false;
        for t in u.cands.iter() {
            match self.preferred_offering(&p.types[t], reqs, Counts::Held(c.held)) {
                Some(o) if o.reserved => {
                    reserved = true;
                    break;
                }
                Some(o) if o.price <= limit => return false,
                _ => {}
            }
        }
        !reserved || self.claim_price(c.pool, reqs, &u.cands, c.held) > limit
    }

    /// The caps worth a packing, from a finished first-fit packing (see the module
    /// documentation), in the order they are tried: each pool's fair cap (no score), then the
    /// caps that could save the most, each with the most it is estimated to save.
    pub(super) fn caps(&self) -> Vec<(f64, Option<f64>)> {
        let claims: Vec<(f64, &Claim)> = self
            .claims
            .iter()
            .map(|c| (self.claim_price(c.pool, &c.reqs, &c.cands, c.held), c))
            .filter(|(p, _)| p.is_finite())
            .collect();
        let mut caps: Vec<f64> = Vec::new();
        for pi in 0..self.pools.len() {
            let mine: Vec<&(f64, &Claim)> = claims.iter().filter(|(_, c)| c.pool == pi).collect();
            let Some(fair) = self.fair_cap(pi, mine.iter().map(|(_, c)| *c)) else {
                continue;
            };
            if mine.iter().any(|(p, _)| *p > fair) && !caps.contains(&fair) {
                caps.push(fair);
            }
        }
        caps.truncate(MAX_CAPS);
        let mut caps: Vec<(f64, Option<f64>)> = caps.into_iter().map(|c| (c, None)).collect();
        let fair = caps.len();
        let total: f64 = claims.iter().map(|(p, _)| p).sum();
        // (what moving first-fit's claims onto this type alone could save at most, its price)
        let mut scored: Vec<(f64, f64)> = Vec::new();
        for (pi, pool) in self.pools.iter().enumerate() {
            for t in pool.base.iter() {
                let td = &pool.types[t];
                let Some(price) = cheapest_available(td) else {
                    continue;
                };
                let saving: f64 = claims
                    .iter()
                    .filter(|(p, c)| c.pool == pi && *p > price)
                    .map(|(p, c)| (p - price * nodes_needed(&c.used, &td.usable)).max(0.0))
                    .sum();
                if saving > total * MIN_SAVING {
                    scored.push((saving, price));
                }
            }
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.total_cmp(&b.1)));
        for (saving, price) in scored {
            if caps.len() == MAX_CAPS {
                break;
            }
            if !caps.iter().any(|(c, _)| *c == price) {
                caps.push((price, Some(saving)));
            }
        }
        // The highest of the others first: it packs densest, and a fair cap's price (tried
        // first, it often wins) stops their packings early.
        caps[fair..].sort_by(|a, b| b.0.total_cmp(&a.0));
        caps
    }

    /// The fair cap of pool `pool`: the price of its cheapest type that holds the average of
    /// `claims` (first-fit's, of this pool), every resource rounded up. When a workload
    /// needs at least as many nodes as first-fit planned (hostname spread or anti-affinity),
    /// nodes that size carry it; `None` without claims or such a type.
    fn fair_cap<'a>(&self, pool: usize, claims: impl Iterator<Item = &'a Claim>) -> Option<f64> {
        let mut sum: Vec<i64> = Vec::new();
        let mut n = 0i64;
        for c in claims {
            add_to(&mut sum, &c.used);
            n += 1;
        }
        self.fair_cap_of(pool, &sum, n)
    }

    /// The price of pool `pool`'s cheapest type that holds `sum` over `n` nodes, every
    /// resource rounded up; `None` when `n` is 0 or no type does.
    fn fair_cap_of(&self, pool: usize, sum: &[i64], n: i64) -> Option<f64> {
        if n <= 0 {
            return None;
        }
        let avg: Vec<i64> = sum.iter().map(|s| ceil_div(*s, n)).collect();
        let p = &self.pools[pool];
        p.base
            .iter()
            .map(|t| &p.types[t])
            .filter(|td| fits(&avg, &td.usable))
            .filter_map(cheapest_available)
            .reduce(f64::min)
    }

    /// The fair cap first-fit's plan is likely to give the first pool ([`Solver::caps`]),
    /// before packing: the requests of the pending pods the pool accepts, less the room of the
    /// nodes there are, over the fewest claims that carry them: as many as the pods of the
    /// largest hostname anti-affinity group that selects its own pods (each needs a node of
    /// its own), and at least what the largest type holds of each resource. First-fit packs
    /// claims until they are full or a rule keeps pods apart, so its claims are often that
    /// many; a wrong guess costs time, never the plan (see [`first_fit_and_ahead`]).
    pub(super) fn likely_fair_cap(&self, queue: &Queue) -> Option<f64> {
        let pool = 0;
        let types = &self.pools.get(pool)?.types;
        let mut sum: Vec<i64> = Vec::new();
        let mut apart: HashMap<usize, i64> = HashMap::default();
        for &pi in &queue.pending {
            let pod = &self.pods[pi];
            if self.pool_check(pool, pod).is_err() {
                continue;
            }
            add_to(&mut sum, &pod.requests);
            for &g in &pod.anti {
                let grp = &self.groups[g];
                if grp.host && grp.selects(pod.ns, &pod.labels) {
                    *apart.entry(g).or_default() += 1;
                }
            }
        }
        for n in &self.nodes {
            for (s, f) in sum.iter_mut().zip(&n.free) {
                *s = s.saturating_sub((*f).max(0)).max(0);
            }
        }
        let mut fewest = apart.values().copied().max().unwrap_or(1);
        for (r, total) in sum.iter().enumerate() {
            let largest = types.iter().filter_map(|t| t.usable.get(r)).max();
            if let Some(&a) = largest.filter(|a| **a > 0) {
                fewest = fewest.max(ceil_div(*total, a));
            }
        }
        self.fair_cap_of(pool, &sum, fewest)
    }
}

/// `a / b` rounded up (`b` > 0).
fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) > 0)
}

/// Adds `v` to `sum` element by element (`sum` grows to `v`'s length).
fn add_to(sum: &mut Vec<i64>, v: &[i64]) {
    if sum.len() < v.len() {
        sum.resize(v.len(), 0);
    }
    for (s, x) in sum.iter_mut().zip(v) {
        *s = s.saturating_add(*x);
    }
}

/// The price of `t`'s cheapest available offering.
fn cheapest_available(t: &TypeData) -> Option<f64> {
    t.offerings
        .iter()
        .filter(|o| o.available)
        .map(|o| o.price)
        .reduce(f64::min)
}

/// At least how many nodes of allocatable `usable` hold requests `used` (`INFINITY`: none).
fn nodes_needed(used: &[i64], usable: &[i64]) -> f64 {
    used.iter()
        .zip(usable)
        .filter(|(u, _)| **u > 0)
        .map(|(u, a)| {
            if *a > 0 {
                (*u as f64 / *a as f64).ceil()
            } else {
                f64::INFINITY
            }
        })
        .fold(1.0, f64::max)
}
