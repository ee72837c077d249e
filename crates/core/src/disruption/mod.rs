//! Disruption: expiration (a NodeClaim older than `expireAfter` is deleted, budgets do not
//! apply), emptiness (a NodeClaim whose Node has had no reschedulable pod for
//! `consolidateAfter` is deleted), drift (a `Drifted` NodeClaim is replaced surge-first) and
//! consolidation (single- and multi-node, delete or replace by one cheaper node, Balanced),
//! within the NodePool's disruption budgets.
//! Deleting the NodeClaim runs the usual termination: the Node is drained, the Machine is
//! deleted, Cluster API removes the Node.
//!
//! Surge-first commands (replacements initialized before the candidates go) run through
//! [`orchestrate`]; replacements for drift are planned by [`simulate`].
//!
//! Layout: [`candidates`] (per pool, the NodeClaims that may be disrupted, with their Node
//! and pods), [`blockers`], [`budgets`], [`pricing`] (price rules, Balanced, binary search),
//! [`plan`] (the consolidation simulation), [`search`] (multi- then single-node, within
//! time limits), one file per [`Method`] ([`expiration`], [`emptiness`], [`static_drift`],
//! [`drift`], [`consolidation`]), [`verdict`] (why (not), per NodeClaim) and [`execute`] (the loop). A method is a candidate filter and a decision, with state of its
//! own only where Karpenter keeps some in memory too (consolidation's validation and search
//! cache); the budget and the execution are shared, so a new method is one file and one
//! line in [`Timers::methods`].
//!
//! The decisions are pure functions of cached objects; ages count from the objects'
//! timestamps and a command's state is on the objects (see [`orchestrate`]), so a restart
//! anywhere is safe (a move under validation is searched again; commands in flight resume
//! or roll back).

pub use crate::budgets;
pub(crate) mod candidates;
pub(crate) mod claim_writes;
pub(crate) mod command;
pub(crate) mod consolidation;
pub(crate) mod drift;
pub(crate) mod emptiness;
pub(crate) mod execute;
pub(crate) mod expiration;
pub mod orchestrate;
pub(crate) mod plan;
pub(crate) mod podevents;
pub(crate) mod pricing;
pub(crate) mod search;
pub mod simulate;
pub(crate) mod static_drift;
pub mod status;
pub(crate) mod steps;
pub(crate) mod tally;
#[cfg(test)]
mod tests;
pub mod verdict;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::NodeClaim;
use api::karpenter::DisruptionReason;
use cloudprovider::InstanceTypes;
use k8s_openapi::jiff::Timestamp;

pub use budgets::{PoolBudget, allowed, budget_active, budget_nodes};
pub use candidates::Pool;
pub use execute::{Disruption, TICK, run};
pub use verdict::{Verdict, verdicts};

use crate::objects::name;
use crate::state::Cluster;

/// A node must stay a candidate this long beyond `consolidateAfter` before it is removed, so
/// a node whose pods are about to be bound is not taken (Karpenter validates for 15 s).
pub const VALIDATION: Duration = Duration::from_secs(15);

/// What to disrupt now, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub nodeclaim: String,
    pub nodepool: String,
    pub reason: DisruptionReason,
    /// `Expired` is not a budgeted reason in Karpenter; we report it apart.
    pub expired: bool,
    /// Deleted before its replacement launches (no replacement could launch first: see
    /// [`simulate::Simulate::terminate_first`]): Karpenter's `terminate_first_reason`.
    pub terminate_first: Option<&'static str>,
    pub message: String,
    /// Surge-first through [`orchestrate`] (taint, replacements initialized, then delete);
    /// `None` deletes at once.
    pub surge: Option<Surge>,
    /// A consolidation: the move this NodeClaim is part of (for verdicts).
    pub command: Option<Arc<plan::Move>>,
}

