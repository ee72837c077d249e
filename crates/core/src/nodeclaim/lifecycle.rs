//! The NodeClaim lifecycle controller: composes launch → providerID → registration and
//! initialization → liveness, or termination when the NodeClaim is deleted. Each reconcile
//! computes the status from the cached object plus what it observed and writes it once, at
//! the end, only if it changed. A reconcile never decides on a cached NodeClaim older than
//! our own last write to it. Triggers: NodeClaim changes, Node changes mapped by providerID
//! (or owner reference), NodePool changes mapped to their NodeClaims, and the NodeClaims the
//! provider says changed (`CloudProvider::changes`: for Cluster API its Machines, NodeClasses,
//! Clusters and templates); deadlines nothing else triggers on are requeues.

use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::consts::{conditions as types, reasons};
use api::karpenter::NodeClaimStatus;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use super::context::{Ctx, Error, set_ready, uid_of};
use super::labels::nodepool_of;
use super::liveness::{self, Verdict};
use super::reboot::Step;
use super::registration::{self, Progress};
use super::termination::{self, Termination};
use crate::cache::Cache;
use crate::metrics::NodePoolLabels;
use cloudprovider::{Created, Instance, Intent};

/// How soon a reconcile that found the cache behind our own write looks again (the watch
/// event of that write triggers it too).
const STALE_RETRY: Duration = Duration::from_millis(200);
/// How long a progress-only status change (Launched, waiting for the Node) may wait to be
/// written together with the registration that usually follows.
const COALESCE: Duration = Duration::from_secs(10);
/// How often an initialized NodeClaim is looked at without any trigger.
const SETTLED: Duration = Duration::from_secs(300);

/// One reconcile of one NodeClaim.
pub async fn reconcile(claim: Arc<NodeClaim>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let uid = uid_of(claim.as_ref());
    if ctx
        .expectations
        .stale(&uid, &claim.resource_version().unwrap_or_default())
    {
        return Ok(Action::requeue(STALE_RETRY));
    }
    let action = reconcile_fresh(&ctx, claim).await?;
    ctx.backoff.succeeded(&uid);
    Ok(action)
}

async fn reconcile_fresh(ctx: &Ctx, claim: Arc<NodeClaim>) -> Result<Action, Error> {
    if !ctx.connection.connected() {
        return disconnected(ctx, claim).await;
    }
    if claim.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(&claim) {
            ctx.expectations.forget(&uid_of(claim.as_ref()));
            return Ok(Action::await_change());
        }
        return Ok(match termination::reconcile(ctx, &claim).await? {
            Termination::Done => Action::await_change(),
            Termination::Waiting(d) => Action::requeue(d),
        });
    }
    let original = claim.status.clone().unwrap_or_default();
    // A Node deleted by a user takes its NodeClaim with it.
    if let Some(node) = original
        .node_name
        .as_ref()
        .and_then(|n| ctx.nodes.store().get(&ObjectRef::new(n)))
        && node.metadata.deletion_timestamp.is_some()
    {
        ctx.event(
            &claim,
            EventType::Normal,
            "NodeDeleted",
            format!("Node {} is being deleted", node.name_any()),
        )
        .await;
        ctx.delete_claim(&claim).await?;
        return Ok(Action::await_change());
    }
    let mut claim = match launch(ctx, claim).await? {
        Some(claim) => claim,
        None => return Ok(Action::await_change()),
    };
    let instance = match ctx.provider.get(&claim).await {
        Ok(i) => Some(i),
        Err(cloudprovider::Error::NodeClaimNotFound(_)) => None,
        Err(e) => return Err(e.into()),
    };
    let mut status = claim.status.clone().unwrap_or_default();
    if let Some(i) = &instance {
        observe_instance(ctx, &claim, i, &mut status);
        claim = label_offering(ctx, claim, i).await?;
    }
    if let Some(action) = reboot(ctx, &mut claim, &mut status).await? {
        return Ok(action);
    }
    let progress = registration::reconcile(ctx, &claim, &mut status).await?;
    let timeouts = ctx.provider.timeouts(&claim);
    let (launch_timeout, registration_timeout) = (timeouts.launch, timeouts.registration);
    mark_remediator(&mut status, instance.as_ref());
    let verdict = liveness::reconcile(
        ctx,
        &claim,
        &status,
        instance.as_ref(),
        launch_timeout,
        registration_timeout,
    )
    .await?;
    if verdict == Verdict::Deleted {
        return Ok(Action::await_change());
    }
    if let Verdict::Reboot(m) = &verdict {
        super::reboot::request(ctx, &mut claim, &mut status, m).await?;
        set_ready(&mut status.conditions);
        ctx.write_status(&claim, &status).await?;
        // Recorded: the Rebooting condition counts it against the cap and budgets now.
        ctx.repairs.release(&uid_of(claim.as_ref()));
        return Ok(Action::requeue(ctx.settings.poll));
    }
    let drifted = super::drift::reconcile(ctx, &mut claim, instance.as_ref(), &mut status).await?;
    super::outdated::sync(ctx, &claim, &status).await?;
    set_ready(&mut status.conditions);
    let Verdict::Alive(next) = verdict else {
        return Ok(Action::await_change());
    };
    let uid = uid_of(claim.as_ref());
    if progress_only(&original, &status)
        && let Some(wait) = ctx
            .expectations
            .hold(&uid, std::time::Instant::now(), COALESCE)
    {
        // Launched, with the Node about to join: one status write for both.
        return Ok(Action::requeue(next.map_or(wait, |n| n.min(wait))));
    }
    if ctx.write_status(&claim, &status).await? {
        ctx.expectations.release(&uid);
        super::drift::count(ctx, &claim, drifted);
    }
    let quiet = match progress {
        Progress::Initialized => SETTLED,
        _ => ctx.settings.poll,
    };
    Ok(Action::requeue(next.map_or(quiet, |n| n.min(quiet))))
}

