//! Karpenter's consolidation arithmetic over plain values: which replacement instance types
//! are cheap enough, the Balanced policy's score, and the binary search of multi-node
//! consolidation.

use std::fmt;

/// Capacity types, in the order Karpenter prices a launch: reserved first, then spot, then
/// on-demand.
pub const RESERVED: &str = "reserved";
pub const SPOT: &str = "spot";
pub const ON_DEMAND: &str = "on-demand";

/// The Balanced policy's threshold (k = 2: a move must save at least half as much, as a
/// share of the pool's cost, as it disrupts, as a share of the pool's disruption).
pub const BALANCED_THRESHOLD: f64 = 0.5;

/// One offering of a replacement option, already restricted to the replacement's
/// requirements (zone, capacity type) and to available ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    pub capacity_type: String,
    pub price: f64,
}

/// The price a launch of this option may cost at worst: the most expensive compatible
/// offering of the capacity type that would be launched (reserved, else spot, else
/// on-demand). `None` without offerings.
pub fn worst_launch_price(offers: &[Offer]) -> Option<f64> {
    [RESERVED, SPOT, ON_DEMAND].iter().find_map(|ct| {
        offers
            .iter()
            .filter(|o| o.capacity_type == *ct)
            .map(|o| o.price)
            .reduce(f64::max)
    })
}

/// The cheapest offering of an option.
pub fn cheapest_price(offers: &[Offer]) -> Option<f64> {
    offers.iter().map(|o| o.price).reduce(f64::min)
}

/// One replacement option: an instance type and its compatible offerings.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub instance_type: String,
    pub offers: Vec<Offer>,
}

/// The candidates a replacement would stand in for.
#[derive(Debug, Clone, PartialEq)]
pub struct Replaced {
    /// Their instance types with their prices.
    pub types: Vec<(String, f64)>,
    /// Every one of them runs on spot.
    pub all_spot: bool,
}

impl Replaced {
    pub fn price(&self) -> f64 {
        self.types.iter().map(|(_, p)| p).sum()
    }
}

/// Why no replacement qualifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoReplacement {
    /// Spot-to-spot consolidation (a feature gate, off by default) is not done.
    SpotToSpot,
    /// No option is strictly cheaper than the candidates.
    NoCheaperOption,
    /// Fewer cheaper options than the requirement's `minValues`.
    MinValues { want: u32, got: usize },
}

impl fmt::Display for NoReplacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoReplacement::SpotToSpot => {
                write!(f, "spot-to-spot consolidation is disabled")
            }
            NoReplacement::NoCheaperOption => write!(f, "no cheaper option"),
            NoReplacement::MinValues { want, got } => {
                write!(f, "only {got} cheaper instance types, minValues is {want}")
            }
        }
    }
}

/// The options a replacement may launch, with the capacity types it may use.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    /// Cheapest first.
    pub options: Vec<Choice>,
    /// `Some(["spot"])` when the replacement must be restricted to spot (it allowed spot
    /// and on-demand: an on-demand fallback could cost more than what it replaces).
    pub capacity_types: Option<Vec<String>>,
}

/// Karpenter's price rules for a replacement of `replaced` by one node launched from
/// `options` (which the replacement's requirements allow, `allows_spot`/`allows_on_demand`):
/// - all candidates spot and the replacement may be spot: spot-to-spot, not done;
/// - keep the options whose worst launch price is strictly below the candidates' summed
///   price (so a like-for-like replacement never qualifies);
/// - an option of a candidate's own type must also be cheaper than that candidate;
/// - `min_values` (of the instance-type requirement) must still hold;
/// - spot and on-demand both allowed: spot only.
pub fn choose(
    replaced: &Replaced,
    options: &[Choice],
    allows_spot: bool,
    allows_on_demand: bool,
    min_values: Option<u32>,
) -> Result<Chosen, NoReplacement> {
    if replaced.all_spot && allows_spot {
        return Err(NoReplacement::SpotToSpot);
    }
    let total = replaced.price();
    let mut kept: Vec<(f64, Choice)> = options
        .iter()
        .filter_map(|o| {
            let worst = worst_launch_price(&o.offers)?;
            (worst < total).then(|| (worst, o.clone()))
        })
        .collect();
    // An option of a candidate's own type must be cheaper than that candidate too.
    let own = replaced
        .types
        .iter()
        .filter(|(t, _)| kept.iter().any(|(_, o)| &o.instance_type == t))
        .map(|(_, p)| *p)
        .reduce(f64::max);
    if let Some(ceiling) = own {
        kept.retain(|(worst, _)| *worst < ceiling);
    }
    if kept.is_empty() {
        return Err(NoReplacement::NoCheaperOption);
    }
    if let Some(want) = min_values
        && kept.len() < want as usize
    {
        return Err(NoReplacement::MinValues {
            want,
            got: kept.len(),
        });
    }
    kept.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.instance_type.cmp(&b.1.instance_type))
    });
    Ok(Chosen {
        options: kept.into_iter().map(|(_, o)| o).collect(),
        capacity_types: (allows_spot && allows_on_demand).then(|| vec![SPOT.to_string()]),
    })
}

