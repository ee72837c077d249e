//! Finding a consolidation move among the eligible candidates of every NodePool (sorted by
//! price per disruption cost), as Karpenter does and within its time limits:
//! - multi-node: the candidates each pool's `Underutilized` budget allows (≤ [`MAX_MULTI`]),
//!   binary search for the largest prefix (≥ 2) that can be deleted or replaced by new
//!   nodes of any pool that cost less (one, or several: a split); stops after [`MULTI_LIMIT`] with the best move so far;
//! - then single-node, the pools taking turns: the first candidate that can be deleted or
//!   replaced; stops after [`SINGLE_LIMIT`] without a move;
//! - every `Balanced` pool of a move's candidates must approve it ([`balanced`]).
//!
//! A search that hit a limit says so in the verdicts of the candidates it did not settle.
//! Also the re-check of a move after its validation wait ([`validate`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use super::plan::{Action, Move, Priced, simulate};
use super::pricing::{balanced_approves, balanced_score, largest_prefix};
use super::verdict::Verdict;
use super::{Pass, consolidation_verdict};

/// At most this many candidates in one multi-node move.
pub(crate) const MAX_MULTI: usize = 100;
/// Multi-node consolidation's search stops after this long (Karpenter: 1 min).
pub(crate) const MULTI_LIMIT: Duration = Duration::from_secs(60);
/// Single-node consolidation's search stops after this long (Karpenter: 3 min).
pub(crate) const SINGLE_LIMIT: Duration = Duration::from_secs(180);

/// The search's time limits and the clock they are measured with (the real monotonic
/// clock by default; tests inject their own).
#[derive(Clone)]
pub(crate) struct Limits {
    pub multi: Duration,
    pub single: Duration,
    pub clock: Arc<dyn Fn() -> Instant + Send + Sync>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            multi: MULTI_LIMIT,
            single: SINGLE_LIMIT,
            clock: Arc::new(Instant::now),
        }
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("multi", &self.multi)
            .field("single", &self.single)
            .finish_non_exhaustive()
    }
}

/// A limit as users write durations: `1m`, `3m`, `90s`, `1m30s`.
fn show(d: Duration) -> String {
    let (m, s) = (d.as_secs() / 60, d.as_secs() % 60);
    match (m, s) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

/// When a search phase must stop.
struct Deadline<'a> {
    clock: &'a (dyn Fn() -> Instant + Send + Sync),
    until: Option<Instant>,
}

impl<'a> Deadline<'a> {
    fn new(limits: &'a Limits, limit: Duration) -> Self {
        let clock = limits.clock.as_ref();
        Deadline {
            clock,
            until: clock().checked_add(limit),
        }
    }

    fn passed(&self) -> bool {
        self.until.is_some_and(|u| (self.clock)() >= u)
    }
}

/// A pool's cost and disruption, for the Balanced score.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PoolTotals {
    pub cost: f64,
    pub disruption: f64,
}

/// What the search needs of each NodePool whose candidates it weighs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolInfo {
    /// Its policy is `Balanced`: it approves a move of its nodes by score.
    pub balanced: bool,
    pub totals: PoolTotals,
    /// What its `Underutilized` budget still allows.
    pub remaining: usize,
}

/// The NodePools of a search, by name.
pub(crate) type Pools<'a> = BTreeMap<&'a str, PoolInfo>;

/// The Balanced check of a move of `candidates`: every Balanced NodePool among theirs must
/// approve, scoring its own nodes against its own totals; a move across pools credits each
/// with the savings in proportion to its share of the candidates' cost (as Karpenter does).
/// `Err(why)` names the first refusal.
pub(crate) fn balanced(
    pools: &Pools,
    mv: &Move,
    candidates: &[&Priced],
    pass: &mut Pass,
) -> Result<(), String> {
    let mut by_pool: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for c in candidates {
        let e = by_pool.entry(c.nodepool).or_default();
        e.0 += c.price;
        e.1 += c.cost;
    }
    let total: f64 = by_pool.values().map(|(price, _)| price).sum();
    let across = by_pool.len() > 1;
    for (name, (price, disruption)) in &by_pool {
        let Some(info) = pools.get(name).filter(|i| i.balanced) else {
            continue;
        };
        let savings = if across && total > 0.0 {
            mv.savings * price / total
        } else {
            mv.savings
        };
        let score = balanced_score(
            savings,
            info.totals.cost,
            *disruption,
            info.totals.disruption,
        );
        pass.scores.push((name.to_string(), score));
        if !balanced_approves(score) {
            let whose = if across {
                format!(" for NodePool {name}")
            } else {
                String::new()
            };
            return Err(format!(
                "Balanced: score {score:.2} < 0.5{whose} (saves {savings:.2}/h of {:.2}/h)",
                info.totals.cost
            ));
        }
    }
    Ok(())
}

/// What a search found.
pub(crate) struct Found {
    pub mv: Option<Move>,
    /// Every eligible candidate's verdict.
    pub verdicts: BTreeMap<String, Verdict>,
    /// A time limit cut the search short (its verdicts are not worth keeping).
    pub stopped: bool,
}

/// Multi-node's candidates: in order, those their pool's budget still allows, at most
/// [`MAX_MULTI`].
fn within_budgets<'a, 'p>(pools: &Pools, eligible: &'a [Priced<'p>]) -> Vec<&'a Priced<'p>> {
    let mut left: BTreeMap<&str, usize> = pools.iter().map(|(n, i)| (*n, i.remaining)).collect();
    eligible
        .iter()
        .filter(|p| {
            left.get_mut(p.nodepool)
                .is_some_and(|n| n.checked_sub(1).map(|m| *n = m).is_some())
        })
        .take(MAX_MULTI)
        .collect()
}

