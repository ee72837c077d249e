//! The scheduling simulation (Karpenter's `Scheduler.Solve`).
//!
//! Setup interns every label key and value, turns resources into dense vectors, precomputes per
//! NodePool the compatible instance types (as bitsets), their allocatable minus daemonset
//! overhead, and the topology groups of every spread / (anti-)affinity term. The solve then pops
//! pods in Karpenter's queue order and tries existing nodes, planned NodeClaims (fewest pods
//! first, as Karpenter sorts them) and finally a new NodeClaim per NodePool (by weight); a pod that fits nowhere
//! is relaxed one preference at a time and requeued.

use std::collections::{BTreeMap, HashMap};

use crate::Failure;
use crate::intern::{BitSet, Interner, Key, Sym};
use crate::model::*;
use crate::requirements::{Operator, Reqs, Requirement, ValueSet};

type IReqs = Reqs<Key, Sym>;
type ISet = ValueSet<Sym>;
/// Namespace and labels of a pod.
type MatchKey = (u32, Vec<(Key, Sym)>);

/// Instance types kept on a NodeClaim, cheapest first.
pub const MAX_INSTANCE_TYPES: usize = 600;

struct TypeData {
    name: String,
    reqs: IReqs,
    /// Allocatable minus the pool's daemonset overhead for this type.
    usable: Vec<i64>,
    capacity: Vec<i64>,
    overhead_ds: Vec<i64>,
    /// Sorted by price.
    offerings: Vec<(Sym, Sym, f64, bool)>,
    taints: Vec<Taint>,
}

struct PoolData {
    name: String,
    taints: Vec<Taint>,
    startup_taints: Vec<Taint>,
    reqs: IReqs,
    types: Vec<TypeData>,
    base: BitSet,
    remaining: Vec<i64>,
    nodes_remaining: Option<i64>,
}

struct NodeData {
    name: String,
    labels: Vec<(Key, Sym)>,
    taints: Vec<Taint>,
    free: Vec<i64>,
    ports: Vec<HostPort>,
}

struct Claim {
    pool: usize,
    reqs: IReqs,
    cands: BitSet,
    used: Vec<i64>,
    max_free: Vec<i64>,
    pods: Vec<usize>,
    ports: Vec<HostPort>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum GroupKind {
    Spread(u32),
    Affinity,
    Anti,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Selector {
    labels: Vec<(Key, Sym)>,
    exprs: IReqs,
}

impl Selector {
    fn matches(&self, labels: &[(Key, Sym)]) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| lookup(labels, *k) == Some(*v))
            && self.exprs.matches_labels(|k| lookup(labels, *k)).is_ok()
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    kind: GroupKind,
    key: Key,
    namespaces: Vec<u32>,
    selector: Selector,
}

struct Group {
    kind: GroupKind,
    key: Key,
    host: bool,
    namespaces: Vec<u32>,
    selector: Selector,
    counts: HashMap<Sym, u32>,
    host_counts: Vec<u32>,
    total: u32,
    owner_counts: HashMap<Sym, u32>,
    owner_host: Vec<u32>,
    owner_total: u32,
}

impl Group {
    fn selects(&self, ns: u32, labels: &[(Key, Sym)]) -> bool {
        self.namespaces.contains(&ns) && self.selector.matches(labels)
    }
    fn host_count(&self, slot: usize) -> u32 {
        self.host_counts.get(slot).copied().unwrap_or(0)
    }
    fn owner_host_count(&self, slot: usize) -> u32 {
        self.owner_host.get(slot).copied().unwrap_or(0)
    }
}

fn bump(v: &mut Vec<u32>, slot: usize) {
    if v.len() <= slot {
        v.resize(slot + 1, 0);
    }
    v[slot] += 1;
}

fn lookup(labels: &[(Key, Sym)], k: Key) -> Option<Sym> {
    labels
        .binary_search_by(|(kk, _)| kk.cmp(&k))
        .ok()
        .map(|i| labels[i].1)
}

struct PodData {
    input: usize,
    requests: Vec<i64>,
    ns: u32,
    labels: Vec<(Key, Sym)>,
    tolerations: Vec<Toleration>,
    ports: Vec<HostPort>,
    /// nodeSelector requirements.
    selector_reqs: IReqs,
    required_terms: Vec<IReqs>,
    /// Sorted by weight descending.
    preferred_terms: Vec<IReqs>,
    spreads: Vec<(usize, bool)>,
    affinity: Vec<usize>,
    anti: Vec<usize>,
    pref_affinity: Vec<usize>,
    pref_anti: Vec<usize>,
    /// Groups whose selector matches this pod.
    matched: Vec<usize>,
    /// Required anti-affinity groups whose selector matches this pod (it must avoid their owners).
    repelled: Vec<usize>,
    // Relaxation state.
    term: usize,
    pref_node_removed: usize,
    pref_aff_removed: usize,
    pref_anti_removed: usize,
    schedule_anyway_removed: bool,
    tolerate_prefer_no_schedule: bool,
    reqs: IReqs,
}

impl PodData {
    fn rebuild_reqs(&mut self) {
        let mut r = self.selector_reqs.clone();
        if let Some(t) = self.required_terms.get(self.term) {
            r.intersect(t);
        }
        if let Some(t) = self.preferred_terms.get(self.pref_node_removed) {
            r.intersect(t);
        }
        self.reqs = r;
    }

    /// Active owned topology groups (gid, is-required-anti).
    fn owned(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        let spreads = self
            .spreads
            .iter()
            .filter(|(_, hard)| *hard || !self.schedule_anyway_removed)
            .map(|(g, _)| (*g, false));
        spreads
            .chain(self.affinity.iter().map(|g| (*g, false)))
            .chain(self.anti.iter().map(|g| (*g, true)))
            .chain(
                self.pref_affinity
                    .iter()
                    .skip(self.pref_aff_removed)
                    .map(|g| (*g, false)),
            )
            .chain(
                self.pref_anti
                    .iter()
                    .skip(self.pref_anti_removed)
                    .map(|g| (*g, false)),
            )
    }

