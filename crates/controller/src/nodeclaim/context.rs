//! What the NodeClaim loops share: clients, the shared caches, the catalog, events, metrics,
//! and thin NodeClaim write helpers over [`crate::write`] (the lifecycle's field manager,
//! each write carrying the resourceVersion it was computed from, once per reconcile, and
//! only when something changed). [`Expectations`] remembers our own last writes so that no
//! decision re-runs on a cache that has not seen them yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::events::{Event, EventType, Recorder};
use api::{ClusterAPINodeClass, Machine, NodeClaim};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::cloudprovider::CloudProvider;
use crate::cloudprovider::clusterapi::availability::unavailable::UnavailableOfferings;
use crate::cloudprovider::clusterapi::nodeclass::NodeClass;
use crate::metrics::Metrics;
use crate::write::{Writer, manager};
use kube::runtime::reflector::ObjectRef;

pub use crate::catalogs::Catalogs;
pub use crate::objects::uid_of;
pub use crate::resources::{nodeclaim_resource, nodeclass_resource, nodepool_resource};

pub use super::error::Error;

/// How long an orphaned Machine (no NodeClaim) is left alone before it is collected.
pub const MACHINE_GRACE: Duration = Duration::from_secs(60);

/// Timing knobs (defaults follow Karpenter).
#[derive(Clone, Debug)]
pub struct Settings {
    /// A Node NotReady/Unknown this long is replaced (CAPI's MachineHealthCheck does not
    /// remediate orphan Machines).
    pub node_repair_after: Duration,
    /// Requeue while waiting on a deadline nothing else triggers on.
    pub poll: Duration,
    /// Grace before an orphaned Machine is collected.
    pub gc_grace: Duration,
    /// How long a template's reported `available-count` is trusted.
    pub count_staleness: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_repair_after: Duration::from_secs(600),
            poll: Duration::from_secs(30),
            gc_grace: MACHINE_GRACE,
            count_staleness:
                crate::cloudprovider::clusterapi::availability::counts::DEFAULT_STALENESS,
        }
    }
}

/// Discovered API resources, by `apiVersion/kind` (or `group//kind` for the preferred
/// version): one discovery request per kind per process instead of one per launch.
#[derive(Debug, Default)]
pub struct Kinds(Mutex<HashMap<String, (String, ApiResource)>>);

impl Kinds {
    fn get(&self, key: &str) -> Option<(String, ApiResource)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }
    fn put(&self, key: String, value: (String, ApiResource)) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, value);
    }
}

/// Read-your-writes of the NodeClaim loops: our own writes to NodeClaims by UID until the
/// cache shows them (the [`crate::write::Expectations`] their writer records into), and
/// what else this process knows ahead of its caches (Machines it created, held writes).
#[derive(Debug, Default)]
pub struct Expectations {
    pub writes: Arc<crate::write::Expectations>,
    local: Mutex<HashMap<String, Local>>,
}

#[derive(Clone, Debug, Default)]
struct Local {
    /// The Machine of this claim was created (or adopted) by this process.
    machine: bool,
    /// Since when a progress-only status change has been held back.
    held_since: Option<std::time::Instant>,
}

impl Expectations {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Local>) -> T) -> T {
        f(&mut self.local.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether the cached object (`uid`, `resource_version`) predates our last write to it.
    pub fn stale(&self, uid: &str, resource_version: &str) -> bool {
        self.writes.stale(uid, resource_version)
    }

    /// Whether this process already created (or adopted) the Machine of `uid`.
    pub fn machine_created(&self, uid: &str) -> bool {
        self.with(|m| m.get(uid).is_some_and(|e| e.machine))
    }

    pub fn set_machine_created(&self, uid: &str) {
        self.with(|m| m.entry(uid.to_string()).or_default().machine = true);
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

/// How long a control-plane version or bootstrap template read is reused.
pub const LOOKUP_TTL: Duration = Duration::from_secs(15);

/// Reads from the API remembered for [`LOOKUP_TTL`] (control-plane versions, bootstrap
/// template hashes), so a periodic re-check of every NodeClaim is not a read each.
#[derive(Debug, Default)]
pub struct Lookups(Mutex<HashMap<String, (Instant, Option<String>)>>);

impl Lookups {
    pub(crate) async fn get<F>(&self, key: String, read: F) -> Result<Option<String>, Error>
    where
        F: std::future::Future<Output = Result<Option<String>, Error>>,
    {
        {
            let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, v)) = m.get(&key)
                && at.elapsed() < LOOKUP_TTL
            {
                return Ok(v.clone());
            }
        }
        let v = read.await?;
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, (at, _)| at.elapsed() < LOOKUP_TTL);
        m.insert(key, (Instant::now(), v.clone()));
        Ok(v)
    }
}

/// Per-object exponential backoff of failed reconciles: 1 s, 2 s, 4 s, … capped at 1 min,
/// reset by a reconcile that succeeds.
#[derive(Debug, Default)]
pub struct Backoff(Mutex<HashMap<String, u32>>);

