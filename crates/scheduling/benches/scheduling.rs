//! Karpenter's scheduling benchmark (see `scheduling::bench_workload`) at 1, 100, 1000, 5000
//! and 20000 pods. Prints pods/s and the node count per size; `BENCH_QUICK=1` stops at 1000 pods
//! with a short measurement so CI finishes in seconds.
//!
//! `solve_resizable`: the same pods at 5000 (1000 quick) on one resizable template instead of
//! the 400 fixed types: the catalog's grid of synthetic sizes (at most 200, built by
//! `templates` from a template of 2-64 vCPU by 2, 4-512Gi by 4Gi, 1-16Gi per vCPU, in the
//! benchmark's three zones), to compare with `solve/5000`.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use scheduling::bench_workload::{SIZES, input, input_with_devices, input_with_volumes};
use scheduling::dra::Dra;

fn bench(c: &mut Criterion) {
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let mut group = c.benchmark_group("solve");
    group.sample_size(10);
    if quick {
        group.warm_up_time(Duration::from_millis(200));
        group.measurement_time(Duration::from_millis(500));
    }
    for &n in SIZES {
        if quick && n > 1000 {
            continue;
        }
        let inp = input(n);
        let out = scheduling::solve(&inp);
        let placed: usize = out.new_node_claims.iter().map(|c| c.pods.len()).sum();
        println!(
            "solve/{n}: nodes={} pods_placed={placed} unschedulable={}",
            out.new_node_claims.len(),
            out.unschedulable.len()
        );
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &inp, |b, inp| {
            b.iter(|| scheduling::solve(std::hint::black_box(inp)))
        });
    }
    group.finish();
}

/// The scheduler's instance types of one resizable template's catalog.
fn resizable_types() -> Vec<scheduling::InstanceType> {
    let t: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereMachineTemplate",
        "metadata": {"name": "flex", "namespace": "ns", "annotations": {
            "karpenter.cluster.x-k8s.io/resizable-cpu": "2-64/2",
            "karpenter.cluster.x-k8s.io/resizable-memory": "4Gi-512Gi/4Gi",
            "karpenter.cluster.x-k8s.io/resizable-memory-per-cpu": "1Gi-16Gi",
            "karpenter.cluster.x-k8s.io/price-per-cpu": "0.02",
            "karpenter.cluster.x-k8s.io/price-per-gib": "0.004"}},
        "spec": {"template": {"spec": {}}}
    }))
    .expect("template");
    let settings = templates::CatalogSettings {
        failure_domains: vec![
            "test-zone-1".into(),
            "test-zone-2".into(),
            "test-zone-3".into(),
        ],
        ..templates::CatalogSettings::default()
    };
    let catalog = templates::build_catalog(&[t], &settings).expect("catalog");
    catalog
        .instance_types
        .iter()
        .map(|it| scheduling::InstanceType {
            volume_limits: Default::default(),
            name: it.name.clone(),
            requirements: it
                .labels
                .iter()
                .map(|(k, v)| {
                    scheduling::Requirement::new(k, scheduling::Operator::In, &[v.as_str()])
                })
                .collect(),
            capacity: it.capacity.0.clone(),
            overhead: it
                .capacity
                .0
                .iter()
                .map(|(k, v)| (k.clone(), v - it.allocatable.get(k)))
                .collect(),
            offerings: it
                .offerings
                .iter()
                .map(|o| scheduling::Offering {
                    zone: o.zone.clone().unwrap_or_default(),
                    capacity_type: o.capacity_type.clone(),
                    price: o.price,
                    available: true,
                    count: None,
                })
                .collect(),
            taints: Vec::new(),
        })
        .collect()
}

