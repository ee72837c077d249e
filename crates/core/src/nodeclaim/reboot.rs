//! Reboot, a repair action (Karpenter v1.15's `RebootNode`): a NodeClaim whose Node matches a
//! repair policy with action `RebootNode` is rebooted in place through the provider
//! (`CloudProvider::reboot`) instead of replaced. The NodeClaim's `Rebooting` condition is
//! the state, so every step survives a restart:
//!
//! 1. **requested** (`Rebooting=True`, reason `RebootRequested`, and `DisruptionReason=True`
//!    `Unhealthy`; the policy's termination grace period in
//!    `karpenter.sh/reboot-termination-grace-period`): the Node is tainted
//!    `karpenter.sh/rebooting:NoSchedule` and drained until its pods left or the grace period
//!    ran out (the rest ride the reboot; `0`: no drain; none: unbounded); its `bootID` is
//!    recorded in `karpenter.sh/reboot-pre-boot-id`, then the provider is asked once per
//!    operation (`<uid>-<requested at, unix ns>-<pre-boot ID>`);
//! 2. **issued** (`RebootIssued`; `Initialized=Unknown`, reason `Rebooting`; the Node's
//!    `karpenter.sh/initialized` label removed): the reboot is observed when the Node reports
//!    another `bootID` (`RebootObserved` event, taint removed) and done when it is also Ready
//!    (`Rebooting=False`, `RebootSucceeded`); initialization then runs again;
//! 3. **failed** (`Rebooting=False`, `RebootFailed`): the provider cannot reboot
//!    (`RebootNotImplemented`, `RebootFailed`, or no acceptance within 5 minutes) or the
//!    Node did not come back within 20 minutes: the NodeClaim is deleted and replaced. An
//!    invalid grace period annotation fails without replacing.
//!
//! While rebooting, the NodeClaim is no candidate of any other disruption and counts against
//! every disruption budget. A NodeClaim rebooted twice within 24 hours is replaced the third
//! time (this process's memory). Metrics: `karpenter_nodes_reboots_total{result}`,
//! `karpenter_nodes_reboot_duration_seconds{result}`,
//! `karpenter_nodes_reboot_recovery_duration_seconds`.

use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::consts::{annotations, conditions as types, events, labels, reasons, taints};
use api::karpenter::NodeClaimStatus;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::context::{Ctx, Error, set_condition as set};
use super::repair::Matched;
use crate::write::{Writer, manager};

/// How long the provider has to accept a reboot after it was requested.
pub(crate) const ISSUE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a rebooted Node has to come back.
pub(crate) const RECOVERY_TIMEOUT: Duration = Duration::from_secs(1200);
/// How soon a reboot in progress is looked at again without a trigger.
const POLL: Duration = Duration::from_secs(5);

/// Records the request to reboot `claim` for `m` (repair decided; the cap and budget
/// admitted it): the grace period annotation (`claim` becomes the written object), then
/// `Rebooting=True` in `status`, for the lifecycle to write.
pub(crate) async fn request(
    ctx: &Ctx,
    claim: &mut Arc<NodeClaim>,
    status: &mut NodeClaimStatus,
    m: &Matched,
) -> Result<(), Error> {
    let want = m.grace.map(api::duration::format_duration);
    let have =
        crate::objects::annotation(claim.as_ref(), annotations::REBOOT_TERMINATION_GRACE_PERIOD);
    if want.as_deref() != have {
        *claim = Arc::new(
            ctx.patch_claim(
                claim,
                json!({"annotations": {annotations::REBOOT_TERMINATION_GRACE_PERIOD: want}}),
            )
            .await?,
        );
    }
    let message = format!("rebooting for {}", m.unhealthy.detail);
    set(
        status,
        types::REBOOTING,
        api::conditions::TRUE,
        reasons::REBOOT_REQUESTED,
        &message,
    );
    set(
        status,
        types::DISRUPTION_REASON,
        api::conditions::TRUE,
        reasons::UNHEALTHY,
        &message,
    );
    ctx.reboots
        .record(&crate::objects::uid_of(claim.as_ref()), Timestamp::now());
    tracing::info!(nodeclaim = %claim.name_any(), condition = %m.unhealthy.detail, "reboot requested");
    ctx.event(claim, EventType::Warning, events::REBOOT_REQUESTED, message)
        .await;
    Ok(())
}

