//! Setup: interning, dense resources, per-pool instance types, topology groups.

use super::groups::{PoolDomains, bound_anti_groups, filtered_domains, match_groups, record_node};
use super::topology::{GroupKey, GroupKind, NodeFilter, Selector};
use super::*;

impl Solver {
    /// Node requirements: deprecated label keys read as their stable key.
    pub(super) fn ireqs(&mut self, list: &[Requirement]) -> IReqs {
        self.ireqs_keyed(list, normalized_label_key)
    }

    fn ireqs_keyed(&mut self, list: &[Requirement], key: fn(&str) -> &str) -> IReqs {
        let mut r = IReqs::new();
        for q in list {
            let key = self.names.id(key(&q.key));
            let vals = q.values.iter().map(|v| self.names.sym(v)).collect();
            r.add(key, ValueSet::from_operator(q.operator, vals, q.min_values));
        }
        r
    }

    pub(super) fn ilabels(&mut self, labels: &BTreeMap<String, String>) -> Vec<(Key, Sym)> {
        let mut v: Vec<(Key, Sym)> = labels
            .iter()
            .map(|(k, val)| (self.names.id(k), self.names.sym(val)))
            .collect();
        v.sort();
        v
    }

    /// A node's labels with deprecated keys read as their stable key (the stable one wins
    /// when a node has both).
    pub(super) fn node_labels(&mut self, labels: &BTreeMap<String, String>) -> Vec<(Key, Sym)> {
        if !labels.keys().any(|k| normalized_label_key(k) != k) {
            return self.ilabels(labels);
        }
        let mut stable: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in labels {
            let nk = normalized_label_key(k);
            if nk == k || !labels.contains_key(nk) {
                stable.insert(nk.to_string(), v.clone());
            }
        }
        self.ilabels(&stable)
    }

    /// Label requirements (node selector, NodePool labels), keys normalized as in [`Self::ireqs`].
    pub(super) fn label_reqs(&mut self, labels: &BTreeMap<String, String>) -> IReqs {
        let mut r = IReqs::new();
        for (k, v) in labels {
            let key = self.names.id(normalized_label_key(k));
            let val = self.names.sym(v);
            r.add(key, ValueSet::in_values(vec![val]));
        }
        r
    }

    pub(super) fn selector(&mut self, s: &LabelSelector) -> Selector {
        let labels = self.ilabels(&s.match_labels);
        // Pod labels: no key is an alias.
        let exprs = self.ireqs_keyed(&s.match_expressions, |k| k);
        Selector { labels, exprs }
    }

    /// The group of a term: `namespaces` `None` is every namespace, empty the owner's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn group(
        &mut self,
        index: &mut HashMap<GroupKey, usize>,
        kind: GroupKind,
        topology_key: &str,
        namespaces: Option<&[String]>,
        own_ns: u32,
        selector: &LabelSelector,
        filter: NodeFilter,
    ) -> usize {
        let key = self.names.id(topology_key);
        let mut namespaces: Vec<u32> = match namespaces {
            None => Vec::new(),
            Some([]) => vec![own_ns],
            Some(list) => list.iter().map(|n| self.names.id(n)).collect(),
        };
        namespaces.sort();
        namespaces.dedup();
        let gk = GroupKey {
            kind,
            key,
            namespaces,
            selector: self.selector(selector),
            filter,
        };
        // Most terms repeat a group already made: copied only for a new one.
        if let Some(&g) = index.get(&gk) {
            return g;
        }
        let host = topology_key == LABEL_HOSTNAME;
        self.groups.push(Group {
            kind,
            key,
            host,
            namespaces: gk.namespaces.clone(),
            selector: gk.selector.clone(),
            filter: gk.filter.clone(),
            domains: None,
            counts: HashMap::default(),
            host_counts: Vec::new(),
            total: 0,
            owner_counts: HashMap::default(),
            owner_host: Vec::new(),
            owner_total: 0,
        });
        index.insert(gk, self.groups.len() - 1);
        self.groups.len() - 1
    }
}

/// A daemonset as the setup reads it: requirements, tolerations, dense requests.
type DsData = (IReqs, Vec<Toleration>, Vec<i64>);

