//! Termination of a NodeClaim being deleted, as Karpenter's: record the termination time
//! (`karpenter.sh/nodeclaim-termination-timestamp` = deletionTimestamp +
//! `spec.terminationGracePeriod`), drain the Node (`Drained`, see [`super::drain`]), then
//! `InstanceTerminating=True` and delete the instance through the provider until it is gone
//! (the Cluster API provider deletes the Machine with Cluster API's own drain excluded:
//! Cluster API then waits for volumes to detach, deletes the InfraMachine, the bootstrap
//! config and the Node), release our finalizer on the Node, then release the NodeClaim's
//! finalizer. A NotReady Node whose instance is gone is not drained (its pods cannot leave
//! through a kubelet). The drain honours the provider's drain rules
//! ([`cloudprovider::CloudProvider::drain_rules`]: for Cluster API, its MachineDrainRules and
//! its drain pod label), since Cluster API's own drain does not run.

use std::time::Duration;

use api::NodeClaim;
use api::consts::annotations::NODECLAIM_TERMINATION_TIMESTAMP;
use api::consts::{conditions as types, reasons};
use api::karpenter::NodeClaimStatus;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::context::{Ctx, Error, set_ready, uid_of};
use super::drain::{Drainer, MIN_DRAIN_TIME, Progress};
use super::labels::nodepool_of;
use crate::metrics::TerminatedLabels;
use crate::objects::{annotation, node_ready};
use crate::write::{Outcome, Refused, Writer, manager};
use cloudprovider::{Deletion, Error as ProviderError};

/// Termination's result: done (finalizer released) or look again later.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Termination {
    Done,
    Waiting(Duration),
}

/// Removes our finalizer from a Node (and deletes it if it is still there).
async fn release_node(ctx: &Ctx, name: &str) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(ctx.workload.clone());
    let Some(node) = nodes.get_opt(name).await? else {
        return Ok(());
    };
    let finalizers: Vec<String> = node
        .finalizers()
        .iter()
        .filter(|f| *f != api::consts::finalizers::TERMINATION)
        .cloned()
        .collect();
    let writer = Writer::new(nodes, manager::TERMINATION);
    if finalizers.len() != node.finalizers().len() {
        let out = writer
            .patch(&node, json!({"metadata": {"finalizers": finalizers}}))
            .await?;
        if out == Outcome::Gone {
            return Ok(());
        }
        if out == Outcome::Conflict {
            return Err(Refused::Conflict(format!("Node {name}")).into());
        }
    }
    if node.metadata.deletion_timestamp.is_none() {
        // Gone already, or replaced meanwhile (a Node re-registered under the name): done.
        writer.delete(&node).await?;
    }
    Ok(())
}

/// The time `spec.terminationGracePeriod` gives a deleted claim: deletionTimestamp + it, to
/// the second (as Karpenter writes it, RFC 3339).
fn termination_time_of(claim: &NodeClaim) -> Option<Timestamp> {
    let tgp = claim.spec.termination_grace_period.as_deref()?;
    let tgp = SignedDuration::try_from(api::duration::parse_duration(tgp)?).ok()?;
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let at = deleted.checked_add(tgp).ok()?;
    Timestamp::from_second(at.as_second()).ok()
}

/// The claim's termination time: its annotation (also set by others, e.g. a forceful
/// repair), else what its terminationGracePeriod gives; none: the drain is unbounded.
pub(crate) fn termination_time(claim: &NodeClaim) -> Option<Timestamp> {
    match annotation(claim, NODECLAIM_TERMINATION_TIMESTAMP) {
        Some(v) => v.parse().ok().or_else(|| {
            tracing::warn!(nodeclaim = %claim.name_any(), value = v,
                "unreadable {NODECLAIM_TERMINATION_TIMESTAMP}; using terminationGracePeriod");
            termination_time_of(claim)
        }),
        None => termination_time_of(claim),
    }
}

