//! Behaviour corpus: NodePool order and limits, existing and in-flight nodes, host ports,
//! topology spread, pod (anti-)affinity, determinism.
mod common;
use common::*;

#[test]
fn heavier_pool_wins_even_if_pricier() {
    let mut expensive = NodePool::new("expensive", vec![it("big-only", 16000, 32)]);
    expensive.weight = 10;
    let out = solve(&input(
        vec![pool("cheap"), expensive],
        vec![pod("p", 500, 256)],
    ));
    assert_eq!(out.new_node_claims[0].node_pool, "expensive");
}

#[test]
fn equal_weights_break_ties_by_name_descending() {
    let out = solve(&input(
        vec![pool("alpha"), pool("beta")],
        vec![pod("p", 500, 256)],
    ));
    assert_eq!(out.new_node_claims[0].node_pool, "beta");
}

#[test]
fn incompatible_heavier_pool_falls_through() {
    let mut arm = NodePool::new("arm", vec![it_with("a1", 4000, 8, "arm64", &[])]);
    arm.weight = 100;
    let mut p = pod("p", 500, 256);
    p.node_selector = labels(&[(LABEL_ARCH, "amd64")]);
    let out = solve(&input(vec![arm, pool("x86")], vec![p]));
    assert_eq!(out.new_node_claims[0].node_pool, "x86");
    assert_eq!(
        req_values(&out.new_node_claims[0], LABEL_NODEPOOL),
        Some((Operator::In, vec!["x86".into()]))
    );
}

#[test]
fn cpu_limit_stops_at_the_limit_and_reports_it() {
    let mut np = NodePool::new("default", vec![it("medium", 4000, 8)]);
    np.limits = res(&[(CPU, 10000)]);
    let out = solve(&input(vec![np], pods("p", 5, 3500, 256)));
    assert_eq!(
        out.new_node_claims.len(),
        2,
        "8 cpu created, a third 4 cpu would exceed 10"
    );
    assert_eq!(out.unschedulable.len(), 3);
    for u in &out.unschedulable {
        assert_eq!(
            u.failures,
            vec![("default".to_string(), Failure::Limits(CPU.into()))]
        );
        assert!(u.reason.contains("limit"), "{}", u.reason);
    }
}

#[test]
fn limit_filters_out_bigger_types() {
    let mut np = pool("default");
    np.limits = res(&[(CPU, 5000)]);
    // Fits small (1.9 allocatable ≥ 1.5); medium, large, xlarge exceed nothing but the
    // claim must not keep candidates above the limit.
    let out = solve(&input(vec![np], vec![pod("p", 1500, 256)]));
    assert_eq!(
        out.new_node_claims[0].instance_types(),
        vec!["small", "medium"]
    );
}

#[test]
fn existing_usage_counts_against_limits() {
    let mut np = NodePool::new("default", vec![it("medium", 4000, 8)]);
    np.limits = res(&[(CPU, 10000)]);
    np.usage = res(&[(CPU, 8000)]);
    let out = solve(&input(vec![np], vec![pod("p", 1000, 256)]));
    assert!(out.new_node_claims.is_empty());
    assert_eq!(
        out.unschedulable[0].failures[0].1,
        Failure::Limits(CPU.into())
    );
}

#[test]
fn nodes_limit_caps_claim_count() {
    let mut np = pool("default");
    np.limits = res(&[("nodes", 2)]);
    let mut ps = pods("p", 4, 500, 256);
    for p in &mut ps {
        p.labels = labels(&[("app", "web")]);
        p.pod_anti_affinity = vec![PodAffinityTerm::new(
            LABEL_HOSTNAME,
            LabelSelector::labels(&[("app", "web")]),
        )];
    }
    let out = solve(&input(vec![np], ps));
    assert_eq!(out.new_node_claims.len(), 2);
    assert_eq!(out.unschedulable.len(), 2);
    assert!(out.unschedulable[0].reason.contains("nodes"));
}

#[test]
fn zero_nodes_limit_blocks_and_other_pool_takes_over() {
    let mut blocked = pool("blocked");
    blocked.weight = 100;
    blocked.limits = res(&[("nodes", 0)]);
    let out = solve(&input(
        vec![blocked, pool("open")],
        vec![pod("p", 500, 256)],
    ));
    assert_eq!(out.new_node_claims[0].node_pool, "open");
}

