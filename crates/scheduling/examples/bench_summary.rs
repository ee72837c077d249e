//! One line per benchmark size: pods, seconds, pods/s, nodes, ratio vs Karpenter's published
//! time (best of three runs). `BENCH_QUICK=1` (or `--quick`) runs 1, 100 and 1000 pods once each.

use std::time::Instant;

use scheduling::bench_workload::{SIZES, input, karpenter_seconds};

fn main() {
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1")
        || std::env::args().any(|a| a == "--quick");
    let sizes: Vec<usize> = if quick {
        SIZES.iter().copied().filter(|n| *n <= 1000).collect()
    } else {
        SIZES.to_vec()
    };
    println!(
        "{:>6} {:>10} {:>12} {:>6} {:>6} {:>14}",
        "pods", "seconds", "pods/s", "nodes", "unsch", "vs karpenter"
    );
    for n in sizes {
        let inp = input(n);
        let runs = if quick { 1 } else { 3 };
        let mut best = f64::MAX;
        let mut out = None;
        for _ in 0..runs {
            let t = Instant::now();
            let o = scheduling::solve(&inp);
            best = best.min(t.elapsed().as_secs_f64());
            out = Some(o);
        }
        let out = out.expect("at least one run");
        let ratio = karpenter_seconds(n)
            .map(|k| format!("{:.1}x faster", k / best))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:>6} {:>10.4} {:>12.0} {:>6} {:>6} {:>14}",
            n,
            best,
            n as f64 / best,
            out.new_node_claims.len(),
            out.unschedulable.len(),
            ratio
        );
    }
}
