//! ProviderID, registration and initialization: the Machine's providerID is copied into the
//! NodeClaim status; the Node with that providerID is adopted (finalizer, ownerRef, labels,
//! taints, unregistered taint removed); once it is Ready with its startup and ephemeral taints
//! gone and requested resources present, the NodeClaim is Initialized.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::claim::Claim;
use super::context::{Ctx, Error, set_condition, with_ready};
use super::launch::Plan;
use super::node_sync::{
    NodeMatch, check_initialized, is_registered_in_sync, match_node, registered_node,
};
use crate::machine;
use crate::metrics::NodePoolLabels;
use crate::names;

/// Where the NodeClaim stands after this step.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Waiting for CAPI / the provider / the Node.
    Waiting,
    Registered,
    Initialized,
}

/// Copies the Machine's providerID into the NodeClaim status, once.
pub async fn sync_provider_id(ctx: &Ctx, claim: &mut Claim, plan: &Plan) -> Result<(), Error> {
    if claim.provider_id.is_some() {
        return Ok(());
    }
    let Some(m) = ctx.machines.get(
        &ObjectRef::new_with(&plan.machine, machine::machine_resource()).within(&plan.namespace),
    ) else {
        return Ok(());
    };
    if let Some(pid) = machine::provider_id(&m) {
        ctx.patch_claim_status(&claim.name, json!({"providerID": pid}))
            .await?;
        claim.provider_id = Some(pid.to_string());
        if let Some(created) = claim_created(ctx, &claim.name) {
            let elapsed = Timestamp::now().duration_since(created).as_secs_f64();
            let nodepool = claim
                .labels
                .get(names::NODEPOOL_LABEL)
                .cloned()
                .unwrap_or_default();
            ctx.metrics
                .launch_duration
                .get_or_create(&NodePoolLabels { nodepool })
                .observe(elapsed.max(0.0));
        }
    }
    Ok(())
}

fn claim_created(ctx: &Ctx, name: &str) -> Option<Timestamp> {
    ctx.nodeclaims
        .get(&ObjectRef::new_with(
            name,
            super::context::nodeclaim_resource(),
        ))
        .and_then(|o| o.metadata.creation_timestamp.clone())
        .map(|t| t.0)
}

