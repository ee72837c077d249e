//! An index over a cache's objects: objects by a derived key (a Node's providerID), kept
//! current from the same watch events that feed the cache's store, so a lookup is not a scan.

use std::collections::{BTreeSet, HashMap};
use std::sync::RwLock;

use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

/// A key function for an [`Index`]: the value an object is found by.
pub type KeyFn<K> = fn(&K) -> Option<String>;

/// Objects by a derived key (e.g. Nodes by `spec.providerID`), kept current from the same
/// watch events that feed the store.
pub struct Index<K> {
    key: KeyFn<K>,
    inner: RwLock<IndexMaps>,
}

/// Key → object names, and each object's key.
type Maps = (HashMap<String, BTreeSet<String>>, HashMap<String, String>);

#[derive(Default)]
struct IndexMaps {
    by_key: HashMap<String, BTreeSet<String>>,
    key_of: HashMap<String, String>,
    /// Filled during a re-list, swapped in when it completes.
    relist: Option<Maps>,
}

impl<K: Resource> Index<K> {
    pub fn new(key: KeyFn<K>) -> Self {
        Index {
            key,
            inner: RwLock::default(),
        }
    }

    /// The names (`namespace/name` for namespaced kinds) of the objects with `key`.
    pub fn get(&self, key: &str) -> Vec<String> {
        let maps = self.inner.read().unwrap_or_else(|p| p.into_inner());
        maps.by_key
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn id(obj: &K) -> String {
        match obj.meta().namespace.as_deref() {
            Some(ns) => format!("{ns}/{}", obj.name_any()),
            None => obj.name_any(),
        }
    }

    fn insert(
        by_key: &mut HashMap<String, BTreeSet<String>>,
        key_of: &mut HashMap<String, String>,
        id: String,
        key: Option<String>,
    ) {
        if let Some(old) = key_of.remove(&id)
            && let Some(set) = by_key.get_mut(&old)
        {
            set.remove(&id);
            if set.is_empty() {
                by_key.remove(&old);
            }
        }
        if let Some(key) = key.filter(|k| !k.is_empty()) {
            by_key.entry(key.clone()).or_default().insert(id.clone());
            key_of.insert(id, key);
        }
    }

    pub(crate) fn apply(&self, event: &watcher::Event<K>) {
        let mut maps = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let maps = &mut *maps;
        match event {
            watcher::Event::Apply(obj) => {
                Self::insert(
                    &mut maps.by_key,
                    &mut maps.key_of,
                    Self::id(obj),
                    (self.key)(obj),
                );
            }
            watcher::Event::Delete(obj) => {
                Self::insert(&mut maps.by_key, &mut maps.key_of, Self::id(obj), None);
            }
            watcher::Event::Init => maps.relist = Some(Default::default()),
            watcher::Event::InitApply(obj) => {
                let (by_key, key_of) = maps.relist.get_or_insert_with(Default::default);
                Self::insert(by_key, key_of, Self::id(obj), (self.key)(obj));
            }
            watcher::Event::InitDone => {
                if let Some((by_key, key_of)) = maps.relist.take() {
                    maps.by_key = by_key;
                    maps.key_of = key_of;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeSpec};
    use kube::api::ObjectMeta;

    fn node(name: &str, pid: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: pid.map(str::to_string),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn node_provider_id(node: &Node) -> Option<String> {
        node.spec.as_ref()?.provider_id.clone()
    }

    #[test]
    fn index_follows_applies_deletes_and_relists() {
        let index = Index::new(node_provider_id);
        index.apply(&watcher::Event::Apply(node("a", Some("p1"))));
        index.apply(&watcher::Event::Apply(node("b", Some("p1"))));
        assert_eq!(index.get("p1"), ["a", "b"], "two nodes share a providerID");
        index.apply(&watcher::Event::Apply(node("b", Some("p2"))));
        assert_eq!(index.get("p1"), ["a"]);
        assert_eq!(index.get("p2"), ["b"]);
        index.apply(&watcher::Event::Delete(node("a", Some("p1"))));
        assert!(index.get("p1").is_empty());
        // A re-list replaces the index only when complete.
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(node("c", Some("p3"))));
        assert_eq!(index.get("p2"), ["b"], "old entries serve until InitDone");
        index.apply(&watcher::Event::InitDone);
        assert!(index.get("p2").is_empty());
        assert_eq!(index.get("p3"), ["c"]);
        index.apply(&watcher::Event::Apply(node("c", None)));
        assert!(
            index.get("p3").is_empty(),
            "a cleared providerID leaves the index"
        );
    }
}
