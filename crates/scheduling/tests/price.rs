//! Price-aware packing: the plan is never pricier than Karpenter's first-fit plan, schedules no
//! fewer pods, keeps every constraint first-fit's plan keeps, and beats first-fit where the
//! price per CPU is not flat (issue 39's simulate case: four `small` at 0.05/h, not one `large`
//! at 1.00/h), and where a workload needs one node per replica on a linearly priced catalog
//! (nodes of the average size, balanced). Case counts: `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "../../../tests/common/prop_cases.rs"]
mod prop_cases;

mod common;
use common::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

fn priced(name: &str, cpu_m: i64, mem_gi: i64, arch: &str, price: f64) -> InstanceType {
    let mut t = it_with(name, cpu_m, mem_gi, arch, &[]);
    for o in &mut t.offerings {
        o.price = price;
    }
    t
}

/// `pods` labelled `app`, each refusing a node another of them is on (hostname anti-affinity).
fn one_per_node(pods: Vec<Pod>, app: &str) -> Vec<Pod> {
    pods.into_iter()
        .map(|mut p| {
            p.labels = labels(&[("app", app)]);
            p.pod_anti_affinity = vec![PodAffinityTerm::new(
                LABEL_HOSTNAME,
                LabelSelector::labels(&[("app", app)]),
            )];
            p
        })
        .collect()
}

/// Issue 39's case: `small` 2 cpu at 0.05/h, `large` 8 cpu at 1.00/h, ten pods of 500m.
fn why_case() -> Input {
    let types = vec![
        priced("small", 2000, 4, "amd64", 0.05),
        priced("large", 8000, 16, "amd64", 1.00),
    ];
    input(
        vec![NodePool::new("default", types)],
        pods("p", 10, 500, 128),
    )
}

#[test]
fn why_case_plans_small_nodes() {
    let inp = why_case();
    // Positive control: first-fit (Karpenter's packing) puts all ten pods on one large.
    let ff = solve_first_fit(&inp);
    assert_eq!(ff.new_node_claims.len(), 1);
    assert_eq!(ff.new_node_claims[0].cheapest.instance_type, "large");
    assert!((ff.price() - 1.00).abs() < 1e-9, "{}", ff.price());

    let out = solve(&inp);
    assert!(out.unschedulable.is_empty());
    assert_eq!(placed(&out), 10);
    assert!(
        out.new_node_claims
            .iter()
            .all(|c| c.cheapest.instance_type == "small"),
        "{:?}",
        out.new_node_claims
            .iter()
            .map(|c| &c.cheapest.instance_type)
            .collect::<Vec<_>>()
    );
    // 1900m allocatable each: three pods per small, four smalls.
    assert_eq!(out.new_node_claims.len(), 4);
    assert!(out.price() <= 0.25, "{}", out.price());
    assert_eq!(out.first_fit_price, Some(ff.price()));
    assert_valid(&inp, &out);
}

#[test]
fn flat_price_per_cpu_keeps_first_fit() {
    // Price grows with size (the common catalog): the capped plans cost as much or more with
    // more NodeClaims, so the plan is first-fit's, unannotated.
    let inp = input(vec![pool("default")], pods("p", 40, 500, 512));
    let ff = solve_first_fit(&inp);
    let out = solve(&inp);
    assert_eq!(out, ff);
    assert_eq!(out.first_fit_price, None);
}

