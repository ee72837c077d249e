//! Consolidation of nodes that still run pods (pools under `WhenEmptyOrUnderutilized` or
//! `Balanced`), as Karpenter does it:
//! - candidates: `Consolidatable` (`consolidateAfter` after their last pod event), no
//!   blocker (see [`crate::blockers`]), price known; sorted by price per disruption cost;
//! - the candidates of all pools are weighed together ([`super::search`]): multi-node
//!   first, the largest prefix (≥ 2, ≤ 100, each within its pool's `Underutilized`
//!   budget) whose pods fit elsewhere or on new nodes of any pool that together cost
//!   strictly less (binary search); then single-node, pools taking turns: the first
//!   candidate that can be deleted or replaced — by one cheaper node or split onto several
//!   (see [`super::plan`]);
//! - every `Balanced` pool of a move's candidates approves it only if its score is ≥ 0.5;
//! - a move found is validated [`VALIDATION`](super::VALIDATION) (or as configured) later by the same simulation (candidates
//!   still eligible, the move still possible) before it is decided.
//!
//! One move at a time across all pools (two would plan onto the same free room), none while
//! pods wait for capacity. Every candidate gets a [`Verdict`].

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::consts::conditions as types;
use api::karpenter::{ConsolidationPolicy, DisruptionReason};

use super::budgets::PoolBudget;
use super::candidates::{Candidate, Pool, consolidatable_at};
use super::plan::{Action, Move, Priced};
use super::search::{Limits, PoolInfo, PoolTotals, Pools, search, validate};
use super::verdict::Verdict;
use super::{Clock, Decision, Method, Note, Pass, Surge, View, consolidation_verdict};
use crate::blockers::{Blocker, disruption_cost, do_not_disrupt, pod_blocker};
use crate::objects::{claim_condition, name};

/// Without a change in the pool, a search is repeated this often at most.
const RESEARCH: Duration = Duration::from_secs(300);

/// A move found, waiting for its validation.
#[derive(Debug)]
struct Pending {
    mv: Arc<Move>,
    /// The NodePools of its candidates.
    pools: Vec<String>,
    since: Instant,
}

/// The move under validation, and the last search that found none (state fingerprint,
/// time, verdicts).
#[derive(Debug, Default)]
pub(crate) struct Consolidation {
    pending: Option<Pending>,
    searched: Option<(u64, Instant, BTreeMap<String, Verdict>)>,
    limits: Limits,
}

impl Consolidation {
    /// With the search's time limits (and clock) `limits`.
    #[cfg(test)]
    pub(crate) fn with_limits(limits: Limits) -> Self {
        Consolidation {
            limits,
            ..Consolidation::default()
        }
    }
}

/// The offering a NodeClaim runs on, found from its labels (the Node's, else the claim's:
/// instance type, zone, capacity type, as Karpenter's core finds it) and priced from its
/// NodePool's current catalog (0 when the catalog no longer offers it).
pub(crate) fn priced<'a>(view: &View, pool: &Pool<'a>, c: &'a Candidate<'a>) -> Option<Priced<'a>> {
    let label = |k: &str| {
        c.node
            .and_then(|n| n.metadata.labels.as_ref()?.get(k).cloned())
            .or_else(|| c.claim.metadata.labels.as_ref()?.get(k).cloned())
    };
    let instance_type = label(scheduling::LABEL_INSTANCE_TYPE)?;
    let capacity_type = label(scheduling::LABEL_CAPACITY_TYPE)?;
    let zone = label(scheduling::LABEL_ZONE);
    // A size of a resizable template is priced as that size.
    let current = (view.catalog)(&pool.spec.template.spec.node_class_ref.name)
        .and_then(|cat| cat.price_of(&instance_type, &capacity_type, zone.as_deref()));
    Some(Priced {
        candidate: c,
        nodepool: pool.name,
        price: current.unwrap_or(0.0),
        instance_type,
        capacity_type,
        cost: disruption_cost(&c.pods),
    })
}

