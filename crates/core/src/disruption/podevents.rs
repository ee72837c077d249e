//! `status.lastPodEventTime` of NodeClaims, as Karpenter keeps it: the last time a
//! non-DaemonSet pod was bound to the claim's Node, finished, or started terminating (its
//! deletion was requested). It is
//! what `consolidateAfter` counts from. Times come from the pods (PodScheduled transition,
//! deletionTimestamp, Ready transition), so replays and resyncs write nothing; a write moves
//! the time forward by at least [`DEDUPE`] from the later of the cached time and our own last
//! write (the pods of a node often start terminating together, faster than the cache sees our
//! write). NodeClaims being deleted get no writes: no method considers them any more.

use std::sync::Arc;
use std::time::Duration;

use api::consts::conditions as types;
use api::karpenter::NodeClaimStatus;
use api::{NodeClaim, NodePool};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use super::claim_writes::ClaimWrites;
use crate::cache::Cache;
use crate::objects::{claim_node_name, deleting, owned_by, pod_node_name, terminal};
use crate::write::{Outcome, Writer, manager};

/// Events closer than this to the recorded one are not written (Karpenter: 10 s).
pub(crate) const DEDUPE: Duration = Duration::from_secs(10);

fn transition(pod: &Pod, type_: &str, status: &str) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// The time of a pod's last event that counts, and the Node it concerns: terminating
/// (deletionTimestamp), finished (Ready turning False), else bound (PodScheduled True, else
/// its start). DaemonSet and unbound pods have none.
pub(crate) fn pod_event(pod: &Pod) -> Option<(&str, Timestamp)> {
    let node = pod_node_name(pod)?;
    if owned_by(pod, &["DaemonSet"]) {
        return None;
    }
    let at = if deleting(pod) {
        // The deletion request: deletionTimestamp is when the grace period ends (later).
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        pod.metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0 - SignedDuration::from_secs(grace.max(0)))
    } else if terminal(pod) {
        transition(pod, "Ready", "False")
    } else {
        transition(pod, "PodScheduled", "True")
            .or_else(|| pod.status.as_ref()?.start_time.as_ref().map(|t| t.0))
    }?;
    Some((node, at))
}

/// The new `lastPodEventTime` if `at` is at least [`DEDUPE`] after the recorded one.
pub(crate) fn advance(recorded: Option<Timestamp>, at: Timestamp) -> Option<Timestamp> {
    let dedupe = SignedDuration::try_from(DEDUPE).ok()?;
    match recorded {
        Some(r) if at.duration_since(r) < dedupe => None,
        _ => Some(at),
    }
}

/// The claim's status after a pod event at `next`, when that also ends its `Consolidatable`
/// condition (`consolidateAfter` counts again from `next`): one write instead of ours plus
/// the disruption pass's. `None` when the condition stays as it is.
pub(crate) fn ending_consolidatable(
    claim: &NodeClaim,
    pools: &[Arc<NodePool>],
    next: Timestamp,
    now: Timestamp,
) -> Option<NodeClaimStatus> {
    let mut status = claim.status.clone()?;
    api::conditions::get(&status.conditions, types::CONSOLIDATABLE)?;
    status.last_pod_event_time = Some(Time(next));
    let mut after = claim.clone();
    after.status = Some(status.clone());
    if super::candidates::consolidatable(&after, pools, now) == Some(true) {
        return None;
    }
    api::conditions::remove(&mut status.conditions, types::CONSOLIDATABLE);
    Some(status)
}

