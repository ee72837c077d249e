//! Latencies observed from the shared caches, with the objects' own timestamps (creation,
//! condition transitions), so a step measures the same whichever event shows it:
//!
//! - `karpenter_pods_startup_duration_seconds`: pod creation to Ready, for the pods this
//!   replica saw Pending (Karpenter's rule);
//! - `karpenter_capi_launch_step_duration_seconds{nodepool,step}`: NodeClaim creation to
//!   `machine_created` (its Machine's creation), `launched` (providerID), `registered` and
//!   `initialized`.
//!
//! Each step is observed once per object and only when it happened after the loop started,
//! so a restarted or new leader does not count old launches again. What is tracked is
//! bounded by the live Pending pods and NodeClaims: a deleted object leaves the tracker.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use api::NodeClaim;
use api::consts::conditions as types;
use clusterapi_api::Machine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use karpenter_core::cache::Cache;
use karpenter_core::metrics::{Metrics, StepLabels};

/// The launch steps, in order, by their `step` label.
pub(crate) const STEPS: [&str; 4] = ["machine_created", "launched", "registered", "initialized"];

/// What the loop reads.
pub(crate) struct Latency {
    pub metrics: Metrics,
    pub pods: Cache<Pod>,
    pub nodeclaims: Cache<NodeClaim>,
    pub machines: Cache<Machine>,
}

/// Pods seen Pending and the steps observed per NodeClaim.
pub(crate) struct Tracker {
    since: i64,
    pending: HashSet<String>,
    steps: HashMap<String, [bool; 4]>,
}

impl Tracker {
    /// Observes only what happens at or after `since` (whole seconds, as the API's
    /// timestamps).
    pub(crate) fn new(since: Timestamp) -> Self {
        Tracker {
            since: since.as_second(),
            pending: HashSet::new(),
            steps: HashMap::new(),
        }
    }

    /// A pod was applied (`deleted`: it is gone).
    pub(crate) fn pod(&mut self, pod: &Pod, deleted: bool, metrics: &Metrics) {
        let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if deleted || matches!(phase, Some("Succeeded" | "Failed")) {
            self.pending.remove(&key);
            return;
        }
        if phase == Some("Pending") {
            self.pending.insert(key);
            return;
        }
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
            .and_then(|c| c.last_transition_time.as_ref());
        if let Some(ready) = ready
            && self.pending.remove(&key)
            && let Some(seconds) = since_creation(pod, ready)
        {
            metrics.pod_startup.observe(seconds);
        }
    }

    /// A NodeClaim was applied (`deleted`: it is gone), with its Machine when cached.
    pub(crate) fn claim(
        &mut self,
        claim: &NodeClaim,
        machine: Option<&Machine>,
        deleted: bool,
        metrics: &Metrics,
    ) {
        let uid = claim.uid().unwrap_or_default();
        if deleted {
            self.steps.remove(&uid);
            return;
        }
        let conditions = claim
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let reached = |type_: &str| {
            api::conditions::get(conditions, type_)
                .filter(|c| c.status == api::conditions::TRUE)
                .map(|c| c.last_transition_time.clone())
        };
        let at: [Option<Time>; 4] = [
            machine.and_then(|m| m.meta().creation_timestamp.clone()),
            reached(types::LAUNCHED),
            reached(types::REGISTERED),
            reached(types::INITIALIZED),
        ];
        let nodepool = claim
            .labels()
            .get(api::consts::labels::NODEPOOL)
            .cloned()
            .unwrap_or_default();
        let seen = self.steps.entry(uid).or_default();
        for (i, t) in at.iter().enumerate() {
            let Some(t) = t else { continue };
            if seen[i] || t.0.as_second() < self.since {
                continue;
            }
            seen[i] = true;
            if let Some(seconds) = since_creation(claim, t) {
                metrics
                    .launch_steps
                    .get_or_create(&StepLabels {
                        nodepool: nodepool.clone(),
                        step: STEPS[i].into(),
                    })
                    .observe(seconds);
            }
        }
    }
}

/// Seconds from `obj`'s creation to `at` (None before its creation is known).
fn since_creation<K: Resource>(obj: &K, at: &Time) -> Option<f64> {
    let created = obj.meta().creation_timestamp.as_ref()?;
    Some(at.0.duration_since(created.0).as_secs_f64().max(0.0))
}

/// The Machine of a NodeClaim (its `<namespace>/<name>` annotation), from the cache.
fn machine_of(claim: &NodeClaim, machines: &Cache<Machine>) -> Option<Arc<Machine>> {
    let (ns, name) = claim
        .annotations()
        .get(api::consts::annotations::MACHINE)?
        .split_once('/')?;
    machines.store().get(&ObjectRef::new(name).within(ns))
}