/// Records the termination time on the claim (once), with a `TerminationGracePeriodExpiring`
/// event: the written claim, or None when there is nothing to record.
async fn record_termination_time(ctx: &Ctx, claim: &NodeClaim) -> Result<Option<NodeClaim>, Error> {
    if annotation(claim, NODECLAIM_TERMINATION_TIMESTAMP).is_some() {
        return Ok(None);
    }
    let Some(at) = termination_time_of(claim) else {
        return Ok(None);
    };
    let fresh = ctx
        .patch_claim(
            claim,
            json!({"annotations": {NODECLAIM_TERMINATION_TIMESTAMP: at.to_string()}}),
        )
        .await?;
    ctx.event(
        claim,
        EventType::Warning,
        api::consts::events::TERMINATION_GRACE_PERIOD_EXPIRING,
        format!("All pods will be deleted by {at}"),
    )
    .await;
    Ok(Some(fresh))
}

/// Why the claim's pods are evicted (their `Evicted` events): its disruption reason, else
/// Karpenter's "Forceful Termination".
fn eviction_reason(status: &NodeClaimStatus) -> &str {
    api::conditions::get(&status.conditions, types::DISRUPTION_REASON)
        .filter(|c| c.status == api::conditions::TRUE)
        .map_or("Forceful Termination", |c| c.reason.as_str())
}

/// How long to wait before the next pass of a drain that is not done: 1 s after a pass that
/// moved a pod, else backing off (1 s, 2 s, 4 s, … at most 10 s, as Karpenter's eviction
/// queue: a PDB that allows nothing is not asked every second).
const DRAIN_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn drain_key(claim: &NodeClaim) -> String {
    format!("drain/{}", uid_of(claim))
}

