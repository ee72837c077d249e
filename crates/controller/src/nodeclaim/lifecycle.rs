//! The NodeClaim lifecycle controller: composes finalizer → launch → providerID →
//! registration/initialization → liveness, or termination when the NodeClaim is deleted.
//! Every step is idempotent and writes status after its action, so a restart at any line
//! resumes where it stopped.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::claim::Claim;
use super::context::{Ctx, Error, nodeclaim_resource, nodeclass_resource};
use super::launch::{self, Launch};
use super::liveness::{self, Verdict};
use super::registration::{self, Progress};
use super::termination::{self, Termination};
use crate::machine;
use crate::names;
use crate::nodeclass::{DEFAULT_LAUNCH_TIMEOUT, DEFAULT_REGISTRATION_TIMEOUT, NodeClass};

fn decode(obj: &DynamicObject) -> Result<Claim, Error> {
    let value = serde_json::to_value(obj).map_err(|source| Error::Decode {
        what: format!("NodeClaim {}", obj.name_any()),
        source,
    })?;
    Claim::from_json(&value).map_err(|source| Error::Decode {
        what: format!("NodeClaim {}", obj.name_any()),
        source,
    })
}

/// One reconcile of one NodeClaim.
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let mut claim = decode(&obj)?;
    let has_finalizer = obj
        .finalizers()
        .iter()
        .any(|f| f == names::TERMINATION_FINALIZER);
    if obj.meta().deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        return Ok(match termination::reconcile(&ctx, &obj, &claim).await? {
            Termination::Done => Action::await_change(),
            Termination::Waiting(d) => Action::requeue(d),
        });
    }
    // Finalizer before any side effect.
    if !has_finalizer {
        let mut finalizers = obj.finalizers().to_vec();
        finalizers.push(names::TERMINATION_FINALIZER.into());
        ctx.patch_claim(
            &claim.name,
            json!({"metadata": {"resourceVersion": obj.resource_version(), "finalizers": finalizers}}),
        )
        .await?;
        return Ok(Action::await_change());
    }
    // A Node deleted by a user takes its NodeClaim with it.
    if let Some(node) = claim
        .node_name
        .as_ref()
        .and_then(|n| ctx.nodes.get(&ObjectRef::new(n)))
        && node.metadata.deletion_timestamp.is_some()
    {
        ctx.event(
            &obj,
            EventType::Normal,
            "NodeDeleted",
            format!("Node {} is being deleted", node.name_any()),
        )
        .await;
        ctx.delete_claim(&claim.name).await?;
        return Ok(Action::await_change());
    }
    let plan = match launch::reconcile(&ctx, &obj, &claim).await? {
        Launch::Launched(plan) => *plan,
        Launch::Deleted => return Ok(Action::await_change()),
    };
    if !claim.is_true("Launched") {
        // Status was just written; the watch brings the fresh object.
        return Ok(Action::requeue(ctx.settings.poll));
    }
    registration::sync_provider_id(&ctx, &mut claim, &plan).await?;
    let progress = if claim.provider_id.is_some() {
        registration::reconcile(&ctx, &obj, &mut claim).await?
    } else {
        Progress::Waiting
    };
    let nodeclass = ctx
        .nodeclasses
        .get(&ObjectRef::new_with(
            &claim.node_class,
            nodeclass_resource(),
        ))
        .and_then(|o| serde_json::to_value(&*o).ok())
        .and_then(|v| NodeClass::from_json(&v).ok());
    let (launch_timeout, registration_timeout) = nodeclass
        .map(|n| (n.launch_timeout, n.registration_timeout))
        .unwrap_or((DEFAULT_LAUNCH_TIMEOUT, DEFAULT_REGISTRATION_TIMEOUT));
    match liveness::reconcile(
        &ctx,
        &obj,
        &claim,
        &plan,
        launch_timeout,
        registration_timeout,
    )
    .await?
    {
        Verdict::Deleted => Ok(Action::await_change()),
        Verdict::Alive(next) => {
            let poll = match progress {
                Progress::Initialized => Duration::from_secs(300),
                _ => ctx.settings.poll,
            };
            Ok(Action::requeue(next.map_or(poll, |n| n.min(poll))))
        }
    }
}