#[test]
fn capped_plan_keeps_anti_affinity_spread_and_selectors() {
    // Twelve zonal-spread pods, four hostname anti-affine pods and four arm64 pods on a catalog
    // whose large types cost far more per cpu.
    let types = vec![
        priced("small", 2000, 8, "amd64", 0.05),
        priced("small-arm", 2000, 8, "arm64", 0.04),
        priced("large", 16000, 64, "amd64", 2.00),
        priced("large-arm", 16000, 64, "arm64", 1.80),
    ];
    let mut ps = Vec::new();
    for (i, mut p) in pods("spread", 12, 500, 256).into_iter().enumerate() {
        p.labels = labels(&[("app", "spread")]);
        p.topology_spread = vec![spread(
            LABEL_ZONE,
            1,
            WhenUnsatisfiable::DoNotSchedule,
            &[("app", "spread")],
        )];
        p.creation = i as i64;
        ps.push(p);
    }
    ps.extend(one_per_node(pods("anti", 4, 250, 256), "anti"));
    for mut p in pods("arm", 4, 500, 256) {
        p.node_selector = labels(&[(LABEL_ARCH, "arm64")]);
        ps.push(p);
    }
    let inp = input(vec![NodePool::new("default", types)], ps);
    let ff = solve_first_fit(&inp);
    assert!(
        violations(&inp, &ff).is_empty(),
        "{:?}",
        violations(&inp, &ff)
    );
    let out = solve(&inp);
    assert!(out.unschedulable.is_empty());
    assert_eq!(placed(&out), 20);
    assert!(
        out.price() < ff.price(),
        "plan {} first-fit {}",
        out.price(),
        ff.price()
    );
    assert_eq!(out.first_fit_price, Some(ff.price()));
    assert_valid(&inp, &out);
}

/// A resizable template's sizes priced linearly per cpu and GiB (2–16 cpu, 2 or 8 GiB per
/// cpu), twelve replicas that each need their own node (hostname anti-affinity), and
/// cpu-heavy and memory-heavy pods besides.
fn one_node_per_replica_case() -> Input {
    let mut types = Vec::new();
    for cpu in [2, 4, 8, 16] {
        for per in [2, 8] {
            let gi = per * cpu;
            let price = 0.03 * cpu as f64 + 0.004 * gi as f64;
            types.push(priced(
                &format!("vm-{cpu}c-{gi}g"),
                cpu * 1000,
                gi,
                "amd64",
                price,
            ));
        }
    }
    let mut ps = one_per_node(pods("replica", 12, 500, 512), "replica");
    ps.extend(pods("cpu", 24, 1500, 256));
    ps.extend(pods("mem", 24, 100, 6 * 1024));
    input(vec![NodePool::new("default", types)], ps)
}

#[test]
fn nodes_of_the_average_size_carry_a_workload_that_needs_many_nodes() {
    let inp = one_node_per_replica_case();
    // Positive control: first-fit grows its first claims into the largest types, lopsided
    // (3.38/h); twelve nodes of the average claim's size, each a balanced mix, cost 2.98/h.
    // Prices are linear in size, so only the fair cap sees this (without it: first-fit's plan).
    let ff = solve_first_fit(&inp);
    assert!(ff.unschedulable.is_empty());
    let out = solve(&inp);
    assert!(out.unschedulable.is_empty());
    assert_eq!(placed(&out), 60);
    assert!(
        out.price() < ff.price() * 0.9,
        "plan {} first-fit {}",
        out.price(),
        ff.price()
    );
    assert_eq!(out.first_fit_price, Some(ff.price()));
    assert_valid(&inp, &out);
}

#[test]
fn the_checker_sees_violations() {
    // Positive control of `violations`: a plan breaking each rule is caught.
    let inp = why_case();
    let mut out = solve_first_fit(&inp);
    out.new_node_claims[0].cheapest.instance_type = "small".into();
    assert!(violations(&inp, &out).iter().any(|v| v.contains("holds")));

    let mut ps = pods("anti", 2, 100, 64);
    for p in &mut ps {
        p.labels = labels(&[("app", "anti")]);
        p.pod_anti_affinity = vec![PodAffinityTerm::new(
            LABEL_HOSTNAME,
            LabelSelector::labels(&[("app", "anti")]),
        )];
    }
    let inp = input(vec![pool("default")], ps);
    let mut out = solve_first_fit(&inp);
    assert_eq!(out.new_node_claims.len(), 2);
    let moved = out.new_node_claims.remove(1).pods;
    out.new_node_claims[0].pods.extend(moved);
    assert!(violations(&inp, &out).iter().any(|v| v.contains("anti")));
}

/// Every rule the generated inputs use, checked on a plan: each pod at most once and every pod
/// accounted for; each claim's pods fit its launch type (and every listed type); the launch type
/// matches each pod's nodeSelector; hostname anti-affine pods alone among theirs on a claim;
/// zonal spread (maxSkew 1 over the three zones) among placed spread pods.
/// The plan breaks no constraint the checker knows.
fn assert_valid(inp: &Input, out: &Output) {
    let broken = violations(inp, out);
    assert!(broken.is_empty(), "{broken:?}");
}