/// Follows pod changes until `shutdown`.
pub(crate) async fn run(
    client: kube::Client,
    pods: Cache<Pod>,
    nodeclaims: Store<NodeClaim>,
    nodepools: Store<NodePool>,
    written: Arc<ClaimWrites>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let writer: Writer<NodeClaim> = Writer::new(Api::all(client), manager::POD_EVENTS);
    // Read-your-writes ahead of the cache: the NodeClaims our writes and the disruption pass's
    // returned; one write at a time per claim with that pass (`ClaimWrites`).
    let events = pods.subscribe();
    futures::pin_mut!(events);
    tokio::pin!(shutdown);
    loop {
        let pod = tokio::select! {
            _ = &mut shutdown => return,
            p = events.next() => match p { Some(p) => p, None => return },
        };
        let Some((node, at)) = pod_event(&pod) else {
            continue;
        };
        let claims = nodeclaims.state();
        let Some(claim) = claims
            .iter()
            .find(|c| claim_node_name(c) == Some(node) && !deleting(c.as_ref()))
        else {
            continue;
        };
        // Our turn, then the claim as it is now (the cache may have moved while we waited).
        let _turn = written.turn(claim).await;
        let Some(claim) = nodeclaims.get(&ObjectRef::from_obj(claim.as_ref())) else {
            continue;
        };
        let claim = &written.latest(&claim);
        if deleting(claim.as_ref()) {
            // Deleted by the disruption loop since the cache's copy: no method considers it.
            continue;
        }
        // Without a recorded pod event, consolidation counts from initialization: a pod
        // bound within the dedupe window of it (the usual first pods) needs no write.
        let status = claim.status.as_ref();
        let recorded = status
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(|t| t.0)
            .or_else(|| {
                status?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == api::consts::conditions::INITIALIZED && c.status == "True")
                    .map(|c| c.last_transition_time.0)
            });
        let Some(next) = advance(recorded, at) else {
            continue;
        };
        let result = match ending_consolidatable(claim, &nodepools.state(), next, Timestamp::now())
        {
            // The condition goes too, in one JSON patch guarded by the entry's position (the
            // disruption pass's message writes do not make it stale); on a conflict, the time
            // alone below (the disruption pass then clears it).
            Some(status) => {
                let ops = super::status::condition_ops(claim, &status.conditions).and_then(|mut ops| {
                    ops.push(json!({"op": "add", "path": "/status/lastPodEventTime", "value": Time(next)}));
                    super::status::json_patch(ops)
                });
                let written = match ops {
                    Some(ops) => writer.json_patch_status(claim, ops).await,
                    None => {
                        let status = json!({"lastPodEventTime": Time(next), "conditions": status.conditions});
                        writer.patch_status(claim, status).await
                    }
                };
                match written {
                    Ok(Outcome::Conflict) => apply_time(&writer, claim, next).await,
                    other => other,
                }
            }
            None => apply_time(&writer, claim, next).await,
        };
        match result.map(Outcome::written) {
            Ok(Some(after)) => {
                if written.len() > 2 * claims.len() + 16 {
                    written.retain(|u| claims.iter().any(|c| c.metadata.uid.as_deref() == Some(u)));
                }
                written.wrote(after);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(nodeclaim = %claim.name_any(), error = %e, "writing lastPodEventTime failed")
            }
        }
    }
}

/// A server-side apply of the one field only this loop owns: it never conflicts with the
/// lifecycle's or disruption's status writes (which carry their resourceVersion), and it only
/// ever moves the time forward from what the pods say.
async fn apply_time(
    writer: &Writer<NodeClaim>,
    claim: &NodeClaim,
    next: Timestamp,
) -> kube::Result<Outcome<NodeClaim>> {
    let patch = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "status": {"lastPodEventTime": Time(next)},
    });
    writer.apply_status(&claim.name_any(), patch).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("ts")
    }

    #[test]
    fn pod_events_come_from_the_pod_and_advance_by_at_least_ten_seconds() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "d"},
            "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": "Running", "startTime": "2026-11-22T10:00:05Z",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
        .expect("pod");
        assert_eq!(pod_event(&pod), Some(("n", at("2026-11-22T10:00:00Z"))));
        pod.metadata.deletion_timestamp = Some(Time(at("2026-11-22T10:05:00Z")));
        assert_eq!(pod_event(&pod), Some(("n", at("2026-11-22T10:05:00Z"))));
        pod.metadata.deletion_grace_period_seconds = Some(30);
        assert_eq!(
            pod_event(&pod),
            Some(("n", at("2026-11-22T10:04:30Z"))),
            "terminating counts from the deletion request, not the end of the grace period"
        );
        pod.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}),
            )
            .expect("owner"),
        ]);
        assert_eq!(pod_event(&pod), None, "DaemonSet pods do not count");
        let t = at("2026-11-22T10:00:00Z");
        assert_eq!(advance(None, t), Some(t));
        assert_eq!(advance(Some(t), at("2026-11-22T10:00:09Z")), None);
        assert_eq!(
            advance(Some(t), at("2026-11-22T09:00:00Z")),
            None,
            "never backwards"
        );
        assert_eq!(
            advance(Some(t), at("2026-11-22T10:00:10Z")),
            Some(at("2026-11-22T10:00:10Z"))
        );
    }
}
