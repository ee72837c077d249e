//! Pure bin-packing and requirements algebra (no I/O).
//!
//! [`solve`] simulates Karpenter's provisioning scheduler on an [`Input`] (NodePools with their
//! instance types, existing and in-flight nodes, daemonsets, pending pods) and returns the
//! NodeClaims to create, the pods that fit existing nodes, and the pods that cannot be scheduled
//! with the constraint that failed.

pub mod bench_workload;
pub mod dra;
mod intern;
mod model;
pub mod replace;
mod requirements;
mod solver;
pub mod volumes;

pub use model::*;
pub use requirements::{Operator, Requirement, Requirements, ValueSet};
pub use solver::{
    MAX_INSTANCE_TYPES, solve, solve_first_fit, solve_first_fit_with_devices, solve_with_devices,
};

/// Why a pod could not go onto a new NodeClaim of one NodePool.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("did not tolerate taint {0}")]
    Taint(String),
    #[error("incompatible requirements, key {0}")]
    Requirements(String),
    #[error("no instance type is compatible with the requirements")]
    NoCompatibleInstanceType,
    #[error("no instance type has enough {0}")]
    InsufficientResources(String),
    #[error("minValues requirement on {key} not met ({got} < {want})")]
    MinValues { key: String, want: u32, got: u32 },
    #[error("all available instance types exceed the nodepool limit on {0}")]
    Limits(String),
    #[error("topology spread constraint on {0} cannot be satisfied")]
    TopologySpread(String),
    #[error("pod affinity on {0} cannot be satisfied")]
    PodAffinity(String),
    #[error("pod anti-affinity on {0} cannot be satisfied")]
    PodAntiAffinity(String),
    #[error("host port {0} conflicts")]
    HostPort(u16),
    #[error("no count left on {key} ({available} available when the solve started)")]
    CountExhausted { key: String, available: u32 },
    #[error("would exceed the volume attach limit of {driver} on every instance type")]
    VolumeLimit { driver: String },
    /// No instance type with room for the pod publishes the devices a request of its
    /// ResourceClaim asks for (or has them left).
    #[error("no instance type publishes {devices} (claim {claim}, request {request})")]
    Devices {
        devices: String,
        claim: String,
        request: String,
    },
    /// The pod's ResourceClaim is allocated on another node: the pod can go only there.
    #[error("resourceclaim {claim} is {at}")]
    ClaimPinned { claim: String, at: String },
}
