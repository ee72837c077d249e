//! The catalog of each NodeClass, as the provider reads it: built from the template caches,
//! the NodeClass and its Cluster ([`IndexCatalogs`]), behind the [`Catalogs`] trait so launch
//! can be fed a fixed catalog in tests.
//!
//! What the provider answers `instance_types` with is the catalog without NodeOverlays: the
//! core's overlay decorator (`cloudprovider::overlay::Overlaid`) applies them, for every
//! provider. Launch (which offering, which capacity) and the NodeClass status (the prices in
//! effect) read the catalog as the core sees it, through the same shared evaluation
//! ([`Catalogs::overlaid`]): overlays are evaluated and applied in one place.

use std::sync::Arc;

use cloudprovider::overlay::OverlayStore;
use clusterapi_api::{Cluster, ClusterAPINodeClass};
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use templates::model::Catalog;
use templates::selection::Selection;
use templates::settings::CatalogSettings;
use templates::watch::TemplateIndex;

/// The current catalog of each NodeClass (fed by the template watcher).
pub trait Catalogs: Send + Sync {
    /// The catalog of `nodeclass` without NodeOverlays (what `instance_types` answers).
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>>;

    /// The catalog of `nodeclass` with the NodeOverlays applied, as the core's decorator
    /// applies them (launch chooses from it); without overlays, [`Catalogs::catalog`].
    fn overlaid(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        self.catalog(nodeclass)
    }

    /// A cached InfrastructureMachineTemplate (`group`, `kind`, `namespace`, `name`); `None`
    /// when it is not cached (gone, or this implementation has no template caches).
    fn template(
        &self,
        _group: &str,
        _kind: &str,
        _ns: &str,
        _name: &str,
    ) -> Option<Arc<DynamicObject>> {
        None
    }

    /// The InfrastructureMachineTemplate kinds watched, as (group, kind).
    fn template_kinds(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Why `nc` may not launch in this engagement: its `clusterRef` names another Cluster
    /// than the engaged one (hub mode); `None` when it may.
    fn cluster_ref_mismatch(&self, _nc: &ClusterAPINodeClass) -> Option<String> {
        None
    }
}

pub use karpenter_core::engagement::ClusterKey;

/// Why `nc` may not launch in the engagement of `engaged` (see
/// [`Catalogs::cluster_ref_mismatch`]); single-cluster mode (`None`) accepts any Cluster.
pub(crate) fn mismatch(engaged: Option<&ClusterKey>, nc: &ClusterAPINodeClass) -> Option<String> {
    let engaged = engaged?;
    let r = &nc.spec.cluster_ref;
    (r.namespace != engaged.namespace || r.name != engaged.name).then(|| {
        format!(
            "spec.clusterRef {}/{} is not the Cluster this workload cluster is engaged as ({engaged})",
            r.namespace, r.name
        )
    })
}

/// Catalogs built from the template caches, the NodeClass and its Cluster (all cached).
#[derive(Clone)]
pub struct IndexCatalogs {
    pub index: TemplateIndex,
    pub nodeclasses: Store<ClusterAPINodeClass>,
    pub clusters: Store<Cluster>,
    /// The NodeOverlays and their evaluation, shared with the core's overlay decorator
    /// (`None`: the `NodeOverlay` feature gate is off).
    pub overlays: Option<Arc<OverlayStore>>,
    /// The engaged Cluster (hub mode): a NodeClass naming another has no catalog.
    pub engaged: Option<ClusterKey>,
}

impl IndexCatalogs {
    pub(crate) fn cluster_of(&self, nc: &ClusterAPINodeClass) -> Option<Arc<Cluster>> {
        let r = &nc.spec.cluster_ref;
        self.clusters
            .get(&ObjectRef::new(&r.name).within(&r.namespace))
    }

