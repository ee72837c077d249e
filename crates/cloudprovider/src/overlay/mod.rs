//! NodeOverlays applied to any provider's instance types, with Karpenter v1.15.0's semantics
//! (`pkg/controllers/nodeoverlay`, `pkg/cloudprovider/overlay`). This module is pure (no
//! I/O, never panics on input); [`store`] holds the NodeOverlays and the evaluation, and
//! [`Overlaid`] is the decorator that applies them to what a provider's `instance_types`
//! answers.
//!
//! - **Matching.** An overlay's `requirements` are evaluated per offering against the labels a
//!   node launched from it would carry ([`InstanceType::node_labels`]: the instance type's
//!   labels, `node.kubernetes.io/instance-type`, the offering's `topology.kubernetes.io/zone`,
//!   `karpenter.sh/capacity-type` and the provider's own offering labels). A key the offering
//!   does not carry matches only `NotIn` and `DoesNotExist` (Karpenter: undefined labels are
//!   denied unless the operator excludes). NodePool-scoped keys (`karpenter.sh/nodepool`, a
//!   NodePool's template labels) are not known at the instance types, so an overlay requiring
//!   them matches nothing here.
//! - **Order.** Higher `weight` first (unset: 0); equal weights by name, the later name first
//!   ([`order`]).
//! - **Merge.** Per offering, the first overlay in that order with a price change sets the
//!   price (`price`: absolute; `priceAdjustment`: signed absolute or percent of the
//!   provider's price, never below 0). Per instance type, capacity is merged resource by
//!   resource, the first overlay in order naming a resource wins; an overlay's capacity
//!   applies to an instance type when it matches any of its offerings.
//! - **Conflict.** Walking the overlays in order, an overlay whose weight equals the lowest
//!   weight already recorded for a price on one of its offerings (or, for capacity, on a
//!   resource of the last capacity recorded for the instance type) conflicts, even with the
//!   same value; it is then applied nowhere (no partial application), and reported
//!   ([`Verdict::Conflict`], naming the overlay recorded there). The overlay it conflicts
//!   with keeps applying.
//! - **Invalid** overlays (runtime validation: an unparseable price or quantity, a standard
//!   resource in `capacity`, a malformed requirement) are applied nowhere.

use std::collections::{BTreeMap, BTreeSet};

use api::karpenter::Operator;

use crate::instance_types::InstanceTypes;
use crate::label_syntax::{validate_label_key, validate_label_value};
use crate::model::{InstanceType, Offering, PriceSource, sort_instance_types, sort_offerings};

pub mod store;
pub use store::{Overlaid, OverlayStore};

/// Resources an overlay may not set (Karpenter's `WellKnownResources`).
const STANDARD_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// A price change: `price` (absolute) or `priceAdjustment` (delta or percent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    Absolute(f64),
    Delta(f64),
    Percent(f64),
}

impl PriceChange {
    /// Parses Karpenter's forms: unsigned = absolute, signed = delta, signed with `%` =
    /// percent.
    pub fn parse(s: &str) -> Option<PriceChange> {
        let s = s.trim();
        let num = |t: &str| t.parse::<f64>().ok().filter(|v| v.is_finite());
        if let Some(p) = s.strip_suffix('%') {
            if !(p.starts_with('+') || p.starts_with('-')) {
                return None;
            }
            return num(p).map(PriceChange::Percent);
        }
        if s.starts_with('+') || s.starts_with('-') {
            return num(s).map(PriceChange::Delta);
        }
        num(s).filter(|v| *v >= 0.0).map(PriceChange::Absolute)
    }

    /// The new price of an offering priced `price` (adjustments never go below 0).
    pub fn apply(self, price: f64) -> f64 {
        let adjusted = match self {
            PriceChange::Absolute(v) => return v,
            PriceChange::Delta(d) => price + d,
            PriceChange::Percent(p) => price * (1.0 + p / 100.0),
        };
        adjusted.max(0.0)
    }
}

/// One requirement of an overlay.
#[derive(Debug, Clone, PartialEq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether a node whose label `key` is `value` (`None`: absent) satisfies it.
    fn matches(&self, value: Option<&str>) -> bool {
        let int = |s: &str| s.parse::<i64>().ok();
        let bound = || self.values.first().and_then(|v| int(v));
        let cmp = |f: fn(i64, i64) -> bool| match (value.and_then(int), bound()) {
            (Some(v), Some(b)) => f(v, b),
            _ => false,
        };
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt => cmp(|v, b| v > b),
            Operator::Lt => cmp(|v, b| v < b),
            Operator::Gte => cmp(|v, b| v >= b),
            Operator::Lte => cmp(|v, b| v <= b),
        }
    }
}

/// A NodeOverlay, parsed and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    pub name: String,
    pub weight: i32,
    pub requirements: Vec<Requirement>,
    pub price: Option<PriceChange>,
    /// Extended resources, in canonical units (see [`crate::model::Resources`]).
    pub capacity: BTreeMap<String, i64>,
}

