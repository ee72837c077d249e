//! The one write path of every control loop. A loop writes through a [`Writer`] (one per
//! kind it writes, built with the loop's field manager from [`manager`]), and never calls
//! `patch`/`create`/`delete` on an `Api` itself. The rules it enforces:
//!
//! - **Conditional.** A merge patch carries the `metadata.resourceVersion` of the object it
//!   was computed from ([`guard`]); a JSON patch carries its own `test` ops; a delete carries
//!   the UID precondition of the object decided on; a server-side apply writes only fields
//!   its field manager owns (no guard needed).
//! - **One field manager per controller**, on every patch and create (deletes carry none).
//!   The HTTP user agent, by which the API server's audit log attributes writes, is the
//!   client's and does not change.
//! - **One 409/404 policy**: every write comes back as an [`Outcome`] — written, a
//!   [`Outcome::Conflict`] (computed from a stale read: decide again from the fresh object,
//!   at once) or [`Outcome::Gone`]; only other failures are errors.
//! - **Read-your-writes**: a writer given [`Expectations`] records each write (UID, the
//!   version written over, the version produced), and a loop that decides from a cache asks
//!   [`Expectations::stale`] before it decides again on a cached object.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The field managers, one per controller. A new loop adds its own here.
pub mod manager {
    /// The NodeClaim lifecycle (launch, registration, liveness, drift) and its provider.
    pub const LIFECYCLE: &str = "karpenter-capi-lifecycle";
    /// Releasing finalizers and deleting Nodes of a terminating NodeClaim.
    pub const TERMINATION: &str = "karpenter-capi-termination";
    /// NodeClaims created for pending pods.
    pub(crate) const PROVISIONER: &str = "karpenter-capi-provisioner";
    /// Static NodePools: their NodeClaims created and scaled down.
    pub(crate) const STATIC: &str = "karpenter-capi-static";
    /// Disruption: conditions, command records, taints, replacements and deletions.
    pub const DISRUPTION: &str = "karpenter-capi-disruption";
    /// `status.lastPodEventTime` (server-side apply: the one field only it owns).
    pub(crate) const POD_EVENTS: &str = "karpenter-capi-podevents";
    pub(crate) const NODEPOOL_STATUS: &str = "karpenter-capi-nodepool-status";
    pub const NODECLASS_STATUS: &str = "karpenter-capi-nodeclass-status";
    /// NodeOverlay conditions (ValidationSucceeded, Ready).
    pub const NODEOVERLAY_STATUS: &str = "karpenter-capi-nodeoverlay-status";
}

/// What a conditional write came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    Written(T),
    /// The write was computed from a stale read (409, or a failed JSON-patch `test`): decide
    /// again from the fresh object, at once.
    Conflict,
    /// The object is gone (404).
    Gone,
}

impl<T> Outcome<T> {
    /// The written object, if written.
    pub fn written(self) -> Option<T> {
        match self {
            Outcome::Written(t) => Some(t),
            _ => None,
        }
    }

    /// The written object; a conflict or a vanished object as an error about `what`.
    pub fn required(self, what: impl Into<String>) -> Result<T, Refused> {
        match self {
            Outcome::Written(t) => Ok(t),
            Outcome::Conflict => Err(Refused::Conflict(what.into())),
            Outcome::Gone => Err(Refused::Gone(what.into())),
        }
    }
}

/// A write the API server refused because of what the object is now.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    /// Retried at once from the fresh object.
    #[error("{0} changed since it was read")]
    Conflict(String),
    #[error("{0} is gone")]
    Gone(String),
}

/// Whether the API server said the write was computed from a stale read: 409, or 422 with a
/// failed `test` op (a JSON patch guarded by the value it was computed from).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s)
        if s.code == 409 || (s.code == 422 && s.message.contains("test")))
}

/// Whether the API server refused to apply a JSON patch: a bare 422 (no causes, where a
/// validation error names its fields), as it answers a failed `test` op or a path that is no
/// longer there — a write computed from a stale read, like a 409.
pub(crate) fn is_unapplied_patch(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s)
        if s.code == 422 && s.details.as_ref().is_none_or(|d| d.causes.is_empty()))
}

