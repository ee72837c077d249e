//! Where would the candidates' pods go: the provisioner's scheduling simulation of the
//! cluster without the candidates, used to plan replacements (surge-first methods) and to
//! check that pods fit elsewhere (delete consolidation).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use api::NodeClaim;
use api::consts::labels as label;
use cloudprovider::InstanceTypes;
use k8s_openapi::api::core::v1::Pod;
use scheduling::replace::NoReplacement;

use super::View;
use super::candidates::{Candidate, reschedulable};
use crate::model::devices;
use crate::objects::{name, pod_node_name};
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

    /// Terminate-first: when the candidate's pods fit nowhere before it goes
    /// ([`Self::replacements`] failed), whether they would once it is gone, with the unit of
    /// its counted offering it frees (a bare-metal host, a `max-machines` slot) available
    /// again. `Ok(plan)`: they would (what the provisioner will launch after the deletion);
    /// `Err(why)`: not even then, or its offering is not counted.
    fn terminate_first(
        &self,
        _view: &View,
        _candidate: &Candidate,
    ) -> Result<Vec<NodeClaim>, String> {
        Err("no capacity it frees is known".into())
    }

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

/// The cluster as a disruption simulation sees it once some NodeClaims are gone, and the
/// pods it places, as Karpenter's `SimulateScheduling` gathers them: the reschedulable pods
/// of the candidates' Nodes (their own: they must all fit), those of other Nodes leaving,
/// and the pending pods.
pub struct Without {
    /// The cluster without the candidates' Nodes and NodeClaims (and without the pods bound
    /// to Nodes leaving).
    pub rest: Cluster,
    /// The reschedulable pods of the candidates' Nodes and of the other Nodes leaving: they
    /// leave their node, their devices are allocated again where they go.
    pub moving: Vec<Arc<Pod>>,
    /// The pods waiting for the provisioner.
    pub pending: Vec<Arc<Pod>>,
    /// The uids of the candidates' own pods (among `moving`).
    pub own: HashSet<String>,
}

/// The cluster without the Nodes `nodes` and the NodeClaims `claims` (see [`Without`]).
pub fn without(cluster: &Cluster, nodes: &[&str], claims: &[&str]) -> Without {
    let (moving, staying): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
        cluster.pods.iter().cloned().partition(|p| {
            pod_node_name(p).is_some_and(|n| nodes.contains(&n) || cluster.leaving(n))
        });
    let moving: Vec<Arc<Pod>> = moving.into_iter().filter(|p| reschedulable(p)).collect();
    let own = moving
        .iter()
        .filter(|p| pod_node_name(p).is_some_and(|n| nodes.contains(&n)))
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
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
            .filter(|c| !claims.contains(&name(c.as_ref())))
            .cloned()
            .collect(),
        ..cluster.objects().clone()
    };
    Without {
        rest: Cluster::new(objects),
        moving,
        pending: cluster.pending().to_vec(),
        own,
    }
}

/// [`without`] the NodeClaims `candidates` and their Nodes.
pub(crate) fn without_candidates<'a>(
    cluster: &Cluster,
    candidates: impl Iterator<Item = &'a Candidate<'a>> + Clone,
) -> Without {
    let nodes: Vec<&str> = candidates
        .clone()
        .filter_map(|c| c.node.map(name))
        .collect();
    let claims: Vec<&str> = candidates.map(|c| c.name).collect();
    without(cluster, &nodes, &claims)
}

impl Without {
    /// Every pod to place: the moving ones, then the pending ones.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.moving.iter().chain(&self.pending).cloned().collect()
    }

    /// The provisioner's snapshot of [`Self::rest`] for [`Self::pods`]: the candidates' own
    /// pods are the `moving` ones of the solve (placed after the pods already waiting or
    /// leaving, which the provisioner is placing now, so the simulation never hands their room
    /// to a candidate's pod; and refused by the nodes that refuse moving pods).
    pub fn snapshot(
        &self,
        pools: &[Arc<api::NodePool>],
        catalog: &dyn Fn(&str) -> Option<Arc<InstanceTypes>>,
        available: crate::model::convert::Availability,
    ) -> snapshot::Snapshot {
        let mut snap = snapshot::build(&self.rest, pools, &self.pods(), catalog, available);
        for p in &mut snap.input.pods {
            p.moving = self.own.contains(&p.uid);
        }
        snap
    }

    /// The DRA model of a solve of [`Self::snapshot`]'s pods: the moving pods' claims held by
    /// no other pod are allocated again where they go (a pod with claims moves only where its
    /// devices can be allocated).
    pub fn devices(&self, snap: &snapshot::Snapshot) -> scheduling::dra::Dra {
        devices::dra(
            &devices::released(&self.rest.dra, &self.moving),
            &self.pods(),
            snap.catalogs.values().map(AsRef::as_ref),
        )
    }

    /// The candidates' own pods that `out` leaves unschedulable.
    pub fn own_unschedulable<'o>(
        &self,
        out: &'o scheduling::Output,
    ) -> impl Iterator<Item = &'o scheduling::Unschedulable> {
        out.unschedulable
            .iter()
            .filter(|u| self.own.contains(&u.pod.uid))
    }

    /// Whether the candidates' own pods are all placed in `out`, none on a node that has not
    /// initialized (Karpenter's `SimulateScheduling`: the move would rely on capacity that
    /// may never come). The other pods may fail: the provisioner handles them.
    pub(crate) fn own_placed(
        &self,
        snap: &snapshot::Snapshot,
        out: &scheduling::Output,
    ) -> Result<(), NoMove> {
        let failed: Vec<&scheduling::Unschedulable> = self.own_unschedulable(out).collect();
        if let Some(u) = failed.first() {
            let more = match failed.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more)"),
            };
            return Err(NoMove::PodsDoNotFit(format!(
                "{}/{}: {}{more}",
                u.pod.namespace, u.pod.name, u.reason
            )));
        }
        let in_flight = snap.in_flight();
        match out
            .existing
            .iter()
            .find(|p| self.own.contains(&p.pod.uid) && in_flight.contains(p.node.as_str()))
        {
            Some(p) => Err(NoMove::Uninitialized(p.node.clone())),
            None => Ok(()),
        }
    }

    /// The planned NodeClaims that hold a candidate's own pod (the others are the pods
    /// already waiting: the provisioner launches theirs).
    pub fn replacements<'o>(
        &self,
        out: &'o scheduling::Output,
    ) -> impl Iterator<Item = &'o scheduling::NewNodeClaim> {
        out.new_node_claims
            .iter()
            .filter(|c| c.pods.iter().any(|p| self.own.contains(&p.uid)))
    }
}

