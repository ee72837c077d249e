//! The NodeClaim lifecycle: launch → registration → initialization → liveness, and
//! termination (one Cluster API Machine per NodeClaim).

pub mod claim;
pub mod node_sync;

pub mod offering;
