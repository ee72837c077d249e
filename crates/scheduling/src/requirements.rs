//! Node-selector requirement algebra (Karpenter's `scheduling.Requirements`).
//!
//! A requirement on one label key is a [`ValueSet`]: either a finite set of allowed values or
//! the complement of a finite set (everything except), optionally bounded numerically
//! (`Gt`/`Lt`/`Gte`/`Lte`), with an optional `minValues`, plus whether a node without the
//! label satisfies it (only `NotIn`/`DoesNotExist` do, so `In [a]` and `NotIn [a]` together
//! are satisfied by nothing, not by the absence of the label). [`Reqs`] is a set of those keyed by label
//! key. The algebra is generic over the key and value types so the solver can run it on interned
//! symbols while callers use plain strings ([`Requirements`]).

use std::collections::BTreeMap;
use std::fmt;

/// Operator of a node-selector requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    /// The operator named as in the Kubernetes API (`In`, `NotIn`, ..., `Lte`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }

    /// Its name in the Kubernetes API.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }
}

/// One node-selector requirement as written in a NodePool or a pod spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
    pub min_values: Option<u32>,
}

impl Requirement {
    pub fn new(key: impl Into<String>, operator: Operator, values: &[&str]) -> Self {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| (*v).to_string()).collect(),
            min_values: None,
        }
    }

    pub fn with_min_values(mut self, min_values: u32) -> Self {
        self.min_values = Some(min_values);
        self
    }
}

/// A label value usable in the algebra: ordered, and possibly an integer (for `Gt`/`Lt`).
pub trait LabelValue: Ord + Clone {
    fn as_int(&self) -> Option<i64>;
}

impl LabelValue for String {
    fn as_int(&self) -> Option<i64> {
        self.parse().ok()
    }
}

/// The allowed values of one key, and whether a node without the key is allowed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueSet<V> {
    /// `true`: every value except `values` is allowed.
    pub complement: bool,
    /// Sorted, deduplicated.
    pub values: Vec<V>,
    /// Inclusive lower bound (`Gt n` is `n + 1`): values must then be integers.
    pub at_least: Option<i64>,
    /// Inclusive upper bound (`Lt n` is `n - 1`).
    pub at_most: Option<i64>,
    /// Whether a node without the label satisfies the set (`NotIn`, `DoesNotExist`, and
    /// intersections of those only).
    pub absent_ok: bool,
    pub min_values: Option<u32>,
}

impl<V: LabelValue> ValueSet<V> {
    pub fn exists() -> Self {
        ValueSet {
            complement: true,
            values: Vec::new(),
            at_least: None,
            at_most: None,
            absent_ok: false,
            min_values: None,
        }
    }

    pub(crate) fn does_not_exist() -> Self {
        ValueSet {
            complement: false,
            absent_ok: true,
            ..Self::exists()
        }
    }

    /// Satisfied by nothing, not even the absence of the label (`Gt` of a non-integer,
    /// `In [a]` and `In [b]`, `Exists` and `DoesNotExist`).
    pub fn nothing() -> Self {
        ValueSet {
            complement: false,
            ..Self::exists()
        }
    }

    pub fn in_values(mut values: Vec<V>) -> Self {
        values.sort();
        values.dedup();
        ValueSet {
            values,
            ..Self::nothing()
        }
    }

    pub(crate) fn not_in(mut values: Vec<V>) -> Self {
        values.sort();
        values.dedup();
        ValueSet {
            values,
            absent_ok: true,
            ..Self::exists()
        }
    }

