//! Registration and initialization: find the Node whose `spec.providerID` is the NodeClaim's
//! (an index lookup, not a scan), sync it in one patch (finalizer, owner reference, the
//! NodeClaim's labels, annotations, taints and startup taints, the unregistered taint
//! removed, `karpenter.sh/registered`, and `karpenter.sh/initialized` when it already is),
//! then record `Registered`/`Initialized` in the status the lifecycle writes once.

use std::sync::Arc;

use api::NodeClaim;
use api::consts::{conditions as types, reasons};
use api::karpenter::NodeClaimStatus;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use serde_json::json;

use super::context::{Ctx, Error, set_condition as set};
use super::labels::nodepool_of;
use super::node_sync::{
    ClaimView, NotInitialized, RegisteredNode, check_initialized, registered_node,
};
use crate::write::{Writer, manager};

/// How far registration got.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    Waiting,
    Registered,
    Initialized,
}

/// Registration and initialization of a launched NodeClaim whose providerID is known.
pub(crate) async fn reconcile(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &mut NodeClaimStatus,
) -> Result<Progress, Error> {
    let Some(pid) = status.provider_id.clone() else {
        tracing::debug!(nodeclaim = %claim.name_any(), "registration: no providerID yet");
        return Ok(Progress::Waiting);
    };
    let registered = api::conditions::is_true(&status.conditions, types::REGISTERED);
    let initialized = api::conditions::is_true(&status.conditions, types::INITIALIZED);
    let Some(node) = the_node(ctx, status, &pid, registered) else {
        tracing::debug!(nodeclaim = %claim.name_any(), provider_id = %pid, "registration: no Node yet");
        return Ok(Progress::Waiting);
    };
    let node_name = node.name_any();
    let view = ClaimView::of(claim, &ctx.provider.private_annotations());
    // A Node is synced once the sync would also initialize it (Ready, no known ephemeral
    // taint left but ours): the unregistered taint keeps pods off it until then anyway, and
    // registration and initialization become one Node write and one status write. Startup
    // taints cannot wait (they must be on the Node before the daemons that remove them
    // start), nor can requested extended resources (their device plugins run as pods).
    // A Node that never gets there is deleted at the registration timeout.
    if !registered && view.startup_taints.is_empty() && !ready_to_sync(&node, &view, status) {
        tracing::debug!(nodeclaim = %claim.name_any(), node = %node_name, "registration: Node not ready to sync");
        return Ok(Progress::Waiting);
    }
    // The Node's own ResourceSlices, when its pods' claims wait for DRA drivers.
    let slices: Vec<Arc<ResourceSlice>> = if view.dra_drivers.is_empty() || initialized {
        Vec::new()
    } else {
        ctx.slices
            .state()
            .into_iter()
            .filter(|s| api::dra::slice_of_node(s, &node_name))
            .collect()
    };
    let slices: Vec<&ResourceSlice> = slices.iter().map(Arc::as_ref).collect();
    let (want, init) = wanted(&node, &view, &slices, registered, initialized);
    if !registered {
        warn_if_unregistered_taint_missing(ctx, &node).await;
    }
    sync_node(ctx, claim, &node, &want).await?;
    record_registered(ctx, claim, status, &node_name, registered).await;
    if initialized {
        return Ok(Progress::Initialized);
    }
    if let Err(why @ NotInitialized::DraDriverNotPublished(_)) = &init {
        report_unpublished(ctx, claim, status, why).await;
    }
    Ok(record_initialized(status, init))
}

/// A Warning Event the first time a NodeClaim waits for a DRA driver's ResourceSlices (the
/// Initialized condition then says so until they come).
async fn report_unpublished(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    why: &NotInitialized,
) {
    let already = api::conditions::get(&status.conditions, types::INITIALIZED)
        .is_some_and(|c| c.reason == why.reason());
    if !already {
        ctx.event(
            claim,
            EventType::Warning,
            why.reason(),
            format!(
                "{why}; the NodeClaim is not initialized until it does (its pods' ResourceClaims need it)"
            ),
        )
        .await;
    }
}

/// The one Node whose providerID is `pid`; else `None`, with the Registered condition saying
/// why (no Node yet, unless already registered; several Nodes).
fn the_node(
    ctx: &Ctx,
    status: &mut NodeClaimStatus,
    pid: &str,
    registered: bool,
) -> Option<Arc<Node>> {
    let nodes = ctx.nodes.by_index(pid);
    match nodes.as_slice() {
        [] => {
            if !registered {
                set(
                    status,
                    types::REGISTERED,
                    api::conditions::UNKNOWN,
                    reasons::NODE_NOT_FOUND,
                    "Node not registered with cluster",
                );
            }
            None
        }
        [one] => Some(one.clone()),
        many => {
            let names: Vec<String> = many.iter().map(|n| n.name_any()).collect();
            set(
                status,
                types::REGISTERED,
                api::conditions::FALSE,
                reasons::MULTIPLE_NODES_FOUND,
                &format!(
                    "expected a single node with providerID {pid}, found {}",
                    names.join(", ")
                ),
            );
            None
        }
    }
}

