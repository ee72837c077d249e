//! Karpenter's scheduling benchmark workload
//! (`pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go`) for
//! `cargo bench -p scheduling` and tests. `hack/bench/scheduling.sh` does not use it: it runs
//! Karpenter's own scheduler and ours on the very pods Karpenter generated
//! (`hack/bench/go/schedbench`, `crates/core/examples/vs_karpenter.rs`).
//!
//! 400 instance types `fake-it-<i>` (cpu i+1, memory 2(i+1)Gi, pods 10(i+1); spot offerings in
//! test-zone-1/2, on-demand in test-zone-1/2/3; Karpenter's fake price 0.1×cpu + 0.1×memory
//! bytes/1e9; kube-reserved 100m / 10Mi) and `n` pods in five equal groups (plain, zonal spread
//! maxSkew 1, hostname spread maxSkew 1, zonal self-affinity, hostname anti-affinity on
//! app=nginx), the remainder plain, with cpu ∈ {100m, 250m, 500m, 1, 1.5} and memory ∈
//! {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi} drawn from a generator seeded with 42. (Go's
//! `math/rand` stream is not reproduced bit for bit; the distribution and the group structure
//! are, and, as in Karpenter's, every pod can be scheduled.)

use std::collections::BTreeMap;

use crate::model::*;
use crate::requirements::{Operator, Requirement};

/// Benchmark sizes.
pub const SIZES: &[usize] = &[1, 100, 1000, 5000, 20000];

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

/// SplitMix64: small, seedable, deterministic.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `fake.InstanceTypes(count)`.
pub fn instance_types(count: usize) -> Vec<InstanceType> {
    (0..count)
        .map(|i| {
            let n = (i + 1) as i64;
            let price = 0.1 * n as f64 + 0.1 * (2 * n * GI) as f64 / 1e9;
            let offering = |zone: &str, ct: &str| Offering {
                zone: zone.to_string(),
                capacity_type: ct.to_string(),
                price,
                available: true,
                count: None,
            };
            InstanceType {
                volume_limits: Default::default(),
                name: format!("fake-it-{i}"),
                requirements: vec![
                    Requirement::new(LABEL_ARCH, Operator::In, &["amd64"]),
                    Requirement::new(LABEL_OS, Operator::In, &["linux"]),
                ],
                capacity: BTreeMap::from([
                    (CPU.to_string(), n * 1000),
                    (MEMORY.to_string(), 2 * n * GI),
                    (PODS.to_string(), 10 * n),
                ]),
                overhead: BTreeMap::from([(CPU.to_string(), 100), (MEMORY.to_string(), 10 * MI)]),
                taints: Vec::new(),
                offerings: vec![
                    offering("test-zone-1", "spot"),
                    offering("test-zone-2", "spot"),
                    offering("test-zone-1", "on-demand"),
                    offering("test-zone-2", "on-demand"),
                    offering("test-zone-3", "on-demand"),
                ],
            }
        })
        .collect()
}

fn label_value(r: &mut Rng) -> String {
    ["a", "b", "c", "d", "e", "f", "g"][r.below(7)].to_string()
}

fn requests(r: &mut Rng) -> Resources {
    let cpu = [100, 250, 500, 1000, 1500][r.below(5)];
    let mem = [100, 256, 512, 1024, 2048, 4096][r.below(6)];
    BTreeMap::from([
        (CPU.to_string(), cpu),
        (MEMORY.to_string(), mem * MI),
        (PODS.to_string(), 1),
    ])
}

fn base(i: usize, labels: BTreeMap<String, String>, r: &mut Rng) -> Pod {
    Pod {
        namespace: "default".into(),
        name: format!("pod-{i}"),
        uid: format!("uid-{i:06}"),
        creation: i as i64,
        labels,
        requests: BTreeMap::new(),
        ..Pod::default()
    }
    .with_requests(r)
}

trait WithRequests {
    fn with_requests(self, r: &mut Rng) -> Self;
}

impl WithRequests for Pod {
    fn with_requests(mut self, r: &mut Rng) -> Self {
        self.requests = requests(r);
        self
    }
}

fn one(k: &str, v: String) -> BTreeMap<String, String> {
    BTreeMap::from([(k.to_string(), v)])
}

fn generic(i: usize, r: &mut Rng) -> Pod {
    let labels = one("my-label", label_value(r));
    base(i, labels, r)
}

fn spread(i: usize, key: &str, r: &mut Rng) -> Pod {
    let labels = one("my-label", label_value(r));
    let sel = one("my-label", label_value(r));
    let mut p = base(i, labels, r);
    p.topology_spread = vec![TopologySpread {
        topology_key: key.to_string(),
        max_skew: 1,
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        selector: LabelSelector {
            match_labels: sel,
            match_expressions: Vec::new(),
        },
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    }];
    p
}

/// Self-affinity, as in Karpenter's benchmark: a pod whose selector matched only other
/// values could never schedule when no pod carried them.
fn affinity(i: usize, key: &str, r: &mut Rng) -> Pod {
    let labels = one("my-affinity", label_value(r));
    let sel = labels.clone();
    let mut p = base(i, labels, r);
    p.pod_affinity = vec![PodAffinityTerm {
        topology_key: key.to_string(),
        selector: LabelSelector {
            match_labels: sel,
            match_expressions: Vec::new(),
        },
        namespaces: Vec::new(),
        all_namespaces: false,
    }];
    p
}

