//! Behaviour corpus: resources, requirements, taints, instance-type choice.
mod common;
use common::*;

#[test]
fn single_pod_gets_cheapest_type_that_fits() {
    let out = solve(&input(vec![pool("default")], vec![pod("p", 3000, 512)]));
    assert_eq!(out.new_node_claims.len(), 1);
    let c = &out.new_node_claims[0];
    assert_eq!(c.cheapest.instance_type, "medium");
    assert_eq!(c.instance_types(), vec!["medium", "large", "xlarge"]);
    assert_eq!(c.node_pool, "default");
}

#[test]
fn pods_are_packed_onto_one_claim() {
    // 4 × 1 cpu do not fit medium (3.9 allocatable) but fit large.
    let out = solve(&input(vec![pool("default")], pods("p", 4, 1000, 256)));
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].pods.len(), 4);
    assert_eq!(out.new_node_claims[0].cheapest.instance_type, "large");
    assert_eq!(out.new_node_claims[0].requests[CPU], 4000);
    assert_eq!(out.new_node_claims[0].requests[PODS], 4);
}

#[test]
fn pod_larger_than_any_type_names_the_resource() {
    let out = solve(&input(
        vec![pool("default")],
        vec![pod("huge", 1000, 64 * 1024)],
    ));
    assert!(out.new_node_claims.is_empty());
    assert_eq!(out.unschedulable.len(), 1);
    let u = &out.unschedulable[0];
    assert_eq!(
        u.failures,
        vec![(
            "default".to_string(),
            Failure::InsufficientResources(MEMORY.into())
        )]
    );
    assert!(u.reason.contains("memory"), "{}", u.reason);
}

#[test]
fn arm64_only_pod_gets_an_arm64_type() {
    let mut np = pool("default");
    np.instance_types
        .push(it_with("arm-big", 16000, 32, "arm64", &[]));
    np.instance_types
        .push(it_with("arm-small", 2000, 4, "arm64", &[]));
    let mut p = pod("p", 500, 256);
    p.node_selector = labels(&[(LABEL_ARCH, "arm64")]);
    let out = solve(&input(vec![np], vec![p]));
    let c = &out.new_node_claims[0];
    assert_eq!(c.cheapest.instance_type, "arm-small");
    assert_eq!(c.instance_types(), vec!["arm-small", "arm-big"]);
    assert_eq!(
        req_values(c, LABEL_ARCH),
        Some((Operator::In, vec!["arm64".into()]))
    );
}

#[test]
fn node_selector_on_zone_pins_the_claim() {
    let mut p = pod("p", 500, 256);
    p.node_selector = labels(&[(LABEL_ZONE, "test-zone-2")]);
    let out = solve(&input(vec![pool("default")], vec![p]));
    let c = &out.new_node_claims[0];
    assert_eq!(zone_of(c), "test-zone-2");
    assert_eq!(
        req_values(c, LABEL_ZONE),
        Some((Operator::In, vec!["test-zone-2".into()]))
    );
}

#[test]
fn custom_label_not_offered_by_pool_is_unschedulable() {
    let mut p = pod("p", 500, 256);
    p.node_selector = labels(&[("team", "a")]);
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert!(out.new_node_claims.is_empty());
    assert_eq!(
        out.unschedulable[0].failures,
        vec![("default".to_string(), Failure::Requirements("team".into()))]
    );
}

#[test]
fn pool_label_satisfies_node_selector() {
    let mut np = pool("team-a");
    np.labels = labels(&[("team", "a")]);
    let mut p = pod("p", 500, 256);
    p.node_selector = labels(&[("team", "a")]);
    let out = solve(&input(vec![pool("default"), np], vec![p]));
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].node_pool, "team-a");
    assert_eq!(
        req_values(&out.new_node_claims[0], "team"),
        Some((Operator::In, vec!["a".into()]))
    );
}

#[test]
fn required_node_affinity_falls_back_to_next_or_term() {
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![
        vec![Requirement::new(LABEL_ZONE, Operator::In, &["mars-1"])],
        vec![Requirement::new(LABEL_ZONE, Operator::In, &["test-zone-3"])],
    ];
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(zone_of(&out.new_node_claims[0]), "test-zone-3");
}

