//! Differential conformance against Karpenter's own scheduling tests (docs/conformance.md).
//!
//! `hack/conformance` runs Karpenter v1.15.0's scheduling suite with every Solve recorded:
//! the scenario, the scheduler's input and Karpenter's result ([`record`]). Here each input is
//! replayed through the operator's own conversion and solver ([`replay`]), both results are
//! validated by a checker written from the Kubernetes semantics that never calls the solver
//! ([`check`]), and the two are compared ([`compare`]).

pub mod check;
pub mod compare;
pub mod known;
pub mod record;
pub mod replay;

/// A pod's key in plans and records: `namespace/name`.
pub fn pod_key(p: &k8s_openapi::api::core::v1::Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}
