//! Kubernetes objects as the scheduling model sees them: pods, nodes, NodePools and
//! requirements ([`convert`]), the volumes pods use ([`volumes`]) and the devices their
//! ResourceClaims allocate ([`devices`]).

pub mod convert;
pub mod devices;
pub mod volumes;