#[test]
fn existing_node_is_packed_first() {
    let mut inp = input(vec![pool("default")], pods("p", 3, 1000, 256));
    inp.nodes = vec![node("n1", "test-zone-1", 4000, 8)];
    let out = solve(&inp);
    assert!(out.new_node_claims.is_empty());
    assert_eq!(out.existing.len(), 3);
    assert!(out.existing.iter().all(|p| p.node == "n1"));
}

#[test]
fn existing_node_free_capacity_is_respected() {
    let mut inp = input(vec![pool("default")], pods("p", 3, 1000, 256));
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.requested = res(&[(CPU, 2500)]);
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 1);
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].pods.len(), 2);
}

#[test]
fn tainted_existing_node_is_skipped() {
    let mut inp = input(vec![pool("default")], vec![pod("p", 500, 256)]);
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.taints = vec![Taint::new("dedicated", "db", TaintEffect::NoSchedule)];
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert!(out.existing.is_empty());
    assert_eq!(out.new_node_claims.len(), 1);
}

#[test]
fn a_node_refusing_moving_pods_takes_only_pending_ones() {
    let mut moving = pod("moved", 500, 256);
    moving.moving = true;
    let mut inp = input(
        vec![pool("default")],
        vec![moving, pod("pending", 500, 256)],
    );
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.refuses_moving = true;
    inp.nodes = vec![n];
    let out = solve(&inp);
    let on_node: Vec<&str> = out.existing.iter().map(|p| p.pod.name.as_str()).collect();
    assert_eq!(on_node, ["pending"]);
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].pods.len(), 1);
}

/// A disruption simulation places the pods already waiting before the ones it moves, whatever
/// their size or age: the provisioner is placing them now, a move never counts on their room.
#[test]
fn pending_pods_take_existing_room_before_moving_ones() {
    let mut moved = pod("moved", 1000, 256);
    moved.creation = 1;
    let mut waiting = pod("waiting", 500, 256);
    waiting.creation = 2;
    let solve_with = |moving: bool| {
        let mut m = moved.clone();
        m.moving = moving;
        let mut inp = input(vec![pool("default")], vec![m, waiting.clone()]);
        let mut n = node("n1", "test-zone-1", 4000, 8);
        n.requested = res(&[(CPU, 3000)]);
        inp.nodes = vec![n];
        let out = solve(&inp);
        assert_eq!(out.new_node_claims.len(), 1);
        out.existing
            .iter()
            .map(|p| p.pod.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(solve_with(true), ["waiting"]);
    // Positive control: both pending, Karpenter's order (larger first) gives the room to it.
    assert_eq!(solve_with(false), ["moved"]);
}

#[test]
fn existing_node_labels_must_match() {
    let mut p = pod("p", 500, 256);
    p.node_selector = labels(&[(LABEL_ZONE, "test-zone-2")]);
    let mut inp = input(vec![pool("default")], vec![p]);
    inp.nodes = vec![
        node("n1", "test-zone-1", 4000, 8),
        node("n2", "test-zone-2", 4000, 8),
    ];
    let out = solve(&inp);
    assert_eq!(out.existing[0].node, "n2");
}

/// Found by tests/prop_requirements.rs: a contradiction on a label the node lacks matched it.
#[test]
fn contradictory_node_affinity_does_not_match_a_node_without_the_label() {
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![vec![
        Requirement::new("tier", Operator::In, &["a"]),
        Requirement::new("tier", Operator::In, &["b"]),
    ]];
    let mut inp = input(vec![pool("default")], vec![p]);
    inp.nodes = vec![node("n1", "test-zone-1", 4000, 8)];
    let out = solve(&inp);
    assert!(out.existing.is_empty());
    assert!(out.new_node_claims.is_empty());
}

/// The smallest i64 is a number like any other (it was the interner's "not a number" mark).
#[test]
fn smallest_integer_label_satisfies_lt() {
    let mut p = pod("p", 500, 256);
    p.required_node_affinity = vec![vec![Requirement::new("rank", Operator::Lt, &["0"])]];
    let mut inp = input(vec![pool("default")], vec![p]);
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.labels.insert("rank".into(), i64::MIN.to_string());
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 1);
}

#[test]
fn in_flight_claim_is_packed_first_ignoring_startup_and_ephemeral_taints() {
    let mut inp = input(vec![pool("default")], pods("p", 2, 1000, 256));
    let mut n = node("default-abcde", "test-zone-3", 4000, 8);
    n.state = NodeState::InFlight;
    let startup = Taint::new("cni", "", TaintEffect::NoSchedule);
    n.taints = vec![
        Taint::new("karpenter.sh/unregistered", "", TaintEffect::NoExecute),
        startup.clone(),
    ];
    n.startup_taints = vec![startup];
    inp.nodes = vec![n.clone()];
    let out = solve(&inp);
    assert!(out.new_node_claims.is_empty());
    assert_eq!(out.existing.len(), 2);
    // The same node, if Ready, keeps its taints.
    n.state = NodeState::Ready;
    inp.nodes = vec![n];
    assert_eq!(solve(&inp).existing.len(), 0);
}

#[test]
fn host_port_conflict_needs_second_node() {
    let mut ps = pods("p", 2, 500, 256);
    for p in &mut ps {
        p.host_ports = vec![HostPort::tcp(8080)];
    }
    let out = solve(&input(vec![pool("default")], ps.clone()));
    assert_eq!(out.new_node_claims.len(), 2);
    ps[1].host_ports = vec![HostPort::tcp(9090)];
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 1);
}

