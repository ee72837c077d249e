//! A second provider: Karpenter's kwok provider (`sigs.k8s.io/karpenter/kwok`) in Rust. It
//! makes each NodeClaim's Node directly, and kwok (sigs.k8s.io/kwok) then runs it: Ready,
//! pods Running. With it the core runs on the same ground as Karpenter's kwok provider, with
//! no Cluster API in the way.
//!
//! - [`KwokCloudProvider`]: the `CloudProvider` (see `docs/development.md`, "Adding a
//!   provider", for what each method does here).
//! - [`instance_types`]: Karpenter kwok's instance-type file (or ConfigMap), read with its
//!   defaults; errors name the file and the field.
//! - [`nodeclass`]: `karpenter.kwok.sh/v1alpha1` KWOKNodeClass and its CRD.
//! - [`labels`]: the labels and annotations kwok Nodes carry.
//! - [`wiring`]: the provider's parts of an engagement (`karpenter-capi run --provider kwok`).

mod catalog;
pub mod instance_types;
pub mod labels;
mod node;
pub mod nodeclass;
mod provider;
pub mod wiring;

use std::path::PathBuf;

pub use nodeclass::KWOKNodeClass;
pub use provider::KwokCloudProvider;

/// Errors of this crate (the provider's own are `cloudprovider::Error`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The instance types could not be read: where (`origin`: file or ConfigMap), which
    /// field (`[3].offerings[0].Price`; empty: the document), and what is wrong.
    #[error("instance types in {origin}{}: {message}", if field.is_empty() { String::new() } else { format!(", field {field}") })]
    InstanceTypes {
        origin: String,
        field: String,
        message: String,
    },
    #[error("reading instance types {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("KWOKNodeClass {name}: {message}")]
    NodeClass { name: String, message: String },
    #[error("rendering the KWOKNodeClass CRD: {0}")]
    Render(String),
}