/// Backoff on errors; the message is logged (and LaunchFailed is in the status).
pub fn error_policy(obj: Arc<DynamicObject>, error: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(nodeclaim = %obj.name_any(), error = %error, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Drives a reflector into `writer` until the stream ends.
pub fn reflect<K>(
    writer: reflector::store::Writer<K>,
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static
where
    K: kube::Resource
        + Clone
        + Send
        + Sync
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    reflector::reflector(writer, stream)
        .default_backoff()
        .touched_objects()
        .for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "watch error (retrying)");
            }
            futures::future::ready(())
        })
}

/// An object as JSON (what the pure decision code reads).
pub fn to_json<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Everything in a cache, as JSON.
pub fn values<K>(store: &Store<K>) -> Vec<serde_json::Value>
where
    K: kube::Resource + serde::Serialize + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.state().iter().map(|o| to_json(o.as_ref())).collect()
}

/// A cache of the `ar` objects `client` sees (filtered by `config`), fed by a watch on a
/// task owned by `tasks`.
pub fn dynamic_cache(
    tasks: &mut crate::tasks::Tasks,
    client: &kube::Client,
    ar: &kube::api::ApiResource,
    config: watcher::Config,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    tasks.spawn(reflect(
        writer,
        watcher(Api::<DynamicObject>::all_with(client.clone(), ar), config),
    ));
    store
}

/// A cache of every `K` in the cluster (all namespaces), fed by a watch on a task owned by `tasks`.
pub fn typed_cache<K>(tasks: &mut crate::tasks::Tasks, client: &kube::Client) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + Send
        + Sync
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    tasks.spawn(reflect(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    ));
    store
}

/// The caches the lifecycle reads (Nodes, our Machines, NodeClasses), each fed by a watch
/// on a spawned task.
pub struct Caches {
    pub nodes: Store<Node>,
    pub machines: Store<DynamicObject>,
    pub nodeclasses: Store<DynamicObject>,
    _tasks: crate::tasks::Tasks,
}

impl Caches {
    pub fn start(workload: &kube::Client, management: &kube::Client) -> Caches {
        let mut tasks = crate::tasks::Tasks::default();
        let nodes = typed_cache::<Node>(&mut tasks, workload);
        let machines = dynamic_cache(
            &mut tasks,
            management,
            &machine::machine_resource(),
            watcher::Config::default().labels(names::NODECLAIM_LABEL),
        );
        let nodeclasses = dynamic_cache(
            &mut tasks,
            workload,
            &nodeclass_resource(),
            watcher::Config::default(),
        );
        Caches {
            nodes,
            machines,
            nodeclasses,
            _tasks: tasks,
        }
    }

    /// Waits until every cache has its first full list.
    pub async fn ready(&self) {
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.machines.wait_until_ready().await;
        let _ = self.nodeclasses.wait_until_ready().await;
    }
}

/// Runs the lifecycle controller until `shutdown` resolves. `ctx.nodeclaims` is replaced by
/// the controller's own NodeClaim cache.
pub async fn run(
    mut ctx: Ctx,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ar = nodeclaim_resource();
    let controller = Controller::new_with(
        Api::<DynamicObject>::all_with(ctx.workload.clone(), &ar),
        watcher::Config::default(),
        ar.clone(),
    );
    ctx.nodeclaims = controller.store();
    let mar = machine::machine_resource();
    let by_label = ar.clone();
    let by_owner = ar.clone();
    let controller = controller
        .watches_with(
            Api::<DynamicObject>::all_with(ctx.management.clone(), &mar),
            mar.clone(),
            watcher::Config::default().labels(names::NODECLAIM_LABEL),
            move |m| {
                m.labels()
                    .get(names::NODECLAIM_LABEL)
                    .map(|n| ObjectRef::new_with(n, by_label.clone()))
            },
        )
        .watches(
            Api::<Node>::all(ctx.workload.clone()),
            watcher::Config::default(),
            move |n| {
                n.owner_references()
                    .iter()
                    .filter(|o| o.kind == "NodeClaim" && o.api_version.starts_with("karpenter.sh/"))
                    .map(|o| ObjectRef::new_with(&o.name, by_owner.clone()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown);
    controller
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "nodeclaim controller");
            }
            futures::future::ready(())
        })
        .await;
}
