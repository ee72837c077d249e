//! The consolidation simulation: would the pods of these candidates fit on the rest of the
//! cluster (a delete), or on the rest plus exactly one new node strictly cheaper than the
//! candidates (a replace)? The provisioner's own snapshot and solver, with the candidates
//! taken out and their pods pending. Nodes inside their `consolidateAfter` window take none
//! of the moved pods, as in Karpenter.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use api::NodePool;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use scheduling::{LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE, Operator};

use super::View;
use super::candidates::{Candidate, consolidatable_at, consolidate_after, reschedulable};
use super::pricing::{self, Choice, Chosen, NoReplacement, Offer, Replaced};
use crate::objects::{claim_node_name, name, nodepool_of, pod_node_name};
use crate::provisioning::snapshot;
use crate::state::{Cluster, Objects};

/// A candidate with what consolidation weighs: its price and the cost of disrupting it.
#[derive(Debug)]
pub struct Priced<'a> {
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
    /// Their pods fit on the other nodes plus this one new node.
    Replace(Box<Replacement>),
}

/// The one new node a replace launches.
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
}

impl Move {
    /// `delete` or `replace`.
    pub fn kind(&self) -> &'static str {
        match self.action {
            Action::Delete => "delete",
            Action::Replace(_) => "replace",
        }
    }

    /// The replacement's cheapest instance type.
    pub fn replacement_type(&self) -> Option<&str> {
        match &self.action {
            Action::Delete => None,
            Action::Replace(r) => Some(&r.instance_type),
        }
    }
}

/// Why the simulation found no move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoMove {
    /// A candidate pod fits nowhere (not even on a new node).
    PodsDoNotFit(String),
    /// A candidate pod would land on a node that has not initialized.
    Uninitialized(String),
    /// The pods need more than one new node.
    MoreThanOneNode(usize),
    NoReplacement(NoReplacement),
}

impl fmt::Display for NoMove {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoMove::PodsDoNotFit(why) => write!(f, "pods do not fit elsewhere ({why})"),
            NoMove::Uninitialized(node) => {
                write!(f, "pods would land on uninitialized node {node}")
            }
            NoMove::MoreThanOneNode(n) => write!(f, "pods need {n} new nodes"),
            NoMove::NoReplacement(r) => r.fmt(f),
        }
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

/// The cluster without `candidates` (their pods, and those of Nodes leaving, pending: the
/// returned pods to move), for a simulation.
fn without_candidates(view: &View, candidates: &[&Priced]) -> (Cluster, Vec<Arc<Pod>>) {
    let gone_claims: HashSet<&str> = candidates.iter().map(|p| p.candidate.name).collect();
    let gone_nodes: HashSet<&str> = candidates
        .iter()
        .filter_map(|p| p.candidate.node.map(name))
        .collect();
    // Pods leaving: the candidates', and those of Nodes leaving (they need room too).
    let (moving, staying): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
        view.pods.iter().cloned().partition(|p| {
            pod_node_name(p).is_some_and(|n| gone_nodes.contains(n) || view.leaving(n))
        });
    let moving: Vec<Arc<Pod>> = moving.into_iter().filter(|p| reschedulable(p)).collect();
    let objects = Objects {
        pods: staying,
        nodes: view
            .nodes
            .iter()
            .filter(|n| !gone_nodes.contains(name(n.as_ref())))
            .cloned()
            .collect(),
        nodeclaims: view
            .nodeclaims
            .iter()
            .filter(|c| !gone_claims.contains(name(c.as_ref())))
            .cloned()
            .collect(),
        ..view.objects().clone()
    };
    (Cluster::new(objects), moving)
}

/// The candidates' own pods (by uid) all placed, none on a node that has not initialized.
fn own_pods_placed(
    snap: &snapshot::Snapshot,
    out: &scheduling::Output,
    own: &HashSet<&str>,
) -> Result<(), NoMove> {
    if let Some(u) = out
        .unschedulable
        .iter()
        .find(|u| own.contains(u.pod.uid.as_str()))
    {
        return Err(NoMove::PodsDoNotFit(format!(
            "{}/{}: {}",
            u.pod.namespace, u.pod.name, u.reason
        )));
    }
    let in_flight = snap.in_flight();
    if let Some(p) = out
        .existing
        .iter()
        .find(|p| own.contains(p.pod.uid.as_str()) && in_flight.contains(p.node.as_str()))
    {
        return Err(NoMove::Uninitialized(p.node.clone()));
    }
    Ok(())
}

