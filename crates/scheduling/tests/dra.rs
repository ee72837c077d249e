//! Dynamic Resource Allocation in the solver: pods go only where their ResourceClaims can be
//! allocated, from the devices a node of each instance type publishes and those existing
//! nodes have left. Every case has a positive control: the same pods without the constraint
//! under test land where it forbids.

mod common;
use common::*;
use scheduling::dra::*;

const GPU: &str = "gpu.example.com";

/// `n` devices `gpu-0…` of driver `GPU`, each with `memory` capacity and `model` attribute.
fn gpus(n: usize, memory: &str, model: &str) -> Vec<Slice> {
    vec![Slice {
        driver: GPU.into(),
        pool: String::new(),
        devices: (0..n)
            .map(|i| Device {
                name: format!("gpu-{i}"),
                attributes: [(format!("{GPU}/model"), Attribute::String(model.into()))].into(),
                capacity: [(format!("{GPU}/memory"), Quantity::parse(memory).expect("q"))].into(),
                ..Device::default()
            })
            .collect(),
        ..Slice::default()
    }]
}

/// A DRA side: class `GPU` (selecting the driver), types' devices.
fn dra(types: &[(&str, Vec<Slice>)]) -> Dra {
    Dra {
        classes: [(
            GPU.to_string(),
            DeviceClass {
                selectors: vec![format!("device.driver == \"{GPU}\"")],
            },
        )]
        .into(),
        instance_types: types
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect(),
        ..Dra::default()
    }
}

/// Pod `pod` claims a claim of its own (as from a ResourceClaimTemplate) with `requests`.
fn claim(d: &mut Dra, pod: &str, requests: Vec<DeviceRequest>) {
    let key = ("default".to_string(), format!("{pod}-gpu"));
    d.claims.insert(
        key.clone(),
        ResourceClaim {
            requests,
            ..ResourceClaim::default()
        },
    );
    d.pod_claims
        .entry(("default".into(), pod.into()))
        .or_default()
        .push(key);
}

/// Pod `pod` uses the shared claim `name`.
fn share(d: &mut Dra, pod: &str, name: &str) {
    d.pod_claims
        .entry(("default".into(), pod.into()))
        .or_default()
        .push(("default".into(), name.into()));
}

fn with_selector(class: &str, count: u32, selector: &str) -> DeviceRequest {
    let mut r = DeviceRequest::exactly("gpu", class, count);
    r.alternatives[0].selectors.push(selector.into());
    r
}

/// A cheap CPU type and a dearer 2-GPU type.
fn cpu_and_gpu() -> (Input, Dra) {
    let pool = NodePool::new("default", vec![it("cpu", 4000, 16), it("gpu2", 8000, 32)]);
    (
        input(vec![pool], pods("train", 2, 1000, 1024)),
        dra(&[("gpu2", gpus(2, "40Gi", "a100"))]),
    )
}

/// A request `gpu` of `n` devices of class `GPU`, alone.
fn gpu(n: u32) -> Vec<DeviceRequest> {
    vec![DeviceRequest::exactly("gpu", GPU, n)]
}

/// The candidate types of each NodeClaim the plan of `inp` with `d` creates.
fn plan(inp: &Input, d: &Dra) -> Vec<Vec<String>> {
    types_of(&solve_with_devices(inp, d))
}

/// One NodeClaim of type `t` alone.
fn one(t: &str) -> Vec<Vec<String>> {
    vec![vec![t.to_string()]]
}

/// No NodeClaim, and the one pod's reason says `why`.
fn assert_nowhere(out: &Output, why: &str) {
    assert!(out.new_node_claims.is_empty(), "{out:?}");
    assert!(out.unschedulable[0].reason.contains(why), "{out:?}");
}

fn types_of(out: &Output) -> Vec<Vec<String>> {
    out.new_node_claims
        .iter()
        .map(|c| c.instance_types().to_vec())
        .collect()
}

#[test]
fn two_pods_claiming_two_gpus_each_get_a_gpu_node_each() {
    let (inp, mut d) = cpu_and_gpu();
    for p in ["train-0", "train-1"] {
        claim(&mut d, p, gpu(2));
    }
    let out = solve_with_devices(&inp, &d);
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(types_of(&out), vec![vec!["gpu2".to_string()]; 2]);
    // Each waits for the driver its devices come from (karpenter.sh/requested-dra-drivers).
    for c in &out.new_node_claims {
        assert_eq!(c.dra_drivers, [GPU], "{c:?}");
    }
    // Control: without their claims both pods share one node of the cheapest type, which
    // waits for no driver.
    let plain = solve(&inp);
    assert_eq!(plain.new_node_claims.len(), 1);
    assert_eq!(plain.new_node_claims[0].cheapest.instance_type, "cpu");
    assert!(plain.new_node_claims[0].dra_drivers.is_empty());
    // And with claims of one GPU each, both fit one GPU node.
    let (inp, mut d) = cpu_and_gpu();
    for p in ["train-0", "train-1"] {
        claim(&mut d, p, gpu(1));
    }
    assert_eq!(plan(&inp, &d), one("gpu2"));
}

