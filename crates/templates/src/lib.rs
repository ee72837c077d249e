//! InfrastructureMachineTemplate → instance-type catalog.
//!
//! Cluster API has no instance-type API: the scale-from-zero contract puts a template's shape
//! in `status.capacity` / `status.nodeInfo` and in cluster-autoscaler annotations. This crate
//! turns templates of any infrastructure provider (plus the ClusterAPINodeClass kubelet
//! settings and the Cluster's failure domains) into Karpenter instance types with offerings.
//!
//! - `catalog`: the pure part ([`build_catalog`]); its module documentation states the semantics.
//! - [`count`]: counted offerings (max-machines, node-group max size, reported counts).
//! - [`shape`]: one template read on its own ([`TemplateShape`]).
//! - `reference`: which template an object is ([`TemplateRef`]).
//! - [`labels`]: label and taint syntax (keys, values, the `…/labels` and `…/taints` annotations).
//! - [`settings`]: NodeClass/Cluster inputs and the allocatable defaults.
//! - [`quantity`]: exact Kubernetes quantity parsing.
//! - [`selection`]: which templates a NodeClass selects.
//! - [`crd`]: a CRD as discovery reads it (no schemas).
//! - [`watch`]: CRD discovery of template kinds, reflector caches, [`watch::TemplateIndex`]
//!   serving each NodeClass's catalog.
//! - [`status`]: the NodeClass status of a catalog (`status.instanceTypes`, `ClusterReady`,
//!   `TemplatesReady`, `BootstrapReady`).
//! - [`offline`]: reading YAML files into objects and rendering catalogs (the
//!   `karpenter-capi instance-types` command).

mod catalog;
pub mod count;
pub mod crd;
pub mod devices;
mod error;
pub mod inventory;
pub mod labels;
pub mod model;
pub mod offline;
pub use cloudprovider::quantity;
mod reference;
pub mod resize;
pub mod selection;
pub mod settings;
pub mod shape;
pub use cloudprovider::resize as sizing;
pub mod status;
pub mod watch;

pub use catalog::build_catalog;
pub use error::{SettingsError, TemplateError};
pub use model::{
    Catalog, DefaultApplied, Excluded, InstanceType, Offering, PriceSource, Resources, TemplateRef,
};
pub use settings::CatalogSettings;
pub use shape::TemplateShape;
