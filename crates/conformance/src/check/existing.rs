//! The cluster as the record holds it: existing nodes (and in-flight NodeClaims) as places
//! with their bound pods, pods placed on them, NodePool usage and limits, and the domains a
//! pod could reach (for the spread minimum).

use std::collections::{BTreeMap, BTreeSet};

use api::NodeClaim;
use k8s_openapi::api::core::v1::{Node, Pod};

use super::labels::{self, Labels, NodeSelection, Value};
use super::resources::{self, Amounts};
use super::topology::{Place, Policy};
use super::{
    Checker, Plan, Report, Violation, launch_labels, pool_reqs, pool_taints, port_clash, volumes,
};

/// Taints a node sheds once initialized (Karpenter ignores them on nodes not initialized).
const EPHEMERAL: [&str; 4] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    "karpenter.sh/unregistered",
];

fn fixed_labels(m: Option<&BTreeMap<String, String>>) -> Labels {
    m.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::Fixed(v.clone())))
        .collect()
}

fn initialized(c: &NodeClaim) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Initialized" && c.status == "True")
    })
}

fn finished(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// An existing place and what the checker needs beyond [`Place`].
struct Existing<'a> {
    place: Place<'a>,
    allocatable: Amounts,
}

/// A Node as a place: its labels (hostname defaulting to its name), the taints that count
/// (ephemeral and startup taints not while its NodeClaim is uninitialized), its allocatable.
fn node_place<'a>(n: &Node, claim: Option<&NodeClaim>, pods: Vec<&'a Pod>) -> Existing<'a> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let mut labels = fixed_labels(n.metadata.labels.as_ref());
    labels
        .entry("kubernetes.io/hostname".into())
        .or_insert(Value::Fixed(name.clone()));
    let startup: Vec<String> = claim
        .filter(|c| !initialized(c))
        .map(|c| {
            c.spec
                .startup_taints
                .iter()
                .map(|t| t.key.clone())
                .collect()
        })
        .unwrap_or_default();
    let uninitialized = claim.is_some_and(|c| !initialized(c));
    let taints = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let taints = taints
        .into_iter()
        .filter(|t| {
            !(uninitialized && (EPHEMERAL.contains(&t.key.as_str()) || startup.contains(&t.key)))
        })
        .collect();
    // Until initialized, the NodeClaim's allocatable is what the node will have (the
    // kubelet may not have reported extended resources yet).
    let from_claim = claim
        .filter(|c| !initialized(c))
        .and_then(|c| c.status.as_ref())
        .map(|s| resources::parse(&s.allocatable))
        .filter(|a| !a.is_empty());
    let allocatable = from_claim.unwrap_or_else(|| {
        n.status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(resources::parse)
            .unwrap_or_default()
    });
    Existing {
        place: Place {
            name,
            labels,
            taints,
            pods,
            placed: Vec::new(),
        },
        allocatable,
    }
}

