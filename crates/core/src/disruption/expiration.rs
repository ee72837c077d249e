//! Expiration: a NodeClaim older than its `expireAfter` is deleted. Not budgeted (as in
//! Karpenter), and it goes before every other method.

use std::time::Duration;

use api::karpenter::DisruptionReason;

use super::budgets::PoolBudget;
use super::candidates::Pool;
use super::{Clock, Decision, Method, Pass};
use api::duration::parse_duration;

/// Expiration has no timers: the claim's age is its creation timestamp's.
#[derive(Debug, Default)]
pub(crate) struct Expiration;

impl Method for Expiration {
    fn decide(
        &mut self,
        pool: &Pool,
        _budget: &mut PoolBudget,
        _pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        pool.candidates
            .iter()
            .filter_map(|c| {
                let expire_after = c.claim.spec.expire_after.as_str();
                let ttl = (expire_after != "Never")
                    .then(|| parse_duration(expire_after))
                    .flatten()?;
                let created = c.claim.metadata.creation_timestamp.as_ref()?.0;
                let age = Duration::try_from(clock.now.duration_since(created)).ok()?;
                (age >= ttl).then(|| Decision {
                    surge: None,
                    nodeclaim: c.name.to_string(),
                    nodepool: pool.name.to_string(),
                    reason: DisruptionReason::Empty,
                    expired: true,
                    terminate_first: None,
                    message: format!("expired after {expire_after}"),
                    command: None,
                })
            })
            .collect()
    }
}