impl Overlay {
    /// Whether `offering` of `it` is selected.
    pub fn matches(&self, it: &InstanceType, offering: &Offering) -> bool {
        self.requirements.iter().all(|r| {
            let v = offering
                .label(&r.key)
                .or_else(|| it.labels.get(&r.key).map(String::as_str))
                .or_else(|| (r.key == api::consts::labels::INSTANCE_TYPE).then_some(&*it.name));
            r.matches(v)
        })
    }

    /// Parses a NodeOverlay object (Karpenter's runtime validation): `Err` says why it
    /// cannot be applied.
    pub fn from_api(o: &api::NodeOverlay) -> Result<Overlay, String> {
        let name = o.metadata.name.clone().unwrap_or_default();
        let spec = &o.spec;
        let mut errors = Vec::new();
        let requirements = spec
            .requirements
            .iter()
            .map(|r| Requirement {
                key: r.key.clone(),
                operator: r.operator,
                values: r.values.clone(),
            })
            .collect::<Vec<_>>();
        for r in &requirements {
            if let Err(e) = validate_requirement(r) {
                errors.push(e);
            }
        }
        let price = match (&spec.price, &spec.price_adjustment) {
            (Some(_), Some(_)) => {
                errors.push("cannot set both 'price' and 'priceAdjustment'".into());
                None
            }
            (Some(p), None) | (None, Some(p)) => {
                let parsed = PriceChange::parse(p);
                let absolute = matches!(parsed, Some(PriceChange::Absolute(_)));
                if parsed.is_none() || (spec.price.is_some() != absolute) {
                    errors.push(format!("invalid price {p:?}"));
                }
                parsed
            }
            (None, None) => None,
        };
        let mut capacity = BTreeMap::new();
        for (k, q) in &spec.capacity {
            if STANDARD_RESOURCES.contains(&k.as_str()) {
                errors.push(format!("invalid capacity: {k} in resource, restricted"));
                continue;
            }
            match crate::quantity::parse_value(&q.0) {
                Ok(v) if v >= 0 => {
                    capacity.insert(k.clone(), v);
                }
                _ => errors.push(format!("invalid capacity: {k}: {:?}", q.0)),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        Ok(Overlay {
            name,
            weight: spec.weight.unwrap_or(0),
            requirements,
            price,
            capacity,
        })
    }
}

fn validate_requirement(r: &Requirement) -> Result<(), String> {
    validate_label_key(&r.key).map_err(|e| format!("key {}: {e}", r.key))?;
    for v in &r.values {
        validate_label_value(v).map_err(|e| format!("invalid value {v} for key {}: {e}", r.key))?;
    }
    let numeric = matches!(
        r.operator,
        Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
    );
    let ok = match r.operator {
        Operator::In | Operator::NotIn => !r.values.is_empty(),
        _ if numeric => r.values.len() == 1 && r.values[0].parse::<u64>().is_ok(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "key {} with operator {:?} has invalid values {:?}",
            r.key, r.operator, r.values
        ))
    }
}

/// Karpenter's `OrderByWeight`: higher weight first; equal weights, the later name first.
pub fn order<T>(items: &mut [T], key: impl Fn(&T) -> (i32, &str)) {
    items.sort_by(|a, b| {
        let (wa, na) = key(a);
        let (wb, nb) = key(b);
        wb.cmp(&wa).then_with(|| nb.cmp(na))
    });
}

/// What became of one overlay.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Applied wherever it matches.
    Applied,
    /// Applied nowhere: an overlay of equal weight (`with`) was recorded on the same field
    /// of an offering it selects (`what`).
    Conflict { with: String, what: String },
    /// Applied nowhere: it failed runtime validation.
    Invalid(String),
}

/// One overlay's outcome: its verdict and the number of offerings it selected (over every
/// NodeClass's instance types evaluated).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub matched: usize,
}

/// The overlays evaluated together: each one's outcome (by name), and those applied, in
/// order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    pub outcomes: BTreeMap<String, Outcome>,
    pub applied: Vec<Overlay>,
}

/// The lowest weight recorded on a field, and by which overlay.
#[derive(Debug, Clone)]
struct Recorded {
    weight: i32,
    by: String,
}

/// The capacity recorded on an instance type: the lowest weight and that overlay's resources.
#[derive(Debug, Clone)]
struct RecordedCapacity {
    at: Recorded,
    resources: BTreeSet<String>,
}

/// Per (NodeClass, instance type, offering) the price record; per (NodeClass, instance
/// type) the capacity record.
#[derive(Default)]
struct Store {
    prices: BTreeMap<(usize, String, usize), Recorded>,
    capacities: BTreeMap<(usize, String), RecordedCapacity>,
}

/// The offerings (by index) of each instance type of each NodeClass that `o` selects.
type Selected = Vec<(usize, String, Vec<usize>)>;

fn selected(o: &Overlay, bases: &[&[InstanceType]]) -> Selected {
    let mut out = Vec::new();
    for (ci, types) in bases.iter().enumerate() {
        for it in types.iter() {
            let hits: Vec<usize> = it
                .offerings
                .iter()
                .enumerate()
                .filter(|(_, off)| o.matches(it, off))
                .map(|(i, _)| i)
                .collect();
            if !hits.is_empty() {
                out.push((ci, it.name.clone(), hits));
            }
        }
    }
    out
}

