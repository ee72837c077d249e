//! Node labels as a NodeClaim determines them, and the Kubernetes node-selection rules over
//! them: `nodeSelector`, required node affinity (`In`, `NotIn`, `Exists`, `DoesNotExist`,
//! `Gt`, `Lt`, and Karpenter's `Gte`, `Lte`), taints and tolerations.
//!
//! A NodeClaim does not fix every label: `zone In [a, b]` leaves the zone to the launch. A
//! label is therefore a [`Value`]: fixed, one of a set, present but unknown (Karpenter labels
//! the node with some value its requirement allows), or absent. A pod's requirement *holds*
//! when it holds for every value the label may take.

use std::collections::{BTreeMap, BTreeSet};

use api::karpenter::NodeSelectorRequirementWithMinValues;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, PodSpec, Taint, Toleration};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Value {
    Fixed(String),
    OneOf(BTreeSet<String>),
    /// Present; not one of `excluded`; numeric bounds (exclusive) when known.
    Unknown {
        excluded: BTreeSet<String>,
        gt: Option<i64>,
        lt: Option<i64>,
    },
    Absent,
}

/// Label key → what the node may carry; a missing key is absent.
pub(super) type Labels = BTreeMap<String, Value>;

fn int(v: &str) -> Option<i64> {
    v.parse().ok()
}

/// One requirement as (key, operator, values); `Gte n` is `Gt n-1`, `Lte n` is `Lt n+1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Req {
    pub(super) key: String,
    pub(super) op: String,
    pub(super) values: Vec<String>,
}

impl Req {
    fn normalized(&self) -> (String, Vec<String>) {
        let shift = |d: i64| {
            self.values
                .first()
                .and_then(|v| int(v))
                .map(|n| vec![(n + d).to_string()])
                .unwrap_or_default()
        };
        match self.op.as_str() {
            "Gte" => ("Gt".into(), shift(-1)),
            "Lte" => ("Lt".into(), shift(1)),
            op => (op.to_string(), self.values.clone()),
        }
    }

    pub(super) fn from_karpenter(r: &NodeSelectorRequirementWithMinValues) -> Req {
        let op = serde_json::to_value(r.operator)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        Req {
            key: r.key.clone(),
            op,
            values: r.values.clone(),
        }
    }

    pub(super) fn from_core(r: &NodeSelectorRequirement) -> Req {
        Req {
            key: r.key.clone(),
            op: r.operator.clone(),
            values: r.values.clone().unwrap_or_default(),
        }
    }
}

/// Whether `req` holds for every value `v` may take (`all`), or for some (`!all`).
fn eval(v: &Value, req: &Req, all: bool) -> bool {
    let (op, values) = req.normalized();
    let t: BTreeSet<&str> = values.iter().map(String::as_str).collect();
    let bound = values.first().and_then(|x| int(x));
    let num = |s: &str, f: &dyn Fn(i64) -> bool| int(s).is_some_and(f);
    let gt = |n: i64| move |x: i64| x > n;
    let lt = |n: i64| move |x: i64| x < n;
    match (op.as_str(), v) {
        ("Exists", v) => *v != Value::Absent,
        ("DoesNotExist", v) => *v == Value::Absent,
        (_, Value::Absent) => op == "NotIn",
        ("In", Value::Fixed(x)) => t.contains(x.as_str()),
        ("NotIn", Value::Fixed(x)) => !t.contains(x.as_str()),
        ("Gt", Value::Fixed(x)) => bound.is_some_and(|n| num(x, &gt(n))),
        ("Lt", Value::Fixed(x)) => bound.is_some_and(|n| num(x, &lt(n))),
        (_, Value::OneOf(s)) => {
            let one = |x: &String| eval(&Value::Fixed(x.clone()), req, true);
            if all {
                s.iter().all(one)
            } else {
                s.iter().any(one)
            }
        }
        ("In", Value::Unknown { excluded, .. }) => !all && t.iter().any(|x| !excluded.contains(*x)),
        ("NotIn", Value::Unknown { excluded, .. }) => {
            !all || t.iter().all(|x| excluded.contains(*x))
        }
        ("Gt", Value::Unknown { gt: g, lt: l, .. }) => match bound {
            Some(n) if all => g.is_some_and(|g| g >= n),
            Some(n) => l.is_none_or(|l| l > n + 1),
            None => false,
        },
        ("Lt", Value::Unknown { gt: g, lt: l, .. }) => match bound {
            Some(n) if all => l.is_some_and(|l| l <= n),
            Some(n) => g.is_none_or(|g| g < n - 1),
            None => false,
        },
        _ => false,
    }
}