#[test]
fn no_type_with_enough_devices_says_which_request() {
    let (inp, mut d) = cpu_and_gpu();
    claim(&mut d, "train-0", gpu(3));
    claim(&mut d, "train-1", gpu(2));
    let out = solve_with_devices(&inp, &d);
    assert_eq!(out.unschedulable.len(), 1, "{:?}", out.unschedulable);
    let u = &out.unschedulable[0];
    assert_eq!(u.pod.name, "train-0");
    assert!(
        u.reason
            .contains("no instance type publishes 3 devices of class gpu.example.com"),
        "{}",
        u.reason
    );
    assert!(matches!(u.failures[0].1, Failure::Devices { .. }));
    // Control: the pod asking for 2 got the GPU type.
    assert_eq!(types_of(&out), one("gpu2"));
}

#[test]
fn a_capacity_selector_picks_the_type_whose_devices_match() {
    let pool = NodePool::new(
        "default",
        vec![it("gpu40", 8000, 32), it("gpu80", 16000, 64)],
    );
    let types = [
        ("gpu40", gpus(1, "40Gi", "a100")),
        ("gpu80", gpus(1, "80Gi", "h100")),
    ];
    let inp = input(vec![pool], pods("train", 1, 1000, 1024));
    let sel =
        |q: &str| format!("device.capacity[\"{GPU}\"].memory.compareTo(quantity(\"{q}\")) >= 0");
    let mut d = dra(&types);
    claim(&mut d, "train-0", vec![with_selector(GPU, 1, &sel("60Gi"))]);
    assert_eq!(plan(&inp, &d), one("gpu80"));
    // Control: a selector both types meet keeps both, the cheaper first.
    let mut d = dra(&types);
    claim(&mut d, "train-0", vec![with_selector(GPU, 1, &sel("20Gi"))]);
    assert_eq!(
        plan(&inp, &d),
        vec![vec!["gpu40".to_string(), "gpu80".to_string()]]
    );
    // An attribute selector, with the strings extension.
    let mut d = dra(&types);
    let model = format!("device.attributes[\"{GPU}\"].model.upperAscii() == \"H100\"");
    claim(&mut d, "train-0", vec![with_selector(GPU, 1, &model)]);
    assert_eq!(plan(&inp, &d), one("gpu80"));
}

#[test]
fn a_selector_on_an_attribute_a_type_lacks_rules_that_type_out() {
    // gpu-plain: devices as Cluster Autoscaler declares them (no memory capacity).
    let pool = NodePool::new(
        "default",
        vec![it("gpu-plain", 8000, 32), it("gpu80", 16000, 64)],
    );
    let plain = vec![Slice {
        driver: GPU.into(),
        pool: String::new(),
        devices: vec![Device::named("gpu-0")],
        ..Slice::default()
    }];
    let inp = input(vec![pool], pods("train", 1, 1000, 1024));
    let sel = format!("device.capacity[\"{GPU}\"].memory.compareTo(quantity(\"40Gi\")) >= 0");
    let mut d = dra(&[
        ("gpu-plain", plain.clone()),
        ("gpu80", gpus(1, "80Gi", "h100")),
    ]);
    claim(&mut d, "train-0", vec![with_selector(GPU, 1, &sel)]);
    assert_eq!(plan(&inp, &d), one("gpu80"));
    // Control: a selector without the attribute keeps the cheaper plain type.
    let mut d = dra(&[("gpu-plain", plain), ("gpu80", gpus(1, "80Gi", "h100"))]);
    claim(&mut d, "train-0", gpu(1));
    assert_eq!(plan(&inp, &d)[0][0], "gpu-plain".to_string());
}

