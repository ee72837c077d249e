//! `inspect --why`'s pending pods: the provisionable pods the provisioner would launch
//! nothing for, each with the reason its `FailedScheduling` event gives (what the solver
//! says, and what the pod's volumes pin it to). Pure, over the listed objects.

use std::sync::Arc;

use cloudprovider::InstanceTypes;
use karpenter_core::model::{convert::Availability, volumes};
use karpenter_core::provisioning::snapshot;
use karpenter_core::state::Cluster;
use serde::Serialize;

/// A pending pod no plan places.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PendingPod {
    /// `namespace/name`.
    pub pod: String,
    pub reason: String,
}

/// The provisionable pods of `cluster` that neither an existing node, a NodeClaim in flight
/// nor a new NodeClaim of a Ready NodePool would take, as the provisioner solves them.
pub fn pending(
    cluster: &Cluster,
    catalog: &dyn Fn(&str) -> Option<Arc<InstanceTypes>>,
) -> Vec<PendingPod> {
    let pods: Vec<_> = cluster
        .pending()
        .iter()
        .filter(|p| !karpenter_core::objects::avoids_karpenter(p))
        .cloned()
        .collect();
    if pods.is_empty() {
        return Vec::new();
    }
    let snap = snapshot::build(
        cluster,
        &cluster.ready_nodepools(),
        &pods,
        catalog,
        Availability::Offered,
    );
    let output = scheduling::solve(&snap.input);
    output
        .unschedulable
        .iter()
        .map(|u| {
            let pod = pods
                .iter()
                .find(|p| p.metadata.uid.as_deref() == Some(u.pod.uid.as_str()));
            PendingPod {
                pod: format!("{}/{}", u.pod.namespace, u.pod.name),
                reason: match pod {
                    Some(p) => volumes::explain(&u.reason, p, cluster.volumes()),
                    None => u.reason.clone(),
                },
            }
        })
        .collect()
}

/// One line a pod, under the NodeClaims' table.
pub fn render(pending: &[PendingPod]) -> String {
    pending
        .iter()
        .map(|p| format!("  ? pod {}: {}\n", p.pod, p.reason))
        .collect()
}
