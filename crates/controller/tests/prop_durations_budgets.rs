//! Property tests of the controller's readers of user text: Go-style durations
//! (`controller::nodeclass::parse_duration`, behind `expireAfter`, `consolidateAfter`,
//! budget durations, NodeClass timeouts and the CLI flags) and disruption budgets (`nodes`
//! counts and percentages, cron `schedule` + `duration`). Written against the public
//! functions only, so they hold whatever implements them. Case counts:
//! `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "../../../tests/common/prop_cases.rs"]
mod prop_cases;

use std::time::Duration;

use api::karpenter::Budget;
use controller::disruption::{budget_active, budget_nodes};
use controller::nodeclass::parse_duration;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;

const NS_PER_SECOND: u128 = 1_000_000_000;

/// Go's `time.ParseDuration` for unsigned input, exact: nanoseconds, or `None` when Go
/// refuses the text (including more than `i64::MAX` nanoseconds). Surrounding whitespace is
/// ignored (our leniency; YAML has trimmed it anyway).
fn go_duration(s: &str) -> Option<u128> {
    let s = s.trim();
    if s == "0" {
        return Some(0);
    }
    if s.is_empty() {
        return None;
    }
    let digits = |t: &str| t.bytes().take_while(u8::is_ascii_digit).count();
    let (mut rest, mut total) = (s, 0u128);
    while !rest.is_empty() {
        let (int, r) = rest.split_at(digits(rest));
        let (frac, r) = match r.strip_prefix('.') {
            Some(r) => r.split_at(digits(r)),
            None => ("", r),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let unit_len = r
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(r.len());
        let (unit, r) = r.split_at(unit_len);
        let per: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => NS_PER_SECOND,
            "m" => 60 * NS_PER_SECOND,
            "h" => 3600 * NS_PER_SECOND,
            _ => return None,
        };
        let int: u128 = match int.trim_start_matches('0') {
            "" => 0,
            i if i.len() > 30 => return None,
            i => i.parse().ok()?,
        };
        // The fraction, to the nanosecond (digits beyond do not matter below 1 ns × per).
        let frac = &frac[..frac.len().min(20)];
        let scale = 10u128.pow(u32::try_from(frac.len()).ok()?);
        let f: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        total = total
            .checked_add(int.checked_mul(per)?)?
            .checked_add(f * per / scale)?;
        rest = r;
    }
    (total <= i64::MAX as u128).then_some(total)
}

/// Go's `Duration.String()`: `72h3m0.5s`, `1.5s`, `2ms`, `1µs`, `0s`.
fn go_string(ns: u128) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let frac = |v: u128, digits: u32| {
        let scale = 10u128.pow(digits);
        let f = format!("{:0width$}", v % scale, width = digits as usize);
        let f = f.trim_end_matches('0');
        if f.is_empty() {
            format!("{}", v / scale)
        } else {
            format!("{}.{f}", v / scale)
        }
    };
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}\u{b5}s", frac(ns, 3));
    }
    if ns < NS_PER_SECOND {
        return format!("{}ms", frac(ns, 6));
    }
    let (h, rem) = (ns / (3600 * NS_PER_SECOND), ns % (3600 * NS_PER_SECOND));
    let (m, rem) = (rem / (60 * NS_PER_SECOND), rem % (60 * NS_PER_SECOND));
    let s = format!("{}s", frac(rem, 9));
    match (h, m) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

fn ns(d: Duration) -> u128 {
    d.as_nanos()
}

/// Durations near Go's grammar: components of digits, dots and units, some stray text.
fn near_duration() -> impl Strategy<Value = String> {
    "(([0-9]{0,4}\\.?[0-9]{0,4})(ns|us|\u{b5}s|\u{3bc}s|ms|s|m|h|d|S|)){0,4}[ +-]?"
}

/// Durations as written in NodePools: integer components in s, m, h (and ms, ns, us).
fn integer_duration() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            0u64..1_000_000,
            prop::sample::select(vec!["ns", "us", "ms", "s", "m", "h"]),
        ),
        1..5,
    )
    .prop_map(|parts| parts.iter().map(|(n, u)| format!("{n}{u}")).collect())
}