/// Whether the Node, as the sync would leave it, is Ready with no known ephemeral taint;
/// when not, the Registered condition says what it waits for.
fn ready_to_sync(node: &Node, view: &ClaimView, status: &mut NodeClaimStatus) -> bool {
    let mut synced: Node = node.clone();
    let preview = registered_node(node, view);
    synced.metadata.labels = Some(preview.labels);
    if let Some(spec) = synced.spec.as_mut() {
        spec.taints = Some(preview.taints);
    }
    if let Err(why @ (NotInitialized::NodeNotReady | NotInitialized::EphemeralTaint(_))) =
        check_initialized(&synced, view, &[])
    {
        set(
            status,
            types::REGISTERED,
            api::conditions::UNKNOWN,
            reasons::NODE_NOT_FOUND,
            &format!("Node {} joined; waiting until {why}", node.name_any()),
        );
        return false;
    }
    true
}

/// What the Node must look like, and whether it is initialized once it does: initialization
/// is judged on the Node as it will be after this sync, so a Node that is already Ready is
/// initialized in the same write.
fn wanted(
    node: &Node,
    view: &ClaimView,
    slices: &[&ResourceSlice],
    registered: bool,
    initialized: bool,
) -> (RegisteredNode, Result<(), NotInitialized>) {
    let mut want = if registered {
        // Karpenter syncs once, at registration; afterwards daemons own the taints (a
        // startup taint removed by its daemon must not come back).
        let mut labels = node.labels().clone();
        labels.insert(api::consts::labels::REGISTERED.into(), "true".into());
        RegisteredNode {
            labels,
            annotations: node.annotations().clone(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default(),
            finalizers: node.finalizers().to_vec(),
        }
    } else {
        registered_node(node, view)
    };
    let mut after: Node = node.clone();
    after.metadata.labels = Some(want.labels.clone());
    if let Some(spec) = after.spec.as_mut() {
        spec.taints = Some(want.taints.clone());
    }
    let init = check_initialized(&after, view, slices);
    if init.is_ok() || initialized {
        want.labels
            .insert(api::consts::labels::INITIALIZED.into(), "true".into());
    }
    (want, init)
}

/// A Warning Event when a Node registers without the unregistered taint (and has not been
/// synced before): pods may have landed on it before Karpenter synced it.
async fn warn_if_unregistered_taint_missing(ctx: &Ctx, node: &Arc<Node>) {
    let had_unregistered_taint = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == api::consts::taints::UNREGISTERED)
        });
    if !had_unregistered_taint && !node.labels().contains_key(api::consts::labels::REGISTERED) {
        ctx.event_for(
            node.as_ref(),
            EventType::Warning,
            api::consts::events::UNREGISTERED_TAINT_MISSING,
            format!(
                "Node {} registered without the {}:NoExecute taint; pods may have been scheduled before Karpenter synced it",
                node.name_any(),
                api::consts::taints::UNREGISTERED
            ),
        )
        .await;
    }
}

/// Registered=True and the node name in the status; on first registration, the
/// `nodes_created` count and an Event.
async fn record_registered(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &mut NodeClaimStatus,
    node_name: &str,
    registered: bool,
) {
    if registered && status.node_name.as_deref() == Some(node_name) {
        return;
    }
    set(
        status,
        types::REGISTERED,
        api::conditions::TRUE,
        reasons::REGISTERED,
        "",
    );
    status.node_name = Some(node_name.to_string());
    if !registered {
        ctx.metrics
            .nodes_created
            .get_or_create(&crate::metrics::NodeLabels {
                nodepool: nodepool_of(claim),
                zone: super::labels::zone_of(claim),
            })
            .inc();
        ctx.event(
            claim,
            EventType::Normal,
            reasons::REGISTERED,
            format!("Node {node_name} registered"),
        )
        .await;
    }
}