    /// The catalog `of` a served NodeClass called `nodeclass` (`None`: no such NodeClass, one
    /// of another Cluster, or an empty catalog).
    fn served(
        &self,
        nodeclass: &str,
        of: impl Fn(&Self, &ClusterAPINodeClass) -> Arc<Result<Arc<Catalog>, templates::SettingsError>>,
    ) -> Option<Arc<Catalog>> {
        let nc = self.nodeclasses.get(&ObjectRef::new(nodeclass))?;
        if self.cluster_ref_mismatch(&nc).is_some() {
            return None;
        }
        match &*of(self, &nc) {
            Ok(c) if !c.instance_types.is_empty() => Some(Arc::clone(c)),
            _ => None,
        }
    }

    /// The catalog of a NodeClass from its templates alone (no overlay applied).
    pub(crate) fn base_catalog_for(
        &self,
        nc: &ClusterAPINodeClass,
    ) -> Arc<Result<Arc<Catalog>, templates::SettingsError>> {
        let selection = Selection::from_node_class(nc);
        let cluster = self.cluster_of(nc);
        let settings = CatalogSettings::from_node_class(nc, cluster.as_deref());
        self.index.catalog_cached(&selection, &settings)
    }

    /// The catalog of a NodeClass with the NodeOverlays applied: the shared evaluation
    /// (over the catalogs `instance_types` answers, as the decorator evaluates them) applied
    /// to its instance types.
    pub(crate) fn catalog_for(
        &self,
        nc: &ClusterAPINodeClass,
    ) -> Arc<Result<Arc<Catalog>, templates::SettingsError>> {
        let base = self.base_catalog_for(nc);
        let (Ok(catalog), Some(store)) = (&*base, &self.overlays) else {
            return base;
        };
        if !store.any() {
            return base;
        }
        let evaluation = store.evaluation(&|name| self.catalog(name).map(|c| c.types.clone()));
        let types = store.apply(&catalog.types, &evaluation);
        if Arc::ptr_eq(&types, &catalog.types) {
            return base;
        }
        Arc::new(Ok(Arc::new(Catalog {
            types,
            ..Catalog::clone(catalog)
        })))
    }
}

impl Catalogs for IndexCatalogs {
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        self.served(nodeclass, Self::base_catalog_for)
    }

    fn overlaid(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        self.served(nodeclass, Self::catalog_for)
    }

    fn template(
        &self,
        group: &str,
        kind: &str,
        ns: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        self.index.get(group, kind, ns, name)
    }

    fn template_kinds(&self) -> Vec<(String, String)> {
        self.index
            .kinds()
            .into_iter()
            .map(|k| (k.group, k.kind))
            .collect()
    }

    fn cluster_ref_mismatch(&self, nc: &ClusterAPINodeClass) -> Option<String> {
        mismatch(self.engaged.as_ref(), nc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodeclass(ns: &str, name: &str) -> ClusterAPINodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
            "metadata": {"name": "default"},
            "spec": {"clusterRef": {"namespace": ns, "name": name},
                     "bootstrap": {"dataSecretName": "bootstrap-data"}}
        }))
        .expect("nodeclass fixture")
    }

    #[test]
    fn only_the_engaged_cluster_is_accepted_in_hub_mode() {
        let engaged = ClusterKey {
            namespace: "tenant-a".into(),
            name: "alpha".into(),
        };
        assert_eq!(
            mismatch(Some(&engaged), &nodeclass("tenant-a", "alpha")),
            None
        );
        let other = mismatch(Some(&engaged), &nodeclass("tenant-b", "beta"))
            .expect("another tenant's Cluster is refused");
        assert!(
            other.contains("tenant-b/beta") && other.contains("tenant-a/alpha"),
            "{other}"
        );
        assert!(mismatch(Some(&engaged), &nodeclass("tenant-b", "alpha")).is_some());
        assert_eq!(
            mismatch(None, &nodeclass("tenant-b", "beta")),
            None,
            "single-cluster mode accepts any Cluster"
        );
    }
}
