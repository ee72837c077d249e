//! The provisioner loop: batches provisionable pods as pod (and capacity) events arrive
//! ([`batch`]), reads the cluster state, runs the scheduling simulation and creates one
//! NodeClaim per planned claim.

pub(crate) mod batch;
pub mod nodeclaim;
pub mod snapshot;
pub(crate) mod trigger;

pub use snapshot::Snapshot;

pub use crate::objects::provisionable;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::events::{Event, EventType, Recorder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};

use crate::metrics::{ControllerLabels, CreatedLabels, Metrics};
use crate::state::{Cluster, ClusterState};
use crate::write::{Created, Writer, manager};
use api::NodeClaim;
use batch::Batcher;
use cloudprovider::CloudProvider;
use trigger::{PoolsSeen, Wake, triggers, wake};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("scheduling simulation: {0}")]
    Solve(String),
    #[error("NodeClaim {0} exists already")]
    Exists(String),
}

/// What the provisioner reads and writes.
#[derive(Clone)]
pub struct Provisioner {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    /// The cluster state of the workload cluster: what is read, and the caches whose
    /// events trigger a batch.
    pub state: ClusterState,
    /// The provider: its instance types, with each offering's availability and count, are
    /// what the solver packs onto.
    pub provider: Arc<dyn CloudProvider>,
    /// What the provider says when its offerings' availability may have changed.
    pub offerings: OfferingChanges,
    /// `--min-values-policy`: the solver relaxes `minValues` under `BestEffort`.
    pub min_values_policy: scheduling::MinValuesPolicy,
    pub batch_idle: Duration,
    pub batch_max: Duration,
}

impl Provisioner {
    /// Builds the solver input for `pods` from `cluster` (Ready NodePools only: Karpenter
    /// provisions only for valid NodePools whose NodeClass is Ready).
    pub fn snapshot(&self, cluster: &Cluster, pods: &[Arc<Pod>]) -> Snapshot {
        let mut snap = snapshot::build(
            cluster,
            &cluster.ready_nodepools(),
            pods,
            &|nodeclass| self.provider.instance_types(nodeclass),
            crate::model::convert::Availability::Offered,
        );
        snap.input.min_values_policy = self.min_values_policy;
        snap
    }

