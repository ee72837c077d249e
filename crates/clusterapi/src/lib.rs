//! The Cluster API provider (`karpenter-capi run`'s default): one standalone Machine per NodeClaim, cloned from the
//! NodeClass's templates. Launch ([`launch`]) chooses the offering ([`offering`]) and hands
//! its plan ([`plan`]) to the core to record on the NodeClaim before any side effect, then
//! clones and creates ([`objects`]); an instance is the Machine named by the plan; drift
//! compares the plan with the templates, the NodeClass and the control plane's version
//! ([`drift`]); everything it creates is fenced to this workload cluster ([`fence`]). Its
//! own context ([`context`]: the management cluster's client and caches) is built by the
//! wiring; its [`Watches`] tell the lifecycle which NodeClaims its objects' changes concern.
//!
//! Everything else that knows Cluster API lives here too: [`machine`] (Machines as written
//! and read), [`clone`] (templates cloned into InfraMachines and bootstrap configs),
//! [`fence`] (which objects are ours), [`names`] (the deterministic names of what we create),
//! [`drain_rules`] (the MachineDrainRules the core's drain honours),
//! [`nodeclass`] (what launch and the timeouts read of a ClusterAPINodeClass), the
//! ClusterAPINodeClass status controller ([`nodeclass_status`], with [`offering_status`] and
//! [`calibration`]), the template catalogs of the NodeClasses ([`catalogs`]; the
//! core applies the NodeOverlays to what `instance_types` answers, launch reads the catalog
//! as overlaid), the reboot of Metal3 hosts
//! ([`reboot`]) and hub mode ([`hub`]: the management cluster's Clusters engaged one by one).

pub mod availability;
pub mod caches;
pub(crate) mod calibration;
pub mod catalogs;
pub(crate) mod clone;
pub mod context;
pub mod control_planes;
pub mod drain_rules;
pub(crate) mod drift;
pub mod fence;
pub(crate) mod gauges;
pub mod health_checks;
pub mod hub;
pub(crate) mod instances;
pub(crate) mod latency;
pub(crate) mod launch;
pub(crate) mod learned;
pub mod machine;
pub mod names;
pub(crate) mod nodeclass;
pub(crate) mod nodeclass_status;
pub(crate) mod objects;
pub(crate) mod offering;
pub(crate) mod offering_status;
#[cfg(test)]
mod overlaid_tests;
pub(crate) mod plan;
pub(crate) mod preflight;
pub mod reboot;
pub(crate) mod versions;
pub mod wiring;

use std::sync::Arc;
use std::time::Instant;

use api::NodeClaim;
use cloudprovider::InstanceTypes;
use clusterapi_api::{ClusterAPINodeClass, Machine};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};

use self::context::{Context, nodeclass_of};
use self::fence::Ownership;
use self::instances::instance;
use self::plan::Plan;
use cloudprovider::{
    CloudProvider, Created, Deletion, Drift, Error, Instance, NodeClassKind, RepairPolicy, Retry,
    Timeouts,
};
use karpenter_core::cache::Cache;
use karpenter_core::objects::uid_of;

/// Cluster API's `NodeOutdatedRevisionTaint` key (effect `PreferNoSchedule`): on the Nodes
/// of drifted NodeClaims waiting for their replacement.
pub const OUTDATED_REVISION_TAINT: &str = "node.cluster.x-k8s.io/outdated-revision";

/// The Cluster API provider of one workload cluster.
#[derive(Clone)]
pub struct ClusterApi {
    pub ctx: Context,
    /// What tells the lifecycle which NodeClaims changed (`None`: nothing does).
    watches: Option<Watches>,
}

/// The caches whose changes concern NodeClaims: a Machine (by its NodeClaim label), a
/// NodeClass (its NodeClaims: waiting for it, or drift), a Cluster (the NodeClaims planned on
/// it: drift of the control plane's version), a MachineHealthCheck (the NodeClaims planned in
/// its namespace: who remediates them), any template (drift of every NodeClaim).
#[derive(Clone)]
pub struct Watches {
    pub machines: Cache<Machine>,
    pub nodeclasses: Cache<ClusterAPINodeClass>,
    pub clusters: Cache<clusterapi_api::Cluster>,
    /// MachineHealthChecks (the NodeClaims planned in one's namespace: who remediates).
    pub health_checks: Cache<clusterapi_api::MachineHealthCheck>,
    /// Bumped on every template change.
    pub templates: Option<tokio::sync::watch::Receiver<u64>>,
}

