//! One shared cache per kind: a single watch feeds a reflector store that every control loop
//! reads, and a broadcast of the objects it touched that any loop can subscribe to as a
//! trigger. Objects are trimmed before they are stored (`managedFields` and the
//! last-applied annotation never reach memory; pods keep only what scheduling reads), and an
//! optional index maps a field (a Node's providerID) to the objects that carry it, so a lookup
//! is not a scan.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::broadcast;

use crate::tasks::Tasks;

/// How many touched objects a slow subscriber may fall behind before it resyncs.
const BROADCAST_CAPACITY: usize = 4096;

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

    fn apply(&self, event: &watcher::Event<K>) {
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

/// A shared, trimmed cache of one kind.
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    touched: broadcast::Sender<Arc<K>>,
    index: Option<Arc<Index<K>>>,
    /// True once a list has completed and no re-list is in progress.
    synced: Arc<AtomicBool>,
    /// Odd while the store is being written, bumped twice per event (see [`Cache::generation`]).
    generation: Arc<AtomicU64>,
}

impl<K> Clone for Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Cache {
            store: self.store.clone(),
            touched: self.touched.clone(),
            index: self.index.clone(),
            synced: self.synced.clone(),
            generation: self.generation.clone(),
        }
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Send
        + Sync
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + 'static,
{
    /// Starts the watch of `api` (filtered by `config`) on a task owned by `tasks`. `trim`
    /// runs on every object before it is stored; `index` maps objects by a derived key.
    pub fn start(
        tasks: &mut Tasks,
        api: Api<K>,
        config: watcher::Config,
        trim: fn(&mut K),
        index: Option<KeyFn<K>>,
    ) -> Cache<K> {
        let (mut cache, mut feed) = Self::detached();
        let index = index.map(|key| Arc::new(Index::new(key)));
        cache.index = index.clone();
        feed.index = index;
        let events = watcher(api, config).default_backoff().modify(move |obj| {
            strip_metadata(obj);
            trim(obj);
        });
        tasks.spawn(async move {
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => feed.apply(event),
                    Err(e) => {
                        tracing::debug!(error = %e, kind = %K::kind(&()), "watch error (retrying)");
                    }
                }
            }
        });
        cache
    }

    /// The store every loop reads.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Objects whose `key` (see [`Cache::start`]'s index) is `value`, from the store.
    pub fn by_index(&self, value: &str) -> Vec<Arc<K>> {
        let Some(index) = &self.index else {
            return Vec::new();
        };
        index
            .get(value)
            .into_iter()
            .filter_map(|id| {
                let r = match id.split_once('/') {
                    Some((ns, name)) => ObjectRef::new(name).within(ns),
                    None => ObjectRef::new(&id),
                };
                self.store.get(&r)
            })
            .collect()
    }

    /// Every object the watch touches from now on (applied or deleted). A subscriber that
    /// falls behind gets the whole store again instead of the events it missed.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let rx = self.touched.subscribe();
        let store = self.store.clone();
        futures::stream::unfold((rx, store), |(mut rx, store)| async move {
            loop {
                match rx.recv().await {
                    Ok(obj) => return Some((vec![obj], (rx, store))),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::debug!(missed = n, kind = %K::kind(&()), "trigger lagged; resyncing");
                        let all = store.state();
                        if !all.is_empty() {
                            return Some((all, (rx, store)));
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .flat_map(futures::stream::iter)
    }

    /// How many times the store has been written, twice per watch event: odd while an
    /// event is being applied, even when the store is at rest. Equal even values read
    /// before and after reading the store mean nothing changed in between (a seqlock):
    /// what the cluster state (`state`) keys its joined view by.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A cache fed by hand instead of by a watch (tests, offline tools): the cache, and
    /// the [`Feed`] that applies watch events to it as the watch task would.
    pub fn detached() -> (Cache<K>, Feed<K>) {
        let writer: Writer<K> = Writer::default();
        let store = writer.as_reader();
        let (touched, _) = broadcast::channel(BROADCAST_CAPACITY);
        let synced = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(AtomicU64::new(0));
        let cache = Cache {
            store: store.clone(),
            touched: touched.clone(),
            index: None,
            synced: synced.clone(),
            generation: generation.clone(),
        };
        let feed = Feed {
            writer,
            store,
            touched,
            index: None,
            synced,
            generation,
        };
        (cache, feed)
    }

    /// Whether the store holds a complete list (false before the first list completes and
    /// while a re-list, after the watch lost its place, is in progress).
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Waits for the first complete list.
    pub async fn ready(&self) {
        let _ = self.store.wait_until_ready().await;
    }
}

/// The writing end of a [`Cache`]: applies watch events to the store and the index,
/// bumps the generation around each write and tells the subscribers.
pub struct Feed<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    store: Store<K>,
    touched: broadcast::Sender<Arc<K>>,
    index: Option<Arc<Index<K>>>,
    synced: Arc<AtomicBool>,
    generation: Arc<AtomicU64>,
}

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// Applies one watch event.
    pub fn apply(&mut self, event: watcher::Event<K>) {
        match &event {
            watcher::Event::Init => self.synced.store(false, Ordering::Release),
            watcher::Event::InitDone => self.synced.store(true, Ordering::Release),
            _ => {}
        }
        // Odd while writing: a reader that saw an even value before and after reading the
        // store read it at rest.
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.writer.apply_watcher_event(&event);
        if let Some(index) = &self.index {
            index.apply(&event);
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        // Subscribers are triggers: no receiver (a standby replica) is fine.
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                let current = self.store.get(&ObjectRef::from_obj(&obj));
                let _ = self.touched.send(current.unwrap_or_else(|| Arc::new(obj)));
            }
            watcher::Event::Delete(obj) => {
                let _ = self.touched.send(Arc::new(obj));
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

/// Every cache one engagement reads: one watch per kind, shared by all its loops. The
/// workload-side caches and the Machines (fenced by the engagement's cluster id) are the
/// engagement's own; the Clusters cache is the management side's, shared by every
/// engagement of a hub (see [`Caches::start_engaged`]).
pub struct Caches {
    pub nodes: Cache<k8s_openapi::api::core::v1::Node>,
    pub pods: Cache<k8s_openapi::api::core::v1::Pod>,
    pub daemonsets: Cache<k8s_openapi::api::apps::v1::DaemonSet>,
    pub pdbs: Cache<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    pub nodeclaims: Cache<api::NodeClaim>,
    pub nodepools: Cache<api::NodePool>,
    pub nodeclasses: Cache<api::ClusterAPINodeClass>,
    /// Only Machines carrying our NodeClaim label and our cluster id (see `fence`).
    pub machines: Cache<api::Machine>,
    pub clusters: Cache<api::Cluster>,
}

impl Caches {
    /// Starts every watch on tasks owned by `tasks`; Machines are those of `cluster_id`.
    pub fn start(
        tasks: &mut Tasks,
        workload: &kube::Client,
        management: &kube::Client,
        cluster_id: &str,
    ) -> Caches {
        let clusters = Cache::start(
            tasks,
            Api::all(management.clone()),
            watcher::Config::default(),
            keep,
            None,
        );
        Self::start_engaged(tasks, workload, management, cluster_id, clusters)
    }

    /// Starts the watches of one engagement over the management side's shared `clusters`
    /// cache: the workload cluster's kinds, and the Machines fenced by `cluster_id`.
    pub fn start_engaged(
        tasks: &mut Tasks,
        workload: &kube::Client,
        management: &kube::Client,
        cluster_id: &str,
        clusters: Cache<api::Cluster>,
    ) -> Caches {
        let all = watcher::Config::default;
        Caches {
            nodes: Cache::start(
                tasks,
                Api::all(workload.clone()),
                all(),
                keep,
                Some(node_provider_id),
            ),
            pods: Cache::start(tasks, Api::all(workload.clone()), all(), trim_pod, None),
            daemonsets: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            pdbs: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            nodeclaims: Cache::start(
                tasks,
                Api::all(workload.clone()),
                all(),
                keep,
                Some(claim_provider_id),
            ),
            nodepools: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            nodeclasses: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            machines: Cache::start(
                tasks,
                Api::all(management.clone()),
                all().labels(&crate::fence::selector(cluster_id)),
                keep,
                None,
            ),
            clusters,
        }
    }

    /// Waits until every cache has its first full list.
    pub async fn ready(&self) {
        self.nodes.ready().await;
        self.pods.ready().await;
        self.daemonsets.ready().await;
        self.pdbs.ready().await;
        self.nodeclaims.ready().await;
        self.nodepools.ready().await;
        self.nodeclasses.ready().await;
        self.machines.ready().await;
        self.clusters.ready().await;
    }
}

/// What no loop reads and every object carries: server-side apply bookkeeping and the
/// `kubectl apply` copy of the object.
pub fn strip_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Nothing to trim beyond the metadata.
pub fn keep<K>(_: &mut K) {}

/// A pod as scheduling, disruption and the metrics read it: the containers' resources and
/// ports, placement rules, ownership and phase; images, commands, environment, volumes,
/// probes and container statuses are dropped.
pub fn trim_pod(pod: &mut k8s_openapi::api::core::v1::Pod) {
    use k8s_openapi::api::core::v1::Container;
    let slim = |c: &mut Container| {
        *c = Container {
            name: std::mem::take(&mut c.name),
            resources: c.resources.take(),
            ports: c.ports.take(),
            restart_policy: c.restart_policy.take(),
            ..Container::default()
        };
    };
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.iter_mut().for_each(slim);
        if let Some(init) = spec.init_containers.as_mut() {
            init.iter_mut().for_each(slim);
        }
        spec.ephemeral_containers = None;
        spec.volumes = None;
        spec.image_pull_secrets = None;
        spec.security_context = None;
        spec.host_aliases = None;
        spec.dns_config = None;
        spec.readiness_gates = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
        status.pod_ips = None;
        status.host_ips = None;
        status.resource_claim_statuses = None;
        status.message = None;
    }
}

/// The NodeClaim index key: `status.providerID`.
pub fn claim_provider_id(claim: &api::NodeClaim) -> Option<String> {
    claim.status.as_ref()?.provider_id.clone()
}

/// A Node's `spec.providerID` (the registration index).
pub fn node_provider_id(node: &k8s_openapi::api::core::v1::Node) -> Option<String> {
    node.spec
        .as_ref()?
        .provider_id
        .clone()
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeSpec, Pod};
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

    #[test]
    fn pods_keep_what_scheduling_reads() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "d",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "nodeSelector": {"zone": "a"}, "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": false, "restartCount": 0}]}
        }))
        .expect("fixture");
        strip_metadata(&mut pod);
        trim_pod(&mut pod);
        let v = serde_json::to_value(&pod).expect("json");
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(
            v["metadata"]["annotations"],
            serde_json::json!({"keep": "me"})
        );
        let c = &v["spec"]["containers"][0];
        assert_eq!(c["resources"]["requests"]["cpu"], "1");
        assert_eq!(c["ports"][0]["hostPort"], 8080);
        assert!(c.get("image").is_none() && c.get("env").is_none());
        assert_eq!(v["spec"]["nodeSelector"]["zone"], "a");
        assert!(v["spec"].get("volumes").is_none());
        assert!(v["status"].get("containerStatuses").is_none());
        assert_eq!(v["status"]["phase"], "Pending");
    }
}
