//! The provider seam, provider-neutral: what the core asks of a provider (Karpenter's
//! `pkg/cloudprovider`) and the instance-type model it answers with. It knows no provider:
//! nothing here names Cluster API, kwok or a template kind.
//!
//! - [`provider`]: the [`CloudProvider`] trait, its typed errors and what it answers.
//! - [`model`], [`instance_types`], [`resize`]: instance types and offerings, resizable ones.
//! - [`repair`]: repair policies and their validation.
//! - [`drain`]: how the core's drain treats each pod (drain rules).
//! - [`fake`]: an in-memory provider for tests.
//! - [`metered`], [`overlay`]: decorators around any provider: every call timed and its
//!   errors counted; NodeOverlays applied to `instance_types` (and their evaluation, which
//!   the core's NodeOverlay status reports).

#[cfg(test)]
mod decorator_tests;
pub mod drain;
pub mod fake;
mod forward;
pub mod instance_types;
pub mod label_syntax;
pub mod metered;
pub mod model;
pub mod overlay;
pub mod provider;
pub mod quantity;
pub mod repair;
pub mod resize;

pub use drain::{DrainBehaviour, DrainRule, DrainRules, PodSelector};
pub use instance_types::InstanceTypes;
pub use model::{
    DeviceSlice, DeviceSource, Devices, InstanceType, Offering, OfferingCount, PriceSource,
    Resources,
};
pub use provider::{
    CloudProvider, Created, Deletion, Drift, Error, Instance, Intent, NodeClassKind,
    RemediatedElsewhere, Retry, Timeouts, Unhealthy,
};
pub use repair::{InvalidPolicies, RepairAction, RepairPolicy};