/// A registered NodeClaim says who owns its remediation when it is not the operator's repair
/// (`ExternalRemediation`).
fn mark_remediator(status: &mut NodeClaimStatus, instance: Option<&Instance>) {
    if api::conditions::is_true(&status.conditions, types::REGISTERED) {
        let by = instance
            .and_then(|i| i.remediated_elsewhere.as_ref())
            .map(|r| r.by.as_str());
        super::repair::mark_remediator(status, by, Timestamp::now());
    }
}

/// A reboot in progress (`Rebooting=True`) takes its step; registration, liveness and drift
/// wait for it to end (`None`: no reboot in progress, or it just ended).
async fn reboot(
    ctx: &Ctx,
    claim: &mut Arc<NodeClaim>,
    status: &mut NodeClaimStatus,
) -> Result<Option<Action>, Error> {
    if !crate::objects::rebooting(claim) {
        return Ok(None);
    }
    match super::reboot::reconcile(ctx, claim, status).await? {
        Step::Deleted => Ok(Some(Action::await_change())),
        Step::Waiting(wait) => {
            set_ready(&mut status.conditions);
            ctx.write_status(claim, status).await?;
            Ok(Some(Action::requeue(wait)))
        }
        Step::Done => Ok(None),
    }
}

/// A NodeClaim of a workload cluster that does not answer (see `health`): a launch in
/// flight continues; termination, liveness, repair and drift wait for the cluster to answer
/// again (they would judge it from a stale cache, and delete on that judgement).
async fn disconnected(ctx: &Ctx, claim: Arc<NodeClaim>) -> Result<Action, Error> {
    if claim.metadata.deletion_timestamp.is_none() {
        launch(ctx, claim).await?;
    }
    Ok(Action::requeue(ctx.settings.poll))
}

/// Launch through the provider: the claim with what the provider asked to record on it, or
/// `None` when it was given up (a permanent failure, or the launch timeout passed):
/// `Launched=False` with the reason, an event, and the claim deleted so that its pods are
/// planned again.
async fn launch(ctx: &Ctx, claim: Arc<NodeClaim>) -> Result<Option<Arc<NodeClaim>>, Error> {
    // Like Karpenter, a launched claim is not launched again: a vanished instance is
    // liveness's to notice, not create's to replace.
    let launched = claim
        .status
        .as_ref()
        .is_some_and(|s| api::conditions::is_true(&s.conditions, types::LAUNCHED));
    if launched {
        return with_finalizer(ctx, claim).await.map(Some);
    }
    let mut claim = claim;
    // At most one record: a provider asked again records nothing new.
    let mut recorded = false;
    let e = loop {
        match ctx.provider.create(&claim).await {
            Ok(Created::Record(intent)) if !recorded => {
                claim = Arc::new(record(ctx, &claim, &intent).await?);
                recorded = true;
            }
            Ok(Created::Record(_)) => {
                break cloudprovider::Error::retryable(
                    cloudprovider::Retry::Waiting,
                    "the provider asked to record its launch twice",
                );
            }
            Ok(Created::Launched) => return with_finalizer(ctx, claim).await.map(Some),
            Err(e) => break e,
        }
    };
    if let Some((reason, message)) = e.permanent() {
        refuse(ctx, &claim, reason, message).await?;
        return Ok(None);
    }
    if let cloudprovider::Error::Retryable {
        kind: cloudprovider::Retry::Launch,
        message,
    } = &e
    {
        launch_failed(ctx, &claim, message).await;
    }
    if let cloudprovider::Error::Held { reason, message } = &e {
        // Waiting for something outside the claim: not bound by the launch timeout.
        held(ctx, &claim, reason, message).await;
        return Err(e.into());
    }
    // A launch that keeps failing is still bound by the launch timeout.
    let timeout = ctx.provider.timeouts(&claim).launch;
    let age = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64());
    if age.is_none_or(|a| a < timeout.as_secs_f64()) {
        return Err(e.into());
    }
    ctx.provider.launch_failed(&claim, "launch timed out");
    refuse(
        ctx,
        &claim,
        "LaunchTimeout",
        format!(
            "not launched within {}: {e}",
            api::duration::format_duration(timeout)
        ),
    )
    .await?;
    Ok(None)
}

