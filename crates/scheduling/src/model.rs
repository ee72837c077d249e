//! Input and output of one scheduling simulation. Plain owned values; the controller maps
//! Kubernetes objects into these.

use std::collections::BTreeMap;

use crate::requirements::Requirement;

/// Resource name → amount. CPU in millicores, memory and storage in bytes, everything else
/// (pods, GPUs) as a plain count.
pub type Resources = BTreeMap<String, i64>;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";

pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
pub(crate) const LABEL_WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

/// Labels a new node gets from its instance type and offering, so a pod may require them even
/// when the NodePool does not mention them.
pub(crate) const WELL_KNOWN_LABELS: &[&str] = &[
    LABEL_ZONE,
    LABEL_REGION,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_ARCH,
    LABEL_OS,
    LABEL_CAPACITY_TYPE,
    LABEL_NODEPOOL,
    LABEL_WINDOWS_BUILD,
];

/// Deprecated Kubernetes label keys and the stable key each stands for. Karpenter normalizes
/// every node requirement (pod node selector and affinity, NodePool requirements and labels,
/// instance type requirements, node labels) to the stable key; so does the solver.
pub const LABEL_ALIASES: &[(&str, &str)] = &[
    ("beta.kubernetes.io/instance-type", LABEL_INSTANCE_TYPE),
    ("beta.kubernetes.io/arch", LABEL_ARCH),
    ("beta.kubernetes.io/os", LABEL_OS),
    ("failure-domain.beta.kubernetes.io/zone", LABEL_ZONE),
    ("failure-domain.beta.kubernetes.io/region", LABEL_REGION),
];

/// The stable key of a node label key (itself unless it is a deprecated alias).
pub fn normalized_label_key(key: &str) -> &str {
    LABEL_ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, stable)| stable)
}

/// Taints of these keys on a node that is not initialized yet are ignored for scheduling.
pub const EPHEMERAL_TAINT_KEYS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    "karpenter.sh/unregistered",
];

/// Requests of one container (or the pod overhead): resource name → amount.
pub type ContainerRequests = Resources;

/// Karpenter's pod requests: `max(sum(containers), max(init containers)) + overhead`, per
/// resource, plus `pods: 1`.
pub fn pod_requests(
    containers: &[ContainerRequests],
    init_containers: &[ContainerRequests],
    overhead: &Resources,
) -> Resources {
    let mut out = Resources::new();
    for c in containers {
        for (k, v) in c {
            *out.entry(k.clone()).or_insert(0) += *v;
        }
    }
    for c in init_containers {
        for (k, v) in c {
            let e = out.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }
    for (k, v) in overhead {
        *out.entry(k.clone()).or_insert(0) += *v;
    }
    out.insert(PODS.to_string(), 1);
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

impl Taint {
    pub fn new(key: &str, value: &str, effect: TaintEffect) -> Self {
        Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Exists,
    Equal,
}

/// A pod toleration; `key: None` with `Exists` tolerates every key, `effect: None` every effect.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    pub key: Option<String>,
    pub operator: TolerationOperator,
    pub value: String,
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn equal(key: &str, value: &str, effect: Option<TaintEffect>) -> Self {
        Toleration {
            key: Some(key.to_string()),
            operator: TolerationOperator::Equal,
            value: value.to_string(),
            effect,
        }
    }

    pub fn exists(key: Option<&str>, effect: Option<TaintEffect>) -> Self {
        Toleration {
            key: key.map(str::to_string),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect,
        }
    }

    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match &self.key {
            None => self.operator == TolerationOperator::Exists,
            Some(k) if *k != taint.key => false,
            Some(_) => match self.operator {
                TolerationOperator::Exists => true,
                TolerationOperator::Equal => self.value == taint.value,
            },
        }
    }
}

/// Whether every taint is tolerated by one of the tolerations; returns the first that is not.
pub(crate) fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// A label selector (`matchLabels` and `matchExpressions`, the latter with In, NotIn, Exists,
/// DoesNotExist).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    pub fn labels(pairs: &[(&str, &str)]) -> Self {
        LabelSelector {
            match_labels: pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopologySpread {
    pub topology_key: String,
    pub max_skew: u32,
    pub when_unsatisfiable: WhenUnsatisfiable,
    pub selector: LabelSelector,
    /// With fewer eligible domains than this, the global minimum counts as 0.
    pub min_domains: Option<u32>,
    /// `Honor` (Kubernetes' default): only nodes the pod's node selector and required node
    /// affinity accept are domains and count their pods.
    pub node_affinity_policy: NodeInclusionPolicy,
    /// `Honor`: only nodes (and NodePools) whose taints the pod tolerates are domains and count
    /// their pods; `Ignore` (Kubernetes' default): every node.
    pub node_taints_policy: NodeInclusionPolicy,
}

/// Kubernetes' `NodeInclusionPolicy` of a topology spread constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeInclusionPolicy {
    Honor,
    Ignore,
}

/// A pod (anti-)affinity term. `namespaces` empty means the pod's own namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    pub topology_key: String,
    pub selector: LabelSelector,
    pub namespaces: Vec<String>,
    /// Pods of every namespace count (an empty `namespaceSelector`); `namespaces` is then
    /// irrelevant.
    pub all_namespaces: bool,
}

