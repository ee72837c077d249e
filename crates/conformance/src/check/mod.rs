//! The independent checker: validates a [`Plan`] (ours or Karpenter's) against a record's
//! input from the Kubernetes semantics, without calling the solver or its predicates.
//!
//! A new NodeClaim must be right whichever of its instance type options and compatible
//! available offerings launches: every such launch gives concrete labels (instance type,
//! zone, capacity type, NodePool, the NodeClaim's requirements), and on each the pods' node
//! selector and required node affinity hold, the pods and the daemonsets that may land fit the
//! allocatable (capacity − overhead), and no two use the same host port. The NodePool's
//! taints are tolerated. Pods placed on existing nodes are checked against that node. Then,
//! over the whole placement: topology spread and pod (anti-)affinity ([`topology`]), NodePool
//! limits (the cheapest launch counted), minValues (distinct values among the options).
//! Volumes ([`volumes`]): a pod's claims usable, their topology met on every launch, and no
//! CSI driver over the node's attach limit. Devices ([`dra`]): on a new node, the pods'
//! unallocated ResourceClaims find enough of the devices its instance type publishes (a
//! necessary condition; existing nodes are not checked for devices).

mod dra;
mod existing;
mod labels;
mod resources;
mod topology;
mod volumes;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use api::NodePool;
use api::karpenter::NodeSelectorRequirementWithMinValues;
use k8s_openapi::api::core::v1::{Pod, PodSpec, Taint};

use crate::record::{Record, RecordedInstanceType, RecordedOffering};
use labels::{Labels, NodeSelection, Req, Value};
use resources::Amounts;
use topology::Place;

/// A scheduling result, in the terms both schedulers share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub claims: Vec<PlannedClaim>,
    /// Existing node (or in-flight NodeClaim) name → pods placed there.
    pub existing: BTreeMap<String, Vec<String>>,
    /// Pods reported unschedulable, with the reason given.
    pub failed: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlannedClaim {
    pub node_pool: String,
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    pub instance_types: Vec<String>,
    pub pods: Vec<String>,
}

/// One broken constraint: which, and where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub constraint: &'static str,
    pub detail: String,
}

impl Violation {
    pub fn new(constraint: &'static str, detail: String) -> Violation {
        Violation { constraint, detail }
    }
}

/// The checker's verdict on one plan.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub violations: BTreeSet<Violation>,
    /// Pods placed (new NodeClaims and existing nodes).
    pub scheduled: BTreeSet<String>,
    pub claims: usize,
    /// Per NodeClaim, the cheapest launch, summed.
    pub price: f64,
}

/// One way a NodeClaim may launch.
struct Launch<'a> {
    it: &'a RecordedInstanceType,
    offering: &'a RecordedOffering,
    labels: Labels,
}

fn karpenter_reqs(reqs: &[NodeSelectorRequirementWithMinValues]) -> Vec<Req> {
    reqs.iter().map(Req::from_karpenter).collect()
}

fn fixed(key: &str, value: &str) -> Req {
    Req {
        key: key.to_string(),
        op: "In".into(),
        values: vec![value.to_string()],
    }
}

/// What a NodePool itself puts on every node: its requirements and template labels.
fn pool_reqs(pool: &NodePool) -> Vec<Req> {
    let t = &pool.spec.template;
    let mut reqs = karpenter_reqs(&t.spec.requirements);
    reqs.extend(t.metadata.labels.iter().map(|(k, v)| fixed(k, v)));
    reqs.push(fixed(
        "karpenter.sh/nodepool",
        pool.metadata.name.as_deref().unwrap_or_default(),
    ));
    reqs
}

