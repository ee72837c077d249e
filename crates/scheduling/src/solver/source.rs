//! The devices one node (or a node of one instance type) publishes, as the DRA allocation
//! and the selector evaluation both read them.

use crate::dra::{Device, Quantity};

/// The devices one node (or a node of one instance type) publishes.
pub(super) struct Source {
    pub(super) devices: Vec<(String, Device)>,
    /// Taken before the solve (allocated claims' devices).
    pub(super) taken: Vec<bool>,
    /// The pools' counter budgets (partitionable devices), and per device what it draws on
    /// them (budget index, amount); a device drawing on a set or counter its pool lacks draws
    /// on [`UNUSABLE`]. What a set of devices draws follows from the devices taken.
    pub(super) budgets: Vec<Quantity>,
    pub(super) draws: Vec<Vec<(usize, Quantity)>>,
}

/// The budget index a device drawing on a missing counter set or counter draws on: none
/// allows it.
pub(super) const UNUSABLE: usize = usize::MAX;

impl Source {
    /// Whether the devices `taken` plus `extra` stay within every counter budget.
    pub(super) fn within_budgets(&self, taken: &[bool], extra: &[usize]) -> bool {
        if self.budgets.is_empty() && self.draws.iter().all(Vec::is_empty) {
            return true;
        }
        let mut used = vec![Quantity::default(); self.budgets.len()];
        let drawing = (0..self.devices.len())
            .filter(|d| taken.get(*d).copied().unwrap_or(false))
            .chain(extra.iter().copied());
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