impl PodAffinityTerm {
    pub fn new(topology_key: &str, selector: LabelSelector) -> Self {
        PodAffinityTerm {
            topology_key: topology_key.to_string(),
            selector,
            namespaces: Vec::new(),
            all_namespaces: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Weighted<T> {
    pub weight: i32,
    pub term: T,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub port: u16,
    pub protocol: Protocol,
    /// Empty or `0.0.0.0` means every address.
    pub host_ip: String,
}

impl HostPort {
    pub fn tcp(port: u16) -> Self {
        HostPort {
            port,
            protocol: Protocol::Tcp,
            host_ip: String::new(),
        }
    }

    pub fn conflicts(&self, other: &HostPort) -> bool {
        let wild = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (wild(&self.host_ip) || wild(&other.host_ip) || self.host_ip == other.host_ip)
    }
}

/// What the scheduler needs to know about a pending pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Creation time (any monotone number, e.g. Unix milliseconds); queue tie-break.
    pub creation: i64,
    pub labels: BTreeMap<String, String>,
    /// Total requests (see [`pod_requests`]); `pods: 1` is added if missing.
    pub requests: Resources,
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: OR of terms, each an AND of requirements.
    pub required_node_affinity: Vec<Vec<Requirement>>,
    pub preferred_node_affinity: Vec<Weighted<Vec<Requirement>>>,
    pub tolerations: Vec<Toleration>,
    pub host_ports: Vec<HostPort>,
    pub topology_spread: Vec<TopologySpread>,
    pub pod_affinity: Vec<PodAffinityTerm>,
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_pod_affinity: Vec<Weighted<PodAffinityTerm>>,
    pub preferred_pod_anti_affinity: Vec<Weighted<PodAffinityTerm>>,
    /// Running on a node a disruption simulation takes away (a candidate's pod); false for a
    /// pending pod. The pods that are not moving are placed first (the provisioner is placing
    /// them now: a disruption never counts on their room), and nodes that
    /// [`ExistingNode::refuses_moving`] do not take a moving one.
    pub moving: bool,
    /// What the pod's volumes require of its node (see [`crate::volumes::resolve`]):
    /// alternatives (OR), each an AND of requirements; empty: no volume constrains the node.
    /// They narrow the node the pod lands on, not the pod's node affinity (topology spread
    /// counts domains by the pod's own affinity, as kube-scheduler does).
    pub volume_requirements: Vec<Vec<Requirement>>,
    /// The volumes it attaches, counted against the node's per-driver attach limits.
    pub volumes: Vec<VolumeUse>,
    /// Why no node can take it whatever the plan (e.g. its volume's claim does not exist
    /// yet, see [`crate::volumes::Blocked`]): it is reported unschedulable with this reason
    /// and takes no room.
    pub unplaceable: Option<String>,
}

/// One volume a pod attaches through a CSI driver: counted once per node however many of
/// its pods use it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeUse {
    /// The CSI driver (`ebs.csi.aws.com`); in-tree provisioners are translated.
    pub driver: String,
    /// What makes two uses one attachment: `<namespace>/<claim name>` (Karpenter's key).
    pub id: String,
}

/// A pod already bound to an existing node (counts for topology and anti-affinity).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundPod {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub host_ports: Vec<HostPort>,
    /// Required anti-affinity of the bound pod: it repels matching pending pods.
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    /// Its volumes: they count against the node's attach limits.
    pub volumes: Vec<VolumeUse>,
}

