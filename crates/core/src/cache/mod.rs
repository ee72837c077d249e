//! One shared cache per kind: a single watch feeds a reflector store that every control loop
//! reads, and a broadcast of the objects it touched that any loop can subscribe to as a
//! trigger. Objects are trimmed before they are stored (`managedFields` and the
//! last-applied annotation never reach memory; pods keep only what scheduling reads), and an
//! optional index maps a field (a Node's providerID) to the objects that carry it, so a lookup
//! is not a scan.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::broadcast;

pub use crate::index::{Index, KeyFn};
use crate::tasks::Tasks;
pub use crate::trim::{keep, strip_metadata};
pub(crate) use crate::trim::{trim_node, trim_pod, trim_pv, trim_pvc};

/// How many touched objects a slow subscriber may fall behind before it resyncs (it then
/// gets every object of the store once). Each slot is allocated and written up front, for
/// every cache: at 4096 for all ten caches the rings held 1.4 MB of the operator's 16 MB
/// heap at 1000 pods (heaptrack, e2e bench). Pods keep 4096, for bursts of thousands of pod
/// events (the 5000-pod bench ran the same with 1024); the other kinds change a few times
/// per NodeClaim.
const BROADCAST_CAPACITY: usize = 1024;
const POD_BROADCAST_CAPACITY: usize = 4096;

/// How long a lazy watch ([`Cache::start_lazily`]) runs on after it is no longer wanted
/// (the last NodePool and NodeClaim gone): a NodePool re-created soon after costs no re-list.
pub(crate) const IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// When a watch started lazily ([`Cache::start_lazily`]) is wanted, and whether it has listed since
/// it was started.
pub(crate) struct Gate {
    pub(crate) listed: AtomicBool,
    pub(crate) wanted: Box<dyn Fn() -> bool + Send + Sync>,
}

impl Gate {
    /// Wanted, and not listed yet.
    fn pending(&self) -> bool {
        !self.listed.load(Ordering::Acquire) && (self.wanted)()
    }
}