fn violations(inp: &Input, out: &Output) -> Vec<String> {
    let mut v = Vec::new();
    let types: HashMap<&str, &InstanceType> = inp
        .node_pools
        .iter()
        .flat_map(|p| &p.instance_types)
        .map(|t| (t.name.as_str(), t))
        .collect();
    let pods: HashMap<&str, &Pod> = inp.pods.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut zones: BTreeMap<&str, usize> = ZONES.iter().map(|z| (*z, 0)).collect();
    for c in &out.new_node_claims {
        let mut sum = Resources::new();
        let mut anti = 0;
        let Some(launch) = types.get(c.cheapest.instance_type.as_str()) else {
            v.push(format!("unknown type {}", c.cheapest.instance_type));
            continue;
        };
        for r in &c.pods {
            *seen.entry(r.name.clone()).or_default() += 1;
            let Some(p) = pods.get(r.name.as_str()) else {
                v.push(format!("unknown pod {}", r.name));
                continue;
            };
            for (k, q) in &p.requests {
                *sum.entry(k.clone()).or_default() += q;
            }
            for (k, want) in &p.node_selector {
                let ok = launch
                    .requirements
                    .iter()
                    .any(|r| &r.key == k && r.values.contains(want));
                if !ok {
                    v.push(format!("{} on {} lacks {k}={want}", r.name, launch.name));
                }
            }
            if !p.pod_anti_affinity.is_empty() {
                anti += 1;
            }
            if !p.topology_spread.is_empty() {
                *zones.entry(c.cheapest.zone.as_str()).or_default() += 1;
            }
        }
        if anti > 1 {
            v.push(format!("{anti} anti-affine pods on one claim"));
        }
        let mut names: Vec<&str> = c.instance_types().iter().map(String::as_str).collect();
        names.push(launch.name.as_str());
        for name in names {
            let Some(t) = types.get(name) else { continue };
            for (k, q) in &sum {
                let alloc = t.capacity.get(k).copied().unwrap_or(0)
                    - t.overhead.get(k).copied().unwrap_or(0);
                if *q > alloc {
                    v.push(format!("{name} holds {alloc} {k}, claim needs {q}"));
                }
            }
        }
    }
    for u in &out.unschedulable {
        *seen.entry(u.pod.name.clone()).or_default() += 1;
    }
    for p in &out.existing {
        *seen.entry(p.pod.name.clone()).or_default() += 1;
    }
    for p in &inp.pods {
        match seen.get(&p.name) {
            Some(1) => {}
            n => v.push(format!("{} accounted {n:?} times", p.name)),
        }
    }
    let (lo, hi) = (zones.values().min(), zones.values().max());
    if let (Some(lo), Some(hi)) = (lo, hi)
        && hi - lo > 1
    {
        v.push(format!("zonal spread skew {zones:?}"));
    }
    v
}

/// A catalog of 1–4 types with arbitrary prices (not linear in size), and 1–40 pods: plain,
/// zonal spread, hostname anti-affine or arm64-only.
fn case() -> impl Strategy<Value = Input> {
    let ty = (
        prop::sample::select(vec![1000i64, 2000, 4000, 8000, 16000]),
        prop::sample::select(vec![2i64, 4, 8]),
        prop::bool::ANY,
        1u32..400,
    );
    let pod_shape = (
        prop::sample::select(vec![100i64, 250, 500, 1000, 1500, 3000]),
        prop::sample::select(vec![128i64, 512, 1024, 4096]),
        0u8..4,
    );
    (
        prop::collection::vec(ty, 1..5),
        prop::collection::vec(pod_shape, 1..40),
    )
        .prop_map(|(tys, ps)| {
            let types = tys
                .iter()
                .enumerate()
                .map(|(i, (cpu, per_cpu, arm, cents))| {
                    let arch = if *arm { "arm64" } else { "amd64" };
                    let mem = (cpu / 1000).max(1) * per_cpu;
                    priced(&format!("t{i}"), *cpu, mem, arch, *cents as f64 / 100.0)
                })
                .collect();
            let pods = ps
                .iter()
                .enumerate()
                .map(|(i, (cpu, mem, kind))| {
                    let mut p = pod(&format!("p{i}"), *cpu, *mem);
                    p.creation = i as i64;
                    match kind {
                        1 => {
                            p.labels = labels(&[("app", "spread")]);
                            p.topology_spread = vec![spread(
                                LABEL_ZONE,
                                1,
                                WhenUnsatisfiable::DoNotSchedule,
                                &[("app", "spread")],
                            )];
                        }
                        2 => {
                            p.labels = labels(&[("app", "anti")]);
                            p.pod_anti_affinity = vec![PodAffinityTerm::new(
                                LABEL_HOSTNAME,
                                LabelSelector::labels(&[("app", "anti")]),
                            )];
                        }
                        3 => p.node_selector = labels(&[(LABEL_ARCH, "arm64")]),
                        _ => {}
                    }
                    p
                })
                .collect();
            input(vec![NodePool::new("default", types)], pods)
        })
}

