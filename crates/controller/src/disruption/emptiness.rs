//! Emptiness: a NodeClaim whose Node has had no reschedulable pod for `consolidateAfter`
//! (plus [`VALIDATION`]) is deleted, the longest-empty first, within the pool's `Empty`
//! budget.

use std::collections::{HashMap, HashSet};

use api::karpenter::DisruptionReason;

use super::budgets::PoolBudget;
use super::candidates::Pool;
use super::{Clock, Decision, Method, Pass, VALIDATION, Verdict};

/// Since when each NodeClaim (by name) has been seen empty.
#[derive(Debug, Default)]
pub struct Emptiness {
    since: HashMap<String, std::time::Instant>,
}

impl Method for Emptiness {
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        _pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        let Some(after) = pool.consolidate_after else {
            for c in &pool.candidates {
                self.since.remove(c.name);
            }
            return Vec::new();
        };
        let wait = after + VALIDATION;
        let mut ready = Vec::new();
        for c in &pool.candidates {
            if !c.empty() {
                self.since.remove(c.name);
                continue;
            }
            let since = *self
                .since
                .entry(c.name.to_string())
                .or_insert(clock.instant);
            if clock.instant.duration_since(since) >= wait {
                ready.push((since, c.name));
            } else {
                _pass.verdicts.insert(
                    c.name.to_string(),
                    Verdict::blocked(format!(
                        "empty; deleted {}s after its pods left",
                        wait.as_secs()
                    )),
                );
            }
        }
        ready.sort();
        let n = ready.len().min(budget.remaining(DisruptionReason::Empty));
        budget.take(n);
        for (_, claim) in ready.iter().skip(n) {
            _pass.verdicts.insert(
                claim.to_string(),
                Verdict::blocked("empty; budget Empty: 0 allowed"),
            );
        }
        ready
            .into_iter()
            .take(n)
            .map(|(_, claim)| Decision {
                surge: None,
                nodeclaim: claim.to_string(),
                nodepool: pool.name.to_string(),
                reason: DisruptionReason::Empty,
                expired: false,
                command: None,
                message: format!(
                    "empty for {}s (consolidateAfter {})",
                    wait.as_secs(),
                    pool.spec.disruption.consolidate_after
                ),
            })
            .collect()
    }

    fn forget(&mut self, keep: &HashSet<String>) {
        self.since.retain(|k, _| keep.contains(k));
    }
}
