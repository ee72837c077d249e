//! Liveness and repair, from the provider's instance (`CloudProvider::get`) and the Node: a
//! NodeClaim whose instance gets no providerID within its launch timeout, or whose Node does
//! not register within its registration timeout (`CloudProvider::timeouts`), is deleted; an
//! instance that failed before its Node registered has its offering avoided
//! (`CloudProvider::launch_failed`) and is replaced; a registered NodeClaim that matches a
//! repair policy for longer than its toleration is replaced within the repair cap (see
//! `repair`); a launched NodeClaim whose instance has disappeared is deleted.

use std::time::Duration;

use api::NodeClaim;
use api::consts::conditions as types;
use api::karpenter::NodeClaimStatus;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use super::context::{Ctx, Error};
use super::labels::nodepool_of;
use super::repair::{self, Blocked, Unhealthy};
use api::consts::events::{
    DISRUPTION_BLOCKED, NODE_REPAIR_BLOCKED, NODE_REPAIR_DEFERRED, UNKNOWN_ANNOTATION_VALUE,
};
use api::duration::format_duration;
use cloudprovider::Instance;
use k8s_openapi::api::core::v1::{Node, Pod};

/// What liveness decided.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Healthy for now; look again after this long (the nearest deadline).
    Alive(Option<Duration>),
    /// The NodeClaim was deleted.
    Deleted,
    /// Repair reboots it (the cap and budget admitted it): the lifecycle records the
    /// request (see `reboot`).
    Reboot(repair::Matched),
}

/// Pure part: which deadline a NodeClaim has missed, if any.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Missed {
    Launch,
    Registration,
    NodeUnhealthy,
}

/// Seconds between two timestamps (negative when `b` is before `a`).
fn secs(a: Timestamp, b: Timestamp) -> f64 {
    b.duration_since(a).as_secs_f64()
}

/// The liveness periods.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    pub launch_timeout: Duration,
    pub registration_timeout: Duration,
    pub repair_after: Duration,
}

/// Decides liveness from times alone. `unhealthy_since` is when a repair policy started to
/// match (None when healthy or not registered).
pub(crate) fn missed_deadline(
    created: Timestamp,
    now: Timestamp,
    has_provider_id: bool,
    registered: bool,
    unhealthy_since: Option<Timestamp>,
    d: Deadlines,
) -> Result<Option<Duration>, Missed> {
    let Deadlines {
        launch_timeout,
        registration_timeout,
        repair_after,
    } = d;
    let age = secs(created, now);
    if !has_provider_id {
        let left = launch_timeout.as_secs_f64() - age;
        return if left <= 0.0 {
            Err(Missed::Launch)
        } else {
            Ok(Some(Duration::from_secs_f64(left)))
        };
    }
    if !registered {
        let left = registration_timeout.as_secs_f64() - age;
        return if left <= 0.0 {
            Err(Missed::Registration)
        } else {
            Ok(Some(Duration::from_secs_f64(left)))
        };
    }
    if let Some(since) = unhealthy_since {
        let left = repair_after.as_secs_f64() - secs(since, now);
        return if left <= 0.0 {
            Err(Missed::NodeUnhealthy)
        } else {
            Ok(Some(Duration::from_secs_f64(left)))
        };
    }
    Ok(None)
}