pub(super) fn build(input: &Input, dra: &crate::dra::Dra) -> Solver {
    build_split(input, dra, super::setup_pods::SPLIT_PODS).0
}

/// [`build`], the pods set up on two threads from `split` pods ([`super::setup_pods`]); and
/// whether they were.
pub(super) fn build_split(input: &Input, dra: &crate::dra::Dra, split: usize) -> (Solver, bool) {
    let mut s = new_solver();
    s.best_effort = input.min_values_policy == MinValuesPolicy::BestEffort;
    let nodepool_key = s.names.id(LABEL_NODEPOOL);
    intern_resources(&mut s, input);
    let ds = daemonsets(&mut s, input);
    let vols = super::volumes::intern(&mut s, input);
    let mut universe: HashMap<Key, Vec<Sym>> = HashMap::default();
    let pool_domains = add_pools(&mut s, input, &ds, nodepool_key, &mut universe);
    add_nodes(&mut s, input, &vols, &mut universe);
    for v in universe.values_mut() {
        v.sort_by(|a, b| s.names.name(a.id).cmp(s.names.name(b.id)));
        v.dedup();
    }
    s.universe = universe;

    // Pods and topology groups.
    let mut gindex: HashMap<GroupKey, usize> = HashMap::default();
    let split = super::setup_pods::setup(&mut s, &mut gindex, input, &vols, split);
    let bound_anti = bound_anti_groups(&mut s, input, &mut gindex);
    match_groups(&mut s, &bound_anti);
    filtered_domains(&mut s, &pool_domains);
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
    super::dra::setup(&mut s, input, dra);
    s.room_columns();
    (s, split)
}

/// An empty solver with the well-known label keys interned.
fn new_solver() -> Solver {
    let mut s = Solver {
        names: Interner::default(),
        res_names: vec![CPU.into(), MEMORY.into(), PODS.into()],
        well_known: Vec::new(),
        zone_key: 0,
        ct_key: 0,
        it_key: 0,
        pools: Vec::new(),
        nodes: Vec::new(),
        node_order: Vec::new(),
        claims: Vec::new(),
        by_count: CountOrder::default(),
        host_cols: Vec::new(),
        mask_keys: Vec::new(),
        groups: Vec::new(),
        universe: HashMap::default(),
        pods: Vec::new(),
        placements: Vec::new(),
        counts: Vec::new(),
        drivers: Vec::new(),
        vol_driver: Vec::new(),
        dra: None,
        best_effort: false,
        cap: f64::INFINITY,
        spent: 0.0,
        budget: f64::INFINITY,
        compat: Default::default(),
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
    s.well_known.sort();
    s
}

/// Resource names: every resource any pod, pool, type, node or daemonset names.
fn intern_resources(s: &mut Solver, input: &Input) {
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
}

/// Daemonsets: requirements and tolerations.
fn daemonsets(s: &mut Solver, input: &Input) -> Vec<DsData> {
    input
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
        .collect()
}

/// NodePools, by weight desc then name desc; their domains join the universe.
fn add_pools(
    s: &mut Solver,
    input: &Input,
    ds: &[DsData],
    nodepool_key: Key,
    universe: &mut HashMap<Key, Vec<Sym>>,
) -> PoolDomains {
    let mut pool_domains = Vec::new();
    let nres = s.res_names.len();
    let mut count_index: HashMap<String, u32> = HashMap::default();
    let mut order: Vec<&NodePool> = input.node_pools.iter().collect();
    order.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));
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
        let types: Vec<TypeData> = np
            .instance_types
            .iter()
            .map(|it| type_data(s, it, ds, &ds_ok, &mut count_index))
            .collect();
        let counted = types.iter().any(|t| t.counted);
        let mut base = BitSet::new(types.len());
        let mut domains: HashMap<Key, Vec<Sym>> = HashMap::default();
        for (i, t) in types.iter().enumerate() {
            if s.type_ok(t, &reqs, Counts::Ignore) {
                base.insert(i);
                for (k, set) in t.reqs.entries() {
                    if !set.complement {
                        let u = domains.entry(*k).or_default();
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
                domains
                    .entry(*k)
                    .or_default()
                    .extend(set.values.iter().copied());
            }
        }
        for (k, v) in domains.iter_mut() {
            v.sort_unstable_by_key(|d| d.id);
            v.dedup();
            universe.entry(*k).or_default().extend(v.iter().copied());
        }
        pool_domains.push(domains);
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
        let launch_order = super::price::launch_order(&types);
        let mut cts: Vec<Sym> = types
            .iter()
            .flat_map(|t| t.offerings.iter().map(|o| o.ct))
            .collect();
        cts.sort_unstable();
        cts.dedup();
        s.pools.push(PoolData {
            launch_order,
            capacity_types: cts.len(),
            name: np.name.clone(),
            taints: np.taints.clone(),
            startup_taints: np.startup_taints.clone(),
            reqs,
            types,
            base,
            remaining,
            nodes_remaining,
            counted,
            dev_types: BitSet::new(0),
        });
    }
    pool_domains
}