/// The requirement holds whatever value the node gets.
pub(super) fn holds(labels: &Labels, req: &Req) -> bool {
    eval(labels.get(&req.key).unwrap_or(&Value::Absent), req, true)
}

/// The requirement may hold (for some value the node may get).
pub(super) fn may_hold(labels: &Labels, req: &Req) -> bool {
    eval(labels.get(&req.key).unwrap_or(&Value::Absent), req, false)
}

/// Narrows `v` (what earlier requirements on the key allow; `None`: unconstrained) by `req`.
fn narrow(v: Option<Value>, req: &Req) -> Value {
    let (op, values) = req.normalized();
    let bound = values.first().and_then(|x| int(x));
    let set: BTreeSet<String> = values.iter().cloned().collect();
    let unknown = Value::Unknown {
        excluded: BTreeSet::new(),
        gt: None,
        lt: None,
    };
    match (op.as_str(), v) {
        ("DoesNotExist", None | Some(Value::Absent)) | ("NotIn", Some(Value::Absent)) => {
            Value::Absent
        }
        // Present where absent is required, or the reverse: nothing fits.
        ("DoesNotExist", _) | (_, Some(Value::Absent)) => Value::OneOf(BTreeSet::new()),
        ("In", None) => Value::OneOf(set),
        ("In", Some(Value::Unknown { excluded, gt, lt })) => Value::OneOf(
            set.into_iter()
                .filter(|x| {
                    !excluded.contains(x)
                        && gt.is_none_or(|g| int(x).is_some_and(|n| n > g))
                        && lt.is_none_or(|l| int(x).is_some_and(|n| n < l))
                })
                .collect(),
        ),
        (_, Some(Value::OneOf(s))) => Value::OneOf(
            s.into_iter()
                .filter(|x| eval(&Value::Fixed(x.clone()), req, true))
                .collect(),
        ),
        (_, Some(Value::Fixed(x))) => {
            if eval(&Value::Fixed(x.clone()), req, true) {
                Value::Fixed(x)
            } else {
                Value::OneOf(BTreeSet::new())
            }
        }
        (op, v) => {
            let Value::Unknown {
                mut excluded,
                mut gt,
                mut lt,
            } = v.unwrap_or(unknown)
            else {
                return Value::Absent;
            };
            match op {
                "NotIn" => excluded.extend(set),
                "Gt" => gt = gt.max(bound),
                "Lt" => lt = lt.min(bound).or(bound),
                _ => {}
            }
            Value::Unknown { excluded, gt, lt }
        }
    }
}

/// The labels a NodeClaim's requirements (ANDed) give its node; a key no value satisfies is
/// `OneOf(∅)` (see [`conflict`]).
pub(super) fn from_requirements(reqs: &[Req]) -> Labels {
    let mut out = Labels::new();
    for r in reqs {
        let prev = out.remove(&r.key);
        let v = match narrow(prev, r) {
            Value::OneOf(s) if s.len() == 1 => {
                Value::Fixed(s.into_iter().next().unwrap_or_default())
            }
            v => v,
        };
        out.insert(r.key.clone(), v);
    }
    out
}

/// The first key no value satisfies.
pub(super) fn conflict(labels: &Labels) -> Option<&str> {
    labels
        .iter()
        .find(|(_, v)| matches!(v, Value::OneOf(s) if s.is_empty()))
        .map(|(k, _)| k.as_str())
}

/// Deprecated label → the label whose value it carries (the kubelet and cloud node manager
/// set both).
const ALIASES: [(&str, &str); 5] = [
    ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
    ("beta.kubernetes.io/os", "kubernetes.io/os"),
    (
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
    ),
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
];

/// Adds the deprecated aliases of the stable labels a launch sets.
pub(super) fn add_aliases(labels: &mut Labels) {
    for (alias, stable) in ALIASES {
        if let Some(v) = labels.get(stable).cloned() {
            labels.entry(alias.to_string()).or_insert(v);
        }
    }
}