/// Registration and initialization for a NodeClaim with a providerID.
pub async fn reconcile(
    ctx: &Ctx,
    obj: &DynamicObject,
    claim: &mut Claim,
) -> Result<Progress, Error> {
    let view = claim.view();
    let nodes = ctx.nodes.state();
    let now = Timestamp::now();
    let node = match match_node(&view, nodes.iter().map(|n| n.as_ref())) {
        NodeMatch::NotFound => {
            if claim
                .condition("Registered")
                .is_none_or(|c| c.reason != "NodeNotFound")
            {
                let c = set_condition(
                    &claim.conditions,
                    "Registered",
                    "Unknown",
                    "NodeNotFound",
                    "Node not registered with cluster",
                    None,
                    now,
                );
                ctx.patch_claim_status(
                    &claim.name,
                    json!({"conditions": with_ready(c.clone(), now)}),
                )
                .await?;
                claim.conditions = c;
            }
            return Ok(Progress::Waiting);
        }
        NodeMatch::Multiple(names) => {
            let msg = format!(
                "expected a single node with providerID {:?}, found {}",
                view.provider_id,
                names.join(", ")
            );
            let c = set_condition(
                &claim.conditions,
                "Registered",
                "False",
                "MultipleNodesFound",
                &msg,
                None,
                now,
            );
            ctx.patch_claim_status(
                &claim.name,
                json!({"conditions": with_ready(c.clone(), now)}),
            )
            .await?;
            claim.conditions = c;
            return Ok(Progress::Waiting);
        }
        NodeMatch::One(node) => node.clone(),
    };
    let node_name = node.name_any();
    let nodes_api: Api<Node> = Api::all(ctx.workload.clone());

    if !claim.is_true("Registered") {
        let had_unregistered_taint = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == names::UNREGISTERED_TAINT_KEY));
        if !had_unregistered_taint && !node.labels().contains_key(names::NODE_REGISTERED_LABEL) {
            ctx.event_for(
                &node,
                EventType::Warning,
                "UnregisteredTaintMissing",
                format!(
                    "Node {node_name} registered without the {}:NoExecute taint; pods may have been scheduled before Karpenter synced it",
                    names::UNREGISTERED_TAINT_KEY
                ),
            )
            .await;
        }
    }
    if !is_registered_in_sync(&node, &view) {
        let want = registered_node(&node, &view);
        let owner = json!([{
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "name": claim.name, "uid": claim.uid, "blockOwnerDeletion": true
        }]);
        let mut owners = node.metadata.owner_references.clone().unwrap_or_default();
        let owner_refs = if owners.iter().any(|o| o.uid == claim.uid) {
            serde_json::to_value(&owners).unwrap_or(owner)
        } else {
            owners.push(serde_json::from_value(owner[0].clone()).map_err(|source| {
                Error::Decode {
                    what: "ownerReference".into(),
                    source,
                }
            })?);
            serde_json::to_value(&owners).unwrap_or_default()
        };
        nodes_api
            .patch(
                &node_name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {
                        "resourceVersion": node.resource_version(),
                        "labels": want.labels,
                        "annotations": want.annotations,
                        "finalizers": want.finalizers,
                        "ownerReferences": owner_refs,
                    },
                    "spec": {"taints": want.taints},
                })),
            )
            .await?;
    }
    if !claim.is_true("Registered") || claim.node_name.as_deref() != Some(&node_name) {
        let c = set_condition(
            &claim.conditions,
            "Registered",
            "True",
            "Registered",
            "",
            None,
            now,
        );
        ctx.patch_claim_status(
            &claim.name,
            json!({"nodeName": node_name, "conditions": with_ready(c.clone(), now)}),
        )
        .await?;
        ctx.patch_claim(
            &claim.name,
            json!({"metadata": {"labels": {names::NODE_REGISTERED_LABEL: "true"}}}),
        )
        .await?;
        claim.conditions = c;
        claim.node_name = Some(node_name.clone());
        let nodepool = claim
            .labels
            .get(names::NODEPOOL_LABEL)
            .cloned()
            .unwrap_or_default();
        ctx.metrics
            .nodes_created
            .get_or_create(&NodePoolLabels { nodepool })
            .inc();
        ctx.event(
            obj,
            EventType::Normal,
            "Registered",
            format!("Node {node_name} registered"),
        )
        .await;
    }

    // Initialization: evaluate the Node as it is after our sync.
    let synced = ctx
        .nodes
        .get(&ObjectRef::new(&node_name))
        .map(|n| (*n).clone())
        .unwrap_or(node);
    match check_initialized(&synced, &view) {
        Ok(()) => {
            if !claim.is_true("Initialized") {
                nodes_api
                    .patch(
                        &node_name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"labels": {names::NODE_INITIALIZED_LABEL: "true"}}})),
                    )
                    .await?;
                let c = set_condition(
                    &claim.conditions,
                    "Initialized",
                    "True",
                    "Initialized",
                    "",
                    None,
                    now,
                );
                ctx.patch_claim_status(
                    &claim.name,
                    json!({"conditions": with_ready(c.clone(), now)}),
                )
                .await?;
                ctx.patch_claim(
                    &claim.name,
                    json!({"metadata": {"labels": {names::NODE_INITIALIZED_LABEL: "true"}}}),
                )
                .await?;
                claim.conditions = c;
            }
            Ok(Progress::Initialized)
        }
        Err(why) => {
            let message = why.to_string();
            let current = claim.condition("Initialized");
            if current.is_none_or(|c| c.status == "True" || c.message != message)
                && !claim.is_true("Initialized")
            {
                let c = set_condition(
                    &claim.conditions,
                    "Initialized",
                    "Unknown",
                    why.reason(),
                    &message,
                    None,
                    now,
                );
                ctx.patch_claim_status(
                    &claim.name,
                    json!({"conditions": with_ready(c.clone(), now)}),
                )
                .await?;
                claim.conditions = c;
            }
            Ok(if claim.is_true("Initialized") {
                Progress::Initialized
            } else {
                Progress::Registered
            })
        }
    }
}
