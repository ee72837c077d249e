//! Events as client-go's recorder (`k8s.io/client-go/tools/events`) writes them: an event
//! identical to one published in the last [`FINISH`] (same object, type, reason, action,
//! note, related object, reporter) is no new Event object. The second occurrence turns the
//! first object into a series (`series.count`, `series.lastObservedTime`, one patch); later
//! ones only count, and the count is written when the series is older than [`REFRESH`] or
//! ends (no repeat for [`FINISH`]). A pod nominated to the same NodeClaim batch after batch
//! is one `Nominated` Event with a count, at most two writes per [`REFRESH`].
//!
//! Nominations are the one event written per pod in a scale-out, and are aggregated per pod
//! as Karpenter does: a pod gets at most one new `Nominated` Event per [`NOMINATION_WINDOW`]
//! (a nomination to another NodeClaim within it is not written; one to the same NodeClaim
//! counts into the series as above), and new `Nominated` Events are rate limited as
//! Karpenter's `PodNominationRateLimiter` does (5 per second), past a burst of
//! [`NOMINATION_BURST`] (a batch of that many pods is nominated in full). One over the rate
//! is not written but starts the pod's window, as Karpenter's recorder dedupes before it rate
//! limits: the pod's `Nominated` Event is the first of the window or none. A burst of a thousand pods is a few hundred Events, as with
//! Karpenter, instead of one or more per pod.
//!
//! kube-runtime's `Recorder` (kube 5) also makes series, but keys them without the note (a
//! pod nominated to another NodeClaim would patch the old "should schedule on" message) and
//! writes on every repeat.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{Event, EventType, Reporter};

/// A series that saw no repeat for this long is finished (client-go: 6 minutes).
pub(crate) const FINISH: Duration = Duration::from_secs(6 * 60);
/// A running series' count is written at most this often (client-go: 30 minutes).
pub(crate) const REFRESH: Duration = Duration::from_secs(30 * 60);
/// The most series remembered (client-go's LRU: 4096): past it, the least recently seen
/// quarter is forgotten (a later repeat of one starts a new Event), so a burst of thousands
/// of pods does not hold memory for [`FINISH`].
pub(crate) const MAX_SERIES: usize = 4096;
/// New `Nominated` Events per second past the burst (Karpenter: 5).
pub const NOMINATION_QPS: NonZeroU32 = NonZeroU32::new(5).expect("nonzero");
/// New `Nominated` Events written at once before [`NOMINATION_QPS`] applies (Karpenter: 10;
/// larger here so that a batch of up to this many pods loses none).
pub const NOMINATION_BURST: NonZeroU32 = NonZeroU32::new(50).expect("nonzero");

/// A pod nominated less than this ago gets no new `Nominated` Event (Karpenter's dedupe
/// timeout for it: 2 minutes).
pub(crate) const NOMINATION_WINDOW: Duration = Duration::from_secs(2 * 60);

type Limiter = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    crate::ratelimit::TokioClock,
    governor::middleware::NoOpMiddleware<std::time::Instant>,
>;