/// The hourly saving of a move: the candidates' price minus the replacement's cheapest
/// offering (0 for a delete).
pub fn savings(replaced_price: f64, replacement_price: Option<f64>) -> f64 {
    replaced_price - replacement_price.unwrap_or(0.0)
}

/// The Balanced policy's score of a move (Karpenter v1.14): (savings / pool cost) ÷
/// (disruption / pool disruption). 0 when nothing is saved; a move that saves while the pool
/// costs or disrupts nothing scores infinitely.
pub fn balanced_score(savings: f64, pool_cost: f64, disruption: f64, pool_disruption: f64) -> f64 {
    if savings <= 0.0 {
        return 0.0;
    }
    if pool_cost <= 0.0 || disruption <= 0.0 || pool_disruption <= 0.0 {
        return f64::INFINITY;
    }
    (savings / pool_cost) / (disruption / pool_disruption)
}

/// Whether the Balanced policy approves a move of `score`.
pub fn balanced_approves(score: f64) -> bool {
    score >= BALANCED_THRESHOLD
}

/// Multi-node consolidation's search: the largest prefix length in `2..=n` for which
/// `attempt(len)` gives a move, found by binary search (Karpenter assumes a prefix that
/// works makes every shorter one work). Returns the length and the move.
pub fn largest_prefix<T>(
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

    fn offer(ct: &str, price: f64) -> Offer {
        Offer {
            capacity_type: ct.into(),
            price,
        }
    }

    fn option(name: &str, offers: Vec<Offer>) -> Choice {
        Choice {
            instance_type: name.into(),
            offers,
        }
    }

    fn on_demand(types: &[(&str, f64)]) -> Replaced {
        Replaced {
            types: types.iter().map(|(t, p)| ((*t).to_string(), *p)).collect(),
            all_spot: false,
        }
    }

    #[test]
    fn worst_launch_price_prefers_reserved_then_spot_then_on_demand() {
        assert_eq!(worst_launch_price(&[]), None);
        let offers = [offer(ON_DEMAND, 1.0), offer(SPOT, 0.3), offer(SPOT, 0.4)];
        assert_eq!(worst_launch_price(&offers), Some(0.4));
        assert_eq!(worst_launch_price(&offers[..1]), Some(1.0));
        let with_reserved = [offer(RESERVED, 0.9), offer(SPOT, 0.1)];
        assert_eq!(worst_launch_price(&with_reserved), Some(0.9));
    }

    #[test]
    fn a_replacement_must_be_strictly_cheaper_and_never_like_for_like() {
        let options = [
            option("small", vec![offer(ON_DEMAND, 0.1)]),
            option("medium", vec![offer(ON_DEMAND, 0.2)]),
            option("large", vec![offer(ON_DEMAND, 0.4)]),
        ];
        let large = on_demand(&[("large", 0.4)]);
        let c = choose(&large, &options, false, true, None).expect("cheaper");
        let names: Vec<&str> = c.options.iter().map(|o| o.instance_type.as_str()).collect();
        assert_eq!(names, ["small", "medium"], "large itself is not cheaper");
        assert_eq!(c.capacity_types, None);
        let small = on_demand(&[("small", 0.1)]);
        assert_eq!(
            choose(&small, &options, false, true, None),
            Err(NoReplacement::NoCheaperOption)
        );
        // minValues must still hold after the price filter.
        assert_eq!(
            choose(&large, &options, false, true, Some(3)),
            Err(NoReplacement::MinValues { want: 3, got: 2 })
        );
    }

    #[test]
    fn multi_node_options_of_a_candidates_type_must_be_cheaper_than_it() {
        // Two nodes (0.2 + 0.4) could be replaced by a large (0.4 < 0.6), but a large is
        // one of them: only options cheaper than 0.4 remain.
        let options = [
            option("medium", vec![offer(ON_DEMAND, 0.2)]),
            option("large", vec![offer(ON_DEMAND, 0.4)]),
        ];
        let two = on_demand(&[("medium", 0.2), ("large", 0.4)]);
        let c = choose(&two, &options, false, true, None).expect("medium");
        assert_eq!(c.options.len(), 1);
        assert_eq!(c.options[0].instance_type, "medium");
    }

    #[test]
    fn spot_rules() {
        let options = [option(
            "small",
            vec![offer(SPOT, 0.03), offer(ON_DEMAND, 0.1)],
        )];
        // On-demand candidate, replacement may be spot or on-demand: priced as spot (worst
        // spot offering) and restricted to spot.
        let c = choose(&on_demand(&[("large", 0.05)]), &options, true, true, None)
            .expect("spot is cheaper");
        assert_eq!(c.capacity_types, Some(vec![SPOT.to_string()]));
        // Spot to spot is not done.
        let spot = Replaced {
            types: vec![("large".into(), 0.2)],
            all_spot: true,
        };
        assert_eq!(
            choose(&spot, &options, true, true, None),
            Err(NoReplacement::SpotToSpot)
        );
        // A spot candidate may become on-demand if that is cheaper.
        let od_only = [option("small", vec![offer(ON_DEMAND, 0.1)])];
        assert!(choose(&spot, &od_only, false, true, None).is_ok());
    }

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