/// What keeps a non-empty candidate from consolidation, before any simulation.
fn blocker(pool: &Pool, c: &Candidate, pass: &Pass, clock: Clock) -> Option<String> {
    if pool.replicas.is_some() {
        return Some("static NodePool: its nodes are never consolidated".into());
    }
    if pool.spec.disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty {
        return Some("policy WhenEmpty consolidates only empty nodes".into());
    }
    if pool.consolidate_after.is_none() {
        return Some("consolidateAfter is Never".into());
    }
    if !claim_condition(c.claim, types::INITIALIZED) {
        return Some("not initialized".into());
    }
    let Some(node) = c.node else {
        return Some("no Node".into());
    };
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return Some(format!("Node {} is cordoned", name(node)));
    }
    if do_not_disrupt(c.claim) {
        return Some(
            Blocker::NodeDoNotDisrupt {
                kind: "NodeClaim",
                name: c.name.into(),
            }
            .to_string(),
        );
    }
    if do_not_disrupt(node) {
        return Some(
            Blocker::NodeDoNotDisrupt {
                kind: "Node",
                name: name(node).into(),
            }
            .to_string(),
        );
    }
    if let Some(b) = pod_blocker(
        &c.bound,
        &pass
            .view
            .pdbs
            .iter()
            .map(|p| p.as_ref())
            .collect::<Vec<_>>(),
        clock.now,
    ) {
        return Some(b.to_string());
    }
    let at = consolidatable_at(c.claim, pool.consolidate_after)?;
    if at > clock.now {
        // No countdown in the text: it becomes the Consolidatable condition's message, which
        // is written only when it changes.
        return Some(format!(
            "consolidateAfter {} not elapsed since the last pod event",
            pool.spec.disruption.consolidate_after
        ));
    }
    None
}

/// A fingerprint of what a pool's search depends on: where every pod runs, the NodeClaims
/// and Nodes (names, deletion), the pool's candidates.
fn fingerprint(view: &View, eligible: &[Priced]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in &view.pods {
        (
            p.metadata.uid.as_deref(),
            crate::objects::pod_node_name(p),
            p.metadata.deletion_timestamp.is_some(),
            crate::objects::terminal(p),
        )
            .hash(&mut h);
    }
    for c in &view.nodeclaims {
        (name(c.as_ref()), c.metadata.deletion_timestamp.is_some()).hash(&mut h);
    }
    for n in &view.nodes {
        (name(n.as_ref()), n.metadata.deletion_timestamp.is_some()).hash(&mut h);
    }
    for (p, d) in view.pdbs.iter().map(|p| {
        (
            name(p.as_ref()),
            p.status.as_ref().and_then(|s| s.disruptions_allowed),
        )
    }) {
        (p, d).hash(&mut h);
    }
    for e in eligible {
        (e.candidate.name, e.price.to_bits()).hash(&mut h);
    }
    h.finish()
}

/// One pool's share of a consolidation pass.
struct Share<'p> {
    pool: &'p Pool<'p>,
    eligible: Vec<Priced<'p>>,
    info: PoolInfo,
    /// Why its candidates are held this pass, if they are.
    held: Option<&'static str>,
}