    /// One batch: solve and create the NodeClaims. Returns the names created.
    pub async fn provision(&self, pods: &[Arc<Pod>]) -> Result<Vec<String>, Error> {
        // Pods asking not to run on our nodes are ignored, as Karpenter ignores them.
        let (ignored, pods): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) = pods
            .iter()
            .cloned()
            .partition(|p| crate::objects::avoids_karpenter(p));
        self.metrics
            .ignored_pods
            .set(i64::try_from(ignored.len()).unwrap_or(i64::MAX));
        if pods.is_empty() {
            return Ok(Vec::new());
        }
        let pods = pods.as_slice();
        let cluster = self.state.current();
        let (snapshot, output) = self.solve(&cluster, pods).await?;
        let by_uid: HashMap<&str, &Pod> = pods
            .iter()
            .filter_map(|p| Some((p.metadata.uid.as_deref()?, p.as_ref())))
            .collect();
        let (created, first_error) = self.create_claims(&snapshot, &output, &by_uid).await;
        self.nominate_in_flight(&cluster, &snapshot, &output, &by_uid)
            .await;
        let notes = count_notes(&snapshot, &output);
        for u in &output.unschedulable {
            if let Some(v) = by_uid.get(u.pod.uid.as_str()) {
                self.event(
                    v,
                    EventType::Warning,
                    "FailedScheduling",
                    format!(
                        "Failed to schedule pod, {}",
                        crate::model::volumes::explain(&u.reason, v, cluster.volumes())
                    ),
                )
                .await;
                let exhausted = exhausted_notes(u, &notes);
                if !exhausted.is_empty() {
                    self.event(
                        v,
                        EventType::Warning,
                        api::consts::events::COUNT_EXHAUSTED,
                        exhausted.join("; "),
                    )
                    .await;
                }
            }
        }
        self.await_cached(&created).await;
        match first_error {
            Some(e) => Err(e),
            None => Ok(created),
        }
    }

    /// Snapshots `cluster` and solves for `pods`, off the async workers (CPU work: a long
    /// solve never delays Lease renewal or the other loops); the solve's duration observed.
    async fn solve(
        &self,
        cluster: &Arc<Cluster>,
        pods: &[Arc<Pod>],
    ) -> Result<(Snapshot, scheduling::Output), Error> {
        let this = self.clone();
        let cluster = Arc::clone(cluster);
        let batch = pods.to_vec();
        let controller = crate::metrics::controller::current();
        let (snapshot, output, elapsed) = tokio::task::spawn_blocking(move || {
            let snapshot = crate::metrics::controller::blocking_as(controller, || {
                this.snapshot(&cluster, &batch)
            });
            let start = Instant::now();
            let dra = crate::model::devices::dra(
                &cluster.dra,
                &batch,
                snapshot.catalogs.values().map(AsRef::as_ref),
            );
            let output = scheduling::solve_with_devices(&snapshot.input, &dra);
            (snapshot, output, start.elapsed())
        })
        .await
        .map_err(|e| Error::Solve(e.to_string()))?;
        self.metrics
            .scheduling_duration
            .get_or_create(&ControllerLabels {
                controller: "provisioner".into(),
            })
            .observe(elapsed.as_secs_f64());
        Ok((snapshot, output))
    }

    /// Creates the solver's new NodeClaims and nominates their pods to them: the names
    /// created, and the first error (the other claims are still created). All creates are in
    /// flight at once (bounded by [`PARALLEL_WRITES`] and the client's rate limit), as
    /// Karpenter creates a batch's NodeClaims in parallel; the pods' `Nominated` events are
    /// recorded after the creates (written in the background).
    async fn create_claims(
        &self,
        snapshot: &Snapshot,
        output: &scheduling::Output,
        by_uid: &HashMap<&str, &Pod>,
    ) -> (Vec<String>, Option<Error>) {
        let writer: Writer<NodeClaim> =
            Writer::new(Api::all(self.client.clone()), manager::PROVISIONER);
        // Owned values only in the stream (a borrowed item makes the future not `Send`).
        let planned: Vec<(usize, NodeClaim)> = output
            .new_node_claims
            .iter()
            .enumerate()
            .filter_map(|(i, claim)| Some((i, snapshot.nodeclaim(claim)?)))
            .collect();
        let results: Vec<(usize, Result<NodeClaim, Error>)> = futures::stream::iter(planned)
            .map(|(i, obj)| {
                let writer = writer.clone();
                async move {
                    let written = match writer.create(&obj).await {
                        Ok(Created::Created(nc)) => Ok(nc),
                        Ok(Created::Exists) => Err(Error::Exists(obj.name_any())),
                        Err(e) => Err(e.into()),
                    };
                    (i, written)
                }
            })
            .buffered(PARALLEL_WRITES)
            .collect()
            .await;
        let mut created = Vec::new();
        let mut first_error = None;
        let mut nominations: Vec<(ObjectReference, String)> = Vec::new();
        for (i, result) in results {
            let claim = &output.new_node_claims[i];
            let nc = match result {
                Ok(nc) => nc,
                Err(e) => {
                    tracing::warn!(nodepool = %claim.node_pool, error = %e, "creating NodeClaim failed");
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            let name = nc.name_any();
            tracing::info!(nodeclaim = %name, nodepool = %claim.node_pool, pods = claim.pods.len(),
                instance_types = claim.instance_types().len(), cheapest = %claim.cheapest.instance_type,
                "created NodeClaim");
            self.metrics
                .nodeclaims_created
                .get_or_create(&CreatedLabels {
                    reason: "provisioning".into(),
                    nodepool: claim.node_pool.clone(),
                })
                .inc();
            nominations.extend(claim.pods.iter().filter_map(|p| {
                let pod = by_uid.get(p.uid.as_str())?;
                Some((
                    pod.object_ref(&()),
                    format!("Pod should schedule on: nodeclaim/{name}"),
                ))
            }));
            created.push(name);
        }
        for (pod, note) in nominations {
            self.event_on(pod, EventType::Normal, "Nominated", note);
        }
        (created, first_error)
    }

    /// Pods packed onto NodeClaims still launching are nominated to them too.
    async fn nominate_in_flight(
        &self,
        cluster: &Cluster,
        snapshot: &Snapshot,
        output: &scheduling::Output,
        by_uid: &HashMap<&str, &Pod>,
    ) {
        let in_flight = snapshot.in_flight();
        for placement in &output.existing {
            if !in_flight.contains(placement.node.as_str()) {
                continue;
            }
            // The NodeClaim (also when the solver saw its Node): one nomination message per
            // pod and NodeClaim, so repeats are one Event series.
            let claim = if cluster.nodeclaim(&placement.node).is_some() {
                Some(placement.node.as_str())
            } else {
                cluster
                    .claim_of(&placement.node)
                    .map(|c| crate::objects::name(c.as_ref()))
            };
            let target = match claim {
                Some(c) => format!("nodeclaim/{c}"),
                None => format!("node/{}", placement.node),
            };
            if let Some(v) = by_uid.get(placement.pod.uid.as_str()) {
                self.event(
                    v,
                    EventType::Normal,
                    "Nominated",
                    format!("Pod should schedule on: {target}"),
                )
                .await;
            }
        }
    }

    /// Waits (bounded) until the NodeClaim cache holds the claims just created, each charged
    /// at its real size (see [`charged`]), so the next batch counts them against limits and
    /// packs onto them instead of launching again. This is what bounds a NodePool's limit
    /// under a burst: within a batch the solver charges every new NodeClaim its largest
    /// candidate instance type; across batches a NodeClaim counts its chosen instance type
    /// once planned — only one the lifecycle has not planned within [`CACHE_WAIT`] counts
    /// its pods' requests, and can overrun the limit by the rest of its instance.
    async fn await_cached(&self, names: &[String]) {
        let deadline = Instant::now() + CACHE_WAIT;
        // The cache, not the join: what a cache holds is in the next join read (see
        // `state`), and a lookup is not a rebuild.
        let claims = self.state.sources().nodeclaims.store();
        let refs: Vec<ObjectRef<NodeClaim>> = names.iter().map(|n| ObjectRef::new(n)).collect();
        while refs
            .iter()
            .any(|r| !claims.get(r).is_some_and(|c| charged(&c)))
        {
            if Instant::now() >= deadline {
                tracing::warn!(
                    "NodeClaim cache has not caught up after {}; the next batch may not see them",
                    api::duration::format_duration(CACHE_WAIT)
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Records an event on `pod` (written in the background: no caller waits for it).
    async fn event(&self, pod: &Pod, type_: EventType, reason: &str, note: String) {
        self.event_on(pod.object_ref(&()), type_, reason, note)
    }

    fn event_on(&self, reference: ObjectReference, type_: EventType, reason: &str, note: String) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(api::conditions::truncate(&note, 1024)),
            action: reason.into(),
            secondary: None,
        };
        self.recorder.record(event, reference);
    }
}

/// Whether a NodeClaim counts against its NodePool's limits at the size it will have: its
/// capacity is known (status), or its offering is chosen (the provider labelled it with one
/// instance type and capacity type, as a launch does before it creates anything), or it will
/// never launch (being deleted, `Launched=False`).
pub(crate) fn charged(c: &NodeClaim) -> bool {
    let labels = c.labels();
    let planned = labels.contains_key(scheduling::LABEL_INSTANCE_TYPE)
        && labels.contains_key(scheduling::LABEL_CAPACITY_TYPE);
    let status = c.status.as_ref();
    let sized = status.is_some_and(|s| !s.capacity.is_empty());
    let failed = status.is_some_and(|s| {
        api::conditions::get(&s.conditions, api::consts::conditions::LAUNCHED)
            .is_some_and(|l| l.status == api::conditions::FALSE)
    });
    planned || sized || failed || c.metadata.deletion_timestamp.is_some()
}

/// Longest wait for the NodeClaim cache to show the claims a batch created.
const CACHE_WAIT: Duration = Duration::from_secs(5);
/// The most NodeClaim creates of one batch in flight at once.
const PARALLEL_WRITES: usize = 32;

/// A count key's template name, source and limit.
/// What to say of each exhausted count, by the solver's count key, of the counted offerings
/// of the snapshot's catalogs (only when a pod failed on an exhausted count): the provider's
/// words, e.g. `template metal-large: 0 of 4 hosts available`.
fn count_notes(snapshot: &Snapshot, output: &scheduling::Output) -> HashMap<String, String> {
    let any = output.unschedulable.iter().any(|u| {
        u.failures
            .iter()
            .any(|(_, f)| matches!(f, scheduling::Failure::CountExhausted { .. }))
    });
    if !any {
        return HashMap::new();
    }
    let mut notes = HashMap::new();
    for catalog in snapshot.catalogs.values() {
        for o in catalog.instance_types.iter().flat_map(|it| &it.offerings) {
            if let Some(c) = &o.count {
                notes
                    .entry(c.key.clone())
                    .or_insert_with(|| c.exhausted.clone());
            }
        }
    }
    notes
}

/// The exhausted counts a pod failed on, in words (`template metal: 0 of 3 hosts
/// available`), from `notes` (see `count_notes`).
fn exhausted_notes(u: &scheduling::Unschedulable, notes: &HashMap<String, String>) -> Vec<String> {
    let mut out: Vec<String> = u
        .failures
        .iter()
        .filter_map(|(_, f)| match f {
            scheduling::Failure::CountExhausted { key, .. } => notes.get(key).cloned(),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What a provider tells the provisioner of its offerings: a counter that moves when their
/// availability may have changed (every pending pod is then planned again), and what to
/// call first when it moves (the provider's own bookkeeping, e.g. ending the backoff of an
/// offering whose host was freed).
#[derive(Clone, Default)]
pub struct OfferingChanges {
    pub changes: Option<tokio::sync::watch::Receiver<u64>>,
    pub seen: Option<Arc<dyn Fn() + Send + Sync>>,
}

/// Offers every pending pod of the cluster state to the batcher.
fn offer_pending(state: &ClusterState, batcher: &mut Batcher, now: Instant) {
    for p in state.current().pending() {
        if let Some(uid) = &p.metadata.uid {
            batcher.pod(uid, now);
        }
    }
}

/// Runs until `shutdown`: batches provisionable pods as their events arrive (see
/// [`batch`]: the window opens on the first new one, extends while more arrive within
/// `batch_idle`, closes at `batch_max`) and provisions the pending pods of the cluster
/// state. No event, no work: the loop sleeps until an event or the batcher's deadline.
pub async fn run(p: Provisioner, shutdown: impl std::future::Future<Output = ()> + Send) {
    tokio::pin!(shutdown);
    // Subscribed before the first read: no event between them is lost.
    let mut events = triggers(&p.state, p.offerings.changes.clone());
    let mut pools = PoolsSeen::new();
    let mut batcher = Batcher::new(p.batch_idle, p.batch_max);
    offer_pending(&p.state, &mut batcher, Instant::now());
    loop {
        let deadline = batcher.deadline();
        let sleep = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => return,
            t = events.next() => match t.map(|t| {
                if let (trigger::Trigger::Offerings, Some(seen)) = (&t, &p.offerings.seen) {
                    seen();
                }
                wake(&p.state, &mut pools, t)
            }) {
                Some(Wake::Pod(uid)) => batcher.pod(&uid, Instant::now()),
                Some(Wake::Capacity) => {
                    batcher.forget_handled();
                    offer_pending(&p.state, &mut batcher, Instant::now());
                }
                Some(Wake::Nothing) => {}
                None => return,
            },
            _ = sleep => {}
        }
        let now = Instant::now();
        if batcher.reconsider(now) {
            offer_pending(&p.state, &mut batcher, now);
        }
        if !batcher.close(now) {
            continue;
        }
        let pods = p.state.current().pending().to_vec();
        if pods.is_empty() {
            continue;
        }
        match p.provision(&pods).await {
            Ok(created) => {
                tracing::debug!(
                    pods = pods.len(),
                    created = created.len(),
                    "provisioned batch"
                )
            }
            Err(e) => tracing::warn!(error = %e, "provisioning batch failed"),
        }
        batcher.handled(
            pods.iter().filter_map(|p| p.metadata.uid.as_deref()),
            Instant::now(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_claim_is_charged_once_planned_sized_or_given_up() {
        let claim = |extra: serde_json::Value| -> NodeClaim {
            let mut v = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "c"},
                "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": []}});
            json_patch::merge(&mut v, &extra);
            serde_json::from_value(v).expect("fixture")
        };
        assert!(
            !charged(&claim(json!({}))),
            "just created: counts its requests only"
        );
        assert!(charged(&claim(
            json!({"metadata": {"labels": {"node.kubernetes.io/instance-type": "m",
                                           "karpenter.sh/capacity-type": "on-demand"}}})
        )));
        assert!(charged(&claim(
            json!({"status": {"capacity": {"cpu": "2"}}})
        )));
        assert!(charged(&claim(
            json!({"status": {"conditions": [{"type": "Launched",
            "status": "False", "reason": "LaunchFailed", "message": "",
            "lastTransitionTime": "2026-11-22T10:00:00Z"}]}})
        )));
        assert!(charged(&claim(
            json!({"metadata": {"deletionTimestamp": "2026-11-22T10:00:00Z", "finalizers": ["f"]}})
        )));
    }

    #[test]
    fn provisionable_follows_karpenter() {
        let unschedulable = json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
        let cases = [
            (
                json!({"metadata": {"name": "a"}, "status": unschedulable}),
                true,
            ),
            (
                json!({"metadata": {"name": "b"}, "spec": {"containers": [], "nodeName": "n1"}, "status": unschedulable}),
                false,
            ),
            (
                json!({"metadata": {"name": "c", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]}, "status": unschedulable}),
                false,
            ),
            (
                json!({"metadata": {"name": "d", "deletionTimestamp": "2026-11-22T10:00:00Z"}, "status": unschedulable}),
                false,
            ),
            (
                json!({"metadata": {"name": "e"}, "status": {"nominatedNodeName": "n2", "conditions": unschedulable["conditions"]}}),
                false,
            ),
            (
                json!({"metadata": {"name": "f"}, "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}}),
                false,
            ),
            (json!({"metadata": {"name": "g"}}), false),
        ];
        for (v, want) in cases {
            let pod: Pod = serde_json::from_value(v.clone()).expect("fixture");
            assert_eq!(provisionable(&pod), want, "{v}");
        }
    }
}
