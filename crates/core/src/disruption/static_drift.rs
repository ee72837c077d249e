//! Static drift (Karpenter's `StaticDrift`): a drifted NodeClaim of a static NodePool
//! (`replicas`) is replaced one for one by a claim of the pool's template, within the pool's
//! `Drifted` budget, several per pass. Surge-first (the replacement initialized before the
//! candidate goes, through the shared orchestration) while `limits.nodes` leaves room for
//! the replacements (waiting for NodeClaims being deleted to free it); at the limit,
//! delete-first: the candidate is deleted and the static loop refills the pool. Nothing is replaced while the pool is scaling down (more running
//! claims than `replicas`). With zone spread on, a replacement goes to its candidate's zone.

use api::karpenter::DisruptionReason;

use super::budgets::PoolBudget;
use super::candidates::{Candidate, Pool};
use super::drift::{Blocked, blocked_message, condition, manual};
use super::verdict::Verdict;
use super::{Clock, Decision, Method, Pass, Surge};

/// Replaces drifted claims of static pools (the blocks go to drift's report).
#[derive(Debug, Default)]
pub(crate) struct StaticDrift {
    pub(super) blocked: Vec<Blocked>,
}

impl StaticDrift {
    fn block(&mut self, pass: &mut Pass, c: &Candidate, why: &str) {
        let message = blocked_message(condition(c).unwrap_or_default().0, why);
        pass.held
            .insert(c.name.to_string(), Verdict::blocked(&message));
        self.blocked.push(Blocked {
            nodeclaim: c.name.to_string(),
            message,
        });
    }

    /// The pool's drifted candidates that may be replaced now (empty first, then the
    /// oldest); the others are reported blocked.
    fn drifted<'p>(
        &mut self,
        pool: &'p Pool,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<&'p Candidate<'p>> {
        let mut drifted: Vec<&Candidate> = pool
            .candidates
            .iter()
            .filter(|c| c.disruptable() && condition(c).is_some())
            .collect();
        drifted.sort_by_key(|c| {
            (
                !c.pods.is_empty(),
                c.claim.metadata.creation_timestamp.clone(),
                c.name,
            )
        });
        let view = pass.view;
        drifted.retain(|c| {
            if manual(view, c) {
                let why =
                    "its NodeClass's drift policy is Manual: delete the NodeClaim to replace it";
                self.block(pass, c, why);
                return false;
            }
            if let Some(until) = super::orchestrate::retry_after(c.claim, clock.now) {
                self.block(
                    pass,
                    c,
                    &format!("a replacement failed, next try after {until}"),
                );
                return false;
            }
            true
        });
        drifted
    }
}

/// The pool object of `pool` in the pass's view.
fn pool_object<'a>(pass: &Pass<'a>, pool: &str) -> Option<&'a api::NodePool> {
    pass.view
        .cluster
        .nodepools
        .iter()
        .find(|p| crate::objects::name(p.as_ref()) == pool)
        .map(|p| p.as_ref())
}

impl Method for StaticDrift {
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        let (Some(replicas), Some(obj)) = (pool.replicas, pool_object(pass, pool.name)) else {
            return Vec::new();
        };
        let drifted = self.drifted(pool, pass, clock);
        // Not while the pool is scaling down.
        let running = pool.total - pool.deleting;
        if drifted.is_empty() || i64::try_from(running).unwrap_or(i64::MAX) > replicas {
            return Vec::new();
        }
        let allowed = budget
            .remaining(DisruptionReason::Drifted)
            .min(drifted.len());
        let limit = crate::static_pools::scale::node_limit(obj);
        let room = limit.map_or(usize::MAX, |l| l.saturating_sub(pool.total));
        // Room the NodeClaims being deleted will free: wait for it rather than delete first.
        let freed = limit.map_or(usize::MAX, |l| l.saturating_sub(pool.total - pool.deleting));
        if room == 0 && freed > 0 {
            for c in &drifted {
                self.block(
                    pass,
                    c,
                    "waiting for NodeClaims being deleted to make room under limits.nodes",
                );
            }
            return Vec::new();
        }
        let spread = crate::static_pools::template::spreads(obj);
        let mut out = Vec::new();
        for (i, c) in drifted.iter().enumerate() {
            if i >= allowed {
                self.block(pass, c, "budget Drifted: 0 allowed");
                continue;
            }
            let (reason, message) = condition(c).unwrap_or_default();
            let message = format!("drifted ({reason}): {message}");
            let surge = if room > 0 {
                if out.len() >= room {
                    break; // one replacement per free slot under the limit
                }
                let zone = spread
                    .then(|| crate::static_pools::scale::zone_of(c.claim))
                    .flatten();
                match pass.simulate.static_replacement(pass.view, pool.name, zone) {
                    Ok(r) => Some(Surge {
                        replacements: vec![r],
                        ..Surge::default()
                    }),
                    Err(why) => {
                        self.block(pass, c, &format!("no replacement: {why}"));
                        continue;
                    }
                }
            } else {
                None // at limits.nodes: delete first, the static loop refills
            };
            budget.take(1);
            out.push(Decision {
                command: None,
                surge,
                nodeclaim: c.name.to_string(),
                nodepool: pool.name.to_string(),
                reason: DisruptionReason::Drifted,
                expired: false,
                terminate_first: None,
                message,
            });
        }
        out
    }
}
