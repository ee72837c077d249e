//! The NodeClaim lifecycle: launch → registration → initialization → liveness, and
//! termination (one Cluster API Machine per NodeClaim).

pub mod context;
pub mod drift;
pub mod error;
pub mod launch;
pub mod lifecycle;
pub mod liveness;
pub mod node_sync;
pub mod objects;
pub mod offering;
pub mod plan;
pub mod registration;
pub mod repair;
pub mod termination;
