//! The Cluster API provider: one standalone Machine per NodeClaim, cloned from the
//! NodeClass's templates. Launch ([`launch`]) chooses the offering ([`offering`]) and
//! records its plan on the NodeClaim ([`plan`]) before any side effect, then clones and
//! creates ([`objects`]); an instance is the Machine named by the plan; drift compares the
//! plan with the templates, the NodeClass and the control plane's version ([`drift`]);
//! everything it creates is fenced to this workload cluster ([`fence`]).
//!
//! Everything else that knows Cluster API lives here too: [`machine`] (Machines as written
//! and read), [`clone`] (templates cloned into InfraMachines and bootstrap configs),
//! [`fence`] (which objects are ours), [`names`] (the deterministic names of what we create),
//! [`nodeclass`] (what launch and liveness read of a ClusterAPINodeClass), the
//! ClusterAPINodeClass status controller ([`nodeclass_status`], with [`offering_status`] and
//! [`calibration`]).

pub(crate) mod calibration;
pub(crate) mod clone;
pub(crate) mod drift;
pub(crate) mod fence;
pub(crate) mod launch;
pub mod machine;
pub mod names;
pub(crate) mod nodeclass;
pub(crate) mod nodeclass_status;
pub(crate) mod objects;
pub(crate) mod offering;
pub(crate) mod offering_status;
pub(crate) mod plan;

use std::sync::Arc;
use std::time::Instant;

use api::{Machine, NodeClaim};
use futures::FutureExt;
use futures::future::BoxFuture;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use templates::model::Catalog;

use self::fence::Ownership;
use self::plan::Plan;
use super::inventory::instance;
use super::{CloudProvider, Deletion, Drift, Error, Instance, NodeClassKind, RepairPolicy};
use crate::nodeclaim::context::{Ctx, Shared, uid_of};

/// The Cluster API provider of one workload cluster.
#[derive(Clone)]
pub struct ClusterApi {
    pub shared: Shared,
}

impl ClusterApi {
    /// The NodeClaim loops' context over `shared`, with this provider behind the seam.
    pub fn context(shared: Shared) -> Ctx {
        Ctx {
            provider: Arc::new(ClusterApi {
                shared: shared.clone(),
            }),
            shared,
        }
    }

    fn cached(&self, plan: &Plan) -> Option<Arc<Machine>> {
        self.shared
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
                .shared
                .machines_api(&plan.namespace)
                .get_opt(&plan.machine)
                .await
                .map_err(|e| Error::Retryable(e.into()))?
            {
                Some(m) => Arc::new(m),
                None => return Err(not_found()),
            },
        };
        if fence::ownership(machine.as_ref(), &uid_of(claim), &self.shared.cluster_id)
            == Ownership::Foreign
        {
            return Err(not_found());
        }
        Ok(instance(claim.name_any(), &plan, &machine))
    }

    async fn delete_instance(&self, claim: &NodeClaim) -> Result<Deletion, Error> {
        let Some(plan) = Plan::of(claim) else {
            return Ok(Deletion::Gone);
        };
        let ctx = &self.shared;
        let uid = uid_of(claim);
        let machines = ctx.machines_api(&plan.namespace);
        let found = machines
            .get_opt(&plan.machine)
            .await
            .map_err(|e| Error::Retryable(e.into()))?;
        if let Some(m) = found
            && fence::ownership(&m, &uid, &ctx.cluster_id) != Ownership::Foreign
        {
            if m.metadata.deletion_timestamp.is_none() {
                let writer = crate::write::Writer::new(machines, crate::write::manager::LIFECYCLE);
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
                    if out.map_err(|e| Error::Retryable(e.into()))?
                        == crate::write::Outcome::Conflict
                    {
                        let what = format!("Machine {}/{}", plan.namespace, plan.machine);
                        return Err(Error::Retryable(
                            crate::write::Refused::Conflict(what).into(),
                        ));
                    }
                }
                // The very Machine judged ours (UID precondition); gone meanwhile is fine.
                writer
                    .delete(&m)
                    .await
                    .map_err(|e| Error::Retryable(e.into()))?;
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
        objects::delete_ours(ctx, &plan.namespace, &plan.infrastructure, &uid).await?;
        if let Some(b) = &plan.bootstrap {
            objects::delete_ours(ctx, &plan.namespace, b, &uid).await?;
        }
        Ok(Deletion::Gone)
    }
}

/// A permanent launch failure as the typed error Karpenter's providers return.
fn typed(e: crate::nodeclaim::error::Error) -> Error {
    use crate::nodeclaim::error::Error as E;
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
        other => Error::Retryable(other),
    }
}

impl CloudProvider for ClusterApi {
    fn create(&self, claim: Arc<NodeClaim>) -> BoxFuture<'_, Result<Arc<NodeClaim>, Error>> {
        async move { launch::reconcile(&self.shared, claim).await.map_err(typed) }.boxed()
    }

    fn delete<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Deletion, Error>> {
        self.delete_instance(claim).boxed()
    }

    fn get<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Instance, Error>> {
        self.get_instance(claim).boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, Error>> {
        super::inventory::list(&self.shared).boxed()
    }

    fn instance_types(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        self.shared.catalogs.catalog(nodeclass)
    }

    fn is_drifted<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<Option<Drift>, Error>> {
        async move {
            let Some(plan) = Plan::of(claim) else {
                return Ok(None);
            };
            Ok(drift::observe(&self.shared, claim, &plan).await)
        }
        .boxed()
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        ["False", "Unknown"]
            .into_iter()
            .map(|status| RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: status.into(),
                toleration: self.shared.settings.node_repair_after,
            })
            .collect()
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

    fn launch_failed(&self, claim: &NodeClaim, why: &str) {
        if let Some(plan) = Plan::of(claim) {
            let key = plan.offering_key();
            let hold = self
                .shared
                .unavailable
                .mark(key, why.to_string(), Instant::now());
            tracing::info!(nodeclaim = %claim.name_any(), template = %plan.infrastructure_template.name,
                zone = plan.zone.as_deref().unwrap_or("-"), capacity_type = %plan.capacity_type,
                hold_seconds = hold.as_secs(), "offering backed off after a failed launch");
        }
    }
}
