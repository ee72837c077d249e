//! Karpenter's scheduling benchmark (see `scheduling::bench_workload`) at 1, 100, 1000, 5000
//! and 20000 pods. Prints pods/s and the node count per size; `BENCH_QUICK=1` stops at 1000 pods
//! with a short measurement so CI finishes in seconds.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use scheduling::bench_workload::{SIZES, input};

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

criterion_group!(benches, bench);
criterion_main!(benches);