impl<'a> Checker<'a> {
    fn claim_of(&self, node: &Node) -> Option<&'a NodeClaim> {
        let name = node.metadata.name.as_deref();
        let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        self.rec.input.node_claims.iter().find(|c| {
            let s = c.status.as_ref();
            (name.is_some() && s.and_then(|s| s.node_name.as_deref()) == name)
                || (pid.is_some() && s.and_then(|s| s.provider_id.as_deref()) == pid)
        })
    }

    fn existing(&self) -> Vec<Existing<'a>> {
        let mut bound: BTreeMap<&str, Vec<&'a Pod>> = BTreeMap::new();
        for p in self.rec.input.bound_pods.iter().filter(|p| !finished(p)) {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                bound.entry(n).or_default().push(p);
            }
        }
        let mut out = Vec::new();
        let mut with_node = BTreeSet::new();
        for n in &self.rec.input.nodes {
            let claim = self.claim_of(n);
            if let Some(c) = claim {
                with_node.insert(c.metadata.name.clone());
            }
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let pods = bound.get(name).cloned().unwrap_or_default();
            out.push(node_place(n, claim, pods));
        }
        for c in self
            .rec
            .input
            .node_claims
            .iter()
            .filter(|c| !with_node.contains(&c.metadata.name))
        {
            let name = c.metadata.name.clone().unwrap_or_default();
            let reqs: Vec<_> = c
                .spec
                .requirements
                .iter()
                .map(labels::Req::from_karpenter)
                .collect();
            let mut labels = labels::from_requirements(&reqs);
            labels.extend(fixed_labels(c.metadata.labels.as_ref()));
            labels.insert("kubernetes.io/hostname".into(), Value::Fixed(name.clone()));
            let taints = serde_json::to_value(&c.spec.taints)
                .and_then(serde_json::from_value)
                .unwrap_or_default();
            let allocatable = c
                .status
                .as_ref()
                .map(|s| resources::parse(&s.allocatable))
                .unwrap_or_default();
            out.push(Existing {
                place: Place {
                    name,
                    labels,
                    taints,
                    pods: Vec::new(),
                    placed: Vec::new(),
                },
                allocatable,
            });
        }
        out
    }

    /// Places of the existing nodes, with the plan's pods on them checked.
    pub(super) fn existing_places(&mut self, plan: &Plan, report: &mut Report) -> Vec<Place<'a>> {
        let mut existing = self.existing();
        for (node, keys) in &plan.existing {
            let Some(e) = existing.iter_mut().find(|e| e.place.name == *node) else {
                self.out.insert(Violation::new(
                    "nodes",
                    format!("pods placed on unknown node {node}"),
                ));
                continue;
            };
            for k in keys {
                self.schedule(k, report);
                let Some(p) = self.pod(k) else { continue };
                if !NodeSelection::of(p.spec.as_ref()).satisfied(&e.place.labels) {
                    self.out.insert(Violation::new(
                        "node affinity",
                        format!("{k}: not satisfied on node {node}"),
                    ));
                }
                if let Some(why) = volumes::topology(&volumes::uses(self.rec, p), &e.place.labels) {
                    self.out.insert(Violation::new(
                        "volumes",
                        format!("{k}: {why} on node {node}"),
                    ));
                }
                if let Some(t) = labels::untolerated(&e.place.taints, p.spec.as_ref()) {
                    self.out.insert(Violation::new(
                        "taints",
                        format!("{k}: taint {} of node {node} not tolerated", t.key),
                    ));
                }
                e.place.pods.push(p);
                e.place.placed.push(p);
            }
            let mut used = Amounts::new();
            for p in &e.place.pods {
                resources::add(&mut used, &resources::pod_requests(p.spec.as_ref()));
            }
            if let Some(what) = resources::exceeded(&used, &e.allocatable) {
                self.out
                    .insert(Violation::new("resources", format!("node {node}: {what}")));
            }
            let attached: Vec<_> = e
                .place
                .pods
                .iter()
                .flat_map(|p| volumes::uses(self.rec, p))
                .collect();
            let limits = volumes::node_limits(self.rec, node, &e.place.labels);
            if let Some(what) = volumes::over_limit(attached.iter(), &limits) {
                self.out.insert(Violation::new(
                    "volume limits",
                    format!("node {node}: {what}"),
                ));
            }
            let specs: Vec<_> = e.place.pods.iter().map(|p| p.spec.as_ref()).collect();
            if let Some(port) = port_clash(&specs) {
                self.out.insert(Violation::new(
                    "host ports",
                    format!("node {node}: host port {port} used twice"),
                ));
            }
        }
        existing.into_iter().map(|e| e.place).collect()
    }

    /// What the existing NodeClaims (or Nodes without one) count against their NodePool.
    pub(super) fn existing_usage(&self) -> BTreeMap<String, Amounts> {
        let mut usage: BTreeMap<String, Amounts> = BTreeMap::new();
        let mut count = |pool: Option<&String>, capacity: Amounts| {
            if let Some(pool) = pool {
                let u = usage.entry(pool.clone()).or_default();
                resources::add(u, &capacity);
                *u.entry("nodes".into()).or_insert(0) += 1;
            }
        };
        for c in &self.rec.input.node_claims {
            let pool = c
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("karpenter.sh/nodepool"));
            count(
                pool,
                c.status
                    .as_ref()
                    .map(|s| resources::parse(&s.capacity))
                    .unwrap_or_default(),
            );
        }
        for n in self
            .rec
            .input
            .nodes
            .iter()
            .filter(|n| self.claim_of(n).is_none())
        {
            let pool = n
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("karpenter.sh/nodepool"));
            let capacity = n
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .map(resources::parse);
            count(pool, capacity.unwrap_or_default());
        }
        usage
    }

    /// NodePools the plan launches into stay within their limits.
    pub(super) fn limits(
        &mut self,
        usage: &BTreeMap<String, Amounts>,
        launched: &BTreeSet<String>,
    ) {
        for pool in &self.rec.input.node_pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            if !launched.contains(&name) {
                continue;
            }
            let used = usage.get(&name).cloned().unwrap_or_default();
            let limits = resources::parse(&pool.spec.limits);
            if let Some(what) = resources::exceeded(
                &used
                    .into_iter()
                    .filter(|(k, _)| limits.contains_key(k))
                    .collect(),
                &limits,
            ) {
                self.out
                    .insert(Violation::new("limits", format!("NodePool {name}: {what}")));
            }
        }
    }

    /// The values of `key` on the nodes `pod` could be on: launches of every NodePool whose
    /// taints it tolerates that may satisfy its node selection, and existing nodes that do.
    pub(super) fn eligible(&mut self, pod: &Pod, key: &str, policy: Policy) -> BTreeSet<String> {
        let spec = pod.spec.as_ref();
        let sig = serde_json::to_string(&(
            policy,
            spec.and_then(|s| s.node_selector.as_ref()),
            spec.and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref()),
            spec.and_then(|s| s.tolerations.as_ref()),
        ))
        .unwrap_or_default();
        if let Some(v) = self.eligible.get(&(key.to_string(), sig.clone())) {
            return v.clone();
        }
        let selection = if policy.affinity {
            NodeSelection::of(spec)
        } else {
            NodeSelection::any()
        };
        let mut out = BTreeSet::new();
        for pool in &self.rec.input.node_pools {
            if labels::untolerated(&pool_taints(pool), spec).is_some() {
                continue;
            }
            let base = pool_reqs(pool);
            for it in self
                .rec
                .instance_types(pool.metadata.name.as_deref().unwrap_or_default())
            {
                for o in it.offerings.iter().filter(|o| o.available) {
                    if let Some(l) =
                        launch_labels(&base, it, o).filter(|l| selection.may_be_satisfied(l))
                        && let Some(Value::Fixed(v)) = l.get(key)
                    {
                        out.insert(v.clone());
                    }
                }
            }
        }
        for n in &self.rec.input.nodes {
            let l = fixed_labels(n.metadata.labels.as_ref());
            let taints = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default();
            if policy.taints && labels::untolerated(taints, spec).is_some() {
                continue;
            }
            if selection.satisfied(&l)
                && let Some(Value::Fixed(v)) = l.get(key)
            {
                out.insert(v.clone());
            }
        }
        self.eligible.insert((key.to_string(), sig), out.clone());
        out
    }
}