    /// Karpenter's relaxation order; false when nothing is left to relax.
    fn relax(&mut self) -> bool {
        if self.term + 1 < self.required_terms.len() {
            self.term += 1;
        } else if self.pref_aff_removed < self.pref_affinity.len() {
            self.pref_aff_removed += 1;
        } else if self.pref_anti_removed < self.pref_anti.len() {
            self.pref_anti_removed += 1;
        } else if self.pref_node_removed < self.preferred_terms.len() {
            self.pref_node_removed += 1;
        } else if !self.schedule_anyway_removed && self.spreads.iter().any(|(_, hard)| !hard) {
            self.schedule_anyway_removed = true;
        } else if !self.tolerate_prefer_no_schedule {
            self.tolerate_prefer_no_schedule = true;
            self.tolerations.push(Toleration::exists(
                None,
                Some(TaintEffect::PreferNoSchedule),
            ));
        } else {
            return false;
        }
        self.rebuild_reqs();
        true
    }
}

/// A per-attempt rule on a non-hostname topology key.
enum DomainRule {
    /// Pick the first domain (cheapest count first) the node allows.
    Pick(Vec<Sym>),
    /// Narrow to this set.
    Narrow(ISet),
    /// Self-affinity bootstrap: first pod domain the node allows, else the first pod domain.
    Bootstrap(Vec<Sym>),
}

struct Rule {
    key: Key,
    rule: DomainRule,
    failure: fn(Key) -> Why,
}

struct Solver {
    names: Interner,
    res_names: Vec<String>,
    well_known: Vec<Key>,
    zone_key: Key,
    ct_key: Key,
    it_key: Key,
    pools: Vec<PoolData>,
    nodes: Vec<NodeData>,
    claims: Vec<Claim>,
    /// Planned claims ordered by pod count ascending (Karpenter tries the emptiest first).
    by_count: CountOrder,
    groups: Vec<Group>,
    /// Per non-hostname key: every known domain, in name order.
    universe: HashMap<Key, Vec<Sym>>,
    pods: Vec<PodData>,
    placements: Vec<(usize, usize)>,
}

fn res_index(res_names: &mut Vec<String>, name: &str) -> usize {
    if let Some(i) = res_names.iter().position(|n| n == name) {
        return i;
    }
    res_names.push(name.to_string());
    res_names.len() - 1
}

fn dense(res_names: &[String], r: &Resources) -> Vec<i64> {
    res_names
        .iter()
        .map(|n| r.get(n).copied().unwrap_or(0))
        .collect()
}

fn fits(req: &[i64], avail: &[i64]) -> bool {
    req.iter().zip(avail).all(|(r, a)| r <= a)
}

impl Solver {
    fn ireqs(&mut self, list: &[Requirement]) -> IReqs {
        let mut r = IReqs::new();
        for q in list {
            let key = self.names.id(&q.key);
            let vals = q.values.iter().map(|v| self.names.sym(v)).collect();
            r.add(key, ValueSet::from_operator(q.operator, vals, q.min_values));
        }
        r
    }

    fn ilabels(&mut self, labels: &BTreeMap<String, String>) -> Vec<(Key, Sym)> {
        let mut v: Vec<(Key, Sym)> = labels
            .iter()
            .map(|(k, val)| (self.names.id(k), self.names.sym(val)))
            .collect();
        v.sort();
        v
    }

    fn label_reqs(&mut self, labels: &BTreeMap<String, String>) -> IReqs {
        let mut r = IReqs::new();
        for (k, v) in labels {
            let key = self.names.id(k);
            let val = self.names.sym(v);
            r.add(key, ValueSet::in_values(vec![val]));
        }
        r
    }

    fn selector(&mut self, s: &LabelSelector) -> Selector {
        let labels = self.ilabels(&s.match_labels);
        let exprs = self.ireqs(&s.match_expressions);
        Selector { labels, exprs }
    }

    fn group(
        &mut self,
        index: &mut HashMap<GroupKey, usize>,
        kind: GroupKind,
        topology_key: &str,
        namespaces: &[String],
        own_ns: u32,
        selector: &LabelSelector,
    ) -> usize {
        let key = self.names.id(topology_key);
        let mut namespaces: Vec<u32> = if namespaces.is_empty() {
            vec![own_ns]
        } else {
            namespaces.iter().map(|n| self.names.id(n)).collect()
        };
        namespaces.sort();
        namespaces.dedup();
        let selector = self.selector(selector);
        let gk = GroupKey {
            kind,
            key,
            namespaces: namespaces.clone(),
            selector: selector.clone(),
        };
        if let Some(&g) = index.get(&gk) {
            return g;
        }
        let host = topology_key == LABEL_HOSTNAME;
        self.groups.push(Group {
            kind,
            key,
            host,
            namespaces,
            selector,
            counts: HashMap::new(),
            host_counts: Vec::new(),
            total: 0,
            owner_counts: HashMap::new(),
            owner_host: Vec::new(),
            owner_total: 0,
        });
        index.insert(gk, self.groups.len() - 1);
        self.groups.len() - 1
    }

    fn allow_undefined(&self, k: &Key) -> bool {
        self.well_known.contains(k)
    }

    fn offering_ok(&self, t: &TypeData, reqs: &IReqs) -> bool {
        let z = reqs.get(&self.zone_key);
        let c = reqs.get(&self.ct_key);
        t.offerings.iter().any(|(zone, ct, _, avail)| {
            *avail && z.is_none_or(|s| s.has(zone)) && c.is_none_or(|s| s.has(ct))
        })
    }

    fn cheapest_offering(&self, t: &TypeData, reqs: &IReqs) -> Option<(Sym, Sym, f64)> {
        let z = reqs.get(&self.zone_key);
        let c = reqs.get(&self.ct_key);
        t.offerings
            .iter()
            .find(|(zone, ct, _, avail)| {
                *avail && z.is_none_or(|s| s.has(zone)) && c.is_none_or(|s| s.has(ct))
            })
            .map(|(z, c, p, _)| (*z, *c, *p))
    }

    fn type_ok(&self, t: &TypeData, reqs: &IReqs) -> bool {
        t.reqs.intersects(reqs).is_ok() && self.offering_ok(t, reqs)
    }

