//! The Kubernetes version of a new Machine, and whether it may launch now: the NodeClass's
//! `version`, else the version the control plane runs now (never its desired `spec.version`:
//! a kubelet must not lead the API servers), else the Cluster's `spec.topology.version`;
//! then Cluster API's preflight checks ([`preflight`](super::preflight)) on the Cluster,
//! its control plane (from the [`ControlPlanes`](super::control_planes::ControlPlanes)
//! watch) and the NodeClass's opt-out annotation. Launch holds on a failing check; drift
//! judges a version change only once a Machine of that version could launch.

use api::NodeClaim;
use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use super::nodeclass::NodeClass;
use super::preflight::{self, ControlPlane, Failure, Input};
use cloudprovider::Error as ProviderError;
use karpenter_core::metrics::PreflightLabels;
use karpenter_core::nodeclaim::error::Error;
use karpenter_core::nodeclaim::labels::nodepool_of;

/// The bootstrap kind whose clones kubeadm joins (`KubeadmVersionSkew`).
const KUBEADM_CONFIG_TEMPLATE: &str = "KubeadmConfigTemplate";
const BOOTSTRAP_GROUP: &str = "bootstrap.cluster.x-k8s.io";

/// The version a new Machine of a NodeClass gets, and the check that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gate {
    pub(crate) version: Option<String>,
    pub(crate) held: Option<Failure>,
}

/// The version and verdict for a Machine of `nodeclass` in Cluster `ns/cluster`. Errors
/// (Cluster not cached yet, control plane unreadable) are for the caller to retry.
pub(crate) async fn gate(
    ctx: &Context,
    nodeclass: &NodeClass,
    ns: &str,
    cluster: &str,
) -> Result<Gate, Error> {
    let c = ctx
        .clusters
        .get(&ObjectRef::new(cluster).within(ns))
        .ok_or_else(|| {
            Error::Launch(format!(
                "Cluster {ns}/{cluster} not found; its Kubernetes version is needed for the Machine"
            ))
        })?;
    let control_plane = match c.spec.control_plane_ref.as_ref() {
        Some(r) => {
            let (_, ar) = ctx.preferred(&r.api_group, &r.kind).await?;
            let obj = ctx
                .control_planes
                .get(&ctx.management, &ar, ns, &r.name)
                .await?
                .ok_or_else(|| {
                    Error::Launch(format!(
                        "{} {ns}/{} of Cluster {cluster} not found",
                        r.kind, r.name
                    ))
                })?;
            Some(ControlPlane::of(&obj.data))
        }
        None => None,
    };
    let version = nodeclass.version.clone().or_else(|| {
        control_plane
            .as_ref()
            .and_then(|cp| cp.current().or(cp.desired.as_deref()))
            .or(c.topology_version())
            .map(str::to_string)
    });
    let skipped = preflight::skipped(nodeclass.skip_preflight_checks.as_deref());
    let kubeadm = nodeclass
        .bootstrap
        .config_template_ref
        .as_ref()
        .is_some_and(|r| r.kind == KUBEADM_CONFIG_TEMPLATE && r.api_group == BOOTSTRAP_GROUP);
    let held = preflight::run(&Input {
        control_plane: control_plane.as_ref(),
        topology_version: c.topology_version(),
        topology: c.spec.topology.is_some(),
        machine_version: version.as_deref(),
        kubeadm,
        skipped: &skipped,
    })
    .map(|f| Failure {
        message: format!("Cluster {ns}/{cluster}: {}", f.message),
        ..f
    });
    Ok(Gate { version, held })
}

/// The version of the claim's Machine, or the launch held (a retryable `Held` error naming
/// the failing check; the hold is counted when it starts).
pub(crate) async fn launch_version(
    ctx: &Context,
    claim: &NodeClaim,
    nodeclass: &NodeClass,
    ns: &str,
    cluster: &str,
) -> Result<Option<String>, Error> {
    let g = gate(ctx, nodeclass, ns, cluster).await?;
    let Some(f) = g.held else {
        return Ok(g.version);
    };
    let reason = f.check.name();
    let holding = claim.status.as_ref().is_some_and(|s| {
        api::conditions::get(&s.conditions, api::consts::conditions::LAUNCHED)
            .is_some_and(|c| c.reason == reason)
    });
    if !holding {
        ctx.metrics
            .preflight_holds
            .get_or_create(&PreflightLabels {
                check: reason.into(),
                nodepool: nodepool_of(claim),
            })
            .inc();
    }
    Err(Error::Provider(ProviderError::Held {
        reason,
        message: format!("launch on hold: {}", f.message),
    }))
}
