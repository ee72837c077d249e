//! Volumes in the solver: topology alternatives narrow the node (not the pod's affinity, so
//! topology spread still counts the pod's own domains), and per-driver attach limits bound
//! existing nodes and planned NodeClaims (Karpenter's volume topology and volume usage tests).

mod common;
use common::*;
use scheduling::volumes::{Claim, Objects, PodVolume, Volume, resolve};

const EBS: &str = "ebs.csi.aws.com";
const EFS: &str = "efs.csi.aws.com";

fn zone_req(zones: &[&str]) -> Vec<Requirement> {
    vec![Requirement::new(LABEL_ZONE, Operator::In, zones)]
}

/// A pod with one volume: claim `claim` of driver `driver`, alternatives `alts`.
fn with_volume(mut p: Pod, driver: &str, claim: &str, alts: Vec<Vec<Requirement>>) -> Pod {
    p.volume_requirements = alts;
    p.volumes.push(VolumeUse {
        driver: driver.into(),
        id: format!("default/{claim}"),
    });
    p
}

fn limited(mut t: InstanceType, limits: &[(&str, u32)]) -> InstanceType {
    t.volume_limits = limits.iter().map(|(d, n)| (d.to_string(), *n)).collect();
    t
}

/// The catalog with test-zone-1 cheapest, test-zone-3 dearest.
fn zonal_prices() -> NodePool {
    let mut types = catalog();
    for t in &mut types {
        for (i, o) in t.offerings.iter_mut().enumerate() {
            o.price *= 1.0 + i as f64 * 0.1;
        }
    }
    NodePool::new("default", types)
}

/// Per claim, the number of distinct volumes per driver of its pods.
fn claim_volumes(inp: &Input, c: &NewNodeClaim) -> Vec<(String, usize)> {
    let mut per: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for r in &c.pods {
        let p = inp.pods.iter().find(|p| p.name == r.name).expect("pod");
        for u in &p.volumes {
            per.entry(u.driver.clone())
                .or_default()
                .insert(u.id.clone());
        }
    }
    per.into_iter().map(|(d, s)| (d, s.len())).collect()
}

/// Every claim's instance types can attach its pods' volumes.
fn assert_within_limits(inp: &Input, out: &Output) {
    for c in &out.new_node_claims {
        let counts = claim_volumes(inp, c);
        for name in c.instance_types() {
            let t = inp.node_pools[0]
                .instance_types
                .iter()
                .find(|t| &t.name == name)
                .expect("type");
            for (d, n) in &counts {
                if let Some(l) = t.volume_limits.get(d) {
                    assert!(*n as u32 <= *l, "{name}: {n} {d} volumes > {l}");
                }
            }
        }
    }
}

// --- topology (reference 1.1) ---

#[test]
fn should_schedule_to_the_zone_of_a_bound_zonal_volume() {
    let p = pod("db-0", 500, 256);
    // Positive control: without the volume the cheapest zone wins.
    let out = solve(&input(vec![zonal_prices()], vec![p.clone()]));
    assert_eq!(zone_of(&out.new_node_claims[0]), "test-zone-1");

    let p = with_volume(p, EBS, "data", vec![zone_req(&["test-zone-3"])]);
    let out = solve(&input(vec![zonal_prices()], vec![p]));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    let c = &out.new_node_claims[0];
    assert_eq!(zone_of(c), "test-zone-3");
    assert_eq!(
        req_values(c, LABEL_ZONE),
        Some((Operator::In, vec!["test-zone-3".to_string()]))
    );
}

#[test]
fn should_schedule_pods_using_a_storage_class_with_multiple_zones_in_allowed_topologies() {
    let p = with_volume(
        pod("db-0", 500, 256),
        EBS,
        "data",
        vec![zone_req(&["test-zone-2", "test-zone-3"])],
    );
    let out = solve(&input(vec![zonal_prices()], vec![p]));
    let c = &out.new_node_claims[0];
    assert_eq!(zone_of(c), "test-zone-2");
    assert_eq!(
        req_values(c, LABEL_ZONE),
        Some((
            Operator::In,
            vec!["test-zone-2".to_string(), "test-zone-3".to_string()]
        ))
    );
}

