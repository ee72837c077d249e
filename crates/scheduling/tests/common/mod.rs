//! Builders for the behaviour corpus.
// Test-support module: `pub` here shares items between test files of one test crate.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

pub use scheduling::*;

pub const GI: i64 = 1 << 30;
pub const MI: i64 = 1 << 20;
pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

pub fn res(pairs: &[(&str, i64)]) -> Resources {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// An on-demand amd64 linux type offered in all three zones; price grows with size.
pub fn it(name: &str, cpu_m: i64, mem_gi: i64) -> InstanceType {
    it_with(name, cpu_m, mem_gi, "amd64", &[])
}

pub fn it_with(
    name: &str,
    cpu_m: i64,
    mem_gi: i64,
    arch: &str,
    extra: &[(&str, &str)],
) -> InstanceType {
    let price = cpu_m as f64 / 1000.0 * 0.05 + mem_gi as f64 * 0.01;
    let mut requirements = vec![
        Requirement::new(LABEL_ARCH, Operator::In, &[arch]),
        Requirement::new(LABEL_OS, Operator::In, &["linux"]),
    ];
    for (k, v) in extra {
        requirements.push(Requirement::new(*k, Operator::In, &[v]));
    }
    InstanceType {
        volume_limits: Default::default(),
        name: name.to_string(),
        requirements,
        capacity: res(&[(CPU, cpu_m), (MEMORY, mem_gi * GI), (PODS, 110)]),
        overhead: res(&[(CPU, 100), (MEMORY, 100 * MI)]),
        offerings: ZONES
            .iter()
            .map(|z| Offering {
                zone: z.to_string(),
                capacity_type: "on-demand".into(),
                price,
                available: true,
                count: None,
            })
            .collect(),
        taints: Vec::new(),
    }
}

/// small 2cpu/4Gi, medium 4/8, large 8/16, xlarge 16/32.
pub fn catalog() -> Vec<InstanceType> {
    vec![
        it("small", 2000, 4),
        it("medium", 4000, 8),
        it("large", 8000, 16),
        it("xlarge", 16000, 32),
    ]
}

pub fn pool(name: &str) -> NodePool {
    NodePool::new(name, catalog())
}

pub fn pod(name: &str, cpu_m: i64, mem_mi: i64) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.to_string(),
        uid: format!("uid-{name}"),
        requests: res(&[(CPU, cpu_m), (MEMORY, mem_mi * MI), (PODS, 1)]),
        ..Pod::default()
    }
}

pub fn pods(prefix: &str, n: usize, cpu_m: i64, mem_mi: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = pod(&format!("{prefix}-{i}"), cpu_m, mem_mi);
            p.creation = i as i64;
            p
        })
        .collect()
}

pub fn input(node_pools: Vec<NodePool>, pods: Vec<Pod>) -> Input {
    Input {
        node_pools,
        nodes: Vec::new(),
        daemonsets: Vec::new(),
        pods,
        min_values_policy: Default::default(),
    }
}

pub fn node(name: &str, zone: &str, cpu_m: i64, mem_gi: i64) -> ExistingNode {
    ExistingNode {
        volume_limits: Default::default(),
        name: name.to_string(),
        state: NodeState::Ready,
        labels: labels(&[
            (LABEL_ZONE, zone),
            (LABEL_HOSTNAME, name),
            (LABEL_ARCH, "amd64"),
            (LABEL_OS, "linux"),
        ]),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        allocatable: res(&[(CPU, cpu_m), (MEMORY, mem_gi * GI), (PODS, 110)]),
        requested: Resources::new(),
        pods: Vec::new(),
        refuses_moving: false,
    }
}

pub fn zone_of(c: &NewNodeClaim) -> String {
    c.cheapest.zone.clone()
}

/// The requirement values of `key` on a claim.
pub fn req_values(c: &NewNodeClaim, key: &str) -> Option<(Operator, Vec<String>)> {
    c.requirements
        .iter()
        .find(|r| r.key == key)
        .map(|r| (r.operator, r.values.clone()))
}

pub fn placed(out: &Output) -> usize {
    out.new_node_claims
        .iter()
        .map(|c| c.pods.len())
        .sum::<usize>()
        + out.existing.len()
}

pub fn spread(
    key: &str,
    skew: u32,
    when: WhenUnsatisfiable,
    sel: &[(&str, &str)],
) -> TopologySpread {
    TopologySpread {
        topology_key: key.to_string(),
        max_skew: skew,
        when_unsatisfiable: when,
        selector: LabelSelector::labels(sel),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    }
}