/// A count offerings draw from (e.g. the Machines a template may still become): every
/// offering with the same `key`, in every NodePool of one solve, draws from one count. A
/// planned NodeClaim holds one unit of the count of its preferred offering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferingCount {
    /// Names the count in failures (e.g. `template ns/name`).
    pub key: String,
    /// Units available at the start of the solve.
    pub available: u32,
}

/// Where an instance type can be launched and at what price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    pub available: bool,
    /// `None`: unbounded.
    pub count: Option<OfferingCount>,
}

impl Offering {
    /// An available, unbounded offering.
    pub fn new(zone: &str, capacity_type: &str, price: f64) -> Self {
        Offering {
            zone: zone.to_string(),
            capacity_type: capacity_type.to_string(),
            price,
            available: true,
            count: None,
        }
    }
}

/// `karpenter.sh/capacity-type` of reserved offerings: preferred over any other.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    pub name: String,
    /// Labels of the shape (arch, os, custom); instance-type, zone and capacity-type
    /// requirements are derived from `name` and `offerings`.
    pub requirements: Vec<Requirement>,
    pub capacity: Resources,
    /// kube-reserved + system-reserved + eviction threshold; allocatable = capacity − overhead.
    pub overhead: Resources,
    pub offerings: Vec<Offering>,
    /// Taints every Node of this shape gets (e.g. from the template's cluster-autoscaler
    /// taints annotation): a pod lands on the shape only if it tolerates them.
    pub taints: Vec<Taint>,
    /// Volumes a node of this shape can attach per CSI driver (Karpenter's
    /// `VolumeAttachmentLimits`); a driver not listed is unlimited.
    pub volume_limits: BTreeMap<String, u32>,
}

/// A pod of a DaemonSet: it lands on every new node whose taints and labels it accepts, so
/// its requests are reserved on candidate shapes of every NodePool it is compatible with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonSet {
    pub name: String,
    pub requests: Resources,
    pub node_selector: BTreeMap<String, String>,
    pub required_node_affinity: Vec<Vec<Requirement>>,
    pub tolerations: Vec<Toleration>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodePool {
    pub name: String,
    pub weight: i32,
    pub requirements: Vec<Requirement>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Ignored for scheduling (they are removed once the node is initialized).
    pub startup_taints: Vec<Taint>,
    /// Resource limits (`nodes` counts NodeClaims); a missing resource is unlimited.
    pub limits: Resources,
    /// Capacity already used by this pool's existing nodes and NodeClaims.
    pub usage: Resources,
    pub instance_types: Vec<InstanceType>,
}

