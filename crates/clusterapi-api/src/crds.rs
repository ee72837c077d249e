//! The CRDs the operator installs, rendered as YAML (`karpenter-capi crds`).

use std::path::{Path, PathBuf};

use api::Error;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// NodePool, NodeClaim, NodeOverlay and ClusterAPINodeClass, as installed.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut all = api::crds::crds();
    all.push(api::crds::finish(crate::ClusterAPINodeClass::crd()));
    all
}

/// Every CRD as (file name, YAML), in a fixed order.
pub fn rendered() -> Result<Vec<(String, String)>, Error> {
    api::crds::rendered(&crds())
}

/// Writes every CRD into `dir` (created if missing); returns the paths written.
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    api::crds::write_all(dir, &crds())
}