#[test]
fn an_expression_that_cannot_be_evaluated_makes_the_pod_unplaceable() {
    let (inp, _) = cpu_and_gpu();
    for (expr, why) in [
        ("device.driver ==", "Syntax error"),
        ("device.driver", "not a bool"),
        ("cel.bind(x, 1, x == 1)", "cannot be evaluated"),
        ("ip(\"10.0.0.1\").family() == 4", "cannot be evaluated"),
    ] {
        let mut d = dra(&[("gpu2", gpus(2, "40Gi", "a100"))]);
        claim(&mut d, "train-0", vec![with_selector(GPU, 1, expr)]);
        claim(&mut d, "train-1", gpu(1));
        let out = solve_with_devices(&inp, &d);
        assert_eq!(
            out.unschedulable.len(),
            1,
            "{expr}: {:?}",
            out.unschedulable
        );
        assert_eq!(out.unschedulable[0].pod.name, "train-0");
        assert!(
            out.unschedulable[0].reason.contains(why),
            "{expr}: {}",
            out.unschedulable[0].reason
        );
        // Control: the other pod, whose claim has no selector, is placed.
        assert_eq!(out.find("train-1"), Some(Ok(0)), "{expr}");
    }
    // A missing class or claim says so.
    let mut d = dra(&[("gpu2", gpus(2, "40Gi", "a100"))]);
    claim(
        &mut d,
        "train-0",
        vec![DeviceRequest::exactly("gpu", "nope.example.com", 1)],
    );
    share(&mut d, "train-1", "missing");
    let out = solve_with_devices(&inp, &d);
    let reasons: Vec<&str> = out
        .unschedulable
        .iter()
        .map(|u| u.reason.as_str())
        .collect();
    assert!(
        reasons[0].contains("device class nope.example.com does not exist"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("resourceclaim default/missing does not exist"),
        "{reasons:?}"
    );
}

#[test]
fn pods_sharing_a_claim_go_to_one_node() {
    let pool = NodePool::new("default", vec![it("gpu1", 4000, 16)]);
    let inp = input(vec![pool], pods("w", 3, 1000, 1024));
    let mut d = dra(&[("gpu1", gpus(1, "40Gi", "a100"))]);
    d.claims.insert(
        ("default".into(), "shared".into()),
        ResourceClaim {
            requests: gpu(1),
            ..ResourceClaim::default()
        },
    );
    for p in ["w-0", "w-1", "w-2"] {
        share(&mut d, p, "shared");
    }
    let out = solve_with_devices(&inp, &d);
    assert_eq!(out.new_node_claims.len(), 1, "{out:?}");
    assert_eq!(out.new_node_claims[0].pods.len(), 3);
    // Control: a claim each, one GPU per node, three nodes.
    let mut d = dra(&[("gpu1", gpus(1, "40Gi", "a100"))]);
    for p in ["w-0", "w-1", "w-2"] {
        claim(&mut d, p, gpu(1));
    }
    assert_eq!(solve_with_devices(&inp, &d).new_node_claims.len(), 3);
}

/// Two existing nodes with 2 GPUs each (published slices, pool = node name).
fn two_gpu_nodes() -> (Input, Dra) {
    let mut inp = input(
        vec![NodePool::new("default", vec![it("gpu2", 8000, 32)])],
        pods("w", 1, 1000, 1024),
    );
    inp.nodes = vec![
        node("n1", ZONES[0], 8000, 32),
        node("n2", ZONES[0], 8000, 32),
    ];
    let mut d = dra(&[("gpu2", gpus(2, "40Gi", "a100"))]);
    for n in ["n1", "n2"] {
        let mut s = gpus(2, "40Gi", "a100");
        s[0].pool = n.into();
        d.nodes.insert(n.into(), s);
    }
    (inp, d)
}

fn allocated(node: &str, devices: &[&str]) -> ResourceClaim {
    ResourceClaim {
        requests: vec![DeviceRequest::exactly("gpu", GPU, devices.len() as u32)],
        allocation: Some(Allocation {
            consumed: Default::default(),
            devices: devices
                .iter()
                .map(|d| DeviceId {
                    driver: GPU.into(),
                    pool: node.into(),
                    device: d.to_string(),
                })
                .collect(),
            node_name: Some(node.into()),
            node_selector: Vec::new(),
        }),
        ..ResourceClaim::default()
    }
}

#[test]
fn an_allocated_claim_pins_its_pod_to_its_node() {
    let (inp, mut d) = two_gpu_nodes();
    d.claims
        .insert(("default".into(), "c".into()), allocated("n2", &["gpu-0"]));
    share(&mut d, "w-0", "c");
    let out = solve_with_devices(&inp, &d);
    assert_eq!(out.find("w-0"), Some(Err("n2")));
    // Control: an unallocated claim goes to the first node.
    let (inp, mut d) = two_gpu_nodes();
    claim(&mut d, "w-0", gpu(1));
    assert_eq!(solve_with_devices(&inp, &d).find("w-0"), Some(Err("n1")));
    // A claim allocated on a node that is gone: nowhere.
    let (inp, mut d) = two_gpu_nodes();
    d.claims.insert(
        ("default".into(), "c".into()),
        allocated("gone", &["gpu-0"]),
    );
    share(&mut d, "w-0", "c");
    assert_nowhere(&solve_with_devices(&inp, &d), "allocated on node gone");
}

#[test]
fn devices_allocated_on_existing_nodes_are_taken() {
    // n1's two GPUs are held by a running pod's claim; n2 has one left.
    let held = |n: u32| {
        let (inp, mut d) = two_gpu_nodes();
        for (claim, node, devices) in [
            ("held1", "n1", &["gpu-0", "gpu-1"][..]),
            ("held2", "n2", &["gpu-1"]),
        ] {
            d.claims
                .insert(("default".into(), claim.into()), allocated(node, devices));
        }
        claim(&mut d, "w-0", gpu(n));
        solve_with_devices(&inp, &d)
    };
    let out = held(2);
    assert!(out.existing.is_empty(), "{out:?}");
    assert_eq!(types_of(&out), one("gpu2"));
    // Control: one GPU fits what n2 has left.
    assert_eq!(held(1).find("w-0"), Some(Err("n2")));
}

#[test]
fn first_available_takes_the_first_alternative_a_type_has() {
    let pool = NodePool::new("default", vec![it("gpu40", 8000, 32)]);
    let inp = input(vec![pool], pods("w", 1, 1000, 1024));
    let big = format!("device.capacity[\"{GPU}\"].memory.isGreaterThan(quantity(\"60Gi\"))");
    let mut first = SubRequest::exactly(GPU, 1);
    first.name = Some("big".into());
    first.selectors.push(big.clone());
    let mut second = SubRequest::exactly(GPU, 2);
    second.name = Some("two-small".into());
    let req = DeviceRequest {
        name: "gpu".into(),
        alternatives: vec![first, second],
    };
    let mut d = dra(&[("gpu40", gpus(2, "40Gi", "a100"))]);
    claim(&mut d, "w-0", vec![req]);
    assert_eq!(plan(&inp, &d), one("gpu40"));
    // Control: the first alternative alone has no type.
    let mut d = dra(&[("gpu40", gpus(2, "40Gi", "a100"))]);
    claim(&mut d, "w-0", vec![with_selector(GPU, 1, &big)]);
    assert_nowhere(&solve_with_devices(&inp, &d), "matching its selectors");
}

#[test]
fn all_mode_takes_every_matching_device() {
    let pool = NodePool::new("default", vec![it("gpu4", 16000, 64)]);
    let inp = input(vec![pool], pods("w", 2, 1000, 1024));
    let all = DeviceRequest {
        name: "gpu".into(),
        alternatives: vec![SubRequest {
            mode: AllocationMode::All,
            ..SubRequest::exactly(GPU, 1)
        }],
    };
    let mut d = dra(&[("gpu4", gpus(4, "40Gi", "a100"))]);
    claim(&mut d, "w-0", vec![all.clone()]);
    claim(&mut d, "w-1", gpu(1));
    // w-0 takes all four: w-1 needs a node of its own.
    assert_eq!(solve_with_devices(&inp, &d).new_node_claims.len(), 2);
    // Control: with one device each, both share a node.
    let mut d = dra(&[("gpu4", gpus(4, "40Gi", "a100"))]);
    claim(&mut d, "w-0", gpu(1));
    claim(&mut d, "w-1", gpu(1));
    assert_eq!(solve_with_devices(&inp, &d).new_node_claims.len(), 1);
}

#[test]
fn match_attribute_needs_devices_with_one_value() {
    // gpu-mixed: two devices of different models; gpu-same: two of one model.
    let mut mixed = gpus(2, "40Gi", "a100");
    mixed[0].devices[1]
        .attributes
        .insert(format!("{GPU}/model"), Attribute::String("h100".into()));
    let pool = NodePool::new(
        "default",
        vec![it("gpu-mixed", 8000, 32), it("gpu-same", 16000, 64)],
    );
    let inp = input(vec![pool], pods("w", 1, 1000, 1024));
    let claim_with = |constraints: Vec<Constraint>| {
        let mut d = dra(&[
            ("gpu-mixed", mixed.clone()),
            ("gpu-same", gpus(2, "40Gi", "a100")),
        ]);
        claim(&mut d, "w-0", gpu(2));
        if let Some(c) = d.claims.values_mut().next() {
            c.constraints = constraints;
        }
        d
    };
    let same = claim_with(vec![Constraint {
        requests: Vec::new(),
        kind: ConstraintKind::MatchAttribute(format!("{GPU}/model")),
    }]);
    assert_eq!(plan(&inp, &same), one("gpu-same"));
    // Control: without the constraint the cheaper mixed type is first.
    let free = claim_with(Vec::new());
    assert_eq!(plan(&inp, &free)[0][0], "gpu-mixed");
    // distinctAttribute: only the mixed type has two distinct models.
    let distinct = claim_with(vec![Constraint {
        requests: vec!["gpu".into()],
        kind: ConstraintKind::DistinctAttribute(format!("{GPU}/model")),
    }]);
    assert_eq!(plan(&inp, &distinct), one("gpu-mixed"));
}

#[test]
fn pods_without_claims_plan_as_without_dra() {
    let (inp, mut d) = cpu_and_gpu();
    claim(&mut d, "someone-else", gpu(2));
    assert_eq!(solve_with_devices(&inp, &d), solve(&inp));
    assert_eq!(
        solve_with_devices(&bench_workload::input(300), &d),
        solve(&bench_workload::input(300))
    );
}

#[test]
fn a_semver_attribute_compares_as_a_version() {
    let pool = NodePool::new("default", vec![it("old", 8000, 32), it("new", 16000, 64)]);
    let inp = input(vec![pool], pods("w", 1, 1000, 1024));
    let with_driver = |v: &str| {
        let mut s = gpus(1, "40Gi", "a100");
        s[0].devices[0]
            .attributes
            .insert(format!("{GPU}/driverVersion"), Attribute::Version(v.into()));
        s
    };
    let types = [
        ("old", with_driver("1.9.0")),
        ("new", with_driver("1.10.0")),
    ];
    let sel =
        format!("device.attributes[\"{GPU}\"].driverVersion.isGreaterThan(semver(\"1.9.5\"))");
    let mut d = dra(&types);
    claim(&mut d, "w-0", vec![with_selector(GPU, 1, &sel)]);
    assert_eq!(plan(&inp, &d), one("new"));
    // Control: compared as strings "1.10.0" < "1.9.5"; as versions both exceed 1.0.0.
    let sel =
        format!("device.attributes[\"{GPU}\"].driverVersion.compareTo(semver(\"1.0.0\")) > 0");
    let mut d = dra(&types);
    claim(&mut d, "w-0", vec![with_selector(GPU, 1, &sel)]);
    assert_eq!(plan(&inp, &d)[0].len(), 2);
}

/// A partitionable GPU: one pool whose `profiles` devices each draw `each` of the `budget`
/// of counter set `gpu-slices`' `memory`.
fn partitioned(profiles: usize, budget: &str, each: &str) -> Vec<Slice> {
    let set = |q: &str| CounterSet {
        name: "gpu-slices".into(),
        counters: [("memory".to_string(), Quantity::parse(q).expect("q"))].into(),
    };
    vec![
        Slice {
            driver: GPU.into(),
            counters: vec![set(budget)],
            ..Slice::default()
        },
        Slice {
            driver: GPU.into(),
            devices: (0..profiles)
                .map(|i| Device {
                    name: format!("profile-{i}"),
                    consumes: vec![set(each)],
                    ..Device::default()
                })
                .collect(),
            ..Slice::default()
        },
    ]
}

#[test]
fn partitionable_devices_stay_within_their_pools_counter_budget() {
    // Karpenter's "Partitionable devices (K)" specs: three 40Gi profiles of an 80Gi budget.
    let pool = NodePool::new("default", vec![it("gpu", 8000, 32)]);
    let inp = input(vec![pool], pods("w", 3, 100, 128));
    let mut d = dra(&[("gpu", partitioned(3, "80Gi", "40Gi"))]);
    for p in ["w-0", "w-1", "w-2"] {
        claim(&mut d, p, gpu(1));
    }
    // Two profiles fit one node's budget, the third needs a second node.
    assert_eq!(plan(&inp, &d), vec![vec!["gpu".to_string()]; 2]);
    // A profile above the whole budget is never allocatable.
    let mut over = dra(&[("gpu", partitioned(1, "40Gi", "80Gi"))]);
    claim(&mut over, "w-0", gpu(1));
    let one_pod = input(
        vec![NodePool::new("default", vec![it("gpu", 8000, 32)])],
        pods("w", 1, 100, 128),
    );
    assert!(
        solve_with_devices(&one_pod, &over)
            .new_node_claims
            .is_empty()
    );
    // A device drawing on a counter set its pool lacks is never allocatable.
    let mut missing = dra(&[("gpu", partitioned(1, "80Gi", "40Gi"))]);
    missing.instance_types.get_mut("gpu").expect("gpu")[0].counters[0].name = "other".into();
    claim(&mut missing, "w-0", gpu(1));
    assert!(
        solve_with_devices(&one_pod, &missing)
            .new_node_claims
            .is_empty()
    );
    // Control: with a budget for all three, one node takes them.
    let mut roomy = dra(&[("gpu", partitioned(3, "120Gi", "40Gi"))]);
    for p in ["w-0", "w-1", "w-2"] {
        claim(&mut roomy, p, gpu(1));
    }
    assert_eq!(plan(&inp, &roomy), one("gpu"));
}

/// A request `gpu` of one device of class `GPU` offering `capacity`.
fn gpu_with(capacity: &[(&str, &str)]) -> Vec<DeviceRequest> {
    let mut r = DeviceRequest::exactly("gpu", GPU, 1);
    r.alternatives[0].capacity = capacity
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).expect("q")))
        .collect();
    vec![r]
}

