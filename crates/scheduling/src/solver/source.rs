//! The devices one node (or a node of one instance type) publishes, as the DRA allocation
//! and the selector evaluation both read them.

use std::collections::{BTreeMap, BTreeSet};

use crate::dra::{Device, Dra, Quantity, Slice};
use crate::intern::HashMap;

/// The devices one node (or a node of one instance type) publishes.
pub(super) struct Source {
    pub(super) devices: Vec<(String, Device)>,
    /// Taken before the solve (allocated claims' devices).
    pub(super) taken: Taken,
    /// The pools' counter budgets (partitionable devices), and per device what it draws on
    /// them (budget index, amount); a device drawing on a set or counter its pool lacks draws
    /// on [`UNUSABLE`]. What a set of devices draws follows from the devices taken.
    pub(super) budgets: Vec<Quantity>,
    pub(super) draws: Vec<Vec<(usize, Quantity)>>,
}

/// Where a source's slices are published, and so which allocated claims' devices are taken
/// before the solve.
#[derive(Clone, Copy)]
pub(super) enum Published<'a> {
    /// An existing node's (its own or its type's slices): devices allocated on that node,
    /// or in one of the slices' pools.
    Node(&'a str),
    /// A network pool's: devices allocated in one of its pools.
    Network,
    /// Not published: what a new node of an instance type would publish; nothing is taken.
    No,
}

impl Source {
    /// The devices of `slices`, those allocated claims hold taken (see [`Published`]).
    pub(super) fn of(slices: &[Slice], published: Published, dra: &Dra) -> Source {
        let devices: Vec<(String, Device)> = slices
            .iter()
            .flat_map(|sl| sl.devices.iter().map(|d| (sl.driver.clone(), d.clone())))
            .collect();
        let mut taken = Taken::none(devices.len());
        if !matches!(published, Published::No) {
            let pools: Vec<&str> = slices.iter().map(|sl| sl.pool.as_str()).collect();
            for a in dra.claims.values().filter_map(|c| c.allocation.as_ref()) {
                let here = matches!(published,
                    Published::Node(n) if a.node_name.as_deref() == Some(n));
                for id in &a.devices {
                    if !(here || pools.contains(&id.pool.as_str()) && !id.pool.is_empty()) {
                        continue;
                    }
                    if let Some(i) = devices
                        .iter()
                        .position(|(drv, d)| *drv == id.driver && d.name == id.device)
                    {
                        take_allocated(&mut taken, i, &devices[i].1, a.consumed.get(id));
                    }
                }
            }
        }
        let (budgets, draws) = counters(slices);
        Source {
            devices,
            taken,
            budgets,
            draws,
        }
    }
}

/// The budget index a device drawing on a missing counter set or counter draws on: none
/// allows it.
pub(super) const UNUSABLE: usize = usize::MAX;

/// What is taken of a source's devices: exclusive devices whole, shared ones (allowing
/// multiple allocations) by capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Taken {
    /// Per device: allocated whole.
    pub(super) whole: Vec<bool>,
    /// Per shared device with allocations: how many, and the capacity they consume, by
    /// name.
    pub(super) shared: BTreeMap<usize, (u32, BTreeMap<String, Quantity>)>,
}

impl Taken {
    /// Nothing taken of `n` devices.
    pub(super) fn none(n: usize) -> Self {
        Taken {
            whole: vec![false; n],
            shared: BTreeMap::new(),
        }
    }

    /// Whether device `d` has an allocation.
    pub(super) fn used(&self, d: usize) -> bool {
        self.whole.get(d).copied().unwrap_or(false) || self.shared.contains_key(&d)
    }

    /// Devices not allocated whole (a shared device counts as free while it has room for
    /// anything: the count bounds what may still be allocated from above).
    pub(super) fn free(&self) -> usize {
        self.whole.iter().filter(|x| !**x).count()
    }