/// What a reconcile of a rebooting NodeClaim came to.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// In progress (status updated); look again after this long.
    Waiting(Duration),
    /// Over (succeeded, or failed without replacement): the lifecycle goes on.
    Done,
    /// Failed: the NodeClaim was deleted (replaced).
    Deleted,
}

/// One step of a NodeClaim whose `Rebooting` is True; `claim` becomes what this step wrote,
/// and `status` what the lifecycle writes.
pub(crate) async fn reconcile(
    ctx: &Ctx,
    claim: &mut Arc<NodeClaim>,
    status: &mut NodeClaimStatus,
) -> Result<Step, Error> {
    let Some(c) = api::conditions::get(&status.conditions, types::REBOOTING).cloned() else {
        return Ok(Step::Done);
    };
    let since = c.last_transition_time.0;
    let now = Timestamp::now();
    let node = status
        .node_name
        .as_ref()
        .and_then(|n| ctx.nodes.store().get(&ObjectRef::new(n)));
    if c.reason == reasons::REBOOT_ISSUED {
        return observe(ctx, claim, status, node.as_deref(), since, now).await;
    }
    requested(ctx, claim, status, node, since, now).await
}

/// The `RebootRequested` step: taint, drain, record the boot ID, ask the provider.
async fn requested(
    ctx: &Ctx,
    claim: &mut Arc<NodeClaim>,
    status: &mut NodeClaimStatus,
    node: Option<Arc<Node>>,
    since: Timestamp,
    now: Timestamp,
) -> Result<Step, Error> {
    let grace = match crate::objects::annotation(
        claim.as_ref(),
        annotations::REBOOT_TERMINATION_GRACE_PERIOD,
    ) {
        None => None,
        Some(text) => match api::duration::parse_duration(text) {
            Some(d) => Some(d),
            None => {
                let why = format!(
                    "invalid {} \"{text}\": not a duration such as 30s or 5m",
                    annotations::REBOOT_TERMINATION_GRACE_PERIOD
                );
                return fail(ctx, claim, status, node.as_deref(), "invalid_request", &why).await;
            }
        },
    };
    if elapsed(since, now) > ISSUE_TIMEOUT {
        let why = format!(
            "the reboot was not issued within {}",
            api::duration::format_duration(ISSUE_TIMEOUT)
        );
        return fail(ctx, claim, status, node.as_deref(), "provider_error", &why).await;
    }
    let Some(node) = node else {
        return Ok(Step::Waiting(POLL));
    };
    if ctx.expectations.writes.stale_object(node.as_ref()) {
        return Ok(Step::Waiting(POLL));
    }
    if !has_taint(&node) {
        patch_node(
            ctx,
            &node,
            json!({"spec": {"taints": with_taint(&node, true)}}),
        )
        .await?;
        return Ok(Step::Waiting(Duration::from_millis(200)));
    }
    let boot_id = boot_id(&node);
    let pre = crate::objects::annotation(claim.as_ref(), annotations::REBOOT_PRE_BOOT_ID);
    if let Some(pre) = pre
        && pre != boot_id
    {
        // Rebooted already (a restart between the reboot and its record).
        issued(ctx, status, &node).await?;
        return Ok(Step::Waiting(POLL));
    }
    if let Some(wait) = drain(ctx, claim, &node, since, grace, now).await? {
        return Ok(Step::Waiting(wait));
    }
    if pre != Some(boot_id.as_str()) {
        // Intent before the side effect: a restart after the reboot sees the boot ID change.
        *claim = Arc::new(
            ctx.patch_claim(
                claim,
                json!({"annotations": {annotations::REBOOT_PRE_BOOT_ID: boot_id}}),
            )
            .await?,
        );
    }
    let operation = format!(
        "{}-{}-{boot_id}",
        crate::objects::uid_of(claim.as_ref()),
        since.as_nanosecond()
    );
    match ctx.provider.reboot(claim, &operation).await {
        Ok(()) => {
            tracing::info!(nodeclaim = %claim.name_any(), %operation, "reboot issued");
            issued(ctx, status, &node).await?;
            Ok(Step::Waiting(POLL))
        }
        // No instance to reboot is a reboot that cannot succeed either.
        Err(
            e @ (cloudprovider::Error::RebootNotImplemented(_)
            | cloudprovider::Error::RebootFailed(_)
            | cloudprovider::Error::NodeClaimNotFound(_)),
        ) => {
            fail(
                ctx,
                claim,
                status,
                Some(&node),
                "provider_error",
                &e.to_string(),
            )
            .await
        }
        Err(e) => Err(e.into()),
    }
}

