//! Durations as the Kubernetes API writes them (Go's `time.ParseDuration`).

use std::time::Duration;

use k8s_openapi::jiff::SignedDuration;

/// Parses a Go duration (`90s`, `10m`, `1h30m`, `1.5h`, `500ms`, `0`); `None` when malformed
/// or negative. Parsed by jiff's friendly duration format, restricted to Go's units (`h`, `m`,
/// `s`, `ms`, `us`/`µs`, `ns`) without spaces, so `5d` or `1 hour` are refused as Go refuses
/// them.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let go_units =
        |c: char| c.is_ascii_digit() || matches!(c, '.' | 'h' | 'm' | 's' | 'u' | 'µ' | 'n');
    if s.is_empty() || !s.chars().all(go_units) {
        return None;
    }
    let d: SignedDuration = s.parse().ok()?;
    Duration::try_from(d).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ok = [
            ("10m", Duration::from_secs(600)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5h", Duration::from_secs(5400)),
            ("1.5s", Duration::from_millis(1500)),
            ("500ms", Duration::from_millis(500)),
            ("2us", Duration::from_micros(2)),
            ("2µs", Duration::from_micros(2)),
            ("7ns", Duration::from_nanos(7)),
            ("1h0m0s", Duration::from_secs(3600)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
        ];
        for (s, want) in ok {
            assert_eq!(parse_duration(s), Some(want), "{s}");
        }
        for bad in ["", "ten", "5d", "1 hour", "1h 30m", "3", "-5s", "1.5", "h"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