    /// Takes `consumption` of shared device `d` (with capacity `capacity`) if it has room:
    /// whether it had.
    pub(super) fn consume(
        &mut self,
        d: usize,
        capacity: &BTreeMap<String, Quantity>,
        consumption: &BTreeMap<String, Quantity>,
    ) -> bool {
        let (count, mut after) = self.shared.get(&d).cloned().unwrap_or_default();
        for (name, amount) in consumption {
            let Some(have) = capacity.get(name) else {
                return false;
            };
            let sum = after
                .get(name)
                .copied()
                .unwrap_or_default()
                .checked_add(*amount);
            match sum {
                Some(sum) if sum <= *have => {
                    after.insert(name.clone(), sum);
                }
                _ => return false,
            }
        }
        self.shared.insert(d, (count + 1, after));
        true
    }

    /// Gives back `consumption` of shared device `d` (taken by [`Taken::consume`]).
    pub(super) fn release(&mut self, d: usize, consumption: &BTreeMap<String, Quantity>) {
        let Some((count, used)) = self.shared.get_mut(&d) else {
            return;
        };
        for (name, amount) in consumption {
            if let Some(u) = used.get_mut(name) {
                *u = u.checked_sub(*amount).unwrap_or_default();
            }
        }
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.shared.remove(&d);
        }
    }
}

impl Source {
    /// Whether the devices `taken` plus `extra` stay within every counter budget (a shared
    /// device draws once, however many allocations it has).
    pub(super) fn within_budgets(&self, taken: &Taken, extra: &[usize]) -> bool {
        if self.budgets.is_empty() && self.draws.iter().all(Vec::is_empty) {
            return true;
        }
        let mut used = vec![Quantity::default(); self.budgets.len()];
        let drawing = (0..self.devices.len())
            .filter(|d| taken.used(*d))
            .chain(extra.iter().copied().filter(|d| !taken.used(*d)));
        for d in drawing {
            for (b, amount) in &self.draws[d] {
                let Some(u) = used.get_mut(*b) else {
                    return false;
                };
                match u.checked_add(*amount) {
                    Some(sum) if sum <= self.budgets[*b] => *u = sum,
                    _ => return false,
                }
            }
        }
        true
    }
}

/// The counter budgets of `slices` (per driver, pool, set and counter) and, per device in
/// the order [`Builder::source`] lists them, what it draws on them.
fn counters(slices: &[Slice]) -> (Vec<Quantity>, Vec<Vec<(usize, Quantity)>>) {
    let mut index: HashMap<(&str, &str, &str, &str), usize> = HashMap::default();
    let mut sets: BTreeSet<(&str, &str, &str)> = BTreeSet::new();
    let mut budgets = Vec::new();
    for sl in slices {
        for cs in &sl.counters {
            sets.insert((&sl.driver, &sl.pool, &cs.name));
            for (counter, q) in &cs.counters {
                index.insert((&sl.driver, &sl.pool, &cs.name, counter), budgets.len());
                budgets.push(*q);
            }
        }
    }
    let draws = slices
        .iter()
        .flat_map(|sl| sl.devices.iter().map(move |d| (sl, d)))
        .map(|(sl, d)| {
            let mut out = Vec::new();
            for cs in &d.consumes {
                if !sets.contains(&(sl.driver.as_str(), sl.pool.as_str(), cs.name.as_str())) {
                    out.push((UNUSABLE, Quantity::default()));
                }
                for (counter, q) in &cs.counters {
                    let key = (
                        sl.driver.as_str(),
                        sl.pool.as_str(),
                        cs.name.as_str(),
                        counter.as_str(),
                    );
                    out.push((index.get(&key).copied().unwrap_or(UNUSABLE), *q));
                }
            }
            out
        })
        .collect();
    (budgets, draws)
}

/// Marks device `i` as an existing allocation holds it: a shared device by what the
/// allocation consumed of it (beyond its capacity: full), an exclusive one — or a shared one
/// whose consumption is not recorded — whole.
fn take_allocated(
    taken: &mut Taken,
    i: usize,
    device: &Device,
    consumed: Option<&BTreeMap<String, Quantity>>,
) {
    match consumed {
        Some(c) if device.multiple => {
            if !taken.consume(i, &device.capacity, c) {
                taken.whole[i] = true;
            }
        }
        _ => taken.whole[i] = true,
    }
}
