//! The labels and annotations kwok Nodes carry (Karpenter kwok's `kwok/apis/v1alpha1/labels.go`,
//! plus this provider's fence).

/// Instance-type labels derived from the instance-type file (selectable in NodePools).
pub const INSTANCE_SIZE: &str = "karpenter.kwok.sh/instance-size";
pub const INSTANCE_FAMILY: &str = "karpenter.kwok.sh/instance-family";
pub const INSTANCE_CPU: &str = "karpenter.kwok.sh/instance-cpu";
pub const INSTANCE_MEMORY: &str = "karpenter.kwok.sh/instance-memory";

/// kwok manages Nodes annotated (and labelled) `kwok.x-k8s.io/node: fake`.
pub const KWOK_NODE: &str = "kwok.x-k8s.io/node";
pub const KWOK_NODE_VALUE: &str = "fake";
/// Karpenter kwok spreads Nodes over kwok partitions; there is one, `a`.
pub const KWOK_PARTITION: &str = "kwok-partition";
pub const KWOK_PARTITION_VALUE: &str = "a";
/// The offering's price, for eks-node-viewer.
pub const NODE_VIEWER_PRICE: &str = "eks-node-viewer/instance-price";

/// The fence: the NodeClaim a Node was made for. Only Nodes with this label (and a `kwok://`
/// providerID) are this provider's: `get`, `list` and `delete` never see any other.
pub const NODECLAIM: &str = "karpenter.kwok.sh/nodeclaim";
/// The UID of that NodeClaim (garbage collection; a NodeClaim re-created under the same name
/// does not adopt its predecessor's Node).
pub const NODECLAIM_UID: &str = "karpenter.kwok.sh/nodeclaim-uid";

/// The providerID prefix of kwok Nodes.
pub const PROVIDER_ID_PREFIX: &str = "kwok://";