/// Writes what the provider asked to record before it launches (labels, annotations) with
/// our finalizer, in one write conditional on the version it was computed from: a restart
/// resumes exactly this launch, and a stale claim is refused (409) instead of launched twice.
async fn record(ctx: &Ctx, claim: &NodeClaim, intent: &Intent) -> Result<NodeClaim, Error> {
    let mut finalizers = claim.finalizers().to_vec();
    if !has_finalizer(claim) {
        finalizers.push(api::consts::finalizers::TERMINATION.into());
    }
    ctx.patch_claim(
        claim,
        serde_json::json!({
            "finalizers": finalizers,
            "labels": intent.labels,
            "annotations": intent.annotations,
        }),
    )
    .await
}

/// The claim with our finalizer (written when it lacks it: another provider's claim, or one
/// whose finalizer was removed by hand).
async fn with_finalizer(ctx: &Ctx, claim: Arc<NodeClaim>) -> Result<Arc<NodeClaim>, Error> {
    if has_finalizer(&claim) {
        return Ok(claim);
    }
    let mut finalizers = claim.finalizers().to_vec();
    finalizers.push(api::consts::finalizers::TERMINATION.into());
    let written = ctx
        .patch_claim(&claim, serde_json::json!({"finalizers": finalizers}))
        .await?;
    Ok(Arc::new(written))
}

/// An attempt to launch failed and is retried: `Launched=Unknown` with reason
/// `LaunchFailed` and the message (best effort: the retry does not wait for it).
async fn launch_failed(ctx: &Ctx, claim: &NodeClaim, message: &str) {
    let mut status = claim.status.clone().unwrap_or_default();
    api::conditions::set(
        &mut status.conditions,
        types::LAUNCHED,
        api::conditions::UNKNOWN,
        reasons::LAUNCH_FAILED,
        &api::conditions::truncate(message, 300),
        None,
        Timestamp::now(),
    );
    set_ready(&mut status.conditions);
    if let Err(write) = ctx.write_status(claim, &status).await {
        tracing::debug!(nodeclaim = %claim.name_any(), error = %write, "recording LaunchFailed failed");
    }
}

/// The launch is held by the provider (`cloudprovider::Error::Held`): `Launched=Unknown`
/// with the hold's reason and message, and a Warning event with that reason when the hold
/// starts or its reason changes (best effort: the retry does not wait for it).
async fn held(ctx: &Ctx, claim: &NodeClaim, reason: &str, message: &str) {
    let mut status = claim.status.clone().unwrap_or_default();
    let was = api::conditions::get(&status.conditions, types::LAUNCHED)
        .map(|c| (c.reason.clone(), c.message.clone()));
    let message = api::conditions::truncate(message, 300);
    if was.as_ref().map(|(r, m)| (r.as_str(), m.as_str())) == Some((reason, message.as_str())) {
        return;
    }
    if was.as_ref().is_none_or(|(r, _)| r != reason) {
        tracing::info!(nodeclaim = %claim.name_any(), reason, %message, "launch held");
        ctx.event(claim, EventType::Warning, reason, message.clone())
            .await;
    }
    api::conditions::set(
        &mut status.conditions,
        types::LAUNCHED,
        api::conditions::UNKNOWN,
        reason,
        &message,
        None,
        Timestamp::now(),
    );
    set_ready(&mut status.conditions);
    if let Err(write) = ctx.write_status(claim, &status).await {
        tracing::debug!(nodeclaim = %claim.name_any(), error = %write, "recording a held launch failed");
    }
}

