//! The watching part: discover InfrastructureMachineTemplate kinds from their CRDs, keep a
//! reflector cache per kind, and serve each NodeClass's catalog from those caches.
//!
//! - A CRD qualifies when its group is `infrastructure.cluster.x-k8s.io`, its kind ends in
//!   `MachineTemplate`, it is namespaced, and it carries a Cluster API contract label
//!   (`cluster.x-k8s.io/v1beta2`, fallback `cluster.x-k8s.io/v1beta1`, value = versions joined
//!   by `_`). The version watched is the highest version in that label that the CRD serves.
//! - CRDs are watched too: a provider installed after start-up is picked up, a removed one is
//!   dropped, a contract bump switches the watched version.
//! - Reads never list: [`TemplateIndex::catalog`] builds from the reflector stores. Every
//!   template event bumps [`TemplateIndex::subscribe`]'s counter so controllers can requeue
//!   their NodeClasses at once (a template change is visible as soon as the watch delivers it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use api::consts::{groups, labels as label};
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::Version;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::catalog::build_catalog;
use crate::crd::CrdSummary;
use crate::error::SettingsError;
use crate::model::Catalog;
use crate::selection::Selection;
use crate::settings::CatalogSettings;

/// Contract label keys on provider CRDs, preferred first.
pub(crate) const CONTRACT_LABELS: [&str; 2] =
    ["cluster.x-k8s.io/v1beta2", "cluster.x-k8s.io/v1beta1"];

/// A template kind to watch, discovered from its CRD.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplateKind {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
}

impl TemplateKind {
    /// For dynamic APIs and reflector stores.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: format!("{}/{}", self.group, self.version),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }
    fn key(&self) -> GroupKind {
        (self.group.clone(), self.kind.clone())
    }
}

type GroupKind = (String, String);

/// The kind to watch for a CRD, if it is a contract-labelled namespaced infrastructure
/// `*MachineTemplate` CRD serving a version named in its contract label.
pub fn template_kind_from_crd(crd: &CrdSummary) -> Option<TemplateKind> {
    let spec = &crd.spec;
    if spec.group != groups::INFRASTRUCTURE
        || !spec.names.kind.ends_with("MachineTemplate")
        || spec.scope != "Namespaced"
    {
        return None;
    }
    let labels = crd.metadata.labels.as_ref()?;
    let contract = CONTRACT_LABELS.iter().find_map(|k| labels.get(*k))?;
    let served: Vec<&str> = spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.as_str())
        .collect();
    let version = contract
        .split('_')
        .map(str::trim)
        .filter(|v| served.contains(v))
        // Kubernetes version priority (GA > beta > alpha, then major, then minor).
        .max_by_key(|v| Version::parse(v).priority())?;
    Some(TemplateKind {
        group: spec.group.clone(),
        version: version.to_string(),
        kind: spec.names.kind.clone(),
        plural: spec.names.plural.clone(),
    })
}

/// What to do after a CRD event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindChange {
    Start(TemplateKind),
    Stop(TemplateKind),
}

/// Tracks the qualifying CRDs across watch events (including re-lists).
#[derive(Debug, Default)]
pub struct Discovery {
    current: BTreeMap<GroupKind, TemplateKind>,
    relist: Option<BTreeMap<GroupKind, TemplateKind>>,
}