    fn key_name(&self, k: Key) -> String {
        self.names.name(k).to_string()
    }
}

fn build(input: &Input) -> Solver {
    let mut s = Solver {
        names: Interner::default(),
        res_names: vec![CPU.into(), MEMORY.into(), PODS.into()],
        well_known: Vec::new(),
        zone_key: 0,
        ct_key: 0,
        it_key: 0,
        pools: Vec::new(),
        nodes: Vec::new(),
        claims: Vec::new(),
        by_count: CountOrder::default(),
        groups: Vec::new(),
        universe: HashMap::new(),
        pods: Vec::new(),
        placements: Vec::new(),
    };
    // A new node's hostname is unknown: a pod requiring a specific hostname cannot get one.
    s.well_known = WELL_KNOWN_LABELS
        .iter()
        .filter(|k| **k != LABEL_HOSTNAME)
        .map(|k| s.names.id(k))
        .collect();
    s.zone_key = s.names.id(LABEL_ZONE);
    s.ct_key = s.names.id(LABEL_CAPACITY_TYPE);
    s.it_key = s.names.id(LABEL_INSTANCE_TYPE);
    let nodepool_key = s.names.id(LABEL_NODEPOOL);
    s.well_known.sort();

    // Resource names.
    let mut all_res: Vec<&Resources> = Vec::new();
    for p in &input.pods {
        all_res.push(&p.requests);
    }
    for np in &input.node_pools {
        all_res.push(&np.limits);
        for t in &np.instance_types {
            all_res.push(&t.capacity);
        }
    }
    for n in &input.nodes {
        all_res.push(&n.allocatable);
    }
    for d in &input.daemonsets {
        all_res.push(&d.requests);
    }
    for r in all_res {
        for k in r.keys() {
            if k != "nodes" {
                res_index(&mut s.res_names, k);
            }
        }
    }
    let nres = s.res_names.len();

    // Daemonsets: requirements and tolerations.
    let ds: Vec<(IReqs, Vec<Toleration>, Vec<i64>)> = input
        .daemonsets
        .iter()
        .map(|d| {
            let mut r = s.label_reqs(&d.node_selector);
            if let Some(t) = d.required_node_affinity.first() {
                let t = s.ireqs(t);
                r.intersect(&t);
            }
            (r, d.tolerations.clone(), dense(&s.res_names, &d.requests))
        })
        .collect();

    // NodePools, by weight desc then name desc.
    let mut order: Vec<&NodePool> = input.node_pools.iter().collect();
    order.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));
    let mut universe: HashMap<Key, Vec<Sym>> = HashMap::new();
    for np in order {
        let mut reqs = s.ireqs(&np.requirements);
        let labels = s.label_reqs(&np.labels);
        reqs.intersect(&labels);
        let pool_sym = s.names.sym(&np.name);
        reqs.add(nodepool_key, ValueSet::in_values(vec![pool_sym]));
        let ds_ok: Vec<bool> = ds
            .iter()
            .map(|(r, tol, _)| {
                untolerated(&np.taints, tol).is_none()
                    && reqs.compatible(r, |k| s.well_known.contains(k)).is_ok()
            })
            .collect();
        let mut types = Vec::new();
        for it in &np.instance_types {
            let mut treqs = s.ireqs(&it.requirements);
            // Labels the provider puts on its shapes are well known (Karpenter registers
            // provider labels such as instance generation as well-known labels).
            for (k, _) in treqs.entries() {
                if let Err(i) = s.well_known.binary_search(k) {
                    s.well_known.insert(i, *k);
                }
            }
            let name = s.names.sym(&it.name);
            treqs.add(s.it_key, ValueSet::in_values(vec![name]));
            let zones = it.offerings.iter().map(|o| s.names.sym(&o.zone)).collect();
            let cts = it
                .offerings
                .iter()
                .map(|o| s.names.sym(&o.capacity_type))
                .collect();
            treqs.add(s.zone_key, ValueSet::in_values(zones));
            treqs.add(s.ct_key, ValueSet::in_values(cts));
            let capacity = dense(&s.res_names, &it.capacity);
            let overhead = dense(&s.res_names, &it.overhead);
            let mut overhead_ds = vec![0; nres];
            for (i, (r, _, req)) in ds.iter().enumerate() {
                if ds_ok[i]
                    && untolerated(&it.taints, &ds[i].1).is_none()
                    && treqs.intersects(r).is_ok()
                {
                    for (o, q) in overhead_ds.iter_mut().zip(req) {
                        *o += q;
                    }
                }
            }
            let usable = (0..nres)
                .map(|i| capacity[i] - overhead[i] - overhead_ds[i])
                .collect();
            let mut offerings: Vec<(Sym, Sym, f64, bool)> = it
                .offerings
                .iter()
                .map(|o| {
                    (
                        s.names.sym(&o.zone),
                        s.names.sym(&o.capacity_type),
                        o.price,
                        o.available,
                    )
                })
                .collect();
            offerings.sort_by(|a, b| a.2.total_cmp(&b.2));
            types.push(TypeData {
                name: it.name.clone(),
                reqs: treqs,
                usable,
                capacity,
                overhead_ds,
                offerings,
                taints: it.taints.clone(),
            });
        }
        let mut base = BitSet::new(types.len());
        for (i, t) in types.iter().enumerate() {
            if s.type_ok(t, &reqs) {
                base.insert(i);
                for (k, set) in t.reqs.entries() {
                    if !set.complement {
                        let u = universe.entry(*k).or_default();
                        u.extend(
                            set.values
                                .iter()
                                .filter(|v| reqs.get(k).is_none_or(|r| r.has(v))),
                        );
                    }
                }
            }
        }
        for (k, set) in reqs.entries() {
            if !set.complement {
                universe
                    .entry(*k)
                    .or_default()
                    .extend(set.values.iter().copied());
            }
        }
        let remaining = (0..nres)
            .map(|i| {
                let n = &s.res_names[i];
                np.limits
                    .get(n)
                    .map_or(i64::MAX, |l| l - np.usage.get(n).copied().unwrap_or(0))
            })
            .collect();
        let nodes_remaining = np
            .limits
            .get("nodes")
            .map(|l| l - np.usage.get("nodes").copied().unwrap_or(0));
        s.pools.push(PoolData {
            name: np.name.clone(),
            taints: np.taints.clone(),
            startup_taints: np.startup_taints.clone(),
            reqs,
            types,
            base,
            remaining,
            nodes_remaining,
        });
    }

    // Existing nodes.
    for n in &input.nodes {
        let labels = s.ilabels(&n.labels);
        for (k, v) in &labels {
            universe.entry(*k).or_default().push(*v);
        }
        let taints = n
            .taints
            .iter()
            .filter(|t| {
                n.state == NodeState::Ready
                    || !(EPHEMERAL_TAINT_KEYS.contains(&t.key.as_str())
                        || n.startup_taints.contains(t))
            })
            .cloned()
            .collect();
        let alloc = dense(&s.res_names, &n.allocatable);
        let used = dense(&s.res_names, &n.requested);
        s.nodes.push(NodeData {
            name: n.name.clone(),
            labels,
            taints,
            free: alloc.iter().zip(&used).map(|(a, u)| a - u).collect(),
            ports: n.pods.iter().flat_map(|p| p.host_ports.clone()).collect(),
        });
    }
    for v in universe.values_mut() {
        v.sort_by(|a, b| s.names.name(a.id).cmp(s.names.name(b.id)));
        v.dedup();
    }
    s.universe = universe;

    // Pods and topology groups.
    let mut gindex: HashMap<GroupKey, usize> = HashMap::new();
    let pods_id = res_index(&mut s.res_names, PODS);
    for (pi, p) in input.pods.iter().enumerate() {
        let ns = s.names.id(&p.namespace);
        let labels = s.ilabels(&p.labels);
        let mut requests = dense(&s.res_names, &p.requests);
        if requests[pods_id] == 0 {
            requests[pods_id] = 1;
        }
        let selector_reqs = s.label_reqs(&p.node_selector);
        let required_terms = p
            .required_node_affinity
            .iter()
            .map(|t| s.ireqs(t))
            .collect();
        let mut pref: Vec<&Weighted<Vec<Requirement>>> = p.preferred_node_affinity.iter().collect();
        pref.sort_by_key(|w| std::cmp::Reverse(w.weight));
        let preferred_terms = pref.iter().map(|w| s.ireqs(&w.term)).collect();
        let mut spreads = Vec::new();
        for t in &p.topology_spread {
            let g = s.group(
                &mut gindex,
                GroupKind::Spread(t.max_skew.max(1)),
                &t.topology_key,
                &[],
                ns,
                &t.selector,
            );
            spreads.push((g, t.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule));
        }
        let mut terms = |s: &mut Solver, kind, list: Vec<&PodAffinityTerm>| -> Vec<usize> {
            list.into_iter()
                .map(|t| {
                    s.group(
                        &mut gindex,
                        kind,
                        &t.topology_key,
                        &t.namespaces,
                        ns,
                        &t.selector,
                    )
                })
                .collect()
        };
        let affinity = terms(&mut s, GroupKind::Affinity, p.pod_affinity.iter().collect());
        let anti = terms(
            &mut s,
            GroupKind::Anti,
            p.pod_anti_affinity.iter().collect(),
        );
        let mut pa: Vec<&Weighted<PodAffinityTerm>> = p.preferred_pod_affinity.iter().collect();
        pa.sort_by_key(|w| std::cmp::Reverse(w.weight));
        let pref_affinity = terms(
            &mut s,
            GroupKind::Affinity,
            pa.iter().map(|w| &w.term).collect(),
        );
        let mut pn: Vec<&Weighted<PodAffinityTerm>> =
            p.preferred_pod_anti_affinity.iter().collect();
        pn.sort_by_key(|w| std::cmp::Reverse(w.weight));
        let pref_anti = terms(
            &mut s,
            GroupKind::Anti,
            pn.iter().map(|w| &w.term).collect(),
        );
        let mut pd = PodData {
            input: pi,
            requests,
            ns,
            labels,
            tolerations: p.tolerations.clone(),
            ports: p.host_ports.clone(),
            selector_reqs,
            required_terms,
            preferred_terms,
            spreads,
            affinity,
            anti,
            pref_affinity,
            pref_anti,
            matched: Vec::new(),
            repelled: Vec::new(),
            term: 0,
            pref_node_removed: 0,
            pref_aff_removed: 0,
            pref_anti_removed: 0,
            schedule_anyway_removed: false,
            tolerate_prefer_no_schedule: false,
            reqs: IReqs::new(),
        };
        pd.rebuild_reqs();
        s.pods.push(pd);
    }
    // Bound pods' required anti-affinity creates groups too.
    let mut bound_anti: Vec<(usize, usize)> = Vec::new();
    for (ni, n) in input.nodes.iter().enumerate() {
        for bp in &n.pods {
            let ns = s.names.id(&bp.namespace);
            for t in &bp.pod_anti_affinity {
                let g = s.group(
                    &mut gindex,
                    GroupKind::Anti,
                    &t.topology_key,
                    &t.namespaces,
                    ns,
                    &t.selector,
                );
                bound_anti.push((ni, g));
            }
        }
    }
    // Which groups each pod matches (cached by namespace + labels).
    let mut cache: HashMap<MatchKey, Vec<usize>> = HashMap::new();
    for pi in 0..s.pods.len() {
        let key = (s.pods[pi].ns, s.pods[pi].labels.clone());
        let matched = cache
            .entry(key)
            .or_insert_with(|| {
                (0..s.groups.len())
                    .filter(|g| s.groups[*g].selects(s.pods[pi].ns, &s.pods[pi].labels))
                    .collect()
            })
            .clone();
        s.pods[pi].matched = matched;
    }
    // Required-anti owners among pending pods, so matched pods know to avoid them.
    let mut required_anti = vec![false; s.groups.len()];
    for p in &s.pods {
        for g in &p.anti {
            required_anti[*g] = true;
        }
    }
    for (_, g) in &bound_anti {
        required_anti[*g] = true;
    }
    for p in s.pods.iter_mut() {
        p.repelled = p
            .matched
            .iter()
            .copied()
            .filter(|g| required_anti[*g] && s.groups[*g].kind == GroupKind::Anti)
            .collect();
    }
    // Counts from bound pods.
    for (ni, n) in input.nodes.iter().enumerate() {
        for bp in &n.pods {
            let ns = s.names.id(&bp.namespace);
            let labels = s.ilabels(&bp.labels);
            for g in 0..s.groups.len() {
                if s.groups[g].selects(ns, &labels) {
                    record_node(&mut s, g, ni, false);
                }
            }
        }
    }
    for (ni, g) in bound_anti {
        record_node(&mut s, g, ni, true);
    }
    s
}