/// Runs until `shutdown`, observing from the caches' events.
pub(crate) async fn run(l: Latency, shutdown: impl std::future::Future<Output = ()> + Send) {
    let mut tracker = Tracker::new(Timestamp::now());
    let mut pods = l.pods.subscribe().boxed();
    let mut claims = l.nodeclaims.subscribe().boxed();
    let mut machines = l.machines.subscribe().boxed();
    let (pod_store, claim_store) = (l.pods.store(), l.nodeclaims.store());
    for p in pod_store.state() {
        tracker.pod(&p, false, &l.metrics);
    }
    for c in claim_store.state() {
        let m = machine_of(&c, &l.machines);
        tracker.claim(&c, m.as_deref(), false, &l.metrics);
    }
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            Some(p) = pods.next() => {
                let deleted = pod_store.get(&ObjectRef::from_obj(p.as_ref())).is_none();
                tracker.pod(&p, deleted, &l.metrics);
            }
            Some(c) = claims.next() => {
                let deleted = claim_store.get(&ObjectRef::from_obj(c.as_ref())).is_none();
                let m = machine_of(&c, &l.machines);
                tracker.claim(&c, m.as_deref(), deleted, &l.metrics);
            }
            Some(m) = machines.next() => {
                let claim = m
                    .labels()
                    .get(api::consts::labels::NODECLAIM)
                    .and_then(|n| claim_store.get(&ObjectRef::new(n)));
                if let Some(c) = claim {
                    tracker.claim(&c, Some(&m), false, &l.metrics);
                }
            }
            else => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;
    use serde_json::json;

    fn metrics() -> (Metrics, Registry) {
        let mut registry = Registry::default();
        (Metrics::register(&mut registry), registry)
    }

    fn pod(phase: &str, ready_at: Option<&str>) -> Pod {
        let conditions = ready_at.map_or(
            json!([]),
            |t| json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]),
        );
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "d", "creationTimestamp": "2030-01-01T00:00:00Z"},
            "status": {"phase": phase, "conditions": conditions}
        }))
        .expect("fixture")
    }

    #[test]
    fn pod_startup_counts_pods_seen_pending_once() {
        let (m, _r) = metrics();
        let mut t = Tracker::new("2029-12-31T23:00:00Z".parse().expect("time"));
        t.pod(&pod("Running", Some("2030-01-01T00:00:04Z")), false, &m);
        assert_eq!(m.pod_startup.snapshot().2, 0, "never seen Pending");
        t.pod(&pod("Pending", None), false, &m);
        t.pod(&pod("Running", None), false, &m);
        assert_eq!(m.pod_startup.snapshot().2, 0, "Running but not Ready yet");
        t.pod(&pod("Running", Some("2030-01-01T00:00:07Z")), false, &m);
        t.pod(&pod("Running", Some("2030-01-01T00:00:07Z")), false, &m);
        let (quantiles, sum, count) = m.pod_startup.snapshot();
        assert_eq!((sum, count), (7.0, 1));
        assert!(quantiles.iter().all(|(_, v)| *v == 7.0), "{quantiles:?}");
        t.pod(&pod("Pending", None), false, &m);
        t.pod(&pod("Pending", None), true, &m);
        assert!(t.pending.is_empty(), "a deleted pod leaves the tracker");
    }

    #[test]
    fn launch_steps_are_observed_once_and_only_after_start() {
        let (m, registry) = metrics();
        let mut t = Tracker::new("2030-01-01T00:00:00Z".parse().expect("time"));
        let claim = |conditions: serde_json::Value| -> NodeClaim {
            serde_json::from_value(json!({
                "metadata": {"name": "c", "uid": "u1", "labels": {"karpenter.sh/nodepool": "default"},
                    "creationTimestamp": "2030-01-01T00:00:00Z"},
                "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": []},
                "status": {"conditions": conditions}
            }))
            .expect("fixture")
        };
        let cond = |type_: &str, at: &str| json!({"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": at});
        let machine: Machine = serde_json::from_value(json!({
            "metadata": {"name": "m", "namespace": "ns", "creationTimestamp": "2030-01-01T00:00:01Z"},
            "spec": {"clusterName": "c1", "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "k", "name": "m"}}
        }))
        .expect("fixture");
        t.claim(&claim(json!([])), Some(&machine), false, &m);
        let launched = claim(json!([cond("Launched", "2030-01-01T00:00:03Z")]));
        t.claim(&launched, Some(&machine), false, &m);
        t.claim(&launched, Some(&machine), false, &m);
        let registered = claim(json!([
            cond("Launched", "2030-01-01T00:00:03Z"),
            cond("Registered", "2030-01-01T00:00:09Z")
        ]));
        t.claim(&registered, Some(&machine), false, &m);
        let text = karpenter_core::metrics::encode(&registry).expect("encodes");
        for (step, sum) in [("machine_created", 1), ("launched", 3), ("registered", 9)] {
            let labels = format!(r#"{{nodepool="default",step="{step}"}}"#);
            assert!(
                text.contains(&format!(
                    "karpenter_capi_launch_step_duration_seconds_count{labels} 1\n"
                )) && text.contains(&format!(
                    "karpenter_capi_launch_step_duration_seconds_sum{labels} {sum}.0\n"
                )),
                "{step}: {text}"
            );
        }
        assert!(!text.contains(r#"step="initialized""#), "{text}");
        t.claim(&registered, None, true, &m);
        assert!(t.steps.is_empty(), "a deleted claim leaves the tracker");

        // A step reached before the loop started (a restart) is not observed.
        let (m2, registry2) = metrics();
        let mut late = Tracker::new("2030-01-01T00:00:05Z".parse().expect("time"));
        late.claim(&registered, Some(&machine), false, &m2);
        let text = karpenter_core::metrics::encode(&registry2).expect("encodes");
        assert!(text.contains(r#"step="registered""#), "{text}");
        assert!(!text.contains(r#"step="launched""#), "{text}");
    }
}