impl Discovery {
    /// Folds one CRD watch event; returns the kinds to start and stop.
    pub(crate) fn on_event(&mut self, event: &Event<CrdSummary>) -> Vec<KindChange> {
        match event {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                Vec::new()
            }
            Event::InitApply(crd) => {
                if let (Some(relist), Some(kind)) =
                    (self.relist.as_mut(), template_kind_from_crd(crd))
                {
                    relist.insert(kind.key(), kind);
                }
                Vec::new()
            }
            Event::InitDone => {
                let next = self.relist.take().unwrap_or_default();
                let mut changes = Vec::new();
                for (key, old) in &self.current {
                    if next.get(key) != Some(old) {
                        changes.push(KindChange::Stop(old.clone()));
                    }
                }
                for (key, new) in &next {
                    if self.current.get(key) != Some(new) {
                        changes.push(KindChange::Start(new.clone()));
                    }
                }
                self.current = next;
                changes
            }
            Event::Apply(crd) => {
                let key = (crd.spec.group.clone(), crd.spec.names.kind.clone());
                let new = template_kind_from_crd(crd);
                let old = self.current.get(&key).cloned();
                if new == old {
                    return Vec::new();
                }
                let mut changes = Vec::new();
                if let Some(o) = old {
                    self.current.remove(&key);
                    changes.push(KindChange::Stop(o));
                }
                if let Some(n) = new {
                    self.current.insert(key, n.clone());
                    changes.push(KindChange::Start(n));
                }
                changes
            }
            Event::Delete(crd) => {
                let key = (crd.spec.group.clone(), crd.spec.names.kind.clone());
                self.current
                    .remove(&key)
                    .map(|k| vec![KindChange::Stop(k)])
                    .unwrap_or_default()
            }
        }
    }

    /// The kinds currently qualifying.
    pub fn kinds(&self) -> Vec<TemplateKind> {
        self.current.values().cloned().collect()
    }
}

struct Watched {
    kind: TemplateKind,
    store: Store<DynamicObject>,
    task: Option<tokio::task::AbortHandle>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Catalogs computed at a change-counter value, per (selection, settings).
type CatalogCache = Vec<(
    Selection,
    CatalogSettings,
    u64,
    Arc<Result<Arc<Catalog>, SettingsError>>,
)>;

/// At most this many (selection, settings) pairs are cached (one per NodeClass in practice).
const CATALOG_CACHE_SIZE: usize = 64;

struct Inner {
    kinds: RwLock<BTreeMap<GroupKind, Watched>>,
    changes: watch::Sender<u64>,
    cache: Mutex<CatalogCache>,
}

/// The template caches of every discovered kind, shared by the controllers. Cheap to clone.
#[derive(Clone)]
pub struct TemplateIndex {
    inner: Arc<Inner>,
}

impl Default for TemplateIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl TemplateIndex {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                kinds: RwLock::new(BTreeMap::new()),
                changes: watch::channel(0).0,
                cache: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A counter bumped on every template or kind change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Bumps the change counter.
    pub(crate) fn notify(&self) {
        self.inner.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// The kinds being watched.
    pub fn kinds(&self) -> Vec<TemplateKind> {
        let kinds = self.inner.kinds.read().unwrap_or_else(|e| e.into_inner());
        kinds.values().map(|w| w.kind.clone()).collect()
    }

    /// Adds (or replaces) the cache of a kind: tests feed stores of their own.
    #[cfg(test)]
    pub(crate) fn insert_store(&self, kind: TemplateKind, store: Store<DynamicObject>) {
        self.insert(kind, store, None);
    }

    fn insert(
        &self,
        kind: TemplateKind,
        store: Store<DynamicObject>,
        task: Option<tokio::task::AbortHandle>,
    ) {
        {
            let mut kinds = self.inner.kinds.write().unwrap_or_else(|e| e.into_inner());
            kinds.insert(kind.key(), Watched { kind, store, task });
        }
        self.notify();
    }

    /// Drops the cache of a kind (and stops its watch).
    pub fn remove(&self, kind: &TemplateKind) {
        let removed = {
            let mut kinds = self.inner.kinds.write().unwrap_or_else(|e| e.into_inner());
            kinds.remove(&kind.key())
        };
        drop(removed);
        self.notify();
    }

    /// Waits until every current cache has its initial list.
    pub async fn ready(&self) {
        let stores: Vec<Store<DynamicObject>> = {
            let kinds = self.inner.kinds.read().unwrap_or_else(|e| e.into_inner());
            kinds.values().map(|w| w.store.clone()).collect()
        };
        for s in stores {
            let _ = s.wait_until_ready().await;
        }
    }

    /// One cached template: `group`/`kind` `namespace`/`name` (any served version).
    pub fn get(
        &self,
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        let kinds = self.inner.kinds.read().unwrap_or_else(|e| e.into_inner());
        let w = kinds.get(&(group.to_string(), kind.to_string()))?;
        w.store.get(
            &kube::runtime::reflector::ObjectRef::new_with(name, w.kind.api_resource())
                .within(namespace),
        )
    }

    /// The templates a NodeClass selects, from the caches (sorted by namespace/name/kind).
    pub fn templates(&self, selection: &Selection) -> Vec<DynamicObject> {
        let kinds = self.inner.kinds.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<DynamicObject> = kinds
            .values()
            .flat_map(|w| {
                let ar = w.kind.api_resource();
                w.store.state().into_iter().map(move |o| {
                    let mut o = (*o).clone();
                    // Watch events of dynamic objects carry apiVersion/kind; make sure.
                    if o.types.is_none() {
                        o.types = Some(kube::api::TypeMeta {
                            api_version: ar.api_version.clone(),
                            kind: ar.kind.clone(),
                        });
                    }
                    o
                })
            })
            .filter(|o| selection.matches(o))
            .collect();
        out.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        out
    }

    /// The catalog of a NodeClass, from the caches.
    pub fn catalog(
        &self,
        selection: &Selection,
        settings: &CatalogSettings,
    ) -> Result<Catalog, SettingsError> {
        build_catalog(&self.templates(selection), settings)
    }

    /// Like [`Self::catalog`], but computed at most once per template change for the same
    /// selection and settings (the scheduler and the status controller ask often).
    pub fn catalog_cached(
        &self,
        selection: &Selection,
        settings: &CatalogSettings,
    ) -> Arc<Result<Arc<Catalog>, SettingsError>> {
        // Read the counter before the stores: a change racing with the build makes the entry
        // look older than its data, never newer, so it is rebuilt rather than served stale.
        let generation = *self.inner.changes.borrow();
        {
            let cache = self.inner.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, _, _, c)) = cache
                .iter()
                .find(|(sel, set, g, _)| *g == generation && sel == selection && set == settings)
            {
                return c.clone();
            }
        }
        let built = Arc::new(self.catalog(selection, settings).map(Arc::new));
        let mut cache = self.inner.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|(sel, set, _, _)| !(sel == selection && set == settings));
        if cache.len() >= CATALOG_CACHE_SIZE {
            cache.remove(0);
        }
        cache.push((
            selection.clone(),
            settings.clone(),
            generation,
            built.clone(),
        ));
        built
    }
}