/// Records a pod on existing node `ni` into group `g` (as owner or as matching pod).
fn record_node(s: &mut Solver, g: usize, ni: usize, owner: bool) {
    let key = s.groups[g].key;
    let dom = lookup(&s.nodes[ni].labels, key);
    let grp = &mut s.groups[g];
    if owner {
        grp.owner_total += 1;
        if grp.host {
            bump(&mut grp.owner_host, ni);
        } else if let Some(d) = dom {
            *grp.owner_counts.entry(d).or_default() += 1;
        }
    } else {
        grp.total += 1;
        if grp.host {
            bump(&mut grp.host_counts, ni);
        } else if let Some(d) = dom {
            *grp.counts.entry(d).or_default() += 1;
        }
    }
}

/// Per-attempt view of one pod's topology: cheap host checks and domain rules.
struct TopoPlan {
    /// (group, kind) checks on the hostname key.
    host: Vec<(usize, HostCheck)>,
    rules: Vec<Rule>,
}

#[derive(Clone, Copy)]
enum HostCheck {
    Spread { max: u32, selfsel: u32 },
    Affinity { bootstrap: bool },
    Anti,
    Repelled,
}

fn incompat_key(e: crate::requirements::Incompatibility<Key>) -> Key {
    match e {
        crate::requirements::Incompatibility::NoCommonValue(k)
        | crate::requirements::Incompatibility::Undefined(k) => k,
    }
}

/// A failure without allocation (ids instead of names); see [`Solver::expand`].
#[derive(Clone, Copy, Debug)]
enum Why {
    Requirements(Key),
    /// Every otherwise compatible shape has a taint the pod does not tolerate: pool, type
    /// and taint index.
    Taint(usize, usize, usize),
    NoCompatibleInstanceType,
    InsufficientResources(usize),
    MinValues {
        key: Key,
        want: u32,
        got: u32,
    },
    TopologySpread(Key),
    PodAffinity(Key),
    PodAntiAffinity(Key),
    HostPort(u16),
}

use Why::PodAffinity as affinity_failure;
use Why::PodAntiAffinity as anti_failure;
use Why::TopologySpread as spread_failure;

impl Solver {
    fn pod_domains(&self, pod: &PodData, key: Key) -> Vec<Sym> {
        let empty = Vec::new();
        let u = self.universe.get(&key).unwrap_or(&empty);
        match pod.reqs.get(&key) {
            None => u.clone(),
            Some(r) => u.iter().copied().filter(|d| r.has(d)).collect(),
        }
    }