#[test]
fn preferred_node_affinity_is_honoured_when_possible() {
    let mut p = pod("p", 500, 256);
    p.preferred_node_affinity = vec![
        Weighted {
            weight: 1,
            term: vec![Requirement::new(LABEL_ZONE, Operator::In, &["test-zone-1"])],
        },
        Weighted {
            weight: 50,
            term: vec![Requirement::new(LABEL_ZONE, Operator::In, &["test-zone-3"])],
        },
    ];
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert_eq!(zone_of(&out.new_node_claims[0]), "test-zone-3");
}

#[test]
fn unsatisfiable_preferred_node_affinity_is_relaxed() {
    let mut p = pod("p", 500, 256);
    p.preferred_node_affinity = vec![Weighted {
        weight: 10,
        term: vec![Requirement::new(LABEL_ARCH, Operator::In, &["s390x"])],
    }];
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert_eq!(out.new_node_claims.len(), 1);
    assert!(out.unschedulable.is_empty());
}

fn generations() -> NodePool {
    let types = (1..=5)
        .map(|g| {
            let gs = g.to_string();
            it_with(
                &format!("gen{g}"),
                2000 * g,
                4 * g,
                "amd64",
                &[("example.com/gen", &gs)],
            )
        })
        .collect();
    NodePool::new("default", types)
}

#[test]
fn gt_on_numeric_label_selects_newer_generations() {
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![vec![Requirement::new(
        "example.com/gen",
        Operator::Gt,
        &["3"],
    )]];
    let out = solve(&input(vec![generations()], vec![p]));
    assert_eq!(
        out.new_node_claims[0].instance_types(),
        vec!["gen4", "gen5"]
    );
}

#[test]
fn lt_and_gte_bound_both_sides() {
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![vec![
        Requirement::new("example.com/gen", Operator::Gte, &["2"]),
        Requirement::new("example.com/gen", Operator::Lt, &["4"]),
    ]];
    let out = solve(&input(vec![generations()], vec![p]));
    assert_eq!(
        out.new_node_claims[0].instance_types(),
        vec!["gen2", "gen3"]
    );
    let mut q = pod("q", 500, 256);
    q.required_node_affinity = vec![vec![Requirement::new(
        "example.com/gen",
        Operator::Lte,
        &["1"],
    )]];
    let out = solve(&input(vec![generations()], vec![q]));
    assert_eq!(out.new_node_claims[0].instance_types(), vec!["gen1"]);
}

#[test]
fn not_in_instance_type_skips_the_cheapest() {
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![vec![Requirement::new(
        LABEL_INSTANCE_TYPE,
        Operator::NotIn,
        &["small"],
    )]];
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert_eq!(out.new_node_claims[0].cheapest.instance_type, "medium");
}

#[test]
fn does_not_exist_avoids_labelled_pool() {
    let mut gpu = pool("gpu");
    gpu.weight = 100;
    gpu.labels = labels(&[("accelerator", "nvidia")]);
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![vec![Requirement::new(
        "accelerator",
        Operator::DoesNotExist,
        &[],
    )]];
    let out = solve(&input(vec![gpu, pool("plain")], vec![p]));
    assert_eq!(out.new_node_claims[0].node_pool, "plain");
}

#[test]
fn exists_needs_a_pool_defining_the_label() {
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![vec![Requirement::new("accelerator", Operator::Exists, &[])]];
    let out = solve(&input(vec![pool("plain")], vec![p.clone()]));
    assert_eq!(out.unschedulable.len(), 1);
    let mut gpu = pool("gpu");
    gpu.labels = labels(&[("accelerator", "nvidia")]);
    let out = solve(&input(vec![pool("plain"), gpu], vec![p]));
    assert_eq!(out.new_node_claims[0].node_pool, "gpu");
}

#[test]
fn min_values_keeps_enough_instance_types() {
    let mut np = pool("default");
    np.requirements =
        vec![Requirement::new(LABEL_INSTANCE_TYPE, Operator::Exists, &[]).with_min_values(3)];
    // 3.5 cpu leaves medium, large, xlarge: exactly 3.
    let out = solve(&input(vec![np.clone()], vec![pod("a", 3500, 256)]));
    assert_eq!(out.new_node_claims[0].instance_types().len(), 3);
    let mins = out.new_node_claims[0]
        .requirements
        .iter()
        .find(|r| r.key == LABEL_INSTANCE_TYPE)
        .and_then(|r| r.min_values);
    assert_eq!(mins, Some(3));
    // 7 cpu leaves large and xlarge only: below minValues.
    let out = solve(&input(vec![np], vec![pod("b", 7000, 256)]));
    assert!(out.new_node_claims.is_empty());
    assert!(matches!(
        &out.unschedulable[0].failures[0].1,
        Failure::MinValues { key, want: 3, got: 2 } if key == LABEL_INSTANCE_TYPE
    ));
}

