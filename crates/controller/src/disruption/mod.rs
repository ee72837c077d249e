//! Disruption, the parts Karpenter applies without a replacement: expiration (a NodeClaim
//! older than `expireAfter` is deleted, budgets do not apply), emptiness (a NodeClaim whose
//! Node has had no reschedulable pod for `consolidateAfter` is deleted) and single-node
//! delete consolidation (a NodeClaim whose pods would all fit elsewhere), both within the
//! NodePool's disruption budgets. Deleting the NodeClaim runs the usual termination: the
//! Machine is deleted, Cluster API drains and removes the Node.
//!
//! Not built: replace consolidation (a cheaper node for the pods) and drift.
//!
//! Layout: [`candidates`] (per pool, the NodeClaims that may be disrupted, with their Node
//! and pods), [`budgets`], one file per [`Method`] ([`expiration`], [`emptiness`],
//! [`consolidation`]), and [`execute`] (the loop and the delete). A method is a candidate
//! filter and a decision with its own timers; the budget and the execution are shared, so a
//! new method (drift, replace consolidation) is one file and one line in [`Timers::methods`].
//!
//! The decisions are pure functions of cached objects; the loop only deletes NodeClaims, so
//! a restart anywhere is safe (timers restart from zero, which only delays).

pub mod blockers;
pub mod budgets;
pub mod candidates;
pub mod consolidation;
pub mod emptiness;
pub mod execute;
pub mod expiration;
pub mod pricing;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::karpenter::DisruptionReason;
use api::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;

pub use budgets::{PoolBudget, allowed, budget_active, budget_nodes};
pub use candidates::{Pool, reschedulable};
pub use execute::{Disruption, run};

use crate::objects::name;

/// A node must stay a candidate this long beyond `consolidateAfter` before it is removed, so
/// a node whose pods are about to be bound is not taken (Karpenter validates for 15 s).
pub const VALIDATION: Duration = Duration::from_secs(15);

/// What to delete now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub nodeclaim: String,
    pub nodepool: String,
    pub reason: DisruptionReason,
    /// `Expired` is not a budgeted reason in Karpenter; we report it apart.
    pub expired: bool,
    pub message: String,
}

/// The cluster as the caches see it (shared objects).
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub nodepools: &'a [Arc<NodePool>],
    pub nodeclaims: &'a [Arc<NodeClaim>],
    pub nodes: &'a [Arc<Node>],
    pub pods: &'a [Arc<Pod>],
}

/// The time of a pass: wall clock (ages, budget schedules) and monotonic (timers).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: Timestamp,
    pub instant: Instant,
}

/// What the methods of one pass share across pools.
pub struct Pass<'a> {
    pub view: &'a View<'a>,
    /// A consolidation was decided in this pass, or pods wait for capacity (the room a move
    /// would take may be what they need): no (further) consolidation.
    pub consolidated: bool,
}

/// A disruption method: which of a pool's candidates it takes, and why.
pub trait Method {
    /// Decisions for `pool`'s candidates (those no earlier method took). A budgeted method
    /// takes no more than `budget.remaining(its reason)` and records what it took.
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision>;

    /// Forgets the timers of NodeClaims not in `keep` (gone).
    fn forget(&mut self, _keep: &HashSet<String>) {}
}

/// Every method's state between passes.
#[derive(Debug, Default)]
pub struct Timers {
    expiration: expiration::Expiration,
    emptiness: emptiness::Emptiness,
    consolidation: consolidation::Consolidation,
}

impl Timers {
    /// The methods, in the order they choose: a candidate one takes is not offered to the
    /// next.
    fn methods(&mut self) -> [&mut dyn Method; 3] {
        [
            &mut self.expiration,
            &mut self.emptiness,
            &mut self.consolidation,
        ]
    }
}

/// Decides which NodeClaims to delete. `timers` are updated (claims gone are forgotten).
pub fn decide(view: &View, timers: &mut Timers, now: Timestamp, instant: Instant) -> Vec<Decision> {
    let clock = Clock { now, instant };
    let pods_on = candidates::pods_by_node(view.pods);
    let mut pass = Pass {
        view,
        consolidated: view
            .pods
            .iter()
            .any(|p| crate::provisioning::provisionable(p)),
    };
    let mut out = Vec::new();
    for mut pool in candidates::pools(view, &pods_on) {
        let mut budget = PoolBudget::new(
            &pool.spec.disruption.budgets,
            pool.total,
            pool.disrupting,
            now,
        );
        for method in timers.methods() {
            let decided = method.decide(&pool, &mut budget, &mut pass, clock);
            pool.candidates
                .retain(|c| !decided.iter().any(|d| d.nodeclaim == c.name));
            out.extend(decided);
        }
    }
    let keep: HashSet<String> = view
        .nodeclaims
        .iter()
        .map(|c| name(c.as_ref()).to_string())
        .collect();
    for method in timers.methods() {
        method.forget(&keep);
    }
    out
}
