//! Consolidation's replace, over plain values: which new NodeClaims may stand in for nodes
//! being consolidated, and at what price.
//!
//! Karpenter's rules for one replacement ([`choose`]): keep the options whose worst launch price
//! is strictly below the candidates' summed price, an option of a candidate's own type must be
//! cheaper than that candidate, `minValues` must still hold, spot-to-spot is not done, and a
//! replacement allowed both spot and on-demand is restricted to spot.
//!
//! Split consolidation ([`choose_split`]) applies the same margin to several replacements at
//! once: the replacements' worst launch prices, summed, stay strictly below the candidates'
//! price. Each replacement keeps the options within its cheapest option plus an equal share of
//! the slack (the candidates' price minus every replacement's cheapest worst price), so whatever
//! offering each one launches, the plan costs less than the nodes it replaces.
//!
//! [`consolidate`] runs the provisioner's price-aware plan ([`crate::solve`]) over the pods of
//! the nodes to consolidate and applies those rules to its new NodeClaims (none: a delete; one
//! or more: a replace); when the price-aware plan is refused and differs from Karpenter's
//! first-fit plan, first-fit's is tried, so a move Karpenter's packing finds is never lost.

use crate::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE};
use crate::{NewNodeClaim, NodePool, Operator, Output, Requirement};

/// Capacity types, in the order Karpenter prices a launch: reserved first, then spot, then
/// on-demand.
pub const RESERVED: &str = "reserved";
pub const SPOT: &str = "spot";
pub const ON_DEMAND: &str = "on-demand";

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

/// The candidates the replacements would stand in for.
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoReplacement {
    /// Spot-to-spot consolidation (a feature gate, off by default) is not done.
    #[error("spot-to-spot consolidation is disabled")]
    SpotToSpot,
    /// No option (set of options, for a split) is strictly cheaper than the candidates.
    #[error("no cheaper option")]
    NoCheaperOption,
    /// Fewer cheaper options than the requirement's `minValues`.
    #[error("only {got} cheaper instance types, minValues is {want}")]
    MinValues { want: u32, got: usize },
}

/// What one replacement may launch, before the price rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub options: Vec<Choice>,
    /// Its requirements allow spot (on-demand) and some option offers it.
    pub allows_spot: bool,
    pub allows_on_demand: bool,
    /// The `minValues` of its instance-type requirement.
    pub min_values: Option<u32>,
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
/// `options` (which the replacement's requirements allow, `allows_spot`/`allows_on_demand`);
/// see the module documentation.
pub fn choose(
    replaced: &Replaced,
    options: &[Choice],
    allows_spot: bool,
    allows_on_demand: bool,
    min_values: Option<u32>,
) -> Result<Chosen, NoReplacement> {
    let one = Options {
        options: options.to_vec(),
        allows_spot,
        allows_on_demand,
        min_values,
    };
    let mut chosen = choose_split(replaced, std::slice::from_ref(&one))?;
    chosen.pop().ok_or(NoReplacement::NoCheaperOption)
}

/// The price rules for replacing `replaced` by one node per entry of `claims`: the margin of
/// [`choose`] over the summed worst launch prices, shared equally (see the module
/// documentation); every other rule per replacement. One entry gives exactly [`choose`]'s
/// answer.
pub fn choose_split(replaced: &Replaced, claims: &[Options]) -> Result<Vec<Chosen>, NoReplacement> {
    if replaced.all_spot && claims.iter().any(|c| c.allows_spot) {
        return Err(NoReplacement::SpotToSpot);
    }
    let total = replaced.price();
    let priced: Vec<Vec<(f64, &Choice)>> = claims
        .iter()
        .map(|c| {
            c.options
                .iter()
                .filter_map(|o| Some((worst_launch_price(&o.offers)?, o)))
                .collect()
        })
        .collect();
    let mins: Option<Vec<f64>> = priced
        .iter()
        .map(|p| p.iter().map(|(w, _)| *w).reduce(f64::min))
        .collect();
    let mins = mins.ok_or(NoReplacement::NoCheaperOption)?;
    let slack = total - mins.iter().sum::<f64>();
    if claims.is_empty() || slack <= 0.0 {
        return Err(NoReplacement::NoCheaperOption);
    }
    let share = slack / claims.len() as f64;
    claims
        .iter()
        .zip(priced)
        .zip(&mins)
        .map(|((c, priced), min)| {
            let limit = if claims.len() == 1 {
                total
            } else {
                min + share
            };
            within(replaced, c, priced, limit)
        })
        .collect()
}

