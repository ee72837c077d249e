//! Volumes in the simulation: per-driver attach limits on existing nodes and planned
//! NodeClaims (Karpenter's `VolumeUsage` and `filterInstanceTypesByVolumeAttachmentLimits`).
//!
//! Only the drivers and volumes of pending pods are interned: a driver no pending pod uses
//! cannot be exceeded by the solve, and a bound pod's volume no pending pod shares only
//! counts. A volume is a ([`VolumeUse::driver`], [`VolumeUse::id`]) pair, counted once per
//! node however many pods use it. The topology alternatives of a pod's volumes
//! ([`Pod::volume_requirements`]) are interned with the pod ([`PodData::vol_alts`]).

use super::*;

/// No limit: the driver is not declared.
pub(super) const UNLIMITED: u32 = u32::MAX;

/// The volumes on a node or planned NodeClaim: interned volumes (sorted) and, per interned
/// driver, how many distinct volumes it attaches (bound pods' unshared ones included).
#[derive(Clone, Default)]
pub(super) struct Attached {
    pub(super) vols: Vec<u32>,
    pub(super) count: Vec<u32>,
}

impl Attached {
    fn count(&self, driver: u32) -> u32 {
        self.count.get(driver as usize).copied().unwrap_or(0)
    }

    /// Per driver the pod uses: the distinct volumes once the pod's join (driver, count).
    pub(super) fn with(&self, pod: &[u32], vol_driver: &[u32]) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = Vec::new();
        for v in pod {
            let d = vol_driver[*v as usize];
            let i = match out.iter().position(|(od, _)| *od == d) {
                Some(i) => i,
                None => {
                    out.push((d, self.count(d)));
                    out.len() - 1
                }
            };
            if self.vols.binary_search(v).is_err() {
                out[i].1 += 1;
            }
        }
        out
    }

    /// Adds the pod's volumes.
    pub(super) fn add(&mut self, pod: &[u32], vol_driver: &[u32]) {
        for v in pod {
            if let Err(i) = self.vols.binary_search(v) {
                self.vols.insert(i, *v);
                let d = vol_driver[*v as usize] as usize;
                if self.count.len() <= d {
                    self.count.resize(d + 1, 0);
                }
                self.count[d] += 1;
            }
        }
    }
}

/// The first driver whose count exceeds its limit in `limits` (per interned driver).
pub(super) fn exceeded(limits: &[u32], counts: &[(u32, u32)]) -> Option<u32> {
    counts
        .iter()
        .find(|(d, n)| limits.get(*d as usize).is_some_and(|l| n > l))
        .map(|(d, _)| *d)
}

/// Per interned driver, the limit `limits` gives ([`UNLIMITED`] when not listed).
pub(super) fn dense_limits(drivers: &[String], limits: &BTreeMap<String, u32>) -> Vec<u32> {
    if limits.is_empty() {
        return Vec::new();
    }
    drivers
        .iter()
        .map(|d| limits.get(d).copied().unwrap_or(UNLIMITED))
        .collect()
}

/// The pending pods' volumes, interned: what setup needs to read nodes' bound pods.
#[derive(Default)]
pub(super) struct VolIndex {
    drivers: HashMap<String, u32>,
    vols: HashMap<(String, String), u32>,
    /// Per pending pod (input order), its volumes, sorted.
    pub(super) pods: Vec<Vec<u32>>,
}

/// Interns the pending pods' drivers and volumes into `s`.
pub(super) fn intern(s: &mut Solver, input: &Input) -> VolIndex {
    let mut ix = VolIndex::default();
    for p in &input.pods {
        let mut mine: Vec<u32> = Vec::new();
        for u in &p.volumes {
            let d = match ix.drivers.get(&u.driver) {
                Some(d) => *d,
                None => {
                    let d = s.drivers.len() as u32;
                    s.drivers.push(u.driver.clone());
                    ix.drivers.insert(u.driver.clone(), d);
                    d
                }
            };
            let key = (u.driver.clone(), u.id.clone());
            let v = match ix.vols.get(&key) {
                Some(v) => *v,
                None => {
                    let v = s.vol_driver.len() as u32;
                    s.vol_driver.push(d);
                    ix.vols.insert(key, v);
                    v
                }
            };
            mine.push(v);
        }
        mine.sort_unstable();
        mine.dedup();
        ix.pods.push(mine);
    }
    ix
}

impl VolIndex {
    /// What a node's bound pods attach, per interned driver.
    pub(super) fn bound(&self, s: &Solver, n: &ExistingNode) -> Attached {
        let mut a = Attached::default();
        if self.drivers.is_empty() {
            return a;
        }
        let mut seen: std::collections::BTreeSet<(&str, &str)> = Default::default();
        for u in n.pods.iter().flat_map(|p| &p.volumes) {
            let Some(&d) = self.drivers.get(&u.driver) else {
                continue;
            };
            if !seen.insert((&u.driver, &u.id)) {
                continue;
            }
            match self.vols.get(&(u.driver.clone(), u.id.clone())) {
                Some(v) => a.add(&[*v], &s.vol_driver),
                None => {
                    if a.count.len() <= d as usize {
                        a.count.resize(d as usize + 1, 0);
                    }
                    a.count[d as usize] += 1;
                }
            }
        }
        a
    }
}

impl Solver {
    /// Whether existing node `ni` can attach the pod's volumes within its limits.
    pub(super) fn node_volumes_ok(&self, ni: usize, pod: &PodData) -> bool {
        if pod.vols.is_empty() {
            return true;
        }
        let n = &self.nodes[ni];
        exceeded(&n.vol_limit, &n.attached.with(&pod.vols, &self.vol_driver)).is_none()
    }

    pub(super) fn driver_name(&self, d: u32) -> String {
        self.drivers.get(d as usize).cloned().unwrap_or_default()
    }
}
