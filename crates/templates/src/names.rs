//! Label and annotation names the catalog reads and writes.
//!
//! Kubernetes, Karpenter and cluster-autoscaler names are fixed by those projects; the
//! `karpenter.cluster.x-k8s.io` ones are ours.
// TODO(api): switch to the constants module of the `api` crate once it lands.

/// `kubernetes.io/arch`
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
/// `kubernetes.io/os`
pub const LABEL_OS: &str = "kubernetes.io/os";
/// `node.kubernetes.io/instance-type`
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// `topology.kubernetes.io/zone`
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// `karpenter.sh/capacity-type`
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";

/// Opt-in label a template must carry (any value) to be considered by any NodeClass.
pub const LABEL_KARPENTER_MEMBER: &str = "node.cluster.x-k8s.io/karpenter-member";

/// Our domain; restricted in NodePool requirements except for the well-known labels below.
pub const DOMAIN: &str = "karpenter.cluster.x-k8s.io";
/// Whole vCPUs of the instance type (floor), for `Gt`/`Lt` requirements.
pub const LABEL_INSTANCE_CPU: &str = "karpenter.cluster.x-k8s.io/instance-cpu";
/// Memory of the instance type in MiB (floor), for `Gt`/`Lt` requirements.
pub const LABEL_INSTANCE_MEMORY: &str = "karpenter.cluster.x-k8s.io/instance-memory";
/// Number of GPUs (sum of all `*/gpu` resources).
pub const LABEL_INSTANCE_GPU_COUNT: &str = "karpenter.cluster.x-k8s.io/instance-gpu-count";
/// Name of the InfrastructureMachineTemplate an offering launches from.
pub const LABEL_INSTANCE_TEMPLATE: &str = "karpenter.cluster.x-k8s.io/instance-template";
/// Price per hour of one instance launched from the template (decimal).
pub const ANNOTATION_PRICE: &str = "karpenter.cluster.x-k8s.io/price";

/// Prefix of the cluster-autoscaler scale-from-zero annotations.
pub const CA_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";
/// `capacity.cluster-autoscaler.kubernetes.io/cpu`
pub const CA_CPU: &str = "capacity.cluster-autoscaler.kubernetes.io/cpu";
/// `capacity.cluster-autoscaler.kubernetes.io/memory`
pub const CA_MEMORY: &str = "capacity.cluster-autoscaler.kubernetes.io/memory";
/// `capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk`
pub const CA_EPHEMERAL_DISK: &str = "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk";
/// `capacity.cluster-autoscaler.kubernetes.io/maxPods`
pub const CA_MAX_PODS: &str = "capacity.cluster-autoscaler.kubernetes.io/maxPods";
/// `capacity.cluster-autoscaler.kubernetes.io/gpu-count`
pub const CA_GPU_COUNT: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-count";
/// `capacity.cluster-autoscaler.kubernetes.io/gpu-type`
pub const CA_GPU_TYPE: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-type";
/// `capacity.cluster-autoscaler.kubernetes.io/labels`
pub const CA_LABELS: &str = "capacity.cluster-autoscaler.kubernetes.io/labels";
/// `capacity.cluster-autoscaler.kubernetes.io/taints`
pub const CA_TAINTS: &str = "capacity.cluster-autoscaler.kubernetes.io/taints";

/// API group of infrastructure providers.
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// API group of Cluster API core.
pub const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";