/// Drains the Node for the reboot, bounded by the grace period from `since`: `None` when
/// done (drained, out of time, or no drain asked), else how long to wait.
async fn drain(
    ctx: &Ctx,
    claim: &NodeClaim,
    node: &Node,
    since: Timestamp,
    grace: Option<Duration>,
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    if grace.is_some_and(|g| elapsed(since, now) >= g) {
        return Ok(None);
    }
    let drainer = super::drain::Drainer {
        client: &ctx.workload,
        recorder: &ctx.recorder,
        metrics: &ctx.metrics,
        pods: &ctx.pods,
        writes: &ctx.expectations.writes,
    };
    // No deadline: past the grace period the remaining pods are left to the reboot, never
    // deleted.
    // The provider's drain rules (for Cluster API, MachineDrainRules) apply here too.
    let rules = ctx.provider.drain_rules(claim)?;
    let progress = drainer
        .drain_with(node, &rules, None, "reboot", now)
        .await?;
    let min = super::drain::MIN_DRAIN_TIME;
    match progress {
        super::drain::Progress::Drained if elapsed(since, now) >= min => Ok(None),
        super::drain::Progress::Drained => Ok(Some(min)),
        super::drain::Progress::Waiting { .. } => {
            tracing::debug!(nodeclaim = %claim.name_any(), "draining for reboot");
            Ok(Some(Duration::from_secs(1)))
        }
    }
}

/// The provider accepted the reboot: `RebootIssued`, `Initialized=Unknown` and the Node's
/// initialized label removed.
async fn issued(ctx: &Ctx, status: &mut NodeClaimStatus, node: &Node) -> Result<(), Error> {
    set(
        status,
        types::REBOOTING,
        api::conditions::TRUE,
        reasons::REBOOT_ISSUED,
        "the provider accepted the reboot; waiting for the Node to boot again",
    );
    set(
        status,
        types::INITIALIZED,
        api::conditions::UNKNOWN,
        reasons::REBOOTING,
        "the Node is rebooting",
    );
    if node.labels().contains_key(labels::INITIALIZED) {
        patch_node(
            ctx,
            node,
            json!({"metadata": {"labels": {labels::INITIALIZED: null}}}),
        )
        .await?;
    }
    Ok(())
}