/// Single-node's order: the pools take turns (in name order), each giving its next
/// candidate in the sorted order, so no pool starves another.
fn round_robin<'a, 'p>(eligible: &'a [Priced<'p>]) -> Vec<&'a Priced<'p>> {
    let mut queues: BTreeMap<&str, std::collections::VecDeque<&Priced>> = BTreeMap::new();
    for p in eligible {
        queues.entry(p.nodepool).or_default().push_back(p);
    }
    let mut out = Vec::with_capacity(eligible.len());
    while out.len() < eligible.len() {
        for q in queues.values_mut() {
            out.extend(q.pop_front());
        }
    }
    out
}

/// Searches a move among `eligible` (sorted by price per disruption cost, from every pool
/// in `pools`) for a pass at `now`: multi-node across pools, then single-node, each within
/// its limit. Verdicts of the candidates not in the move say why.
pub(crate) fn search(
    pools: &Pools,
    eligible: &[Priced],
    pass: &mut Pass,
    now: Timestamp,
    limits: &Limits,
) -> Found {
    let mut verdicts = BTreeMap::new();
    let view = pass.view;
    let multi: Vec<&Priced> = within_budgets(pools, eligible);
    let deadline = Deadline::new(limits, limits.multi);
    let mut multi_stopped = false;
    let best = largest_prefix(multi.len(), |len| {
        if multi_stopped || deadline.passed() {
            multi_stopped = true;
            return None;
        }
        let mv = simulate(view, &multi[..len], now).ok()?;
        balanced(pools, &mv, &multi[..len], pass).ok().map(|()| mv)
    });
    let mut found = best.map(|(_, mv)| mv);
    let mut stopped = None;
    if multi_stopped {
        let best = found.as_ref().map_or("none".to_string(), |mv| {
            consolidation_verdict(mv).to_string()
        });
        tracing::info!(limit = %show(limits.multi), %best,
            "multi-node consolidation search stopped at its time limit");
        stopped = Some(format!(
            "multi-node search stopped after {}; best so far: {best}",
            show(limits.multi)
        ));
    }
    if found.is_none() {
        let single = round_robin(eligible);
        let deadline = Deadline::new(limits, limits.single);
        for (i, p) in single.iter().enumerate() {
            if deadline.passed() {
                tracing::info!(limit = %show(limits.single), evaluated = i,
                    "single-node consolidation search stopped at its time limit");
                stopped = Some(format!(
                    "single-node search stopped after {} ({i} of {} candidates evaluated)",
                    show(limits.single),
                    single.len()
                ));
                break;
            }
            let why = match simulate(view, &[p], now) {
                Ok(mv) => match balanced(pools, &mv, &[p], pass) {
                    Ok(()) => {
                        found = Some(mv);
                        break;
                    }
                    Err(why) => why,
                },
                Err(why) => why.to_string(),
            };
            verdicts.insert(p.candidate.name.to_string(), Verdict::blocked(why));
        }
    }
    if let Some(mv) = &found {
        for c in &mv.candidates {
            verdicts.insert(c.clone(), consolidation_verdict(mv));
        }
    }
    let unsettled = stopped
        .clone()
        .unwrap_or_else(|| "not considered in this pass (a move of other nodes goes first)".into());
    for p in eligible {
        verdicts
            .entry(p.candidate.name.to_string())
            .or_insert_with(|| Verdict::blocked(&unsettled));
    }
    Found {
        mv: found,
        verdicts,
        stopped: stopped.is_some(),
    }
}

/// Revalidates a pending move at `now`: its candidates still eligible and within their
/// pools' budgets, the simulation still finds a delete or a replace by as many nodes whose
/// options include the ones chosen, every Balanced pool still approves.
pub(crate) fn validate(
    pools: &Pools,
    eligible: &[Priced],
    mv: &Move,
    pass: &mut Pass,
    now: Timestamp,
) -> Result<(), String> {
    let again: Option<Vec<&Priced>> = mv
        .candidates
        .iter()
        .map(|n| eligible.iter().find(|p| p.candidate.name == n))
        .collect();
    let again = again.ok_or("a candidate is no longer eligible")?;
    let mut wanted: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &again {
        *wanted.entry(p.nodepool).or_default() += 1;
    }
    if let Some((name, _)) = wanted
        .iter()
        .find(|(n, want)| pools.get(*n).is_none_or(|i| i.remaining < **want))
    {
        return Err(format!(
            "budget Underutilized of NodePool {name} no longer allows it"
        ));
    }
    let moved = simulate(pass.view, &again, now).map_err(|e| e.to_string())?;
    balanced(pools, &moved, &again, pass)?;
    match (&mv.action, &moved.action) {
        (_, Action::Delete) => Ok(()),
        (Action::Replace(before), Action::Replace(after)) => {
            // As many replacements, each offering at least the options it had.
            let kept = before.len() == after.len()
                && before.iter().zip(after).all(|(b, a)| {
                    let opts = a.claim.instance_types();
                    b.claim.instance_types().iter().all(|t| opts.contains(t))
                });
            if kept {
                Ok(())
            } else {
                Err("the replacement's options changed".into())
            }
        }
        (Action::Delete, Action::Replace(_)) => {
            Err("the pods no longer fit without a new node".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_as_durations() {
        assert_eq!(show(MULTI_LIMIT), "1m");
        assert_eq!(show(SINGLE_LIMIT), "3m");
        assert_eq!(show(Duration::from_secs(90)), "1m30s");
        assert_eq!(show(Duration::ZERO), "0s");
    }
}