fn bench_resizable(c: &mut Criterion) {
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let mut group = c.benchmark_group("solve_resizable");
    group.sample_size(10);
    if quick {
        group.warm_up_time(Duration::from_millis(200));
        group.measurement_time(Duration::from_millis(500));
    }
    let types = resizable_types();
    let n = if quick { 1000 } else { 5000 };
    let mut inp = input(n);
    inp.node_pools = vec![scheduling::NodePool::new("default", types.clone())];
    let out = scheduling::solve(&inp);
    let placed: usize = out.new_node_claims.iter().map(|c| c.pods.len()).sum();
    let price: f64 = out.new_node_claims.iter().map(|c| c.cheapest.price).sum();
    println!(
        "solve_resizable/{n}: types={} nodes={} pods_placed={placed} unschedulable={} price={price:.2} first_fit={:?}",
        types.len(),
        out.new_node_claims.len(),
        out.unschedulable.len(),
        out.first_fit_price
    );
    group.throughput(Throughput::Elements(n as u64));
    group.bench_with_input(BenchmarkId::from_parameter(n), &inp, |b, inp| {
        b.iter(|| scheduling::solve(std::hint::black_box(inp)))
    });
    group.finish();
}

/// A solve: the whole one, or first-fit's packing alone.
type Solve = fn(&scheduling::Input, &Dra) -> scheduling::Output;

/// The same pods with and without volumes (`input_with_volumes`: half of them pinned to a
/// zone by a bound volume and attaching one CSI volume, every type limited to 27), at 1000 and
/// 5000 pods (1000 quick).
fn bench_volumes(c: &mut Criterion) {
    let solve: Solve = scheduling::solve_with_devices;
    side_by_side(c, "solve_volumes", |n| {
        vec![
            ("plain", input(n), Dra::default(), solve),
            ("volumes", input_with_volumes(n), Dra::default(), solve),
        ]
    });
}

/// The same pods with and without ResourceClaims (`input_with_devices`: every fourth type
/// publishes GPUs, 20 % of the pods claim one), at 1000 and 5000 pods (1000 quick): the
/// whole solve, and first-fit's packing alone (Karpenter's method; with claims, first-fit's
/// plan is dearer, so the whole solve tries price-capped packings too).
fn bench_devices(c: &mut Criterion) {
    let solve: Solve = scheduling::solve_with_devices;
    let first_fit: Solve = scheduling::solve_first_fit_with_devices;
    side_by_side(c, "solve_devices", |n| {
        let (inp, dra) = input_with_devices(n);
        let mut plain = dra.clone();
        plain.claims.clear();
        plain.pod_claims.clear();
        vec![
            ("plain", inp.clone(), plain.clone(), solve),
            ("claims", inp.clone(), dra.clone(), solve),
            ("plain-first-fit", inp.clone(), plain, first_fit),
            ("claims-first-fit", inp, dra, first_fit),
        ]
    });
}

/// Benchmarks the cases `cases(n)` gives side by side, at 1000 and 5000 pods (1000 quick).
fn side_by_side(
    c: &mut Criterion,
    name: &str,
    cases: impl Fn(usize) -> Vec<(&'static str, scheduling::Input, Dra, Solve)>,
) {
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    if quick {
        group.warm_up_time(Duration::from_millis(200));
        group.measurement_time(Duration::from_millis(500));
    }
    let sizes: &[usize] = if quick { &[1000] } else { &[1000, 5000] };
    for &n in sizes {
        for (case, inp, dra, solve) in cases(n) {
            let out = solve(&inp, &dra);
            let placed: usize = out.new_node_claims.iter().map(|c| c.pods.len()).sum();
            let price: f64 = out.new_node_claims.iter().map(|c| c.cheapest.price).sum();
            println!(
                "{name}/{case}/{n}: nodes={} pods_placed={placed} unschedulable={} price={price:.2}",
                out.new_node_claims.len(),
                out.unschedulable.len()
            );
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::new(case, n), &(&inp, &dra), |b, (inp, dra)| {
                b.iter(|| solve(std::hint::black_box(inp), dra))
            });
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    bench,
    bench_resizable,
    bench_volumes,
    bench_devices
);
criterion_main!(benches);