/// Why the simulation found no move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoMove {
    /// A candidate pod fits nowhere (not even on a new node).
    PodsDoNotFit(String),
    /// A candidate pod would land on a node that has not initialized.
    Uninitialized(String),
    NoReplacement(NoReplacement),
}

impl fmt::Display for NoMove {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoMove::PodsDoNotFit(why) => write!(f, "pods do not fit elsewhere ({why})"),
            NoMove::Uninitialized(node) => {
                write!(f, "pods would land on uninitialized node {node}")
            }
            NoMove::NoReplacement(r) => r.fmt(f),
        }
    }
}

/// The real simulation: the provisioner's snapshot and solver, Ready NodePools only.
pub struct Simulator<'a> {
    pub catalog: &'a dyn Fn(&str) -> Option<Arc<InstanceTypes>>,
    /// Whether replacements read the offerings' availability (the loop) or not.
    pub available: crate::model::convert::Availability,
}

impl Simulator<'_> {
    /// The count key of the offering `c` was launched from (by its instance type, zone and
    /// capacity type labels), when that offering is counted.
    fn count_key(&self, c: &Candidate) -> Option<String> {
        let labels = c.claim.metadata.labels.as_ref()?;
        let catalog = (self.catalog)(&c.claim.spec.node_class_ref.name)?;
        let it = catalog.lookup(labels.get(label::INSTANCE_TYPE)?)?;
        let zone = labels.get(label::ZONE);
        let capacity_type = labels.get(label::CAPACITY_TYPE)?;
        it.offerings
            .iter()
            .find(|o| o.zone.as_ref() == zone && &o.capacity_type == capacity_type)?
            .count
            .as_ref()
            .map(|n| n.key.clone())
    }

    /// The plan for the pods of `candidates` without them; `credit`: a count key whose
    /// offerings get one more unit (what a candidate frees once it is gone).
    fn plan(
        &self,
        view: &View,
        candidates: &[&Candidate],
        credit: Option<&str>,
    ) -> Result<Vec<NodeClaim>, String> {
        let w = without_candidates(view.cluster, candidates.iter().copied());
        let pools = w.rest.ready_nodepools();
        let mut snap = w.snapshot(&pools, self.catalog, self.available);
        if let Some(key) = credit {
            credit_one(&mut snap.input, key);
        }
        let out = scheduling::solve_with_devices(&snap.input, &w.devices(&snap));
        w.own_placed(&snap, &out).map_err(|e| match e {
            NoMove::PodsDoNotFit(why) => why,
            e => e.to_string(),
        })?;
        Ok(w.replacements(&out)
            .filter_map(|c| snap.nodeclaim(c))
            .collect())
    }
}

/// One more unit of the counted offerings of `key` (every pool's copy shares the count).
fn credit_one(input: &mut scheduling::Input, key: &str) {
    let offerings = input
        .node_pools
        .iter_mut()
        .flat_map(|p| p.instance_types.iter_mut())
        .flat_map(|it| it.offerings.iter_mut());
    for count in offerings.filter_map(|o| o.count.as_mut()) {
        if count.key == key {
            count.available = count.available.saturating_add(1);
        }
    }
}

impl Simulate for Simulator<'_> {
    fn replacements(
        &self,
        view: &View,
        candidates: &[&Candidate],
    ) -> Result<Vec<NodeClaim>, String> {
        self.plan(view, candidates, None)
    }

    fn terminate_first(&self, view: &View, c: &Candidate) -> Result<Vec<NodeClaim>, String> {
        let key = self
            .count_key(c)
            .ok_or_else(|| "its offering is not counted".to_string())?;
        self.plan(view, &[c], Some(&key))
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