impl Store {
    /// The first field on which `o` conflicts, as (overlay recorded there, what).
    fn conflict(&self, o: &Overlay, sel: &Selected) -> Option<(String, String)> {
        for (ci, it, offs) in sel {
            if o.price.is_some() {
                for i in offs {
                    if let Some(r) = self.prices.get(&(*ci, it.clone(), *i))
                        && r.weight == o.weight
                    {
                        return Some((r.by.clone(), format!("price of {it}")));
                    }
                }
            }
            if !o.capacity.is_empty()
                && let Some(r) = self.capacities.get(&(*ci, it.clone()))
                && r.at.weight == o.weight
                && let Some(res) = o.capacity.keys().find(|k| r.resources.contains(*k))
            {
                return Some((r.at.by.clone(), format!("capacity {res} of {it}")));
            }
        }
        None
    }

    fn record(&mut self, o: &Overlay, sel: &Selected) {
        let at = Recorded {
            weight: o.weight,
            by: o.name.clone(),
        };
        for (ci, it, offs) in sel {
            if o.price.is_some() {
                for i in offs {
                    self.prices.insert((*ci, it.clone(), *i), at.clone());
                }
            }
            if !o.capacity.is_empty() {
                self.capacities.insert(
                    (*ci, it.clone()),
                    RecordedCapacity {
                        at: at.clone(),
                        resources: o.capacity.keys().cloned().collect(),
                    },
                );
            }
        }
    }
}

/// Evaluates `overlays` (parsed, or the name, weight and validation error of those that do
/// not parse) over the instance types of every NodeClass they may apply to (`bases`), as
/// Karpenter's NodeOverlay controller does over every NodePool.
pub fn evaluate(
    overlays: Vec<Result<Overlay, (String, i32, String)>>,
    bases: &[&[InstanceType]],
) -> Evaluation {
    let mut items = overlays;
    order(&mut items, |r| match r {
        Ok(o) => (o.weight, o.name.as_str()),
        Err((n, w, _)) => (*w, n.as_str()),
    });
    let mut store = Store::default();
    let mut eval = Evaluation::default();
    for item in items {
        let o = match item {
            Ok(o) => o,
            Err((name, _, why)) => {
                eval.outcomes.insert(
                    name,
                    Outcome {
                        verdict: Verdict::Invalid(why),
                        matched: 0,
                    },
                );
                continue;
            }
        };
        let sel = selected(&o, bases);
        let matched = sel.iter().map(|(_, _, offs)| offs.len()).sum();
        let verdict = match store.conflict(&o, &sel) {
            Some((with, what)) => Verdict::Conflict { with, what },
            None => {
                store.record(&o, &sel);
                eval.applied.push(o.clone());
                Verdict::Applied
            }
        };
        eval.outcomes
            .insert(o.name.clone(), Outcome { verdict, matched });
    }
    eval
}

/// `types` with `applied` (in order, conflict-free: [`Evaluation::applied`]) applied:
/// prices and capacities changed, offerings and instance types sorted again by price. The
/// sizes a resizable group makes on demand are not overlaid (only its grid is listed).
pub fn apply(types: &InstanceTypes, applied: &[Overlay]) -> InstanceTypes {
    let mut out = types.clone();
    if applied.is_empty() {
        return out;
    }
    for it in &mut out.instance_types {
        apply_to(it, applied);
    }
    sort_instance_types(&mut out.instance_types);
    out
}

fn apply_to(it: &mut InstanceType, applied: &[Overlay]) {
    let mut capacity: BTreeMap<String, i64> = BTreeMap::new();
    let mut prices: Vec<Option<f64>> = vec![None; it.offerings.len()];
    for o in applied {
        let hits: Vec<usize> = (0..it.offerings.len())
            .filter(|i| o.matches(it, &it.offerings[*i]))
            .collect();
        if hits.is_empty() {
            continue;
        }
        for (k, v) in &o.capacity {
            capacity.entry(k.clone()).or_insert(*v);
        }
        if let Some(change) = o.price {
            for i in hits {
                if prices[i].is_none() {
                    prices[i] = Some(change.apply(it.offerings[i].price));
                }
            }
        }
    }
    for (off, p) in it.offerings.iter_mut().zip(prices) {
        if let Some(p) = p {
            off.price = p;
            off.price_source = PriceSource::Overlay;
        }
    }
    if !capacity.is_empty() {
        for (k, v) in capacity {
            // What the kubelet reserves of a resource the type already had stays
            // reserved; a new extended resource is allocatable in full.
            let reserved = match it.capacity.0.get(&k) {
                Some(cap) => cap - it.allocatable.get(&k),
                None => 0,
            };
            it.allocatable.0.insert(k.clone(), (v - reserved).max(0));
            it.capacity.0.insert(k, v);
        }
        it.capacity_overlaid = true;
    }
    sort_offerings(&mut it.offerings);
}

#[cfg(test)]
mod tests;