#[test]
fn should_try_the_next_volume_alternative_when_the_first_fits_nowhere() {
    let alts = vec![zone_req(&["test-zone-9"]), zone_req(&["test-zone-3"])];
    let p = with_volume(pod("db-0", 500, 256), EBS, "data", alts);
    let out = solve(&input(vec![zonal_prices()], vec![p.clone()]));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(zone_of(&out.new_node_claims[0]), "test-zone-3");
    // Negative: the first alternative alone fits nowhere.
    let mut only_first = p;
    only_first.volume_requirements.truncate(1);
    let out = solve(&input(vec![zonal_prices()], vec![only_first]));
    assert_eq!(out.unschedulable.len(), 1);
}

#[test]
fn should_schedule_pods_when_a_valid_multi_volume_topology_alternative_remains_after_pruning() {
    let bound = |pv: &str| Claim {
        volume_name: Some(pv.into()),
        bind_completed: true,
        ..Claim::default()
    };
    let pv = |zones: &[&[&str]]| Volume {
        node_affinity: zones.iter().map(|z| zone_req(z)).collect(),
        csi_driver: Some(EBS.into()),
        ..Volume::default()
    };
    let mut objects = Objects::default();
    objects
        .claims
        .insert(("default".into(), "a".into()), bound("pv-a"));
    objects
        .claims
        .insert(("default".into(), "b".into()), bound("pv-b"));
    objects
        .volumes
        .insert("pv-a".into(), pv(&[&["test-zone-1"], &["test-zone-2"]]));
    objects
        .volumes
        .insert("pv-b".into(), pv(&[&["test-zone-2"], &["test-zone-3"]]));
    let vols = [
        PodVolume::Claim {
            volume: "va".into(),
            claim: "a".into(),
        },
        PodVolume::Claim {
            volume: "vb".into(),
            claim: "b".into(),
        },
    ];
    let r = resolve("default", "db-0", "uid-db-0", &vols, &objects).expect("resolves");
    let mut p = pod("db-0", 500, 256);
    p.volume_requirements = r.alternatives;
    p.volumes = r.uses;
    assert_eq!(p.volumes.len(), 2);
    let out = solve(&input(vec![zonal_prices()], vec![p]));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    // test-zone-1 is cheapest, but only test-zone-2 holds both volumes.
    assert_eq!(zone_of(&out.new_node_claims[0]), "test-zone-2");
}

#[test]
fn should_place_on_the_existing_node_in_the_volume_zone() {
    let nodes = vec![
        node("n1", "test-zone-1", 4000, 8),
        node("n3", "test-zone-3", 4000, 8),
    ];
    let p = pod("db-0", 500, 256);
    let mut inp = input(vec![pool("default")], vec![p.clone()]);
    inp.nodes = nodes.clone();
    // Positive control: the first node (by name) takes it.
    assert_eq!(solve(&inp).existing[0].node, "n1");
    inp.pods = vec![with_volume(
        p,
        EBS,
        "data",
        vec![zone_req(&["test-zone-3"])],
    )];
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 1, "{out:?}");
    assert_eq!(out.existing[0].node, "n3");
}

#[test]
fn should_spread_across_3_zones_with_zonal_volumes_counting_domains_by_the_pods_own_affinity() {
    let sel = [("app", "db")];
    let mk = |i: usize, zone: &str| {
        let mut p = pod(&format!("db-{i}"), 500, 256);
        p.creation = i as i64;
        p.labels = labels(&sel);
        p.topology_spread = vec![spread(
            LABEL_ZONE,
            1,
            WhenUnsatisfiable::DoNotSchedule,
            &sel,
        )];
        with_volume(p, EBS, &format!("data-{i}"), vec![zone_req(&[zone])])
    };
    // One volume per zone: one pod per zone.
    let spread_pods: Vec<Pod> = ZONES.iter().enumerate().map(|(i, z)| mk(i, z)).collect();
    let out = solve(&input(vec![pool("default")], spread_pods));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    let mut zones: Vec<String> = out.new_node_claims.iter().map(zone_of).collect();
    zones.sort();
    assert_eq!(zones, ZONES);

    // Every volume in test-zone-1: the skew is counted over the three zones the pods' own
    // affinity allows (minimum 0), so only one pod fits (Karpenter and kube-scheduler agree).
    let same: Vec<Pod> = (0..3).map(|i| mk(i, "test-zone-1")).collect();
    let out = solve(&input(vec![pool("default")], same.clone()));
    assert_eq!(placed(&out), 1, "{:?}", out.new_node_claims);
    assert_eq!(out.unschedulable.len(), 2);
    assert!(
        out.unschedulable[0]
            .failures
            .iter()
            .any(|(_, f)| matches!(f, Failure::TopologySpread(k) if k == LABEL_ZONE)),
        "{:?}",
        out.unschedulable
    );
    // Positive control: pinned by their own node affinity instead, the domains are that
    // zone's alone and all three fit.
    let pinned: Vec<Pod> = same
        .into_iter()
        .map(|mut p| {
            p.required_node_affinity = std::mem::take(&mut p.volume_requirements);
            p
        })
        .collect();
    let out = solve(&input(vec![pool("default")], pinned));
    assert_eq!(placed(&out), 3, "{:?}", out.unschedulable);
}

