//! Topology groups (spread, pod affinity and anti-affinity) and the per-attempt domain rules.

use super::*;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum GroupKind {
    /// maxSkew, minDomains (0: none).
    Spread(u32, u32),
    Affinity,
    Anti,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct Selector {
    pub(super) labels: Vec<(Key, Sym)>,
    pub(super) exprs: IReqs,
}

impl Selector {
    pub(super) fn matches(&self, labels: &[(Key, Sym)]) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| lookup(labels, *k) == Some(*v))
            && self.exprs.matches_labels(|k| lookup(labels, *k)).is_ok()
    }
}

/// Which nodes a topology spread counts (`nodeTaintsPolicy`, `nodeAffinityPolicy`); the
/// default (empty) filter counts every node, as affinity groups always do.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(super) struct NodeFilter {
    /// `nodeTaintsPolicy: Honor`: the owner's tolerations.
    pub(super) tolerations: Option<Vec<Toleration>>,
    /// `nodeAffinityPolicy: Honor` with a node selection: a node counts if it is compatible
    /// with one of these (node selector ∩ each required term); empty: every node.
    pub(super) affinity: Vec<IReqs>,
}

impl NodeFilter {
    pub(super) fn is_empty(&self) -> bool {
        self.tolerations.is_none() && self.affinity.is_empty()
    }

    fn tolerates(&self, taints: &[Taint]) -> bool {
        self.tolerations
            .as_ref()
            .is_none_or(|tol| untolerated(taints, tol).is_none())
    }

    /// Whether an existing node counts.
    pub(super) fn node(&self, taints: &[Taint], labels: &[(Key, Sym)]) -> bool {
        self.tolerates(taints)
            && (self.affinity.is_empty()
                || self
                    .affinity
                    .iter()
                    .any(|r| r.matches_labels(|k| lookup(labels, *k)).is_ok()))
    }