#[test]
fn host_port_used_on_existing_node() {
    let mut p = pod("p", 500, 256);
    p.host_ports = vec![HostPort::tcp(443)];
    let mut inp = input(vec![pool("default")], vec![p]);
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.pods = vec![BoundPod {
        namespace: "default".into(),
        host_ports: vec![HostPort::tcp(443)],
        ..BoundPod::default()
    }];
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert!(out.existing.is_empty());
    assert_eq!(out.new_node_claims.len(), 1);
}

fn with_spread(ps: &mut [Pod], key: &str, when: WhenUnsatisfiable) {
    for p in ps {
        p.labels = labels(&[("app", "web")]);
        p.topology_spread = vec![spread(key, 1, when, &[("app", "web")])];
    }
}

#[test]
fn zonal_spread_nine_pods_three_nodes_one_per_zone() {
    let mut ps = pods("p", 9, 500, 256);
    with_spread(&mut ps, LABEL_ZONE, WhenUnsatisfiable::DoNotSchedule);
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 3);
    let mut zones: Vec<String> = out.new_node_claims.iter().map(zone_of).collect();
    zones.sort();
    assert_eq!(zones, ZONES.to_vec());
    assert!(out.new_node_claims.iter().all(|c| c.pods.len() == 3));
}

#[test]
fn zonal_spread_counts_existing_pods() {
    let mut ps = pods("p", 2, 500, 256);
    with_spread(&mut ps, LABEL_ZONE, WhenUnsatisfiable::DoNotSchedule);
    let mut inp = input(vec![pool("default")], ps);
    let mut n = node("full", "test-zone-1", 100, 1);
    n.pods = vec![BoundPod {
        namespace: "default".into(),
        labels: labels(&[("app", "web")]),
        ..BoundPod::default()
    }];
    inp.nodes = vec![n];
    let out = solve(&inp);
    let mut zones: Vec<String> = out.new_node_claims.iter().map(zone_of).collect();
    zones.sort();
    assert_eq!(zones, vec!["test-zone-2", "test-zone-3"]);
}

/// The pool only offers zone-1, but zone-2 exists (an existing full node), so the spread is
/// skewed after one pod.
fn skewed(when: WhenUnsatisfiable) -> Output {
    let mut np = pool("default");
    np.requirements = vec![Requirement::new(LABEL_ZONE, Operator::In, &["test-zone-1"])];
    let mut ps = pods("p", 2, 500, 256);
    with_spread(&mut ps, LABEL_ZONE, when);
    let mut inp = input(vec![np], ps);
    inp.nodes = vec![node("full", "test-zone-2", 100, 1)];
    solve(&inp)
}