/// Whether the API server answered 404.
pub fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The one 409/404 policy: a write's result as an [`Outcome`].
pub(crate) fn classify<T>(result: kube::Result<T>) -> kube::Result<Outcome<T>> {
    match result {
        Ok(t) => Ok(Outcome::Written(t)),
        Err(e) if is_conflict(&e) => Ok(Outcome::Conflict),
        Err(e) if is_gone(&e) => Ok(Outcome::Gone),
        Err(e) => Err(e),
    }
}

/// A JSON patch's result with a patch the API server could not apply as a
/// [`Outcome::Conflict`] ([`is_unapplied_patch`]).
fn unapplied_as_conflict<T>(result: kube::Result<Outcome<T>>) -> kube::Result<Outcome<T>> {
    match result {
        Err(e) if is_unapplied_patch(&e) => Ok(Outcome::Conflict),
        other => other,
    }
}

/// A merge patch `body` made conditional on `resource_version` (`metadata.resourceVersion`).
pub fn guard(mut body: Value, resource_version: Option<String>) -> Value {
    if !body.is_object() {
        body = json!({});
    }
    let meta = body
        .as_object_mut()
        .map(|m| m.entry("metadata").or_insert_with(|| json!({})));
    if let Some(meta) = meta {
        if !meta.is_object() {
            *meta = json!({});
        }
        meta["resourceVersion"] = json!(resource_version);
    }
    body
}

/// A create's result.
#[derive(Debug, PartialEq, Eq)]
pub enum Created<T> {
    Created(T),
    /// An object of that name exists (409 AlreadyExists): the caller's policy decides.
    Exists,
}

/// Writes of one kind by one controller (see the module documentation).
#[derive(Clone)]
pub struct Writer<K> {
    api: Api<K>,
    manager: &'static str,
    expectations: Option<Arc<Expectations>>,
    shared: Option<Arc<OwnWrites<K>>>,
}