    /// Whether a NodeClaim with these taints and requirements counts.
    pub(super) fn claim(
        &self,
        taints: &[Taint],
        reqs: &IReqs,
        allow_undefined: impl Fn(&Key) -> bool + Copy,
    ) -> bool {
        self.tolerates(taints)
            && (self.affinity.is_empty()
                || self
                    .affinity
                    .iter()
                    .any(|r| reqs.compatible(r, allow_undefined).is_ok()))
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct GroupKey {
    pub(super) kind: GroupKind,
    pub(super) key: Key,
    pub(super) namespaces: Vec<u32>,
    pub(super) selector: Selector,
    pub(super) filter: NodeFilter,
}

#[derive(Clone)]
pub(super) struct Group {
    pub(super) kind: GroupKind,
    pub(super) key: Key,
    pub(super) host: bool,
    /// Empty: every namespace.
    pub(super) namespaces: Vec<u32>,
    pub(super) selector: Selector,
    pub(super) filter: NodeFilter,
    /// With a non-empty filter (non-hostname spreads): the domains the filter admits, in name
    /// order (else every domain of the key, [`Solver::universe`]).
    pub(super) domains: Option<Vec<Sym>>,
    pub(super) counts: HashMap<Sym, u32>,
    pub(super) host_counts: Vec<u32>,
    pub(super) total: u32,
    pub(super) owner_counts: HashMap<Sym, u32>,
    pub(super) owner_host: Vec<u32>,
    pub(super) owner_total: u32,
}

impl Group {
    /// What makes the group: its [`GroupKey`].
    pub(super) fn group_key(&self) -> GroupKey {
        GroupKey {
            kind: self.kind,
            key: self.key,
            namespaces: self.namespaces.clone(),
            selector: self.selector.clone(),
            filter: self.filter.clone(),
        }
    }

    pub(super) fn selects(&self, ns: u32, labels: &[(Key, Sym)]) -> bool {
        (self.namespaces.is_empty() || self.namespaces.contains(&ns))
            && self.selector.matches(labels)
    }
    pub(super) fn host_count(&self, slot: usize) -> u32 {
        self.host_counts.get(slot).copied().unwrap_or(0)
    }
    pub(super) fn owner_host_count(&self, slot: usize) -> u32 {
        self.owner_host.get(slot).copied().unwrap_or(0)
    }
}

pub(super) fn bump(v: &mut Vec<u32>, slot: usize) {
    if v.len() <= slot {
        v.resize(slot + 1, 0);
    }
    v[slot] += 1;
}

pub(super) fn lookup(labels: &[(Key, Sym)], k: Key) -> Option<Sym> {
    labels
        .binary_search_by(|(kk, _)| kk.cmp(&k))
        .ok()
        .map(|i| labels[i].1)
}

/// A per-attempt rule on a non-hostname topology key.
pub(super) enum DomainRule {
    /// Pick the first domain (cheapest count first) the node allows.
    Pick(Vec<Sym>),
    /// Narrow to this set.
    Narrow(ISet),
    /// Self-affinity bootstrap: first pod domain the node allows, else the first pod domain.
    Bootstrap(Vec<Sym>),
}

pub(super) struct Rule {
    pub(super) key: Key,
    pub(super) rule: DomainRule,
    pub(super) failure: fn(Key) -> Why,
}

/// Per-attempt view of one pod's topology: cheap host checks and domain rules.
pub(super) struct TopoPlan {
    /// (group, kind) checks on the hostname key.
    pub(super) host: Vec<(usize, HostCheck)>,
    pub(super) rules: Vec<Rule>,
    /// Pick rules on more than one key: their domains are chosen together
    /// ([`Solver::apply_rules_jointly`]).
    pub(super) joint: bool,
}

/// Whether `rules` pick domains of more than one key.
fn picks_several_keys(rules: &[Rule]) -> bool {
    let mut keys = rules.iter().filter_map(|r| match r.rule {
        DomainRule::Pick(_) => Some(r.key),
        _ => None,
    });
    keys.next().is_some_and(|k| keys.any(|o| o != k))
}

/// Combinations [`Solver::apply_rules_jointly`] tries at most.
const MAX_JOINT_PICKS: u32 = 64;

#[derive(Clone, Copy)]
pub(super) enum HostCheck {
    Spread { max: u32, selfsel: u32 },
    Affinity { bootstrap: bool },
    Anti,
    Repelled,
}

use Why::PodAffinity as affinity_failure;
use Why::PodAntiAffinity as anti_failure;
use Why::TopologySpread as spread_failure;

impl Solver {
    /// The domains of `key` that `reqs` allow.
    pub(super) fn domains_within(&self, reqs: &IReqs, key: Key) -> Vec<Sym> {
        let empty = Vec::new();
        let u = self.universe.get(&key).unwrap_or(&empty);
        match reqs.get(&key) {
            None => u.clone(),
            Some(r) => u.iter().copied().filter(|d| r.has(d)).collect(),
        }
    }

    /// The domains of group `grp` (its filtered ones, else every one of its key) that `reqs`
    /// allow.
    fn group_domains(&self, grp: &Group, reqs: &IReqs) -> Vec<Sym> {
        let Some(ds) = &grp.domains else {
            return self.domains_within(reqs, grp.key);
        };
        match reqs.get(&grp.key) {
            None => ds.clone(),
            Some(r) => ds.iter().copied().filter(|d| r.has(d)).collect(),
        }
    }

    pub(super) fn plan(&self, pod: &PodData) -> TopoPlan {
        let mut plan = TopoPlan {
            host: Vec::new(),
            rules: Vec::new(),
            joint: false,
        };
        for (g, _) in pod.owned() {
            let grp = &self.groups[g];
            let selfsel = u32::from(grp.selects(pod.ns, &pod.labels));
            if grp.host {
                let check = match grp.kind {
                    GroupKind::Spread(max, _) => HostCheck::Spread { max, selfsel },
                    GroupKind::Affinity => HostCheck::Affinity {
                        bootstrap: grp.total == 0 && selfsel == 1,
                    },
                    GroupKind::Anti => HostCheck::Anti,
                };
                plan.host.push((g, check));
                continue;
            }
            let pd = self.group_domains(grp, &pod.reqs);
            let count = |d: &Sym| grp.counts.get(d).copied().unwrap_or(0);
            let rule = match grp.kind {
                GroupKind::Spread(max, min_domains) => {
                    // The minimum is over the domains the pod's required node selection allows;
                    // preferred node affinity narrows where it goes, not the skew's baseline.
                    let eligible = self.group_domains(grp, &pod.strict_reqs);
                    let min = if (eligible.len() as u64) < u64::from(min_domains) {
                        0
                    } else {
                        eligible.iter().map(count).min().unwrap_or(0)
                    };
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
        plan.joint = picks_several_keys(&plan.rules);
        plan
    }

    pub(super) fn host_ok(&self, plan: &TopoPlan, slot: usize) -> Result<(), Why> {
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
                    GroupKind::Spread(..) => Why::TopologySpread(k),
                    GroupKind::Affinity => Why::PodAffinity(k),
                    GroupKind::Anti => Why::PodAntiAffinity(k),
                });
            }
        }
        Ok(())
    }

    /// Applies the domain rules to `reqs` (a node's or claim's requirements, already intersected
    /// with the pod's).
    pub(super) fn apply_rules(&self, plan: &TopoPlan, reqs: &mut IReqs) -> Result<(), Why> {
        plan.rules.iter().try_for_each(|r| self.apply_rule(r, reqs))
    }

    fn apply_rule(&self, r: &Rule, reqs: &mut IReqs) -> Result<(), Why> {
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
            Some(n) => {
                reqs.add(r.key, n);
                Ok(())
            }
            None => Err((r.failure)(r.key)),
        }
    }