#[test]
fn do_not_schedule_spread_leaves_pod_pending_with_reason() {
    let out = skewed(WhenUnsatisfiable::DoNotSchedule);
    assert_eq!(placed(&out), 1);
    assert_eq!(
        out.unschedulable[0].failures,
        vec![(
            "default".to_string(),
            Failure::TopologySpread(LABEL_ZONE.into())
        )]
    );
}

#[test]
fn schedule_anyway_spread_is_relaxed() {
    let out = skewed(WhenUnsatisfiable::ScheduleAnyway);
    assert_eq!(placed(&out), 2);
    assert!(out.unschedulable.is_empty());
}

/// Found by the conformance corpus (Karpenter's "should respect minDomains constraints"): with
/// fewer eligible zones than minDomains the global minimum is 0, so each zone takes at most
/// maxSkew matching pods and the rest stay pending.
#[test]
fn spread_min_domains_above_the_zone_count_caps_each_zone_at_max_skew() {
    let mut np = pool("default");
    np.requirements = vec![Requirement::new(
        LABEL_ZONE,
        Operator::In,
        &["test-zone-1", "test-zone-2"],
    )];
    let mut ps = pods("p", 3, 500, 256);
    with_spread(&mut ps, LABEL_ZONE, WhenUnsatisfiable::DoNotSchedule);
    for p in &mut ps {
        p.topology_spread[0].min_domains = Some(3);
    }
    let out = solve(&input(vec![np], ps));
    let mut zones: Vec<String> = out.new_node_claims.iter().map(zone_of).collect();
    zones.sort();
    assert_eq!(zones, vec!["test-zone-1", "test-zone-2"]);
    assert_eq!(placed(&out), 2);
    assert_eq!(
        out.unschedulable[0].failures,
        vec![(
            "default".to_string(),
            Failure::TopologySpread(LABEL_ZONE.into())
        )]
    );
}

/// Found by the conformance corpus (Karpenter's "should not limit spread options by preferred
/// node affinity"): a preferred zone narrows where a pod goes, not the domains the skew is
/// measured over, so six pods preferring two of three zones still spread 2/2/2.
#[test]
fn preferred_zones_do_not_narrow_the_spread_minimum() {
    let mut ps = pods("p", 6, 500, 256);
    with_spread(&mut ps, LABEL_ZONE, WhenUnsatisfiable::DoNotSchedule);
    for p in &mut ps {
        p.preferred_node_affinity = vec![Weighted {
            weight: 1,
            term: vec![Requirement::new(
                LABEL_ZONE,
                Operator::In,
                &["test-zone-1", "test-zone-2"],
            )],
        }];
    }
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(placed(&out), 6);
    for z in ZONES {
        let here: usize = out
            .new_node_claims
            .iter()
            .filter(|c| zone_of(c) == *z)
            .map(|c| c.pods.len())
            .sum();
        assert_eq!(here, 2, "{z}");
    }
}

#[test]
fn hostname_spread_puts_one_matching_pod_per_node() {
    let mut ps = pods("p", 4, 500, 256);
    with_spread(&mut ps, LABEL_HOSTNAME, WhenUnsatisfiable::DoNotSchedule);
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 4);
}

#[test]
fn hostname_spread_max_skew_two() {
    let mut ps = pods("p", 4, 500, 256);
    for p in &mut ps {
        p.labels = labels(&[("app", "web")]);
        p.topology_spread = vec![spread(
            LABEL_HOSTNAME,
            2,
            WhenUnsatisfiable::DoNotSchedule,
            &[("app", "web")],
        )];
    }
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 2);
}

fn anti(ps: &mut [Pod], key: &str) {
    for p in ps {
        p.labels = labels(&[("app", "nginx")]);
        p.pod_anti_affinity = vec![PodAffinityTerm::new(
            key,
            LabelSelector::labels(&[("app", "nginx")]),
        )];
    }
}

