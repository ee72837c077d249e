//! Durations as the Kubernetes API writes them (Go's `time.ParseDuration`): the one parser of
//! the workspace (NodeClass timeouts, NodePool `expireAfter` / `consolidateAfter`, budget
//! durations, CLI flags, the test provider's delays).
//!
//! Not jiff's `SignedDuration` parser: its friendly format is close to Go's but not equal
//! (no leading-dot fractions such as `.5m`, a fraction only on the last unit, at most 9
//! fraction digits, no U+03BC `μs`, a wider range than Go's `i64` nanoseconds), and
//! `crates/core/tests/prop_durations_budgets.rs` checks this parser against Go's.

use std::time::Duration;

/// A duration as Go's `Duration.String` writes it (`10m0s`, `1h0m0s`, `1.5s`, `250ms`), to the
/// millisecond: for messages and logs, in the syntax the flags and fields accept.
pub fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let secs = d.as_secs();
    let (h, m) = (secs / 3600, (secs % 3600) / 60);
    let mut s = (secs % 60).to_string();
    let ms = d.subsec_millis();
    if ms > 0 {
        s = format!("{s}.{ms:03}").trim_end_matches('0').to_string();
    }
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// Parses a Go duration as `time.ParseDuration` does, without a sign (`90s`, `1h30m`, `1.5h`,
/// `300ms`, `2µs`, `0`), exactly to the nanosecond; `None` when malformed or beyond Go's range
/// (`i64::MAX` nanoseconds, about 292 years). Surrounding whitespace is ignored.
pub fn parse_duration(s: &str) -> Option<Duration> {
    const SECOND: u128 = 1_000_000_000;
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let digits = |t: &str| t.bytes().take_while(u8::is_ascii_digit).count();
    let (mut rest, mut total) = (s, 0u128);
    while !rest.is_empty() {
        let (whole, r) = rest.split_at(digits(rest));
        let (frac, r) = match r.strip_prefix('.') {
            Some(r) => r.split_at(digits(r)),
            None => ("", r),
        };
        if whole.is_empty() && frac.is_empty() {
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
            "s" => SECOND,
            "m" => 60 * SECOND,
            "h" => 3600 * SECOND,
            _ => return None,
        };
        // More than 20 significant digits is out of range whatever the unit.
        let whole = whole.trim_start_matches('0');
        if whole.len() > 20 {
            return None;
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        // 20 fraction digits are far below a nanosecond of any unit.
        let frac = &frac[..frac.len().min(20)];
        let scale = 10u128.pow(u32::try_from(frac.len()).ok()?);
        let frac: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        total = total
            .checked_add(whole.checked_mul(per)?)?
            .checked_add(frac * per / scale)?;
        rest = r;
    }
    let nanos = u64::try_from(total)
        .ok()
        .filter(|n| i64::try_from(*n).is_ok())?;
    Some(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_go_does_and_parses_back() {
        for (secs_ms, text) in [
            (600_000, "10m0s"),
            (90_000, "1m30s"),
            (1_500, "1.5s"),
            (250, "250ms"),
            (3_600_000, "1h0m0s"),
            (5_000, "5s"),
        ] {
            let d = Duration::from_millis(secs_ms);
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Some(d));
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("ten"), None);
        assert_eq!(parse_duration("5d"), None);
        // Found by crates/core/tests/prop_durations_budgets.rs: floating point lost the last nanosecond.
        assert_eq!(
            parse_duration("2990h4m33.820873122s"),
            Some(Duration::from_nanos(10_764_273_820_873_122))
        );
        assert_eq!(parse_duration(".5m"), Some(Duration::from_secs(30)));
        assert_eq!(
            parse_duration("1\u{b5}s2ns"),
            Some(Duration::from_nanos(1002))
        );
        assert_eq!(parse_duration("."), None);
        assert_eq!(parse_duration("1h."), None);
        // Go's range ends at i64::MAX nanoseconds (2562047h47m16.854775807s).
        assert_eq!(
            parse_duration("2562047h47m16.854775807s"),
            Some(Duration::from_nanos(i64::MAX as u64))
        );
        assert_eq!(parse_duration("2562047h47m16.854775808s"), None);
        assert_eq!(parse_duration(""), None);
    }
}
