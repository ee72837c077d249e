//! Control loops, one module per loop, and the runtime pieces they share.

pub mod cache;
pub mod catalogs;
pub mod clone;
pub mod cluster_metrics;
pub mod disruption;
pub mod events;
pub mod fence;
pub mod garbagecollection;
pub mod latency;
pub mod leader;
pub mod machine;
pub mod metrics;
pub mod names;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodeclass_status;
pub mod nodepool_status;
pub mod objects;
pub mod provisioning;
pub mod ratelimit;
pub mod reports;
pub mod resources;
pub mod runtime;
pub mod server;
pub mod tasks;
pub mod unavailable;