/// The drain step: None when the Node is drained (or there is none to drain), else how long
/// to wait. `status` gets `Drained` (Unknown while draining, True once done).
async fn drain(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &mut NodeClaimStatus,
) -> Result<Option<std::time::Duration>, Error> {
    if api::conditions::is_true(&status.conditions, types::DRAINED) {
        return Ok(None);
    }
    let Some(node) = status
        .node_name
        .as_ref()
        .and_then(|n| ctx.nodes.store().get(&ObjectRef::new(n)))
    else {
        return Ok(None);
    };
    // An empty pod cache before its first list is no drained Node (hub mode starts the pod
    // watch of a workload cluster lazily).
    if !matches!(ctx.pods.wait_until_ready().now_or_never(), Some(Ok(()))) {
        return Ok(Some(crate::nodeclaim::context::Backoff::FIRST));
    }
    let ready = node_ready(&node);
    if !ready {
        match ctx.provider.get(claim).await {
            Err(ProviderError::NodeClaimNotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
    }
    if ctx.expectations.writes.stale_object(node.as_ref()) {
        // Our last write to the Node (its taint) is not cached yet: decide on it next time.
        return Ok(Some(crate::nodeclaim::context::Backoff::FIRST));
    }
    let drainer = Drainer {
        client: &ctx.workload,
        recorder: &ctx.recorder,
        metrics: &ctx.metrics,
        pods: &ctx.pods,
        writes: &ctx.expectations.writes,
    };
    drainer.taint(&node).await?;
    let now = Timestamp::now();
    if api::conditions::get(&status.conditions, types::DRAINED).is_none() {
        api::conditions::set(
            &mut status.conditions,
            types::DRAINED,
            api::conditions::UNKNOWN,
            reasons::DRAINING,
            reasons::DRAINING,
            None,
            now,
        );
    }
    let deadline = termination_time(claim);
    if let Some(at) = deadline {
        ctx.event_for(
            node.as_ref(),
            EventType::Warning,
            api::consts::events::TERMINATION_GRACE_PERIOD_EXPIRING,
            format!("All pods will be deleted by {at}"),
        )
        .await;
    }
    let key = drain_key(claim);
    let reason = eviction_reason(status).to_string();
    // The provider's drain rules (for Cluster API: the MachineDrainRules selecting the
    // Machine), read on every pass: a rule written meanwhile applies to the pods left.
    let rules = ctx.provider.drain_rules(claim)?;
    match drainer
        .drain_with(&node, &rules, deadline, &reason, now)
        .await?
    {
        Progress::Waiting { moved: true, .. } => {
            ctx.backoff.succeeded(&key);
            return Ok(Some(crate::nodeclaim::context::Backoff::FIRST));
        }
        Progress::Waiting { .. } => return Ok(Some(ctx.backoff.failed(&key).min(DRAIN_MAX_WAIT))),
        Progress::Drained => ctx.backoff.succeeded(&key),
    }
    // Pods bound before the scheduler saw the taint are caught: a Ready Node is drained for
    // at least MIN_DRAIN_TIME (a NotReady one starts no pod).
    let started = api::conditions::get(&status.conditions, types::DRAINED)
        .map_or(now, |c| c.last_transition_time.0);
    let elapsed = now.duration_since(started);
    let min = SignedDuration::try_from(MIN_DRAIN_TIME).unwrap_or_default();
    if ready && elapsed < min {
        let left = (min - elapsed).unsigned_abs();
        return Ok(Some(left));
    }
    api::conditions::set(
        &mut status.conditions,
        types::DRAINED,
        api::conditions::TRUE,
        types::DRAINED,
        "",
        None,
        now,
    );
    Ok(None)
}

pub(crate) async fn reconcile(ctx: &Ctx, claim: &NodeClaim) -> Result<Termination, Error> {
    let name = claim.name_any();
    let uid = uid_of(claim);
    let recorded = record_termination_time(ctx, claim).await?;
    let claim = recorded.as_ref().unwrap_or(claim);
    let mut status = claim.status.clone().unwrap_or_default();
    if let Some(wait) = drain(ctx, claim, &mut status).await? {
        ctx.write_status_returning(claim, &status).await?;
        return Ok(Termination::Waiting(wait));
    }
    if !api::conditions::is_true(&status.conditions, types::INSTANCE_TERMINATING) {
        api::conditions::set(
            &mut status.conditions,
            types::INSTANCE_TERMINATING,
            api::conditions::TRUE,
            reasons::INSTANCE_TERMINATING,
            "",
            None,
            Timestamp::now(),
        );
        set_ready(&mut status.conditions);
    }
    // One status write: Drained and InstanceTerminating together.
    let fresh = ctx.write_status_returning(claim, &status).await?;
    // Later writes of this step are computed from our own last one.
    let claim = fresh.as_ref().unwrap_or(claim);
    if let Deletion::Waiting(wait) = ctx.provider.delete(claim).await? {
        return Ok(Termination::Waiting(wait));
    }
    if let Some(node) = &status.node_name {
        release_node(ctx, node).await?;
    }
    // Release the NodeClaim's finalizer (conditional on the version we read).
    let finalizers: Vec<String> = claim
        .finalizers()
        .iter()
        .filter(|f| *f != api::consts::finalizers::TERMINATION)
        .cloned()
        .collect();
    ctx.patch_claim(claim, json!({"finalizers": finalizers}))
        .await?;
    ctx.expectations.forget(&uid);
    let nodepool = nodepool_of(claim);
    ctx.metrics
        .nodeclaims_terminated
        .get_or_create(&TerminatedLabels {
            nodepool: nodepool.clone(),
            capacity_type: super::labels::capacity_type_of(claim),
            zone: super::labels::zone_of(claim),
        })
        .inc();
    if status.node_name.is_some() {
        ctx.metrics
            .nodes_terminated
            .get_or_create(&crate::metrics::NodeLabels {
                nodepool,
                zone: super::labels::zone_of(claim),
            })
            .inc();
    }
    tracing::info!(nodeclaim = %name, "terminated");
    Ok(Termination::Done)
}