impl<K> Writer<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    pub fn new(api: Api<K>, manager: &'static str) -> Self {
        Writer {
            api,
            manager,
            expectations: None,
            shared: None,
        }
    }

    /// Also records every written object in `own`, for another loop that decides on the
    /// newest version of what both wrote ([`OwnWrites::latest`]).
    pub(crate) fn sharing(mut self, own: Arc<OwnWrites<K>>) -> Self {
        self.shared = Some(own);
        self
    }

    /// Records every write in `expectations` (read-your-writes).
    pub fn expecting(mut self, expectations: Arc<Expectations>) -> Self {
        self.expectations = Some(expectations);
        self
    }

    fn params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.manager.into()),
            ..PatchParams::default()
        }
    }

    fn record(&self, before: &K, after: &Outcome<K>) {
        let Outcome::Written(after) = after else {
            return;
        };
        if let Some(e) = &self.expectations {
            e.record(before, after);
        }
        if let Some(own) = &self.shared {
            own.wrote(after.clone());
        }
    }

    /// Merge-patches `obj` (metadata, spec: `body` as a whole merge patch), conditional on
    /// the resourceVersion `obj` was read at.
    pub async fn patch(&self, obj: &K, body: Value) -> kube::Result<Outcome<K>> {
        self.send(obj, &Patch::Merge(guard(body, obj.resource_version())))
            .await
    }

    /// Sends `patch` to `obj` (the object itself, not its status) and records the write.
    async fn send<P: serde::Serialize + std::fmt::Debug>(
        &self,
        obj: &K,
        patch: &Patch<P>,
    ) -> kube::Result<Outcome<K>> {
        let out = classify(self.api.patch(&obj.name_any(), &self.params(), patch).await)?;
        self.record(obj, &out);
        Ok(out)
    }

    /// Merge-patches `obj`'s status with `status`, conditional on the resourceVersion `obj`
    /// was read at.
    pub async fn patch_status(&self, obj: &K, status: Value) -> kube::Result<Outcome<K>> {
        let patch = Patch::Merge(guard(json!({ "status": status }), obj.resource_version()));
        self.send_status(obj, &patch).await
    }

    /// Sends `patch` to `obj`'s status subresource and records the write.
    async fn send_status<P: serde::Serialize + std::fmt::Debug>(
        &self,
        obj: &K,
        patch: &Patch<P>,
    ) -> kube::Result<Outcome<K>> {
        let out = classify(
            self.api
                .patch_status(&obj.name_any(), &self.params(), patch)
                .await,
        )?;
        self.record(obj, &out);
        Ok(out)
    }

    /// A JSON patch of `obj`; `ops` carry their own `test` guards of what they were computed
    /// from (a failed test is a [`Outcome::Conflict`]).
    pub(crate) async fn json_patch(
        &self,
        obj: &K,
        ops: json_patch::Patch,
    ) -> kube::Result<Outcome<K>> {
        unapplied_as_conflict(self.send(obj, &Patch::Json::<()>(ops)).await)
    }

    /// A JSON patch of `obj`'s status subresource; `ops` carry their own `test` guards (a
    /// failed test is a [`Outcome::Conflict`]): for one entry of a list other writers also
    /// edit, without making every other status write a conflict.
    pub(crate) async fn json_patch_status(
        &self,
        obj: &K,
        ops: json_patch::Patch,
    ) -> kube::Result<Outcome<K>> {
        unapplied_as_conflict(self.send_status(obj, &Patch::Json::<()>(ops)).await)
    }

    /// Server-side applies `body` (a full apply configuration) to `name`'s status, forcing
    /// ownership of its fields: for a field only this controller writes.
    pub(crate) async fn apply_status(&self, name: &str, body: Value) -> kube::Result<Outcome<K>> {
        let params = PatchParams::apply(self.manager).force();
        classify(
            self.api
                .patch_status(name, &params, &Patch::Apply(&body))
                .await,
        )
    }

    /// Creates `obj`; an existing object of its name is [`Created::Exists`].
    pub async fn create(&self, obj: &K) -> kube::Result<Created<K>> {
        let params = PostParams {
            field_manager: Some(self.manager.into()),
            ..PostParams::default()
        };
        match self.api.create(&params, obj).await {
            Ok(created) => {
                if let Some(e) = &self.expectations {
                    e.created(&created);
                }
                Ok(Created::Created(created))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Created::Exists),
            Err(e) => Err(e),
        }
    }

    /// Deletes `obj`, only the very object decided on (UID precondition): a
    /// [`Outcome::Conflict`] when the name now holds another object.
    pub async fn delete(&self, obj: &K) -> kube::Result<Outcome<()>> {
        self.delete_within(obj, None).await
    }

    /// [`Writer::delete`] with `grace_seconds` for the object to go (a pod's
    /// `terminationGracePeriodSeconds` shortened); `None`: the object's own.
    pub(crate) async fn delete_within(
        &self,
        obj: &K,
        grace_seconds: Option<u32>,
    ) -> kube::Result<Outcome<()>> {
        let params = DeleteParams {
            grace_period_seconds: grace_seconds,
            preconditions: Some(uid_precondition(obj)),
            ..DeleteParams::default()
        };
        let out = classify(self.api.delete(&obj.name_any(), &params).await)?;
        Ok(match out {
            Outcome::Written(either) => {
                if let Some(after) = either.left() {
                    // Finalizers hold it: its deletionTimestamp is a write the cache has
                    // to show.
                    self.record(obj, &Outcome::Written(after));
                }
                Outcome::Written(())
            }
            Outcome::Conflict => Outcome::Conflict,
            Outcome::Gone => Outcome::Gone,
        })
    }

    /// Deletes `name` without a precondition: for objects whose name alone is ours (a
    /// clone rolled back, a Machine or Node already judged ours by its fence).
    pub async fn delete_named(&self, name: &str) -> kube::Result<Outcome<()>> {
        let out = classify(self.api.delete(name, &DeleteParams::default()).await)?;
        Ok(match out {
            Outcome::Written(_) => Outcome::Written(()),
            Outcome::Conflict => Outcome::Conflict,
            Outcome::Gone => Outcome::Gone,
        })
    }
}

/// Only the very object decided on: its UID.
fn uid_precondition<K: Resource>(obj: &K) -> Preconditions {
    Preconditions {
        uid: obj.meta().uid.clone(),
        resource_version: None,
    }
}