#[test]
fn a_capacity_request_needs_a_device_offering_it() {
    // Karpenter's "Consumable capacity (P)" P6/P8/P9: a request over the device's capacity,
    // of a dimension it lacks, or above its policy's valid values finds no device.
    let one_pod = || {
        input(
            vec![NodePool::new("default", vec![it("gpu", 8000, 32)])],
            pods("w", 1, 100, 128),
        )
    };
    let placed = |req: Vec<DeviceRequest>, slices: Vec<Slice>| {
        let mut d = dra(&[("gpu", slices)]);
        claim(&mut d, "w-0", req);
        !solve_with_devices(&one_pod(), &d)
            .new_node_claims
            .is_empty()
    };
    let memory = format!("{GPU}/memory");
    assert!(placed(
        gpu_with(&[(&memory, "16Gi")]),
        gpus(1, "40Gi", "a100")
    ));
    assert!(
        placed(gpu_with(&[("memory", "40Gi")]), gpus(1, "40Gi", "a100")),
        "bare name"
    );
    assert!(!placed(
        gpu_with(&[(&memory, "48Gi")]),
        gpus(1, "40Gi", "a100")
    ));
    assert!(!placed(
        gpu_with(&[("bandwidth", "10")]),
        gpus(1, "40Gi", "a100")
    ));
    // validValues round a request up: 5Gi takes 8Gi; 17Gi, though within the 32Gi, has no
    // valid value.
    let with_policy = || {
        let mut s = gpus(1, "32Gi", "a100");
        s[0].devices[0].policies.insert(
            memory.clone(),
            CapacityPolicy {
                valid_values: ["4Gi", "8Gi", "16Gi"]
                    .iter()
                    .map(|v| Quantity::parse(v).expect("q"))
                    .collect(),
                ..CapacityPolicy::default()
            },
        );
        s
    };
    assert!(placed(gpu_with(&[(&memory, "5Gi")]), with_policy()));
    assert!(!placed(gpu_with(&[(&memory, "17Gi")]), with_policy()));
    assert!(placed(
        gpu_with(&[(&memory, "17Gi")]),
        gpus(1, "32Gi", "a100")
    ));
}