#[test]
fn hostname_anti_affinity_one_pod_per_node() {
    let mut ps = pods("p", 5, 100, 64);
    anti(&mut ps, LABEL_HOSTNAME);
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 5);
    assert!(out.new_node_claims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn zonal_anti_affinity_runs_out_of_zones() {
    let mut ps = pods("p", 4, 100, 64);
    anti(&mut ps, LABEL_ZONE);
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 3);
    let mut zones: Vec<String> = out.new_node_claims.iter().map(zone_of).collect();
    zones.sort();
    zones.dedup();
    assert_eq!(zones.len(), 3);
    assert_eq!(
        out.unschedulable[0].failures,
        vec![(
            "default".to_string(),
            Failure::PodAntiAffinity(LABEL_ZONE.into())
        )]
    );
}

#[test]
fn anti_affinity_is_namespaced() {
    let mut ps = pods("p", 2, 100, 64);
    anti(&mut ps, LABEL_HOSTNAME);
    ps[1].namespace = "other".into();
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 1);
}

#[test]
fn bound_pod_anti_affinity_repels_matching_pod() {
    let mut p = pod("p", 500, 256);
    p.labels = labels(&[("app", "db")]);
    let mut inp = input(vec![pool("default")], vec![p]);
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.pods = vec![BoundPod {
        namespace: "default".into(),
        labels: labels(&[("app", "db")]),
        pod_anti_affinity: vec![PodAffinityTerm::new(
            LABEL_HOSTNAME,
            LabelSelector::labels(&[("app", "db")]),
        )],
        ..BoundPod::default()
    }];
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert!(out.existing.is_empty());
    assert_eq!(out.new_node_claims.len(), 1);
}

#[test]
fn pending_anti_affinity_pod_avoids_node_with_matching_bound_pod() {
    let mut ps = pods("p", 1, 100, 64);
    anti(&mut ps, LABEL_HOSTNAME);
    let mut inp = input(vec![pool("default")], ps);
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.pods = vec![BoundPod {
        namespace: "default".into(),
        labels: labels(&[("app", "nginx")]),
        ..BoundPod::default()
    }];
    inp.nodes = vec![n, node("n2", "test-zone-1", 4000, 8)];
    let out = solve(&inp);
    assert_eq!(out.existing[0].node, "n2");
}

#[test]
fn zonal_pod_affinity_follows_the_target() {
    let mut db = pod("db", 1000, 256);
    db.labels = labels(&[("app", "db")]);
    db.node_selector = labels(&[(LABEL_ZONE, "test-zone-2")]);
    let mut web = pods("web", 3, 500, 256);
    for p in &mut web {
        p.pod_affinity = vec![PodAffinityTerm::new(
            LABEL_ZONE,
            LabelSelector::labels(&[("app", "db")]),
        )];
    }
    // web pods are smaller, so db is queued first.
    let mut all = vec![db];
    all.extend(web);
    let out = solve(&input(vec![pool("default")], all));
    assert_eq!(placed(&out), 4);
    assert!(
        out.new_node_claims
            .iter()
            .all(|c| zone_of(c) == "test-zone-2")
    );
}

#[test]
fn hostname_pod_affinity_colocates() {
    let mut db = pod("db", 1000, 256);
    db.labels = labels(&[("app", "db")]);
    let mut web = pod("web", 500, 256);
    web.pod_affinity = vec![PodAffinityTerm::new(
        LABEL_HOSTNAME,
        LabelSelector::labels(&[("app", "db")]),
    )];
    // A second db-less pod with anti-affinity to db forces a second node to exist.
    let mut loner = pod("loner", 1500, 256);
    loner.pod_anti_affinity = vec![PodAffinityTerm::new(
        LABEL_HOSTNAME,
        LabelSelector::labels(&[("app", "db")]),
    )];
    let out = solve(&input(vec![pool("default")], vec![loner, db, web]));
    assert_eq!(out.new_node_claims.len(), 2);
    assert_eq!(out.find("web"), out.find("db"));
    assert_ne!(out.find("loner"), out.find("db"));
}

#[test]
fn pod_affinity_without_target_is_unschedulable() {
    let mut web = pod("web", 500, 256);
    web.pod_affinity = vec![PodAffinityTerm::new(
        LABEL_ZONE,
        LabelSelector::labels(&[("app", "db")]),
    )];
    let out = solve(&input(vec![pool("default")], vec![web]));
    assert_eq!(
        out.unschedulable[0].failures,
        vec![(
            "default".to_string(),
            Failure::PodAffinity(LABEL_ZONE.into())
        )]
    );
}

