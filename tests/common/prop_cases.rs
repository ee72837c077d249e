//! How many cases each property test (`crates/*/tests/prop_*.rs`) generates, shared by path
//! (`#[path = ".../tests/common/prop_cases.rs"] mod prop_cases;`).
//!
//! - default (CI, `cargo test`): the small `ci` count of each property;
//! - `PROP_LONG=1`: the `long` count (≥ 1,000,000 cases over all suites; run it in release);
//! - `PROPTEST_CASES=N`: exactly N per property.
//!
//! Failures are not persisted to files: a failing case found here becomes a unit test next
//! to the parser it broke.
// Test-support module: `pub` here shares items between test files of one test crate.
#![allow(unreachable_pub)]

use proptest::test_runner::Config;

/// The configuration of one property: `ci` cases by default, `long` under `PROP_LONG`.
pub fn config(ci: u32, long: u32) -> Config {
    let forced = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok());
    let cases = match forced {
        Some(n) => n,
        None if std::env::var_os("PROP_LONG").is_some_and(|v| v != "0" && !v.is_empty()) => long,
        None => ci,
    };
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}
