//! The solver's remembered answers against computing them afresh: the types compatible with
//! a claim's requirements ([`Solver::compatible_types`]) and the launch search over types by
//! their best offering ([`Solver::claim_launch`]).

use super::*;

/// A type with one offering per `(zone, price, spot)`.
fn ty(name: &str, cpu: i64, offers: &[(&str, f64, bool)]) -> InstanceType {
    InstanceType {
        volume_limits: Default::default(),
        name: name.into(),
        requirements: vec![Requirement::new(LABEL_OS, Operator::In, &["linux"])],
        capacity: [(CPU.to_string(), cpu), (MEMORY.to_string(), 1 << 34)].into(),
        overhead: Resources::new(),
        offerings: offers
            .iter()
            .map(|(zone, price, spot)| Offering {
                zone: zone.to_string(),
                capacity_type: if *spot { "spot" } else { "on-demand" }.into(),
                price: *price,
                available: true,
                count: None,
            })
            .collect(),
        taints: Vec::new(),
    }
}

fn solver() -> Solver {
    let types = vec![
        ty("a-only", 2000, &[("zone-a", 0.2, false)]),
        ty("b-only", 2000, &[("zone-b", 0.1, false)]),
        ty(
            "both",
            4000,
            &[("zone-a", 0.4, false), ("zone-b", 0.3, true)],
        ),
        // Equal best price to `b-only`: the lower index wins a tie.
        ty(
            "b-twin",
            4000,
            &[("zone-b", 0.1, false), ("zone-a", 0.5, false)],
        ),
        ty(
            "dear",
            8000,
            &[("zone-a", 0.9, false), ("zone-b", 0.05, true)],
        ),
    ];
    let input = Input {
        node_pools: vec![NodePool::new("default", types)],
        nodes: Vec::new(),
        daemonsets: Vec::new(),
        pods: Vec::new(),
        min_values_policy: Default::default(),
    };
    build::build(&input, &crate::dra::Dra::default())
}

fn reqs(s: &mut Solver, list: &[Requirement]) -> IReqs {
    let mut r = s.pools[0].reqs.clone();
    r.intersect(&s.ireqs(list));
    r
}

fn afresh(s: &Solver, r: &IReqs) -> Vec<usize> {
    let types = &s.pools[0].types;
    (0..types.len())
        .filter(|t| s.type_ok(&types[*t], r, Counts::Ignore))
        .collect()
}

#[test]
fn compatible_types_are_remembered_per_requirements() {
    let mut s = solver();
    let zone_a = reqs(
        &mut s,
        &[Requirement::new(LABEL_ZONE, Operator::In, &["zone-a"])],
    );
    let spot = reqs(
        &mut s,
        &[Requirement::new(
            LABEL_CAPACITY_TYPE,
            Operator::In,
            &["spot"],
        )],
    );
    let first = s.compatible_types(0, &zone_a);
    assert_eq!(first.iter().collect::<Vec<_>>(), afresh(&s, &zone_a));
    // Positive control: other requirements, another answer, not the one remembered.
    let other = s.compatible_types(0, &spot);
    assert_eq!(other.iter().collect::<Vec<_>>(), afresh(&s, &spot));
    assert_ne!(*first, *other);
    assert_eq!(other.iter().collect::<Vec<_>>(), vec![2, 4]);
    // Asked again: the same set, remembered (and shared by a clone, as the packings are).
    let clone = s.clone();
    assert!(Arc::ptr_eq(&first, &clone.compatible_types(0, &zone_a)));
    assert_eq!(first.iter().collect::<Vec<_>>(), vec![0, 2, 3, 4]);
}

#[test]
fn the_launch_search_finds_the_first_cheapest_candidate() {
    let mut s = solver();
    let n = s.pools[0].types.len();
    let any = s.pools[0].reqs.clone();
    let zone_a = reqs(
        &mut s,
        &[Requirement::new(LABEL_ZONE, Operator::In, &["zone-a"])],
    );
    let on_demand = reqs(
        &mut s,
        &[Requirement::new(
            LABEL_CAPACITY_TYPE,
            Operator::In,
            &["on-demand"],
        )],
    );
    // Every candidate set against a scan of every candidate (first minimum by rank).
    for r in [&any, &zone_a, &on_demand] {
        for mask in 0u32..(1 << n) {
            let mut cands = BitSet::new(n);
            for t in (0..n).filter(|t| mask & (1 << t) != 0) {
                cands.insert(t);
            }
            let scan = cands
                .iter()
                .filter_map(|t| {
                    let o = s.preferred_offering(&s.pools[0].types[t], r, Counts::Held(None))?;
                    Some((s.rank(&o), t))
                })
                .min_by(|a, b| by_rank(a.0, b.0))
                .map_or((f64::INFINITY, usize::MAX), |(r, t)| (r.1, t));
            assert_eq!(s.claim_launch(0, r, &cands, None), scan, "mask {mask:b}");
        }
    }
    // Positive controls: the spot offering of `dear` wins anywhere; in zone-a on-demand only
    // `a-only` at 0.2; `b-only` and `b-twin` tie on demand and the lower index wins.
    let all = {
        let mut c = BitSet::new(n);
        (0..n).for_each(|t| c.insert(t));
        c
    };
    assert_eq!(s.claim_launch(0, &any, &all, None), (0.05, 4));
    assert_eq!(s.claim_launch(0, &zone_a, &all, None).1, 0);
    assert_eq!(s.claim_launch(0, &on_demand, &all, None), (0.1, 1));
}