    fn plan(&self, pod: &PodData) -> TopoPlan {
        let mut plan = TopoPlan {
            host: Vec::new(),
            rules: Vec::new(),
        };
        for (g, _) in pod.owned() {
            let grp = &self.groups[g];
            let selfsel = u32::from(grp.selects(pod.ns, &pod.labels));
            if grp.host {
                let check = match grp.kind {
                    GroupKind::Spread(max) => HostCheck::Spread { max, selfsel },
                    GroupKind::Affinity => HostCheck::Affinity {
                        bootstrap: grp.total == 0 && selfsel == 1,
                    },
                    GroupKind::Anti => HostCheck::Anti,
                };
                plan.host.push((g, check));
                continue;
            }
            let pd = self.pod_domains(pod, grp.key);
            let count = |d: &Sym| grp.counts.get(d).copied().unwrap_or(0);
            let rule = match grp.kind {
                GroupKind::Spread(max) => {
                    let min = pd.iter().map(count).min().unwrap_or(0);
                    let mut allowed: Vec<(u32, usize, Sym)> = pd
                        .iter()
                        .enumerate()
                        .filter(|(_, d)| count(d) + selfsel <= min + max)
                        .map(|(i, d)| (count(d), i, *d))
                        .collect();
                    allowed.sort();
                    Rule {
                        key: grp.key,
                        rule: DomainRule::Pick(allowed.into_iter().map(|x| x.2).collect()),
                        failure: spread_failure,
                    }
                }
                GroupKind::Affinity => {
                    let options: Vec<Sym> = pd.iter().copied().filter(|d| count(d) > 0).collect();
                    if options.is_empty() && selfsel == 1 {
                        Rule {
                            key: grp.key,
                            rule: DomainRule::Bootstrap(pd),
                            failure: affinity_failure,
                        }
                    } else {
                        Rule {
                            key: grp.key,
                            rule: DomainRule::Narrow(ISet::in_values(options)),
                            failure: affinity_failure,
                        }
                    }
                }
                GroupKind::Anti => {
                    let options: Vec<Sym> = pd.iter().copied().filter(|d| count(d) == 0).collect();
                    // Like Karpenter, land in one empty domain (so only that one is blocked).
                    Rule {
                        key: grp.key,
                        rule: DomainRule::Pick(options),
                        failure: anti_failure,
                    }
                }
            };
            plan.rules.push(rule);
        }
        for &g in &pod.repelled {
            let grp = &self.groups[g];
            if grp.owner_total == 0 {
                continue;
            }
            if grp.host {
                plan.host.push((g, HostCheck::Repelled));
            } else {
                let blocked: Vec<Sym> = grp
                    .owner_counts
                    .iter()
                    .filter(|(_, c)| **c > 0)
                    .map(|(d, _)| *d)
                    .collect();
                plan.rules.push(Rule {
                    key: grp.key,
                    rule: DomainRule::Narrow(ISet::not_in(blocked)),
                    failure: anti_failure,
                });
            }
        }
        plan
    }

    fn expand(&self, w: Why) -> Failure {
        match w {
            Why::Requirements(k) => Failure::Requirements(self.key_name(k)),
            Why::NoCompatibleInstanceType => Failure::NoCompatibleInstanceType,
            Why::Taint(pool, t, i) => match self.pools[pool].types[t].taints.get(i) {
                Some(taint) => taint_failure(taint),
                None => Failure::NoCompatibleInstanceType,
            },
            Why::InsufficientResources(r) => {
                Failure::InsufficientResources(self.res_names.get(r).cloned().unwrap_or_default())
            }
            Why::MinValues { key, want, got } => Failure::MinValues {
                key: self.key_name(key),
                want,
                got,
            },
            Why::TopologySpread(k) => Failure::TopologySpread(self.key_name(k)),
            Why::PodAffinity(k) => Failure::PodAffinity(self.key_name(k)),
            Why::PodAntiAffinity(k) => Failure::PodAntiAffinity(self.key_name(k)),
            Why::HostPort(p) => Failure::HostPort(p),
        }
    }

    fn host_ok(&self, plan: &TopoPlan, slot: usize) -> Result<(), Why> {
        for &(g, check) in &plan.host {
            let grp = &self.groups[g];
            let ok = match check {
                HostCheck::Spread { max, selfsel } => grp.host_count(slot) + selfsel <= max,
                HostCheck::Affinity { bootstrap } => bootstrap || grp.host_count(slot) > 0,
                HostCheck::Anti => grp.host_count(slot) == 0,
                HostCheck::Repelled => grp.owner_host_count(slot) == 0,
            };
            if !ok {
                let k = grp.key;
                return Err(match grp.kind {
                    GroupKind::Spread(_) => Why::TopologySpread(k),
                    GroupKind::Affinity => Why::PodAffinity(k),
                    GroupKind::Anti => Why::PodAntiAffinity(k),
                });
            }
        }
        Ok(())
    }

    /// Applies the domain rules to `reqs` (a node's or claim's requirements, already intersected
    /// with the pod's).
    fn apply_rules(&self, plan: &TopoPlan, reqs: &mut IReqs) -> Result<(), Why> {
        for r in &plan.rules {
            let nd = reqs.get(&r.key);
            let narrowed = match &r.rule {
                DomainRule::Pick(order) => order
                    .iter()
                    .find(|d| nd.is_none_or(|s| s.has(d)))
                    .map(|d| ISet::in_values(vec![*d])),
                DomainRule::Narrow(set) => {
                    let n = nd.map_or_else(|| set.clone(), |s| s.intersection(set));
                    (!n.is_empty()).then_some(n)
                }
                DomainRule::Bootstrap(pd) => pd
                    .iter()
                    .find(|d| nd.is_none_or(|s| s.has(d)))
                    .or(pd.first())
                    .filter(|d| nd.is_none_or(|s| s.has(d)))
                    .map(|d| ISet::in_values(vec![*d])),
            };
            match narrowed {
                Some(n) => reqs.add(r.key, n),
                None => return Err((r.failure)(r.key)),
            }
        }
        Ok(())
    }

    /// Cheap pre-check of the domain rules against fixed node domains (no allocation).
    fn rules_possible(&self, plan: &TopoPlan, node: &IReqs, pod: &IReqs) -> Result<(), Why> {
        for r in &plan.rules {
            let a = node.get(&r.key);
            let b = pod.get(&r.key);
            let allowed = |d: &Sym| a.is_none_or(|s| s.has(d)) && b.is_none_or(|s| s.has(d));
            let ok = match &r.rule {
                DomainRule::Pick(order) | DomainRule::Bootstrap(order) => order.iter().any(allowed),
                DomainRule::Narrow(set) => {
                    if set.complement {
                        true
                    } else {
                        set.values.iter().any(allowed)
                    }
                }
            };
            if !ok {
                return Err((r.failure)(r.key));
            }
        }
        Ok(())
    }

