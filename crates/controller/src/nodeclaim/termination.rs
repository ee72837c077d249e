//! Termination of a NodeClaim being deleted: `InstanceTerminating=True`, delete the Machine
//! (Cluster API drains the Node, then deletes the InfraMachine, the bootstrap config and the
//! Node), wait until it is gone, delete whatever of the plan is left (clones, Node), release
//! our finalizer on the Node, then release the NodeClaim's finalizer. Only objects marked
//! with this NodeClaim's UID are deleted (see `cloudprovider::clusterapi::fence`): a NodeClaim
//! re-applied under another name, or restored from a backup with a new UID, never deletes its
//! neighbour's objects.

use std::time::Duration;

use api::NodeClaim;
use api::consts::{conditions as types, reasons};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;

use super::context::{Ctx, Error, set_ready, uid_of};
use super::labels::nodepool_of;
use crate::cloudprovider::Deletion;
use crate::metrics::TerminatedLabels;
use crate::write::{Outcome, Refused, Writer, manager};

/// Termination's result: done (finalizer released) or look again later.
#[derive(Debug, PartialEq, Eq)]
pub enum Termination {
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

pub async fn reconcile(ctx: &Ctx, claim: &NodeClaim) -> Result<Termination, Error> {
    let name = claim.name_any();
    let mut fresh = None;
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
        fresh = ctx.write_status_returning(claim, &status).await?;
    }
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