/// The rest of a surge-first [`Decision`]'s command.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Surge {
    /// The NodeClaims to create first (none when the pods fit elsewhere).
    pub replacements: Vec<NodeClaim>,
    /// Further candidates disrupted by the same command (multi-node).
    pub with: Vec<String>,
    /// `single`, `multi` for consolidation, empty for drift (metrics).
    pub consolidation_type: String,
}

/// Event reason: a budget whose schedule or duration cannot be used (disruption fails closed).
pub const INVALID_BUDGET: &str = "InvalidDisruptionBudget";

/// Something a pass wants said (an Event on the NodePool).
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub nodepool: String,
    pub reason: &'static str,
    pub message: String,
    /// A Warning (a user's mistake), else Normal.
    pub warning: bool,
}

impl Note {
    pub fn pool(nodepool: &str, reason: &'static str, message: String) -> Self {
        Note {
            nodepool: nodepool.to_string(),
            reason,
            message,
            warning: false,
        }
    }
}

/// Everything a pass found.
/// A NodePool, a reason, the disruptions its budgets allow now, and its nodes being
/// disrupted already (which consume them).
pub type Allowed = (String, DisruptionReason, usize, usize);

#[derive(Debug, Default)]
pub struct Outcome {
    pub decisions: Vec<Decision>,
    /// Per NodeClaim (not being deleted), why (not).
    pub verdicts: BTreeMap<String, Verdict>,
    pub notes: Vec<Note>,
    /// Balanced scores computed, by NodePool.
    pub scores: Vec<(String, f64)>,
    /// Per NodePool and reason, the disruptions its budgets allow now, and the nodes
    /// consuming them (being disrupted already).
    pub allowed: Vec<Allowed>,
}

/// The cluster a pass decides on: the cluster state's join (or one built from files or for
/// a simulation), and the NodeClasses' instance types. Reads as the [`Cluster`]
/// (`view.nodeclaims`, `view.bound(node)`, ...).
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub cluster: &'a Cluster,
    /// A NodeClass's instance types (prices for consolidation).
    pub catalog: &'a dyn Fn(&str) -> Option<Arc<InstanceTypes>>,
    /// Whether a NodeClass leaves drift to the user ([`CloudProvider::manual_drift`]).
    ///
    /// [`CloudProvider::manual_drift`]: cloudprovider::CloudProvider::manual_drift
    pub manual_drift: &'a dyn Fn(&str) -> bool,
}

impl std::ops::Deref for View<'_> {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        self.cluster
    }
}

/// No NodeClass leaves drift to the user.
pub fn no_manual_drift(_: &str) -> bool {
    false
}

/// A catalog lookup that knows no NodeClass.
pub fn no_catalog(_: &str) -> Option<Arc<InstanceTypes>> {
    None
}

/// The time of a pass: wall clock (ages, budget schedules) and monotonic (timers).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: Timestamp,
    pub instant: Instant,
    /// How long a move is validated before it is taken ([`VALIDATION`] unless configured).
    pub validation: Duration,
}

/// What the methods of one pass share across pools.
pub struct Pass<'a> {
    pub view: &'a View<'a>,
    /// A consolidation was decided in this pass, or pods wait for capacity (the room a move
    /// would take may be what they need): no (further) consolidation.
    pub consolidated: bool,
    /// Verdicts so far, by NodeClaim.
    pub verdicts: BTreeMap<String, Verdict>,
    /// Verdicts of candidates a method wanted but found blocked (drift): they replace what a
    /// later method says of the candidate unless that method makes it part of a move.
    pub held: BTreeMap<String, Verdict>,
    pub notes: Vec<Note>,
    pub scores: Vec<(String, f64)>,
    /// Plans replacements for surge-first methods.
    pub simulate: &'a dyn simulate::Simulate,
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

    /// Decisions over every pool at once (`pools` and their `budgets` side by side). By
    /// default, [`Self::decide`] pool by pool.
    fn decide_pools(
        &mut self,
        pools: &[Pool],
        budgets: &mut [PoolBudget],
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        let mut out = Vec::new();
        for (pool, budget) in pools.iter().zip(budgets.iter_mut()) {
            out.extend(self.decide(pool, budget, pass, clock));
        }
        out
    }

    /// Forgets the timers of NodeClaims not in `keep` (gone).
    fn forget(&mut self, _keep: &HashSet<String>) {}
}

