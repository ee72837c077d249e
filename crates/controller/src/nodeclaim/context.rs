//! What the NodeClaim loops share: clients, caches, the catalog, events, metrics, and the
//! small write helpers every sub-reconciler uses (so each write is done one way only).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::metrics::Metrics;
use crate::unavailable::UnavailableOfferings;
use templates::model::Catalog;

/// `karpenter.sh/v1` NodePool.
pub fn nodepool_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
        "nodepools",
    )
}

/// `karpenter.sh/v1` NodeClaim.
pub fn nodeclaim_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"),
        "nodeclaims",
    )
}

/// `karpenter.cluster.x-k8s.io/v1alpha1` ClusterAPINodeClass.
pub fn nodeclass_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "karpenter.cluster.x-k8s.io",
            "v1alpha1",
            "ClusterAPINodeClass",
        ),
        "clusterapinodeclasses",
    )
}

/// The current catalog of each NodeClass (fed by the template watcher).
pub trait Catalogs: Send + Sync {
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>>;
}

/// Errors of the NodeClaim loops. Each variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("reading {what}: {source}")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0}")]
    Launch(String),
}

impl Error {
    /// Short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "api",
            Error::Decode { .. } => "decode",
            Error::Launch(_) => "launch",
        }
    }
}

/// Timing knobs (defaults follow Karpenter).
#[derive(Clone, Debug)]
pub struct Settings {
    /// A Node NotReady/Unknown this long is replaced (CAPI's MachineHealthCheck does not
    /// remediate orphan Machines).
    pub node_repair_after: Duration,
    /// Requeue while waiting for CAPI or the Node.
    pub poll: Duration,
    /// Grace before an orphaned Machine is collected.
    pub gc_grace: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_repair_after: Duration::from_secs(600),
            poll: Duration::from_secs(2),
            gc_grace: crate::garbagecollection::MACHINE_GRACE,
        }
    }
}

/// Discovered API resources, by `apiVersion/kind` (or `group//kind` for the preferred
/// version): one discovery request per kind per process instead of one per launch.
#[derive(Debug, Default)]
pub struct Kinds(std::sync::Mutex<std::collections::HashMap<String, (String, ApiResource)>>);

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

/// Shared by the NodeClaim loops.
#[derive(Clone)]
pub struct Ctx {
    pub workload: Client,
    pub management: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub nodes: Store<Node>,
    pub machines: Store<DynamicObject>,
    pub nodeclasses: Store<DynamicObject>,
    pub nodeclaims: Store<DynamicObject>,
    pub catalogs: Arc<dyn Catalogs>,
    pub unavailable: Arc<UnavailableOfferings>,
    pub settings: Settings,
    pub kinds: Arc<Kinds>,
    pub registration_failures: Arc<crate::nodepool_status::RegistrationFailures>,
}

pub const FIELD_MANAGER: &str = "karpenter-capi";

impl Ctx {
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

    pub fn nodeclaims_api(&self) -> Api<DynamicObject> {
        Api::all_with(self.workload.clone(), &nodeclaim_resource())
    }

    pub fn machines_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.management.clone(),
            namespace,
            &crate::machine::machine_resource(),
        )
    }

    /// Merge-patches the NodeClaim's metadata (labels, annotations, finalizers).
    pub async fn patch_claim(&self, name: &str, patch: Value) -> Result<DynamicObject, Error> {
        Ok(self
            .nodeclaims_api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?)
    }

    /// Merge-patches the NodeClaim's status (conditions are written whole).
    pub async fn patch_claim_status(&self, name: &str, status: Value) -> Result<(), Error> {
        self.nodeclaims_api()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": status })),
            )
            .await?;
        Ok(())
    }

    /// Deletes the NodeClaim (its finalizer then runs termination).
    pub async fn delete_claim(&self, name: &str) -> Result<(), Error> {
        match self
            .nodeclaims_api()
            .delete(name, &Default::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Publishes an event about a NodeClaim (best effort: a failed event never fails a loop).
    pub async fn event(&self, claim: &DynamicObject, type_: EventType, reason: &str, note: String) {
        let reference = ObjectReference {
            api_version: Some("karpenter.sh/v1".into()),
            kind: Some("NodeClaim".into()),
            name: Some(claim.name_any()),
            uid: claim.uid(),
            ..ObjectReference::default()
        };
        self.publish(reference, type_, reason, note).await;
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
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(&note, 1024)),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(object = ?reference.name, reason, error = %e, "publishing event failed");
        }
    }
}

/// Cuts a message to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Returns `conditions` with `type_` set; lastTransitionTime changes only with the status.
pub fn set_condition(
    conditions: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = conditions.to_vec();
    let message = truncate(message, 300);
    match out.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
        }
        None => out.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        }),
    }
    out
}

/// Karpenter's `Ready` = Launched ∧ Registered ∧ Initialized.
pub fn with_ready(conditions: Vec<Condition>, now: Timestamp) -> Vec<Condition> {
    let get = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.status.as_str())
    };
    let parts = ["Launched", "Registered", "Initialized"];
    let all_true = parts.iter().all(|t| get(t) == Some("True"));
    let (status, reason, message) = if all_true {
        ("True", "Ready", String::new())
    } else {
        let waiting: Vec<&str> = parts
            .iter()
            .copied()
            .filter(|t| get(t) != Some("True"))
            .collect();
        (
            "False",
            "NotReady",
            format!("waiting for {}", waiting.join(", ")),
        )
    };
    set_condition(&conditions, "Ready", status, reason, &message, None, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_transition_time_moves_only_on_status_change() {
        let t0: Timestamp = "2026-11-22T10:00:00Z".parse().expect("time");
        let t1: Timestamp = "2026-11-22T10:05:00Z".parse().expect("time");
        let c = set_condition(&[], "Launched", "Unknown", "LaunchFailed", "boom", None, t0);
        let c = set_condition(
            &c,
            "Launched",
            "Unknown",
            "LaunchFailed",
            "boom again",
            None,
            t1,
        );
        assert_eq!(c[0].last_transition_time.0, t0);
        assert_eq!(c[0].message, "boom again");
        let c = set_condition(&c, "Launched", "True", "Launched", "", None, t1);
        assert_eq!(c[0].last_transition_time.0, t1);
        let long = "x".repeat(400);
        let c = set_condition(&c, "Launched", "False", "LaunchFailed", &long, None, t1);
        assert_eq!(
            c[0].message.len(),
            300,
            "messages are cut to 300 characters"
        );
    }

    #[test]
    fn ready_is_the_conjunction() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("time");
        let mut c = set_condition(&[], "Launched", "True", "Launched", "", None, now);
        c = set_condition(&c, "Registered", "True", "Registered", "", None, now);
        let r = with_ready(c.clone(), now);
        let ready = r.iter().find(|c| c.type_ == "Ready").expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.message.as_str()),
            ("False", "waiting for Initialized")
        );
        c = set_condition(&c, "Initialized", "True", "Initialized", "", None, now);
        let r = with_ready(c, now);
        assert_eq!(
            r.iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.as_str()),
            Some("True")
        );
    }
}