impl Consolidation {
    /// A pool's eligible candidates (verdicts for the others), its totals and budget.
    fn share<'p>(
        pool: &'p Pool<'p>,
        budget: &PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Share<'p> {
        let view = pass.view;
        let mut eligible = Vec::new();
        let mut totals = PoolTotals::default();
        for c in &pool.candidates {
            let p = priced(view, pool, c);
            totals.cost += p.as_ref().map_or(0.0, |p| p.price);
            totals.disruption += disruption_cost(&c.pods);
            if c.empty() && pool.consolidate_after.is_some() {
                continue; // emptiness's
            }
            let state = consolidatable_at(c.claim, pool.consolidate_after).map(|t| t <= clock.now);
            let why = match (blocker(pool, c, pass, clock), p) {
                (Some(why), _) => why,
                (None, Some(p)) => {
                    eligible.push(p);
                    continue;
                }
                (None, None) => "instance type, zone or capacity type unknown".into(),
            };
            pass.verdicts.insert(
                c.name.to_string(),
                Verdict::blocked(why).consolidatable(state),
            );
        }
        let remaining = budget.remaining(DisruptionReason::Underutilized);
        let held = if remaining == 0 {
            Some("budget Underutilized: 0 allowed")
        } else if !budget.idle() {
            Some("waiting: other nodes of the pool are being disrupted")
        } else {
            None
        };
        Share {
            pool,
            eligible,
            info: PoolInfo {
                balanced: pool.spec.disruption.consolidation_policy
                    == ConsolidationPolicy::Balanced,
                totals,
                remaining,
            },
            held,
        }
    }

    /// The decision of a move that passed its validation, its candidates taken from their
    /// pools' budgets.
    fn decided(
        mv: &Arc<Move>,
        eligible: &[Priced],
        pools: &[Pool],
        budgets: &mut [PoolBudget],
    ) -> Vec<Decision> {
        for p in eligible
            .iter()
            .filter(|p| mv.candidates.iter().any(|c| c == p.candidate.name))
        {
            if let Some(i) = pools.iter().position(|x| x.name == p.nodepool) {
                budgets[i].take(1);
            }
        }
        let Some((first, with)) = mv.candidates.split_first() else {
            return Vec::new();
        };
        let nodepool = eligible
            .iter()
            .find(|p| p.candidate.name == first)
            .map_or("", |p| p.nodepool);
        // Surge-first through the shared orchestration: candidates tainted, every
        // replacement initialized, then the candidates deleted.
        let replacements = match &mv.action {
            Action::Delete => Vec::new(),
            Action::Replace(rs) => rs
                .iter()
                .map(|r| {
                    crate::provisioning::nodeclaim::nodeclaim(
                        &r.nodepool,
                        &r.claim,
                        r.catalog.as_deref(),
                    )
                })
                .collect(),
        };
        vec![Decision {
            nodeclaim: first.clone(),
            nodepool: nodepool.to_string(),
            reason: DisruptionReason::Underutilized,
            expired: false,
            terminate_first: None,
            message: consolidation_verdict(mv).to_string(),
            surge: Some(Surge {
                replacements,
                with: with.to_vec(),
                consolidation_type: if with.is_empty() { "single" } else { "multi" }.into(),
            }),
            command: Some(Arc::clone(mv)),
        }]
    }
}

impl Consolidation {
    /// The candidates the pools offer this pass, best first. Pools held this pass offer no
    /// candidate (a move under validation still finds its own: the validation checks
    /// budgets itself).
    fn eligible<'p>(&self, shares: Vec<Share<'p>>, pass: &mut Pass) -> Vec<Priced<'p>> {
        let mut eligible: Vec<Priced> = Vec::new();
        for s in shares {
            match s.held {
                Some(why) if self.pending.is_none() => hold(pass, &s.eligible, why),
                _ => eligible.extend(s.eligible),
            }
        }
        eligible.sort_by(|a, b| {
            (b.price / b.cost)
                .total_cmp(&(a.price / a.cost))
                .then(a.candidate.name.cmp(b.candidate.name))
        });
        eligible
    }

    /// The move under validation, if there is one (else `None`): held until [`VALIDATION`](super::VALIDATION)
    /// has passed, then validated and decided, or dropped.
    fn validate_pending(
        &mut self,
        infos: &Pools,
        eligible: &[Priced],
        pools: &[Pool],
        budgets: &mut [PoolBudget],
        pass: &mut Pass,
        clock: Clock,
    ) -> Option<Vec<Decision>> {
        let p = self.pending.as_ref()?;
        let mv = Arc::clone(&p.mv);
        let involved = p.pools.clone();
        if clock.instant.duration_since(p.since) < clock.validation {
            hold(pass, eligible, "waiting: another move is being validated");
            for c in &mv.candidates {
                pass.verdicts.insert(c.clone(), consolidation_verdict(&mv));
            }
            return Some(Vec::new());
        }
        self.pending = None;
        self.searched = None;
        if let Err(why) = validate(infos, eligible, &mv, pass, clock.now) {
            for pool in &involved {
                pass.notes.push(Note::pool(
                    pool,
                    "ConsolidationRejected",
                    format!("validation failed: {why}"),
                ));
            }
            hold(
                pass,
                eligible,
                &format!("a move failed validation ({why}); searching again"),
            );
            return Some(Vec::new());
        }
        pass.consolidated = true;
        Some(Self::decided(&mv, eligible, pools, budgets))
    }

    /// A move the search found: announced to its pools, pending until validated.
    fn start_validation(
        &mut self,
        mv: Move,
        infos: &Pools,
        eligible: &[Priced],
        pass: &mut Pass,
        clock: Clock,
    ) {
        pass.consolidated = true;
        let note = format!(
            "{} (validating for {}s)",
            consolidation_verdict(&mv),
            clock.validation.as_secs()
        );
        let pools = involved(&mv, eligible);
        for pool in &pools {
            let reason = if infos.get(pool).is_some_and(|i| i.balanced) {
                "ConsolidationApproved"
            } else {
                "ConsolidationCandidate"
            };
            pass.notes.push(Note::pool(pool, reason, note.clone()));
        }
        self.pending = Some(Pending {
            mv: Arc::new(mv),
            pools: pools.iter().map(|p| p.to_string()).collect(),
            since: clock.instant,
        });
    }
}

