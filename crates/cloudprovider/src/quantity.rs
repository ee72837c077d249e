//! A small, exact parser for Kubernetes resource quantities.
//!
//! Why our own: `kube_quantity` 0.9 (the maintained crate) resolves to the same k8s-openapi,
//! but its integer conversions truncate the mantissa before scaling (`1.5Gi` → `1Gi`) and
//! return `None` for milli values, so it cannot give exact millicores or bytes.
//!
//! Grammar (as `k8s.io/apimachinery/pkg/api/resource`):
//! `[+-]digits[.digits][suffix]` or `[+-].digits[suffix]`, with suffix one of
//! binary SI `Ki Mi Gi Ti Pi Ei`, decimal SI `n u m k M G T P E` (or none), or a decimal
//! exponent `e<int>` / `E<int>`.
//!
//! Conversions round away from zero like `Quantity.Value()` / `MilliValue()` do
//! (`1.5` → 2, `-1.5` → −2), and fail on overflow instead of wrapping. Up to 20 significant
//! digits are exact (`i64::MAX` has 19); more are exact with a decimal suffix, and with a binary
//! one whenever the dropped digits cannot change the result ([`QuantityError::Precision`]
//! otherwise). Nothing here panics on input.

use std::fmt;

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error("{0:?} is not a Kubernetes quantity")]
    Syntax(String),
    #[error("{0:?} is out of range")]
    Overflow(String),
    #[error("{0:?} has too many significant digits to be read exactly")]
    Precision(String),
}

/// A parsed quantity: `(mantissa + sticky) × 10^exp10 × 1024^exp1024`, where `sticky` is
/// some value in (0, 1) when significant digits beyond [`MAX_DIGITS`] were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    mantissa: u128,
    sticky: bool,
    exp10: i64,
    exp1024: u32,
}

/// Significant digits kept exactly: `10^20 × 1024^6 < 2^127`, so a mantissa times any binary
/// suffix fits in a `u128`.
const MAX_DIGITS: usize = 20;

fn parse(input: &str) -> Result<Parsed, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let syntax = || QuantityError::Syntax(input.to_string());
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // Split the number from the suffix.
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(syntax());
    }
    if frac_part.contains('.') {
        return Err(syntax());
    }
    let (exp10, exp1024): (i64, u32) = match suffix {
        "" => (0, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        s if s.starts_with(['e', 'E']) => {
            let exp = &s[1..];
            let unsigned = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            let e: i64 = exp
                .parse()
                .map_err(|_| QuantityError::Overflow(input.to_string()))?;
            if !(-60..=60).contains(&e) {
                return Err(QuantityError::Overflow(input.to_string()));
            }
            (e, 0)
        }
        _ => return Err(syntax()),
    };
    // Significant digits, without leading zeros; trailing zeros and the digits beyond
    // MAX_DIGITS move into the exponent (the dropped non-zero ones leave `sticky`).
    let significant: Vec<u8> = int_part
        .bytes()
        .chain(frac_part.bytes())
        .skip_while(|&b| b == b'0')
        .collect();
    let nonzero = significant.len() - significant.iter().rev().take_while(|&&b| b == b'0').count();
    let (digits, dropped) = significant[..nonzero].split_at(nonzero.min(MAX_DIGITS));
    let mantissa = digits
        .iter()
        .fold(0u128, |m, b| m * 10 + u128::from(b - b'0'));
    let too_long = |_| syntax();
    let shift = i64::try_from(significant.len() - digits.len()).map_err(too_long)?;
    let frac_len = i64::try_from(frac_part.len()).map_err(too_long)?;
    Ok(Parsed {
        negative,
        mantissa,
        sticky: !dropped.is_empty(),
        exp10: exp10 - frac_len + shift,
        exp1024,
    })
}

/// `value × 10^scale`, rounded away from zero to an integer.
fn scaled(input: &str, scale: i64) -> Result<i64, QuantityError> {
    let p = parse(input)?;
    let overflow = || QuantityError::Overflow(input.to_string());
    // Exact: MAX_DIGITS digits times 1024^6 fit in a u128.
    let n = p.mantissa << (10 * p.exp1024);
    let e = p.exp10 + scale;
    let magnitude = if e >= 0 {
        // A dropped digit means at least MAX_DIGITS (20) digits before the unit: out of range.
        if p.sticky {
            return Err(overflow());
        }
        let pow = 10u128.checked_pow(u32::try_from(e).map_err(|_| overflow())?);
        match pow {
            _ if n == 0 => 0,
            Some(pow) => n.checked_mul(pow).ok_or_else(overflow)?,
            None => return Err(overflow()),
        }
    } else {
        // n < 2^127 < 10^39: more than 38 places below the unit is a value in (0, 1).
        let places = u32::try_from(-e).map_err(|_| overflow())?;
        let up = |n: u128| match 10u128.checked_pow(places) {
            Some(d) => n / d + u128::from(!n.is_multiple_of(d)),
            None => u128::from(n != 0),
        };
        if p.sticky {
            // The true numerator is strictly between n and n + 1024^k: exact when both
            // ends round to the same integer.
            let (lo, hi) = (up(n + 1), up(n + (1u128 << (10 * p.exp1024))));
            if lo != hi {
                return Err(QuantityError::Precision(input.to_string()));
            }
            lo
        } else {
            up(n)
        }
    };
    let magnitude = i128::try_from(magnitude).map_err(|_| overflow())?;
    i64::try_from(if p.negative { -magnitude } else { magnitude }).map_err(|_| overflow())
}

