//! The API resources of our own kinds, for dynamic clients (`Api<DynamicObject>`).

use api::{ClusterAPINodeClass, NodeClaim, NodePool};
use kube::api::ApiResource;

/// `karpenter.sh/v1` NodePool.
pub fn nodepool_resource() -> ApiResource {
    ApiResource::erase::<NodePool>(&())
}

/// `karpenter.sh/v1` NodeClaim.
pub fn nodeclaim_resource() -> ApiResource {
    ApiResource::erase::<NodeClaim>(&())
}

/// `karpenter.cluster.x-k8s.io/v1alpha1` ClusterAPINodeClass.
pub fn nodeclass_resource() -> ApiResource {
    ApiResource::erase::<ClusterAPINodeClass>(&())
}
