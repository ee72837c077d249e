//! Disruption budgets: how many of a NodePool's nodes may be disrupted at once, per reason,
//! and what a pass has already taken of that.

use api::karpenter::{Budget, DisruptionReason};
use k8s_openapi::jiff::{Timestamp, tz::TimeZone};

use api::duration::parse_duration;

/// Why a budget's schedule and duration cannot be used, if they cannot: both or neither must
/// be set, the schedule a cron expression, the duration a Go duration.
pub(crate) fn budget_invalid(budget: &Budget) -> Option<String> {
    match (&budget.schedule, &budget.duration) {
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            Some("schedule and duration must be set together".into())
        }
        (Some(schedule), Some(duration)) => {
            if let Err(e) = schedule.parse::<croner::Cron>() {
                return Some(format!(
                    "schedule \"{schedule}\" is not a cron expression: {e}"
                ));
            }
            parse_duration(duration)
                .is_none()
                .then(|| format!("duration \"{duration}\" is not a duration"))
        }
    }
}

/// The first invalid budget of a pool, named by its index: while there is one, the pool
/// allows no disruption (Karpenter fails closed on a misconfigured budget).
pub fn invalid(budgets: &[Budget]) -> Option<String> {
    budgets
        .iter()
        .enumerate()
        .find_map(|(i, b)| budget_invalid(b).map(|why| format!("budgets[{i}]: {why}")))
}

/// Whether `budget` is active at `now`: always without a schedule; with one, during
/// `duration` after each schedule hit (UTC). An unusable schedule or duration is active
/// (and [`allowed`] allows nothing while one exists).
pub fn budget_active(budget: &Budget, now: Timestamp) -> bool {
    let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) else {
        return true;
    };
    let (Ok(cron), Some(duration)) = (
        schedule.parse::<croner::Cron>(),
        parse_duration(duration).and_then(|d| k8s_openapi::jiff::SignedDuration::try_from(d).ok()),
    ) else {
        return true;
    };
    let Ok(from) = now.checked_sub(duration) else {
        return true;
    };
    let from = from.to_zoned(TimeZone::UTC);
    cron.find_next_occurrence(&from, true)
        .is_ok_and(|hit| hit.timestamp() <= now)
}

/// How many of `total` nodes `budget` allows to be disrupted at once (percentages round up,
/// as Karpenter does); an invalid value allows none.
pub fn budget_nodes(budget: &Budget, total: usize) -> usize {
    let v = budget.nodes.trim();
    match v.strip_suffix('%') {
        Some(p) => p
            .parse::<usize>()
            .map_or(0, |p| (total * p.min(100)).div_ceil(100)),
        None => v.parse().unwrap_or(0),
    }
}

/// The most restrictive active budget for `reason` (budgets without reasons apply to all);
/// none at all while any budget of the pool is invalid (fail closed).
pub fn allowed(
    budgets: &[Budget],
    reason: DisruptionReason,
    total: usize,
    now: Timestamp,
) -> usize {
    if invalid(budgets).is_some() {
        return 0;
    }
    budgets
        .iter()
        .filter(|b| b.reasons.as_ref().is_none_or(|r| r.contains(&reason)))
        .filter(|b| budget_active(b, now))
        .map(|b| budget_nodes(b, total))
        .min()
        .unwrap_or(usize::MAX)
}

/// One NodePool's budgets during a pass: nodes already being disrupted and nodes the
/// methods decided on in this pass both count against every reason.
#[derive(Debug)]
pub struct PoolBudget<'a> {
    budgets: &'a [Budget],
    /// The pool's NodeClaims (those being deleted included).
    total: usize,
    /// NodeClaims of the pool being deleted already.
    disrupting: usize,
    /// Decided in this pass.
    taken: usize,
    now: Timestamp,
}

impl<'a> PoolBudget<'a> {
    pub fn new(budgets: &'a [Budget], total: usize, disrupting: usize, now: Timestamp) -> Self {
        PoolBudget {
            budgets,
            total,
            disrupting,
            taken: 0,
            now,
        }
    }

    /// How many more nodes may be disrupted for `reason`.
    pub fn remaining(&self, reason: DisruptionReason) -> usize {
        allowed(self.budgets, reason, self.total, self.now)
            .saturating_sub(self.disrupting + self.taken)
    }

    /// How many of the pool's nodes are being disrupted already (they consume its budgets).
    pub(crate) fn disrupting(&self) -> usize {
        self.disrupting
    }

    /// Records `n` decisions of this pass.
    pub fn take(&mut self, n: usize) {
        self.taken += n;
    }

