//! Claims ordered by pod count, kept sorted in O(1) per change, with the room a pod needs to
//! join each and a bound per block of them that lets the scan skip claims too full for a pod,
//! or whose domains are none a pod may go to.

/// Claims per block of [`CountOrder::bound`].
const BLOCK: usize = 16;

/// Claim indices kept sorted by pod count ascending in O(1) per change: `order[end[k-1]..end[k]]`
/// holds the claims with exactly `k` pods.
///
/// Alongside, by position, each claim's room (the most a pod may request to join it, as
/// [`CountOrder::fill_room`] wrote it), and per block of [`BLOCK`] positions an upper bound
/// of their rooms, per resource: a pod that does not fit a block's bound fits none of its
/// claims, so [`CountOrder::next_fit`] skips the block without visiting them. Likewise each
/// claim's domain sets (bitmasks, one per key), with their union per block: a pod that needs
/// a domain of a set that a block's union lacks is held by none of its claims.
///
/// A block's bound is a box: on rooms that are short in different resources it holds pods
/// that none of its claims holds, and the scan visits it again for each. So each block also
/// keeps the last pod (request and needed domains) a full visit found no claim for: a pod
/// that asks at least as much, and domains at least as narrow, finds none either, until a
/// room or domain set in the block changes.
#[derive(Clone, Default)]
pub(super) struct CountOrder {
    pub(super) order: Vec<usize>,
    pub(super) pos: Vec<usize>,
    pub(super) end: Vec<usize>,
    /// Resources per room.
    width: usize,
    /// Per position, its claim's room (`width` apiece).
    room: Vec<i64>,
    /// Per block, at least the largest room of its positions, per resource (`width` apiece).
    bound: Vec<i64>,
    /// Domain sets per claim.
    sets: usize,
    /// Per position, its claim's domain sets (`sets` apiece).
    domains: Vec<u64>,
    /// Per block, at least the union of its positions' domain sets (`sets` apiece).
    union: Vec<u64>,
    /// Per block, whether [`CountOrder::missed`] holds a pod none of its claims holds.
    has_miss: Vec<bool>,
    /// Per block, that pod: its request (`width`) then its needed domains (`sets`).
    missed: Vec<i64>,
    /// Blocks skipped for their miss (tests read it).
    #[cfg(test)]
    skipped: usize,
}

/// Whether domain sets `have` meet each of `need` (0: any, even none).
fn meets(need: &[u64], have: &[u64]) -> bool {
    need.iter().zip(have).all(|(n, h)| *n == 0 || n & h != 0)
}

/// Whether a pod requesting `req` and needing `need` asks at least what the pod `missed`
/// asks (its request, then its needed domains; see [`CountOrder::remember_miss`]), so that
/// no claim holding none of that pod holds it: at least as much of each resource, and each
/// set it needs within the other's (a set the other does not need, 0, may be anything).
/// What `req` or `need` leave out asks nothing (as `fits` and [`meets`] read them).
fn asks_more(req: &[i64], need: &[u64], missed: &[i64], width: usize) -> bool {
    let (missed_req, missed_need) = missed.split_at(width);
    let more = missed_req
        .iter()
        .enumerate()
        .all(|(i, m)| *m <= req.get(i).copied().unwrap_or(i64::MIN));
    more && missed_need.iter().enumerate().all(|(i, t)| {
        let (t, n) = (*t as u64, need.get(i).copied().unwrap_or(0));
        t == 0 || (n != 0 && n & !t == 0)
    })
}