impl Watches {
    /// The names of the NodeClaims each change concerns.
    fn changes(
        &self,
        claims: &Store<NodeClaim>,
        control_planes: &control_planes::ControlPlanes,
    ) -> BoxStream<'static, String> {
        let by_machine = self
            .machines
            .subscribe()
            .filter_map(|m| {
                futures::future::ready(m.labels().get(api::consts::labels::NODECLAIM).cloned())
            })
            .boxed();
        let by_nodeclass = claims_where(
            self.nodeclasses.subscribe(),
            claims,
            |c, nc: &ClusterAPINodeClass| c.spec.node_class_ref.name == nc.name_any(),
        );
        let by_cluster = claims_where(
            self.clusters.subscribe(),
            claims,
            |c, cl: &clusterapi_api::Cluster| {
                Plan::of(c).is_some_and(|p| {
                    p.cluster == cl.name_any()
                        && Some(p.namespace.as_str()) == cl.namespace().as_deref()
                })
            },
        );
        let by_health_check = claims_where(
            self.health_checks.subscribe(),
            claims,
            |c, mhc: &clusterapi_api::MachineHealthCheck| {
                Plan::of(c)
                    .is_some_and(|p| Some(p.namespace.as_str()) == mhc.namespace().as_deref())
            },
        );
        let templates = futures::stream::unfold(self.templates.clone(), |rx| async move {
            let mut rx = rx?;
            rx.changed().await.ok()?;
            Some((Arc::new(()), Some(rx)))
        });
        let every = claims_where(templates, claims, |_, _: &()| true);
        // A control plane's change: the NodeClaims planned on a Cluster it is the control
        // plane of (a held launch may go, version drift is judged again).
        let cp_changes = futures::stream::unfold(control_planes.subscribe(), |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(key) => return Some((Arc::new(key), rx)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        let clusters = self.clusters.store();
        let by_control_plane = claims_where(
            cp_changes,
            claims,
            move |c, cp: &control_planes::ControlPlaneKey| {
                Plan::of(c).is_some_and(|p| {
                    p.namespace == cp.namespace
                        && clusters
                            .get(&ObjectRef::new(&p.cluster).within(&p.namespace))
                            .and_then(|cl| cl.spec.control_plane_ref.clone())
                            .is_some_and(|r| r.kind == cp.kind && r.name == cp.name)
                })
            },
        );
        futures::stream::select_all([
            by_machine,
            by_nodeclass,
            by_cluster,
            by_health_check,
            every,
            by_control_plane,
        ])
        .boxed()
    }
}

/// For each object of `changes`, the names of the cached NodeClaims `related` to it.
fn claims_where<K: Send + Sync + 'static>(
    changes: impl Stream<Item = Arc<K>> + Send + 'static,
    claims: &Store<NodeClaim>,
    related: impl Fn(&NodeClaim, &K) -> bool + Send + Sync + 'static,
) -> BoxStream<'static, String> {
    let claims = claims.clone();
    changes
        .flat_map(move |obj| {
            let names: Vec<String> = claims
                .state()
                .iter()
                .filter(|c| related(c, &obj))
                .map(|c| c.name_any())
                .collect();
            futures::stream::iter(names)
        })
        .boxed()
}

impl ClusterApi {
    /// The provider over `ctx`, telling the lifecycle of changes in `watches`.
    pub fn new(ctx: Context, watches: Option<Watches>) -> ClusterApi {
        ClusterApi { ctx, watches }
    }

    fn cached(&self, plan: &Plan) -> Option<Arc<Machine>> {
        self.ctx
            .machines
            .get(&ObjectRef::new(&plan.machine).within(&plan.namespace))
    }

