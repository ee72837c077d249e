//! The room of planned claims as [`CountOrder`] keeps it: a claim's resources left, and a few
//! hostname topology groups written as resources, so that the scan of [`Solver::add`] skips
//! claims that a pod's hostname spread or anti-affinity rules out as it skips full ones.
//!
//! A hostname group of a spread (`maxSkew` m) or an anti-affinity term is a resource of every
//! claim: its room is `m` (0 for anti-affinity) minus the claim's pods the group counts, and a
//! pod the group constrains needs `selfsel` of it (1 when the group selects the pod itself, 0
//! otherwise; 0 under anti-affinity), exactly [`Solver::host_ok`]'s check. A pod the group
//! does not constrain needs `i64::MIN` of it. The columns only skip: every claim the scan
//! visits still goes through [`Solver::host_ok`] and the rest of the checks.
//!
//! The other topology keys a pod's rules pick or narrow domains of (zones, most often) are
//! kept per claim as a bitmask of the domains its requirements allow ([`Solver::mask_keys`],
//! up to 64 domains a key), [`CountOrder`]'s domain sets. A pod's rule allows a set of
//! domains, those its own requirements allow too; a claim whose set meets none of them fails
//! [`Solver::rules_possible`], so the scan skips it as it skips full ones. A rule naming a
//! domain outside the key's list, or excluding domains (it can hold on any claim), skips
//! nothing; of two rules on one key, only the first skips.

use super::topology::{DomainRule, GroupKind, HostCheck, TopoPlan};
use super::*;

/// Keys kept as claim domain masks: one bit per domain.
const MAX_MASK_DOMAINS: usize = 64;

/// What a pod needs of a claim's domain sets, per key of [`Solver::mask_keys`]: a domain of
/// these (0: no need).
pub(super) type Needed = smallvec::SmallVec<[u64; 2]>;

/// Hostname groups written as resources, at most: the groups that constrain the most pods.
const MAX_HOST_COLUMNS: usize = 8;

/// What a pod needs of a claim's room: inline for a few resources and every host column.
pub(super) type Want = smallvec::SmallVec<[i64; 4 + MAX_HOST_COLUMNS]>;

impl Solver {
    /// Picks the hostname groups written as resources ([`Solver::host_cols`]) and sizes
    /// [`Solver::by_count`]'s rooms; after every group and pod is known.
    pub(super) fn room_columns(&mut self) {
        let mut constrained = vec![0usize; self.groups.len()];
        for pod in &self.pods {
            for (g, _) in pod.owned() {
                constrained[g] += 1;
            }
        }
        let mut cols: Vec<(usize, usize, i64)> = self
            .groups
            .iter()
            .enumerate()
            .filter(|(g, _)| constrained[*g] > 0)
            .filter_map(|(g, grp)| {
                let base = match grp.kind {
                    _ if !grp.host => return None,
                    GroupKind::Spread(max, _) => i64::from(max),
                    GroupKind::Anti => 0,
                    GroupKind::Affinity => return None,
                };
                Some((constrained[g], g, base))
            })
            .collect();
        cols.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        cols.truncate(MAX_HOST_COLUMNS);
        self.host_cols = cols.into_iter().map(|(_, g, base)| (g, base)).collect();
        let mut keys: Vec<Key> = (self.groups.iter().enumerate())
            .filter(|(g, grp)| constrained[*g] > 0 && !grp.host)
            .map(|(_, grp)| grp.key)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        self.mask_keys = (keys.into_iter())
            .filter_map(|k| Some((k, self.universe.get(&k)?.clone())))
            .filter(|(_, domains)| domains.len() <= MAX_MASK_DOMAINS)
            .collect();
        let width = self.res_names.len() + self.host_cols.len();
        self.by_count = CountOrder::new(width, self.mask_keys.len());
    }

    /// What pod `pod`'s domain rules under `plan` need of a claim's domain sets (see the
    /// module documentation); `None` when a rule allows no domain the pod does: no claim holds
    /// the pod.
    pub(super) fn needed_domains(&self, plan: &TopoPlan, pod: &PodData) -> Option<Needed> {
        let mut needed: Needed = smallvec::smallvec![0; self.mask_keys.len()];
        for r in &plan.rules {
            let Some(k) = self.mask_keys.iter().position(|(key, _)| *key == r.key) else {
                continue;
            };
            let domains = match &r.rule {
                DomainRule::Pick(order) | DomainRule::Bootstrap(order) => order,
                DomainRule::Narrow(set) if !set.complement => &set.values,
                DomainRule::Narrow(_) => continue,
            };
            let own = pod.reqs.get(&r.key);
            let bits = (domains.iter().filter(|d| own.is_none_or(|s| s.has(d))))
                .map(|d| self.mask_keys[k].1.iter().position(|x| x == d))
                .try_fold(0u64, |m, i| Some(m | 1 << i?));
            match bits {
                Some(0) => return None,
                Some(bits) if needed[k] == 0 => needed[k] = bits,
                _ => {}
            }
        }
        Some(needed)
    }

    /// What pod `pi` needs of a claim's room under `plan`: its requests, then per hostname
    /// column what its check there needs (see the module documentation).
    pub(super) fn wanted(&self, pi: usize, plan: &TopoPlan) -> Want {
        let r = self.res_names.len();
        let requests = &self.pods[pi].requests;
        let mut want: Want = (0..r)
            .map(|i| requests.get(i).copied().unwrap_or(0))
            .collect();
        want.resize(r + self.host_cols.len(), i64::MIN);
        for (g, check) in &plan.host {
            let need = match check {
                HostCheck::Spread { selfsel, .. } => i64::from(*selfsel),
                HostCheck::Anti => 0,
                HostCheck::Affinity { .. } | HostCheck::Repelled => continue,
            };
            if let Some(c) = self.host_cols.iter().position(|(cg, _)| cg == g) {
                want[r + c] = want[r + c].max(need);
            }
        }
        want
    }

    /// Gives claim `ci`'s room to [`Solver::by_count`]: the most a pod may request of each
    /// resource (its `max_free`, under a price cap its `cap_free`; unlimited where it has
    /// none), then its hostname columns.
    pub(super) fn keep_room(&mut self, ci: usize) {
        let c = &self.claims[ci];
        let free = if self.cap.is_finite() {
            &c.cap_free
        } else {
            &c.max_free
        };
        let slot = self.nodes.len() + ci;
        let r = self.res_names.len();
        let (cols, groups) = (&self.host_cols, &self.groups);
        let (keys, reqs) = (&self.mask_keys, &c.reqs);
        self.by_count.fill_room(ci, |row, sets| {
            for (i, dst) in row[..r].iter_mut().enumerate() {
                *dst = free.get(i).copied().unwrap_or(i64::MAX);
            }
            for (dst, (g, base)) in row[r..].iter_mut().zip(cols) {
                *dst = base - i64::from(groups[*g].host_count(slot));
            }
            for (dst, (key, domains)) in sets.iter_mut().zip(keys) {
                *dst = match reqs.get(key) {
                    None => u64::MAX,
                    Some(set) => (domains.iter().enumerate())
                        .filter(|(_, d)| set.has(d))
                        .fold(0, |m, (i, _)| m | 1 << i),
                };
            }
        });
    }
}