/// Runs liveness for a planned NodeClaim; `status` is the status the lifecycle is about to
/// write (providerID and Registered as of this reconcile).
pub(crate) async fn reconcile(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    instance: Option<&Instance>,
    launch_timeout: Duration,
    registration_timeout: Duration,
) -> Result<Verdict, Error> {
    let now = Timestamp::now();

    // Infrastructure failure before the Node registered: this offering is unavailable for a
    // while; replace the claim. (After registration it is a repair policy, capped.)
    let registered = api::conditions::is_true(&status.conditions, types::REGISTERED);
    if !registered
        && let Some(i) = instance
        && let Some(failure) = &i.failure
    {
        ctx.provider.launch_failed(claim, failure);
        ctx.event(
            claim,
            EventType::Warning,
            api::consts::events::INSUFFICIENT_CAPACITY_ERROR,
            format!(
                "{} failed ({failure}); offering {} {} {} marked unavailable",
                i.description,
                i.instance_type,
                i.zone.as_deref().unwrap_or("-"),
                i.capacity_type
            ),
        )
        .await;
        ctx.delete_claim(claim).await?;
        return Ok(Verdict::Deleted);
    }

    // The instance is gone although we launched it (deleted behind our back); the
    // provider confirmed it with the API server, not only its cache.
    let launched = api::conditions::is_true(&status.conditions, types::LAUNCHED);
    if instance.is_none() && launched {
        ctx.event(
            claim,
            EventType::Warning,
            "MachineDeleted",
            format!(
                "the {} instance of NodeClaim {} no longer exists",
                ctx.provider.name(),
                claim.name_any()
            ),
        )
        .await;
        ctx.delete_claim(claim).await?;
        return Ok(Verdict::Deleted);
    }

    let created = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let unhealthy = registered
        .then(|| matched(ctx, claim, status, instance, now))
        .flatten();
    if registered && let Some(r) = instance.and_then(|i| i.remediated_elsewhere.as_ref()) {
        return remediated_elsewhere(ctx, claim, status, r, unhealthy.as_ref()).await;
    }
    match missed_deadline(
        created,
        now,
        status.provider_id.is_some(),
        registered,
        unhealthy.as_ref().map(|u| u.unhealthy.since),
        Deadlines {
            launch_timeout,
            registration_timeout,
            repair_after: unhealthy
                .as_ref()
                .map_or(ctx.settings.node_repair_after, |u| u.toleration),
        },
    ) {
        Ok(next) => Ok(Verdict::Alive(next)),
        Err(Missed::NodeUnhealthy) => match unhealthy {
            Some(u) => repair(ctx, claim, status, &u).await,
            None => Ok(Verdict::Alive(None)),
        },
        Err(missed) => {
            give_up(
                ctx,
                claim,
                status,
                instance,
                missed,
                launch_timeout,
                registration_timeout,
            )
            .await
        }
    }
}

/// The instance's remediation belongs to someone else (`r.by`): the core's repair replaces
/// nothing. A repair policy that would have replaced the Node says so (event
/// `NodeRepairDeferred`, naming the remediator); when the remediator asks the instance's
/// owner to replace it (`r.replace`), the NodeClaim is deleted as a repair (event
/// `NodeRepair`, the repair metrics) unless `karpenter.sh/do-not-repair` vetoes it. The
/// remediator gates itself (a MachineHealthCheck's `triggerIf`): neither the repair cap nor
/// the `Unhealthy` budget applies.
async fn remediated_elsewhere(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    r: &cloudprovider::RemediatedElsewhere,
    ours: Option<&repair::Matched>,
) -> Result<Verdict, Error> {
    let node_name = status.node_name.as_deref().unwrap_or("(unknown)");
    let node = ctx.nodes.store().get(&ObjectRef::new(node_name));
    if let Some(u) = &r.replace {
        if repair::do_not_repair(claim, node.as_deref()) {
            let message = format!(
                "{} asks to replace Node {node_name} but repair is blocked through the \"{}\" annotation",
                u.detail,
                api::consts::annotations::DO_NOT_REPAIR
            );
            ctx.event(claim, EventType::Normal, DISRUPTION_BLOCKED, message)
                .await;
            return Ok(Verdict::Alive(Some(ctx.settings.poll)));
        }
        let message = format!(
            "{}; replacing Node {node_name} (its remediation is asked of the NodeClaim's owner)",
            u.detail
        );
        tracing::info!(nodeclaim = %claim.name_any(), by = %r.by, %message, "repairing node for its remediator");
        ctx.event(claim, EventType::Warning, "NodeRepair", message)
            .await;
        ctx.delete_claim(claim).await?;
        record_repair(ctx, claim, &nodepool_of(claim), u, node.as_deref());
        return Ok(Verdict::Deleted);
    }
    let Some(m) = ours else {
        return Ok(Verdict::Alive(None));
    };
    let now = Timestamp::now();
    if m.due() > now {
        let left = m.due().duration_since(now).as_secs_f64();
        return Ok(Verdict::Alive(Some(Duration::from_secs_f64(left.max(0.0)))));
    }
    let message = format!(
        "Node {node_name} has been unhealthy ({}) for more than {}; not repairing it: its remediation belongs to {}",
        m.unhealthy.detail,
        format_duration(m.toleration),
        r.by
    );
    tracing::info!(nodeclaim = %claim.name_any(), by = %r.by, "node repair deferred");
    ctx.event(claim, EventType::Normal, NODE_REPAIR_DEFERRED, message)
        .await;
    Ok(Verdict::Alive(Some(ctx.settings.poll)))
}