/// One replacement's options whose worst launch price is below `limit` (and below the price
/// of a candidate of the same type), `minValues` checked, cheapest first.
fn within(
    replaced: &Replaced,
    claim: &Options,
    priced: Vec<(f64, &Choice)>,
    limit: f64,
) -> Result<Chosen, NoReplacement> {
    let mut kept: Vec<(f64, &Choice)> = priced.into_iter().filter(|(w, _)| *w < limit).collect();
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
    if let Some(want) = claim.min_values
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
        options: kept.into_iter().map(|(_, o)| o.clone()).collect(),
        capacity_types: (claim.allows_spot && claim.allows_on_demand)
            .then(|| vec![SPOT.to_string()]),
    })
}

/// The values a claim's requirement on `key` allows (`None`: unconstrained).
pub fn allowed<'a>(claim: &'a NewNodeClaim, key: &str) -> Option<&'a [String]> {
    claim
        .requirements
        .iter()
        .find(|r| r.key == key && r.operator == Operator::In)
        .map(|r| r.values.as_slice())
}

/// The pool's available offerings of the claim's instance types, within the zones and
/// capacity types the claim allows.
pub fn choices(pool: &NodePool, claim: &NewNodeClaim) -> Vec<Choice> {
    let zones = allowed(claim, LABEL_ZONE);
    let capacity_types = allowed(claim, LABEL_CAPACITY_TYPE);
    claim
        .instance_types()
        .iter()
        .filter_map(|t| pool.instance_types.iter().find(|it| &it.name == t))
        .map(|it| Choice {
            instance_type: it.name.clone(),
            offers: it
                .offerings
                .iter()
                .filter(|o| {
                    o.available && ok(zones, &o.zone) && ok(capacity_types, &o.capacity_type)
                })
                .map(|o| Offer {
                    capacity_type: o.capacity_type.clone(),
                    price: o.price,
                })
                .collect(),
        })
        .collect()
}

fn ok(set: Option<&[String]>, v: &str) -> bool {
    set.is_none_or(|s| s.iter().any(|x| x == v))
}

/// A claim's [`Options`] from `options` (its [`choices`], possibly adjusted).
pub fn options_of(claim: &NewNodeClaim, options: Vec<Choice>) -> Options {
    let capacity_types = allowed(claim, LABEL_CAPACITY_TYPE);
    let offered = |ct: &str| {
        ok(capacity_types, ct)
            && options
                .iter()
                .any(|o| o.offers.iter().any(|x| x.capacity_type == ct))
    };
    Options {
        allows_spot: offered(SPOT),
        allows_on_demand: offered(ON_DEMAND),
        min_values: claim
            .requirements
            .iter()
            .find(|r| r.key == LABEL_INSTANCE_TYPE)
            .and_then(|r| r.min_values),
        options,
    }
}

/// The claim cut to the chosen instance types (and capacity types, when restricted).
pub fn narrowed(claim: &NewNodeClaim, chosen: &Chosen) -> NewNodeClaim {
    let mut claim = claim.clone();
    let names: Vec<String> = chosen
        .options
        .iter()
        .map(|o| o.instance_type.clone())
        .collect();
    for r in &mut claim.requirements {
        if r.key == LABEL_INSTANCE_TYPE {
            r.values = names.clone();
        }
    }
    if let Some(cts) = &chosen.capacity_types {
        match claim
            .requirements
            .iter_mut()
            .find(|r| r.key == LABEL_CAPACITY_TYPE)
        {
            Some(r) => {
                r.operator = Operator::In;
                r.values = cts.clone();
            }
            None => claim.requirements.push(Requirement {
                key: LABEL_CAPACITY_TYPE.into(),
                operator: Operator::In,
                values: cts.clone(),
                min_values: None,
            }),
        }
    }
    claim
}

