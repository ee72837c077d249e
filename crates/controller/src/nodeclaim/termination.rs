//! Termination of a NodeClaim being deleted: `InstanceTerminating=True`, delete the Machine
//! (Cluster API drains the Node, then deletes the InfraMachine, the bootstrap config and the
//! Node), wait until it is gone, delete whatever of the plan is left (clones, Node), release
//! our finalizer on the Node, then release the NodeClaim's finalizer. Only objects marked
//! with this NodeClaim's UID are deleted (see `fence`): a NodeClaim re-applied under another
//! name, or restored from a backup with a new UID, never deletes its neighbour's objects.

use std::time::Duration;

use api::NodeClaim;
use api::consts::{conditions as types, reasons};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use serde_json::json;

use super::context::{Ctx, Error, set_ready, uid_of};
use super::plan::{Plan, TypedRef, nodepool_of};
use crate::fence::{self, Ownership};
use crate::metrics::TerminatedLabels;
use crate::names;

/// Termination's result: done (finalizer released) or look again later.
#[derive(Debug, PartialEq, Eq)]
pub enum Termination {
    Done,
    Waiting(Duration),
}

/// Deletes the object `r` names if it is this NodeClaim's (`uid`); returns whether it did.
async fn delete_ours(ctx: &Ctx, ns: &str, r: &TypedRef, uid: &str) -> Result<bool, Error> {
    let ar = match ctx.resource(&r.api_version, &r.kind).await {
        Ok(ar) => ar,
        // The kind is no longer served: nothing of it can be left.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &ar);
    let Some(found) = api.get_opt(&r.name).await? else {
        return Ok(false);
    };
    if fence::ownership(&found, uid, &ctx.cluster_id) == Ownership::Foreign {
        tracing::warn!(object = %fence::key(&found), kind = %r.kind,
            owner = fence::claim_uid(&found).unwrap_or("none"),
            "not deleting an object of the plan that belongs to another NodeClaim");
        return Ok(false);
    }
    if found.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: found.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&r.name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
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
        .filter(|f| *f != names::TERMINATION_FINALIZER)
        .cloned()
        .collect();
    if finalizers.len() != node.finalizers().len() {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"resourceVersion": node.resource_version(), "finalizers": finalizers}})),
            )
            .await?;
    }
    if node.metadata.deletion_timestamp.is_none() {
        match nodes.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

pub async fn reconcile(ctx: &Ctx, claim: &NodeClaim) -> Result<Termination, Error> {
    let name = claim.name_any();
    let uid = uid_of(claim);
    let mut status = claim.status.clone().unwrap_or_default();
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
        ctx.write_status(claim, &status).await?;
    }
    if let Some(plan) = Plan::of(claim) {
        let machines = ctx.machines_api(&plan.namespace);
        if let Some(m) = machines.get_opt(&plan.machine).await? {
            let ours = fence::ownership(&m, &uid, &ctx.cluster_id) != Ownership::Foreign;
            if ours {
                if m.metadata.deletion_timestamp.is_none() {
                    machines.delete(&plan.machine, &Default::default()).await?;
                    ctx.event(
                        claim,
                        EventType::Normal,
                        api::consts::events::DISRUPTION_TERMINATING,
                        format!(
                            "Deleting Machine {}/{}; Cluster API drains and removes the node",
                            plan.namespace, plan.machine
                        ),
                    )
                    .await;
                }
                // The Machine watch brings the deletion; the poll is a safety net.
                return Ok(Termination::Waiting(ctx.settings.poll));
            }
        }
        // Machine gone: anything of the plan that is left (a launch interrupted before the
        // Machine existed, or a provider that did not clean up).
        delete_ours(ctx, &plan.namespace, &plan.infrastructure, &uid).await?;
        if let Some(b) = &plan.bootstrap {
            delete_ours(ctx, &plan.namespace, b, &uid).await?;
        }
    }
    if let Some(node) = &status.node_name {
        release_node(ctx, node).await?;
    }
    // Release the NodeClaim's finalizer (conditional on the version we read).
    let finalizers: Vec<String> = claim
        .finalizers()
        .iter()
        .filter(|f| *f != names::TERMINATION_FINALIZER)
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
            capacity_type: super::plan::capacity_type_of(claim),
        })
        .inc();
    if status.node_name.is_some() {
        ctx.metrics
            .nodes_terminated
            .get_or_create(&crate::metrics::NodePoolLabels { nodepool })
            .inc();
    }
    tracing::info!(nodeclaim = %name, "terminated");
    Ok(Termination::Done)
}