/// What repair would do about the claim's Node (the provider's policies, or its own signal
/// on `instance`), if anything.
fn matched(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    instance: Option<&Instance>,
    now: Timestamp,
) -> Option<repair::Matched> {
    let node = status
        .node_name
        .as_ref()
        .and_then(|n| ctx.nodes.store().get(&ObjectRef::new(n)));
    let matcher = ctx.matcher();
    repair::unhealthy(
        node.as_deref(),
        instance.and_then(|i| i.unhealthy.clone()),
        repair::Policies {
            matcher: matcher.as_deref(),
            provider_toleration: ctx.settings.node_repair_after,
        },
        now,
        super::repair::not_before(claim),
    )
}

/// A deadline passed: the claim is given up (an event, deleted), and for a launch that
/// timed out the provider is told so its offering is avoided.
async fn give_up(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    instance: Option<&Instance>,
    missed: Missed,
    launch_timeout: Duration,
    registration_timeout: Duration,
) -> Result<Verdict, Error> {
    let now = Timestamp::now();
    let name = claim.name_any();
    let registration = missed == Missed::Registration;
    let (reason, message) = match missed {
        Missed::Launch => (
            "LaunchTimeout",
            format!(
                "{} got no providerID within {}",
                instance.map_or("the instance", |i| i.description.as_str()),
                format_duration(launch_timeout)
            ),
        ),
        Missed::Registration => (
            "RegistrationTimeout",
            format!(
                "no Node registered with providerID {} within {}",
                status.provider_id.as_deref().unwrap_or("(none)"),
                format_duration(registration_timeout)
            ),
        ),
        Missed::NodeUnhealthy => return Ok(Verdict::Alive(None)),
    };
    if reason == "LaunchTimeout" {
        // The same offering would likely time out again: try another first.
        ctx.provider.launch_failed(claim, &message);
    }
    if registration && let Some(pool) = claim.labels().get(api::consts::labels::NODEPOOL) {
        ctx.registration_failures.record(pool, now, message.clone());
    }
    tracing::info!(nodeclaim = %name, reason, %message, "deleting nodeclaim");
    ctx.event(claim, EventType::Warning, reason, message).await;
    ctx.delete_claim(claim).await?;
    Ok(Verdict::Deleted)
}

/// A `karpenter.sh/do-not-repair` on the claim or its Node that is neither `"true"` nor
/// `"false"` vetoes nothing: a Warning says so before the repair goes ahead.
async fn warn_unknown_veto(ctx: &Ctx, claim: &NodeClaim, node: Option<&Node>) {
    let key = api::consts::annotations::DO_NOT_REPAIR;
    let odd = crate::objects::flag(claim, key)
        .err()
        .or_else(|| node.and_then(|n| crate::objects::flag(n, key).err()));
    if let Some(value) = odd {
        let note = crate::objects::unknown_flag_note(key, value);
        ctx.event(claim, EventType::Warning, UNKNOWN_ANNOTATION_VALUE, note)
            .await;
    }
}