/// Waits for the rebooted Node: a new `bootID` (taint removed), then Ready.
async fn observe(
    ctx: &Ctx,
    claim: &mut Arc<NodeClaim>,
    status: &mut NodeClaimStatus,
    node: Option<&Node>,
    issued_at: Timestamp,
    now: Timestamp,
) -> Result<Step, Error> {
    let pre = crate::objects::annotation(claim.as_ref(), annotations::REBOOT_PRE_BOOT_ID);
    let rebooted = node.filter(|n| pre.is_some_and(|p| p != boot_id(n)));
    let Some(node) = rebooted else {
        if elapsed(issued_at, now) > RECOVERY_TIMEOUT {
            let why = format!(
                "the Node did not boot again within {}",
                api::duration::format_duration(RECOVERY_TIMEOUT)
            );
            return fail(ctx, claim, status, node, "recovery_timeout", &why).await;
        }
        return Ok(Step::Waiting(POLL));
    };
    if has_taint(node) {
        if ctx.expectations.writes.stale_object(node) {
            return Ok(Step::Waiting(POLL));
        }
        patch_node(
            ctx,
            node,
            json!({"spec": {"taints": with_taint(node, false)}}),
        )
        .await?;
        ctx.event(
            claim,
            EventType::Normal,
            events::REBOOT_OBSERVED,
            format!(
                "Node {} booted again (boot ID {})",
                node.name_any(),
                boot_id(node)
            ),
        )
        .await;
    }
    if !super::node_sync::node_ready(node) {
        if elapsed(issued_at, now) > RECOVERY_TIMEOUT {
            let why = "the Node booted again but did not become Ready in time";
            return fail(ctx, claim, status, Some(node), "recovery_timeout", why).await;
        }
        return Ok(Step::Waiting(POLL));
    }
    *claim = Arc::new(
        ctx.patch_claim(
            claim,
            json!({"annotations": {annotations::REBOOT_PRE_BOOT_ID: null}}),
        )
        .await?,
    );
    set(
        status,
        types::REBOOTING,
        api::conditions::FALSE,
        reasons::REBOOT_SUCCEEDED,
        &format!("Node {} rebooted and is Ready", node.name_any()),
    );
    if let Some(requested) = requested_at(claim) {
        observe_duration(ctx, "succeeded", requested, now);
    }
    ctx.metrics
        .reboot_recovery
        .get_or_create(&crate::metrics::NoLabels {})
        .observe(elapsed(issued_at, now).as_secs_f64());
    count(ctx, "succeeded");
    tracing::info!(nodeclaim = %claim.name_any(), "reboot succeeded");
    Ok(Step::Done)
}

/// The reboot failed (`result`, the metric's): `Rebooting=False`, `RebootFailed`, the taint
/// removed, and, unless the request itself was invalid, the NodeClaim deleted (replaced).
async fn fail(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &mut NodeClaimStatus,
    node: Option<&Node>,
    result: &str,
    why: &str,
) -> Result<Step, Error> {
    set(
        status,
        types::REBOOTING,
        api::conditions::FALSE,
        reasons::REBOOT_FAILED,
        why,
    );
    let replace = result != "invalid_request";
    let mut tightened = None;
    if replace {
        // The replacement's drain gets the reboot's grace period from now, as Karpenter
        // tightens the termination time (never loosened).
        if let Some(at) = tightened_termination(claim, Timestamp::now()) {
            tightened = Some(
                ctx.patch_claim(
                    claim,
                    json!({"annotations": {annotations::NODECLAIM_TERMINATION_TIMESTAMP: at.to_string()}}),
                )
                .await?,
            );
        }
        // Recorded before the deletion; otherwise the lifecycle writes it.
        ctx.write_status(tightened.as_ref().unwrap_or(claim), status)
            .await?;
    }
    let claim = tightened.as_ref().unwrap_or(claim);
    if let Some(node) = node.filter(|n| has_taint(n)) {
        patch_node(
            ctx,
            node,
            json!({"spec": {"taints": with_taint(node, false)}}),
        )
        .await?;
    }
    let message = if replace {
        format!("reboot failed: {why}; replacing the Node")
    } else {
        format!("reboot failed: {why}")
    };
    tracing::info!(nodeclaim = %claim.name_any(), result, %message, "reboot failed");
    ctx.event(claim, EventType::Warning, events::REBOOT_FAILED, message)
        .await;
    if let Some(requested) = requested_at(claim) {
        observe_duration(ctx, result, requested, Timestamp::now());
    }
    count(ctx, result);
    if !replace {
        return Ok(Step::Done);
    }
    ctx.delete_claim(claim).await?;
    Ok(Step::Deleted)
}