/// What starts a lazy watch ([`Cache::start_gated`]): a new gate and its trigger.
pub(crate) type Lazily<'a> = dyn Fn() -> (Arc<Gate>, futures::stream::BoxStream<'static, ()>) + 'a;

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
    /// A watch started only while wanted ([`Cache::start_lazily`]).
    gate: Option<Arc<Gate>>,
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
            gate: self.gate.clone(),
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
        let events = Self::events(api, config, trim);
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

    /// Starts `api`'s watch only while `gate` wants it, re-checked on every `trigger` (and
    /// every second):
    /// meanwhile the store is an empty, complete list. A watch that is no longer wanted is
    /// stopped after [`IDLE_AFTER`] and its store emptied. After each first list, every
    /// object is sent to the subscribers again (what they read on the list's own triggers
    /// was the previous store).
    pub(crate) fn start_lazily(
        tasks: &mut Tasks,
        api: Api<K>,
        trim: fn(&mut K),
        gate: &Arc<Gate>,
        trigger: impl Stream<Item = ()> + Send + 'static,
    ) -> Cache<K> {
        let (mut cache, mut feed) = Self::detached();
        cache.gate = Some(gate.clone());
        let gate = gate.clone();
        tasks.spawn(async move {
            futures::pin_mut!(trigger);
            loop {
                // Idle: an empty, complete list.
                feed.apply(watcher::Event::Init);
                feed.apply(watcher::Event::InitDone);
                // Re-checked every second too: a first list's objects are sent to the
                // subscribers before the store holds them.
                while !(gate.wanted)() {
                    tokio::select! {
                        t = trigger.next() => if t.is_none() { return; },
                        () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                    }
                }
                tracing::debug!(kind = %K::kind(&()), "starting a lazy watch");
                let events = Self::events(api.clone(), watcher::Config::default(), trim);
                if !feed.follow(events, &gate, &mut trigger).await {
                    return;
                }
                tracing::debug!(kind = %K::kind(&()), "stopping an unwanted lazy watch");
                gate.listed.store(false, Ordering::Release);
            }
        });
        cache
    }

    /// [`Cache::start_lazily`] on the gate and trigger `lazily` makes, else [`Cache::start`]
    /// (objects kept whole, no index).
    pub(crate) fn start_gated(
        tasks: &mut Tasks,
        api: Api<K>,
        lazily: Option<&Lazily<'_>>,
    ) -> Cache<K> {
        match lazily {
            Some(lazy) => {
                let (gate, trigger) = lazy();
                Cache::start_lazily(tasks, api, keep, &gate, trigger)
            }
            None => Cache::start(tasks, api, watcher::Config::default(), keep, None),
        }
    }

    /// The watch of `api`, objects trimmed by `trim` (and [`strip_metadata`]).
    pub(crate) fn events(
        api: Api<K>,
        config: watcher::Config,
        trim: fn(&mut K),
    ) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
        watcher(api, config).default_backoff().modify(move |obj| {
            strip_metadata(obj);
            trim(obj);
        })
    }

    /// The store every loop reads.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Objects whose `key` (see [`Cache::start`]'s index) is `value`, from the store.
    pub(crate) fn by_index(&self, value: &str) -> Vec<Arc<K>> {
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
        let capacity = if K::kind(&()) == "Pod" {
            POD_BROADCAST_CAPACITY
        } else {
            BROADCAST_CAPACITY
        };
        let (touched, _) = broadcast::channel(capacity);
        let synced = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(AtomicU64::new(0));
        let cache = Cache {
            store: store.clone(),
            touched: touched.clone(),
            index: None,
            synced: synced.clone(),
            generation: generation.clone(),
            gate: None,
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

    /// A cache that is listed and stays empty: a kind this process does not watch (another
    /// provider's objects).
    pub fn empty() -> Cache<K> {
        let (cache, mut feed) = Cache::detached();
        feed.apply(watcher::Event::Init);
        feed.apply(watcher::Event::InitDone);
        cache
    }

    /// Whether the store holds a complete list (false before the first list completes,
    /// while a re-list, after the watch lost its place, is in progress, and while a lazy
    /// watch is wanted but has not listed yet: [`Cache::pending`]).
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire) && !self.pending()
    }

    /// True while a lazy watch ([`Cache::start_lazily`]) is wanted but its first list has not
    /// completed: the store is the empty one of an idle cluster, not the cluster's objects.
    /// Never for a watch started at once.
    pub fn pending(&self) -> bool {
        self.gate.as_ref().is_some_and(|g| g.pending())
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

    /// Applies `events` until `gate` has not wanted them for [`IDLE_AFTER`] (true) or a
    /// stream ends (false: the engagement is stopping).
    async fn follow(
        &mut self,
        events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
        gate: &Gate,
        trigger: &mut (impl Stream<Item = ()> + Unpin),
    ) -> bool {
        futures::pin_mut!(events);
        let mut unwanted_since: Option<tokio::time::Instant> = None;
        loop {
            let idle = async {
                match unwanted_since {
                    Some(t) => tokio::time::sleep_until(t + IDLE_AFTER).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        let done = matches!(event, watcher::Event::InitDone);
                        self.apply(event);
                        if done && !gate.listed.swap(true, Ordering::AcqRel) {
                            self.touch_all();
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, kind = %K::kind(&()), "watch error (retrying)");
                    }
                    None => return false,
                },
                t = trigger.next() => {
                    if t.is_none() {
                        return false;
                    }
                    unwanted_since = match (gate.wanted)() {
                        true => None,
                        false => unwanted_since.or_else(|| Some(tokio::time::Instant::now())),
                    };
                }
                () = idle => {
                    if !(gate.wanted)() {
                        return true;
                    }
                    unwanted_since = None;
                }
            }
        }
    }

    /// Tells the subscribers about every object in the store (after a lazy watch's first
    /// list: what they read on the earlier triggers was the empty store).
    pub(crate) fn touch_all(&self) {
        for obj in self.store.state() {
            let _ = self.touched.send(obj);
        }
    }
}

mod caches;
pub use caches::{Caches, DraCaches};
pub(crate) use caches::{claim_provider_id, node_provider_id};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn a_lazy_cache_is_pending_while_wanted_and_not_listed() {
        let wanted = Arc::new(AtomicBool::new(false));
        let w = wanted.clone();
        let gate = Arc::new(Gate {
            listed: AtomicBool::new(false),
            wanted: Box::new(move || w.load(Ordering::SeqCst)),
        });
        let (mut cache, mut feed) = Cache::<Pod>::detached();
        cache.gate = Some(gate.clone());
        // Idle: an empty, complete list.
        feed.apply(watcher::Event::Init);
        feed.apply(watcher::Event::InitDone);
        assert!(!cache.pending() && cache.is_synced(), "idle, not wanted");
        wanted.store(true, Ordering::SeqCst);
        assert!(
            cache.pending() && !cache.is_synced(),
            "wanted: the empty store is not the cluster's"
        );
        gate.listed.store(true, Ordering::SeqCst);
        assert!(!cache.pending() && cache.is_synced(), "listed");
    }
}