/// Parses a quantity into its base unit (bytes, count), rounded away from zero: `"1.5Gi"` → 1610612736.
pub fn parse_value(input: &str) -> Result<i64, QuantityError> {
    scaled(input, 0)
}

/// Parses a quantity into thousandths, rounded away from zero: `"250m"` → 250, `"2"` → 2000.
pub fn parse_milli(input: &str) -> Result<i64, QuantityError> {
    scaled(input, 3)
}

pub use crate::model::{format_bytes, format_milli};

/// A byte count shown for people: `"15.5Gi"`, `"512Mi"`.
pub struct HumanBytes(pub i64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        const GI: f64 = (1u64 << 30) as f64;
        const MI: f64 = (1u64 << 20) as f64;
        if b.abs() >= GI {
            let v = b / GI;
            if (v - v.round()).abs() < 0.005 {
                write!(f, "{}Gi", v.round())
            } else {
                write!(f, "{v:.2}Gi")
            }
        } else if b.abs() >= MI {
            write!(f, "{}Mi", (b / MI).round())
        } else {
            write!(f, "{}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("1", 1),
            ("+7", 7),
            ("-3", -3),
            ("1Ki", 1024),
            ("16Gi", 16 << 30),
            ("1.5Gi", 1_610_612_736),
            ("100Mi", 100 << 20),
            ("1k", 1000),
            ("2M", 2_000_000),
            ("1G", 1_000_000_000),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1.5e+2", 150),
            ("12e-1", 2),
            ("100m", 1),
            (".5", 1),
            ("5.", 5),
            ("1000n", 1),
            ("0.000Mi", 0),
            ("-1.5", -2),
            ("-100m", -1),
            (".1000000000000000000000000000000", 1),
            ("1.000000000000000000000000000000000000000001", 2),
            ("12345678901234567890123e-20", 124),
            ("0e60", 0),
            ("-0.0E+60", 0),
        ];
        for (input, want) in cases {
            assert_eq!(parse_value(input), Ok(*want), "{input}");
        }
        // 8Ei = 2^63 does not fit in i64.
        assert!(matches!(
            parse_value("8Ei"),
            Err(QuantityError::Overflow(_))
        ));
        assert_eq!(parse_value("7Ei"), Ok(7 << 60));
    }

    #[test]
    fn millis() {
        let cases: &[(&str, i64)] = &[
            ("1", 1000),
            ("0.5", 500),
            ("250m", 250),
            ("1.0005", 1001),
            ("100u", 1),
            ("3500m", 3500),
            ("2k", 2_000_000),
            ("0", 0),
        ];
        for (input, want) in cases {
            assert_eq!(parse_milli(input), Ok(*want), "{input}");
        }
    }

    #[test]
    fn rejects() {
        for bad in [
            "", " ", "abc", "1.2.3", "Gi", "1 Gi", "1gi", "1KB", "1e", "1e+", "--1", "1..", ".",
            "1Gi ", "1e1000", "0x10", "1,5",
        ] {
            let r = parse_value(bad);
            // Trailing/leading whitespace is tolerated; everything else must fail.
            if bad == "1Gi " {
                assert_eq!(r, Ok(1 << 30));
            } else {
                assert!(r.is_err(), "{bad:?} parsed as {r:?}");
            }
        }
        assert!(matches!(
            parse_value("1000000000000000000000000000000000"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            parse_value("99999999999Gi"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_milli(4000), "4");
        assert_eq!(format_milli(3500), "3500m");
        assert_eq!(format_bytes(16 << 30), "16Gi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(0), "0");
        assert_eq!(HumanBytes(16 << 30).to_string(), "16Gi");
        assert_eq!(HumanBytes((15 << 30) + (512 << 20)).to_string(), "15.50Gi");
        assert_eq!(HumanBytes(512 << 20).to_string(), "512Mi");
        // Round trip.
        for b in [1i64 << 30, 3 << 20, 12345] {
            assert_eq!(parse_value(&format_bytes(b)), Ok(b));
        }
    }
}