/// A pod's node selection: `nodeSelector` AND (any of the required affinity terms).
pub(super) struct NodeSelection {
    pub(super) selector: Vec<Req>,
    pub(super) terms: Vec<Vec<Req>>,
}

impl NodeSelection {
    /// No constraint (`nodeAffinityPolicy: Ignore`).
    pub(super) fn any() -> NodeSelection {
        NodeSelection {
            selector: Vec::new(),
            terms: Vec::new(),
        }
    }

    pub(super) fn of(spec: Option<&PodSpec>) -> NodeSelection {
        let selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .into_iter()
            .flatten()
            .map(|(k, v)| Req {
                key: k.clone(),
                op: "In".into(),
                values: vec![v.clone()],
            })
            .collect();
        let terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|ns| {
                ns.node_selector_terms
                    .iter()
                    .map(|t| {
                        t.match_expressions
                            .iter()
                            .flatten()
                            .map(Req::from_core)
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default();
        NodeSelection { selector, terms }
    }

    fn eval(&self, labels: &Labels, f: fn(&Labels, &Req) -> bool) -> bool {
        self.selector.iter().all(|r| f(labels, r))
            && (self.terms.is_empty() || self.terms.iter().any(|t| t.iter().all(|r| f(labels, r))))
    }

    /// Satisfied whatever values the node's undetermined labels take. (An OR of terms each
    /// holding for part of the values would also do; not needed by any scenario.)
    pub(super) fn satisfied(&self, labels: &Labels) -> bool {
        self.eval(labels, holds)
    }

    pub(super) fn may_be_satisfied(&self, labels: &Labels) -> bool {
        self.eval(labels, may_hold)
    }
}

/// Kubernetes' toleration matching.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    let exists = t.operator.as_deref() == Some("Exists");
    if key.is_empty() {
        return exists;
    }
    key == taint.key
        && (exists
            || t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default())
}

/// The first `NoSchedule`/`NoExecute` taint the tolerations do not tolerate.
pub(super) fn untolerated<'a>(taints: &'a [Taint], spec: Option<&PodSpec>) -> Option<&'a Taint> {
    let tolerations = spec
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> Req {
        Req {
            key: key.into(),
            op: op.into(),
            values: values.iter().map(|v| (*v).to_string()).collect(),
        }
    }

    #[test]
    fn a_pod_requirement_must_hold_for_every_value_the_claim_allows() {
        let l = from_requirements(&[req("z", "In", &["a", "b"]), req("c", "NotIn", &["x"])]);
        assert!(holds(&l, &req("z", "In", &["a", "b", "c"])));
        assert!(!holds(&l, &req("z", "In", &["a"])));
        assert!(may_hold(&l, &req("z", "In", &["a"])));
        assert!(holds(&l, &req("c", "NotIn", &["x"])));
        assert!(!holds(&l, &req("c", "In", &["y"])));
        assert!(holds(&l, &req("c", "Exists", &[])));
        assert!(holds(&l, &req("missing", "DoesNotExist", &[])));
        assert!(!holds(&l, &req("missing", "In", &["a"])));
        let n = from_requirements(&[req("n", "Gte", &["4"])]);
        assert!(holds(&n, &req("n", "Gt", &["3"])));
        assert!(!holds(&n, &req("n", "Gt", &["4"])));
        let one = from_requirements(&[req("z", "In", &["a", "b"]), req("z", "NotIn", &["b"])]);
        assert_eq!(one["z"], Value::Fixed("a".into()));
        // Found by the corpus: an exclusion before a concrete value still excludes it.
        let out = from_requirements(&[req("z", "NotIn", &["a"]), req("z", "In", &["a"])]);
        assert_eq!(conflict(&out), Some("z"));
    }

    #[test]
    fn tolerations_follow_kubernetes() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let tol = |key: Option<&str>, op: &str, value: Option<&str>| Toleration {
            key: key.map(str::to_string),
            operator: Some(op.into()),
            value: value.map(str::to_string),
            ..Toleration::default()
        };
        assert!(tolerates(&tol(None, "Exists", None), &taint));
        assert!(tolerates(&tol(Some("k"), "Equal", Some("v")), &taint));
        assert!(!tolerates(&tol(Some("k"), "Equal", Some("w")), &taint));
        assert!(!tolerates(&tol(None, "Equal", None), &taint));
    }
}