impl Backoff {
    pub const FIRST: Duration = Duration::from_secs(1);
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

/// What the NodeClaim loops and the Cluster API provider share: clients, caches, the write
/// helpers and the bookkeeping of our own writes.
#[derive(Clone)]
pub struct Shared {
    pub workload: Client,
    pub management: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub nodes: Cache<Node>,
    /// The workload cluster's pods (repair's tie-break and metrics).
    pub pods: Store<k8s_openapi::api::core::v1::Pod>,
    pub machines: Store<Machine>,
    pub nodeclasses: Store<ClusterAPINodeClass>,
    pub nodeclaims: Store<NodeClaim>,
    pub nodepools: Store<api::NodePool>,
    pub clusters: Store<api::Cluster>,
    pub catalogs: Arc<dyn Catalogs>,
    pub unavailable: Arc<UnavailableOfferings>,
    /// The NodeClasses' host inventories (templates' free hosts).
    pub inventory: crate::cloudprovider::clusterapi::availability::hosts::Inventory,
    pub settings: Settings,
    pub kinds: Arc<Kinds>,
    pub expectations: Arc<Expectations>,
    pub backoff: Arc<Backoff>,
    pub registration_failures: Arc<crate::reports::RegistrationFailures>,
    /// API reads drift detection reuses for a few seconds.
    pub lookups: Arc<Lookups>,
    /// The workload cluster's identity on our Cluster API objects (see
    /// `cloudprovider::clusterapi::fence`).
    pub cluster_id: String,
    /// NodeClaims this process deleted for repair, until the cache shows them gone.
    pub repairs: Arc<super::repair::Repairs>,
    /// Whether the workload cluster answers (hub mode's probe; always up otherwise): while
    /// it does not, nothing is deleted on its account (see `health`).
    pub connection: crate::health::Connection,
}

/// The NodeClaim loops' context: what they share with the provider, and the provider seam
/// they launch, look up, delete and judge drift through.
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

/// The NodeClass a claim refers to, from the cache.
pub fn nodeclass_of(ctx: &Shared, claim: &NodeClaim) -> Option<NodeClass> {
    ctx.nodeclasses
        .get(&ObjectRef::new(&claim.spec.node_class_ref.name))
        .map(|nc| NodeClass::from_typed(&nc))
}

impl Shared {
    /// The API resource of `apiVersion` + `kind` in the management cluster.
    pub async fn resource(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<ApiResource, kube::Error> {
        let key = format!("{api_version}/{kind}");
        if let Some((_, ar)) = self.kinds.get(&key) {
            return Ok(ar);
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.management, &gvk).await?;
        self.kinds.put(key, (api_version.to_string(), ar.clone()));
        Ok(ar)
    }

    /// The preferred served version of `group` + `kind`: (apiVersion, resource).
    pub async fn preferred(&self, group: &str, kind: &str) -> Result<(String, ApiResource), Error> {
        let key = format!("{group}//{kind}");
        if let Some(v) = self.kinds.get(&key) {
            return Ok(v);
        }
        let apigroup = kube::discovery::oneshot::group(&self.management, group).await?;
        for (ar, _) in apigroup.versioned_resources(apigroup.preferred_version_or_latest()) {
            if ar.kind == kind {
                let v = (ar.api_version.clone(), ar);
                self.kinds.put(key, v.clone());
                return Ok(v);
            }
        }
        Err(Error::Launch(format!(
            "kind {kind} is not served in group {group}"
        )))
    }

    /// A NodePool from the cache ("" = none).
    pub fn nodepool(&self, name: &str) -> Option<Arc<api::NodePool>> {
        (!name.is_empty())
            .then(|| {
                self.nodepools
                    .get(&kube::runtime::reflector::ObjectRef::new(name))
            })
            .flatten()
    }

    pub fn nodeclaims_api(&self) -> Api<NodeClaim> {
        Api::all(self.workload.clone())
    }

    /// Machines in `namespace` as we create them (the object is built as JSON so that the
    /// fields a newer Cluster API adds survive).
    pub fn machines_dynamic(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.management.clone(),
            namespace,
            &crate::cloudprovider::clusterapi::machine::machine_resource(),
        )
    }

    pub fn machines_api(&self, namespace: &str) -> Api<Machine> {
        Api::namespaced(self.management.clone(), namespace)
    }

    /// The NodeClaim writer of the lifecycle: records into [`Shared::expectations`].
    pub fn claims(&self) -> Writer<NodeClaim> {
        Writer::new(self.nodeclaims_api(), manager::LIFECYCLE)
            .expecting(self.expectations.writes.clone())
    }

    /// Merge-patches the NodeClaim's metadata, conditional on the resourceVersion it was
    /// computed from; returns the written object (read-your-writes).
    pub async fn patch_claim(
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
    pub async fn write_status(
        &self,
        claim: &NodeClaim,
        status: &api::karpenter::NodeClaimStatus,
    ) -> Result<bool, Error> {
        Ok(self.write_status_returning(claim, status).await?.is_some())
    }

    /// [`Shared::write_status`], returning the written object (`None`: nothing to write), so
    /// that a later write in the same step is computed from it.
    pub async fn write_status_returning(
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
    pub async fn delete_claim(&self, claim: &NodeClaim) -> Result<(), Error> {
        self.claims().delete(claim).await?;
        Ok(())
    }

    /// Publishes an event about a NodeClaim (best effort: a failed event never fails a loop).
    pub async fn event(&self, claim: &NodeClaim, type_: EventType, reason: &str, note: String) {
        self.publish(claim.object_ref(&()), type_, reason, note)
            .await;
    }

    /// Publishes an event about any object (Node, Machine).
    pub async fn event_for<K: Resource<DynamicType = ()>>(
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
        assert!(!e.machine_created("u"));
        e.set_machine_created("u");
        assert!(e.machine_created("u") && !e.machine_created("v"));
        e.forget("u");
        assert!(!e.machine_created("u"));
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
