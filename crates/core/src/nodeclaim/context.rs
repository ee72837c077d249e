//! What the NodeClaim loops share: the workload cluster's client and caches, events,
//! metrics, and thin NodeClaim write helpers over [`crate::write`] (the lifecycle's field manager,
//! each write carrying the resourceVersion it was computed from, once per reconcile, and
//! only when something changed). [`Expectations`] remembers our own last writes so that no
//! decision re-runs on a cache that has not seen them yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::events::{Event, EventType, Recorder};
use api::NodeClaim;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::metrics::Metrics;
use crate::write::{Writer, manager};
use cloudprovider::CloudProvider;

pub use crate::objects::uid_of;

pub use super::error::Error;

/// How long an orphaned instance (no NodeClaim) is left alone before it is collected.
pub const INSTANCE_GRACE: Duration = Duration::from_secs(60);

/// Timing knobs (defaults follow Karpenter).
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long the provider's own health signal of an instance is tolerated before its
    /// Node is replaced.
    pub node_repair_after: Duration,
    /// Requeue while waiting on a deadline nothing else triggers on.
    pub poll: Duration,
    /// Grace before an orphaned instance is collected.
    pub gc_grace: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_repair_after: Duration::from_secs(600),
            poll: Duration::from_secs(30),
            gc_grace: INSTANCE_GRACE,
        }
    }
}

/// Read-your-writes of the NodeClaim loops: our own writes to NodeClaims by UID until the
/// cache shows them (the [`crate::write::Expectations`] their writer records into), and
/// what else this process knows ahead of its caches (held writes, providerIDs learnt from
/// the provider and not written yet).
#[derive(Debug, Default)]
pub struct Expectations {
    pub writes: Arc<crate::write::Expectations>,
    local: Mutex<HashMap<String, Local>>,
}

#[derive(Clone, Debug, Default)]
struct Local {
    /// Since when a progress-only status change has been held back.
    held_since: Option<std::time::Instant>,
    /// The claim's name and the providerID the provider gave its instance, until the
    /// claim's status carries it (a Node that joins meanwhile still finds its claim).
    provider_id: Option<(String, String)>,
}

impl Expectations {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Local>) -> T) -> T {
        f(&mut self.local.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether the cached object (`uid`, `resource_version`) predates our last write to it.
    pub fn stale(&self, uid: &str, resource_version: &str) -> bool {
        self.writes.stale(uid, resource_version)
    }

    /// The provider gave the instance of claim `name` (`uid`) its providerID `pid`.
    pub(crate) fn saw_provider_id(&self, uid: &str, name: &str, pid: &str) {
        self.with(|m| {
            m.entry(uid.to_string()).or_default().provider_id =
                Some((name.to_string(), pid.to_string()))
        });
    }

    /// The claims whose instance got providerID `pid` (not written on the claim yet).
    pub(crate) fn claims_of_provider_id(&self, pid: &str) -> Vec<String> {
        self.with(|m| {
            m.values()
                .filter_map(|e| e.provider_id.as_ref())
                .filter(|(_, p)| p == pid)
                .map(|(n, _)| n.clone())
                .collect()
        })
    }

    /// Holds back a progress-only status write of `uid` for at most `max` (so that it can
    /// fold into the next one): how long to wait still, or None when it is time to write.
    pub fn hold(&self, uid: &str, now: std::time::Instant, max: Duration) -> Option<Duration> {
        self.with(|m| {
            let e = m.entry(uid.to_string()).or_default();
            let since = *e.held_since.get_or_insert(now);
            let waited = now.saturating_duration_since(since);
            (waited < max).then(|| max - waited)
        })
    }

    /// A status write happened: nothing is held back any more.
    pub fn release(&self, uid: &str) {
        self.with(|m| {
            if let Some(e) = m.get_mut(uid) {
                e.held_since = None;
            }
        });
    }

    /// The claim is gone: nothing more to expect.
    pub fn forget(&self, uid: &str) {
        self.writes.forget(uid);
        self.with(|m| m.remove(uid));
    }
}

/// Per-object exponential backoff of failed reconciles: 1 s, 2 s, 4 s, … capped at 1 min,
/// reset by a reconcile that succeeds.
#[derive(Debug, Default)]
pub struct Backoff(Mutex<HashMap<String, u32>>);

impl Backoff {
    pub(crate) const FIRST: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(60);