// --- attach limits (reference 1.2) ---

fn limited_pool(limit: u32) -> NodePool {
    let types = catalog()
        .into_iter()
        .map(|t| limited(t, &[(EBS, limit)]))
        .collect();
    NodePool::new("default", types)
}

/// `n` small pods, each with its own EBS claim.
fn pods_with_claims(n: usize) -> Vec<Pod> {
    pods("db", n, 100, 64)
        .into_iter()
        .enumerate()
        .map(|(i, p)| with_volume(p, EBS, &format!("data-{i}"), Vec::new()))
        .collect()
}

#[test]
fn should_launch_multiple_nodes_if_required_due_to_volume_limits() {
    // Positive control: without a limit one node takes all five.
    let out = solve(&input(vec![pool("default")], pods_with_claims(5)));
    assert_eq!(out.new_node_claims.len(), 1);

    let inp = input(vec![limited_pool(2)], pods_with_claims(5));
    let out = solve(&inp);
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(
        out.new_node_claims.len(),
        3,
        "one solve, no N-round scale-up"
    );
    assert_within_limits(&inp, &out);
    let ff = solve_first_fit(&inp);
    assert_eq!(ff.new_node_claims.len(), 3);
    assert_within_limits(&inp, &ff);
}

#[test]
fn should_launch_a_single_node_if_all_pods_use_the_same_pvc() {
    let shared: Vec<Pod> = pods("db", 5, 100, 64)
        .into_iter()
        .map(|p| with_volume(p, EBS, "shared", Vec::new()))
        .collect();
    let out = solve(&input(vec![limited_pool(1)], shared));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(out.new_node_claims.len(), 1);
    // Negative: five claims under the same limit need five nodes.
    let out = solve(&input(vec![limited_pool(1)], pods_with_claims(5)));
    assert_eq!(out.new_node_claims.len(), 5);
}

#[test]
fn should_not_limit_volumes_for_drivers_without_a_declared_limit() {
    let efs: Vec<Pod> = pods("db", 5, 100, 64)
        .into_iter()
        .enumerate()
        .map(|(i, p)| with_volume(p, EFS, &format!("data-{i}"), Vec::new()))
        .collect();
    let out = solve(&input(vec![limited_pool(1)], efs));
    assert_eq!(out.new_node_claims.len(), 1);
    // Negative: the declared driver is limited.
    let out = solve(&input(vec![limited_pool(1)], pods_with_claims(2)));
    assert_eq!(out.new_node_claims.len(), 2);
}

#[test]
fn should_filter_out_instance_types_which_cannot_support_all_of_the_pods_volumes_across_multiple_csi_drivers()
 {
    let types = vec![
        limited(it("small", 2000, 4), &[(EBS, 1), (EFS, 5)]),
        limited(it("medium", 4000, 8), &[(EBS, 5), (EFS, 1)]),
        limited(it("large", 8000, 16), &[(EBS, 5), (EFS, 5)]),
    ];
    let np = NodePool::new("default", types);
    let p = pod("db-0", 500, 256);
    // Positive control: without volumes the cheapest type.
    let out = solve(&input(vec![np.clone()], vec![p.clone()]));
    assert_eq!(
        out.new_node_claims[0].instance_types(),
        ["small", "medium", "large"]
    );

    let mut p = p;
    for (d, c) in [(EBS, "e1"), (EBS, "e2"), (EFS, "f1"), (EFS, "f2")] {
        p = with_volume(p, d, c, Vec::new());
    }
    let inp = input(vec![np.clone()], vec![p.clone()]);
    let out = solve(&inp);
    assert_eq!(out.new_node_claims[0].instance_types(), ["large"]);
    assert_within_limits(&inp, &out);

    // Beyond every type's limit: the failure names the driver.
    for i in 0..5 {
        p = with_volume(p, EBS, &format!("more-{i}"), Vec::new());
    }
    let out = solve(&input(vec![np], vec![p]));
    assert_eq!(out.unschedulable.len(), 1);
    assert_eq!(
        out.unschedulable[0].failures,
        [(
            "default".to_string(),
            Failure::VolumeLimit { driver: EBS.into() }
        )]
    );
    assert!(
        out.unschedulable[0]
            .reason
            .contains("volume attach limit of ebs.csi.aws.com")
    );
}

