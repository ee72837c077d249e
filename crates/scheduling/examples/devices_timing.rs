//! Scratch: times solve_with_devices plain vs claims, prints an output digest.
use std::hash::{Hash, Hasher};
use std::time::Instant;
fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![300, 1000, 5000]
    } else {
        sizes
    };
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    for n in sizes {
        let (inp, dra) = scheduling::bench_workload::input_with_devices(n);
        let mut plain = dra.clone();
        plain.claims.clear();
        plain.pod_claims.clear();
        for (case, d) in [("plain", &plain), ("claims", &dra)] {
            if std::env::var("CASE").is_ok_and(|c| c != case) {
                continue;
            }
            let out = scheduling::solve_with_devices(&inp, d);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            format!("{out:?}").hash(&mut h);
            let mut best = f64::INFINITY;
            for _ in 0..reps {
                let t = Instant::now();
                std::hint::black_box(scheduling::solve_with_devices(&inp, d));
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            println!(
                "{case}/{n}: nodes={} digest={:016x} best={best:.1}ms",
                out.new_node_claims.len(),
                h.finish()
            );
        }
    }
}
