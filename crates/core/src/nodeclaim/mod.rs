//! The NodeClaim lifecycle: launch → registration → initialization → liveness, and
//! termination, through the provider seam (`cloudprovider::CloudProvider`): what the loops
//! judge for every provider, over the core's context (`context`) with no Cluster API type.
//! The Cluster API provider's launch, objects, drift reasons and context live under
//! `cloudprovider::clusterapi`.

pub mod context;
pub(crate) mod disrupted;
pub(crate) mod drain;
pub(crate) mod drift;
pub mod error;
pub mod labels;
pub mod lifecycle;
pub(crate) mod liveness;
pub(crate) mod node_sync;
pub(crate) mod outdated;
pub(crate) mod reboot;
pub(crate) mod registration;
pub mod repair;
pub mod repair_policy;
pub(crate) mod termination;
