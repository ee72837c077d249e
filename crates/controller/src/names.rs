//! Label, annotation, taint and finalizer names the control loops use.
// TODO(api): these move to the api crate's constants module once it lands.

pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
pub const CAPI_VERSION: &str = "v1beta2";
pub const CAPI_CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const CAPI_SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
pub const CAPI_DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
pub const CAPI_CLONED_FROM_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-name";
pub const CAPI_CLONED_FROM_GROUPKIND_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-groupkind";
pub const DO_NOT_SYNC_TAINTS_LABEL: &str = "karpenter.sh/do-not-sync-taints";
pub const NODE_REGISTERED_LABEL: &str = "karpenter.sh/registered";
pub const NODE_INITIALIZED_LABEL: &str = "karpenter.sh/initialized";
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// Taints expected while a node starts (Karpenter's known ephemeral taints).
pub const EPHEMERAL_TAINT_KEYS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    UNREGISTERED_TAINT_KEY,
];
pub const READINESS_TAINT_PREFIX: &str = "readiness.k8s.io/";
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
pub const NODECLAIM_LABEL: &str = "karpenter.cluster.x-k8s.io/nodeclaim";
pub const KARPENTER_MEMBER_LABEL: &str = "node.cluster.x-k8s.io/karpenter-member";
/// On a NodeClaim: `<namespace>/<name>` of its Machine.
pub const CAPI_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/machine";
/// On a NodeClaim: the launch plan (JSON), written before anything is created.
pub const LAUNCH_PLAN_ANNOTATION: &str = "karpenter.cluster.x-k8s.io/launch";
/// On the Machine and its clones: the UID of the NodeClaim they were created for.
pub const NODECLAIM_UID_ANNOTATION: &str = "karpenter.cluster.x-k8s.io/nodeclaim-uid";
