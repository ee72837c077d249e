//! Emptiness: a NodeClaim whose Node has no reschedulable pod is deleted once it has been
//! `Consolidatable` for [`VALIDATION`](super::VALIDATION) (`consolidateAfter` after its last pod event, or after
//! it initialized), the longest-consolidatable first, within the pool's `Empty` budget.
//!
//! Stateless, as Karpenter's: the clock starts at the timestamps on the objects
//! (`status.lastPodEventTime`, the `Initialized` transition), so a restart loses nothing.

use std::time::Duration;

use api::karpenter::DisruptionReason;

use super::budgets::PoolBudget;
use super::candidates::{Pool, consolidatable_at};
use super::{Clock, Decision, Method, Pass, Verdict};
use crate::blockers::pod_blocker;

/// Deletes empty NodeClaims (no state: see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Emptiness;

/// The verdict of an empty NodeClaim not deleted yet. No countdown in the text: it becomes
/// the `Consolidatable` condition's message, written only when it changes.
fn waiting(consolidatable: bool, validation: Duration) -> Verdict {
    Verdict::blocked(format!(
        "empty; deleted {}s after consolidateAfter elapses",
        validation.as_secs()
    ))
    .consolidatable(Some(consolidatable))
}

impl Method for Emptiness {
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        // A static pool's nodes are never consolidation candidates.
        let Some(after) = pool.consolidate_after.filter(|_| pool.replicas.is_none()) else {
            return Vec::new();
        };
        let validation =
            k8s_openapi::jiff::SignedDuration::try_from(clock.validation).unwrap_or_default();
        let pdbs: Vec<_> = pass.view.pdbs.iter().map(|p| p.as_ref()).collect();
        let mut ready = Vec::new();
        for c in pool.candidates.iter().filter(|c| c.empty()) {
            let Some(at) = consolidatable_at(c.claim, Some(after)) else {
                continue;
            };
            if let Some(b) = pod_blocker(&c.bound, &pdbs, clock.now) {
                pass.verdicts.insert(
                    c.name.to_string(),
                    Verdict::blocked(format!("empty; {b}")).consolidatable(Some(at <= clock.now)),
                );
                continue;
            }
            match at.checked_add(validation) {
                Ok(due) if due <= clock.now => ready.push((at, c.name)),
                _ => {
                    pass.verdicts.insert(
                        c.name.to_string(),
                        waiting(at <= clock.now, clock.validation),
                    );
                }
            }
        }
        ready.sort();
        let n = ready.len().min(budget.remaining(DisruptionReason::Empty));
        budget.take(n);
        for (_, claim) in ready.iter().skip(n) {
            pass.verdicts.insert(
                claim.to_string(),
                Verdict::blocked("empty; budget Empty: 0 allowed").consolidatable(Some(true)),
            );
        }
        ready
            .into_iter()
            .take(n)
            .map(|(at, claim)| Decision {
                surge: None,
                nodeclaim: claim.to_string(),
                nodepool: pool.name.to_string(),
                reason: DisruptionReason::Empty,
                expired: false,
                terminate_first: None,
                command: None,
                message: format!(
                    "consolidatable since {at} (consolidateAfter {})",
                    pool.spec.disruption.consolidate_after
                ),
            })
            .collect()
    }
}
