//! One cluster state per workload cluster, as Karpenter's `state.Cluster`: the objects the
//! shared caches hold, joined once ([`Cluster`]: NodeClaims with their Nodes, bound pods per
//! Node with their requests, the NodeClaims in flight, the Nodes leaving, the provisionable
//! pods), read by provisioning, disruption, NodePool status and the cluster metrics.
//!
//! The join is computed lazily and kept until a cache changes: every cache counts its
//! writes ([`Cache::generation`], odd while a watch event is being applied), and
//! [`ClusterState::current`] rebuilds only when a count moved since the last build. A build
//! is kept only when every count was even and unchanged across it, so the kept join is
//! exactly the caches at rest at those counts; a reader that has seen an object in a cache
//! (e.g. a NodeClaim it just created) finds it in the join it reads next.

mod cluster;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};

use api::{NodeClaim, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

pub use cluster::{Cluster, DraObjects, NodePods, Objects};

use crate::cache::{Cache, Caches, DraCaches};

/// The caches a cluster state is joined from.
#[derive(Clone)]
pub struct Sources {
    pub pods: Cache<Pod>,
    pub nodes: Cache<Node>,
    pub nodeclaims: Cache<NodeClaim>,
    pub nodepools: Cache<NodePool>,
    pub daemonsets: Cache<DaemonSet>,
    pub pdbs: Cache<PodDisruptionBudget>,
    pub pvcs: Cache<PersistentVolumeClaim>,
    pub pvs: Cache<PersistentVolume>,
    pub storageclasses: Cache<StorageClass>,
    pub csinodes: Cache<CSINode>,
    pub dra: DraCaches,
}

impl Sources {
    pub fn of(caches: &Caches) -> Sources {
        Sources {
            pods: caches.pods.clone(),
            nodes: caches.nodes.clone(),
            nodeclaims: caches.nodeclaims.clone(),
            nodepools: caches.nodepools.clone(),
            daemonsets: caches.daemonsets.clone(),
            pdbs: caches.pdbs.clone(),
            pvcs: caches.pvcs.clone(),
            pvs: caches.pvs.clone(),
            storageclasses: caches.storageclasses.clone(),
            csinodes: caches.csinodes.clone(),
            dra: caches.dra.clone(),
        }
    }

    /// Every cache's write count, in a fixed order.
    fn generations(&self) -> Generations {
        [
            self.pods.generation(),
            self.nodes.generation(),
            self.nodeclaims.generation(),
            self.nodepools.generation(),
            self.daemonsets.generation(),
            self.pdbs.generation(),
            self.pvcs.generation(),
            self.pvs.generation(),
            self.storageclasses.generation(),
            self.csinodes.generation(),
            self.dra.classes.generation(),
            self.dra.claims.generation(),
            self.dra.templates.generation(),
            self.dra.slices.generation(),
        ]
    }

    fn objects(&self) -> Objects {
        Objects {
            pods: self.pods.store().state(),
            nodes: self.nodes.store().state(),
            nodeclaims: self.nodeclaims.store().state(),
            nodepools: self.nodepools.store().state(),
            daemonsets: self.daemonsets.store().state(),
            pdbs: self.pdbs.store().state(),
            pvcs: self.pvcs.store().state(),
            pvs: self.pvs.store().state(),
            storageclasses: self.storageclasses.store().state(),
            csinodes: self.csinodes.store().state(),
            dra: DraObjects {
                classes: self.dra.classes.store().state(),
                claims: self.dra.claims.store().state(),
                templates: self.dra.templates.store().state(),
                slices: self.dra.slices.store().state(),
            },
        }
    }
}

/// The write counts of the caches, in [`Sources::generations`] order.
type Generations = [u64; 14];

/// A join, and the write counts it was built at.
type Kept = Option<(Generations, Arc<Cluster>)>;

/// The cluster state of one workload cluster (cheap to clone: shared).
#[derive(Clone)]
pub struct ClusterState {
    sources: Sources,
    /// The last join kept, and the write counts it was built at.
    kept: Arc<Mutex<Kept>>,
}

impl ClusterState {
    pub fn new(sources: Sources) -> ClusterState {
        ClusterState {
            sources,
            kept: Arc::default(),
        }
    }

    /// The caches it is joined from (their `subscribe()` streams are the triggers).
    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// The cluster as the caches hold it now: the kept join when no cache has been written
    /// since, else a new one.
    pub fn current(&self) -> Arc<Cluster> {
        // Held across the build: concurrent readers wait for one build instead of each
        // making their own.
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let before = self.sources.generations();
        let at_rest = before.iter().all(|g| g % 2 == 0);
        if let Some((at, cluster)) = kept.as_ref()
            && at_rest
            && *at == before
        {
            return Arc::clone(cluster);
        }
        let cluster = Arc::new(Cluster::new(self.sources.objects()));
        if at_rest && self.sources.generations() == before {
            *kept = Some((before, Arc::clone(&cluster)));
        } else {
            // Read while a cache was being written: served, never kept.
            *kept = None;
        }
        cluster
    }

    /// Whether a lazy pod or PDB watch (hub mode: started once the cluster has a NodePool)
    /// is wanted but has not listed yet: the join holds no pods, not the cluster's.
    pub fn pending(&self) -> bool {
        self.sources.pods.pending() || self.sources.pdbs.pending()
    }

    /// Whether the caches of Nodes, NodeClaims and pods hold complete lists.
    pub fn synced(&self) -> bool {
        self.sources.pods.is_synced()
            && self.sources.nodes.is_synced()
            && self.sources.nodeclaims.is_synced()
    }
}