/// The Initialized condition from `init`, and how far registration got.
fn record_initialized(status: &mut NodeClaimStatus, init: Result<(), NotInitialized>) -> Progress {
    match init {
        Ok(()) => {
            set(
                status,
                types::INITIALIZED,
                api::conditions::TRUE,
                reasons::INITIALIZED,
                "",
            );
            Progress::Initialized
        }
        Err(why) => {
            set(
                status,
                types::INITIALIZED,
                api::conditions::UNKNOWN,
                why.reason(),
                &why.to_string(),
            );
            Progress::Registered
        }
    }
}

/// `~` and `/` escaped for a JSON pointer segment.
fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that brings `node` to `want`, or None when nothing differs. Labels,
/// annotations, our finalizer and owner reference are added key by key (whatever others
/// wrote stays); the taint list is atomic, so replacing it is guarded by a `test` of the
/// list it was computed from: a concurrent taint change fails the patch (retried from the
/// fresh Node), while the Node's status heartbeats never do — no resourceVersion needed.
pub(crate) fn node_patch(
    node: &Node,
    want: &super::node_sync::RegisteredNode,
    owner: &serde_json::Value,
    owner_uid: &str,
) -> Option<serde_json::Value> {
    let mut ops = Vec::new();
    let mut add_map = |path: &str,
                       have: Option<&std::collections::BTreeMap<String, String>>,
                       want: &std::collections::BTreeMap<String, String>| {
        let missing: std::collections::BTreeMap<&String, &String> = want
            .iter()
            .filter(|(k, v)| have.and_then(|h| h.get(*k)) != Some(*v))
            .collect();
        if missing.is_empty() {
            return;
        }
        match have {
            None => ops.push(json!({"op": "add", "path": path, "value": missing})),
            Some(_) => {
                for (k, v) in missing {
                    ops.push(json!({"op": "add", "path": format!("{path}/{}", pointer_segment(k)), "value": v}));
                }
            }
        }
    };
    add_map(
        "/metadata/labels",
        node.metadata.labels.as_ref(),
        &want.labels,
    );
    add_map(
        "/metadata/annotations",
        node.metadata.annotations.as_ref(),
        &want.annotations,
    );
    if !node
        .finalizers()
        .iter()
        .any(|f| f == api::consts::finalizers::TERMINATION)
    {
        ops.push(match node.metadata.finalizers.as_ref() {
            Some(_) => json!({"op": "add", "path": "/metadata/finalizers/-", "value": api::consts::finalizers::TERMINATION}),
            None => json!({"op": "add", "path": "/metadata/finalizers", "value": [api::consts::finalizers::TERMINATION]}),
        });
    }
    if !node.owner_references().iter().any(|o| o.uid == owner_uid) {
        ops.push(match node.metadata.owner_references.as_ref() {
            Some(_) => json!({"op": "add", "path": "/metadata/ownerReferences/-", "value": owner}),
            None => json!({"op": "add", "path": "/metadata/ownerReferences", "value": [owner]}),
        });
    }
    let current = node.spec.as_ref().and_then(|s| s.taints.clone());
    if current.clone().unwrap_or_default() != want.taints {
        match current {
            Some(list) => {
                ops.push(json!({"op": "test", "path": "/spec/taints", "value": list}));
                ops.push(json!({"op": "replace", "path": "/spec/taints", "value": want.taints}));
            }
            None => {
                // No taints yet: `add` fails if someone added a list meanwhile.
                ops.push(json!({"op": "test", "path": "/spec/providerID", "value": node.spec.as_ref().and_then(|s| s.provider_id.clone())}));
                ops.push(json!({"op": "add", "path": "/spec/taints", "value": want.taints}));
            }
        }
    }
    (!ops.is_empty()).then_some(serde_json::Value::Array(ops))
}

/// Writes `want` onto the Node in one JSON patch, only when something differs.
async fn sync_node(
    ctx: &Ctx,
    claim: &NodeClaim,
    node: &Node,
    want: &super::node_sync::RegisteredNode,
) -> Result<(), Error> {
    let uid = claim.uid().unwrap_or_default();
    let owner = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "name": claim.name_any(), "uid": uid, "blockOwnerDeletion": true
    });
    // Our last write to this Node is not cached yet: the patch would be computed from the
    // Node before it (and repeat it). The Node's watch event brings this claim back.
    if ctx.expectations.writes.stale_object(node) {
        return Ok(());
    }
    let Some(ops) = node_patch(node, want, &owner, &uid) else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|source| Error::Decode {
        what: "Node patch".into(),
        source,
    })?;
    let nodes = Writer::new(Api::<Node>::all(ctx.workload.clone()), manager::LIFECYCLE)
        .expecting(ctx.expectations.writes.clone());
    let out = nodes.json_patch(node, patch).await?;
    out.required(format!("Node {}", node.name_any()))?;
    Ok(())
}