#[test]
fn pods_whose_claims_have_one_shape_share_its_types_and_other_shapes_keep_theirs() {
    // The solver allocates each distinct shape of claims (selector sets, modes, counts) once
    // for every pod that has it: pods of one shape must get its answer, pods of another
    // shape their own.
    let pool = NodePool::new(
        "default",
        vec![it("gpu40", 8000, 32), it("gpu80", 16000, 64)],
    );
    let types = [
        ("gpu40", gpus(2, "40Gi", "a100")),
        ("gpu80", gpus(2, "80Gi", "h100")),
    ];
    let inp = input(vec![pool], pods("train", 6, 5000, 1024));
    let big = format!("device.capacity[\"{GPU}\"].memory.compareTo(quantity(\"60Gi\")) >= 0");
    let mut d = dra(&types);
    for i in 0..6 {
        let requests = if i % 2 == 0 {
            vec![with_selector(GPU, 2, &big)]
        } else {
            gpu(1)
        };
        claim(&mut d, &format!("train-{i}"), requests);
    }
    let out = solve_with_devices(&inp, &d);
    assert!(out.unschedulable.is_empty(), "{out:?}");
    let placed: usize = out.new_node_claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 6, "{out:?}");
    for c in &out.new_node_claims {
        let even = c.pods.iter().any(|p| {
            p.name
                .strip_prefix("train-")
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n % 2 == 0)
        });
        if even {
            assert_eq!(c.instance_types(), ["gpu80"], "{out:?}");
        }
    }
    // Control: the pods of one GPU of any memory keep the cheaper type somewhere.
    assert!(
        out.new_node_claims
            .iter()
            .any(|c| c.instance_types().first().is_some_and(|t| t == "gpu40")),
        "{out:?}"
    );
}