impl Writer<k8s_openapi::api::core::v1::Pod> {
    /// Evicts `pod` through the Eviction API (`policy/v1`, so PodDisruptionBudgets apply),
    /// only the very pod decided on (UID precondition): [`Outcome::Gone`] when it is gone,
    /// [`Outcome::Conflict`] when the name now holds another pod. A PDB refusing (429) is an
    /// error for the caller to read ([`is_too_many_requests`]).
    pub(crate) async fn evict(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
    ) -> kube::Result<Outcome<()>> {
        let eviction = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name_any(), "namespace": pod.namespace()},
            "deleteOptions": {"preconditions": uid_precondition(pod)},
        });
        let out = self
            .api
            .create_subresource::<_, Value>(
                "eviction",
                &pod.name_any(),
                &PostParams::default(),
                &eviction,
            )
            .await;
        Ok(match classify(out)? {
            Outcome::Written(_) => Outcome::Written(()),
            Outcome::Conflict => Outcome::Conflict,
            Outcome::Gone => Outcome::Gone,
        })
    }
}

/// Whether the API server answered 429 (an eviction a PodDisruptionBudget refuses).
pub(crate) fn is_too_many_requests(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 429)
}

/// Our own writes by object UID until the cache shows them: read-your-writes for a loop
/// whose cache lags. Shared by the writers of one loop and asked before it decides again.
/// Patches and deletes are kept as the resourceVersions they turned the object from and
/// into; creates as the new object's UID until the cache has it (at most [`CREATE_LAG`]:
/// an object deleted before the cache saw it is not waited for forever).
#[derive(Debug, Default)]
pub struct Expectations(Mutex<Expected>);

#[derive(Debug, Default)]
struct Expected {
    versions: HashMap<String, (String, String)>,
    created: HashMap<String, Instant>,
}

/// How long a created object is waited for in the cache.
pub(crate) const CREATE_LAG: Duration = Duration::from_secs(30);

impl Expectations {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, (String, String)>) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()).versions)
    }

    /// Records a write to `uid` that turned resourceVersion `from` into `to`.
    pub fn wrote(&self, uid: &str, from: &str, to: &str) {
        self.with(|m| m.insert(uid.to_string(), (from.to_string(), to.to_string())));
    }

    /// Records that we created `obj`: [`Expectations::unseen_creates`] until the cache has it.
    pub fn created<K: Resource>(&self, obj: &K) {
        if let Some(uid) = obj.meta().uid.as_deref() {
            let mut e = self.0.lock().unwrap_or_else(|p| p.into_inner());
            // Bounded also for a loop that never asks.
            e.created.retain(|_, at| at.elapsed() < CREATE_LAG);
            e.created.insert(uid.to_string(), Instant::now());
        }
    }

    /// Whether an object we created is not in the cache yet (`cached` says which UIDs it
    /// has); those it has, and those waited for longer than [`CREATE_LAG`], are dropped.
    pub(crate) fn unseen_creates(&self, cached: impl Fn(&str) -> bool) -> bool {
        let mut e = self.0.lock().unwrap_or_else(|p| p.into_inner());
        e.created
            .retain(|uid, at| !cached(uid) && at.elapsed() < CREATE_LAG);
        !e.created.is_empty()
    }

    /// Records the write that turned `before` into `after`.
    pub fn record<K: Resource>(&self, before: &K, after: &K) {
        if let (Some(uid), Some(from), Some(to)) = (
            before.meta().uid.as_deref(),
            before.meta().resource_version.as_deref(),
            after.meta().resource_version.as_deref(),
        ) {
            self.wrote(uid, from, to);
        }
    }

    /// Whether the cached object (`uid` at `resource_version`) predates our last write to
    /// it: the version we wrote over, or (numeric versions) an older one. Once the cache has
    /// caught up, the expectation is dropped.
    pub fn stale(&self, uid: &str, resource_version: &str) -> bool {
        self.with(|m| {
            let Some((from, to)) = m.get(uid) else {
                return false;
            };
            let older = match (resource_version.parse::<u64>(), to.parse::<u64>()) {
                (Ok(have), Ok(want)) => have < want,
                _ => false,
            };
            if resource_version == from || older {
                return true;
            }
            m.remove(uid);
            false
        })
    }

    /// [`Expectations::stale`] of a cached object.
    pub fn stale_object<K: Resource>(&self, obj: &K) -> bool {
        let meta = obj.meta();
        match (meta.uid.as_deref(), meta.resource_version.as_deref()) {
            (Some(uid), Some(rv)) => self.stale(uid, rv),
            _ => false,
        }
    }

    /// The object is gone: nothing more to expect.
    pub fn forget(&self, uid: &str) {
        self.with(|m| m.remove(uid));
    }

    /// Keeps the expectations of the UIDs `live` says still exist.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.with(|m| m.retain(|uid, _| live(uid)));
    }
}

