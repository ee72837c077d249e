//! The provider's drifted taint (`CloudProvider::drifted_taint`; for Cluster API its
//! outdated-revision `PreferNoSchedule` taint) on the Node of a drifted
//! NodeClaim: added while `Drifted=True`, removed once it is not, so that pods evicted by the
//! rollout prefer nodes that are not next. A step of the lifecycle after drift detection;
//! the Node is written only when the taint must change, with a `test` of the taint list it
//! was computed from.

use api::NodeClaim;
use api::consts::conditions as types;
use api::karpenter::NodeClaimStatus;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::context::{Ctx, Error};
use crate::write::{Writer, manager};

/// The Node's taint list with `taint` present (`want`) or absent; `None` when it already is.
pub(crate) fn retainted(current: &[Taint], taint: &Taint, want: bool) -> Option<Vec<Taint>> {
    let same = |t: &Taint| t.key == taint.key && t.effect == taint.effect;
    let has = current.iter().any(same);
    match (want, has) {
        (true, false) => {
            let mut list = current.to_vec();
            list.push(taint.clone());
            Some(list)
        }
        (false, true) => Some(current.iter().filter(|t| !same(t)).cloned().collect()),
        _ => None,
    }
}

/// Keeps the provider's drifted taint on the claim's registered Node while `status` says
/// `Drifted=True`, and off it otherwise.
pub(crate) async fn sync(
    ctx: &Ctx,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
) -> Result<(), Error> {
    let Some(taint) = ctx.provider.drifted_taint() else {
        return Ok(());
    };
    let Some(node) = status
        .node_name
        .as_ref()
        .and_then(|n| ctx.nodes.store().get(&ObjectRef::new(n)))
    else {
        return Ok(());
    };
    if node.metadata.deletion_timestamp.is_some()
        || ctx.expectations.writes.stale_object(node.as_ref())
    {
        // Going away, or our last write to it is not cached yet (its event comes back here).
        return Ok(());
    }
    let drifted = claim.metadata.deletion_timestamp.is_none()
        && api::conditions::is_true(&status.conditions, types::DRIFTED);
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let Some(list) = retainted(&current, &taint, drifted) else {
        return Ok(());
    };
    write_taints(ctx, &node, &current, list).await?;
    tracing::info!(nodeclaim = %claim.name_any(), node = %node.name_any(), taint = %taint.key, drifted, "drifted taint synced");
    Ok(())
}

/// Replaces the Node's taints, guarded by a `test` of the list they were computed from.
async fn write_taints(
    ctx: &Ctx,
    node: &Node,
    current: &[Taint],
    list: Vec<Taint>,
) -> Result<(), Error> {
    let ops = if node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some() {
        json!([
            {"op": "test", "path": "/spec/taints", "value": current},
            {"op": "replace", "path": "/spec/taints", "value": list},
        ])
    } else {
        json!([
            {"op": "test", "path": "/spec/providerID", "value": node.spec.as_ref().and_then(|s| s.provider_id.clone())},
            {"op": "add", "path": "/spec/taints", "value": list},
        ])
    };
    let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|source| Error::Decode {
        what: "Node patch".into(),
        source,
    })?;
    let nodes = Writer::new(Api::<Node>::all(ctx.workload.clone()), manager::LIFECYCLE)
        .expecting(ctx.expectations.writes.clone());
    nodes
        .json_patch(node, patch)
        .await?
        .required(format!("Node {}", node.name_any()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    #[test]
    fn added_when_drifted_removed_when_not_kept_otherwise() {
        let outdated = taint("example.com/outdated", "PreferNoSchedule");
        let other = taint("team", "NoSchedule");
        assert_eq!(
            retainted(std::slice::from_ref(&other), &outdated, true),
            Some(vec![other.clone(), outdated.clone()])
        );
        assert_eq!(
            retainted(&[other.clone(), outdated.clone()], &outdated, true),
            None
        );
        assert_eq!(
            retainted(&[outdated.clone(), other.clone()], &outdated, false),
            Some(vec![other.clone()])
        );
        assert_eq!(
            retainted(std::slice::from_ref(&other), &outdated, false),
            None
        );
        // Another effect of the same key is not ours.
        let soft = taint("example.com/outdated", "NoSchedule");
        assert_eq!(
            retainted(std::slice::from_ref(&soft), &outdated, false),
            None
        );
    }
}