proptest! {
    #![proptest_config(prop_cases::config(256, 20_000))]

    #[test]
    fn never_pricier_than_first_fit_and_constraints_hold(inp in case()) {
        let ff = solve_first_fit(&inp);
        let out = solve(&inp);
        prop_assert!(out.unschedulable.len() <= ff.unschedulable.len());
        prop_assert!(out.price() <= ff.price() + 1e-9, "plan {} first-fit {}", out.price(), ff.price());
        match out.first_fit_price {
            Some(p) => {
                prop_assert!((p - ff.price()).abs() < 1e-9);
                prop_assert!(out.price() < p - 1e-12
                    || out.new_node_claims.len() < ff.new_node_claims.len());
            }
            None => prop_assert_eq!(&out, &ff),
        }
        if violations(&inp, &ff).is_empty() {
            let v = violations(&inp, &out);
            prop_assert!(v.is_empty(), "{:?}", v);
        }
        // Deterministic.
        prop_assert_eq!(&solve(&inp), &out);
    }
}

// Split consolidation (`scheduling::replace::consolidate`): the pods of nodes being
// consolidated go onto several cheaper new nodes when that saves the margin a single replace
// needs (the replacements' worst launch prices, summed, strictly below the nodes' price).

use scheduling::replace::{Plan, Refused, Replaced, consolidate};

fn replaced(types: &[(&str, f64)]) -> Replaced {
    Replaced {
        types: types.iter().map(|(t, p)| ((*t).to_string(), *p)).collect(),
        all_spot: false,
    }
}

/// Every pod placed (else the number left).
fn all_placed(o: &Output) -> Result<(), usize> {
    match o.unschedulable.len() {
        0 => Ok(()),
        n => Err(n),
    }
}

/// The plan's replacements as the output's new NodeClaims (their narrowed options).
fn narrowed_output(out: &Output, plan: &Plan) -> Output {
    let mut out = out.clone();
    if let Plan::Replace(rs) = plan {
        out.new_node_claims = rs.iter().map(|r| r.claim.clone()).collect();
    }
    out
}

#[test]
fn one_dear_node_splits_into_cheaper_ones() {
    // The ten pods ran on one `large` at 1.00/h: four `small` (0.20/h) replace it.
    let inp = why_case();
    let c =
        consolidate(&inp, &replaced(&[("large", 1.00)]), all_placed, |_, o| o).expect("a split");
    let Plan::Replace(rs) = &c.plan else {
        panic!("not a replace: {:?}", c.plan)
    };
    assert_eq!(rs.len(), 4);
    assert!(rs.iter().all(|r| r.instance_type == "small"), "{rs:?}");
    assert!((c.price() - 0.20).abs() < 1e-9, "{}", c.price());
    let worst: f64 = rs.iter().map(|r| r.worst).sum();
    assert!(worst < 1.00, "{worst}");
    assert_eq!(placed(&c.output), 10);
    assert_valid(&inp, &narrowed_output(&c.output, &c.plan));
    // Positive control: when the node cost what four smalls cost, nothing is saved.
    assert_eq!(
        consolidate(&inp, &replaced(&[("large", 0.20)]), all_placed, |_, o| o),
        Err(Refused::Price(
            scheduling::replace::NoReplacement::NoCheaperOption
        ))
    );
}