/// Deletes a NodeClaim that cannot be launched, with the Karpenter event reason.
async fn refuse(ctx: &Ctx, claim: &NodeClaim, reason: &str, message: String) -> Result<(), Error> {
    tracing::info!(nodeclaim = %claim.name_any(), reason, %message, "launch refused; deleting nodeclaim");
    ctx.event(claim, EventType::Warning, reason, message.clone())
        .await;
    let mut status = claim.status.clone().unwrap_or_default();
    api::conditions::set(
        &mut status.conditions,
        types::LAUNCHED,
        api::conditions::FALSE,
        reason,
        &message,
        None,
        k8s_openapi::jiff::Timestamp::now(),
    );
    set_ready(&mut status.conditions);
    ctx.write_status(claim, &status).await?;
    ctx.delete_claim(claim).await
}

fn has_finalizer(claim: &NodeClaim) -> bool {
    claim
        .finalizers()
        .iter()
        .any(|f| f == api::consts::finalizers::TERMINATION)
}

/// Whether the only news in `next` is progress that the registration usually follows
/// within seconds: Launched (providerID, capacity) while the Node is not registered, with
/// no condition False (failures are written at once).
fn progress_only(before: &NodeClaimStatus, next: &NodeClaimStatus) -> bool {
    let launched_now = api::conditions::is_true(&next.conditions, types::LAUNCHED)
        && !api::conditions::is_true(&before.conditions, types::LAUNCHED);
    launched_now
        && !api::conditions::is_true(&next.conditions, types::REGISTERED)
        && !next
            .conditions
            .iter()
            .any(|c| c.status == api::conditions::FALSE && c.type_ != types::READY)
}

/// A launched claim labelled with the offering its provider says it runs on, where the
/// provider did not record it before the launch (one metadata write, once).
async fn label_offering(
    ctx: &Ctx,
    claim: Arc<NodeClaim>,
    instance: &Instance,
) -> Result<Arc<NodeClaim>, Error> {
    if instance.provider_id.is_none() {
        return Ok(claim);
    }
    let missing = super::labels::missing_offering_labels(&claim, instance);
    if missing.is_empty() {
        return Ok(claim);
    }
    let written = ctx
        .patch_claim(&claim, serde_json::json!({ "labels": missing }))
        .await?;
    Ok(Arc::new(written))
}

/// What the provider says: once the instance has a providerID it exists — `Launched=True`
/// with the providerID, capacity and allocatable of the launch.
fn observe_instance(
    ctx: &Ctx,
    claim: &NodeClaim,
    instance: &Instance,
    status: &mut NodeClaimStatus,
) {
    if status.provider_id.is_some() {
        return;
    }
    let Some(pid) = &instance.provider_id else {
        return;
    };
    status.provider_id = Some(pid.to_string());
    let quantities = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.clone()),
                )
            })
            .collect()
    };
    status.capacity = quantities(&instance.capacity);
    status.allocatable = quantities(&instance.allocatable);
    ctx.provider.launch_succeeded(claim);
    // A Node that joins before this status is written still finds its claim.
    ctx.expectations
        .saw_provider_id(&uid_of(claim), &claim.name_any(), pid);
    let now = Timestamp::now();
    api::conditions::set(
        &mut status.conditions,
        types::LAUNCHED,
        api::conditions::TRUE,
        reasons::LAUNCHED,
        "",
        None,
        now,
    );
    if let Some(created) = claim.metadata.creation_timestamp.as_ref() {
        ctx.metrics
            .launch_duration
            .get_or_create(&NodePoolLabels {
                nodepool: nodepool_of(claim),
            })
            .observe(now.duration_since(created.0).as_secs_f64().max(0.0));
    }
}

/// A conflict (our read was stale) is retried at once; other errors back off per object.
pub fn error_policy(claim: Arc<NodeClaim>, error: &Error, ctx: Arc<Ctx>) -> Action {
    if error.is_conflict() {
        tracing::debug!(nodeclaim = %claim.name_any(), "conflict; retrying from the fresh object");
        return Action::requeue(STALE_RETRY);
    }
    if let Error::Provider(cloudprovider::Error::Held { reason, .. }) = error {
        // Recorded on the claim; the provider's changes bring it back when it may pass.
        tracing::debug!(nodeclaim = %claim.name_any(), reason, "launch held");
        return Action::requeue(ctx.settings.poll);
    }
    let wait = ctx.backoff.failed(&uid_of(claim.as_ref()));
    tracing::warn!(nodeclaim = %claim.name_any(), error = %error, retry_in = %api::duration::format_duration(wait), "reconcile failed");
    Action::requeue(wait)
}