    /// Whether nothing of the pool is being disrupted, nor was decided in this pass.
    pub fn idle(&self) -> bool {
        self.disrupting + self.taken == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(nodes: &str, schedule: Option<&str>, duration: Option<&str>) -> Budget {
        Budget {
            reasons: None,
            nodes: nodes.into(),
            schedule: schedule.map(str::to_string),
            duration: duration.map(str::to_string),
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn an_invalid_budget_allows_no_disruption_and_says_why() {
        let now = at("2026-11-22T10:30:00Z");
        let all = budget("100%", None, None);
        for (bad, why) in [
            (
                budget("1", Some("x y z w v"), Some("1h")),
                "budgets[1]: schedule \"x y z w v\" is not a cron expression",
            ),
            (
                budget("1", Some("0 9 * * *"), Some("soon")),
                "budgets[1]: duration \"soon\" is not a duration",
            ),
            (
                budget("1", Some("0 9 * * *"), None),
                "budgets[1]: schedule and duration must be set together",
            ),
        ] {
            let budgets = [all.clone(), bad];
            let why_now = invalid(&budgets).expect("invalid");
            assert!(why_now.starts_with(why), "{why_now}");
            assert_eq!(allowed(&budgets, DisruptionReason::Empty, 10, now), 0);
        }
        let fine = [all, budget("0", Some("0 9 * * *"), Some("8h"))];
        assert_eq!(invalid(&fine), None);
        assert_eq!(allowed(&fine, DisruptionReason::Empty, 10, now), 0);
        assert_eq!(
            allowed(
                &fine,
                DisruptionReason::Empty,
                10,
                at("2026-11-22T08:30:00Z")
            ),
            10
        );
    }

    #[test]
    fn budgets_round_percentages_up_and_take_the_minimum_active_one() {
        assert_eq!(budget_nodes(&budget("10%", None, None), 5), 1);
        assert_eq!(budget_nodes(&budget("10%", None, None), 0), 0);
        assert_eq!(budget_nodes(&budget("50%", None, None), 5), 3);
        assert_eq!(budget_nodes(&budget("3", None, None), 5), 3);
        assert_eq!(budget_nodes(&budget("x", None, None), 5), 0);
        let now = at("2026-11-22T10:30:00Z");
        let nightly_freeze = budget("0", Some("0 10 * * *"), Some("1h"));
        assert!(budget_active(&nightly_freeze, now));
        assert!(!budget_active(&nightly_freeze, at("2026-11-22T11:30:00Z")));
        let budgets = [budget("100%", None, None), nightly_freeze];
        assert_eq!(allowed(&budgets, DisruptionReason::Empty, 4, now), 0);
        assert_eq!(
            allowed(
                &budgets,
                DisruptionReason::Empty,
                4,
                at("2026-11-22T12:00:00Z")
            ),
            4
        );
        let drift_only = Budget {
            reasons: Some(vec![DisruptionReason::Drifted]),
            ..budget("0", None, None)
        };
        assert_eq!(
            allowed(&[drift_only], DisruptionReason::Empty, 4, now),
            usize::MAX
        );
    }

    #[test]
    fn an_unhealthy_only_budget_caps_no_voluntary_disruption() {
        let now = at("2026-11-22T10:30:00Z");
        let unhealthy_only = Budget {
            reasons: Some(vec![DisruptionReason::Unhealthy]),
            ..budget("0", None, None)
        };
        let budgets = [budget("50%", None, None), unhealthy_only];
        assert_eq!(invalid(&budgets), None);
        for reason in [
            DisruptionReason::Underutilized,
            DisruptionReason::Empty,
            DisruptionReason::Drifted,
        ] {
            assert_eq!(allowed(&budgets, reason, 4, now), 2, "{reason:?}");
        }
        assert_eq!(allowed(&budgets, DisruptionReason::Unhealthy, 4, now), 0);
        // As it arrives from the API server.
        let parsed: Budget =
            serde_json::from_value(serde_json::json!({"nodes": "0", "reasons": ["Unhealthy"]}))
                .expect("a budget with reason Unhealthy parses");
        assert_eq!(parsed.reasons, Some(vec![DisruptionReason::Unhealthy]));
    }

    #[test]
    fn a_pool_budget_counts_what_is_being_deleted_and_what_the_pass_took() {
        let budgets = [budget("3", None, None)];
        let mut b = PoolBudget::new(&budgets, 10, 1, at("2026-11-22T10:30:00Z"));
        assert!(!b.idle());
        assert_eq!(b.remaining(DisruptionReason::Empty), 2);
        b.take(2);
        assert_eq!(b.remaining(DisruptionReason::Underutilized), 0);
    }
}
