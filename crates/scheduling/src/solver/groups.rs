//! Setup, continued: each pending pod's interned requirements and topology groups, the
//! groups of bound pods' anti-affinity, which groups select which pods, and each group's
//! eligible domains.

use super::topology::{GroupKey, GroupKind, NodeFilter, bump, lookup};
use super::*;

/// Per pool (in [`Solver::pools`] order): the domains of each key its types and requirements
/// give, as Karpenter's topology domain groups hold them.
pub(super) type PoolDomains = Vec<HashMap<Key, Vec<Sym>>>;

/// The namespaces of an affinity term for [`Solver::group`].
fn term_namespaces(t: &PodAffinityTerm) -> Option<&[String]> {
    (!t.all_namespaces).then_some(t.namespaces.as_slice())
}

/// One pending pod: interned requirements and the topology groups of its terms.
pub(super) fn pod_data(
    s: &mut Solver,
    gindex: &mut HashMap<GroupKey, usize>,
    pods_id: usize,
    pi: usize,
    p: &Pod,
) -> PodData {
    let ns = s.names.id(&p.namespace);
    let labels = s.ilabels(&p.labels);
    let mut requests = dense(&s.res_names, &p.requests);
    if requests[pods_id] == 0 {
        requests[pods_id] = 1;
    }
    let selector_reqs = s.label_reqs(&p.node_selector);
    let required_terms: Vec<IReqs> = p
        .required_node_affinity
        .iter()
        .map(|t| s.ireqs(t))
        .collect();
    let mut pref: Vec<&Weighted<Vec<Requirement>>> = p.preferred_node_affinity.iter().collect();
    pref.sort_by_key(|w| std::cmp::Reverse(w.weight));
    let preferred_terms = pref.iter().map(|w| s.ireqs(&w.term)).collect();
    let vol_alts = p.volume_requirements.iter().map(|t| s.ireqs(t)).collect();
    let mut spreads = Vec::new();
    for t in &p.topology_spread {
        let filter = spread_filter(t, p, &selector_reqs, &required_terms);
        let g = s.group(
            gindex,
            GroupKind::Spread(t.max_skew.max(1), t.min_domains.unwrap_or(0)),
            &t.topology_key,
            Some(&[]),
            ns,
            &t.selector,
            filter,
        );
        spreads.push((g, t.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule));
    }
    let mut terms = |s: &mut Solver, kind, list: Vec<&PodAffinityTerm>| -> Vec<usize> {
        list.into_iter()
            .map(|t| {
                s.group(
                    gindex,
                    kind,
                    &t.topology_key,
                    term_namespaces(t),
                    ns,
                    &t.selector,
                    NodeFilter::default(),
                )
            })
            .collect()
    };
    let affinity = terms(s, GroupKind::Affinity, p.pod_affinity.iter().collect());
    let anti = terms(s, GroupKind::Anti, p.pod_anti_affinity.iter().collect());
    let mut pa: Vec<&Weighted<PodAffinityTerm>> = p.preferred_pod_affinity.iter().collect();
    pa.sort_by_key(|w| std::cmp::Reverse(w.weight));
    let pref_affinity = terms(s, GroupKind::Affinity, pa.iter().map(|w| &w.term).collect());
    let mut pn: Vec<&Weighted<PodAffinityTerm>> = p.preferred_pod_anti_affinity.iter().collect();
    pn.sort_by_key(|w| std::cmp::Reverse(w.weight));
    let pref_anti = terms(s, GroupKind::Anti, pn.iter().map(|w| &w.term).collect());
    let mut pd = PodData {
        input: pi,
        requests,
        ns,
        labels,
        tolerations: p.tolerations.clone(),
        ports: p.host_ports.clone(),
        moving: p.moving,
        selector_reqs,
        required_terms,
        preferred_terms,
        vol_alts,
        vol_alt: 0,
        vols: Vec::new(),
        dra: None,
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
        strict_reqs: IReqs::new(),
    };
    pd.rebuild_reqs();
    pd
}

