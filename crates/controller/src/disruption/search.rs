//! Finding a consolidation move among a pool's eligible candidates (sorted by price per
//! disruption cost), as Karpenter does and within its time limits:
//! - multi-node: binary search for the largest prefix (≥ 2) that can be deleted or replaced
//!   by one cheaper node; stops after [`MULTI_LIMIT`] with the best move found so far;
//! - then single-node: the first candidate that can be deleted or replaced; stops after
//!   [`SINGLE_LIMIT`] without a move.
//!
//! A search that hit a limit says so in the verdicts of the candidates it did not settle.
//! Also the re-check of a move after its validation wait ([`validate`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::karpenter::ConsolidationPolicy;
use k8s_openapi::jiff::Timestamp;

use super::candidates::Pool;
use super::plan::{Action, Move, Priced, simulate};
use super::pricing::{balanced_approves, balanced_score, largest_prefix};
use super::verdict::Verdict;
use super::{Pass, consolidation_verdict};

/// At most this many candidates in one multi-node move.
pub const MAX_MULTI: usize = 100;
/// Multi-node consolidation's search stops after this long (Karpenter: 1 min).
pub const MULTI_LIMIT: Duration = Duration::from_secs(60);
/// Single-node consolidation's search stops after this long (Karpenter: 3 min).
pub const SINGLE_LIMIT: Duration = Duration::from_secs(180);

/// The search's time limits and the clock they are measured with (the real monotonic
/// clock by default; tests inject their own).
#[derive(Clone)]
pub struct Limits {
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
pub struct PoolTotals {
    pub cost: f64,
    pub disruption: f64,
}

/// The Balanced check of a move: `Err(why)` when the pool's policy refuses it.
pub fn balanced(
    pool: &Pool,
    totals: &PoolTotals,
    mv: &Move,
    pass: &mut Pass,
) -> Result<(), String> {
    if pool.spec.disruption.consolidation_policy != ConsolidationPolicy::Balanced {
        return Ok(());
    }
    let score = balanced_score(mv.savings, totals.cost, mv.disruption, totals.disruption);
    pass.scores.push((pool.name.to_string(), score));
    if balanced_approves(score) {
        Ok(())
    } else {
        Err(format!(
            "Balanced: score {score:.2} < 0.5 (saves {:.2}/h of {:.2}/h)",
            mv.savings, totals.cost
        ))
    }
}

/// What a search found.
pub struct Found {
    pub mv: Option<Move>,
    /// Every eligible candidate's verdict.
    pub verdicts: BTreeMap<String, Verdict>,
    /// A time limit cut the search short (its verdicts are not worth keeping).
    pub stopped: bool,
}

/// Searches a move among `eligible` (sorted) for a pass at `now`: multi-node, then
/// single-node, each within its limit. Verdicts of the candidates not in the move say why.
pub fn search(
    pool: &Pool,
    totals: &PoolTotals,
    eligible: &[Priced],
    budget: usize,
    pass: &mut Pass,
    now: Timestamp,
    limits: &Limits,
) -> Found {
    let mut verdicts = BTreeMap::new();
    let view = pass.view;
    let n = eligible.len().min(MAX_MULTI).min(budget);
    let refs: Vec<&Priced> = eligible.iter().collect();
    let deadline = Deadline::new(limits, limits.multi);
    let mut multi_stopped = false;
    let multi = largest_prefix(n, |len| {
        if multi_stopped || deadline.passed() {
            multi_stopped = true;
            return None;
        }
        let mv = simulate(view, &refs[..len], now).ok()?;
        balanced(pool, totals, &mv, pass).ok().map(|()| mv)
    });
    let mut found = multi.map(|(_, mv)| mv);
    let mut stopped = None;
    if multi_stopped {
        let best = found.as_ref().map_or("none".to_string(), |mv| {
            consolidation_verdict(mv).to_string()
        });
        tracing::info!(nodepool = pool.name, limit = %show(limits.multi), %best,
            "multi-node consolidation search stopped at its time limit");
        stopped = Some(format!(
            "multi-node search stopped after {}; best so far: {best}",
            show(limits.multi)
        ));
    }
    if found.is_none() && budget > 0 {
        let deadline = Deadline::new(limits, limits.single);
        for (i, p) in refs.iter().enumerate() {
            if deadline.passed() {
                tracing::info!(nodepool = pool.name, limit = %show(limits.single), evaluated = i,
                    "single-node consolidation search stopped at its time limit");
                stopped = Some(format!(
                    "single-node search stopped after {} ({i} of {} candidates evaluated)",
                    show(limits.single),
                    refs.len()
                ));
                break;
            }
            let why = match simulate(view, &[p], now) {
                Ok(mv) => match balanced(pool, totals, &mv, pass) {
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

/// Revalidates a pending move of `pool` at `now`: its candidates still eligible, the
/// simulation still finds a delete or a replace whose options include the ones chosen.
pub fn validate(
    pool: &Pool,
    totals: &PoolTotals,
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
    let again = simulate(pass.view, &again, now).map_err(|e| e.to_string())?;
    balanced(pool, totals, &again, pass)?;
    match (&mv.action, &again.action) {
        (_, Action::Delete) => Ok(()),
        (Action::Replace(before), Action::Replace(after)) => {
            let opts = after.claim.instance_types();
            if before
                .claim
                .instance_types()
                .iter()
                .all(|t| opts.contains(t))
            {
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
