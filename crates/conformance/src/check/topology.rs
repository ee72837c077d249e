//! Topology spread (`DoNotSchedule`, maxSkew, minDomains, `nodeAffinityPolicy: Honor`) and
//! required pod affinity and anti-affinity (both directions), checked on the final placement:
//! every node (existing or new) with the pods bound to it and the pods placed on it.
//!
//! Final-state rules: a pod placed in domain `d` under a spread constraint needs
//! `count(d) - min(count over eligible domains) <= maxSkew` (each placement was within the
//! skew when made, and the minimum never falls, so this holds at the end); on hostname a new
//! node is always an empty domain, so `count(d) <= maxSkew`. Affinity needs another matching
//! pod in the domain (or none anywhere and the pod matching its own term); anti-affinity needs
//! no other matching pod in the domain.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, Taint, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::Violation;
use super::labels::{Labels, NodeSelection, Value};

/// A node and its pods.
pub(super) struct Place<'a> {
    pub(super) name: String,
    pub(super) labels: Labels,
    pub(super) taints: Vec<Taint>,
    /// Bound and placed.
    pub(super) pods: Vec<&'a Pod>,
    /// Placed by the plan under check.
    pub(super) placed: Vec<&'a Pod>,
}

/// Which nodes a spread constraint counts: those matching the pod's node affinity
/// (`nodeAffinityPolicy`, default Honor), those whose taints it tolerates (`nodeTaintsPolicy`,
/// default Ignore).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub(super) struct Policy {
    pub(super) affinity: bool,
    pub(super) taints: bool,
}

impl Policy {
    fn of(c: &TopologySpreadConstraint) -> Policy {
        Policy {
            affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            taints: c.node_taints_policy.as_deref() == Some("Honor"),
        }
    }
}

/// A place's value for a topology key.
#[derive(Debug, PartialEq, Eq)]
enum Dom<'p> {
    Absent,
    Is(&'p str),
    /// Decided at launch: one of these, or anything (`None`).
    Among(Option<&'p BTreeSet<String>>),
}

impl Dom<'_> {
    /// Whether the two may be the same domain.
    fn may_meet(&self, other: &Dom<'_>) -> bool {
        match (self, other) {
            (Dom::Absent, _) | (_, Dom::Absent) => false,
            (Dom::Is(a), Dom::Is(b)) => a == b,
            (Dom::Is(a), Dom::Among(Some(s))) | (Dom::Among(Some(s)), Dom::Is(a)) => s.contains(*a),
            (Dom::Among(Some(a)), Dom::Among(Some(b))) => !a.is_disjoint(b),
            _ => true,
        }
    }
}

fn domain<'p>(place: &'p Place<'_>, key: &str) -> Dom<'p> {
    match place.labels.get(key) {
        None | Some(Value::Absent) => Dom::Absent,
        Some(Value::Fixed(v)) => Dom::Is(v.as_str()),
        Some(Value::OneOf(s)) => Dom::Among(Some(s)),
        Some(Value::Unknown { .. }) => Dom::Among(None),
    }
}

/// `matchLabels` and `matchExpressions` over pod labels; a missing selector matches nothing.
pub(super) fn selects(selector: Option<&LabelSelector>, pod: &Pod) -> bool {
    let Some(s) = selector else { return false };
    let empty = Default::default();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    s.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && s.match_expressions.iter().flatten().all(|e| {
            let v = labels.get(&e.key);
            let in_values = v.is_some_and(|v| e.values.iter().flatten().any(|x| x == v));
            match e.operator.as_str() {
                "In" => in_values,
                "NotIn" => !in_values,
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => false,
            }
        })
}

fn ns(p: &Pod) -> &str {
    p.metadata.namespace.as_deref().unwrap_or_default()
}

fn same(a: &Pod, b: &Pod) -> bool {
    ns(a) == ns(b) && a.metadata.name == b.metadata.name
}

fn key(p: &Pod) -> String {
    crate::pod_key(p)
}

/// Whether `term` (of `owner`) selects `pod`: namespaces, then the label selector.
fn term_selects(term: &PodAffinityTerm, owner: &Pod, pod: &Pod) -> bool {
    let all_namespaces = term.namespace_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|m| m.is_empty())
    });
    let in_ns = all_namespaces
        || match term.namespaces.as_deref() {
            Some(list) if !list.is_empty() => list.iter().any(|n| n == ns(pod)),
            _ => ns(pod) == ns(owner),
        };
    in_ns && selects(term.label_selector.as_ref(), pod)
}

