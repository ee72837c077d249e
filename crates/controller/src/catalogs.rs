//! The catalog of each NodeClass, as the loops read it: built from the template caches, the
//! NodeClass and its Cluster ([`IndexCatalogs`]), behind the [`Catalogs`] trait so the
//! provisioner and launch can be fed a fixed catalog in tests.

use std::sync::Arc;

use api::{Cluster, ClusterAPINodeClass};
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
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
}

/// Catalogs built from the template caches, the NodeClass and its Cluster (all cached).
#[derive(Clone)]
pub struct IndexCatalogs {
    pub index: TemplateIndex,
    pub nodeclasses: Store<ClusterAPINodeClass>,
    pub clusters: Store<Cluster>,
}

impl IndexCatalogs {
    pub(crate) fn cluster_of(&self, nc: &Value) -> Option<Arc<Cluster>> {
        let ns = nc.pointer("/spec/clusterRef/namespace")?.as_str()?;
        let name = nc.pointer("/spec/clusterRef/name")?.as_str()?;
        self.clusters.get(&ObjectRef::new(name).within(ns))
    }

    /// The catalog of a NodeClass given as JSON.
    pub fn catalog_for(&self, nc: &Value) -> Arc<Result<Catalog, templates::SettingsError>> {
        let selection = Selection::from_node_class_json(nc);
        let mut settings = CatalogSettings::from_node_class_json(nc);
        if let Some(cluster) = self.cluster_of(nc) {
            settings =
                settings.with_cluster_json(&serde_json::to_value(&*cluster).unwrap_or(Value::Null));
        }
        self.index.catalog_cached(&selection, &settings)
    }
}

impl Catalogs for IndexCatalogs {
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        let nc = self.nodeclasses.get(&ObjectRef::new(nodeclass))?;
        let value = serde_json::to_value(&*nc).ok()?;
        match &*self.catalog_for(&value) {
            Ok(c) if !c.instance_types.is_empty() => Some(Arc::new(c.clone())),
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
}
