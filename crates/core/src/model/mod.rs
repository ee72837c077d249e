//! Kubernetes objects as the scheduling model sees them: pods, nodes, NodePools and
//! requirements ([`convert`]), and the volumes pods use ([`volumes`]).

pub mod convert;
pub mod volumes;
