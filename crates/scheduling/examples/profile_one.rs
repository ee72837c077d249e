//! Runs one solve of the benchmark workload (size from argv, default 20000) for profilers.
fn main() {
    let n = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20000);
    let inp = scheduling::bench_workload::input(n);
    let out = scheduling::solve(&inp);
    println!("{} pods -> {} nodes", n, out.new_node_claims.len());
}
