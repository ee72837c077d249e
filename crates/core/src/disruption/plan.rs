//! The consolidation simulation: would the pods of these candidates fit on the rest of the
//! cluster (a delete), or on the rest plus new nodes that together cost strictly less than
//! the candidates (a replace: one node as in Karpenter, or several cheaper ones, a split)?
//! The provisioner's own snapshot and price-aware solver, with the candidates taken out and
//! their pods pending; the price rules are [`scheduling::replace`]'s. Nodes inside their
//! `consolidateAfter` window take none of the moved pods, as in Karpenter.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use api::NodePool;
use k8s_openapi::jiff::Timestamp;
use scheduling::replace::{self, Choice, NoReplacement, Offer, Planned, Refused, Replaced};

use super::View;
use super::candidates::{Candidate, consolidatable_at, consolidate_after};
use super::pricing;
use super::simulate::NoMove;
use crate::objects::{claim_node_name, name, nodepool_of};
use crate::provisioning::snapshot;

/// A candidate with what consolidation weighs: its price and the cost of disrupting it.
#[derive(Debug)]
pub(crate) struct Priced<'a> {
    pub candidate: &'a Candidate<'a>,
    /// Its NodePool.
    pub nodepool: &'a str,
    pub instance_type: String,
    pub capacity_type: String,
    /// Hourly price of its offering (0 if unknown).
    pub price: f64,
    /// Its `RescheduleDisruptionCost`.
    pub cost: f64,
}

/// What a move does with its candidates.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Their pods fit on the other nodes.
    Delete,
    /// Their pods fit on the other nodes plus these new nodes (one, or several: a split).
    Replace(Vec<Replacement>),
}

/// A new node a replace launches.
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    pub nodepool: Arc<NodePool>,
    /// The solver's NodeClaim, its instance types cut to the cheaper ones (and to spot when
    /// the rules say so).
    pub claim: scheduling::NewNodeClaim,
    /// The cheapest option and its price.
    pub instance_type: String,
    pub price: f64,
    /// The catalog the pool's instance types came from (the NodeClaim's overlay marks).
    pub catalog: Option<Arc<cloudprovider::InstanceTypes>>,
}

/// A consolidation the simulation found.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    /// The candidate NodeClaims, in the order they were considered.
    pub candidates: Vec<String>,
    pub action: Action,
    /// Hourly: the candidates' price minus the replacement's.
    pub savings: f64,
    /// Σ of the candidates' disruption cost.
    pub disruption: f64,
    /// What Karpenter's first-fit packing of the same pods would launch per hour, when the
    /// price-aware plan beat it ([`scheduling::Output::first_fit_price`]).
    pub first_fit_price: Option<f64>,
}

impl Move {
    /// `delete` or `replace`.
    pub fn kind(&self) -> &'static str {
        match self.action {
            Action::Delete => "delete",
            Action::Replace(_) => "replace",
        }
    }

    /// The replacements' cheapest instance types: `large`, or for a split `small ×3 +
    /// medium` (in the order planned).
    pub(crate) fn replacement_type(&self) -> Option<String> {
        let Action::Replace(rs) = &self.action else {
            return None;
        };
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for r in rs {
            match counts.iter_mut().find(|(t, _)| *t == r.instance_type) {
                Some((_, n)) => *n += 1,
                None => counts.push((&r.instance_type, 1)),
            }
        }
        let parts: Vec<String> = counts
            .iter()
            .map(|(t, n)| match n {
                1 => (*t).to_string(),
                n => format!("{t} ×{n}"),
            })
            .collect();
        Some(parts.join(" + "))
    }
}

/// The Nodes (and NodeClaims) inside their NodePool's `consolidateAfter` window at `now`:
/// they take none of the pods a consolidation moves (Karpenter sends only pending pods
/// there), so a move never lands on a node that just got or lost pods. `Never`, `0s` and
/// uninitialized claims are not in a window.
fn in_consolidate_after_window<'a>(view: &'a View, now: Timestamp) -> HashSet<&'a str> {
    let after: HashMap<&str, Option<Duration>> = view
        .nodepools
        .iter()
        .map(|p| (name(p.as_ref()), consolidate_after(&p.spec)))
        .collect();
    let mut out = HashSet::new();
    for c in &view.nodeclaims {
        let Some(&after) = nodepool_of(c).and_then(|p| after.get(p)) else {
            continue;
        };
        if consolidatable_at(c, after).is_some_and(|at| at > now) {
            out.insert(name(c.as_ref()));
            out.extend(claim_node_name(c));
        }
    }
    out
}

