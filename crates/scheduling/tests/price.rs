//! Price-aware packing: the plan is never pricier than Karpenter's first-fit plan, schedules no
//! fewer pods, keeps every constraint first-fit's plan keeps, and beats first-fit where the
//! price per CPU is not flat (issue 39's simulate case: four `small` at 0.05/h, not one `large`
//! at 1.00/h). Case counts: `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

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
    for mut p in pods("anti", 4, 250, 256) {
        p.labels = labels(&[("app", "anti")]);
        p.pod_anti_affinity = vec![PodAffinityTerm::new(
            LABEL_HOSTNAME,
            LabelSelector::labels(&[("app", "anti")]),
        )];
        ps.push(p);
    }
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