fn anti(i: usize, key: &str, r: &mut Rng) -> Pod {
    let labels = one("app", "nginx".to_string());
    let mut p = base(i, labels.clone(), r);
    p.pod_anti_affinity = vec![PodAffinityTerm {
        topology_key: key.to_string(),
        selector: LabelSelector {
            match_labels: labels,
            match_expressions: Vec::new(),
        },
        namespaces: Vec::new(),
        all_namespaces: false,
    }];
    p
}

/// `makeDiversePods(count)` with the five groups of the reference.
pub(crate) fn diverse_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut r = Rng::new(seed);
    let per = count / 5;
    let mut pods = Vec::with_capacity(count);
    for _ in 0..per {
        pods.push(generic(pods.len(), &mut r));
    }
    for _ in 0..per {
        pods.push(spread(pods.len(), LABEL_ZONE, &mut r));
    }
    for _ in 0..per {
        pods.push(spread(pods.len(), LABEL_HOSTNAME, &mut r));
    }
    for _ in 0..per {
        pods.push(affinity(pods.len(), LABEL_ZONE, &mut r));
    }
    for _ in 0..per {
        pods.push(anti(pods.len(), LABEL_HOSTNAME, &mut r));
    }
    while pods.len() < count {
        pods.push(generic(pods.len(), &mut r));
    }
    pods
}

/// The whole benchmark input: one NodePool `default` with 400 types and `pods` pods.
pub fn input(pods: usize) -> Input {
    Input {
        node_pools: vec![NodePool::new("default", instance_types(400))],
        nodes: Vec::new(),
        daemonsets: Vec::new(),
        pods: diverse_pods(pods, 42),
        min_values_policy: Default::default(),
    }
}

/// The CSI driver of [`input_with_volumes`].
pub const BENCH_DRIVER: &str = "ebs.csi.aws.com";

/// [`input`] with volumes: every other pod has its own claim bound to a volume in one zone
/// (test-zone-1/2/3 in turn: `topology.kubernetes.io/zone In [zone]`) and attached through
/// [`BENCH_DRIVER`], which every instance type attaches at most 27 of (EBS's common limit).
pub fn input_with_volumes(pods: usize) -> Input {
    let mut inp = input(pods);
    for t in &mut inp.node_pools[0].instance_types {
        t.volume_limits = BTreeMap::from([(BENCH_DRIVER.to_string(), 27)]);
    }
    let zones = ["test-zone-1", "test-zone-2", "test-zone-3"];
    for (i, p) in inp.pods.iter_mut().enumerate().filter(|(i, _)| i % 2 == 0) {
        let zone = zones[(i / 2) % zones.len()];
        p.volume_requirements = vec![vec![Requirement::new(LABEL_ZONE, Operator::In, &[zone])]];
        p.volumes = vec![VolumeUse {
            driver: BENCH_DRIVER.to_string(),
            id: format!("{}/data-{}", p.namespace, p.name),
        }];
    }
    inp
}

/// The driver (and device class) of [`input_with_devices`].
pub const BENCH_GPU_DRIVER: &str = "gpu.bench.example.com";

/// [`input`] over mixed GPU and CPU instance types, with 20 % of the pods claiming GPUs: every
/// fourth type's nodes publish 1 to 8 GPUs (alternately 40Gi and 80Gi of memory), and every
/// fifth pod has a claim of its own (as from a ResourceClaimTemplate) for one GPU of class
/// [`BENCH_GPU_DRIVER`], every other one of them with a request selector on 80Gi of memory.
/// The same pods without claims are `(input(pods), Dra with the types' devices only)`.
pub fn input_with_devices(pods: usize) -> (Input, crate::dra::Dra) {
    use crate::dra::{Device, DeviceClass, DeviceRequest, Dra, Quantity, ResourceClaim, Slice};
    let inp = input(pods);
    let mut dra = Dra::default();
    dra.classes.insert(
        BENCH_GPU_DRIVER.to_string(),
        DeviceClass {
            selectors: vec![format!("device.driver == \"{BENCH_GPU_DRIVER}\"")],
        },
    );
    for (i, t) in inp.node_pools[0].instance_types.iter().enumerate() {
        if i % 4 != 3 {
            continue;
        }
        let memory = if (i / 4) % 2 == 0 { 40 * GI } else { 80 * GI };
        let devices = (0..1 + (i / 4) % 8)
            .map(|d| Device {
                name: format!("gpu-{d}"),
                capacity: [(
                    format!("{BENCH_GPU_DRIVER}/memory"),
                    Quantity::from_units(memory),
                )]
                .into(),
                ..Device::default()
            })
            .collect();
        dra.instance_types.insert(
            t.name.clone(),
            vec![Slice {
                counters: Vec::new(),
                driver: BENCH_GPU_DRIVER.to_string(),
                pool: String::new(),
                devices,
            }],
        );
    }
    for (i, p) in inp.pods.iter().enumerate().filter(|(i, _)| i % 5 == 0) {
        let key = (p.namespace.clone(), format!("{}-gpu", p.name));
        let mut req = DeviceRequest::exactly("gpu", BENCH_GPU_DRIVER, 1);
        if i % 10 == 0 {
            req.alternatives[0].selectors.push(format!(
                "device.capacity[\"{BENCH_GPU_DRIVER}\"].memory.compareTo(quantity(\"80Gi\")) >= 0"
            ));
        }
        dra.claims.insert(
            key.clone(),
            ResourceClaim {
                requests: vec![req],
                ..ResourceClaim::default()
            },
        );
        dra.pod_claims
            .insert((p.namespace.clone(), p.name.clone()), vec![key]);
    }
    (inp, dra)
}