/// Simulates removing `candidates` (one or more Nodes of `view`) at `now`.
pub fn simulate(view: &View, candidates: &[&Priced], now: Timestamp) -> Result<Move, NoMove> {
    let (rest, moving) = without_candidates(view, candidates);
    let own: HashSet<&str> = candidates
        .iter()
        .flat_map(|c| c.candidate.pods.iter())
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let pools = rest.ready_nodepools();
    let mut snap = snapshot::build(
        &rest,
        &pools,
        &moving,
        view.catalog,
        crate::model::convert::Availability::Ignored,
    );
    let settling = in_consolidate_after_window(view, now);
    for n in &mut snap.input.nodes {
        n.refuses_moving = settling.contains(n.name.as_str());
    }
    for p in &mut snap.input.pods {
        p.moving = true;
    }
    // First-fit (Karpenter's packing): a replace is one new node, and no single NodeClaim is
    // cheaper than first-fit's; the price-aware plan may split the pods over several cheaper
    // nodes, which a replace cannot take yet (issue 39, split consolidation).
    let out = scheduling::solve_first_fit(&snap.input);
    own_pods_placed(&snap, &out, &own)?;
    let price: f64 = candidates.iter().map(|c| c.price).sum();
    let disruption: f64 = candidates.iter().map(|c| c.cost).sum();
    let names = candidates
        .iter()
        .map(|c| c.candidate.name.to_string())
        .collect();
    match out.new_node_claims.as_slice() {
        [] => Ok(Move {
            candidates: names,
            action: Action::Delete,
            savings: price,
            disruption,
        }),
        [claim] => {
            let replacement =
                replacement(&snap, claim, candidates).map_err(NoMove::NoReplacement)?;
            Ok(Move {
                candidates: names,
                savings: pricing::savings(price, Some(replacement.price)),
                action: Action::Replace(Box::new(replacement)),
                disruption,
            })
        }
        many => Err(NoMove::MoreThanOneNode(many.len())),
    }
}

/// The values a claim's requirement on `key` allows (`None`: unconstrained).
fn allowed<'a>(claim: &'a scheduling::NewNodeClaim, key: &str) -> Option<&'a [String]> {
    claim
        .requirements
        .iter()
        .find(|r| r.key == key && r.operator == Operator::In)
        .map(|r| r.values.as_slice())
}

/// The pool's offerings of the claim's instance types, within the zones and capacity types
/// the claim allows.
fn choices(
    pool: &scheduling::NodePool,
    claim: &scheduling::NewNodeClaim,
    zones: Option<&[String]>,
    capacity_types: Option<&[String]>,
) -> Vec<Choice> {
    let ok = |set: Option<&[String]>, v: &str| set.is_none_or(|s| s.iter().any(|x| x == v));
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

/// The claim cut to the chosen instance types (and capacity types, when restricted).
fn narrowed(claim: &scheduling::NewNodeClaim, chosen: &Chosen) -> scheduling::NewNodeClaim {
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
            None => claim.requirements.push(scheduling::Requirement {
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
fn cheapest(chosen: &Chosen) -> Result<(String, f64), NoReplacement> {
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
            Some((o.instance_type.clone(), pricing::cheapest_price(&offers)?))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .ok_or(NoReplacement::NoCheaperOption)
}

/// Applies the price rules to the solver's one new claim.
fn replacement(
    snap: &snapshot::Snapshot,
    claim: &scheduling::NewNodeClaim,
    candidates: &[&Priced],
) -> Result<Replacement, NoReplacement> {
    let pool = snap
        .input
        .node_pools
        .iter()
        .find(|p| p.name == claim.node_pool)
        .ok_or(NoReplacement::NoCheaperOption)?;
    let nodepool = snap
        .pools
        .get(&claim.node_pool)
        .cloned()
        .ok_or(NoReplacement::NoCheaperOption)?;
    let zones = allowed(claim, LABEL_ZONE);
    let capacity_types = allowed(claim, LABEL_CAPACITY_TYPE);
    let ok = |set: Option<&[String]>, v: &str| set.is_none_or(|s| s.iter().any(|x| x == v));
    let catalog = snap.catalogs.get(&claim.node_pool).cloned();
    let mut options = choices(pool, claim, zones, capacity_types);
    if let Some(cat) = catalog.as_deref() {
        options = shrunk(cat, claim, options);
    }
    let offered = |ct: &str| {
        ok(capacity_types, ct)
            && options
                .iter()
                .any(|o| o.offers.iter().any(|x| x.capacity_type == ct))
    };
    let replaced = Replaced {
        types: candidates
            .iter()
            .map(|c| (c.instance_type.clone(), c.price))
            .collect(),
        all_spot: candidates.iter().all(|c| c.capacity_type == pricing::SPOT),
    };
    let min_values = claim
        .requirements
        .iter()
        .find(|r| r.key == LABEL_INSTANCE_TYPE)
        .and_then(|r| r.min_values);
    let chosen = pricing::choose(
        &replaced,
        &options,
        offered(pricing::SPOT),
        offered(pricing::ON_DEMAND),
        min_values,
    )?;
    let claim = narrowed(claim, &chosen);
    let (instance_type, price) = cheapest(&chosen)?;
    Ok(Replacement {
        catalog,
        nodepool,
        claim,
        instance_type,
        price,
    })
}