    /// Builds the set for an operator. Numeric operators with a non-numeric value, or a
    /// bound nothing can pass (`Gt` the largest integer), are satisfied by nothing.
    pub fn from_operator(op: Operator, values: Vec<V>, min_values: Option<u32>) -> Self {
        let first_int = values.first().and_then(V::as_int);
        let mut set = match op {
            Operator::In => Self::in_values(values),
            Operator::NotIn => Self::not_in(values),
            Operator::Exists => Self::exists(),
            Operator::DoesNotExist => Self::does_not_exist(),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let (at_least, at_most) = match (op, first_int) {
                    (Operator::Gt, Some(n)) => (n.checked_add(1), None),
                    (Operator::Gte, Some(n)) => (Some(n), None),
                    (Operator::Lt, Some(n)) => (None, n.checked_sub(1)),
                    (_, Some(n)) => (None, Some(n)),
                    (_, None) => (None, None),
                };
                if at_least.is_none() && at_most.is_none() {
                    Self::nothing()
                } else {
                    ValueSet {
                        at_least,
                        at_most,
                        ..Self::exists()
                    }
                }
            }
        };
        set.min_values = min_values;
        set
    }

    fn bounded(&self) -> bool {
        self.at_least.is_some() || self.at_most.is_some()
    }

    fn within_bounds(&self, v: &V) -> bool {
        if !self.bounded() {
            return true;
        }
        match v.as_int() {
            None => false,
            Some(n) => self.at_least.is_none_or(|l| n >= l) && self.at_most.is_none_or(|h| n <= h),
        }
    }

    fn bounds_empty(&self) -> bool {
        matches!((self.at_least, self.at_most), (Some(l), Some(h)) if l > h)
    }

    /// Whether `v` is allowed.
    pub fn has(&self, v: &V) -> bool {
        let listed = self.values.binary_search(v).is_ok();
        listed != self.complement && self.within_bounds(v)
    }

    /// Whether no value at all is allowed (a node without the label may still be).
    pub fn is_empty(&self) -> bool {
        if self.complement {
            self.bounds_empty()
        } else {
            self.values.is_empty()
        }
    }

    /// The operator this set would be written with (Karpenter's `Operator()`).
    pub fn operator(&self) -> Operator {
        if self.complement {
            if self.values.is_empty() {
                Operator::Exists
            } else {
                Operator::NotIn
            }
        } else if self.values.is_empty() {
            Operator::DoesNotExist
        } else {
            Operator::In
        }
    }

    fn allows_absence(&self) -> bool {
        self.absent_ok
    }

    /// Intersection of two sets on the same key.
    pub fn intersection(&self, other: &Self) -> Self {
        let at_least = match (self.at_least, other.at_least) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let at_most = match (self.at_most, other.at_most) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let min_values = match (self.min_values, other.min_values) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let (complement, mut values) = match (self.complement, other.complement) {
            (true, true) => {
                let mut v = self.values.clone();
                v.extend(other.values.iter().cloned());
                v.sort();
                v.dedup();
                (true, v)
            }
            (true, false) => (
                false,
                other
                    .values
                    .iter()
                    .filter(|v| self.values.binary_search(v).is_err())
                    .cloned()
                    .collect(),
            ),
            (false, true) => (
                false,
                self.values
                    .iter()
                    .filter(|v| other.values.binary_search(v).is_err())
                    .cloned()
                    .collect(),
            ),
            (false, false) => (
                false,
                self.values
                    .iter()
                    .filter(|v| other.values.binary_search(v).is_ok())
                    .cloned()
                    .collect(),
            ),
        };
        let mut out = ValueSet {
            complement,
            values: Vec::new(),
            at_least,
            at_most,
            absent_ok: self.absent_ok && other.absent_ok,
            min_values,
        };
        if !complement {
            values.retain(|v| out.within_bounds(v));
            // A finite set is already filtered by the bounds.
            (out.at_least, out.at_most) = (None, None);
        } else if out.bounds_empty() {
            out.complement = false;
            (out.at_least, out.at_most) = (None, None);
            values.clear();
        }
        out.values = values;
        out
    }

    /// Whether the two sets share a value.
    pub fn intersects(&self, other: &Self) -> bool {
        match (self.complement, other.complement) {
            (false, false) => self
                .values
                .iter()
                .any(|v| other.values.binary_search(v).is_ok() && other.within_bounds(v)),
            (false, true) => self.values.iter().any(|v| other.has(v)),
            (true, false) => other.values.iter().any(|v| self.has(v)),
            (true, true) => !self.intersection(other).is_empty(),
        }
    }

    /// The requirements that mean this set (several when bounds, exclusions and presence
    /// combine; none when anything goes), rendering values with `show`.
    pub fn to_requirements(&self, key: &str, show: impl Fn(&V) -> String) -> Vec<Requirement> {
        let req = |operator, values: Vec<String>| Requirement {
            key: key.to_string(),
            operator,
            values,
            min_values: self.min_values,
        };
        let listed = || self.values.iter().map(&show).collect::<Vec<_>>();
        if !self.complement {
            return match (self.values.is_empty(), self.absent_ok) {
                (false, _) => vec![req(Operator::In, listed())],
                (true, true) => vec![req(Operator::DoesNotExist, Vec::new())],
                (true, false) => vec![
                    req(Operator::Exists, Vec::new()),
                    req(Operator::DoesNotExist, Vec::new()),
                ],
            };
        }
        // Bounds come with presence (only numeric operators make them). `Gte 0`, not `Gt -1`:
        // NodeClaim validation wants non-negative bounds.
        let mut out = Vec::new();
        match self.at_least {
            Some(l) if l >= 1 => out.push(req(Operator::Gt, vec![(l - 1).to_string()])),
            Some(l) => out.push(req(Operator::Gte, vec![l.to_string()])),
            None => {}
        }
        match self.at_most {
            Some(h) if h < i64::MAX => out.push(req(Operator::Lt, vec![(h + 1).to_string()])),
            Some(h) => out.push(req(Operator::Lte, vec![h.to_string()])),
            None => {}
        }
        if !self.absent_ok && !self.bounded() {
            out.push(req(Operator::Exists, Vec::new()));
        }
        if !self.values.is_empty() {
            out.push(req(Operator::NotIn, listed()));
        }
        out
    }
}

/// Requirements on several keys, all of which must hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reqs<K, V> {
    /// Sorted by key, one entry per key.
    entries: Vec<(K, ValueSet<V>)>,
}

impl<K: Ord + Clone, V: LabelValue> Default for Reqs<K, V> {
    fn default() -> Self {
        Reqs {
            entries: Vec::new(),
        }
    }
}