/// The objects one loop wrote, by UID, until the cache shows them: for a loop that acts on
/// every event and cannot wait for its cache, it decides on the newer (by resourceVersion) of
/// the cached object and its own last write, so a second event right after a write is judged
/// against what was written, not against the cache's older copy.
#[derive(Debug)]
pub struct OwnWrites<K>(Mutex<HashMap<String, Arc<K>>>);

impl<K> Default for OwnWrites<K> {
    fn default() -> Self {
        OwnWrites(Mutex::default())
    }
}

impl<K: Resource> OwnWrites<K> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<K>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the object a write returned.
    pub fn wrote(&self, after: K) {
        if let Some(uid) = after.meta().uid.clone() {
            self.map().insert(uid, Arc::new(after));
        }
    }

    /// The newer of `cached` and our last write to it; once the cache has caught up, our copy
    /// is dropped.
    pub fn latest(&self, cached: &Arc<K>) -> Arc<K> {
        let version = |k: &K| {
            k.meta()
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        let Some(uid) = cached.meta().uid.as_deref() else {
            return cached.clone();
        };
        let mut m = self.map();
        match m.get(uid) {
            Some(ours) if version(ours) > version(cached) => ours.clone(),
            Some(_) => {
                m.remove(uid);
                cached.clone()
            }
            None => cached.clone(),
        }
    }

    /// Keeps our copies of the UIDs `live` says still exist.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.map().retain(|uid, _| live(uid));
    }

    /// How many copies are kept.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An error answered by the API server.
    pub(crate) fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value::<kube::core::Status>(json!({"code": code, "message": message}))
                .expect("status")
                .boxed(),
        )
    }

    #[test]
    fn a_json_patch_the_server_could_not_apply_is_a_conflict() {
        // What kube-apiserver 1.36 answers a failed `test` op (seen in the 5000-pod bench):
        // 422, reason Invalid, the generic message, no causes.
        let unapplied: kube::core::Status = serde_json::from_value(json!({
            "code": 422, "reason": "Invalid",
            "message": "the server rejected our request due to an error in our request",
            "details": {"causes": []}
        }))
        .expect("status");
        let failed = || Err(kube::Error::Api(unapplied.clone().boxed()));
        assert!(matches!(
            unapplied_as_conflict::<()>(failed()),
            Ok(Outcome::Conflict)
        ));
        // A validation error names its fields: an error, not a conflict.
        let invalid: kube::core::Status = serde_json::from_value(json!({
            "code": 422, "reason": "Invalid", "message": "NodeClaim.karpenter.sh \"a\" is invalid",
            "details": {"causes": [{"reason": "FieldValueInvalid", "field": "status.conditions"}]}
        }))
        .expect("status");
        assert!(
            unapplied_as_conflict::<()>(Err(kube::Error::Api(invalid.boxed()))).is_err(),
            "an invalid object is an error"
        );
        assert!(matches!(
            unapplied_as_conflict(Ok(Outcome::Written(1))),
            Ok(Outcome::Written(1))
        ));
    }

    #[test]
    fn outcomes_classify_409_404_and_failed_tests() {
        let c = |code, msg| classify::<()>(Err(api_error(code, msg)));
        assert!(matches!(
            c(409, "the object has been modified"),
            Ok(Outcome::Conflict)
        ));
        assert!(matches!(
            c(
                422,
                "the server rejected our request due to an error in our request: test failed"
            ),
            Ok(Outcome::Conflict)
        ));
        assert!(matches!(c(404, "not found"), Ok(Outcome::Gone)));
        assert!(
            matches!(c(422, "spec.taints: Invalid value"), Err(kube::Error::Api(s)) if s.code == 422),
            "an invalid object is an error, not a conflict"
        );
        assert!(c(500, "etcd").is_err());
        assert_eq!(classify(Ok(7)).ok(), Some(Outcome::Written(7)));
        assert!(is_conflict(&api_error(409, "")) && !is_gone(&api_error(409, "")));
        assert!(is_gone(&api_error(404, "")));
        assert_eq!(
            Outcome::<()>::Conflict.required("NodeClaim a"),
            Err(Refused::Conflict("NodeClaim a".into()))
        );
        assert_eq!(
            Outcome::<()>::Gone.required("x").map_err(|e| e.to_string()),
            Err("x is gone".into())
        );
        assert_eq!(Outcome::Written(1).written(), Some(1));
    }

    #[test]
    fn patches_carry_the_version_they_were_computed_from() {
        assert_eq!(
            guard(json!({"status": {"a": 1}}), Some("42".into())),
            json!({"metadata": {"resourceVersion": "42"}, "status": {"a": 1}})
        );
        assert_eq!(
            guard(json!({"metadata": {"finalizers": ["f"]}}), Some("7".into())),
            json!({"metadata": {"resourceVersion": "7", "finalizers": ["f"]}})
        );
        assert_eq!(
            guard(json!({"spec": {"taints": []}}), Some("3".into())),
            json!({"metadata": {"resourceVersion": "3"}, "spec": {"taints": []}})
        );
        assert_eq!(
            guard(
                json!({"metadata": {"resourceVersion": "1"}}),
                Some("2".into())
            ),
            json!({"metadata": {"resourceVersion": "2"}}),
            "the version read wins over anything in the body"
        );
        assert_eq!(
            guard(json!({"metadata": {"labels": {}}}), None),
            json!({"metadata": {"labels": {}, "resourceVersion": null}}),
            "an object without a version is written unconditionally (null)"
        );
    }

    #[test]
    fn expectations_hold_until_the_cache_catches_up() {
        let e = Expectations::default();
        assert!(!e.stale("u", "5"), "nothing written yet");
        e.wrote("u", "5", "9");
        assert!(e.stale("u", "5"), "the version we wrote over");
        assert!(e.stale("u", "7"), "older than our write");
        assert!(!e.stale("v", "5"), "per UID");
        assert!(!e.stale("u", "9"), "our write is cached");
        assert!(!e.stale("u", "5"), "the expectation is dropped once met");
        e.wrote("u", "a", "b");
        assert!(
            e.stale("u", "a"),
            "opaque versions: the one we wrote over is stale"
        );
        assert!(
            !e.stale("u", "c"),
            "any other opaque version is taken as fresh"
        );
        e.wrote("u", "5", "9");
        e.forget("u");
        assert!(!e.stale("u", "5"), "forgotten");
        e.wrote("u", "5", "9");
        e.wrote("w", "5", "9");
        e.retain(|uid| uid == "w");
        assert!(!e.stale("u", "5") && e.stale("w", "5"));
    }

    #[test]
    fn expectations_record_objects() {
        let e = Expectations::default();
        let obj = |rv: &str| k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::api::ObjectMeta {
                uid: Some("u".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        e.record(&obj("10"), &obj("11"));
        assert!(e.stale_object(&obj("10")));
        assert!(!e.stale_object(&obj("12")), "newer than our write");
        assert!(!e.stale_object(&obj("10")), "dropped once met");
    }

    #[test]
    fn own_writes_win_until_the_cache_catches_up() {
        let obj = |rv: &str, note: &str| {
            let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
            cm.metadata.uid = Some("u1".into());
            cm.metadata.resource_version = Some(rv.into());
            cm.data = Some([("note".to_string(), note.to_string())].into());
            Arc::new(cm)
        };
        let note = |cm: &k8s_openapi::api::core::v1::ConfigMap| {
            cm.data.as_ref().and_then(|d| d.get("note")).cloned()
        };
        let own = OwnWrites::default();
        own.wrote((*obj("12", "ours")).clone());
        // The cache still has the version we wrote over: ours is newer.
        assert_eq!(
            note(&own.latest(&obj("11", "cached"))).as_deref(),
            Some("ours")
        );
        assert_eq!(own.len(), 1);
        // The cache caught up (or moved past us): the cache's, and our copy goes.
        assert_eq!(
            note(&own.latest(&obj("13", "cached"))).as_deref(),
            Some("cached")
        );
        assert!(own.is_empty());
    }
}