#[test]
fn self_affinity_bootstraps_and_keeps_one_zone() {
    let mut ps = pods("p", 6, 4000, 256);
    for p in &mut ps {
        p.labels = labels(&[("app", "cache")]);
        p.pod_affinity = vec![PodAffinityTerm::new(
            LABEL_ZONE,
            LabelSelector::labels(&[("app", "cache")]),
        )];
    }
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(placed(&out), 6);
    let mut zones: Vec<String> = out.new_node_claims.iter().map(zone_of).collect();
    zones.dedup();
    assert_eq!(zones.len(), 1, "{zones:?}");
}

#[test]
fn preferred_anti_affinity_is_relaxed_when_nodes_are_limited() {
    let mut np = pool("default");
    np.limits = res(&[("nodes", 1)]);
    let mut ps = pods("p", 3, 100, 64);
    for p in &mut ps {
        p.labels = labels(&[("app", "web")]);
        p.preferred_pod_anti_affinity = vec![Weighted {
            weight: 100,
            term: PodAffinityTerm::new(LABEL_HOSTNAME, LabelSelector::labels(&[("app", "web")])),
        }];
    }
    let out = solve(&input(vec![np.clone()], ps.clone()));
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(placed(&out), 3);
    // Without the limit the preference is honoured: one node each.
    np.limits.clear();
    assert_eq!(solve(&input(vec![np], ps)).new_node_claims.len(), 3);
}

#[test]
fn preferred_pod_affinity_is_relaxed_when_unsatisfiable() {
    let mut p = pod("p", 500, 256);
    p.preferred_pod_affinity = vec![Weighted {
        weight: 10,
        term: PodAffinityTerm::new(LABEL_ZONE, LabelSelector::labels(&[("app", "missing")])),
    }];
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert_eq!(out.new_node_claims.len(), 1);
}

#[test]
fn queue_orders_by_cpu_then_memory() {
    let ps = vec![
        pod("small", 100, 64),
        pod("big", 1500, 64),
        pod("mid-mem", 500, 1024),
        pod("mid", 500, 512),
    ];
    let out = solve(&input(vec![pool("default")], ps));
    let names: Vec<&str> = out.new_node_claims[0]
        .pods
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, vec!["big", "mid-mem", "mid", "small"]);
}

#[test]
fn claim_requirements_carry_capacity_type_and_instance_types() {
    let out = solve(&input(vec![pool("default")], vec![pod("p", 3000, 256)]));
    let c = &out.new_node_claims[0];
    assert_eq!(
        req_values(c, LABEL_INSTANCE_TYPE),
        Some((
            Operator::In,
            vec!["medium".into(), "large".into(), "xlarge".into()]
        ))
    );
    assert_eq!(
        req_values(c, LABEL_CAPACITY_TYPE),
        Some((Operator::In, vec!["on-demand".into()]))
    );
}

#[test]
fn determinism_same_input_same_output() {
    let inp = scheduling::bench_workload::input(1000);
    let a = solve(&inp);
    let b = solve(&inp);
    assert_eq!(a, b);
    assert!(!a.new_node_claims.is_empty());
}

#[test]
fn benchmark_workload_places_every_pod_at_1000() {
    let inp = scheduling::bench_workload::input(1000);
    let out = solve(&inp);
    assert!(out.unschedulable.is_empty());
    assert_eq!(placed(&out), 1000);
    // 200 hostname anti-affinity pods need 200 nodes at least.
    assert!(out.new_node_claims.len() >= 200);
    for c in &out.new_node_claims {
        let nginx = c.pods.iter().filter(|p| {
            inp.pods
                .iter()
                .find(|q| q.name == p.name)
                .is_some_and(|q| q.labels.contains_key("app"))
        });
        assert!(nginx.count() <= 1);
    }
}

#[test]
fn planned_claims_are_tried_emptiest_first() {
    let mut a = pod("a", 2000, 256);
    let mut b = pod("b", 1500, 256);
    a.host_ports = vec![HostPort::tcp(80)];
    b.host_ports = vec![HostPort::tcp(80)];
    let ps = vec![a, b, pod("c", 1000, 256), pod("d", 900, 256)];
    let out = solve(&input(vec![pool("default")], ps));
    assert_eq!(out.new_node_claims.len(), 2);
    assert_ne!(
        out.find("c"),
        out.find("d"),
        "d goes to the claim with fewer pods"
    );
}