/// What makes two events the same (client-go's `getKey`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: ObjectKey,
    related: Option<ObjectKey>,
    type_: &'static str,
    reason: String,
    action: String,
    note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl From<&ObjectReference> for ObjectKey {
    fn from(r: &ObjectReference) -> Self {
        ObjectKey {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }
}

/// The Event object written for a key, and what of its series is not written yet.
#[derive(Debug, Clone)]
struct Entry {
    namespace: String,
    name: String,
    /// Occurrences (1 before it is a series).
    count: i32,
    /// `count` as last written.
    written: i32,
    /// Set once the Event object exists (a repeat before that only counts).
    created: bool,
    last_observed: Timestamp,
    last_seen: Instant,
    last_write: Instant,
}

/// What one `publish` writes.
enum Write {
    Create(Box<K8sEvent>),
    Series(Entry),
    Nothing,
}

/// Publishes events, aggregating repeats into series. Clones share one cache.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    cache: Arc<Mutex<HashMap<Key, Entry>>>,
    /// New `Nominated` Events (see the module doc).
    nominations: Arc<Limiter>,
    /// When each pod's last `Nominated` Event was created (see the module doc).
    nominated: Arc<Mutex<HashMap<ObjectKey, tokio::time::Instant>>>,
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            cache: Arc::default(),
            nominations: Arc::new(governor::RateLimiter::direct_with_clock(
                governor::Quota::per_second(NOMINATION_QPS).allow_burst(NOMINATION_BURST),
                crate::ratelimit::TokioClock,
            )),
            nominated: Arc::default(),
        }
    }

    fn key(ev: &Event, regarding: &ObjectReference) -> Key {
        Key {
            regarding: regarding.into(),
            related: ev.secondary.as_ref().map(Into::into),
            type_: type_name(ev.type_),
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            note: ev.note.clone(),
        }
    }

    fn event(&self, ev: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            note: ev.note.clone(),
            type_: Some(type_name(ev.type_).into()),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            metadata: ObjectMeta {
                namespace: Some(namespace_of(regarding)),
                name: Some(format!(
                    "{}.{:x}",
                    regarding
                        .name
                        .as_deref()
                        .unwrap_or(&self.reporter.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            ..K8sEvent::default()
        }
    }

    /// Decides what to write for one occurrence, and drops finished series (returned, to
    /// write their final count).
    fn observe(&self, ev: &Event, regarding: &ObjectReference) -> (Write, Vec<Entry>) {
        let (now, instant) = (Timestamp::now(), Instant::now());
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let mut finished = Vec::new();
        // Over the bound: keep the most recently seen three quarters.
        let cutoff = (cache.len() >= MAX_SERIES).then(|| {
            let mut seen: Vec<Instant> = cache.values().map(|e| e.last_seen).collect();
            seen.sort_unstable();
            seen[seen.len() - MAX_SERIES * 3 / 4]
        });
        cache.retain(|_, e| {
            let live = instant.duration_since(e.last_seen) < FINISH
                && cutoff.is_none_or(|c| e.last_seen >= c);
            if !live && e.created && e.count > e.written {
                finished.push(e.clone());
            }
            live
        });
        if cache.capacity() > 4 * cache.len().max(256) {
            cache.shrink_to_fit();
        }
        let key = Self::key(ev, regarding);
        let write = match cache.get_mut(&key) {
            Some(e) => {
                e.count += 1;
                e.last_observed = now;
                e.last_seen = instant;
                // The second occurrence makes the series; then the count is refreshed.
                let due = e.written < 2 || instant.duration_since(e.last_write) >= REFRESH;
                if e.created && due {
                    e.written = e.count;
                    e.last_write = instant;
                    Write::Series(e.clone())
                } else {
                    Write::Nothing
                }
            }
            None if ev.reason == api::consts::events::NOMINATED
                && !self.nomination_allowed(regarding) =>
            {
                Write::Nothing
            }
            None => {
                let event = self.event(ev, regarding, now);
                cache.insert(
                    key,
                    Entry {
                        namespace: namespace_of(regarding),
                        name: event.metadata.name.clone().unwrap_or_default(),
                        count: 1,
                        written: 1,
                        created: false,
                        last_observed: now,
                        last_seen: instant,
                        last_write: instant,
                    },
                );
                Write::Create(Box::new(event))
            }
        };
        (write, finished)
    }

    /// Whether a new `Nominated` Event about `pod` may be written now: none in the last
    /// [`NOMINATION_WINDOW`] (then the window starts), and the rate allows it. As Karpenter's
    /// recorder (dedupe before the rate limiter), a nomination over the rate starts the window
    /// too: the pod's next nominations in it are not written either.
    fn nomination_allowed(&self, pod: &ObjectReference) -> bool {
        let now = tokio::time::Instant::now();
        let mut nominated = self.nominated.lock().unwrap_or_else(|p| p.into_inner());
        let key = ObjectKey::from(pod);
        if nominated
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < NOMINATION_WINDOW)
        {
            return false;
        }
        if nominated.len() >= MAX_SERIES {
            nominated.retain(|_, at| now.duration_since(*at) < NOMINATION_WINDOW);
        }
        if nominated.len() < MAX_SERIES {
            nominated.insert(key, now);
        }
        if self.nominations.check().is_err() {
            tracing::debug!(
                pod = pod.name.as_deref().unwrap_or_default(),
                "nomination over the event rate; not written"
            );
            return false;
        }
        true
    }

    fn mark_created(&self, ev: &Event, regarding: &ObjectReference, ok: bool) {
        let key = Self::key(ev, regarding);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            if let Some(e) = cache.get_mut(&key) {
                e.created = true;
            }
        } else {
            // Not written: the next occurrence tries again.
            cache.remove(&key);
        }
    }

    async fn patch_series(&self, e: &Entry) -> Result<(), kube::Error> {
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &e.namespace);
        let series = EventSeries {
            count: e.count,
            last_observed_time: MicroTime(e.last_observed),
        };
        let patch = serde_json::json!({ "series": series });
        api.patch(&e.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    /// Records one occurrence of `ev` about `regarding` without waiting for the write (as
    /// client-go's recorder does): what to write is decided now, in order; the write runs in
    /// the background, and a failed one is logged. A loop that reports what it does (a pod
    /// nominated, a Node registered) is never slowed down by the API server's Event writes.
    pub fn record(&self, ev: Event, regarding: ObjectReference) {
        let (write, finished) = self.observe(&ev, &regarding);
        if matches!(write, Write::Nothing) && finished.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.write(&ev, &regarding, write, finished).await {
                tracing::warn!(object = regarding.name.as_deref().unwrap_or_default(),
                    reason = %ev.reason, error = %e, "publishing event failed");
            }
        });
    }

    /// Publishes one occurrence of `ev` about `regarding` (see the module doc for when that
    /// writes), waiting for the write.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let (write, finished) = self.observe(ev, regarding);
        self.write(ev, regarding, write, finished).await
    }

    async fn write(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        write: Write,
        finished: Vec<Entry>,
    ) -> Result<(), kube::Error> {
        for e in &finished {
            if let Err(err) = self.patch_series(e).await {
                tracing::debug!(event = %e.name, error = %err, "finishing event series failed");
            }
        }
        match write {
            Write::Create(event) => {
                let api: Api<K8sEvent> =
                    Api::namespaced(self.client.clone(), &namespace_of(regarding));
                let created = api.create(&PostParams::default(), &event).await;
                self.mark_created(ev, regarding, created.is_ok());
                created.map(|_| ())
            }
            Write::Series(e) => match self.patch_series(&e).await {
                // The Event expired on the server (1 h TTL): start over.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.mark_created(ev, regarding, false);
                    Box::pin(self.publish(ev, regarding)).await
                }
                other => other,
            },
            Write::Nothing => Ok(()),
        }
    }
}