/// The termination time a failed reboot gives the replaced claim: now plus the reboot's grace
/// period, when that is earlier than the time it already has (`None`: no grace period, or no
/// tighter).
fn tightened_termination(claim: &NodeClaim, now: Timestamp) -> Option<Timestamp> {
    let grace = crate::objects::annotation(claim, annotations::REBOOT_TERMINATION_GRACE_PERIOD)
        .and_then(api::duration::parse_duration)
        .and_then(|g| k8s_openapi::jiff::SignedDuration::try_from(g).ok())?;
    let at = Timestamp::from_second(now.checked_add(grace).ok()?.as_second()).ok()?;
    match super::termination::termination_time(claim) {
        Some(t) if t <= at => None,
        _ => Some(at),
    }
}

fn count(ctx: &Ctx, result: &str) {
    ctx.metrics
        .reboots
        .get_or_create(&crate::metrics::ResultLabels {
            result: result.to_string(),
        })
        .inc();
}

fn observe_duration(ctx: &Ctx, result: &str, from: Timestamp, to: Timestamp) {
    ctx.metrics
        .reboot_duration
        .get_or_create(&crate::metrics::ResultLabels {
            result: result.to_string(),
        })
        .observe(elapsed(from, to).as_secs_f64());
}

/// When the reboot was requested: the `DisruptionReason` transition it set.
fn requested_at(claim: &NodeClaim) -> Option<Timestamp> {
    let c = api::conditions::get(&claim.status.as_ref()?.conditions, types::DISRUPTION_REASON)?;
    Some(c.last_transition_time.0)
}

fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    Duration::from_secs_f64(to.duration_since(from).as_secs_f64().max(0.0))
}

fn boot_id(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .unwrap_or_default()
}

fn rebooting_taint() -> Taint {
    Taint {
        key: taints::REBOOTING.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    }
}

fn has_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == taints::REBOOTING))
}

/// The Node's taints with the rebooting taint (`want`) or without it.
fn with_taint(node: &Node, want: bool) -> Vec<Taint> {
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    super::outdated::retainted(&current, &rebooting_taint(), want).unwrap_or(current)
}

/// A merge patch of the Node, conditional on the resourceVersion it was read at.
async fn patch_node(ctx: &Ctx, node: &Node, body: serde_json::Value) -> Result<(), Error> {
    Writer::new(Api::<Node>::all(ctx.workload.clone()), manager::LIFECYCLE)
        .expecting(ctx.expectations.writes.clone())
        .patch(node, body)
        .await?
        .required(format!("Node {}", node.name_any()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(annotations: &[(&str, &str)]) -> NodeClaim {
        let mut c = NodeClaim::new("c", Default::default());
        c.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        c
    }

    #[test]
    fn a_failed_reboot_tightens_the_termination_time_to_its_grace_period() {
        let now: Timestamp = "2026-11-28T10:00:00.5Z".parse().expect("ts");
        let grace = annotations::REBOOT_TERMINATION_GRACE_PERIOD;
        let at = annotations::NODECLAIM_TERMINATION_TIMESTAMP;
        let in_30s: Timestamp = "2026-11-28T10:00:30Z".parse().expect("ts");
        assert_eq!(
            tightened_termination(&claim(&[(grace, "30s")]), now),
            Some(in_30s),
            "now plus the grace period, to the second"
        );
        assert_eq!(
            tightened_termination(&claim(&[(grace, "30s"), (at, "2026-11-28T11:00:00Z")]), now),
            Some(in_30s),
            "a later time is tightened"
        );
        assert_eq!(
            tightened_termination(&claim(&[(grace, "30s"), (at, "2026-11-28T10:00:10Z")]), now),
            None,
            "an earlier time is kept"
        );
        assert_eq!(
            tightened_termination(&claim(&[]), now),
            None,
            "no grace period"
        );
        assert_eq!(tightened_termination(&claim(&[(grace, "soon")]), now), None);
    }
}