/// Simulates removing `candidates` (one or more Nodes of `view`) at `now`.
pub(crate) fn simulate(
    view: &View,
    candidates: &[&Priced],
    now: Timestamp,
) -> Result<Move, NoMove> {
    let w =
        super::simulate::without_candidates(view.cluster, candidates.iter().map(|c| c.candidate));
    let pools = w.rest.ready_nodepools();
    let mut snap = w.snapshot(
        &pools,
        view.catalog,
        crate::model::convert::Availability::Ignored,
    );
    let settling = in_consolidate_after_window(view, now);
    for n in &mut snap.input.nodes {
        n.refuses_moving = settling.contains(n.name.as_str());
    }
    let replaced = Replaced {
        types: candidates
            .iter()
            .map(|c| (c.instance_type.clone(), c.price))
            .collect(),
        all_spot: candidates.iter().all(|c| c.capacity_type == replace::SPOT),
    };
    // A pod with claims moves only where its devices can be allocated (as drift plans it).
    let dra = w.devices(&snap);
    // The price-aware plan (one node or several cheaper ones), else Karpenter's first-fit.
    let found = replace::consolidate_with_devices(
        &snap.input,
        &dra,
        &replaced,
        |out| w.own_placed(&snap, out),
        |claim, options| match snap.catalogs.get(&claim.node_pool) {
            Some(cat) => shrunk(cat, claim, options),
            None => options,
        },
    )
    .map_err(|e| match e {
        Refused::Placement(why) => why,
        Refused::Price(why) => NoMove::NoReplacement(why),
    })?;
    let price = replaced.price();
    let disruption: f64 = candidates.iter().map(|c| c.cost).sum();
    let names = candidates
        .iter()
        .map(|c| c.candidate.name.to_string())
        .collect();
    let action = match found.plan.clone() {
        replace::Plan::Delete => Action::Delete,
        replace::Plan::Replace(planned) => Action::Replace(
            planned
                .into_iter()
                .map(|p| replacement(&snap, p))
                .collect::<Result<_, _>>()
                .map_err(NoMove::NoReplacement)?,
        ),
    };
    let new_price = match &action {
        Action::Delete => None,
        Action::Replace(rs) => Some(rs.iter().map(|r| r.price).sum()),
    };
    Ok(Move {
        candidates: names,
        savings: pricing::savings(price, new_price),
        action,
        disruption,
        first_fit_price: found.output.first_fit_price,
    })
}

/// For a claim planned on a size of a resizable template, the options as the provisioner
/// would launch them: the planned size replaced by the smallest size that holds the claim
/// (priced as that size, with the planned size's available offerings), the template's other
/// sizes dropped. So a node is shrunk when that saves at least one step.
fn shrunk(
    catalog: &cloudprovider::InstanceTypes,
    claim: &scheduling::NewNodeClaim,
    options: Vec<Choice>,
) -> Vec<Choice> {
    let Some((_, names)) = crate::provisioning::nodeclaim::shrink(catalog, claim) else {
        return options;
    };
    let (Some((group, _)), Some(sized)) = (
        catalog.resizable_of(&claim.cheapest.instance_type),
        names.first().and_then(|n| catalog.lookup(n)),
    ) else {
        return options;
    };
    let price = |ct: &str| {
        sized
            .offerings
            .iter()
            .filter(|o| o.capacity_type == ct)
            .map(|o| o.price)
            .reduce(f64::max)
    };
    options
        .into_iter()
        .filter_map(|c| {
            if cloudprovider::resize::parse_sized_name(&group.base, &c.instance_type).is_none() {
                return Some(c);
            }
            (c.instance_type == claim.cheapest.instance_type).then(|| Choice {
                instance_type: sized.name.clone(),
                offers: c
                    .offers
                    .iter()
                    .filter_map(|o| {
                        Some(Offer {
                            capacity_type: o.capacity_type.clone(),
                            price: price(&o.capacity_type)?,
                        })
                    })
                    .collect(),
            })
        })
        .collect()
}

/// A planned replacement with its NodePool and catalog.
fn replacement(snap: &snapshot::Snapshot, p: Planned) -> Result<Replacement, NoReplacement> {
    let nodepool = snap
        .pools
        .get(&p.claim.node_pool)
        .cloned()
        .ok_or(NoReplacement::NoCheaperOption)?;
    Ok(Replacement {
        catalog: snap.catalogs.get(&p.claim.node_pool).cloned(),
        nodepool,
        claim: p.claim,
        instance_type: p.instance_type,
        price: p.price,
    })
}
