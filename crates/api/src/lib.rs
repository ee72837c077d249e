//! The provider-neutral API every controller codes against. The Cluster API kinds and the
//! ClusterAPINodeClass are in the `clusterapi-api` crate.
//!
//! - [`karpenter`]: `karpenter.sh/v1` [`NodePool`] and [`NodeClaim`], field for field as
//!   Karpenter defines them (defaults, enums, patterns and CEL rules included), so a user's
//!   existing NodePool YAML applies unchanged.
//! - [`overlay`]: `karpenter.sh/v1alpha1` [`NodeOverlay`] (applied by `cloudprovider::overlay`).
//! - [`consts`]: every label, annotation, taint, finalizer and condition name.
//! - [`conditions`]: metav1 `Condition` helpers.
//! - [`crds`]: rendering CRDs as installed (the provider crates add their NodeClass).
//! - [`schema`]: schema fragments schemars cannot derive.
//! - [`csi`]: Cluster Autoscaler's `…/csi-driver` annotation (CSI drivers and attach limits).
//! - [`dra`]: the devices a template declares (resource-slices, or Cluster Autoscaler's
//!   dra-driver with gpu-count).
//! - [`duration`]: Go durations as the API writes them.
//! - [`hash`]: FNV-1a, stable across releases.

pub mod conditions;
pub mod consts;
pub mod crds;
pub mod csi;
pub mod dra;
pub mod duration;
pub mod hash;
// The `KubeSchema` derive copies a struct, `pub` included, into a private helper and strips
// any `allow` from the copy: unreachable_pub would flag the helper, never a real item (every
// item of this module is public API).
#[allow(unreachable_pub)]
pub mod karpenter;
#[allow(unreachable_pub)] // the `KubeSchema` derive, as for `karpenter`
pub mod overlay;
pub mod schema;
pub mod selector;

pub use karpenter::{NodeClaim, NodePool};
pub use overlay::NodeOverlay;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("rendering CRD {name} as YAML: {message}")]
    Render { name: String, message: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}
