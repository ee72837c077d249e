//! Kubernetes quantities (`40Gi`, `1.5`, `500m`, `1e3`) as exact values: device capacities
//! and CEL's `quantity()`.

use std::fmt;

/// A quantity in billionths of its unit (exact for every suffix down to `n`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Quantity {
    nanos: i128,
}

/// Why a string is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unparseable quantity {value:?}: {reason}")]
pub struct QuantityError {
    pub value: String,
    pub reason: &'static str,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// A whole number of units.
    pub fn from_units(units: i64) -> Self {
        Quantity {
            nanos: i128::from(units) * NANO,
        }
    }

    /// The value in whole units, rounded up (Kubernetes' `Value()`).
    pub fn units(&self) -> i128 {
        self.nanos.div_euclid(NANO) + i128::from(self.nanos.rem_euclid(NANO) != 0)
    }

    /// Whether it is a whole number.
    pub fn is_integer(&self) -> bool {
        self.nanos % NANO == 0
    }

    /// Approximately, as a float.
    pub fn as_f64(&self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    pub fn sign(&self) -> i64 {
        self.nanos.signum() as i64
    }

    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        self.nanos
            .checked_add(other.nanos)
            .map(|nanos| Quantity { nanos })
    }

    pub fn checked_sub(self, other: Quantity) -> Option<Quantity> {
        self.nanos
            .checked_sub(other.nanos)
            .map(|nanos| Quantity { nanos })
    }

    /// Parses a Kubernetes quantity: a signed decimal, then a binary (`Ki`…`Ei`), decimal
    /// (`n`, `u`, `m`, `k`, `M`…`E`) or exponent (`e3`) suffix.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let bad = |reason| QuantityError {
            value: s.to_string(),
            reason,
        };
        let t = s.trim();
        let (neg, t) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(end);
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if int.is_empty() && frac.is_empty() {
            return Err(bad("no number"));
        }
        if frac.contains('.') {
            return Err(bad("more than one decimal point"));
        }
        let digits = format!("{int}{frac}");
        let mantissa: i128 = digits.parse().map_err(|_| bad("number too large"))?;
        let scale = i32::try_from(frac.len()).map_err(|_| bad("number too long"))?;
        let (mult, exp10) = suffix_value(suffix).ok_or_else(|| bad("unknown suffix"))?;
        // value = mantissa × mult × 10^(exp10 − scale), in nanos: × 10^9.
        let mut v = mantissa.checked_mul(mult).ok_or_else(|| bad("too large"))?;
        let e = exp10 - scale + 9;
        if e >= 0 {
            let p = 10i128
                .checked_pow(e.unsigned_abs())
                .ok_or_else(|| bad("too large"))?;
            v = v.checked_mul(p).ok_or_else(|| bad("too large"))?;
        } else {
            let p = 10i128.checked_pow(e.unsigned_abs()).unwrap_or(i128::MAX);
            // Rounded up, as Kubernetes rounds a quantity below its precision.
            v = v / p + i128::from(v % p != 0);
        }
        Ok(Quantity {
            nanos: if neg { -v } else { v },
        })
    }
}

/// A suffix's binary multiplier and power of ten.
fn suffix_value(suffix: &str) -> Option<(i128, i32)> {
    let binary = |k: u32| Some((1i128 << (10 * k), 0));
    match suffix {
        "" => Some((1, 0)),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => Some((1, -9)),
        "u" => Some((1, -6)),
        "m" => Some((1, -3)),
        "k" => Some((1, 3)),
        "M" => Some((1, 6)),
        "G" => Some((1, 9)),
        "T" => Some((1, 12)),
        "P" => Some((1, 15)),
        "E" => Some((1, 18)),
        s => {
            let rest = s.strip_prefix(['e', 'E'])?;
            let e: i32 = rest.parse().ok()?;
            (-30..=30).contains(&e).then_some((1, e))
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % NANO == 0 {
            let units = self.nanos / NANO;
            for (suffix, unit) in [
                ("Ei", 60),
                ("Pi", 50),
                ("Ti", 40),
                ("Gi", 30),
                ("Mi", 20),
                ("Ki", 10),
            ] {
                let u = 1i128 << unit;
                if units != 0 && units % u == 0 {
                    return write!(f, "{}{suffix}", units / u);
                }
            }
            write!(f, "{units}")
        } else if self.nanos % 1_000_000 == 0 {
            write!(f, "{}m", self.nanos / 1_000_000)
        } else {
            write!(f, "{}n", self.nanos)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect(s)
    }

    #[test]
    fn parses_kubernetes_quantities() {
        assert_eq!(q("40Gi"), Quantity::from_units(40 << 30));
        assert_eq!(q("1.5Gi"), Quantity::from_units(3 << 29));
        assert_eq!(q("500m").nanos, 500_000_000);
        assert_eq!(q("2k"), Quantity::from_units(2000));
        assert_eq!(q("1e3"), Quantity::from_units(1000));
        assert_eq!(q("-1"), Quantity::from_units(-1));
        assert!(q("80Gi") > q("40G"));
        assert_eq!(q("40Gi").to_string(), "40Gi");
        assert_eq!(q("1500m").to_string(), "1500m");
        for bad in ["", "Gi", "1.2.3", "1Xi", "12e99"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }
}