    /// Records a failure of `key`; returns how long to wait before the next try.
    pub fn failed(&self, key: &str) -> Duration {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(key.to_string()).or_default();
        let wait = Self::FIRST.saturating_mul(1u32 << (*n).min(6));
        *n = n.saturating_add(1);
        wait.min(Self::MAX)
    }

    pub fn succeeded(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// What the NodeClaim loops share: the workload cluster's client and caches, events,
/// metrics, the write helpers and the bookkeeping of our own writes. Nothing of a provider:
/// the loops reach it through [`Ctx::provider`].
#[derive(Clone)]
pub struct Shared {
    pub workload: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub nodes: Cache<Node>,
    /// The workload cluster's pods (repair's tie-break and metrics).
    pub pods: Store<k8s_openapi::api::core::v1::Pod>,
    pub nodeclaims: Store<NodeClaim>,
    pub nodepools: Store<api::NodePool>,
    /// The workload cluster's ResourceSlices (initialization waits for requested DRA drivers).
    pub slices: Store<k8s_openapi::api::resource::v1::ResourceSlice>,
    pub settings: Settings,
    pub expectations: Arc<Expectations>,
    pub backoff: Arc<Backoff>,
    pub registration_failures: Arc<crate::reports::RegistrationFailures>,
    /// NodeClaims this process deleted for repair, until the cache shows them gone.
    pub repairs: Arc<super::repair::Repairs>,
    /// The provider's repair policies, compiled once per set it answers.
    pub repair_policies: Arc<super::repair_policy::Compiled>,
    /// The reboots this process requested (a third repair within a day replaces).
    pub reboots: Arc<super::repair::History>,
    /// Whether the workload cluster answers (hub mode's probe; always up otherwise): while
    /// it does not, nothing is deleted on its account (see `health`).
    pub connection: crate::health::Connection,
}

/// The NodeClaim loops' context: what they share, and the provider seam they launch, look
/// up, delete and judge drift through.
#[derive(Clone)]
pub struct Ctx {
    pub shared: Shared,
    pub provider: Arc<dyn CloudProvider>,
}

impl std::ops::Deref for Ctx {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Ctx {
    /// The provider's repair policies, compiled (`None`: no repair).
    pub(crate) fn matcher(&self) -> Option<Arc<super::repair::Matcher>> {
        self.repair_policies.get(self.provider.as_ref())
    }
}

impl Shared {
    /// A NodePool from the cache ("" = none).
    pub fn nodepool(&self, name: &str) -> Option<Arc<api::NodePool>> {
        (!name.is_empty())
            .then(|| {
                self.nodepools
                    .get(&kube::runtime::reflector::ObjectRef::new(name))
            })
            .flatten()
    }

    pub(crate) fn nodeclaims_api(&self) -> Api<NodeClaim> {
        Api::all(self.workload.clone())
    }

    /// The NodeClaim writer of the lifecycle: records into [`Shared::expectations`].
    pub fn claims(&self) -> Writer<NodeClaim> {
        Writer::new(self.nodeclaims_api(), manager::LIFECYCLE)
            .expecting(self.expectations.writes.clone())
    }

    /// Merge-patches the NodeClaim's metadata, conditional on the resourceVersion it was
    /// computed from; returns the written object (read-your-writes).
    pub(crate) async fn patch_claim(
        &self,
        claim: &NodeClaim,
        metadata: Value,
    ) -> Result<NodeClaim, Error> {
        let out = self
            .claims()
            .patch(claim, json!({ "metadata": metadata }))
            .await?;
        Ok(out.required(format!("NodeClaim {}", claim.name_any()))?)
    }

    /// Writes the NodeClaim's status when it differs from the cached one (conditional on the
    /// cached resourceVersion). Returns whether it wrote.
    pub(crate) async fn write_status(
        &self,
        claim: &NodeClaim,
        status: &api::karpenter::NodeClaimStatus,
    ) -> Result<bool, Error> {
        Ok(self.write_status_returning(claim, status).await?.is_some())
    }

    /// [`Shared::write_status`], returning the written object (`None`: nothing to write), so
    /// that a later write in the same step is computed from it.
    pub(crate) async fn write_status_returning(
        &self,
        claim: &NodeClaim,
        status: &api::karpenter::NodeClaimStatus,
    ) -> Result<Option<NodeClaim>, Error> {
        if claim.status.as_ref() == Some(status)
            || (claim.status.is_none() && *status == Default::default())
        {
            return Ok(None);
        }
        let out = self.claims().patch_status(claim, json!(status)).await?;
        Ok(Some(
            out.required(format!("NodeClaim {}", claim.name_any()))?,
        ))
    }

    /// Deletes the NodeClaim (its finalizer then runs termination); only the object we
    /// decided on (same UID) is deleted, and one gone already needs nothing.
    pub(crate) async fn delete_claim(&self, claim: &NodeClaim) -> Result<(), Error> {
        self.claims().delete(claim).await?;
        Ok(())
    }

    /// Publishes an event about a NodeClaim (best effort: a failed event never fails a loop).
    pub async fn event(&self, claim: &NodeClaim, type_: EventType, reason: &str, note: String) {
        self.publish(claim.object_ref(&()), type_, reason, note)
            .await;
    }

    /// Publishes an event about any object (Node, NodePool).
    pub(crate) async fn event_for<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.publish(obj.object_ref(&()), type_, reason, note).await;
    }

    async fn publish(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        publish(&self.recorder, reference, type_, reason, note).await;
    }
}

/// Publishes an event (best effort: a failed event never fails a loop, and the loop does not
/// wait for its write).
pub async fn publish(
    recorder: &Recorder,
    reference: ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(api::conditions::truncate(
            &note,
            api::conditions::MAX_MESSAGE,
        )),
        action: reason.into(),
        secondary: None,
    };
    recorder.record(event, reference);
}

/// Sets one of a NodeClaim's conditions now (its message truncated as every condition's is).
pub(crate) fn set_condition(
    status: &mut api::karpenter::NodeClaimStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
) {
    api::conditions::set(
        &mut status.conditions,
        type_,
        value,
        reason,
        message,
        None,
        k8s_openapi::jiff::Timestamp::now(),
    );
}

/// Karpenter's `Ready` = Launched ∧ Registered ∧ Initialized (once any of them is known:
/// a NodeClaim whose launch has not reported anything yet gets no status write for it).
pub fn set_ready(conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>) {
    use api::consts::conditions as types;
    if !api::consts::conditions::NODECLAIM_READY_PARTS
        .iter()
        .any(|p| api::conditions::get(conditions, p).is_some())
    {
        return;
    }
    api::conditions::set_ready_from(
        conditions,
        &[types::LAUNCHED, types::REGISTERED, types::INITIALIZED],
        None,
        k8s_openapi::jiff::Timestamp::now(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_hold_until_the_cache_catches_up() {
        let e = Expectations::default();
        e.writes.wrote("u", "5", "9");
        assert!(
            e.stale("u", "5"),
            "our writes are the writer's expectations"
        );
        e.forget("u");
        assert!(!e.stale("u", "5"), "forgotten with the claim");
        assert!(e.claims_of_provider_id("p1").is_empty());
        e.saw_provider_id("u", "claim-u", "p1");
        assert_eq!(e.claims_of_provider_id("p1"), ["claim-u"]);
        assert!(e.claims_of_provider_id("p2").is_empty());
        e.forget("u");
        assert!(
            e.claims_of_provider_id("p1").is_empty(),
            "forgotten with the claim"
        );
        let t0 = std::time::Instant::now();
        let max = Duration::from_secs(3);
        assert_eq!(e.hold("u", t0, max), Some(max));
        assert_eq!(
            e.hold("u", t0 + Duration::from_secs(1), max),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            e.hold("u", t0 + Duration::from_secs(3), max),
            None,
            "held long enough"
        );
        e.release("u");
        assert_eq!(
            e.hold("u", t0 + Duration::from_secs(4), max),
            Some(max),
            "a new hold"
        );
    }

    #[test]
    fn backoff_doubles_to_a_minute_and_resets() {
        let b = Backoff::default();
        let waits: Vec<u64> = (0..9).map(|_| b.failed("x").as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(b.failed("y").as_secs(), 1, "per object");
        b.succeeded("x");
        assert_eq!(b.failed("x").as_secs(), 1);
    }
}