/// Repairs a NodeClaim matching a repair policy past its toleration — reboots it when the
/// policy says `RebootNode` (unless it was rebooted twice within a day), else deletes it —
/// unless it is vetoed (`karpenter.sh/do-not-repair`), its pool is over the repair threshold
/// or its `Unhealthy` budget is used up: then an event and a look again later.
async fn repair(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    matched: &repair::Matched,
) -> Result<Verdict, Error> {
    let u = &matched.unhealthy;
    let uid = crate::objects::uid_of(claim);
    let pool = nodepool_of(claim);
    let node_name = status.node_name.as_deref().unwrap_or("(unknown)");
    let node = ctx.nodes.store().get(&ObjectRef::new(node_name));
    if repair::do_not_repair(claim, node.as_deref()) {
        let message = format!(
            "Node {node_name} is unhealthy ({}) but repair is blocked through the \"{}\" annotation",
            u.detail,
            api::consts::annotations::DO_NOT_REPAIR
        );
        tracing::info!(nodeclaim = %claim.name_any(), %message, "node repair vetoed");
        ctx.event(claim, EventType::Normal, DISRUPTION_BLOCKED, message)
            .await;
        return Ok(Verdict::Alive(Some(ctx.settings.poll)));
    }
    warn_unknown_veto(ctx, claim, node.as_deref()).await;
    let view = repair_view(ctx, claim, &pool).await;
    if let Err(blocked) = ctx.repairs.reserve(&uid, &pool, &view) {
        report_blocked(ctx, claim, &pool, node_name, u, blocked).await;
        return Ok(Verdict::Alive(Some(ctx.settings.poll)));
    }
    let mut also = String::new();
    if matched.action == cloudprovider::RepairAction::RebootNode {
        if !ctx.reboots.escalated(&uid, Timestamp::now()) {
            return Ok(Verdict::Reboot(matched.clone()));
        }
        also = "; rebooted twice within 24 hours already".into();
    }
    let message = format!(
        "Node {node_name} has been unhealthy ({}) for more than {}{also}; replacing it",
        u.detail,
        format_duration(matched.toleration)
    );
    tracing::info!(nodeclaim = %claim.name_any(), condition = u.condition, %message, "repairing node");
    ctx.event(claim, EventType::Warning, "NodeRepair", message)
        .await;
    if let Err(e) = ctx.delete_claim(claim).await {
        ctx.repairs.release(&uid);
        return Err(e);
    }
    record_repair(ctx, claim, &pool, u, node.as_deref());
    Ok(Verdict::Deleted)
}

/// The cap's and the budget's inputs for `pool`, from the caches and the provider.
async fn repair_view(ctx: &Ctx, claim: &NodeClaim, pool: &str) -> repair::PoolView {
    // The claim decided on counts as the caller has it, whether or not the cache shows it
    // yet (its Node is registered: the cap counts it among the pool's nodes).
    let mut claims = ctx.nodeclaims.state();
    let uid = crate::objects::uid_of(claim);
    match claims
        .iter()
        .position(|c| crate::objects::uid_of(c.as_ref()) == uid)
    {
        Some(i) => claims[i] = std::sync::Arc::new(claim.clone()),
        None => claims.push(std::sync::Arc::new(claim.clone())),
    }
    // The provider's health signal of each claim of the pool (the cap counts them too).
    let mut unhealthy_instances = std::collections::HashMap::<String, Unhealthy>::new();
    for c in claims.iter().filter(|c| nodepool_of(c) == pool) {
        if let Ok(Instance {
            unhealthy: Some(u), ..
        }) = ctx.provider.get(c).await
        {
            unhealthy_instances.insert(c.name_any(), u);
        }
    }
    // The unfinished pods of each Node (the tie-break's disruption cost).
    let mut pods: std::collections::HashMap<String, Vec<std::sync::Arc<Pod>>> = Default::default();
    for p in ctx.pods.state() {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone())
            && !crate::objects::terminal(&p)
        {
            pods.entry(n).or_default().push(p);
        }
    }
    let now = Timestamp::now();
    let cost = |c: &NodeClaim| {
        let on: Vec<&Pod> = c
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| pods.get(n))
            .map(|ps| ps.iter().map(|p| p.as_ref()).collect())
            .unwrap_or_default();
        crate::cost::node_disruption_cost(&on, c, now)
    };
    let nodepool = ctx.nodepool(pool);
    let matcher = ctx.matcher();
    repair::pool_view(
        &claims,
        pool,
        &repair::Lookups {
            node: &|n| ctx.nodes.store().get(&ObjectRef::new(n)),
            provider: &|c| unhealthy_instances.get(&c.name_any()).cloned(),
            cost: &cost,
            budgets: nodepool
                .as_ref()
                .map(|np| np.spec.disruption.budgets.as_slice()),
            policies: repair::Policies {
                matcher: matcher.as_deref(),
                provider_toleration: ctx.settings.node_repair_after,
            },
            now,
        },
    )
}

