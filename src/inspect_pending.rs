//! `inspect --why`'s pending pods: the provisionable pods the provisioner would launch
//! nothing for, each with the reason its `FailedScheduling` event gives (what the solver
//! says, and what the pod's volumes pin it to), and the price of the plan for the others
//! with the price of Karpenter's first-fit plan it beat, when they differ (as `simulate`
//! shows it). Pure, over the listed objects.

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

/// The provisioner's plan for the pending pods: the NodeClaims it launches and their price.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanPrice {
    pub node_claims: usize,
    pub price_per_hour: f64,
    /// What Karpenter's first-fit packing would launch per hour, when the plan beat it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_fit_price_per_hour: Option<f64>,
}

/// What `inspect --why` says of the pending pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Pending {
    /// The pods no plan places.
    pub pods: Vec<PendingPod>,
    /// The plan for the others, when it launches NodeClaims.
    pub plan: Option<PlanPrice>,
}

/// The provisionable pods of `cluster` that neither an existing node, a NodeClaim in flight
/// nor a new NodeClaim of a Ready NodePool would take, as the provisioner solves them, and
/// the price of that solve's new NodeClaims.
pub fn pending(cluster: &Cluster, catalog: &dyn Fn(&str) -> Option<Arc<InstanceTypes>>) -> Pending {
    let pods: Vec<_> = cluster
        .pending()
        .iter()
        .filter(|p| !karpenter_core::objects::avoids_karpenter(p))
        .cloned()
        .collect();
    if pods.is_empty() {
        return Pending::default();
    }
    let snap = snapshot::build(
        cluster,
        &cluster.ready_nodepools(),
        &pods,
        catalog,
        Availability::Offered,
    );
    let dra = karpenter_core::model::devices::dra(
        &cluster.dra,
        &pods,
        snap.catalogs.values().map(AsRef::as_ref),
    );
    let output = scheduling::solve_with_devices(&snap.input, &dra);
    let plan = (!output.new_node_claims.is_empty()).then(|| PlanPrice {
        node_claims: output.new_node_claims.len(),
        price_per_hour: output.price(),
        first_fit_price_per_hour: output.first_fit_price,
    });
    let pods = output
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
        .collect();
    Pending { pods, plan }
}

/// One line a pod, under the NodeClaims' table, then the plan's price.
pub fn render(pending: &Pending) -> String {
    let mut out: String = pending
        .pods
        .iter()
        .map(|p| format!("  ? pod {}: {}\n", p.pod, p.reason))
        .collect();
    if let Some(plan) = &pending.plan {
        out += &format!(
            "  $ pending pods: {} new NodeClaim(s) at {:.4}/h",
            plan.node_claims, plan.price_per_hour
        );
        if let Some(ff) = plan.first_fit_price_per_hour {
            out += &format!("; first-fit packing (Karpenter's) would cost {ff:.4}/h");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `examples/price-aware/` as the cluster `inspect` would list: its pods pending, its
    /// catalogs (with the NodeOverlay unless `overlays` is false).
    fn example(overlays: bool) -> Pending {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/price-aware");
        let mut loaded = crate::simulate::load(&[dir]).expect("the example loads");
        if !overlays {
            loaded.overlays.clear();
        }
        let (_, catalogs) = crate::simulate::plan::node_class_catalogs(&loaded, &mut Vec::new());
        // As a live cluster has them: the NodePool Ready, the pods marked Unschedulable by
        // kube-scheduler.
        let with = |obj: serde_json::Value, conditions: serde_json::Value| {
            let mut obj = obj;
            obj["status"]["conditions"] = conditions;
            obj
        };
        let at = "2026-11-22T10:00:00Z";
        let mut objects = loaded.state.clone();
        objects.nodepools = objects
            .nodepools
            .iter()
            .map(|p| {
                let ready = serde_json::json!([{"type": "Ready", "status": "True",
                    "reason": "Ready", "message": "", "lastTransitionTime": at}]);
                let v = with(serde_json::to_value(p.as_ref()).expect("json"), ready);
                Arc::new(serde_json::from_value(v).expect("a NodePool"))
            })
            .collect();
        objects
            .pods
            .retain(|p| karpenter_core::objects::pod_node_name(p).is_some());
        for p in &loaded.pending {
            let unschedulable = serde_json::json!([{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable"}]);
            let v = with(
                serde_json::to_value(p.as_ref()).expect("json"),
                unschedulable,
            );
            objects
                .pods
                .push(Arc::new(serde_json::from_value(v).expect("a Pod")));
        }
        pending(&Cluster::new(objects), &|nc: &str| {
            catalogs.get(nc).map(|c| c.types.clone())
        })
    }

    #[test]
    fn the_pending_pods_plan_names_the_first_fit_price_it_beat() {
        let p = example(true);
        assert!(p.pods.is_empty(), "{p:?}");
        let plan = p.plan.as_ref().expect("a plan");
        assert_eq!(plan.node_claims, 4);
        assert!((plan.price_per_hour - 0.20).abs() < 1e-9, "{plan:?}");
        assert_eq!(plan.first_fit_price_per_hour, Some(1.00));
        assert_eq!(
            render(&p),
            "  $ pending pods: 4 new NodeClaim(s) at 0.2000/h; first-fit packing (Karpenter's) \
             would cost 1.0000/h\n"
        );
        // Control: without the overlay the large costs 0.20/h, first-fit's one large is the
        // plan, and nothing is said of a first-fit price.
        let p = example(false);
        let plan = p.plan.as_ref().expect("a plan");
        assert_eq!(plan.node_claims, 1);
        assert_eq!(plan.first_fit_price_per_hour, None);
        assert_eq!(
            render(&p),
            "  $ pending pods: 1 new NodeClaim(s) at 0.2000/h\n"
        );
    }
}