/// Holds `eligible` for `why` (each stays `Consolidatable`).
fn hold(pass: &mut Pass, eligible: &[Priced], why: &str) {
    for p in eligible {
        pass.verdicts.insert(
            p.candidate.name.to_string(),
            Verdict::blocked(why).consolidatable(Some(true)),
        );
    }
}

impl Method for Consolidation {
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        self.decide_pools(
            std::slice::from_ref(pool),
            std::slice::from_mut(budget),
            pass,
            clock,
        )
    }

    /// One move at a time across all pools: the candidates of every pool are weighed
    /// together (a move may take nodes of several pools and its replacement may come from
    /// any pool).
    fn decide_pools(
        &mut self,
        pools: &[Pool],
        budgets: &mut [PoolBudget],
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        let view = pass.view;
        let shares: Vec<Share> = pools
            .iter()
            .zip(budgets.iter())
            .map(|(pool, budget)| Self::share(pool, budget, pass, clock))
            .collect();
        let infos: Pools = shares.iter().map(|s| (s.pool.name, s.info)).collect();
        let eligible = self.eligible(shares, pass);
        // A move under validation.
        if let Some(decided) = self.validate_pending(&infos, &eligible, pools, budgets, pass, clock)
        {
            return decided;
        }
        if eligible.is_empty() {
            return Vec::new();
        }
        if pass.consolidated {
            hold(
                pass,
                &eligible,
                "waiting: pods are pending or another move goes first",
            );
            return Vec::new();
        }
        let key = fingerprint(view, &eligible);
        if let Some((k, at, verdicts)) = &self.searched
            && *k == key
            && clock.instant.duration_since(*at) < RESEARCH
        {
            pass.verdicts.extend(verdicts.clone());
            return Vec::new();
        }
        let found = search(&infos, &eligible, pass, clock.now, &self.limits);
        pass.verdicts.extend(found.verdicts.clone());
        match found.mv {
            Some(mv) => self.start_validation(mv, &infos, &eligible, pass, clock),
            // A search cut short by its time limit is not remembered: the next pass
            // searches again.
            None if found.stopped => {}
            None => self.searched = Some((key, clock.instant, found.verdicts)),
        }
        Vec::new()
    }

    fn forget(&mut self, keep: &std::collections::HashSet<String>) {
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.mv.candidates.iter().any(|c| !keep.contains(c)))
        {
            self.pending = None;
        }
    }
}

/// The NodePools of a move's candidates, in name order.
fn involved<'a>(mv: &Move, eligible: &[Priced<'a>]) -> std::collections::BTreeSet<&'a str> {
    eligible
        .iter()
        .filter(|p| mv.candidates.iter().any(|c| c == p.candidate.name))
        .map(|p| p.nodepool)
        .collect()
}
