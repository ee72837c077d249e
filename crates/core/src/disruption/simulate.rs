//! Where would the candidates' pods go: the provisioner's scheduling simulation of the
//! cluster without the candidates, used to plan replacements (surge-first methods) and to
//! check that pods fit elsewhere (delete consolidation).

use std::sync::Arc;

use api::NodeClaim;
use cloudprovider::InstanceTypes;
use k8s_openapi::api::core::v1::Pod;

use super::View;
use super::candidates::{Candidate, reschedulable};
use crate::model::devices;
use crate::objects::{deleting, name, pod_node_name};
use crate::provisioning::snapshot;
use crate::state::{Cluster, Objects};

/// Plans replacements for candidates.
pub trait Simulate {
    /// The NodeClaims to create so that every reschedulable pod of `candidates` has a place
    /// once they are gone (none when they all fit on other nodes); `Err(why)` when some pod
    /// fits nowhere.
    fn replacements(
        &self,
        view: &View,
        candidates: &[&Candidate],
    ) -> Result<Vec<NodeClaim>, String>;

    /// The replacement of one claim of static pool `pool` (its template, in `zone` if
    /// given); `Err(why)` when none can be planned.
    fn static_replacement(
        &self,
        _view: &View,
        pool: &str,
        _zone: Option<&str>,
    ) -> Result<NodeClaim, String> {
        Err(format!("no replacement planned for static NodePool {pool}"))
    }
}

/// The cluster without the Nodes `nodes` and the NodeClaims `claims` (and without the
/// NodeClaims being deleted), and the reschedulable pods that were bound to those Nodes (to
/// be placed again).
pub fn without(cluster: &Cluster, nodes: &[&str], claims: &[&str]) -> (Cluster, Vec<Arc<Pod>>) {
    let (moving, staying): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) = cluster
        .pods
        .iter()
        .filter(|p| pod_node_name(p).is_some())
        .cloned()
        .partition(|p| pod_node_name(p).is_some_and(|n| nodes.contains(&n)));
    let moving = moving.into_iter().filter(|p| reschedulable(p)).collect();
    let objects = Objects {
        pods: staying,
        nodes: cluster
            .nodes
            .iter()
            .filter(|n| !nodes.contains(&name(n.as_ref())))
            .cloned()
            .collect(),
        nodeclaims: cluster
            .nodeclaims
            .iter()
            .filter(|c| !claims.contains(&name(c.as_ref())) && !deleting(c.as_ref()))
            .cloned()
            .collect(),
        ..cluster.objects().clone()
    };
    (Cluster::new(objects), moving)
}

/// The real simulation: the provisioner's snapshot and solver, Ready NodePools only.
pub struct Simulator<'a> {
    pub catalog: &'a dyn Fn(&str) -> Option<Arc<InstanceTypes>>,
    /// Whether replacements read the offerings' availability (the loop) or not.
    pub available: crate::model::convert::Availability,
}

impl Simulate for Simulator<'_> {
    fn replacements(
        &self,
        view: &View,
        candidates: &[&Candidate],
    ) -> Result<Vec<NodeClaim>, String> {
        let nodes: Vec<&str> = candidates.iter().filter_map(|c| c.node.map(name)).collect();
        let claims: Vec<&str> = candidates.iter().map(|c| c.name).collect();
        let (rest, moving) = without(view.cluster, &nodes, &claims);
        let pools = rest.ready_nodepools();
        let snap = snapshot::build(&rest, &pools, &moving, self.catalog, self.available);
        // The moving pods' claims held by no other pod are allocated again where they go.
        let dra = devices::dra(
            &devices::released(&rest.dra, &moving),
            &moving,
            snap.catalogs.values().map(AsRef::as_ref),
        );
        let out = scheduling::solve_with_devices(&snap.input, &dra);
        if let Some(u) = out.unschedulable.first() {
            return Err(format!(
                "{} pod(s) would not schedule, e.g. {}/{}: {}",
                out.unschedulable.len(),
                u.pod.namespace,
                u.pod.name,
                u.reason
            ));
        }
        Ok(out
            .new_node_claims
            .iter()
            .filter_map(|c| snap.nodeclaim(c))
            .collect())
    }

    fn static_replacement(
        &self,
        view: &View,
        pool: &str,
        zone: Option<&str>,
    ) -> Result<NodeClaim, String> {
        let p = view
            .nodepools
            .iter()
            .find(|p| name(p.as_ref()) == pool)
            .ok_or_else(|| format!("NodePool {pool} not found"))?;
        let catalog = (self.catalog)(&p.spec.template.spec.node_class_ref.name)
            .ok_or_else(|| format!("NodePool {pool}: its NodeClass has no instance types"))?;
        crate::static_pools::template::claim(p, &catalog, self.available, zone, None)
    }
}