    fn record(&mut self, pod: usize, slot: usize, reqs: Option<&IReqs>) {
        let labels = if slot < self.nodes.len() {
            Some(self.nodes[slot].labels.clone())
        } else {
            None
        };
        let domains = |s: &Solver, key: Key, all: bool| -> Vec<Sym> {
            if let Some(l) = &labels {
                return lookup(l, key).into_iter().collect();
            }
            match reqs.and_then(|r| r.get(&key)) {
                Some(set) if !set.complement && (all || set.values.len() == 1) => {
                    set.values.clone()
                }
                Some(set) if all => s
                    .universe
                    .get(&key)
                    .map(|u| u.iter().copied().filter(|d| set.has(d)).collect())
                    .unwrap_or_default(),
                None if all => s.universe.get(&key).cloned().unwrap_or_default(),
                _ => Vec::new(),
            }
        };
        let matched = self.pods[pod].matched.clone();
        for g in matched {
            let (host, key, anti) = {
                let grp = &self.groups[g];
                (grp.host, grp.key, grp.kind == GroupKind::Anti)
            };
            let doms = if host {
                Vec::new()
            } else {
                domains(self, key, anti)
            };
            let grp = &mut self.groups[g];
            grp.total += 1;
            if host {
                bump(&mut grp.host_counts, slot);
            } else {
                for d in doms {
                    *grp.counts.entry(d).or_default() += 1;
                }
            }
        }
        let owners = self.pods[pod].anti.clone();
        for g in owners {
            let (host, key) = (self.groups[g].host, self.groups[g].key);
            let doms = if host {
                Vec::new()
            } else {
                domains(self, key, true)
            };
            let grp = &mut self.groups[g];
            grp.owner_total += 1;
            if host {
                bump(&mut grp.owner_host, slot);
            } else {
                for d in doms {
                    *grp.owner_counts.entry(d).or_default() += 1;
                }
            }
        }
    }
}

/// Claim indices kept sorted by pod count ascending in O(1) per change: `order[end[k-1]..end[k]]`
/// holds the claims with exactly `k` pods.
#[derive(Default)]
struct CountOrder {
    order: Vec<usize>,
    pos: Vec<usize>,
    end: Vec<usize>,
}

impl CountOrder {
    fn swap(&mut self, a: usize, b: usize) {
        self.order.swap(a, b);
        self.pos[self.order[a]] = a;
        self.pos[self.order[b]] = b;
    }

    /// Adds claim `claim` (the next index) with one pod.
    fn push(&mut self, claim: usize) {
        if self.end.is_empty() {
            self.end = vec![0, 0];
        }
        let n = self.order.len();
        self.order.push(claim);
        if self.pos.len() <= claim {
            self.pos.resize(claim + 1, 0);
        }
        self.pos[claim] = n;
        let mut p = n;
        for k in (2..self.end.len()).rev() {
            let first = self.end[k - 1];
            if first < self.end[k] {
                self.swap(p, first);
                p = first;
            }
            self.end[k] += 1;
        }
        self.end[1] += 1;
    }

    /// Claim `claim` goes from `from` pods to `from + 1`.
    fn increment(&mut self, claim: usize, from: usize) {
        if from + 1 >= self.end.len() {
            self.end.push(self.order.len());
        }
        let last = self.end[from] - 1;
        self.swap(self.pos[claim], last);
        self.end[from] -= 1;
    }
}

fn taint_failure(t: &Taint) -> Failure {
    Failure::Taint(format!("{}={}:{:?}", t.key, t.value, t.effect))
}

/// Result of a successful tentative add to a claim.
struct ClaimUpdate {
    reqs: Option<IReqs>,
    cands: BitSet,
    used: Vec<i64>,
    max_free: Vec<i64>,
}

impl Solver {
    fn pool_check(&self, pool: usize, pod: &PodData) -> Result<(), Failure> {
        let p = &self.pools[pool];
        if let Some(t) = untolerated(&p.taints, &pod.tolerations) {
            return Err(taint_failure(t));
        }
        p.reqs
            .compatible(&pod.reqs, |k| self.allow_undefined(k))
            .map_err(|e| Failure::Requirements(self.key_name(incompat_key(e))))
    }

    /// Tries to add pod to a claim state (existing claim or a fresh one).
    #[allow(clippy::too_many_arguments)]
    fn try_claim(
        &self,
        pool: usize,
        reqs: &IReqs,
        cands: &BitSet,
        used: &[i64],
        ports: &[HostPort],
        slot: usize,
        pod: &PodData,
        plan: &TopoPlan,
    ) -> Result<ClaimUpdate, Why> {
        if let Some(hp) = pod.host_ports_conflict(ports) {
            return Err(Why::HostPort(hp));
        }
        self.host_ok(plan, slot)?;
        reqs.compatible(&pod.reqs, |k| self.allow_undefined(k))
            .map_err(|e| Why::Requirements(incompat_key(e)))?;
        self.rules_possible(plan, reqs, &pod.reqs)?;
        let new_reqs = if pod.reqs.is_empty() && plan.rules.is_empty() {
            None
        } else {
            let mut r = reqs.clone();
            r.intersect(&pod.reqs);
            self.apply_rules(plan, &mut r)?;
            if r == *reqs { None } else { Some(r) }
        };
        let new_used: Vec<i64> = used.iter().zip(&pod.requests).map(|(a, b)| a + b).collect();
        let p = &self.pools[pool];
        let mut out = BitSet::new(p.types.len());
        let mut max_free = vec![i64::MIN; new_used.len()];
        let mut any_req_ok = false;
        let mut best_short: Option<usize> = None;
        let mut untolerated_taint: Option<(usize, usize)> = None;
        for t in cands.iter() {
            let td = &p.types[t];
            if let Some(r) = &new_reqs
                && !self.type_ok(td, r)
            {
                continue;
            }
            if let Some(i) = td
                .taints
                .iter()
                .position(|t| !pod.tolerations.iter().any(|tol| tol.tolerates(t)))
            {
                untolerated_taint.get_or_insert((t, i));
                continue;
            }
            any_req_ok = true;
            if !fits(&new_used, &td.usable) {
                if best_short.is_none() {
                    best_short = new_used.iter().zip(&td.usable).position(|(u, a)| u > a);
                }
                continue;
            }
            out.insert(t);
            for (m, (a, u)) in max_free.iter_mut().zip(td.usable.iter().zip(&new_used)) {
                *m = (*m).max(a - u);
            }
        }
        if out.is_empty() {
            if let (false, Some((t, i))) = (any_req_ok, untolerated_taint) {
                return Err(Why::Taint(pool, t, i));
            }
            if !any_req_ok {
                return Err(Why::NoCompatibleInstanceType);
            }
            return Err(Why::InsufficientResources(best_short.unwrap_or(0)));
        }
        let final_reqs = new_reqs.as_ref().unwrap_or(reqs);
        self.check_min_values(pool, final_reqs, &out)?;
        Ok(ClaimUpdate {
            reqs: new_reqs,
            cands: out,
            used: new_used,
            max_free,
        })
    }