/// The cheapest chosen instance type and its price, over the capacity types kept.
pub fn cheapest(chosen: &Chosen) -> Result<(String, f64), NoReplacement> {
    let keep_ct = |o: &Offer| {
        chosen
            .capacity_types
            .as_ref()
            .is_none_or(|c| c.contains(&o.capacity_type))
    };
    chosen
        .options
        .iter()
        .filter_map(|o| {
            let offers: Vec<Offer> = o.offers.iter().filter(|x| keep_ct(x)).cloned().collect();
            Some((o.instance_type.clone(), cheapest_price(&offers)?))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .ok_or(NoReplacement::NoCheaperOption)
}

/// One replacement of a consolidation plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The solver's NodeClaim, its instance types cut to the cheap enough ones (and to spot
    /// when the rules say so).
    pub claim: NewNodeClaim,
    /// The cheapest option and its price.
    pub instance_type: String,
    pub price: f64,
    /// The most the claim can cost at launch (its options' worst launch prices).
    pub worst: f64,
}

/// What a consolidation does with its candidates.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Their pods fit on the other nodes.
    Delete,
    /// Their pods fit on the other nodes plus these new ones (one: a replace; more: a split).
    Replace(Vec<Planned>),
}

/// A consolidation plan and the scheduling output it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Consolidation {
    pub plan: Plan,
    pub output: Output,
}

impl Consolidation {
    /// The replacements' cheapest prices, summed (0 for a delete).
    pub fn price(&self) -> f64 {
        match &self.plan {
            Plan::Delete => 0.0,
            Plan::Replace(rs) => rs.iter().map(|r| r.price).sum(),
        }
    }
}

/// Why [`consolidate`] found no plan: the placement was refused (`accept`'s error), or no
/// set of replacements is cheap enough.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused<E> {
    Placement(E),
    Price(NoReplacement),
}

/// The consolidation of nodes whose pods are `input`'s (the cluster without those nodes),
/// priced against `replaced`: see the module documentation. `accept` judges a plan's placement
/// (e.g. every pod of the candidates placed); `adjust` may rewrite a claim's options before the
/// price rules (e.g. a resizable template's size). Deterministic.
pub fn consolidate<E>(
    input: &crate::Input,
    replaced: &Replaced,
    accept: impl Fn(&Output) -> Result<(), E>,
    adjust: impl Fn(&NewNodeClaim, Vec<Choice>) -> Vec<Choice>,
) -> Result<Consolidation, Refused<E>> {
    consolidate_with_devices(input, &crate::dra::Dra::default(), replaced, accept, adjust)
}

/// [`consolidate`] with the pods' ResourceClaims (`dra`): a pod with claims is placed only
/// where its claims can be allocated.
pub fn consolidate_with_devices<E>(
    input: &crate::Input,
    dra: &crate::dra::Dra,
    replaced: &Replaced,
    accept: impl Fn(&Output) -> Result<(), E>,
    adjust: impl Fn(&NewNodeClaim, Vec<Choice>) -> Vec<Choice>,
) -> Result<Consolidation, Refused<E>> {
    let evaluate = |output: Output| -> Result<Consolidation, Refused<E>> {
        accept(&output).map_err(Refused::Placement)?;
        let plan = plan(input, &output, replaced, &adjust).map_err(Refused::Price)?;
        Ok(Consolidation { plan, output })
    };
    let out = crate::solve_with_devices(input, dra);
    let price_aware = out.first_fit_price.is_some();
    match evaluate(out) {
        Err(_) if price_aware => evaluate(crate::solver::solve_first_fit_with_devices(input, dra)),
        done => done,
    }
}

/// The price rules applied to `output`'s new NodeClaims.
fn plan(
    input: &crate::Input,
    output: &Output,
    replaced: &Replaced,
    adjust: &dyn Fn(&NewNodeClaim, Vec<Choice>) -> Vec<Choice>,
) -> Result<Plan, NoReplacement> {
    if output.new_node_claims.is_empty() {
        return Ok(Plan::Delete);
    }
    let options: Vec<Options> = output
        .new_node_claims
        .iter()
        .map(|c| {
            let pool = input.node_pools.iter().find(|p| p.name == c.node_pool);
            let choices = pool.map(|p| choices(p, c)).unwrap_or_default();
            options_of(c, adjust(c, choices))
        })
        .collect();
    let chosen = choose_split(replaced, &options)?;
    output
        .new_node_claims
        .iter()
        .zip(&chosen)
        .map(|(c, ch)| {
            let (instance_type, price) = cheapest(ch)?;
            let worst = ch
                .options
                .iter()
                .filter_map(|o| worst_launch_price(&o.offers))
                .fold(0.0, f64::max);
            Ok(Planned {
                claim: narrowed(c, ch),
                instance_type,
                price,
                worst,
            })
        })
        .collect::<Result<_, _>>()
        .map(Plan::Replace)
}

#[cfg(test)]
mod tests;
