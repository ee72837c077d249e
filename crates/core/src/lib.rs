//! The provider-neutral core (Karpenter's `pkg/controllers`): control loops, one module per
//! loop, and the runtime pieces they share. It knows providers only through the
//! `cloudprovider` crate's trait; no Cluster API type is in its dependencies.

pub(crate) mod blockers;
pub mod budgets;
pub mod cache;
pub mod clients;
pub(crate) mod cluster_metrics;
pub(crate) mod cost;
pub mod disruption;
pub mod engagement;
pub mod events;
pub mod garbagecollection;
pub mod health;
pub(crate) mod index;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod nodeclaim;
pub mod nodepool_status;
pub mod objects;
pub(crate) mod overlay_status;
pub mod provisioning;
pub mod ratelimit;
pub(crate) mod reports;
pub mod server;
pub mod state;
pub mod static_pools;
pub mod tasks;
pub mod trim;
pub mod write;