/// One instance type of a pool: requirements, usable resources after overhead and the
/// daemonsets that land on it (`ds_ok`: the daemonsets the pool admits), offerings by price.
fn type_data(
    s: &mut Solver,
    it: &InstanceType,
    ds: &[DsData],
    ds_ok: &[bool],
    count_index: &mut HashMap<String, u32>,
) -> TypeData {
    let nres = s.res_names.len();
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
        if ds_ok[i] && untolerated(&it.taints, &ds[i].1).is_none() && treqs.intersects(r).is_ok() {
            for (o, q) in overhead_ds.iter_mut().zip(req) {
                *o += q;
            }
        }
    }
    let usable = (0..nres)
        .map(|i| capacity[i] - overhead[i] - overhead_ds[i])
        .collect();
    let mut offerings: Vec<Off> = it
        .offerings
        .iter()
        .map(|o| Off {
            zone: s.names.sym(&o.zone),
            ct: s.names.sym(&o.capacity_type),
            price: o.price,
            reserved: o.capacity_type == CAPACITY_TYPE_RESERVED,
            available: o.available,
            count: o
                .count
                .as_ref()
                .map_or(UNCOUNTED, |c| count_of(s, count_index, c)),
        })
        .collect();
    offerings.sort_by(|a, b| by_rank(s.rank(a), s.rank(b)));
    let counted = offerings.iter().any(|o| o.count != UNCOUNTED);
    // A price that is not a number is below no limit, as `o.price <= limit` reads it.
    let cheapest_available = (offerings.iter())
        .filter(|o| o.available && !o.price.is_nan())
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min);
    TypeData {
        name: it.name.clone(),
        reqs: treqs,
        usable,
        capacity,
        overhead_ds,
        offerings,
        cheapest_available,
        counted,
        taints: it.taints.clone(),
        vol_limit: super::volumes::dense_limits(&s.drivers, &it.volume_limits),
        dev: None,
    }
}

/// The index of the shared count `c` (the smallest availability stated under one key).
fn count_of(s: &mut Solver, index: &mut HashMap<String, u32>, c: &OfferingCount) -> u32 {
    if let Some(&i) = index.get(&c.key) {
        let count = &mut s.counts[i as usize];
        count.available = count.available.min(c.available);
        count.left = count.left.min(i64::from(c.available));
        return i;
    }
    let i = s.counts.len() as u32;
    s.counts.push(Count {
        key: c.key.clone(),
        available: c.available,
        left: i64::from(c.available),
    });
    index.insert(c.key.clone(), i);
    i
}

/// Existing nodes (their labels join the universe), and the order they are tried in.
fn add_nodes(
    s: &mut Solver,
    input: &Input,
    vols: &super::volumes::VolIndex,
    universe: &mut HashMap<Key, Vec<Sym>>,
) {
    let mut order: Vec<usize> = (0..input.nodes.len()).collect();
    order.sort_by_key(|&i| {
        (
            input.nodes[i].state != NodeState::Ready,
            &input.nodes[i].name,
        )
    });
    s.node_order = order;
    for n in &input.nodes {
        let labels = s.node_labels(&n.labels);
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
            refuses_moving: n.refuses_moving,
            attached: vols.bound(s, n),
            vol_limit: super::volumes::dense_limits(&s.drivers, &n.volume_limits),
            dev: None,
        });
    }
}
