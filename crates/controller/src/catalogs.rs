//! The catalog of each NodeClass, as the loops read it: built from the template caches, the
//! NodeClass and its Cluster, with the NodeOverlays applied ([`IndexCatalogs`],
//! [`crate::overlays`]), behind the [`Catalogs`] trait so the provisioner and launch can be
//! fed a fixed catalog in tests.

use std::sync::Arc;

use api::{Cluster, ClusterAPINodeClass};
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use templates::model::Catalog;
use templates::overlay::Evaluation;
use templates::selection::Selection;
use templates::settings::CatalogSettings;
use templates::watch::TemplateIndex;

use crate::overlays::Overlays;

/// The current catalog of each NodeClass (fed by the template watcher).
pub trait Catalogs: Send + Sync {
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>>;

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
}

/// Catalogs built from the template caches, the NodeClass and its Cluster (all cached),
/// with the NodeOverlays applied.
#[derive(Clone)]
pub struct IndexCatalogs {
    pub index: TemplateIndex,
    pub nodeclasses: Store<ClusterAPINodeClass>,
    pub clusters: Store<Cluster>,
    /// The NodeOverlays (`Default`: none applied).
    pub overlays: Overlays,
}

impl IndexCatalogs {
    pub(crate) fn cluster_of(&self, nc: &ClusterAPINodeClass) -> Option<Arc<Cluster>> {
        let r = &nc.spec.cluster_ref;
        self.clusters
            .get(&ObjectRef::new(&r.name).within(&r.namespace))
    }

    /// The catalog of a NodeClass from its templates alone (no overlay applied).
    pub fn base_catalog_for(
        &self,
        nc: &ClusterAPINodeClass,
    ) -> Arc<Result<Arc<Catalog>, templates::SettingsError>> {
        let selection = Selection::from_node_class(nc);
        let cluster = self.cluster_of(nc);
        let settings = CatalogSettings::from_node_class(nc, cluster.as_deref());
        self.index.catalog_cached(&selection, &settings)
    }

    /// The NodeOverlays evaluated over every NodeClass's base catalog (what applies, what
    /// conflicts, what each selects).
    pub fn evaluation(&self) -> Arc<Evaluation> {
        let mut nodeclasses = self.nodeclasses.state();
        nodeclasses.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let bases = nodeclasses
            .iter()
            .filter_map(|nc| match &*self.base_catalog_for(nc) {
                Ok(c) => Some(Arc::clone(c)),
                Err(_) => None,
            })
            .collect();
        self.overlays.evaluation(bases)
    }

    /// The catalog of a NodeClass, NodeOverlays applied.
    pub fn catalog_for(
        &self,
        nc: &ClusterAPINodeClass,
    ) -> Arc<Result<Arc<Catalog>, templates::SettingsError>> {
        let base = self.base_catalog_for(nc);
        let Ok(catalog) = &*base else {
            return base;
        };
        if !self.overlays.any() {
            return base;
        }
        let applied = self.overlays.apply(catalog, &self.evaluation());
        if Arc::ptr_eq(&applied, catalog) {
            return base;
        }
        Arc::new(Ok(applied))
    }
}

impl Catalogs for IndexCatalogs {
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        let nc = self.nodeclasses.get(&ObjectRef::new(nodeclass))?;
        match &*self.catalog_for(&nc) {
            Ok(c) if !c.instance_types.is_empty() => Some(Arc::clone(c)),
            _ => None,
        }
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
}