#[test]
fn existing_node_without_the_topology_label_is_not_a_spread_domain() {
    let mut ps = pods("p", 1, 500, 256);
    with_spread(&mut ps, LABEL_ZONE, WhenUnsatisfiable::DoNotSchedule);
    let mut inp = input(vec![pool("default")], ps);
    let mut n = node("zoneless", "test-zone-1", 4000, 8);
    n.labels.remove(LABEL_ZONE);
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert!(out.existing.is_empty());
    assert_eq!(out.new_node_claims.len(), 1);
}

#[test]
fn zonal_spread_onto_existing_nodes_respects_skew() {
    let mut ps = pods("p", 4, 500, 256);
    with_spread(&mut ps, LABEL_ZONE, WhenUnsatisfiable::DoNotSchedule);
    let mut np = pool("default");
    np.requirements = vec![Requirement::new(
        LABEL_ZONE,
        Operator::In,
        &["test-zone-1", "test-zone-2"],
    )];
    let mut inp = input(vec![np], ps);
    inp.nodes = vec![node("n1", "test-zone-1", 16000, 32)];
    let out = solve(&inp);
    // zone-1 (existing node) and zone-2 (new claims) alternate: 2 on n1, 2 in zone-2.
    assert_eq!(out.existing.len(), 2);
    assert_eq!(
        out.new_node_claims
            .iter()
            .map(|c| c.pods.len())
            .sum::<usize>(),
        2
    );
    assert!(
        out.new_node_claims
            .iter()
            .all(|c| zone_of(c) == "test-zone-2")
    );
}

#[test]
fn pod_pinned_to_a_hostname_only_fits_that_node() {
    let mut ps = pods("p", 2, 3000, 256);
    for p in &mut ps {
        p.node_selector = labels(&[(LABEL_HOSTNAME, "n1")]);
    }
    let mut inp = input(vec![pool("default")], ps);
    inp.nodes = vec![
        node("n1", "test-zone-1", 4000, 8),
        node("n2", "test-zone-1", 8000, 16),
    ];
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 1);
    assert_eq!(out.existing[0].node, "n1");
    assert!(out.new_node_claims.is_empty());
    assert_eq!(
        out.unschedulable[0].failures,
        vec![(
            "default".to_string(),
            Failure::Requirements(LABEL_HOSTNAME.into())
        )]
    );
}

/// A hostname anti-affinity replica skips the many claims that hold one (they have room for
/// it) and joins the one that does not, far down the order of claims: the claims' hostname
/// counts the scan reads stay in step with the pods they take.
#[test]
fn anti_affine_replica_finds_the_one_claim_without_a_replica() {
    let one_type = || NodePool::new("default", vec![it("m-4", 4000, 8)]);
    let mut web = pods("web", 40, 1500, 5000);
    // Smaller replicas, queued after the rest (by cpu): they fit beside a web pod but may not.
    web.extend(pods("small", 2, 500, 500));
    anti(&mut web, LABEL_HOSTNAME);
    // Too much memory to join a web claim: a claim of its own, the last of the order.
    let mut ps = web;
    ps.push(pod("db", 1200, 3500));
    let out = solve(&input(vec![one_type()], ps));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    let with = |name: &str| {
        out.new_node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p.name == name))
            .map(|c| c.pods.iter().map(|p| p.name.clone()).collect::<Vec<_>>())
    };
    // The first small replica joined db's claim; the second, with nowhere left, got its own.
    let Some(db) = with("db") else {
        panic!("db is on no NodeClaim: {:?}", out.new_node_claims);
    };
    assert_eq!(db.len(), 2, "{db:?}");
    assert!(db.iter().any(|p| p.starts_with("small-")), "{db:?}");
    assert_eq!(out.new_node_claims.len(), 42);
    assert!(
        out.new_node_claims
            .iter()
            .all(|c| c.pods.iter().filter(|p| p.name != "db").count() == 1)
    );
}