/// The shared caches the lifecycle is triggered by (the provider adds its own, see
/// `CloudProvider::changes`).
pub struct Triggers {
    pub nodeclaims: Cache<NodeClaim>,
    pub nodes: Cache<Node>,
    pub nodepools: Cache<api::NodePool>,
    /// A Node's ResourceSlices (a NodeClaim waiting for DRA drivers initializes on them).
    pub slices: Cache<k8s_openapi::api::resource::v1::ResourceSlice>,
}

/// Runs the lifecycle controller until `shutdown` resolves.
/// The lifecycle's name in the cloud provider metrics' `controller` label.
pub const LIFECYCLE: &str = "nodeclaim.lifecycle";

pub async fn run(
    ctx: Ctx,
    triggers: Triggers,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let claims = triggers.nodeclaims.clone();
    let expectations = ctx.expectations.clone();
    let by_node = move |node: Arc<Node>| {
        // Registered Nodes point at their NodeClaim; a Node that just joined is found by
        // its providerID: on the NodeClaim once its status has it, else as the provider
        // gave it (the first `Launched` status write may be held back to coalesce with
        // registration, and the Node's own changes, e.g. its not-ready taint lifted, must
        // still wake the claim).
        let mut refs: Vec<ObjectRef<NodeClaim>> = node
            .owner_references()
            .iter()
            .filter(|o| o.kind == "NodeClaim" && o.api_version.starts_with("karpenter.sh/"))
            .map(|o| ObjectRef::new(&o.name))
            .collect();
        if let Some(pid) = crate::cache::node_provider_id(&node) {
            let found = claims.by_index(&pid);
            if found.is_empty() {
                refs.extend(
                    expectations
                        .claims_of_provider_id(&pid)
                        .iter()
                        .map(|n| ObjectRef::new(n)),
                );
            }
            refs.extend(found.iter().map(|c| ObjectRef::from_obj(c.as_ref())));
        }
        refs
    };
    let by_nodepool = claims_where(&triggers.nodeclaims, |c, np: &api::NodePool| {
        nodepool_of(c) == np.name_any()
    });
    let by_slice = claims_where(
        &triggers.nodeclaims,
        |c, s: &k8s_openapi::api::resource::v1::ResourceSlice| {
            c.annotations()
                .contains_key(api::consts::annotations::REQUESTED_DRA_DRIVERS)
                && c.status
                    .as_ref()
                    .and_then(|st| st.node_name.as_deref())
                    .is_some_and(|n| api::dra::slice_of_node(s, n))
        },
    );
    let provider = ctx
        .provider
        .changes()
        .unwrap_or_else(|| futures::stream::pending().boxed())
        .map(|name| ObjectRef::new(&name));
    Controller::for_shared_stream(triggers.nodeclaims.subscribe(), triggers.nodeclaims.store())
        .watches_shared_stream(triggers.nodes.subscribe(), by_node)
        .watches_shared_stream(triggers.nodepools.subscribe(), by_nodepool)
        .watches_shared_stream(triggers.slices.subscribe(), by_slice)
        .reconcile_on(provider)
        .reconcile_all_on(futures::stream::once(futures::future::ready(())))
        .graceful_shutdown_on(shutdown)
        // The controller runs each reconcile on its own task: named there.
        .run(
            |claim, ctx| crate::metrics::controller::run_as(LIFECYCLE, reconcile(claim, ctx)),
            error_policy,
            Arc::new(ctx),
        )
        .for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "nodeclaim controller");
            }
            futures::future::ready(())
        })
        .await;
}

/// Maps an object to the cached NodeClaims `related` to it.
fn claims_where<K: 'static>(
    claims: &Cache<NodeClaim>,
    related: impl Fn(&NodeClaim, &K) -> bool + Send + Sync + 'static,
) -> impl Fn(Arc<K>) -> Vec<ObjectRef<NodeClaim>> + Send + Sync + 'static {
    let claims = claims.store();
    move |obj: Arc<K>| {
        claims
            .state()
            .iter()
            .filter(|c| related(c, &obj))
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect()
    }
}
