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

use super::topology::{GroupKind, HostCheck, TopoPlan};
use super::*;

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
        self.by_count = CountOrder::new(self.res_names.len() + self.host_cols.len());
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
        self.by_count.fill_room(ci, |row| {
            for (i, dst) in row[..r].iter_mut().enumerate() {
                *dst = free.get(i).copied().unwrap_or(i64::MAX);
            }
            for (dst, (g, base)) in row[r..].iter_mut().zip(cols) {
                *dst = base - i64::from(groups[*g].host_count(slot));
            }
        });
    }
}