    async fn get_instance(&self, claim: &NodeClaim) -> Result<Instance, Error> {
        let not_found = || Error::NodeClaimNotFound(claim.name_any());
        let plan = Plan::of(claim).ok_or_else(not_found)?;
        let machine = match self.cached(&plan) {
            Some(m) => m,
            // The cache may lag behind our own create: ask the API server before concluding.
            None => match self
                .ctx
                .machines_api(&plan.namespace)
                .get_opt(&plan.machine)
                .await
                .map_err(|e| typed(e.into()))?
            {
                Some(m) => Arc::new(m),
                None => return Err(not_found()),
            },
        };
        if fence::ownership(machine.as_ref(), &uid_of(claim), &self.ctx.cluster_id)
            == Ownership::Foreign
        {
            return Err(not_found());
        }
        let mut found = instance(claim.name_any(), &plan, &machine);
        found.remediated_elsewhere =
            health_checks::remediated_elsewhere(&machine, &self.ctx.health_checks.state());
        Ok(found)
    }

    async fn delete_instance(&self, claim: &NodeClaim) -> Result<Deletion, Error> {
        let Some(plan) = Plan::of(claim) else {
            return Ok(Deletion::Gone);
        };
        let ctx = &self.ctx;
        let uid = uid_of(claim);
        let machines = ctx.machines_api(&plan.namespace);
        let found = machines
            .get_opt(&plan.machine)
            .await
            .map_err(|e| typed(e.into()))?;
        if let Some(m) = found
            && fence::ownership(&m, &uid, &ctx.cluster_id) != Ownership::Foreign
        {
            if m.metadata.deletion_timestamp.is_none() {
                let writer = karpenter_core::write::Writer::new(
                    machines,
                    karpenter_core::write::manager::LIFECYCLE,
                );
                // The core drained the Node of a NodeClaim being deleted: Cluster API's own
                // drain is excluded (not for a stand-in of an orphaned instance, which nothing
                // drained). A conflict is decided again from the fresh Machine.
                let exclude = api::consts::annotations::EXCLUDE_NODE_DRAINING;
                if claim.metadata.resource_version.is_some()
                    && !m.annotations().contains_key(exclude)
                {
                    let body =
                        serde_json::json!({"metadata": {"annotations": {exclude: "karpenter"}}});
                    let out = writer.patch(&m, body).await;
                    if out.map_err(|e| typed(e.into()))? == karpenter_core::write::Outcome::Conflict
                    {
                        let what = format!("Machine {}/{}", plan.namespace, plan.machine);
                        return Err(typed(karpenter_core::write::Refused::Conflict(what).into()));
                    }
                }
                // The very Machine judged ours (UID precondition); gone meanwhile is fine.
                writer.delete(&m).await.map_err(|e| typed(e.into()))?;
                // A stand-in for an orphaned instance (garbage collection) is no object to
                // hang an event on.
                if claim.metadata.resource_version.is_none() {
                    return Ok(Deletion::Waiting(ctx.settings.poll));
                }
                ctx.event(
                    claim,
                    EventType::Normal,
                    api::consts::events::DISRUPTION_TERMINATING,
                    format!(
                        "Deleting Machine {}/{} (its Node drained); Cluster API removes the node",
                        plan.namespace, plan.machine
                    ),
                )
                .await;
            }
            // The Machine watch brings the deletion; the poll is a safety net.
            return Ok(Deletion::Waiting(ctx.settings.poll));
        }
        // Machine gone: anything of the plan that is left (a launch interrupted before the
        // Machine existed, or a provider that did not clean up).
        objects::delete_ours(ctx, &plan.namespace, &plan.infrastructure, &uid)
            .await
            .map_err(typed)?;
        if let Some(b) = &plan.bootstrap {
            objects::delete_ours(ctx, &plan.namespace, b, &uid)
                .await
                .map_err(typed)?;
        }
        ctx.launched.forget(&uid);
        Ok(Deletion::Gone)
    }
}

/// An error of the Cluster API provider's steps as the typed error Karpenter's providers
/// return.
pub(crate) fn typed(e: karpenter_core::nodeclaim::error::Error) -> Error {
    use karpenter_core::nodeclaim::error::Error as E;
    match e {
        E::Permanent { reason, message } => {
            if reason == api::consts::events::INSUFFICIENT_CAPACITY_ERROR {
                Error::InsufficientCapacity(message)
            } else if reason == api::consts::events::NODECLASS_NOT_READY {
                Error::NodeClassNotReady(message)
            } else {
                Error::Create { reason, message }
            }
        }
        other => other.to_provider(),
    }
}