/// One device `gpu-0` of 16Gi memory allowing multiple allocations (consumable capacity),
/// its memory's policy defaulting to `default` when given.
fn shared_gpu(default: Option<&str>) -> Vec<Slice> {
    let mut s = gpus(1, "16Gi", "a100");
    let d = &mut s[0].devices[0];
    d.multiple = true;
    if let Some(v) = default {
        d.policies.insert(
            format!("{GPU}/memory"),
            CapacityPolicy {
                default: Some(Quantity::parse(v).expect("q")),
                ..CapacityPolicy::default()
            },
        );
    }
    s
}

/// NodeClaims the plan of `n` pods each claiming `req` from type `gpu` (one device `slices`)
/// creates; every pod must be placed.
fn shared_plan(n: usize, req: &[(&str, &str)], slices: Vec<Slice>) -> usize {
    let inp = input(
        vec![NodePool::new("default", vec![it("gpu", 16000, 64)])],
        pods("w", n, 100, 128),
    );
    let mut d = dra(&[("gpu", slices)]);
    for i in 0..n {
        claim(&mut d, &format!("w-{i}"), gpu_with(req));
    }
    let out = solve_with_devices(&inp, &d);
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    out.new_node_claims.len()
}

#[test]
fn a_device_allowing_multiple_allocations_is_shared_by_capacity() {
    // Karpenter's "Consumable capacity (P)" P2/P3: 4Gi shares of one 16Gi device.
    let memory = format!("{GPU}/memory");
    let four = [(memory.as_str(), "4Gi")];
    assert_eq!(
        shared_plan(4, &four, shared_gpu(None)),
        1,
        "four shares fill it"
    );
    assert_eq!(
        shared_plan(5, &four, shared_gpu(None)),
        2,
        "the fifth needs another"
    );
    // Control: the same device allocated whole takes one pod a node.
    assert_eq!(shared_plan(4, &four, gpus(1, "16Gi", "a100")), 4);
    // P10: a request naming no capacity consumes the policy's default (4Gi), else all of it.
    assert_eq!(shared_plan(4, &[], shared_gpu(Some("4Gi"))), 1);
    assert_eq!(shared_plan(2, &[], shared_gpu(None)), 2);
    // A 10Gi and a 4Gi share fit 16Gi; a second 10Gi does not.
    let ten = [(memory.as_str(), "10Gi")];
    let inp = input(
        vec![NodePool::new("default", vec![it("gpu", 16000, 64)])],
        pods("w", 3, 100, 128),
    );
    let mut d = dra(&[("gpu", shared_gpu(None))]);
    claim(&mut d, "w-0", gpu_with(&ten));
    claim(&mut d, "w-1", gpu_with(&four));
    claim(&mut d, "w-2", gpu_with(&ten));
    let out = solve_with_devices(&inp, &d);
    assert_eq!(out.new_node_claims.len(), 2, "{out:?}");
    let together = out
        .new_node_claims
        .iter()
        .find(|c| c.pods.len() == 2)
        .expect("two pods share a device");
    let names: Vec<&str> = together.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["w-0", "w-1"]);
}