/// Says why a repair waits: over the threshold (`NodeRepairBlocked` to the NodeClaim and its
/// NodePool), or out of budget (`DisruptionBlocked` to the NodeClaim).
async fn report_blocked(
    ctx: &Ctx,
    claim: &NodeClaim,
    pool: &str,
    node: &str,
    u: &Unhealthy,
    blocked: Blocked,
) {
    let scope = if pool.is_empty() {
        "the cluster".to_string()
    } else {
        format!("NodePool {pool}")
    };
    match blocked {
        Blocked::Cap {
            unhealthy,
            allowed,
            nodes,
        } => {
            let message = format!(
                "Node {node} is unhealthy ({}) but so are {unhealthy} of the {nodes} nodes of {scope}, more than the {}% ({allowed}) repair replaces; not repairing",
                u.detail,
                repair::MAX_UNHEALTHY_PERCENT
            );
            tracing::info!(nodeclaim = %claim.name_any(), nodepool = %pool, unhealthy, allowed, "node repair blocked");
            ctx.event(
                claim,
                EventType::Warning,
                NODE_REPAIR_BLOCKED,
                message.clone(),
            )
            .await;
            if let Some(np) = ctx.nodepool(pool) {
                ctx.event_for(
                    np.as_ref(),
                    EventType::Warning,
                    NODE_REPAIR_BLOCKED,
                    message,
                )
                .await;
            }
        }
        Blocked::Budget {
            allowed,
            disrupting,
            ahead,
        } => {
            let message = format!(
                "Node {node} is unhealthy ({}); repair waits for the disruption budget of {scope} (reason Unhealthy): {allowed} allowed, {disrupting} being disrupted, {ahead} unhealthy before it",
                u.detail
            );
            tracing::info!(nodeclaim = %claim.name_any(), nodepool = %pool, allowed, disrupting, ahead, "node repair waits for budget");
            ctx.event(claim, EventType::Normal, DISRUPTION_BLOCKED, message)
                .await;
        }
    }
}

/// The metrics of a repair: `nodeclaims_unhealthy_disrupted` by condition,
/// `nodeclaims_disrupted` and `pods_disruption_initiated` with reason `unhealthy`.
fn record_repair(ctx: &Ctx, claim: &NodeClaim, pool: &str, u: &Unhealthy, node: Option<&Node>) {
    let capacity_type = super::labels::capacity_type_of(claim);
    ctx.metrics
        .nodeclaims_unhealthy_disrupted
        .get_or_create(&crate::metrics::UnhealthyLabels {
            condition: u.condition.clone(),
            nodepool: pool.to_string(),
            capacity_type,
        })
        .inc();
    let pods = node.map_or(0, |n| {
        let name = n.name_any();
        ctx.pods
            .state()
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
            .filter(|p| crate::blockers::reschedulable(p))
            .count()
    });
    crate::nodeclaim::disrupted::record_disrupted_pods(
        &ctx.metrics,
        claim,
        "unhealthy",
        pool,
        pods,
        String::new(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    const LT: Duration = Duration::from_secs(600);
    const RT: Duration = Duration::from_secs(900);
    const REPAIR: Duration = Duration::from_secs(600);
    const D: Deadlines = Deadlines {
        launch_timeout: LT,
        registration_timeout: RT,
        repair_after: REPAIR,
    };

    #[test]
    fn launch_and_registration_deadlines() {
        let created = t("2026-11-22T10:00:00Z");
        assert_eq!(
            missed_deadline(created, t("2026-11-22T10:09:00Z"), false, false, None, D),
            Ok(Some(Duration::from_secs(60)))
        );
        assert_eq!(
            missed_deadline(created, t("2026-11-22T10:10:00Z"), false, false, None, D),
            Err(Missed::Launch)
        );
        assert_eq!(
            missed_deadline(created, t("2026-11-22T10:14:00Z"), true, false, None, D),
            Ok(Some(Duration::from_secs(60)))
        );
        assert_eq!(
            missed_deadline(created, t("2026-11-22T10:15:00Z"), true, false, None, D),
            Err(Missed::Registration)
        );
        assert_eq!(
            missed_deadline(created, t("2026-11-23T10:00:00Z"), true, true, None, D),
            Ok(None),
            "a registered, healthy node lives on"
        );
    }

    #[test]
    fn unhealthy_node_is_repaired_after_the_period() {
        let created = t("2026-11-22T10:00:00Z");
        let since = Some(t("2026-11-22T11:00:00Z"));
        assert_eq!(
            missed_deadline(created, t("2026-11-22T11:05:00Z"), true, true, since, D),
            Ok(Some(Duration::from_secs(300)))
        );
        assert_eq!(
            missed_deadline(created, t("2026-11-22T11:10:00Z"), true, true, since, D),
            Err(Missed::NodeUnhealthy)
        );
    }
}