/// How templates are watched.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Server-side label selector on templates; `None` watches all. Default: the opt-in
    /// label `node.cluster.x-k8s.io/karpenter-member` exists.
    pub template_label_selector: Option<String>,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            template_label_selector: Some(label::KARPENTER_MEMBER.to_string()),
        }
    }
}

fn start_kind(client: &Client, index: &TemplateIndex, kind: TemplateKind, config: &WatchConfig) {
    let ar = kind.api_resource();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let writer: Writer<DynamicObject> = Writer::new(ar);
    let store = writer.as_reader();
    let mut wc = watcher::Config::default();
    if let Some(sel) = &config.template_label_selector {
        wc = wc.labels(sel);
    }
    let notifier = index.clone();
    let name = format!("{}.{}/{}", kind.kind, kind.group, kind.version);
    let task = tokio::spawn(async move {
        let stream = reflector::reflector(writer, watcher::watcher(api, wc).default_backoff());
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => notifier.notify(),
                Err(e) => tracing::warn!(kind = %name, error = %e, "template watch error"),
            }
        }
    });
    index.insert(kind, store, Some(task.abort_handle()));
}

/// Watches CRDs and keeps one template reflector per qualifying kind in `index`. Runs until
/// the CRD watch stream ends (it retries with backoff, so in practice forever).
pub async fn run(client: Client, index: TemplateIndex, config: WatchConfig) {
    let crds: Api<CrdSummary> = Api::all(client.clone());
    let mut discovery = Discovery::default();
    let stream = watcher::watcher(crds, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "CRD watch error");
                continue;
            }
        };
        for change in discovery.on_event(&event) {
            match change {
                KindChange::Start(kind) => {
                    tracing::info!(kind = %kind.kind, version = %kind.version, "watching template kind");
                    start_kind(&client, &index, kind, &config);
                }
                KindChange::Stop(kind) => {
                    tracing::info!(kind = %kind.kind, "no longer watching template kind");
                    index.remove(&kind);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(kind: &str, group: &str, labels: serde_json::Value, versions: &[&str]) -> CrdSummary {
        let plural = format!("{}s", kind.to_lowercase());
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}"), "labels": labels},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "listKind": format!("{kind}List"), "singular": kind.to_lowercase()},
                "versions": versions.iter().map(|v| json!({"name": v, "served": true, "storage": false})).collect::<Vec<_>>(),
            }
        }))
        .expect("crd")
    }

    #[test]
    fn versions() {
        let mut v = vec![
            "v1alpha3", "v1beta2", "v1", "v1beta1", "v2alpha1", "v1alpha4", "foo",
        ];
        v.sort_by_key(|s| std::cmp::Reverse(Version::parse(s).priority()));
        assert_eq!(
            v,
            [
                "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha4", "v1alpha3", "foo"
            ]
        );
    }

    #[test]
    fn qualifying_crds() {
        let aws = crd(
            "AWSMachineTemplate",
            groups::INFRASTRUCTURE,
            json!({"cluster.x-k8s.io/v1beta1": "v1beta1_v1beta2", "cluster.x-k8s.io/v1beta2": "v1beta2"}),
            &["v1beta1", "v1beta2"],
        );
        let k = template_kind_from_crd(&aws).expect("qualifies");
        assert_eq!(k.version, "v1beta2");
        assert_eq!(k.plural, "awsmachinetemplates");
        assert_eq!(
            k.api_resource().api_version,
            "infrastructure.cluster.x-k8s.io/v1beta2"
        );
        // Fallback label, highest served version in it.
        let azure = crd(
            "AzureMachineTemplate",
            groups::INFRASTRUCTURE,
            json!({"cluster.x-k8s.io/v1beta1": "v1alpha4_v1beta1"}),
            &["v1alpha4", "v1beta1"],
        );
        assert_eq!(
            template_kind_from_crd(&azure).map(|k| k.version).as_deref(),
            Some("v1beta1")
        );
        // No contract label (raw config/crd/bases YAML), wrong group, wrong kind, unserved.
        assert!(
            template_kind_from_crd(&crd(
                "DockerMachineTemplate",
                groups::INFRASTRUCTURE,
                json!({}),
                &["v1beta2"]
            ))
            .is_none()
        );
        assert!(
            template_kind_from_crd(&crd(
                "KubeadmConfigTemplate",
                "bootstrap.cluster.x-k8s.io",
                json!({"cluster.x-k8s.io/v1beta2": "v1beta2"}),
                &["v1beta2"]
            ))
            .is_none()
        );
        assert!(
            template_kind_from_crd(&crd(
                "DockerMachine",
                groups::INFRASTRUCTURE,
                json!({"cluster.x-k8s.io/v1beta2": "v1beta2"}),
                &["v1beta2"]
            ))
            .is_none()
        );
        assert!(
            template_kind_from_crd(&crd(
                "DockerMachineTemplate",
                groups::INFRASTRUCTURE,
                json!({"cluster.x-k8s.io/v1beta2": "v1beta3"}),
                &["v1beta2"]
            ))
            .is_none()
        );
    }

    #[test]
    fn discovery_follows_crd_events() {
        let label = |v: &str| json!({"cluster.x-k8s.io/v1beta2": v});
        let docker = crd(
            "DockerMachineTemplate",
            groups::INFRASTRUCTURE,
            label("v1beta2"),
            &["v1beta1", "v1beta2"],
        );
        let aws = crd(
            "AWSMachineTemplate",
            groups::INFRASTRUCTURE,
            label("v1beta2"),
            &["v1beta2"],
        );
        let other = crd("Widget", "example.com", json!({}), &["v1"]);
        let mut d = Discovery::default();
        assert!(d.on_event(&Event::Init).is_empty());
        assert!(d.on_event(&Event::InitApply(docker.clone())).is_empty());
        assert!(d.on_event(&Event::InitApply(other.clone())).is_empty());
        let started = d.on_event(&Event::InitDone);
        assert!(
            matches!(started.as_slice(), [KindChange::Start(k)] if k.kind == "DockerMachineTemplate")
        );
        // A provider installed after start-up.
        let c = d.on_event(&Event::Apply(aws.clone()));
        assert!(matches!(c.as_slice(), [KindChange::Start(k)] if k.kind == "AWSMachineTemplate"));
        // Unchanged re-apply: nothing.
        assert!(d.on_event(&Event::Apply(aws.clone())).is_empty());
        // Contract bump to a version the CRD serves: restart at the new version.
        let docker_v1beta1 = crd(
            "DockerMachineTemplate",
            groups::INFRASTRUCTURE,
            label("v1beta1"),
            &["v1beta1", "v1beta2"],
        );
        let c = d.on_event(&Event::Apply(docker_v1beta1));
        assert!(
            matches!(c.as_slice(), [KindChange::Stop(o), KindChange::Start(n)] if o.version == "v1beta2" && n.version == "v1beta1")
        );
        // Removal.
        let c = d.on_event(&Event::Delete(aws));
        assert!(matches!(c.as_slice(), [KindChange::Stop(k)] if k.kind == "AWSMachineTemplate"));
        // Re-list without Docker: stopped.
        d.on_event(&Event::Init);
        let c = d.on_event(&Event::InitDone);
        assert!(matches!(c.as_slice(), [KindChange::Stop(k)] if k.kind == "DockerMachineTemplate"));
        assert!(d.kinds().is_empty());
    }

    #[test]
    fn index_serves_catalogs_from_stores() {
        let kind = TemplateKind {
            group: groups::INFRASTRUCTURE.into(),
            version: "v1beta2".into(),
            kind: "DockerMachineTemplate".into(),
            plural: "dockermachinetemplates".into(),
        };
        let mut writer: Writer<DynamicObject> = Writer::new(kind.api_resource());
        let index = TemplateIndex::new();
        let mut changes = index.subscribe();
        index.insert_store(kind.clone(), writer.as_reader());
        assert!(changes.has_changed().unwrap_or(false));
        changes.mark_unchanged();
        let tpl = |name: &str, ns: &str, cpu: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "DockerMachineTemplate",
                "metadata": {"name": name, "namespace": ns,
                    "labels": {"node.cluster.x-k8s.io/karpenter-member": "true"},
                    "annotations": {
                        "capacity.cluster-autoscaler.kubernetes.io/cpu": cpu,
                        "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"}},
            }))
            .expect("template")
        };
        writer.apply_watcher_event(&Event::Apply(tpl("small", "a", "2")));
        writer.apply_watcher_event(&Event::Apply(tpl("other-ns", "b", "2")));
        let sel = Selection {
            namespace: Some("a".into()),
            ..Default::default()
        };
        let cat = index
            .catalog(&sel, &CatalogSettings::default())
            .expect("catalog");
        assert_eq!(cat.instance_types.len(), 1);
        assert_eq!(cat.instance_types[0].capacity.cpu_milli(), 2000);
        let cached = index.catalog_cached(&sel, &CatalogSettings::default());
        assert!(Arc::ptr_eq(
            &cached,
            &index.catalog_cached(&sel, &CatalogSettings::default())
        ));
        // A template edit is visible on the next read (the reflector task notifies).
        writer.apply_watcher_event(&Event::Apply(tpl("small", "a", "4")));
        index.notify();
        let fresh = index.catalog_cached(&sel, &CatalogSettings::default());
        assert!(!Arc::ptr_eq(&cached, &fresh));
        assert_eq!(
            fresh.as_ref().as_ref().expect("catalog").instance_types[0]
                .capacity
                .cpu_milli(),
            4000
        );
        let cat = index
            .catalog(&sel, &CatalogSettings::default())
            .expect("catalog");
        assert_eq!(cat.instance_types[0].capacity.cpu_milli(), 4000);
        // A broken edit excludes it, naming the field.
        writer.apply_watcher_event(&Event::Apply(tpl("small", "a", "four")));
        let cat = index
            .catalog(&sel, &CatalogSettings::default())
            .expect("catalog");
        assert!(cat.instance_types.is_empty());
        assert_eq!(cat.excluded[0].error.reason(), "InvalidQuantity");
        assert_eq!(index.kinds(), vec![kind.clone()]);
        index.remove(&kind);
        assert!(changes.has_changed().unwrap_or(false));
        assert!(index.templates(&Selection::default()).is_empty());
    }
}