/// The labels of launching `it` in `offering` under `base` requirements (None: incompatible).
fn launch_labels(base: &[Req], it: &RecordedInstanceType, o: &RecordedOffering) -> Option<Labels> {
    let mut reqs: Vec<Req> = base
        .iter()
        .filter(|r| r.key != "kubernetes.io/hostname")
        .cloned()
        .collect();
    reqs.extend(karpenter_reqs(&it.requirements));
    reqs.extend(karpenter_reqs(&o.requirements));
    reqs.push(fixed("node.kubernetes.io/instance-type", &it.name));
    reqs.push(fixed("topology.kubernetes.io/zone", &o.zone));
    reqs.push(fixed("karpenter.sh/capacity-type", &o.capacity_type));
    let mut labels = labels::from_requirements(&reqs);
    labels::conflict(&labels).is_none().then(|| {
        labels::add_aliases(&mut labels);
        labels
    })
}

/// Capacity and overhead of launching `it` in `o` (the offering's overrides replace entries).
fn capacity(it: &RecordedInstanceType, o: &RecordedOffering) -> (Amounts, Amounts) {
    let mut capacity = resources::parse(&it.capacity);
    capacity.extend(resources::parse(&o.capacity_override));
    let mut overhead = resources::parse(&it.overhead);
    overhead.extend(resources::parse(&o.overhead_override));
    (capacity, overhead)
}

fn allocatable(it: &RecordedInstanceType, o: &RecordedOffering) -> Amounts {
    let (mut a, overhead) = capacity(it, o);
    for (k, v) in overhead {
        *a.entry(k).or_insert(0) -= v;
    }
    a
}

fn host_ports(spec: Option<&PodSpec>) -> Vec<(i32, String, String)> {
    spec.into_iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            let ip = p
                .host_ip
                .clone()
                .filter(|ip| ip != "0.0.0.0")
                .unwrap_or_default();
            Some((port, p.protocol.clone().unwrap_or_else(|| "TCP".into()), ip))
        })
        .collect()
}

/// The first host port two of `specs` both use.
fn port_clash(specs: &[Option<&PodSpec>]) -> Option<i32> {
    let mut seen: Vec<(i32, String, String)> = Vec::new();
    for s in specs {
        for (port, proto, ip) in host_ports(*s) {
            let clash = seen.iter().any(|(p, pr, i)| {
                *p == port && *pr == proto && (i.is_empty() || ip.is_empty() || *i == ip)
            });
            if clash {
                return Some(port);
            }
            seen.push((port, proto, ip));
        }
    }
    None
}

/// Shared lookups of one record.
struct Checker<'a> {
    rec: &'a Record,
    pending: HashMap<String, &'a Pod>,
    pools: HashMap<&'a str, &'a NodePool>,
    daemons: Vec<&'a PodSpec>,
    out: BTreeSet<Violation>,
    eligible: HashMap<(String, String), BTreeSet<String>>,
}

fn pool_taints(pool: &NodePool) -> Vec<Taint> {
    serde_json::to_value(&pool.spec.template.spec.taints)
        .and_then(serde_json::from_value)
        .unwrap_or_default()
}

/// Checks `plan` against `rec`'s input.
pub fn check(rec: &Record, plan: &Plan) -> Report {
    let mut c = Checker {
        rec,
        pending: rec.pods.iter().map(|p| (crate::pod_key(p), p)).collect(),
        pools: rec
            .input
            .node_pools
            .iter()
            .map(|p| (p.metadata.name.as_deref().unwrap_or_default(), p))
            .collect(),
        daemons: rec
            .input
            .daemon_sets
            .iter()
            .filter_map(|d| d.spec.as_ref()?.template.spec.as_ref())
            .collect(),
        out: BTreeSet::new(),
        eligible: HashMap::new(),
    };
    let mut report = Report {
        claims: plan.claims.len(),
        ..Report::default()
    };
    let mut places = c.existing_places(plan, &mut report);
    let mut usage: BTreeMap<String, Amounts> = c.existing_usage();
    for (i, claim) in plan.claims.iter().enumerate() {
        if let Some((place, price, capacity)) = c.claim(i, claim, &mut report) {
            report.price += price;
            let u = usage.entry(claim.node_pool.clone()).or_default();
            resources::add(u, &capacity);
            *u.entry("nodes".into()).or_insert(0) += 1;
            places.push(place);
        }
    }
    let launched = plan.claims.iter().map(|c| c.node_pool.clone()).collect();
    c.limits(&usage, &launched);
    let mut out = std::mem::take(&mut c.out);
    topology::check(
        &places,
        &mut |pod, key, policy| c.eligible(pod, key, policy),
        &mut out,
    );
    report.violations = out;
    report
}