/// Every method's state between passes.
#[derive(Debug)]
pub struct Timers {
    expiration: expiration::Expiration,
    emptiness: emptiness::Emptiness,
    static_drift: static_drift::StaticDrift,
    drift: drift::Drift,
    consolidation: consolidation::Consolidation,
    /// See [`Clock::validation`].
    validation: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Timers::with_validation(VALIDATION)
    }
}

impl Timers {
    /// Timers whose moves are validated for `validation` (Karpenter: [`VALIDATION`]).
    pub fn with_validation(validation: Duration) -> Self {
        Timers {
            expiration: Default::default(),
            emptiness: Default::default(),
            static_drift: Default::default(),
            drift: Default::default(),
            consolidation: Default::default(),
            validation,
        }
    }

    /// The methods, in the order they choose: a candidate one takes is not offered to the
    /// next.
    fn methods(&mut self) -> [&mut dyn Method; 5] {
        [
            &mut self.expiration,
            &mut self.emptiness,
            &mut self.static_drift,
            &mut self.drift,
            &mut self.consolidation,
        ]
    }

    /// The candidates the passes since the last call found blocked (drift).
    pub fn blocked(&mut self) -> Vec<drift::Blocked> {
        let mut out = std::mem::take(&mut self.static_drift.blocked);
        out.append(&mut self.drift.blocked);
        out
    }
}

/// Decides which NodeClaims to disrupt. `timers` are updated (claims gone are forgotten).
pub fn decide(
    view: &View,
    timers: &mut Timers,
    simulate: &dyn simulate::Simulate,
    now: Timestamp,
    instant: Instant,
) -> Vec<Decision> {
    pass(view, timers, simulate, now, instant).decisions
}

/// One pass: the decisions, and every NodeClaim's verdict.
pub fn pass(
    view: &View,
    timers: &mut Timers,
    simulate: &dyn simulate::Simulate,
    now: Timestamp,
    instant: Instant,
) -> Outcome {
    let clock = Clock {
        now,
        instant,
        validation: timers.validation,
    };
    let mut pass = Pass {
        view,
        simulate,
        consolidated: !view.pending().is_empty(),
        verdicts: BTreeMap::new(),
        held: BTreeMap::new(),
        notes: Vec::new(),
        scores: Vec::new(),
    };
    let mut out = Vec::new();
    let mut pools = candidates::pools(view);
    let (mut budgets, allowed) = pool_budgets(&pools, now, &mut pass.notes);
    // Method by method over all pools, as Karpenter orders them.
    for method in timers.methods() {
        let decided = method.decide_pools(&pools, &mut budgets, &mut pass, clock);
        for pool in &mut pools {
            pool.candidates
                .retain(|c| !decided.iter().any(|d| d.nodeclaim == c.name));
        }
        out.extend(decided);
    }
    let held = std::mem::take(&mut pass.held);
    hold(&mut pass.verdicts, held);
    decision_verdicts(&mut pass.verdicts, &out);
    claim_verdicts(&mut pass.verdicts, view, now);
    let keep: HashSet<String> = view
        .nodeclaims
        .iter()
        .map(|c| name(c.as_ref()).to_string())
        .collect();
    for method in timers.methods() {
        method.forget(&keep);
    }
    Outcome {
        decisions: out,
        verdicts: pass.verdicts,
        notes: pass.notes,
        scores: pass.scores,
        allowed,
    }
}