/// Checks every placed pod's constraints; `eligible(pod, key)` gives the domains of `key`
/// the pod could be placed in (for the spread minimum).
pub(super) fn check(
    places: &[Place<'_>],
    eligible: &mut dyn FnMut(&Pod, &str, Policy) -> BTreeSet<String>,
    out: &mut BTreeSet<Violation>,
) {
    for (i, place) in places.iter().enumerate() {
        for pod in &place.placed {
            spread(places, place, pod, eligible, out);
            affinity(places, i, pod, out);
        }
    }
    anti_affinity(places, out);
}

fn spread(
    places: &[Place<'_>],
    place: &Place<'_>,
    pod: &Pod,
    eligible: &mut dyn FnMut(&Pod, &str, Policy) -> BTreeSet<String>,
    out: &mut BTreeSet<Violation>,
) {
    let spec = pod.spec.as_ref();
    let selection = NodeSelection::of(spec);
    for c in spec
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or_default()
    {
        if c.when_unsatisfiable != "DoNotSchedule" {
            continue;
        }
        let k = c.topology_key.as_str();
        if c.label_selector.is_none() && domain(place, k) != Dom::Absent {
            continue; // selects no pod: nothing to skew
        }
        let d = match domain(place, k) {
            Dom::Is(d) => d,
            other => {
                let why = if other == Dom::Absent {
                    "lacks"
                } else {
                    "has not determined"
                };
                out.insert(Violation::new(
                    "topology spread",
                    format!("{}: node {} {why} {k}", key(pod), place.name),
                ));
                continue;
            }
        };
        let policy = Policy::of(c);
        let counted = |p: &Place<'_>| {
            (!policy.affinity || selection.satisfied(&p.labels))
                && (!policy.taints || super::labels::untolerated(&p.taints, spec).is_none())
        };
        let count = |v: &str| -> i64 {
            places
                .iter()
                .filter(|p| domain(p, k) == Dom::Is(v) && counted(p))
                .flat_map(|p| &p.pods)
                .filter(|q| ns(q) == ns(pod) && selects(c.label_selector.as_ref(), q))
                .count() as i64
        };
        let here = count(d);
        let min = if k == "kubernetes.io/hostname" {
            0
        } else {
            let mut domains = eligible(pod, k, policy);
            domains.insert(d.to_string());
            let min_domains = c.min_domains.unwrap_or(1).max(1) as usize;
            if domains.len() < min_domains {
                0
            } else {
                domains.iter().map(|v| count(v)).min().unwrap_or(0)
            }
        };
        if here - min > i64::from(c.max_skew) {
            out.insert(Violation::new(
                "topology spread",
                format!(
                    "{}: {k}={d} holds {here} matching pods, minimum {min}, maxSkew {}",
                    key(pod),
                    c.max_skew
                ),
            ));
        }
    }
}

fn required(pod: &Pod, anti: bool) -> &[PodAffinityTerm] {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
    } else {
        a.and_then(|a| a.pod_affinity.as_ref()).and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_deref()
        })
    };
    terms.unwrap_or_default()
}

fn affinity(places: &[Place<'_>], at: usize, pod: &Pod, out: &mut BTreeSet<Violation>) {
    for term in required(pod, false) {
        let k = term.topology_key.as_str();
        // A matching pod on the same node shares every domain.
        if places[at]
            .pods
            .iter()
            .any(|q| !same(q, pod) && term_selects(term, pod, q))
        {
            continue;
        }
        let Dom::Is(d) = domain(&places[at], k) else {
            out.insert(Violation::new(
                "pod affinity",
                format!(
                    "{}: node {} has no determined {k}",
                    key(pod),
                    places[at].name
                ),
            ));
            continue;
        };
        let others: Vec<(&Place<'_>, &&Pod)> = places
            .iter()
            .flat_map(|p| p.pods.iter().map(move |q| (p, q)))
            .filter(|(_, q)| !same(q, pod) && term_selects(term, pod, q))
            .collect();
        let near = others.iter().any(|(p, _)| domain(p, k) == Dom::Is(d));
        let bootstrap = others.is_empty() && term_selects(term, pod, pod);
        if !(near || bootstrap) {
            out.insert(Violation::new(
                "pod affinity",
                format!("{}: no matching pod in {k}={d}", key(pod)),
            ));
        }
    }
}

/// Every pair (owner of a required anti-affinity term, pod it selects), one of them placed by
/// the plan: not in the same domain.
fn anti_affinity(places: &[Place<'_>], out: &mut BTreeSet<Violation>) {
    let all: Vec<(usize, &Pod, bool)> = places
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.pods
                .iter()
                .map(move |q| (i, *q, p.placed.iter().any(|x| same(x, q))))
        })
        .collect();
    for &(ia, a, a_placed) in &all {
        for term in required(a, true) {
            let k = term.topology_key.as_str();
            for &(ib, b, b_placed) in &all {
                if !(a_placed || b_placed) || same(a, b) || !term_selects(term, a, b) {
                    continue;
                }
                if domain(&places[ia], k).may_meet(&domain(&places[ib], k)) {
                    out.insert(Violation::new(
                        "pod anti-affinity",
                        format!(
                            "{} and {} share {k} ({} / {})",
                            key(a),
                            key(b),
                            places[ia].name,
                            places[ib].name
                        ),
                    ));
                }
            }
        }
    }
}
