//! The provider seam, provider-neutral: what the core asks of a provider (Karpenter's
//! `pkg/cloudprovider`) and the instance-type model it answers with. It knows no provider:
//! nothing here names Cluster API, kwok or a template kind.

pub mod model;

pub use model::{
    DeviceSlice, DeviceSource, Devices, InstanceType, Offering, OfferingCount, PriceSource,
    Resources,
};