impl CountOrder {
    /// An empty order of claims whose rooms have `width` resources and `sets` domain sets.
    pub(super) fn new(width: usize, sets: usize) -> Self {
        CountOrder {
            width,
            sets,
            ..Default::default()
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.order.swap(a, b);
        self.pos[self.order[a]] = a;
        self.pos[self.order[b]] = b;
        let w = self.width;
        let (lo, hi) = (a.min(b), a.max(b));
        let (left, right) = self.room.split_at_mut(hi * w);
        left[lo * w..(lo + 1) * w].swap_with_slice(&mut right[..w]);
        let k = self.sets;
        let (left, right) = self.domains.split_at_mut(hi * k);
        left[lo * k..(lo + 1) * k].swap_with_slice(&mut right[..k]);
        if lo / BLOCK != hi / BLOCK {
            self.widen(lo);
            self.widen(hi);
        }
    }

    /// Raises the bound of position `p`'s block to its room.
    fn widen(&mut self, p: usize) {
        let w = self.width;
        let b = p / BLOCK;
        if self.bound.len() < (b + 1) * w {
            self.bound.resize((b + 1) * w, i64::MIN);
        }
        let room = &self.room[p * w..(p + 1) * w];
        for (m, r) in self.bound[b * w..(b + 1) * w].iter_mut().zip(room) {
            *m = (*m).max(*r);
        }
        let k = self.sets;
        if self.union.len() < (b + 1) * k {
            self.union.resize((b + 1) * k, 0);
        }
        let sets = &self.domains[p * k..(p + 1) * k];
        for (u, d) in self.union[b * k..(b + 1) * k].iter_mut().zip(sets) {
            *u |= d;
        }
        if self.has_miss.len() <= b {
            self.has_miss.resize(b + 1, false);
            self.missed.resize((b + 1) * (w + k), 0);
        }
        self.has_miss[b] = false;
    }

    /// Sets claim `claim`'s room (`width` resources; a missing one is unlimited) and domain
    /// sets (a missing one is every domain).
    #[cfg(test)]
    pub(super) fn set_room(&mut self, claim: usize, room: &[i64], sets: &[u64]) {
        self.fill_room(claim, |row, domains| {
            for (i, dst) in row.iter_mut().enumerate() {
                *dst = room.get(i).copied().unwrap_or(i64::MAX);
            }
            for (i, dst) in domains.iter_mut().enumerate() {
                *dst = sets.get(i).copied().unwrap_or(u64::MAX);
            }
        });
    }

    /// Sets claim `claim`'s room and domain sets in place: `fill` writes its `width`
    /// resources and `sets` sets.
    pub(super) fn fill_room(&mut self, claim: usize, fill: impl FnOnce(&mut [i64], &mut [u64])) {
        let (w, k) = (self.width, self.sets);
        let p = self.pos[claim];
        fill(
            &mut self.room[p * w..(p + 1) * w],
            &mut self.domains[p * k..(p + 1) * k],
        );
        self.widen(p);
    }

    /// The first position from `from` on whose claim's room holds `req` (as `fits` reads it)
    /// and whose domain sets meet `need` (each a set of domains one of which the claim must
    /// allow; 0: no need). A block whose every position was visited without a fit gets its
    /// exact bound.
    pub(super) fn next_fit(&mut self, from: usize, req: &[i64], need: &[u64]) -> Option<usize> {
        let (w, k) = (self.width, self.sets);
        let n = self.order.len();
        let mut p = from;
        while p < n {
            let b = p / BLOCK;
            let block_end = ((b + 1) * BLOCK).min(n);
            if !super::fits(req, &self.bound[b * w..(b + 1) * w])
                || !meets(need, &self.union[b * k..(b + 1) * k])
            {
                p = block_end;
                continue;
            }
            if self.has_miss[b]
                && asks_more(req, need, &self.missed[b * (w + k)..(b + 1) * (w + k)], w)
            {
                #[cfg(test)]
                {
                    self.skipped += 1;
                }
                p = block_end;
                continue;
            }
            let whole = p == b * BLOCK;
            for q in p..block_end {
                if super::fits(req, &self.room[q * w..(q + 1) * w])
                    && meets(need, &self.domains[q * k..(q + 1) * k])
                {
                    return Some(q);
                }
            }
            if whole {
                // A block with a miss is unchanged since the visit that tightened it.
                if !self.has_miss[b] {
                    self.tighten(b, block_end);
                }
                self.remember_miss(b, req, need);
            }
            p = block_end;
        }
        None
    }

    /// Notes that no claim of block `b` holds a pod requesting `req` and needing `need`.
    fn remember_miss(&mut self, b: usize, req: &[i64], need: &[u64]) {
        let (w, k) = (self.width, self.sets);
        let (r, n) = self.missed[b * (w + k)..(b + 1) * (w + k)].split_at_mut(w);
        for (i, dst) in r.iter_mut().enumerate() {
            *dst = req.get(i).copied().unwrap_or(i64::MIN);
        }
        for (i, dst) in n.iter_mut().enumerate() {
            *dst = need.get(i).copied().unwrap_or(0) as i64;
        }
        self.has_miss[b] = true;
    }

    /// Sets block `b`'s bound (its positions end before `end`) to the largest of their rooms,
    /// and its union to their domain sets'.
    fn tighten(&mut self, b: usize, end: usize) {
        let (w, k) = (self.width, self.sets);
        let bound = &mut self.bound[b * w..(b + 1) * w];
        bound.fill(i64::MIN);
        for q in b * BLOCK..end {
            for (m, r) in bound.iter_mut().zip(&self.room[q * w..(q + 1) * w]) {
                *m = (*m).max(*r);
            }
        }
        let union = &mut self.union[b * k..(b + 1) * k];
        union.fill(0);
        for q in b * BLOCK..end {
            for (u, d) in union.iter_mut().zip(&self.domains[q * k..(q + 1) * k]) {
                *u |= d;
            }
        }
    }

    /// Adds claim `claim` (the next index) with one pod, and no room until
    /// [`CountOrder::fill_room`] gives it one.
    pub(super) fn push(&mut self, claim: usize) {
        if self.end.is_empty() {
            self.end = vec![0, 0];
        }
        let n = self.order.len();
        self.order.push(claim);
        self.room.resize((n + 1) * self.width, i64::MIN);
        self.domains.resize((n + 1) * self.sets, 0);
        if self.pos.len() <= claim {
            self.pos.resize(claim + 1, 0);
        }
        self.pos[claim] = n;
        self.widen(n);
        let mut p = n;
        for k in (2..self.end.len()).rev() {
            let first = self.end[k - 1];
            if first < self.end[k] {
                self.swap(p, first);
                p = first;
            }
            self.end[k] += 1;
        }
        self.end[1] += 1;
    }

    /// Claim `claim` goes from `from` pods to `from + 1`.
    pub(super) fn increment(&mut self, claim: usize, from: usize) {
        if from + 1 >= self.end.len() {
            self.end.push(self.order.len());
        }
        let last = self.end[from] - 1;
        self.swap(self.pos[claim], last);
        self.end[from] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::{BLOCK, CountOrder};

    /// A deterministic generator: each call, the next number below `m`.
    fn lcg(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |m| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        }
    }

    /// `next_fit` finds what a scan of every position finds, as claims join, change their
    /// room and domain sets and move between counts (several blocks).
    #[test]
    fn next_fit_finds_the_first_claim_with_room() {
        let mut o = CountOrder::new(2, 1);
        let mut rooms: Vec<([i64; 2], u64)> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        let mut rand = lcg(11);
        let (mut found, mut by_domain) = (0, 0);
        for step in 0..4000 {
            let roll = rand(10);
            if rooms.is_empty() || roll == 0 {
                o.push(rooms.len());
                counts.push(1);
                rooms.push(([0, 0], 0));
            } else if roll < 5 {
                let c = rand(rooms.len() as u64) as usize;
                o.increment(c, counts[c]);
                counts[c] += 1;
            }
            // A room shrinks as pods join, and sometimes grows (a cap's launch type changes);
            // a claim allows some of three domains.
            let c = rand(rooms.len() as u64) as usize;
            rooms[c] = ([rand(100) as i64, rand(100) as i64], rand(8));
            o.set_room(c, &rooms[c].0, &[rooms[c].1]);
            let req = [rand(100) as i64, rand(100) as i64];
            let need = [rand(8)];
            let from = rand(rooms.len() as u64 + 1) as usize;
            let holds = |p: &usize| {
                let (r, set) = rooms[o.order[*p]];
                req[0] <= r[0] && req[1] <= r[1] && (need[0] == 0 || need[0] & set != 0)
            };
            let want = (from..o.order.len()).find(holds);
            let by_room = (from..o.order.len()).find(|p| {
                let r = rooms[o.order[*p]].0;
                req[0] <= r[0] && req[1] <= r[1]
            });
            assert_eq!(o.next_fit(from, &req, &need), want, "step {step}");
            found += usize::from(want.is_some());
            by_domain += usize::from(by_room.is_some() && by_room != want);
            // A pod asking more, or needing narrower domains, from the start: the blocks the
            // last full visit found no claim in are skipped, and the answer is the same.
            let more = [req[0] + rand(3) as i64, req[1] + rand(3) as i64];
            let narrower = [if need[0] == 0 {
                rand(8)
            } else {
                need[0] & !(1 << rand(3))
            }];
            let holds = |p: &usize| {
                let (r, set) = rooms[o.order[*p]];
                more[0] <= r[0] && more[1] <= r[1] && (narrower[0] == 0 || narrower[0] & set != 0)
            };
            let want = (0..o.order.len()).find(holds);
            assert_eq!(o.next_fit(0, &more, &narrower), want, "step {step}, again");
        }
        // The misses were used.
        assert!(o.skipped > 200, "{}", o.skipped);
        // Every outcome was exercised, over more than one block: a fit, none, and a claim
        // with room passed over for its domains.
        assert!(found > 100 && found < 3900, "{found}");
        assert!(by_domain > 100, "{by_domain}");
        assert!(o.order.len() > 3 * BLOCK, "{}", o.order.len());
    }

    #[test]
    fn count_order_stays_sorted() {
        let mut o = CountOrder::new(1, 0);
        let mut counts: Vec<usize> = Vec::new();
        let mut rand = lcg(7);
        for step in 0..2000 {
            let r = rand(u64::MAX);
            if counts.is_empty() || step % 7 == 0 {
                o.push(counts.len());
                counts.push(1);
            } else {
                let c = r as usize % counts.len();
                o.increment(c, counts[c]);
                counts[c] += 1;
            }
            let seen: Vec<usize> = o.order.iter().map(|c| counts[*c]).collect();
            assert!(
                seen.windows(2).all(|w| w[0] <= w[1]),
                "step {step}: {seen:?}"
            );
            for (p, c) in o.order.iter().enumerate() {
                assert_eq!(o.pos[*c], p);
            }
        }
    }
}