impl CloudProvider for ClusterApi {
    fn create<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Created, Error>> {
        async move { launch::reconcile(&self.ctx, claim).await.map_err(typed) }.boxed()
    }

    fn delete<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Deletion, Error>> {
        self.delete_instance(claim).boxed()
    }

    fn get<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Instance, Error>> {
        self.get_instance(claim).boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, Error>> {
        async move {
            // Listed from the caches: never from one still filling.
            if self.ctx.machines.wait_until_ready().await.is_err()
                || self.ctx.nodeclasses.wait_until_ready().await.is_err()
            {
                return Err(Error::retryable(Retry::Waiting, "the caches were dropped"));
            }
            instances::list(&self.ctx).await
        }
        .boxed()
    }

    fn changes(&self) -> Option<BoxStream<'static, String>> {
        self.watches
            .as_ref()
            .map(|w| w.changes(&self.ctx.nodeclaims, &self.ctx.control_planes))
    }

    fn instance_types(&self, nodeclass: &str) -> Option<Arc<InstanceTypes>> {
        context::offered(&self.ctx, nodeclass).map(|c| c.types.clone())
    }

    fn manual_drift(&self, nodeclass: &str) -> bool {
        self.ctx
            .nodeclasses
            .get(&kube::runtime::reflector::ObjectRef::new(nodeclass))
            .is_some_and(|nc| nc.manual_drift())
    }

    fn is_drifted<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<Option<Drift>, Error>> {
        async move {
            let Some(plan) = Plan::of(claim) else {
                return Ok(None);
            };
            Ok(drift::observe(&self.ctx, claim, &plan).await)
        }
        .boxed()
    }

    fn drifted_taint(&self) -> Option<k8s_openapi::api::core::v1::Taint> {
        // What a MachineDeployment rollout puts on its old Machines' Nodes.
        Some(k8s_openapi::api::core::v1::Taint {
            key: OUTDATED_REVISION_TAINT.into(),
            effect: "PreferNoSchedule".into(),
            ..Default::default()
        })
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        match &self.ctx.settings.repair_policies {
            Some(user) => user.as_ref().clone(),
            None => RepairPolicy::node_not_ready(self.ctx.settings.node_repair_after),
        }
    }

    fn reboot<'a>(
        &'a self,
        claim: &'a NodeClaim,
        operation: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        reboot::reboot(&self.ctx, claim, operation).boxed()
    }

    fn name(&self) -> &'static str {
        "clusterapi"
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind {
            group: api::consts::groups::NODECLASS,
            kind: "ClusterAPINodeClass",
        }]
    }

    fn private_annotations(&self) -> Vec<&'static str> {
        // The launch plan is large and means nothing on a Node.
        vec![api::consts::annotations::LAUNCH_PLAN]
    }

    fn timeouts(&self, claim: &NodeClaim) -> Timeouts {
        nodeclass_of(&self.ctx, claim).map_or(Timeouts::DEFAULT, |n| Timeouts {
            launch: n.launch_timeout,
            registration: n.registration_timeout,
        })
    }

    fn drain_rules(&self, claim: &NodeClaim) -> Result<cloudprovider::DrainRules, Error> {
        drain_rules::of_claim(&self.ctx, claim)
    }

    fn launch_succeeded(&self, claim: &NodeClaim) {
        if let Some(plan) = Plan::of(claim) {
            self.ctx
                .unavailable
                .succeeded(&availability::unavailable::OfferingKey::of_plan(&plan));
        }
    }

    fn launch_failed(&self, claim: &NodeClaim, why: &str) {
        if let Some(plan) = Plan::of(claim) {
            let key = availability::unavailable::OfferingKey::of_plan(&plan);
            let hold = self
                .ctx
                .unavailable
                .mark(key, why.to_string(), Instant::now());
            tracing::info!(nodeclaim = %claim.name_any(), template = %plan.infrastructure_template.name,
                zone = plan.zone.as_deref().unwrap_or("-"), capacity_type = %plan.capacity_type,
                hold_seconds = hold.as_secs(), "offering backed off after a failed launch");
        }
    }
}