#[test]
fn an_existing_nodes_shared_device_has_what_its_allocations_left() {
    // n1's shared 16Gi device has 12Gi consumed by a running pod's claim.
    let run = |want: &str| {
        let mut inp = input(
            vec![NodePool::new("default", vec![it("gpu", 16000, 64)])],
            pods("w", 1, 100, 128),
        );
        inp.nodes = vec![node("n1", ZONES[0], 8000, 32)];
        let mut d = dra(&[("gpu", shared_gpu(None))]);
        let mut s = shared_gpu(None);
        s[0].pool = "n1".into();
        d.nodes.insert("n1".into(), s);
        let mut held = allocated("n1", &["gpu-0"]);
        if let Some(a) = held.allocation.as_mut() {
            a.consumed.insert(
                a.devices[0].clone(),
                [(format!("{GPU}/memory"), Quantity::parse("12Gi").expect("q"))].into(),
            );
        }
        d.claims.insert(("default".into(), "held".into()), held);
        claim(&mut d, "w-0", gpu_with(&[("memory", want)]));
        solve_with_devices(&inp, &d)
    };
    assert_eq!(run("4Gi").find("w-0"), Some(Err("n1")), "4Gi are left");
    let out = run("8Gi");
    assert!(out.existing.is_empty(), "{out:?}");
    assert_eq!(out.new_node_claims.len(), 1, "8Gi need a new node");
}