/// Every pool's budget now, a note for each pool whose budgets are invalid, and per pool
/// and budgeted reason the disruptions allowed.
fn pool_budgets<'a>(
    pools: &[Pool<'a>],
    now: Timestamp,
    notes: &mut Vec<Note>,
) -> (Vec<PoolBudget<'a>>, Vec<Allowed>) {
    let mut allowed = Vec::new();
    let mut budgets = Vec::with_capacity(pools.len());
    for pool in pools {
        let budget = PoolBudget::new(
            &pool.spec.disruption.budgets,
            pool.total,
            pool.disrupting,
            now,
        );
        if let Some(why) = budgets::invalid(&pool.spec.disruption.budgets) {
            notes.push(Note {
                warning: true,
                ..Note::pool(
                    pool.name,
                    INVALID_BUDGET,
                    format!("{why}; no node of this pool is disrupted until it is fixed"),
                )
            });
        }
        // Unhealthy too: repair (the NodeClaim lifecycle's) is paced by that budget.
        for reason in [
            DisruptionReason::Underutilized,
            DisruptionReason::Empty,
            DisruptionReason::Drifted,
            DisruptionReason::Unhealthy,
        ] {
            allowed.push((
                pool.name.to_string(),
                reason,
                budget.remaining(reason),
                budget.disrupting(),
            ));
        }
        budgets.push(budget);
    }
    (budgets, allowed)
}

/// The verdicts of the NodeClaims the decisions `out` disrupt.
fn decision_verdicts(verdicts: &mut BTreeMap<String, Verdict>, out: &[Decision]) {
    for d in out {
        match &d.command {
            Some(mv) => {
                for c in &mv.candidates {
                    verdicts.insert(c.clone(), consolidation_verdict(mv));
                }
            }
            None if d.expired => {
                verdicts.insert(
                    d.nodeclaim.clone(),
                    Verdict::blocked(format!("expired: {}", d.message)),
                );
            }
            None => {
                let mut nodes = vec![d.nodeclaim.clone()];
                nodes.extend(d.surge.iter().flat_map(|s| s.with.iter().cloned()));
                let action = if d.surge.as_ref().is_some_and(|s| !s.replacements.is_empty()) {
                    "replace"
                } else {
                    "delete"
                };
                for n in &nodes {
                    verdicts.insert(
                        n.clone(),
                        Verdict::candidate(action, nodes.clone(), None, 0.0, d.reason),
                    );
                }
            }
        }
    }
}

/// NodeClaims being deleted are blocked; every verdict gets its claim's `Consolidatable`
/// state.
fn claim_verdicts(verdicts: &mut BTreeMap<String, Verdict>, view: &View, now: Timestamp) {
    for c in view.deleting_claims() {
        verdicts.insert(
            name(c.as_ref()).to_string(),
            Verdict::blocked("being deleted"),
        );
    }
    // The condition state is the claim's, whichever method gave the verdict.
    for c in &view.nodeclaims {
        if let Some(v) = verdicts.get_mut(name(c.as_ref())) {
            v.consolidatable = candidates::consolidatable(c, &view.nodepools, now);
        }
    }
}

/// Puts the `held` verdicts over `verdicts`, except where a verdict is part of a move; the
/// `Consolidatable` state stays the one computed (the condition's status is consolidation's).
fn hold(verdicts: &mut BTreeMap<String, Verdict>, held: BTreeMap<String, Verdict>) {
    for (claim, v) in held {
        match verdicts.get(&claim) {
            Some(now) if now.is_candidate() => {}
            now => {
                let state = now.and_then(|n| n.consolidatable);
                verdicts.insert(claim, v.consolidatable(state));
            }
        }
    }
}

fn consolidation_verdict(mv: &plan::Move) -> Verdict {
    Verdict::candidate(
        mv.kind(),
        mv.candidates.clone(),
        mv.replacement_type(),
        mv.savings,
        DisruptionReason::Underutilized,
    )
    .first_fit(mv.first_fit_price)
}
#[cfg(test)]
mod consolidation_search_tests;
#[cfg(test)]
mod consolidation_tests;
#[cfg(test)]
mod terminate_first_tests;
#[cfg(test)]
mod volume_tests;