    fn check_min_values(&self, pool: usize, reqs: &IReqs, cands: &BitSet) -> Result<(), Why> {
        for (k, set) in reqs.entries() {
            let Some(min) = set.min_values else { continue };
            let mut vals: Vec<Sym> = Vec::new();
            for t in cands.iter() {
                if let Some(ts) = self.pools[pool].types[t].reqs.get(k) {
                    vals.extend(ts.values.iter().filter(|v| set.has(v)));
                }
            }
            vals.sort();
            vals.dedup();
            if vals.len() < min as usize {
                return Err(Why::MinValues {
                    key: *k,
                    want: min,
                    got: vals.len() as u32,
                });
            }
        }
        Ok(())
    }

    fn try_existing(&self, ni: usize, pod: &PodData, plan: &TopoPlan) -> bool {
        let n = &self.nodes[ni];
        if !fits(&pod.requests, &n.free) {
            return false;
        }
        if untolerated(&n.taints, &pod.tolerations).is_some() {
            return false;
        }
        if pod.reqs.matches_labels(|k| lookup(&n.labels, *k)).is_err() {
            return false;
        }
        if pod.host_ports_conflict(&n.ports).is_some() {
            return false;
        }
        if self.host_ok(plan, ni).is_err() {
            return false;
        }
        // The node's domain is its label; a node without the label is no domain of the
        // constraint (only an exclusion can hold there).
        plan.rules.iter().all(|r| match lookup(&n.labels, r.key) {
            None => matches!(&r.rule, DomainRule::Narrow(set) if set.complement),
            Some(d) => match &r.rule {
                DomainRule::Pick(order) | DomainRule::Bootstrap(order) => order.contains(&d),
                DomainRule::Narrow(set) => set.has(&d),
            },
        })
    }

    /// Schedules one pod; Err carries the per-pool failures.
    fn add(&mut self, pi: usize) -> Result<(), Vec<(usize, Failure)>> {
        let plan = self.plan(&self.pods[pi]);
        // 1. Existing and in-flight nodes.
        for ni in 0..self.nodes.len() {
            if self.try_existing(ni, &self.pods[pi], &plan) {
                let req = self.pods[pi].requests.clone();
                let n = &mut self.nodes[ni];
                for (f, r) in n.free.iter_mut().zip(&req) {
                    *f -= r;
                }
                n.ports.extend(self.pods[pi].host_ports());
                self.record(pi, ni, None);
                self.placements.push((pi, ni));
                return Ok(());
            }
        }
        // 2. Planned NodeClaims, fewest pods first.
        let pool_ok: Vec<Result<(), Failure>> = (0..self.pools.len())
            .map(|p| self.pool_check(p, &self.pods[pi]))
            .collect();
        let base = self.nodes.len();
        for oi in 0..self.by_count.order.len() {
            let ci = self.by_count.order[oi];
            let c = &self.claims[ci];
            if !fits(&self.pods[pi].requests, &c.max_free) || pool_ok[c.pool].is_err() {
                continue;
            }
            if let Ok(u) = self.try_claim(
                c.pool,
                &c.reqs,
                &c.cands,
                &c.used,
                &c.ports,
                base + ci,
                &self.pods[pi],
                &plan,
            ) {
                self.commit(pi, ci, u);
                return Ok(());
            }
        }
        // 3. A new NodeClaim, pools by weight.
        let mut failures = Vec::new();
        for (pool, ok) in pool_ok.into_iter().enumerate() {
            if let Err(f) = ok {
                failures.push((pool, f));
                continue;
            }
            match self.new_claim(pool, pi, &plan) {
                Ok(()) => return Ok(()),
                Err(f) => failures.push((pool, f)),
            }
        }
        Err(failures)
    }

    fn new_claim(&mut self, pool: usize, pi: usize, plan: &TopoPlan) -> Result<(), Failure> {
        let p = &self.pools[pool];
        if p.nodes_remaining.is_some_and(|n| n <= 0) {
            return Err(Failure::Limits("nodes".into()));
        }
        let mut cands = BitSet::new(p.types.len());
        let mut limited: Option<usize> = None;
        for t in p.base.iter() {
            let cap = &p.types[t].capacity;
            match cap.iter().zip(&p.remaining).position(|(c, r)| c > r) {
                None => cands.insert(t),
                Some(r) => limited = limited.or(Some(r)),
            }
        }
        if cands.is_empty() {
            return Err(match limited {
                Some(r) => Failure::Limits(self.res_names[r].clone()),
                None => Failure::NoCompatibleInstanceType,
            });
        }
        let used = vec![0; self.res_names.len()];
        let slot = self.nodes.len() + self.claims.len();
        let u = match self.try_claim(
            pool,
            &p.reqs,
            &cands,
            &used,
            &[],
            slot,
            &self.pods[pi],
            plan,
        ) {
            Ok(u) => u,
            // A type above the limit would have fitted: the limit is what failed.
            Err(Why::InsufficientResources(_)) if let Some(r) = limited => {
                return Err(Failure::Limits(self.res_names[r].clone()));
            }
            Err(e) => return Err(self.expand(e)),
        };
        let reqs = self.pools[pool].reqs.clone();
        self.claims.push(Claim {
            pool,
            reqs,
            cands: BitSet::new(0),
            used,
            max_free: Vec::new(),
            pods: Vec::new(),
            ports: Vec::new(),
        });
        let ci = self.claims.len() - 1;
        self.by_count.push(ci);
        self.commit(pi, ci, u);
        // Limits: subtract the largest candidate capacity.
        let p = &mut self.pools[pool];
        let mut maxcap = vec![0i64; p.remaining.len()];
        for t in self.claims[ci].cands.iter() {
            for (m, c) in maxcap.iter_mut().zip(&p.types[t].capacity) {
                *m = (*m).max(*c);
            }
        }
        for (r, m) in p.remaining.iter_mut().zip(&maxcap) {
            if *r != i64::MAX {
                *r -= m;
            }
        }
        if let Some(n) = p.nodes_remaining.as_mut() {
            *n -= 1;
        }
        Ok(())
    }

    fn commit(&mut self, pi: usize, ci: usize, u: ClaimUpdate) {
        let slot = self.nodes.len() + ci;
        let before = self.claims[ci].pods.len();
        if before > 0 {
            self.by_count.increment(ci, before);
        }
        let ports = self.pods[pi].host_ports();
        let c = &mut self.claims[ci];
        if let Some(r) = u.reqs {
            c.reqs = r;
        }
        c.cands = u.cands;
        c.used = u.used;
        c.max_free = u.max_free;
        c.pods.push(pi);
        c.ports.extend(ports);
        let reqs = c.reqs.clone();
        self.record(pi, slot, Some(&reqs));
    }
}

