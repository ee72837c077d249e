//! The provider seam lives in the `cloudprovider` crate; `clusterapi` is the Cluster API
//! implementation.

pub mod clusterapi;

pub use cloudprovider::fake;
pub use cloudprovider::provider::*;
