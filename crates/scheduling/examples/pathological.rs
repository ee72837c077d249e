//! Stress shapes outside the Karpenter workload (relaxation churn, unschedulable floods).
use std::time::Instant;

use scheduling::bench_workload::instance_types;
use scheduling::*;

fn pod(i: usize) -> Pod {
    Pod {
        namespace: "default".into(),
        name: format!("p{i}"),
        uid: format!("u{i:06}"),
        creation: i as i64,
        labels: [("app".to_string(), "web".to_string())].into(),
        requests: [
            (CPU.to_string(), 100 + (i % 7) as i64 * 50),
            (MEMORY.to_string(), 1 << 28),
        ]
        .into(),
        ..Pod::default()
    }
}

fn main() {
    let n = 2000;
    // Preferred hostname anti-affinity with a 10-node limit: every pod relaxes once.
    let mut np = NodePool::new("default", instance_types(400));
    np.limits = [("nodes".to_string(), 10)].into();
    let pods: Vec<Pod> = (0..n)
        .map(|i| {
            let mut p = pod(i);
            p.preferred_pod_anti_affinity = vec![Weighted {
                weight: 1,
                term: PodAffinityTerm::new(
                    LABEL_HOSTNAME,
                    LabelSelector::labels(&[("app", "web")]),
                ),
            }];
            p
        })
        .collect();
    let inp = Input {
        node_pools: vec![np],
        pods,
        ..Input::default()
    };
    let t = Instant::now();
    let out = solve(&inp);
    println!(
        "relax churn: {n} pods {:.3}s nodes={} unsched={}",
        t.elapsed().as_secs_f64(),
        out.new_node_claims.len(),
        out.unschedulable.len()
    );
    // Unschedulable flood: custom label nobody offers.
    let pods: Vec<Pod> = (0..n)
        .map(|i| {
            let mut p = pod(i);
            p.node_selector = [("team".to_string(), "x".to_string())].into();
            p
        })
        .collect();
    let inp = Input {
        node_pools: vec![NodePool::new("default", instance_types(400))],
        pods,
        ..Input::default()
    };
    let t = Instant::now();
    let out = solve(&inp);
    println!(
        "unschedulable flood: {n} pods {:.3}s unsched={}",
        t.elapsed().as_secs_f64(),
        out.unschedulable.len()
    );
}
