//! Invariants on the benchmark workload: every pod accounted for exactly once, every claim's
//! pods fit every instance type it lists, instance types are in price order.
mod common;
use common::*;
use std::collections::HashMap;

#[test]
fn benchmark_output_invariants_at_2000() {
    let inp = scheduling::bench_workload::input(2000);
    let out = solve(&inp);
    let types: HashMap<&str, &InstanceType> = inp.node_pools[0]
        .instance_types
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let pods: HashMap<&str, &Pod> = inp.pods.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut seen = std::collections::HashSet::new();
    for c in &out.new_node_claims {
        let mut sum: Resources = Resources::new();
        for p in &c.pods {
            assert!(seen.insert(p.name.clone()), "{} placed twice", p.name);
            for (k, v) in &pods[p.name.as_str()].requests {
                *sum.entry(k.clone()).or_default() += v;
            }
        }
        assert_eq!(sum[CPU], c.requests[CPU]);
        let mut last_price = 0.0;
        for name in c.instance_types() {
            let t = types[name.as_str()];
            for (k, v) in &sum {
                let alloc = t.capacity.get(k).copied().unwrap_or(0)
                    - t.overhead.get(k).copied().unwrap_or(0);
                assert!(*v <= alloc, "{name} too small for {k} on a claim");
            }
            let price = t.offerings[0].price;
            assert!(price >= last_price, "instance types not in price order");
            last_price = price;
        }
        assert_eq!(c.cheapest.instance_type, c.instance_types()[0]);
    }
    for u in &out.unschedulable {
        assert!(seen.insert(u.pod.name.clone()));
        assert!(!u.reason.is_empty());
    }
    assert_eq!(seen.len(), 2000);
}
