//! What a benchmark reads of a running process (Linux `/proc`), and its metrics endpoint.

use std::io::{Read, Write};

/// A `/proc/<pid>/status` field given in kB (`VmRSS`, `VmHWM`, ...), in MiB; 0 when the
/// process or the field is gone.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// VmRSS of a process, MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS")
}

/// (VmHWM in MiB, user+system CPU seconds) of a process.
pub fn proc_stats(pid: u32) -> (f64, f64) {
    let hwm = status_mib(pid, "VmHWM");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    (hwm, (ticks(11) + ticks(12)) / hz)
}

/// GET over plain HTTP/1.0 (the metrics endpoints listen on loopback).
pub fn http_get(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = std::net::TcpStream::connect(host).ok()?;
    write!(s, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body.split_once("\r\n\r\n")?.1.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_resident_set_and_a_peak_at_least_as_large() {
        let pid = std::process::id();
        let rss = rss_mib(pid);
        let (hwm, _) = proc_stats(pid);
        assert!(rss > 0.0, "{rss}");
        // The kernel folds each thread's RSS counter into the totals in batches, so the peak
        // read a moment later may trail the current set by a few pages (seen: 4 KiB).
        assert!(hwm >= rss - 1.0, "{hwm} < {rss}");
        assert_eq!(rss_mib(u32::MAX), 0.0);
    }
}