#[test]
fn best_effort_relaxes_min_values_to_what_the_candidates_reach() {
    let mut np = pool("default");
    np.requirements =
        vec![Requirement::new(LABEL_INSTANCE_TYPE, Operator::Exists, &[]).with_min_values(3)];
    let best_effort = |pods| Input {
        min_values_policy: MinValuesPolicy::BestEffort,
        ..input(vec![np.clone()], pods)
    };
    let min_values = |c: &NewNodeClaim| {
        c.requirements
            .iter()
            .find(|r| r.key == LABEL_INSTANCE_TYPE)
            .and_then(|r| r.min_values)
    };
    // 7 cpu leaves large and xlarge only: Strict refuses (above), BestEffort launches with
    // minValues 2 and says it relaxed.
    let out = solve(&best_effort(vec![pod("b", 7000, 256)]));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    let c = &out.new_node_claims[0];
    assert_eq!(c.instance_types(), vec!["large", "xlarge"]);
    assert_eq!(min_values(c), Some(2));
    assert_eq!(c.min_values_relaxed, Some(true));
    // Met: nothing relaxed, and BestEffort says so.
    let out = solve(&best_effort(vec![pod("a", 3500, 256)]));
    let c = &out.new_node_claims[0];
    assert_eq!(
        (min_values(c), c.min_values_relaxed),
        (Some(3), Some(false))
    );
    // Strict says nothing either way.
    let out = solve(&input(vec![np.clone()], vec![pod("a", 3500, 256)]));
    assert_eq!(out.new_node_claims[0].min_values_relaxed, None);
    // A relaxed claim keeps taking pods while what remains still fits: two 3.5 cpu pods
    // need large or xlarge, one claim, relaxed.
    let out = solve(&best_effort(vec![pod("c", 3500, 256), pod("d", 3500, 256)]));
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].min_values_relaxed, Some(true));
    assert_eq!(min_values(&out.new_node_claims[0]), Some(2));
}

#[test]
fn untolerated_no_schedule_taint_is_reported() {
    let mut np = pool("default");
    np.taints = vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)];
    let out = solve(&input(vec![np], vec![pod("p", 500, 256)]));
    assert!(out.new_node_claims.is_empty());
    assert!(
        matches!(&out.unschedulable[0].failures[0].1, Failure::Taint(t) if t.contains("dedicated"))
    );
}

#[test]
fn equal_toleration_allows_tainted_pool() {
    let mut np = pool("default");
    np.taints = vec![
        Taint::new("dedicated", "gpu", TaintEffect::NoSchedule),
        Taint::new("drain", "", TaintEffect::NoExecute),
    ];
    let mut p = pod("p", 500, 256);
    p.tolerations = vec![Toleration::equal(
        "dedicated",
        "gpu",
        Some(TaintEffect::NoSchedule),
    )];
    let out = solve(&input(vec![np.clone()], vec![p.clone()]));
    assert!(
        matches!(&out.unschedulable[0].failures[0].1, Failure::Taint(t) if t.contains("drain"))
    );
    p.tolerations.push(Toleration::exists(Some("drain"), None));
    let out = solve(&input(vec![np], vec![p]));
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].taints.len(), 2);
}

#[test]
fn prefer_no_schedule_is_tolerated_only_after_relaxation() {
    let mut soft = pool("soft");
    soft.weight = 50;
    soft.taints = vec![Taint::new("spare", "", TaintEffect::PreferNoSchedule)];
    // With an untainted pool available, the pod avoids the (heavier) PreferNoSchedule pool.
    let out = solve(&input(
        vec![soft.clone(), pool("plain")],
        vec![pod("p", 500, 256)],
    ));
    assert_eq!(out.new_node_claims[0].node_pool, "plain");
    // Alone, the tainted pool is used once the taint is tolerated by relaxation.
    let out = solve(&input(vec![soft], vec![pod("p", 500, 256)]));
    assert_eq!(out.new_node_claims[0].node_pool, "soft");
}