impl NodePool {
    pub fn new(name: &str, instance_types: Vec<InstanceType>) -> Self {
        NodePool {
            name: name.to_string(),
            weight: 0,
            requirements: Vec::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            limits: Resources::new(),
            usage: Resources::new(),
            instance_types,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// A registered, initialized Node.
    Ready,
    /// A NodeClaim launched or launching whose Node is not initialized yet: ephemeral and
    /// startup taints are ignored.
    InFlight,
}

/// An existing Node or in-flight NodeClaim. Its labels must include the resolved zone etc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingNode {
    pub name: String,
    pub state: NodeState,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub allocatable: Resources,
    /// Sum of requests of pods bound (or nominated) to it, daemonsets included.
    pub requested: Resources,
    pub pods: Vec<BoundPod>,
    /// Takes no [`Pod::moving`] pod (pending pods may still land): consolidation's target
    /// inside its NodePool's `consolidateAfter` window, as Karpenter simulates it.
    pub refuses_moving: bool,
    /// Attach limits per CSI driver: the node's CSINode where it lists the driver, else its
    /// instance type's; a driver not listed is unlimited.
    pub volume_limits: BTreeMap<String, u32>,
}

/// What the solver does when a NodeClaim's candidate instance types cannot meet a
/// requirement's `minValues` (Karpenter's `--min-values-policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinValuesPolicy {
    /// The pod does not go onto that NodeClaim.
    #[default]
    Strict,
    /// `minValues` is lowered to what the candidates reach, and the NodeClaim says so
    /// ([`NewNodeClaim::min_values_relaxed`]).
    BestEffort,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Input {
    pub node_pools: Vec<NodePool>,
    pub nodes: Vec<ExistingNode>,
    pub daemonsets: Vec<DaemonSet>,
    pub pods: Vec<Pod>,
    pub min_values_policy: MinValuesPolicy,
}

/// Identifies a pod in the output.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The cheapest launchable choice of a planned NodeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct Cheapest {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NewNodeClaim {
    pub node_pool: String,
    /// Pool requirements and labels ∩ pod requirements, with `node.kubernetes.io/instance-type
    /// In [...]` (at most 600, cheapest first) and `karpenter.sh/capacity-type In [...]`.
    pub requirements: Vec<Requirement>,
    /// Pods' requests plus the daemonset overhead of the cheapest candidate.
    pub requests: Resources,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub pods: Vec<PodRef>,
    pub cheapest: Cheapest,
    /// Under [`MinValuesPolicy::BestEffort`], whether a `minValues` of its requirements was
    /// lowered to what its instance types reach; `None` under `Strict` (nothing is).
    pub min_values_relaxed: Option<bool>,
    /// The drivers whose devices its pods' ResourceClaims take on whichever candidate type
    /// launches (sorted; empty when they claim none): Karpenter's
    /// `karpenter.sh/requested-dra-drivers`, which initialization waits for.
    pub dra_drivers: Vec<String>,
}

impl NewNodeClaim {
    /// Candidate instance types (the `node.kubernetes.io/instance-type` requirement), cheapest
    /// compatible available offering first.
    pub fn instance_types(&self) -> &[String] {
        self.requirements
            .iter()
            .find(|r| r.key == LABEL_INSTANCE_TYPE)
            .map_or(&[], |r| r.values.as_slice())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub pod: PodRef,
    pub node: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: PodRef,
    /// Human-readable, names the constraint that failed (for the FailedScheduling event).
    pub reason: String,
    /// The failure per NodePool (empty if there is no NodePool).
    pub failures: Vec<(String, crate::Failure)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    pub new_node_claims: Vec<NewNodeClaim>,
    pub existing: Vec<Placement>,
    pub unschedulable: Vec<Unschedulable>,
    /// The price per hour of Karpenter's first-fit plan for the same pods, when this plan beat
    /// it (is cheaper, or as cheap with fewer NodeClaims); `None` when the plan is first-fit's.
    pub first_fit_price: Option<f64>,
}

impl Output {
    /// The launch price per hour of the new NodeClaims: each one's cheapest offering, summed.
    pub fn price(&self) -> f64 {
        self.new_node_claims.iter().map(|c| c.cheapest.price).sum()
    }
}

impl Output {
    /// Where a pod went: `Some(Ok(claim index))` for a new claim, `Some(Err(node))` for an
    /// existing node, `None` if unschedulable.
    pub fn find(&self, name: &str) -> Option<Result<usize, &str>> {
        for (i, c) in self.new_node_claims.iter().enumerate() {
            if c.pods.iter().any(|p| p.name == name) {
                return Some(Ok(i));
            }
        }
        self.existing
            .iter()
            .find(|p| p.pod.name == name)
            .map(|p| Err(p.node.as_str()))
    }
}