/// Events of cluster-scoped objects go to `default`, as client-go does.
fn namespace_of(r: &ObjectReference) -> String {
    r.namespace.clone().unwrap_or_else(|| "default".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;

    /// (method, path) of each request.
    type Log = Arc<Mutex<Vec<(String, String)>>>;

    /// A client whose API server records each request (method, path) and answers with the
    /// request's own body (what create and patch return is not read).
    fn recording_client() -> (Client, Log) {
        let seen: Log = Arc::default();
        let log = seen.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let log = log.clone();
            async move {
                log.lock()
                    .expect("log")
                    .push((req.method().to_string(), req.uri().path().to_string()));
                let event = K8sEvent {
                    metadata: ObjectMeta {
                        name: Some("e".into()),
                        ..ObjectMeta::default()
                    },
                    ..K8sEvent::default()
                };
                let body = serde_json::to_vec(&event).expect("json");
                Ok::<_, std::convert::Infallible>(Response::new(Body::from(body)))
            }
        });
        (Client::new(service, "default"), seen)
    }

    fn pod_ref(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("shop".into()),
            name: Some("web-0".into()),
            uid: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    fn nominated(claim: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: "Nominated".into(),
            note: Some(format!("Pod should schedule on: nodeclaim/{claim}")),
            action: "Nominated".into(),
            secondary: None,
        }
    }

    fn failed() -> Event {
        Event {
            type_: EventType::Warning,
            reason: "FailedScheduling".into(),
            note: Some("Failed to schedule pod, no capacity".into()),
            action: "FailedScheduling".into(),
            secondary: None,
        }
    }

    #[tokio::test]
    async fn the_series_cache_is_bounded() {
        let (client, _) = recording_client();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "karpenter-capi".into(),
                instance: None,
            },
        );
        for i in 0..MAX_SERIES + 10 {
            recorder
                .publish(&failed(), &pod_ref(&format!("u{i}")))
                .await
                .expect("publish");
        }
        let len = recorder.cache.lock().expect("cache").len();
        assert!(
            (MAX_SERIES * 3 / 4..=MAX_SERIES).contains(&len),
            "{len} series remembered"
        );
        // (Not Nominated: those are rate limited.) The newest is still a series: a repeat counts instead of a new Event.
        let last = format!("u{}", MAX_SERIES + 9);
        let key = Recorder::key(&failed(), &pod_ref(&last));
        assert!(recorder.cache.lock().expect("cache").contains_key(&key));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_renominated_to_the_same_nodeclaim_is_one_event_with_a_count() {
        let (client, seen) = recording_client();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "karpenter-capi".into(),
                instance: None,
            },
        );
        // Five batches nominate the pod to the same NodeClaim.
        for _ in 0..5 {
            recorder
                .publish(&nominated("default-abc"), &pod_ref("u1"))
                .await
                .expect("publish");
        }
        let writes = seen.lock().expect("log").clone();
        let posts: Vec<_> = writes.iter().filter(|(m, _)| m == "POST").collect();
        let patches: Vec<_> = writes.iter().filter(|(m, _)| m == "PATCH").collect();
        assert_eq!(posts.len(), 1, "one Event object: {writes:?}");
        assert_eq!(posts[0].1, "/apis/events.k8s.io/v1/namespaces/shop/events");
        assert_eq!(
            patches.len(),
            1,
            "the second occurrence makes it a series: {writes:?}"
        );
        let entry = recorder
            .cache
            .lock()
            .expect("cache")
            .values()
            .next()
            .cloned()
            .expect("entry");
        assert_eq!(entry.count, 5);
        assert!(patches[0].1.ends_with(&format!("/events/{}", entry.name)));

        // Another NodeClaim (once the pod's nomination window passed: see
        // a_pod_gets_one_new_nomination_event_per_window), or another pod (a new uid), is
        // another Event, not a patch of the old message.
        tokio::time::advance(NOMINATION_WINDOW).await;
        recorder
            .publish(&nominated("default-xyz"), &pod_ref("u1"))
            .await
            .expect("publish");
        recorder
            .publish(&nominated("default-abc"), &pod_ref("u2"))
            .await
            .expect("publish");
        let posts = seen
            .lock()
            .expect("log")
            .iter()
            .filter(|(m, _)| m == "POST")
            .count();
        assert_eq!(posts, 3);
    }

    fn methods(seen: &Log, method: &str) -> usize {
        seen.lock()
            .expect("log")
            .iter()
            .filter(|(m, _)| m == method)
            .count()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_nominations_is_rate_limited_as_karpenter_does() {
        let (client, seen) = recording_client();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "karpenter-capi".into(),
                instance: None,
            },
        );
        let burst = NOMINATION_BURST.get() as usize;
        let pods: Vec<String> = (0..4 * burst).map(|i| format!("u{i}")).collect();
        for uid in &pods {
            recorder
                .publish(&nominated("default-abc"), &pod_ref(uid))
                .await
                .expect("publish");
        }
        assert_eq!(methods(&seen, "POST"), burst, "the burst, then nothing");

        // A second later, the same pods again: those nominated before are a series (one
        // patch each, no new Event); those over the rate started their window as Karpenter's
        // dedupe does, so nothing new for them either.
        tokio::time::advance(Duration::from_secs(1)).await;
        for uid in &pods {
            recorder
                .publish(&nominated("default-abc"), &pod_ref(uid))
                .await
                .expect("publish");
        }
        assert_eq!(methods(&seen, "POST"), burst);
        assert_eq!(methods(&seen, "PATCH"), burst);

        // New pods get NOMINATION_QPS new Events per second.
        for i in 0..2 * burst {
            recorder
                .publish(&nominated("default-abc"), &pod_ref(&format!("n{i}")))
                .await
                .expect("publish");
        }
        let qps = NOMINATION_QPS.get() as usize;
        assert_eq!(methods(&seen, "POST"), burst + qps);

        // After the window the skipped pods are nominated anew, as the rate allows.
        tokio::time::advance(NOMINATION_WINDOW).await;
        for uid in &pods[burst..] {
            recorder
                .publish(&nominated("default-abc"), &pod_ref(uid))
                .await
                .expect("publish");
        }
        assert_eq!(
            methods(&seen, "POST"),
            2 * burst + qps,
            "a new burst after the window"
        );

        // Other reasons are not limited.
        for uid in &pods {
            recorder
                .publish(&failed(), &pod_ref(uid))
                .await
                .expect("publish");
        }
        assert_eq!(methods(&seen, "POST"), 2 * burst + qps + pods.len());
    }

    #[tokio::test]
    async fn record_decides_at_once_and_writes_in_the_background() {
        let (client, seen) = recording_client();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "karpenter-capi".into(),
                instance: None,
            },
        );
        // The repeat comes before the first is written: it only counts.
        recorder.record(nominated("default-abc"), pod_ref("u1"));
        recorder.record(nominated("default-abc"), pod_ref("u1"));
        for _ in 0..10_000 {
            if methods(&seen, "POST") == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(methods(&seen, "POST"), 1, "one Event object");
        assert_eq!(methods(&seen, "PATCH"), 0);
        let entry = recorder
            .cache
            .lock()
            .expect("cache")
            .values()
            .next()
            .cloned()
            .expect("entry");
        assert_eq!(entry.count, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_gets_one_new_nomination_event_per_window() {
        let (client, seen) = recording_client();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "karpenter-capi".into(),
                instance: None,
            },
        );
        let pod = pod_ref("u1");
        for claim in ["default-a", "default-b", "default-a"] {
            recorder
                .publish(&nominated(claim), &pod)
                .await
                .expect("publish");
        }
        // default-b is not written; default-a again is the series of the first.
        assert_eq!(methods(&seen, "POST"), 1);
        assert_eq!(methods(&seen, "PATCH"), 1);
        // Another pod is not held back by this one's window.
        recorder
            .publish(&nominated("default-b"), &pod_ref("u2"))
            .await
            .expect("publish");
        assert_eq!(methods(&seen, "POST"), 2);

        tokio::time::advance(NOMINATION_WINDOW).await;
        recorder
            .publish(&nominated("default-b"), &pod)
            .await
            .expect("publish");
        assert_eq!(methods(&seen, "POST"), 3, "a new window: a new Event");
    }
}