#[test]
fn tainted_instance_types_only_take_pods_that_tolerate_them() {
    // The cheap shape carries a taint (its template's cluster-autoscaler taints annotation).
    let mut gpu = it("gpu", 8000, 32);
    gpu.offerings.iter_mut().for_each(|o| o.price = 0.01);
    gpu.taints = vec![Taint::new(
        "nvidia.com/gpu",
        "true",
        TaintEffect::NoSchedule,
    )];
    let mut np = pool("default");
    np.instance_types = vec![gpu.clone(), it("plain", 8000, 32)];
    let out = solve(&input(vec![np.clone()], vec![pod("p", 500, 256)]));
    assert_eq!(out.new_node_claims[0].instance_types(), ["plain"]);
    // A tolerating pod may use both and prefers the cheaper tainted one.
    let mut tolerant = pod("t", 500, 256);
    tolerant
        .tolerations
        .push(Toleration::exists(Some("nvidia.com/gpu"), None));
    let out = solve(&input(vec![np], vec![tolerant]));
    assert_eq!(out.new_node_claims[0].instance_types(), ["gpu", "plain"]);
    // Only tainted shapes: the reason names the taint.
    let mut only = pool("gpu-only");
    only.instance_types = vec![gpu];
    let out = solve(&input(vec![only], vec![pod("p", 500, 256)]));
    assert!(
        matches!(&out.unschedulable[0].failures[0].1, Failure::Taint(t) if t.contains("nvidia.com/gpu")),
        "{:?}",
        out.unschedulable
    );
}

#[test]
fn startup_taints_do_not_block_scheduling() {
    let mut np = pool("default");
    np.startup_taints = vec![Taint::new("cni-not-ready", "", TaintEffect::NoSchedule)];
    let out = solve(&input(vec![np], vec![pod("p", 500, 256)]));
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].startup_taints.len(), 1);
}

#[test]
fn init_containers_and_overhead_in_requests() {
    let containers = vec![res(&[(CPU, 500)]), res(&[(CPU, 300), (MEMORY, GI)])];
    let init = vec![res(&[(CPU, 2500)]), res(&[(MEMORY, 512 * MI)])];
    let overhead = res(&[(CPU, 100), (MEMORY, 64 * MI)]);
    let r = pod_requests(&containers, &init, &overhead);
    assert_eq!(r[CPU], 2600); // max(800, 2500) + 100
    assert_eq!(r[MEMORY], GI + 64 * MI); // max(1Gi, 512Mi) + 64Mi
    assert_eq!(r[PODS], 1);
}

#[test]
fn big_init_container_pushes_to_bigger_type() {
    let mut p = pod("p", 0, 0);
    p.requests = pod_requests(
        &[res(&[(CPU, 500)])],
        &[res(&[(CPU, 3000)])],
        &Resources::new(),
    );
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert_eq!(out.new_node_claims[0].cheapest.instance_type, "medium");
}

#[test]
fn pod_overhead_pushes_to_bigger_type() {
    let mut p = pod("p", 0, 0);
    p.requests = pod_requests(&[res(&[(CPU, 1800)])], &[], &res(&[(CPU, 250)]));
    let out = solve(&input(vec![pool("default")], vec![p]));
    // 2050m > small's 1900m allocatable.
    assert_eq!(out.new_node_claims[0].cheapest.instance_type, "medium");
}

#[test]
fn pods_capacity_limits_pods_per_node() {
    let mut t = it("tiny-pods", 16000, 32);
    t.capacity.insert(PODS.into(), 2);
    let out = solve(&input(
        vec![NodePool::new("default", vec![t])],
        pods("p", 5, 100, 64),
    ));
    assert_eq!(out.new_node_claims.len(), 3);
    assert!(out.new_node_claims.iter().all(|c| c.pods.len() <= 2));
}

#[test]
fn extended_resource_needs_a_type_that_has_it() {
    let mut np = pool("default");
    let mut g = it("gpu-large", 8000, 32);
    g.capacity.insert("nvidia.com/gpu".into(), 1);
    np.instance_types.push(g);
    let mut p = pod("p", 500, 256);
    p.requests.insert("nvidia.com/gpu".into(), 1);
    let out = solve(&input(vec![np], vec![p, pod("q", 500, 256)]));
    let gpu_claim = &out.new_node_claims[out.find("p").unwrap().unwrap()];
    assert_eq!(gpu_claim.instance_types(), vec!["gpu-large"]);
    assert_eq!(gpu_claim.requests["nvidia.com/gpu"], 1);
}

