//! Karpenter's consolidation arithmetic over plain values: which replacement instance types
//! are cheap enough (in [`scheduling::replace`], with split consolidation's), the Balanced
//! policy's score, and the binary search of multi-node consolidation.

/// The Balanced policy's threshold (k = 2: a move must save at least half as much, as a
/// share of the pool's cost, as it disrupts, as a share of the pool's disruption).
pub(crate) const BALANCED_THRESHOLD: f64 = 0.5;

/// The hourly saving of a move: the candidates' price minus the replacement's cheapest
/// offering (0 for a delete).
pub(crate) fn savings(replaced_price: f64, replacement_price: Option<f64>) -> f64 {
    replaced_price - replacement_price.unwrap_or(0.0)
}

/// The Balanced policy's score of a move (Karpenter v1.14): (savings / pool cost) ÷
/// (disruption / pool disruption). 0 when nothing is saved; a move that saves while the pool
/// costs or disrupts nothing scores infinitely.
pub(crate) fn balanced_score(
    savings: f64,
    pool_cost: f64,
    disruption: f64,
    pool_disruption: f64,
) -> f64 {
    if savings <= 0.0 {
        return 0.0;
    }
    if pool_cost <= 0.0 || disruption <= 0.0 || pool_disruption <= 0.0 {
        return f64::INFINITY;
    }
    (savings / pool_cost) / (disruption / pool_disruption)
}

/// Whether the Balanced policy approves a move of `score`.
pub(crate) fn balanced_approves(score: f64) -> bool {
    score >= BALANCED_THRESHOLD
}

/// Multi-node consolidation's search: the largest prefix length in `2..=n` for which
/// `attempt(len)` gives a move, found by binary search (Karpenter assumes a prefix that
/// works makes every shorter one work). Returns the length and the move.
pub(crate) fn largest_prefix<T>(
    n: usize,
    mut attempt: impl FnMut(usize) -> Option<T>,
) -> Option<(usize, T)> {
    let (mut lo, mut hi) = (2usize, n);
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        match attempt(mid) {
            Some(m) => {
                best = Some((mid, m));
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_score_compares_saving_and_disruption_shares() {
        // Saves half the pool's cost, disrupts a third of it: 1.5.
        assert_eq!(balanced_score(1.0, 2.0, 1.0, 3.0), 1.5);
        assert!(balanced_approves(1.5));
        // Saves 2 % while disrupting half: refused.
        let tiny = balanced_score(0.02, 1.0, 5.0, 10.0);
        assert!((tiny - 0.04).abs() < 1e-9);
        assert!(!balanced_approves(tiny));
        assert_eq!(balanced_score(0.0, 1.0, 1.0, 1.0), 0.0);
        assert_eq!(balanced_score(-1.0, 1.0, 1.0, 1.0), 0.0);
        assert!(
            balanced_approves(balanced_score(0.25, 1.0, 1.0, 2.0)),
            "exactly 0.5"
        );
    }

    #[test]
    fn binary_search_finds_the_largest_working_prefix() {
        for n in 0..20 {
            for works_up_to in 0..=n {
                let mut calls = 0;
                let got = largest_prefix(n, |len| {
                    calls += 1;
                    (len <= works_up_to).then_some(len * 10)
                });
                let want = (works_up_to >= 2).then_some((works_up_to, works_up_to * 10));
                assert_eq!(got, want, "n={n} works_up_to={works_up_to}");
                assert!(calls <= 6, "log2 attempts, got {calls}");
            }
        }
    }
}
