//! The Cluster API side of the API:
//!
//! - `capi`: typed clients for the Cluster API kinds we read and create (`Machine`,
//!   `Cluster`, `MachineHealthCheck`, `MachineDrainRule`, `cluster.x-k8s.io/v1beta2`). Cluster
//!   API installs those CRDs, never us.
//! - [`nodeclass`]: `karpenter.cluster.x-k8s.io/v1alpha1` [`ClusterAPINodeClass`].
//! - [`crds`]: every CRD the operator installs (the neutral ones of `api` and the NodeClass).

mod capi;
pub mod crds;
#[allow(unreachable_pub)] // the `KubeSchema` derive, as for `api::karpenter`
pub mod nodeclass;
mod schema;

pub use capi::{Cluster, Machine, MachineDrainRule, MachineDrainRuleSpec, MachineHealthCheck};
pub use nodeclass::ClusterAPINodeClass;