impl PodData {
    fn host_ports_conflict(&self, ports: &[HostPort]) -> Option<u16> {
        self.host_ports_ref()
            .iter()
            .find(|hp| ports.iter().any(|o| o.conflicts(hp)))
            .map(|hp| hp.port)
    }
}

impl PodData {
    fn host_ports_ref(&self) -> &[HostPort] {
        &self.ports
    }
    fn host_ports(&self) -> Vec<HostPort> {
        self.ports.clone()
    }
}

fn pod_ref(p: &Pod) -> PodRef {
    PodRef {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
    }
}

/// Runs one scheduling simulation. Deterministic: the same input gives the same output.
pub fn solve(input: &Input) -> Output {
    let mut s = build(input);
    let cpu = 0;
    let mem = 1;
    // Queue: cpu desc, memory desc, creation, uid.
    let mut queue: Vec<usize> = (0..s.pods.len()).collect();
    queue.sort_by(|&a, &b| {
        let (pa, pb) = (&s.pods[a], &s.pods[b]);
        let (ia, ib) = (&input.pods[pa.input], &input.pods[pb.input]);
        pb.requests[cpu]
            .cmp(&pa.requests[cpu])
            .then(pb.requests[mem].cmp(&pa.requests[mem]))
            .then(ia.creation.cmp(&ib.creation))
            .then_with(|| ia.uid.cmp(&ib.uid))
    });
    let mut queue: std::collections::VecDeque<usize> = queue.into();
    let mut last_len = vec![usize::MAX; s.pods.len()];
    let mut errors: Vec<Vec<(usize, Failure)>> = vec![Vec::new(); s.pods.len()];
    while let Some(&pi) = queue.front() {
        if last_len[pi] == queue.len() {
            break;
        }
        last_len[pi] = queue.len();
        queue.pop_front();
        match s.add(pi) {
            Ok(()) => errors[pi].clear(),
            Err(f) => {
                errors[pi] = f;
                let relaxed = s.pods[pi].relax();
                queue.push_back(pi);
                if relaxed {
                    last_len.iter_mut().for_each(|l| *l = usize::MAX);
                }
            }
        }
    }
    output(&s, input, queue.into_iter().collect(), errors)
}

fn output(
    s: &Solver,
    input: &Input,
    failed: Vec<usize>,
    mut errors: Vec<Vec<(usize, Failure)>>,
) -> Output {
    let mut out = Output::default();
    for c in &s.claims {
        let p = &s.pools[c.pool];
        let mut cands: Vec<(f64, &str, usize, Sym, Sym)> = c
            .cands
            .iter()
            .filter_map(|t| {
                s.cheapest_offering(&p.types[t], &c.reqs)
                    .map(|(z, ct, price)| (price, p.types[t].name.as_str(), t, z, ct))
            })
            .collect();
        cands.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
        cands.truncate(MAX_INSTANCE_TYPES);
        let Some(&(price, name, first, zone, ct)) = cands.first() else {
            continue;
        };
        let render = |k: Key, set: &ISet| {
            set.to_requirements(s.names.name(k), |v| s.names.name(v.id).to_string())
        };
        let ct_set = c.reqs.get(&s.ct_key);
        let mut requirements: Vec<Requirement> = c
            .reqs
            .entries()
            .iter()
            .filter(|(k, set)| *k != s.it_key && !(*k == s.ct_key && set.complement))
            .flat_map(|(k, set)| render(*k, set))
            .collect();
        if ct_set.is_none_or(|set| set.complement) {
            let zones = c.reqs.get(&s.zone_key);
            let mut cts: Vec<Sym> = Vec::new();
            for x in &cands {
                for (z, ct, _, avail) in &p.types[x.2].offerings {
                    if *avail
                        && zones.is_none_or(|set| set.has(z))
                        && ct_set.is_none_or(|set| set.has(ct))
                    {
                        cts.push(*ct);
                    }
                }
            }
            requirements.extend(render(s.ct_key, &ISet::in_values(cts)));
        }
        requirements.push(Requirement {
            key: LABEL_INSTANCE_TYPE.to_string(),
            operator: Operator::In,
            values: cands.iter().map(|x| x.1.to_string()).collect(),
            min_values: c.reqs.get(&s.it_key).and_then(|set| set.min_values),
        });
        let td = &p.types[first];
        let requests = s
            .res_names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let v = c.used[i] + td.overhead_ds[i];
                (v != 0).then(|| (n.clone(), v))
            })
            .collect();
        out.new_node_claims.push(NewNodeClaim {
            node_pool: p.name.clone(),
            requirements,
            requests,
            taints: p.taints.clone(),
            startup_taints: p.startup_taints.clone(),
            pods: c
                .pods
                .iter()
                .map(|&pi| pod_ref(&input.pods[s.pods[pi].input]))
                .collect(),
            cheapest: Cheapest {
                instance_type: name.to_string(),
                zone: s.names.name(zone.id).to_string(),
                capacity_type: s.names.name(ct.id).to_string(),
                price,
            },
        });
    }
    for &(pi, ni) in &s.placements {
        out.existing.push(Placement {
            pod: pod_ref(&input.pods[s.pods[pi].input]),
            node: s.nodes[ni].name.clone(),
        });
    }
    let mut failed = failed;
    failed.sort_by_key(|&pi| s.pods[pi].input);
    for pi in failed {
        let fs = std::mem::take(&mut errors[pi]);
        let failures: Vec<(String, Failure)> = fs
            .into_iter()
            .map(|(p, f)| (s.pools[p].name.clone(), f))
            .collect();
        let reason = if failures.is_empty() {
            "no existing node has room and no NodePool is defined".to_string()
        } else {
            failures
                .iter()
                .map(|(p, f)| format!("nodepool \"{p}\": {f}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        out.unschedulable.push(Unschedulable {
            pod: pod_ref(&input.pods[s.pods[pi].input]),
            reason,
            failures,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::CountOrder;

    #[test]
    fn count_order_stays_sorted() {
        let mut o = CountOrder::default();
        let mut counts: Vec<usize> = Vec::new();
        let mut x: u64 = 7;
        for step in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if counts.is_empty() || step % 7 == 0 {
                o.push(counts.len());
                counts.push(1);
            } else {
                let c = (x >> 33) as usize % counts.len();
                o.increment(c, counts[c]);
                counts[c] += 1;
            }
            let seen: Vec<usize> = o.order.iter().map(|c| counts[*c]).collect();
            assert!(
                seen.windows(2).all(|w| w[0] <= w[1]),
                "step {step}: {seen:?}"
            );
            for (p, c) in o.order.iter().enumerate() {
                assert_eq!(o.pos[*c], p);
            }
        }
    }
}