#[test]
fn resources_not_volumes_fail_a_pod_too_big_for_every_type() {
    let np = NodePool::new("default", vec![limited(it("small", 2000, 4), &[(EBS, 0)])]);
    let p = with_volume(pod("big", 4000, 256), EBS, "data", Vec::new());
    let out = solve(&input(vec![np], vec![p]));
    assert!(matches!(
        out.unschedulable[0].failures[0].1,
        Failure::InsufficientResources(_)
    ));
}

/// A node of `limit` EBS attachments with `bound` EBS volumes of bound pods.
fn node_with_volumes(limit: u32, bound: usize) -> ExistingNode {
    let mut n = node("n1", "test-zone-1", 4000, 8);
    n.volume_limits.insert(EBS.into(), limit);
    n.pods = (0..bound)
        .map(|i| BoundPod {
            namespace: "default".into(),
            volumes: vec![VolumeUse {
                driver: EBS.into(),
                id: format!("default/bound-{i}"),
            }],
            ..BoundPod::default()
        })
        .collect();
    n
}

#[test]
fn existing_node_with_a_csinode_limit_refuses_a_pod_over_it() {
    let p = with_volume(pod("db-0", 100, 64), EBS, "data", Vec::new());
    let mut inp = input(vec![pool("default")], vec![p.clone()]);
    // Positive control: one attachment left.
    inp.nodes = vec![node_with_volumes(3, 2)];
    assert_eq!(solve(&inp).existing.len(), 1);
    // Full: a new node.
    inp.nodes = vec![node_with_volumes(2, 2)];
    let out = solve(&inp);
    assert!(out.existing.is_empty());
    assert_eq!(out.new_node_claims.len(), 1);
    // A claim already attached there counts once.
    inp.pods = vec![with_volume(
        pod("db-0", 100, 64),
        EBS,
        "bound-1",
        Vec::new(),
    )];
    assert_eq!(solve(&inp).existing.len(), 1);
}

#[test]
fn existing_node_limit_counts_pods_placed_in_the_solve() {
    let mut inp = input(vec![pool("default")], pods_with_claims(3));
    inp.nodes = vec![node_with_volumes(3, 1)];
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 2);
    assert_eq!(out.new_node_claims.len(), 1);
}

#[test]
fn consolidation_never_moves_a_pod_onto_a_node_over_its_limit() {
    let moving: Vec<Pod> = pods_with_claims(3)
        .into_iter()
        .map(|mut p| {
            p.moving = true;
            p
        })
        .collect();
    let mut inp = input(vec![pool("default")], moving);
    inp.nodes = vec![node_with_volumes(2, 0)];
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 2);
    assert_eq!(out.new_node_claims.len(), 1);
    // Positive control: without the limit the node takes all three.
    inp.nodes[0].volume_limits.clear();
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 3);
}

#[test]
fn price_capped_packing_keeps_volume_limits() {
    let priced = |name: &str, cpu: i64, mem: i64, price: f64, limit: u32| {
        let mut t = limited(it(name, cpu, mem), &[(EBS, limit)]);
        for o in &mut t.offerings {
            o.price = price;
        }
        t
    };
    let np = NodePool::new(
        "default",
        vec![
            priced("small", 2000, 4, 0.05, 2),
            priced("large", 8000, 16, 1.00, 16),
        ],
    );
    let mut ps = pods_with_claims(10);
    for p in &mut ps {
        p.requests.insert(CPU.into(), 500);
    }
    let inp = input(vec![np], ps);
    // First-fit: one large takes all ten.
    let ff = solve_first_fit(&inp);
    assert_eq!(ff.new_node_claims.len(), 1);
    // The cheaper plan: smalls, two volumes each (three pods would fit their cpu).
    let out = solve(&inp);
    assert!(out.first_fit_price.is_some());
    assert_eq!(out.new_node_claims.len(), 5, "{:?}", out.new_node_claims);
    assert!(out.new_node_claims.iter().all(|c| c.pods.len() == 2));
    assert_within_limits(&inp, &out);
}