#[test]
fn a_refused_split_falls_back_to_first_fits_replace() {
    // The pods ran on a `small` (0.05) and a `big` (0.60). The price-aware plan is four
    // smalls, but a small is a candidate's own type and not cheaper than it: refused. First-fit
    // (Karpenter's) packs one `large` at 0.40 < 0.65: that replace is kept.
    let types = vec![
        priced("small", 2000, 4, "amd64", 0.05),
        priced("large", 8000, 16, "amd64", 0.40),
    ];
    let inp = input(
        vec![NodePool::new("default", types)],
        pods("p", 10, 500, 128),
    );
    assert!(solve(&inp).first_fit_price.is_some(), "the plans differ");
    let r = replaced(&[("small", 0.05), ("big", 0.60)]);
    let c = consolidate(&inp, &r, all_placed, |_, o| o).expect("first-fit's replace");
    let Plan::Replace(rs) = &c.plan else {
        panic!("not a replace: {:?}", c.plan)
    };
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0].instance_type, "large");
    // Control: without the small among the candidates the split is taken.
    let c = consolidate(&inp, &replaced(&[("big", 0.65)]), all_placed, |_, o| o).expect("a split");
    assert!(matches!(&c.plan, Plan::Replace(rs) if rs.len() == 4));
}

#[test]
fn pods_fitting_elsewhere_are_a_delete_and_a_refused_placement_is_reported() {
    let mut inp = input(vec![pool("default")], pods("p", 3, 500, 128));
    inp.nodes.push(node("n1", ZONES[0], 4000, 8));
    let c =
        consolidate(&inp, &replaced(&[("large", 0.4)]), all_placed, |_, o| o).expect("a delete");
    assert_eq!(c.plan, Plan::Delete);
    assert_eq!(c.price(), 0.0);
    // A pod that fits nowhere: the placement is refused with accept's answer.
    let mut inp = input(vec![pool("default")], pods("p", 1, 500, 128));
    inp.pods.push(pod("huge", 64_000, 128));
    assert_eq!(
        consolidate(&inp, &replaced(&[("large", 9.0)]), all_placed, |_, o| o),
        Err(Refused::Placement(1))
    );
}

proptest! {
    #![proptest_config(prop_cases::config(256, 20_000))]

    #[test]
    fn split_consolidation_saves_the_margin_keeps_constraints_and_every_pod(
        inp in case(),
        cents in 1u32..4000,
    ) {
        let current = cents as f64 / 100.0;
        let r = replaced(&[("current", current)]);
        let got = consolidate(&inp, &r, all_placed, |_, o| o);
        prop_assert_eq!(&got, &consolidate(&inp, &r, all_placed, |_, o| o), "deterministic");
        let ff = solve_first_fit(&inp);
        let out = solve(&inp);
        match got {
            Ok(c) => {
                // No pod lost.
                prop_assert!(c.output.unschedulable.is_empty());
                prop_assert_eq!(placed(&c.output), inp.pods.len());
                let Plan::Replace(rs) = &c.plan else {
                    return Err(TestCaseError::fail("a delete without existing nodes"));
                };
                prop_assert_eq!(rs.len(), c.output.new_node_claims.len());
                // Never pricier than the nodes, by the margin: at worst.
                let worst: f64 = rs.iter().map(|r| r.worst).sum();
                prop_assert!(worst < current, "worst {} current {}", worst, current);
                prop_assert!(c.price() <= worst + 1e-9);
                // Every constraint holds on the narrowed claims.
                if violations(&inp, &ff).is_empty() {
                    let v = violations(&inp, &narrowed_output(&c.output, &c.plan));
                    prop_assert!(v.is_empty(), "{:?}", v);
                }
            }
            // Some pod fits nowhere, in either plan.
            Err(Refused::Placement(_)) => {
                prop_assert!(!out.unschedulable.is_empty() && !ff.unschedulable.is_empty());
            }
            // One price per type here (worst = cheapest): refused only when no plan that
            // places every pod is cheaper.
            Err(Refused::Price(_)) => {
                for plan in [&out, &ff] {
                    prop_assert!(
                        !plan.unschedulable.is_empty() || plan.price() >= current - 1e-9,
                        "refused at {} with a plan at {}", current, plan.price()
                    );
                }
            }
        }
    }
}
