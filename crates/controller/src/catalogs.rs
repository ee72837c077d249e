//! The catalog of each NodeClass, as the loops read it: built from the template caches, the
//! NodeClass and its Cluster ([`IndexCatalogs`]), behind the [`Catalogs`] trait so the
//! provisioner and launch can be fed a fixed catalog in tests.

use std::sync::Arc;

use api::{Cluster, ClusterAPINodeClass};
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use templates::model::Catalog;
use templates::selection::Selection;
use templates::settings::CatalogSettings;
use templates::watch::TemplateIndex;

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

/// Catalogs built from the template caches, the NodeClass and its Cluster (all cached).
#[derive(Clone)]
pub struct IndexCatalogs {
    pub index: TemplateIndex,
    pub nodeclasses: Store<ClusterAPINodeClass>,
    pub clusters: Store<Cluster>,
}

impl IndexCatalogs {
    pub(crate) fn cluster_of(&self, nc: &ClusterAPINodeClass) -> Option<Arc<Cluster>> {
        let r = &nc.spec.cluster_ref;
        self.clusters
            .get(&ObjectRef::new(&r.name).within(&r.namespace))
    }

    /// The catalog of a NodeClass.
    pub fn catalog_for(
        &self,
        nc: &ClusterAPINodeClass,
    ) -> Arc<Result<Arc<Catalog>, templates::SettingsError>> {
        let selection = Selection::from_node_class(nc);
        let cluster = self.cluster_of(nc);
        let settings = CatalogSettings::from_node_class(nc, cluster.as_deref());
        self.index.catalog_cached(&selection, &settings)
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