/// Why two requirement sets are not compatible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility<K> {
    /// Both sides constrain the key and no value satisfies both.
    NoCommonValue(K),
    /// Only the incoming side constrains the key and requires it to exist.
    Undefined(K),
}

impl<K: std::fmt::Display> std::fmt::Display for Incompatibility<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Incompatibility::NoCommonValue(k) => write!(f, "no value of {k} satisfies both"),
            Incompatibility::Undefined(k) => write!(f, "{k} is required but not set"),
        }
    }
}

impl<K: Ord + Clone, V: LabelValue> Reqs<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Renames keys and values (each one-to-one), sorting again what the names order.
    pub(crate) fn remap(&mut self, key: impl Fn(&K) -> K, value: impl Fn(&V) -> V) {
        for (k, set) in &mut self.entries {
            *k = key(k);
            for v in &mut set.values {
                *v = value(v);
            }
            set.values.sort();
        }
        self.entries.sort_by(|a, b| a.0.cmp(&b.0));
    }

    pub fn entries(&self) -> &[(K, ValueSet<V>)] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &K) -> Option<&ValueSet<V>> {
        self.entries
            .binary_search_by(|(k, _)| k.cmp(key))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// Sets the `minValues` of the constraint on `key`, if there is one.
    pub fn set_min_values(&mut self, key: &K, min_values: Option<u32>) {
        if let Ok(i) = self.entries.binary_search_by(|(k, _)| k.cmp(key)) {
            self.entries[i].1.min_values = min_values;
        }
    }

    /// Adds a constraint on `key`, intersecting with any existing one.
    pub fn add(&mut self, key: K, set: ValueSet<V>) {
        match self.entries.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => {
                let merged = self.entries[i].1.intersection(&set);
                self.entries[i].1 = merged;
            }
            Err(i) => self.entries.insert(i, (key, set)),
        }
    }

    /// Intersects `other` into `self`.
    pub fn intersect(&mut self, other: &Self) {
        for (k, s) in &other.entries {
            self.add(k.clone(), s.clone());
        }
    }

    /// Karpenter's `Intersects`: for every key on both sides there must be a common value,
    /// unless both sides only exclude values (`NotIn`/`DoesNotExist`).
    pub fn intersects(&self, incoming: &Self) -> Result<(), Incompatibility<K>> {
        let (mut i, mut j) = (0, 0);
        while i < self.entries.len() && j < incoming.entries.len() {
            let (ka, a) = &self.entries[i];
            let (kb, b) = &incoming.entries[j];
            match ka.cmp(kb) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    if !(a.intersects(b) || b.allows_absence() && a.allows_absence()) {
                        return Err(Incompatibility::NoCommonValue(ka.clone()));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    /// Karpenter's `Compatible`: [`Reqs::intersects`], and every key constrained only by
    /// `incoming` must either be allowed to be undefined (`allow_undefined`, used for well-known
    /// labels a new node will get) or be a `NotIn`/`DoesNotExist` requirement.
    pub fn compatible(
        &self,
        incoming: &Self,
        allow_undefined: impl Fn(&K) -> bool,
    ) -> Result<(), Incompatibility<K>> {
        for (k, s) in &incoming.entries {
            if self.get(k).is_none() && !s.allows_absence() && !allow_undefined(k) {
                return Err(Incompatibility::Undefined(k.clone()));
            }
        }
        self.intersects(incoming)
    }

    /// Whether a node with exactly these labels satisfies every requirement.
    pub(crate) fn matches_labels(&self, label: impl Fn(&K) -> Option<V>) -> Result<(), K> {
        for (k, s) in &self.entries {
            let ok = match label(k) {
                Some(v) => s.has(&v),
                None => s.allows_absence(),
            };
            if !ok {
                return Err(k.clone());
            }
        }
        Ok(())
    }

    /// Converts back to requirements (one or more per key, same meaning), rendering keys
    /// and values with `show`.
    pub fn to_requirements(&self, show: impl Fn(&V) -> String) -> Vec<Requirement>
    where
        K: fmt::Display,
    {
        self.entries
            .iter()
            .flat_map(|(k, s)| s.to_requirements(&k.to_string(), &show))
            .collect()
    }
}

/// String-keyed requirements for callers (the controller) that do not intern.
pub type Requirements = Reqs<String, String>;

impl Requirements {
    /// Builds requirements from a list (all ANDed).
    pub fn from_list(list: &[Requirement]) -> Self {
        let mut r = Reqs::new();
        for q in list {
            r.add(
                q.key.clone(),
                ValueSet::from_operator(q.operator, q.values.clone(), q.min_values),
            );
        }
        r
    }

    /// `In [value]` for every label.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        let mut r = Reqs::new();
        for (k, v) in labels {
            r.add(k.clone(), ValueSet::in_values(vec![v.clone()]));
        }
        r
    }

    /// Whether a label set is allowed by these requirements.
    pub fn allows(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_labels(|k| labels.get(k).cloned()).is_ok()
    }
}