impl<'a> Checker<'a> {
    fn pod(&mut self, key: &str) -> Option<&'a Pod> {
        let p = self.pending.get(key).copied();
        if p.is_none() {
            self.out.insert(Violation::new(
                "pods",
                format!("{key} is not a pending pod of the input"),
            ));
        }
        p
    }

    fn schedule(&mut self, key: &str, report: &mut Report) {
        if !report.scheduled.insert(key.to_string()) {
            self.out
                .insert(Violation::new("pods", format!("{key} placed twice")));
        }
    }

    /// A new NodeClaim: its launches checked; its place, cheapest price and launched capacity.
    fn claim(
        &mut self,
        i: usize,
        claim: &PlannedClaim,
        report: &mut Report,
    ) -> Option<(Place<'a>, f64, Amounts)> {
        let name = format!("new-nodeclaim-{i}");
        let Some(pool) = self.pools.get(claim.node_pool.as_str()).copied() else {
            self.out.insert(Violation::new(
                "nodepool",
                format!("{name}: unknown NodePool {}", claim.node_pool),
            ));
            return None;
        };
        let pods: Vec<&'a Pod> = claim.pods.iter().filter_map(|k| self.pod(k)).collect();
        for k in &claim.pods {
            self.schedule(k, report);
        }
        let taints = pool_taints(pool);
        for p in &pods {
            if let Some(t) = labels::untolerated(&taints, p.spec.as_ref()) {
                self.out.insert(Violation::new(
                    "taints",
                    format!(
                        "{}: NodePool taint {} not tolerated",
                        crate::pod_key(p),
                        t.key
                    ),
                ));
            }
        }
        let mut base = pool_reqs(pool);
        base.extend(karpenter_reqs(&claim.requirements));
        let launches = self.launches(&name, claim, &base);
        let Some(cheapest) = launches
            .iter()
            .min_by(|a, b| a.offering.price.total_cmp(&b.offering.price))
        else {
            self.out.insert(Violation::new(
                "instance types",
                format!("{name}: no option launches (compatible, available)"),
            ));
            return None;
        };
        for l in &launches {
            self.launch(&name, l, &pods, &taints);
        }
        self.min_values(&name, pool, &launches);
        let mut labels = common(&launches);
        labels.insert("kubernetes.io/hostname".into(), Value::Fixed(name.clone()));
        let place = Place {
            name,
            labels,
            taints,
            pods: pods.clone(),
            placed: pods,
        };
        Some((
            place,
            cheapest.offering.price,
            capacity(cheapest.it, cheapest.offering).0,
        ))
    }

    fn launches(&mut self, name: &str, claim: &PlannedClaim, base: &[Req]) -> Vec<Launch<'a>> {
        let catalog = self.rec.instance_types(&claim.node_pool);
        let mut out = Vec::new();
        for it_name in &claim.instance_types {
            let Some(it) = catalog.iter().find(|it| it.name == *it_name) else {
                self.out.insert(Violation::new(
                    "instance types",
                    format!("{name}: {it_name} is not in the NodePool's catalog"),
                ));
                continue;
            };
            for o in it.offerings.iter().filter(|o| o.available) {
                if let Some(labels) = launch_labels(base, it, o) {
                    out.push(Launch {
                        it,
                        offering: o,
                        labels,
                    });
                }
            }
        }
        out
    }

    /// One launch: node selection, resources with the daemonsets that may land, host ports.
    fn launch(&mut self, name: &str, l: &Launch<'a>, pods: &[&'a Pod], taints: &[Taint]) {
        let mut used = Amounts::new();
        let mut specs = Vec::new();
        let mut attached = Vec::new();
        for p in pods {
            let uses = volumes::uses(self.rec, p);
            if let Some(why) = volumes::topology(&uses, &l.labels) {
                self.out.insert(Violation::new(
                    "volumes",
                    format!("{}: {why} on {name} as {}", crate::pod_key(p), l.it.name),
                ));
            }
            attached.extend(uses);
            if !NodeSelection::of(p.spec.as_ref()).satisfied(&l.labels) {
                self.out.insert(Violation::new(
                    "node affinity",
                    format!(
                        "{}: not satisfied on {name} as {} in {}",
                        crate::pod_key(p),
                        l.it.name,
                        l.offering.zone
                    ),
                ));
            }
            resources::add(&mut used, &resources::pod_requests(p.spec.as_ref()));
            specs.push(p.spec.as_ref());
        }
        for d in &self.daemons {
            if labels::untolerated(taints, Some(d)).is_none()
                && NodeSelection::of(Some(d)).may_be_satisfied(&l.labels)
            {
                resources::add(&mut used, &resources::pod_requests(Some(d)));
                specs.push(Some(d));
            }
        }
        if let Some(why) = dra::shortfall(self.rec, pods, l.it) {
            self.out.insert(Violation::new(
                "devices",
                format!("{name} as {}: {why}", l.it.name),
            ));
        }
        if let Some(what) = resources::exceeded(&used, &allocatable(l.it, l.offering)) {
            self.out.insert(Violation::new(
                "resources",
                format!("{name} as {}: {what}", l.it.name),
            ));
        }
        if let Some(port) = port_clash(&specs) {
            self.out.insert(Violation::new(
                "host ports",
                format!("{name}: host port {port} used twice"),
            ));
        }
        if let Some(what) = volumes::over_limit(attached.iter(), &volumes::type_limits(l.it)) {
            self.out.insert(Violation::new(
                "volume limits",
                format!("{name} as {}: {what}", l.it.name),
            ));
        }
    }

    fn min_values(&mut self, name: &str, pool: &NodePool, launches: &[Launch<'a>]) {
        for r in &pool.spec.template.spec.requirements {
            let Some(min) = r.min_values.filter(|m| *m > 0) else {
                continue;
            };
            let values: BTreeSet<&str> = launches
                .iter()
                .filter_map(|l| match l.labels.get(&r.key) {
                    Some(Value::Fixed(v)) => Some(v.as_str()),
                    _ => None,
                })
                .collect();
            if (values.len() as i64) < i64::from(min) {
                self.out.insert(Violation::new(
                    "minValues",
                    format!("{name}: {} has {} values < {min}", r.key, values.len()),
                ));
            }
        }
    }
}

/// The labels all launches agree on; where they differ, determined only at launch.
fn common(launches: &[Launch<'_>]) -> Labels {
    let keys: BTreeSet<&String> = launches.iter().flat_map(|l| l.labels.keys()).collect();
    keys.into_iter()
        .map(|k| {
            let mut vals: Vec<Option<&Value>> = Vec::new();
            for v in launches.iter().map(|l| l.labels.get(k)) {
                if !vals.contains(&v) {
                    vals.push(v);
                }
            }
            let fixed: Option<BTreeSet<String>> = vals
                .iter()
                .map(|v| match v {
                    Some(Value::Fixed(x)) => Some(x.clone()),
                    _ => None,
                })
                .collect();
            let v = match (vals.as_slice(), fixed) {
                ([Some(v @ Value::Fixed(_))], _) => (*v).clone(),
                ([None] | [Some(Value::Absent)], _) => Value::Absent,
                (_, Some(set)) => Value::OneOf(set),
                _ => Value::Unknown {
                    excluded: BTreeSet::new(),
                    gt: None,
                    lt: None,
                },
            };
            (k.clone(), v)
        })
        .collect()
}