    /// [`Self::apply_rules`] for a plan that picks domains of several keys (zone and capacity
    /// type spreads): when the first domain of each does not make a combination `feasible`
    /// accepts (no offering has that zone and capacity type), the next combinations in pick
    /// order are tried, as Karpenter's retries over its unordered domains find one.
    pub(super) fn apply_rules_jointly(
        &self,
        plan: &TopoPlan,
        reqs: &mut IReqs,
        feasible: &dyn Fn(&IReqs) -> bool,
    ) -> Result<(), Why> {
        if !plan.joint {
            return self.apply_rules(plan, reqs);
        }
        let mut first = reqs.clone();
        self.apply_rules(plan, &mut first)?;
        if feasible(&first) {
            *reqs = first;
            return Ok(());
        }
        let mut budget = MAX_JOINT_PICKS;
        *reqs = self
            .search(&plan.rules, reqs, &mut budget, feasible)
            .unwrap_or(first);
        Ok(())
    }

    /// Depth-first over the pick rules' domains: the first combination `feasible` accepts.
    fn search(
        &self,
        rules: &[Rule],
        reqs: &IReqs,
        budget: &mut u32,
        feasible: &dyn Fn(&IReqs) -> bool,
    ) -> Option<IReqs> {
        let Some((r, rest)) = rules.split_first() else {
            *budget = budget.saturating_sub(1);
            return feasible(reqs).then(|| reqs.clone());
        };
        let DomainRule::Pick(order) = &r.rule else {
            let mut next = reqs.clone();
            self.apply_rule(r, &mut next).ok()?;
            return self.search(rest, &next, budget, feasible);
        };
        let nd = reqs.get(&r.key);
        for d in order.iter().filter(|d| nd.is_none_or(|s| s.has(d))) {
            if *budget == 0 {
                return None;
            }
            let mut next = reqs.clone();
            next.add(r.key, ISet::in_values(vec![*d]));
            if let Some(found) = self.search(rest, &next, budget, feasible) {
                return Some(found);
            }
        }
        None
    }

    /// Cheap pre-check of the domain rules against fixed node domains (no allocation).
    pub(super) fn rules_possible(
        &self,
        plan: &TopoPlan,
        node: &IReqs,
        pod: &IReqs,
    ) -> Result<(), Why> {
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

    /// Whether a pod placed on `slot` (an existing node, else a claim with `reqs`) counts for
    /// group `g` (its node filter admits the node).
    fn counts_on(&self, g: usize, slot: usize, reqs: Option<&IReqs>) -> bool {
        let filter = &self.groups[g].filter;
        if filter.is_empty() {
            return true;
        }
        if let Some(n) = self.nodes.get(slot) {
            return filter.node(&n.taints, &n.labels);
        }
        let Some(c) = self.claims.get(slot - self.nodes.len()) else {
            return true;
        };
        let pool = &self.pools[c.pool];
        filter.claim(&pool.taints, reqs.unwrap_or(&c.reqs), |k| {
            self.allow_undefined(k)
        })
    }

    pub(super) fn record(&mut self, pod: usize, slot: usize, reqs: Option<&IReqs>) {
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
        // The pod's groups, copied out (a few indices): the pod may be shared with a packing on
        // another thread, whose reference count is not to be touched on every add.
        let pd = &self.pods[pod];
        let matched: smallvec::SmallVec<[usize; 8]> = pd.matched.iter().copied().collect();
        let anti: smallvec::SmallVec<[usize; 4]> = pd.anti.iter().copied().collect();
        for g in matched {
            if !self.counts_on(g, slot, reqs) {
                continue;
            }
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
        for g in anti {
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

impl Solver {
    /// What a claim's requirements aside rules the pod out: host ports, topology on the
    /// node's slot, the pod's requirements, its topology rules.
    pub(super) fn claim_prechecks(
        &self,
        reqs: &IReqs,
        ports: &[HostPort],
        slot: usize,
        pod: &PodData,
        plan: &TopoPlan,
    ) -> Result<(), Why> {
        if let Some(hp) = pod.host_ports_conflict(ports) {
            return Err(Why::HostPort(hp));
        }
        self.host_ok(plan, slot)?;
        reqs.compatible(&pod.reqs, |k| self.allow_undefined(k))
            .map_err(|e| Why::Requirements(incompat_key(e)))?;
        self.rules_possible(plan, reqs, &pod.reqs)
    }
}