#[test]
fn claims_differing_only_in_capacity_requests_are_allocated_apart() {
    // One class, no selectors: only the capacity asked for tells the two claims apart. The
    // 60Gi one needs the 80Gi type; the 30Gi one still gets the cheaper 40Gi type.
    let pool = NodePool::new(
        "default",
        vec![it("gpu40", 8000, 32), it("gpu80", 16000, 64)],
    );
    let inp = input(vec![pool], pods("w", 2, 100, 128));
    let mut d = dra(&[
        ("gpu40", gpus(1, "40Gi", "a100")),
        ("gpu80", gpus(1, "80Gi", "h100")),
    ]);
    let memory = format!("{GPU}/memory");
    claim(&mut d, "w-0", gpu_with(&[(&memory, "60Gi")]));
    claim(&mut d, "w-1", gpu_with(&[(&memory, "30Gi")]));
    let out = solve_with_devices(&inp, &d);
    let mut cheapest: Vec<(&str, &str)> = out
        .new_node_claims
        .iter()
        .map(|c| (c.pods[0].name.as_str(), c.cheapest.instance_type.as_str()))
        .collect();
    cheapest.sort();
    assert_eq!(cheapest, [("w-0", "gpu80"), ("w-1", "gpu40")], "{out:?}");
}

/// A network pool `net` of `n` GPUs reachable from the nodes `node_selector` allows (empty:
/// every node, `allNodes`).
fn network(n: usize, node_selector: Vec<Vec<Requirement>>) -> NetworkPool {
    let mut slices = gpus(n, "40Gi", "a100");
    slices[0].pool = "net".into();
    NetworkPool {
        slices,
        node_selector,
    }
}

/// Two pods each claiming one GPU, a CPU-only catalog, and the network pool `pool`.
fn over_network(pool: NetworkPool) -> (Input, Dra) {
    let inp = input(
        vec![NodePool::new("default", vec![it("cpu", 4000, 16)])],
        pods("w", 2, 1000, 1024),
    );
    let mut d = dra(&[]);
    d.network.push(pool);
    for p in ["w-0", "w-1"] {
        claim(&mut d, p, gpu(1));
    }
    (inp, d)
}

#[test]
fn network_attached_devices_serve_claims_on_any_node() {
    // Karpenter's E1/V2: a cluster-wide pool (allNodes) serves claims whatever the node.
    let (inp, d) = over_network(network(2, Vec::new()));
    let out = solve_with_devices(&inp, &d);
    assert!(out.unschedulable.is_empty(), "{out:?}");
    assert_eq!(types_of(&out), one("cpu"), "both pods on one CPU node");
    assert!(
        out.new_node_claims[0].dra_drivers.is_empty(),
        "a node publishes none of a network pool's devices: nothing to wait for"
    );
    // Its devices are taken for the whole solve: one device serves one of the two pods.
    let (inp, d) = over_network(network(1, Vec::new()));
    let out = solve_with_devices(&inp, &d);
    assert_eq!(out.unschedulable.len(), 1, "{out:?}");
    assert_eq!(out.unschedulable[0].pod.name, "w-1");
    // A device an allocated claim holds is taken.
    let (inp, mut d) = over_network(network(2, Vec::new()));
    let mut held = allocated("net", &["gpu-0"]);
    if let Some(a) = held.allocation.as_mut() {
        a.node_name = None;
    }
    d.claims.insert(("default".into(), "held".into()), held);
    assert_eq!(solve_with_devices(&inp, &d).unschedulable.len(), 1);
    // Control: without the pool, no node has a GPU.
    let (inp, mut d) = over_network(network(2, Vec::new()));
    d.network.clear();
    assert_eq!(solve_with_devices(&inp, &d).unschedulable.len(), 2);
}

#[test]
fn a_zoned_network_pool_puts_its_pods_in_its_zone() {
    // Karpenter's D2: the pool's node selector becomes the pods' requirement.
    let zone = vec![vec![Requirement::new(
        LABEL_ZONE,
        Operator::In,
        &[ZONES[1]],
    )]];
    let (inp, d) = over_network(network(2, zone));
    let out = solve_with_devices(&inp, &d);
    assert!(out.unschedulable.is_empty(), "{out:?}");
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(zone_of(&out.new_node_claims[0]), ZONES[1]);
    // Control: a pool for every node leaves the zone to price (the first zone).
    let (inp, d) = over_network(network(2, Vec::new()));
    assert_eq!(
        zone_of(&solve_with_devices(&inp, &d).new_node_claims[0]),
        ZONES[0]
    );
}
