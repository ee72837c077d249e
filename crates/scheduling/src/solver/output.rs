//! The solver's result: NodeClaims with their requirements, placements, unschedulable pods.

use super::*;

pub(super) fn pod_ref(p: &Pod) -> PodRef {
    PodRef {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
    }
}

/// The pods' references the output lists, by pod: made ahead, while a packing runs on another
/// thread ([`Refs::all`]), or when the output needs them ([`Refs::default`]). Every pod is
/// listed once (on a claim, on a node or unschedulable): each reference made ahead is moved out.
#[derive(Default)]
pub(super) struct Refs(Vec<Option<PodRef>>);

impl Refs {
    /// The reference of every pod of `s`.
    pub(super) fn all(s: &Solver, input: &Input) -> Self {
        let refs = (s.pods.iter()).map(|p| Some(pod_ref(&input.pods[p.input])));
        Refs(refs.collect())
    }

    /// Pod `pi`'s reference: the one made ahead, else a new one.
    fn take(&mut self, s: &Solver, input: &Input, pi: usize) -> PodRef {
        (self.0.get_mut(pi).and_then(Option::take))
            .unwrap_or_else(|| pod_ref(&input.pods[s.pods[pi].input]))
    }
}

pub(super) fn output(
    s: &Solver,
    input: &Input,
    failed: Vec<usize>,
    mut errors: HashMap<usize, Vec<(usize, Failure)>>,
    mut refs: Refs,
) -> Output {
    // One buffer for every claim's ranked candidates.
    let mut cands = Vec::new();
    let mut out = Output {
        new_node_claims: Vec::with_capacity(s.claims.len()),
        ..Output::default()
    };
    for c in &s.claims {
        out.new_node_claims
            .extend(new_node_claim(s, input, c, &mut cands, &mut refs));
    }
    for &(pi, ni) in &s.placements {
        out.existing.push(Placement {
            pod: refs.take(s, input, pi),
            node: s.nodes[ni].name.clone(),
        });
    }
    let mut failed = failed;
    failed.sort_by_key(|&pi| s.pods[pi].input);
    for pi in failed {
        let fs = errors.remove(&pi).unwrap_or_default();
        let failures: Vec<(String, Failure)> = fs
            .into_iter()
            .map(|(p, f)| (s.pools[p].name.clone(), f))
            .collect();
        let unplaceable = input.pods[s.pods[pi].input]
            .unplaceable
            .as_deref()
            .or(s.dra_blocked(pi));
        let reason = if let Some(why) = unplaceable {
            why.to_string()
        } else if failures.is_empty() {
            "no existing node has room and no NodePool is defined".to_string()
        } else {
            failures
                .iter()
                .map(|(p, f)| format!("nodepool \"{p}\": {f}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        out.unschedulable.push(Unschedulable {
            pod: refs.take(s, input, pi),
            reason,
            failures,
        });
    }
    out
}

/// A planned claim as a NodeClaim: its requirements (instance types cheapest first, at most
/// [`MAX_INSTANCE_TYPES`]), requests and cheapest offering; `None` when no type has one.
/// `cands` is scratch space.
fn new_node_claim<'s>(
    s: &'s Solver,
    input: &Input,
    c: &Claim,
    cands: &mut Vec<(Rank, &'s str, usize, Sym, Sym)>,
    refs: &mut Refs,
) -> Option<NewNodeClaim> {
    let p = &s.pools[c.pool];
    let held = Counts::Held(c.held);
    cands.clear();
    cands.extend(c.cands.iter().filter_map(|t| {
        s.preferred_offering(&p.types[t], &c.reqs, held)
            .map(|o| (s.rank(&o), p.types[t].name.as_str(), t, o.zone, o.ct))
    }));
    // Ties by name, then index: the order a stable sort of the index order gives.
    cands.sort_unstable_by(|a, b| by_rank(a.0, b.0).then(a.1.cmp(b.1)).then(a.2.cmp(&b.2)));
    cands.truncate(MAX_INSTANCE_TYPES);
    let &((_, price), name, first, zone, ct) = cands.first()?;
    let render = |k: Key, set: &ISet| {
        set.to_requirements(s.names.name(k), |v| s.names.name(v.id).to_string())
    };
    let ct_set = c.reqs.get(&s.ct_key);
    // Each entry renders to one requirement but for rare ones; then capacity type, type.
    let mut requirements: Vec<Requirement> = Vec::with_capacity(c.reqs.entries().len() + 2);
    requirements.extend(
        c.reqs
            .entries()
            .iter()
            .filter(|(k, set)| *k != s.it_key && !(*k == s.ct_key && set.complement))
            .flat_map(|(k, set)| render(*k, set)),
    );
    if ct_set.is_none_or(|set| set.complement) {
        let zones = c.reqs.get(&s.zone_key);
        let mut cts: Vec<Sym> = Vec::new();
        // Until every capacity type of the pool is found.
        'types: for x in cands.iter() {
            for o in &p.types[x.2].offerings {
                if !cts.contains(&o.ct)
                    && s.launchable(o, held)
                    && zones.is_none_or(|set| set.has(&o.zone))
                    && ct_set.is_none_or(|set| set.has(&o.ct))
                {
                    cts.push(o.ct);
                    if cts.len() == p.capacity_types {
                        break 'types;
                    }
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
    Some(NewNodeClaim {
        node_pool: p.name.clone(),
        requirements,
        requests,
        taints: p.taints.clone(),
        startup_taints: p.startup_taints.clone(),
        pods: c.pods.iter().map(|&pi| refs.take(s, input, pi)).collect(),
        cheapest: Cheapest {
            instance_type: name.to_string(),
            zone: s.names.name(zone.id).to_string(),
            capacity_type: s.names.name(ct.id).to_string(),
            price,
        },
        min_values_relaxed: s.best_effort.then_some(c.relaxed),
        dra_drivers: s.claim_drivers(c, p, cands.iter().map(|x| x.2)),
    })
}
