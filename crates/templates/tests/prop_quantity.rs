//! Property tests of the quantity parser (`templates::quantity`): it never panics, agrees
//! with an independent exact oracle on generated quantities, and reads back what the
//! formatters write. Case counts: `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "../../../tests/common/prop_cases.rs"]
mod prop_cases;

use proptest::prelude::*;
use templates::quantity::{QuantityError, format_bytes, format_milli, parse_milli, parse_value};

/// A quantity as its parts, so the oracle does not have to parse the string.
#[derive(Debug, Clone)]
struct Parts {
    negative: Option<bool>,
    leading_zeros: usize,
    /// `None`: no integer digits (`.5`).
    int: Option<u64>,
    /// `None`: no dot; `Some("")`: a trailing dot (`5.`).
    frac: Option<String>,
    trailing_zeros: usize,
    suffix: Suffix,
}

#[derive(Debug, Clone, Copy)]
enum Suffix {
    None,
    /// `1024^k`, written `Ki`..`Ei`.
    Binary(u32),
    /// `10^d` written as an SI letter.
    Si(i32),
    /// `10^d` written `e<d>` or `E<d>`.
    Exp(i32, bool),
}

const SI: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
    ("", 0),
];

impl Parts {
    fn render(&self) -> String {
        let mut s = String::new();
        match self.negative {
            Some(true) => s.push('-'),
            Some(false) => s.push('+'),
            None => {}
        }
        s.push_str(&"0".repeat(self.leading_zeros));
        if let Some(i) = self.int {
            s.push_str(&i.to_string());
        }
        if let Some(f) = &self.frac {
            s.push('.');
            s.push_str(f);
            s.push_str(&"0".repeat(self.trailing_zeros));
        }
        match self.suffix {
            Suffix::None => {}
            Suffix::Binary(k) => s.push_str(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k as usize - 1]),
            Suffix::Si(d) => s.push_str(SI.iter().find(|(_, e)| *e == d).map_or("", |(n, _)| n)),
            Suffix::Exp(d, upper) => s.push_str(&format!("{}{d}", if upper { 'E' } else { 'e' })),
        }
        s
    }

    fn significant_digits(&self) -> usize {
        let digits = format!(
            "{}{}",
            self.int.map(|i| i.to_string()).unwrap_or_default(),
            self.frac.as_deref().unwrap_or("")
        );
        digits.trim_start_matches('0').trim_end_matches('0').len()
    }

    /// The exact value times `10^scale`, rounded away from zero (as `Quantity.Value()` /
    /// `MilliValue()`), or `None` when it does not fit an i64.
    fn oracle(&self, scale: i32) -> Option<i64> {
        let frac = self.frac.as_deref().unwrap_or("");
        let f = u32::try_from(frac.len()).ok()?;
        let frac_value: i128 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        let int = i128::from(self.int.unwrap_or(0));
        let mut num = int.checked_mul(10i128.pow(f))?.checked_add(frac_value)?;
        let den = 10i128.pow(f);
        let d = match self.suffix {
            Suffix::None => 0,
            Suffix::Binary(k) => {
                num = num.checked_mul(1024i128.pow(k))?;
                0
            }
            Suffix::Si(d) | Suffix::Exp(d, _) => d,
        } + scale;
        let pow = 10i128.checked_pow(d.unsigned_abs());
        let magnitude = if num == 0 {
            0
        } else if d >= 0 {
            // num ≥ 1: a power beyond i128 is out of range.
            let n = num.checked_mul(pow?)?;
            n / den + i128::from(n % den != 0)
        } else {
            match pow.and_then(|p| den.checked_mul(p)) {
                Some(den) => num / den + i128::from(num % den != 0),
                // num < 10^22 and den > 10^38: a value in (0, 1).
                None => 1,
            }
        };
        let v = if self.negative == Some(true) {
            -magnitude
        } else {
            magnitude
        };
        i64::try_from(v).ok()
    }
}

fn suffix() -> impl Strategy<Value = Suffix> {
    prop_oneof![
        Just(Suffix::None),
        (1u32..=6).prop_map(Suffix::Binary),
        prop::sample::select(SI.to_vec()).prop_map(|(_, d)| Suffix::Si(d)),
        (-60i32..=60, any::<bool>()).prop_map(|(d, u)| Suffix::Exp(d, u)),
    ]
}

fn parts() -> impl Strategy<Value = Parts> {
    (
        prop::option::of(any::<bool>()),
        0usize..40,
        prop::option::of(prop_oneof![0u64..1000, 0u64..=1_000_000_000_000]),
        prop::option::of("[0-9]{0,9}"),
        0usize..40,
        suffix(),
    )
        .prop_filter("a number needs a digit", |(_, zeros, int, frac, _, _)| {
            *zeros > 0 || int.is_some() || frac.as_deref().is_some_and(|f| !f.is_empty())
        })
        .prop_map(
            |(negative, leading_zeros, int, frac, trailing_zeros, suffix)| Parts {
                negative,
                leading_zeros,
                int,
                frac,
                trailing_zeros,
                suffix,
            },
        )
}

/// Strings close to quantities: digits, dots, signs, suffix letters and stray characters.
fn near_quantity() -> impl Strategy<Value = String> {
    "[ +-]{0,2}[0-9.]{0,40}([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{0,6}|[a-zA-Z.+-]{0,3})[ \t]?"
}

fn expect(parts: &Parts, scale: i32, got: Result<i64, QuantityError>) -> Result<(), TestCaseError> {
    match (parts.oracle(scale), got) {
        (Some(want), Ok(got)) => prop_assert_eq!(got, want, "{:?}", parts.render()),
        (None, Err(QuantityError::Overflow(_))) => {}
        // Documented: more than 20 significant digits with a binary suffix may be refused.
        (_, Err(QuantityError::Precision(_)))
            if parts.significant_digits() > 20 && matches!(parts.suffix, Suffix::Binary(_)) => {}
        (want, got) => prop_assert!(
            false,
            "{:?} at scale {}: oracle {:?}, parser {:?}",
            parts.render(),
            scale,
            want,
            got
        ),
    }
    Ok(())
}

proptest! {
    #![proptest_config(prop_cases::config(512, 200_000))]

    #[test]
    fn arbitrary_text_never_panics(s in any::<String>()) {
        let _ = parse_value(&s);
        let _ = parse_milli(&s);
    }

    #[test]
    fn near_quantities_never_panic_and_agree(s in near_quantity()) {
        let (v, m) = (parse_value(&s), parse_milli(&s));
        // A value in thousandths, rounded away from zero, rounds to the same whole value.
        if let Ok(m) = m {
            let whole = m / 1000 + (m % 1000).signum();
            prop_assert_eq!(v, Ok(whole), "{:?}", s);
        }
    }

    #[test]
    fn generated_quantities_match_the_oracle(p in parts()) {
        let s = p.render();
        expect(&p, 0, parse_value(&s))?;
        expect(&p, 3, parse_milli(&s))?;
        // Surrounding whitespace is ignored.
        prop_assert_eq!(parse_value(&format!(" {s}\t")).ok(), parse_value(&s).ok());
    }

    #[test]
    fn formatted_millis_read_back(m in any::<i64>()) {
        prop_assert_eq!(parse_milli(&format_milli(m)), Ok(m));
    }

    #[test]
    fn formatted_bytes_read_back(b in prop_oneof![any::<i64>(), (any::<i32>(), 0u32..=33).prop_map(|(v, s)| i64::from(v) << s)]) {
        prop_assert_eq!(parse_value(&format_bytes(b)), Ok(b));
    }
}