fn budget(nodes: &str, schedule: Option<String>, duration: Option<String>) -> Budget {
    Budget {
        reasons: None,
        nodes: nodes.to_string(),
        schedule,
        duration,
    }
}

/// A time in 2000..2100 (UTC), to the second.
fn timestamp() -> impl Strategy<Value = Timestamp> {
    (946_684_800i64..4_102_444_800).prop_map(|s| Timestamp::from_second(s).expect("in range"))
}

proptest! {
    #![proptest_config(prop_cases::config(512, 100_000))]

    #[test]
    fn durations_never_panic(s in prop_oneof![any::<String>(), near_duration()]) {
        let _ = parse_duration(&s);
    }

    #[test]
    fn valid_durations_read_as_go_reads_them(s in prop_oneof![near_duration(), integer_duration()]) {
        prop_assert_eq!(parse_duration(&s).map(ns), go_duration(&s), "{:?}", s);
    }

    #[test]
    fn go_formatted_durations_read_back(n in prop_oneof![0u64..=i64::MAX as u64, 0u64..10_000_000_000, (0u64..100_000).prop_map(|s| s * 1_000_000_000)]) {
        let text = go_string(u128::from(n));
        prop_assert_eq!(parse_duration(&text).map(ns), Some(u128::from(n)), "{:?}", text);
    }

    #[test]
    fn budget_nodes_never_panic_and_follow_the_schema(
        nodes in prop_oneof![any::<String>(), "[0-9]{0,25}%?", "(100|[0-9]{1,2})%"],
        total in 0usize..100_000,
    ) {
        let allowed = budget_nodes(&budget(&nodes, None, None), total);
        // Valid per the CRD pattern ^((100|[0-9]{1,2})%|[0-9]+)$: the count, or the
        // percentage of `total` rounded up.
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        match nodes.strip_suffix('%') {
            Some(p) if digits(p) && (p.len() <= 2 || p == "100") => {
                let p: usize = p.parse().expect("digits");
                prop_assert_eq!(allowed, (total * p).div_ceil(100), "{:?} of {}", nodes, total);
            }
            None if digits(&nodes) => {
                prop_assert_eq!(allowed, nodes.parse::<usize>().unwrap_or(0), "{:?}", nodes);
            }
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(prop_cases::config(128, 20_000))]

    #[test]
    fn budget_schedules_never_panic(
        schedule in prop_oneof![
            any::<String>(),
            "([0-9*/,-]{1,6} ){4,5}[0-9*/,-]{1,6}",
            "([0-9]{1,2}|\\*) ([0-9]{1,2}|\\*) ([0-9]{1,2}|\\*|L|31) ([0-9]{1,2}|\\*|FEB|feb) ([0-7]|\\*|MON|SUN#5|5L)",
            "@(annually|yearly|monthly|weekly|daily|midnight|hourly|reboot|every)",
        ],
        duration in prop_oneof![near_duration(), "[0-9]{1,3}(h|m)"],
        now in timestamp(),
    ) {
        let _ = budget_active(&budget("0", Some(schedule), Some(duration)), now);
    }

    #[test]
    fn daily_schedules_are_active_for_duration_after_each_hit(
        minute in 0i64..60,
        hour in 0i64..24,
        minutes in 1i64..(24 * 60),
        now in timestamp(),
    ) {
        let schedule = format!("{minute} {hour} * * *");
        let duration = format!("{}h{}m", minutes / 60, minutes % 60);
        let active = |at: Timestamp| {
            budget_active(&budget("0", Some(schedule.clone()), Some(duration.clone())), at)
        };
        // Seconds since the last hit at hour:minute UTC, at or before now.
        let of_day = now.as_second().rem_euclid(86_400);
        let since = (of_day - (hour * 3600 + minute * 60)).rem_euclid(86_400);
        prop_assert_eq!(active(now), since <= minutes * 60, "{} for {} at {} ({}s after the hit)", schedule, duration, now, since);
        // Active at the hit itself and at its end, not a second after.
        let hit = now - SignedDuration::from_secs(since);
        prop_assert!(active(hit));
        prop_assert!(active(hit + SignedDuration::from_mins(minutes)));
        prop_assert!(!active(hit + SignedDuration::from_mins(minutes) + SignedDuration::from_secs(1)));
    }
}