#[test]
fn daemonset_overhead_pushes_to_bigger_type() {
    let mut inp = input(vec![pool("default")], vec![pod("p", 1500, 256)]);
    assert_eq!(
        solve(&inp).new_node_claims[0].cheapest.instance_type,
        "small"
    );
    inp.daemonsets = vec![DaemonSet {
        name: "logging".into(),
        requests: res(&[(CPU, 500), (MEMORY, 128 * MI)]),
        ..DaemonSet::default()
    }];
    let out = solve(&inp);
    let c = &out.new_node_claims[0];
    assert_eq!(c.cheapest.instance_type, "medium");
    assert_eq!(
        c.requests[CPU], 2000,
        "claim requests include the daemonset"
    );
}

#[test]
fn daemonset_not_tolerating_pool_taint_adds_no_overhead() {
    let mut np = pool("default");
    np.taints = vec![Taint::new("dedicated", "x", TaintEffect::NoSchedule)];
    let mut p = pod("p", 1500, 256);
    p.tolerations = vec![Toleration::exists(Some("dedicated"), None)];
    let mut inp = input(vec![np], vec![p]);
    inp.daemonsets = vec![DaemonSet {
        name: "logging".into(),
        requests: res(&[(CPU, 500)]),
        ..DaemonSet::default()
    }];
    assert_eq!(
        solve(&inp).new_node_claims[0].cheapest.instance_type,
        "small"
    );
}

#[test]
fn daemonset_selecting_other_arch_adds_no_overhead_on_this_arch() {
    let mut inp = input(vec![pool("default")], vec![pod("p", 1500, 256)]);
    inp.daemonsets = vec![DaemonSet {
        name: "arm-agent".into(),
        requests: res(&[(CPU, 1000)]),
        node_selector: labels(&[(LABEL_ARCH, "arm64")]),
        ..DaemonSet::default()
    }];
    assert_eq!(
        solve(&inp).new_node_claims[0].cheapest.instance_type,
        "small"
    );
}

#[test]
fn instance_type_list_capped_at_600_cheapest_first() {
    let types: Vec<InstanceType> = (0..700)
        .map(|i| it(&format!("t{i:03}"), 2000 + i * 10, 4))
        .collect();
    let out = solve(&input(
        vec![NodePool::new("default", types)],
        vec![pod("p", 500, 256)],
    ));
    let c = &out.new_node_claims[0];
    assert_eq!(c.instance_types().len(), MAX_INSTANCE_TYPES);
    assert_eq!(c.instance_types()[0], "t000");
    assert_eq!(c.instance_types()[599], "t599");
    let it_req = req_values(c, LABEL_INSTANCE_TYPE).unwrap();
    assert_eq!(it_req.1.len(), 600);
}

#[test]
fn unavailable_and_capacity_type_offerings() {
    let mut small = it("small", 2000, 4);
    for o in small.offerings.iter_mut() {
        o.available = o.zone == "test-zone-2";
    }
    small.offerings.push(Offering {
        zone: "test-zone-1".into(),
        capacity_type: "spot".into(),
        price: 0.01,
        available: true,
        count: None,
    });
    let np = NodePool::new("default", vec![small, it("medium", 4000, 8)]);
    // Cheapest: the spot offering.
    let out = solve(&input(vec![np.clone()], vec![pod("a", 500, 256)]));
    assert_eq!(out.new_node_claims[0].cheapest.capacity_type, "spot");
    assert_eq!(out.new_node_claims[0].cheapest.zone, "test-zone-1");
    // On-demand only: zone-1 on-demand is unavailable, zone-2 is the only small choice.
    let mut p = pod("b", 500, 256);
    p.node_selector = labels(&[(LABEL_CAPACITY_TYPE, "on-demand")]);
    let out = solve(&input(vec![np.clone()], vec![p]));
    let c = &out.new_node_claims[0];
    assert_eq!(
        (c.cheapest.instance_type.as_str(), c.cheapest.zone.as_str()),
        ("small", "test-zone-2")
    );
    assert_eq!(
        req_values(c, LABEL_CAPACITY_TYPE),
        Some((Operator::In, vec!["on-demand".into()]))
    );
    // On-demand in zone-3: small has no available offering there.
    let mut p = pod("c", 500, 256);
    p.node_selector = labels(&[
        (LABEL_CAPACITY_TYPE, "on-demand"),
        (LABEL_ZONE, "test-zone-3"),
    ]);
    let out = solve(&input(vec![np], vec![p]));
    assert_eq!(out.new_node_claims[0].instance_types(), vec!["medium"]);
}
