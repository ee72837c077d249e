//! Property tests of the controller's readers of user text: Go-style durations
//! (`api::duration::parse_duration`, behind `expireAfter`, `consolidateAfter`,
//! budget durations, NodeClass timeouts and the CLI flags) and disruption budgets (`nodes`
//! counts and percentages, cron `schedule` + `duration`). Written against the public
//! functions only, so they hold whatever implements them. Case counts:
//! `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "../../../tests/common/prop_cases.rs"]
mod prop_cases;

use std::sync::LazyLock;
use std::time::Duration;

use api::duration::parse_duration;
use api::karpenter::Budget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_core::disruption::{budget_active, budget_nodes};
use proptest::prelude::*;
use regex::Regex;

const NS_PER_SECOND: u128 = 1_000_000_000;

/// Nanoseconds per Go duration unit.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", NS_PER_SECOND),
    ("m", 60 * NS_PER_SECOND),
    ("h", 3600 * NS_PER_SECOND),
];

/// Go's grammar for an unsigned duration: components `digits[.digits]unit`.
static GRAMMAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|\x{b5}s|\x{3bc}s|ms|s|m|h))+$")
        .expect("regex")
});
static COMPONENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"([0-9]*)(?:\.([0-9]*))?(ns|us|\x{b5}s|\x{3bc}s|ms|s|m|h)").expect("regex")
});

/// Go's `time.ParseDuration` for unsigned input, exact: nanoseconds, or `None` when Go
/// refuses the text (including more than `i64::MAX` nanoseconds). Surrounding whitespace is
/// ignored (our leniency; YAML has trimmed it anyway).
fn go_duration(s: &str) -> Option<u128> {
    let s = s.trim();
    if s == "0" {
        return Some(0);
    }
    if !GRAMMAR.is_match(s) {
        return None;
    }
    let mut total = 0u128;
    for c in COMPONENT.captures_iter(s) {
        let per = UNITS.iter().find(|(u, _)| *u == &c[3]).map(|(_, n)| *n)?;
        // whole.fraction × per, truncated to the nanosecond; 18 fraction digits suffice and
        // keep every valid duration within a u128.
        let whole = c[1].trim_start_matches('0');
        let frac: String = c
            .get(2)
            .map_or("", |m| m.as_str())
            .chars()
            .take(18)
            .collect();
        if whole.len() > 20 {
            return None;
        }
        let digits: u128 = format!("0{whole}{frac}").parse().ok()?;
        let scale = 10u128.pow(frac.len() as u32);
        total = total.checked_add(digits.checked_mul(per)? / scale)?;
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