/// The node filter of a spread constraint of `p` (Kubernetes' node inclusion policies).
fn spread_filter(
    t: &TopologySpread,
    p: &Pod,
    selector_reqs: &IReqs,
    required_terms: &[IReqs],
) -> NodeFilter {
    let tolerations =
        (t.node_taints_policy == NodeInclusionPolicy::Honor).then(|| p.tolerations.clone());
    let affinity = if t.node_affinity_policy == NodeInclusionPolicy::Ignore {
        Vec::new()
    } else if required_terms.is_empty() {
        if selector_reqs.is_empty() {
            Vec::new()
        } else {
            vec![selector_reqs.clone()]
        }
    } else {
        required_terms
            .iter()
            .map(|term| {
                let mut r = selector_reqs.clone();
                r.intersect(term);
                r
            })
            .collect()
    };
    NodeFilter {
        tolerations,
        affinity,
    }
}

/// Bound pods' required anti-affinity creates groups too: (node, group) of each term.
pub(super) fn bound_anti_groups(
    s: &mut Solver,
    input: &Input,
    gindex: &mut HashMap<GroupKey, usize>,
) -> Vec<(usize, usize)> {
    let mut bound_anti: Vec<(usize, usize)> = Vec::new();
    for (ni, n) in input.nodes.iter().enumerate() {
        for bp in &n.pods {
            let ns = s.names.id(&bp.namespace);
            for t in &bp.pod_anti_affinity {
                let g = s.group(
                    gindex,
                    GroupKind::Anti,
                    &t.topology_key,
                    term_namespaces(t),
                    ns,
                    &t.selector,
                    NodeFilter::default(),
                );
                bound_anti.push((ni, g));
            }
        }
    }
    bound_anti
}

/// Which groups each pod matches, and which required anti-affinity groups repel it.
pub(super) fn match_groups(s: &mut Solver, bound_anti: &[(usize, usize)]) {
    // Cached by namespace + labels.
    let mut cache: HashMap<MatchKey, Vec<usize>> = HashMap::default();
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
        s.pod_mut(pi).matched = matched;
    }
    // Required-anti owners among pending pods, so matched pods know to avoid them.
    let mut required_anti = vec![false; s.groups.len()];
    for p in &s.pods {
        for g in &p.anti {
            required_anti[*g] = true;
        }
    }
    for (_, g) in bound_anti {
        required_anti[*g] = true;
    }
    for p in s.pods.iter_mut() {
        let p = Arc::make_mut(p);
        p.repelled = p
            .matched
            .iter()
            .copied()
            .filter(|g| required_anti[*g] && s.groups[*g].kind == GroupKind::Anti)
            .collect();
    }
}

/// The domains of each spread group with a node filter: those of the NodePools whose taints
/// it tolerates (when it honours taints) and of the existing nodes it admits.
pub(super) fn filtered_domains(s: &mut Solver, pool_domains: &PoolDomains) {
    for g in 0..s.groups.len() {
        let grp = &s.groups[g];
        if grp.filter.is_empty() || grp.host || !matches!(grp.kind, GroupKind::Spread(..)) {
            continue;
        }
        let mut ds: Vec<Sym> = Vec::new();
        for (pool, domains) in s.pools.iter().zip(pool_domains) {
            let tolerated = grp
                .filter
                .tolerations
                .as_ref()
                .is_none_or(|tol| untolerated(&pool.taints, tol).is_none());
            if tolerated && let Some(v) = domains.get(&grp.key) {
                ds.extend(v.iter().copied());
            }
        }
        for n in &s.nodes {
            if grp.filter.node(&n.taints, &n.labels)
                && let Some(d) = lookup(&n.labels, grp.key)
            {
                ds.push(d);
            }
        }
        ds.sort_by(|a, b| s.names.name(a.id).cmp(s.names.name(b.id)));
        ds.dedup();
        s.groups[g].domains = Some(ds);
    }
}

/// Records a pod on existing node `ni` into group `g` (as owner or as matching pod; a
/// matching pod only where the group's node filter admits the node).
pub(super) fn record_node(s: &mut Solver, g: usize, ni: usize, owner: bool) {
    if !owner
        && !s.groups[g]
            .filter
            .node(&s.nodes[ni].taints, &s.nodes[ni].labels)
    {
        return;
    }
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
