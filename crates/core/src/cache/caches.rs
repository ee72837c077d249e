//! The caches of one engagement ([`Caches`]): every kind its loops read, one watch each.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::StreamExt;
use k8s_openapi::api::resource::v1 as dra;
use kube::api::Api;
use kube::runtime::watcher;

use super::{Cache, Gate, Lazily, keep, trim_node, trim_pod, trim_pv, trim_pvc};
use crate::tasks::Tasks;

/// Every cache the core's loops of one engagement read: one watch per kind of the workload
/// cluster, shared by all its loops. A provider watches its own kinds.
pub struct Caches {
    pub nodes: Cache<k8s_openapi::api::core::v1::Node>,
    pub pods: Cache<k8s_openapi::api::core::v1::Pod>,
    pub daemonsets: Cache<k8s_openapi::api::apps::v1::DaemonSet>,
    pub pdbs: Cache<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    pub nodeclaims: Cache<api::NodeClaim>,
    pub nodepools: Cache<api::NodePool>,
    /// NodeOverlays, when the `NodeOverlay` feature gate is on ([`Caches::with_overlays`]).
    pub nodeoverlays: Option<Cache<api::NodeOverlay>>,
    /// Their evaluation over the instance types of the NodeClasses the NodePools reference
    /// (with the cache): what the overlay decorator applies, for any provider.
    pub overlays: Option<Arc<cloudprovider::overlay::OverlayStore>>,
    /// What pods' volumes resolve against (trimmed: [`crate::trim`]).
    pub pvcs: Cache<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    pub pvs: Cache<k8s_openapi::api::core::v1::PersistentVolume>,
    pub storageclasses: Cache<k8s_openapi::api::storage::v1::StorageClass>,
    pub csinodes: Cache<k8s_openapi::api::storage::v1::CSINode>,
    /// What pods' ResourceClaims allocate from (Dynamic Resource Allocation).
    pub dra: DraCaches,
}

/// The Dynamic Resource Allocation kinds (`resource.k8s.io/v1`). Never waited for
/// ([`Caches::ready`], [`Caches::pending`]): on a kube-apiserver that does not serve the
/// group their watches retry quietly and the stores stay empty (no pod can claim a device
/// there either).
#[derive(Clone)]
pub struct DraCaches {
    pub classes: Cache<dra::DeviceClass>,
    pub claims: Cache<dra::ResourceClaim>,
    pub templates: Cache<dra::ResourceClaimTemplate>,
    pub slices: Cache<dra::ResourceSlice>,
}

impl DraCaches {
    /// Listed and empty (tests, offline tools).
    pub fn empty() -> DraCaches {
        DraCaches {
            classes: Cache::empty(),
            claims: Cache::empty(),
            templates: Cache::empty(),
            slices: Cache::empty(),
        }
    }

    /// The watches, at once, or (`lazily`: hub mode) each on a gate of its own that `lazily`
    /// makes (a kind the cluster does not serve never counts as listed for another).
    fn start(tasks: &mut Tasks, workload: &kube::Client, lazily: Option<&Lazily<'_>>) -> DraCaches {
        DraCaches {
            classes: Cache::start_gated(tasks, Api::all(workload.clone()), lazily),
            claims: Cache::start_gated(tasks, Api::all(workload.clone()), lazily),
            templates: Cache::start_gated(tasks, Api::all(workload.clone()), lazily),
            slices: Cache::start_gated(tasks, Api::all(workload.clone()), lazily),
        }
    }
}

impl Caches {
    /// Starts every watch on tasks owned by `tasks`.
    pub fn start(tasks: &mut Tasks, workload: &kube::Client) -> Caches {
        Self::start_engaged(tasks, workload, false)
    }

    /// Starts the watches of one engagement. With `lazy` (hub mode), the pod and PDB watches run only while the cluster has a NodePool
    /// or a NodeClaim ([`Cache::start_lazily`]): an idle cluster costs no pod cache.
    pub fn start_engaged(tasks: &mut Tasks, workload: &kube::Client, lazy: bool) -> Caches {
        let all = watcher::Config::default;
        let nodeclaims = Cache::start(
            tasks,
            Api::all(workload.clone()),
            all(),
            keep,
            Some(claim_provider_id),
        );
        let nodepools: Cache<api::NodePool> =
            Cache::start(tasks, Api::all(workload.clone()), all(), keep, None);
        let (np, nc) = (nodepools.store(), nodeclaims.store());
        // A lazy watch's gate: wanted while the cluster has a NodePool or a NodeClaim.
        let gate = || {
            let (np, nc) = (np.clone(), nc.clone());
            Arc::new(Gate {
                listed: AtomicBool::new(false),
                wanted: Box::new(move || !np.is_empty() || !nc.is_empty()),
            })
        };
        let trigger = || {
            futures::stream::select(
                nodepools.subscribe().map(|_| ()),
                nodeclaims.subscribe().map(|_| ()),
            )
            .boxed()
        };
        let (pods, pdbs, pvcs, pvs) = if lazy {
            // One gate for the four: listed once the first of them has.
            let gate = gate();
            (
                Cache::start_lazily(
                    tasks,
                    Api::all(workload.clone()),
                    trim_pod,
                    &gate,
                    trigger(),
                ),
                Cache::start_lazily(tasks, Api::all(workload.clone()), keep, &gate, trigger()),
                Cache::start_lazily(
                    tasks,
                    Api::all(workload.clone()),
                    trim_pvc,
                    &gate,
                    trigger(),
                ),
                Cache::start_lazily(tasks, Api::all(workload.clone()), trim_pv, &gate, trigger()),
            )
        } else {
            (
                Cache::start(tasks, Api::all(workload.clone()), all(), trim_pod, None),
                Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
                Cache::start(tasks, Api::all(workload.clone()), all(), trim_pvc, None),
                Cache::start(tasks, Api::all(workload.clone()), all(), trim_pv, None),
            )
        };
        let lazily = || (gate(), trigger());
        let dra = DraCaches::start(tasks, workload, lazy.then_some(&lazily));
        Caches {
            nodes: Cache::start(
                tasks,
                Api::all(workload.clone()),
                all(),
                trim_node,
                Some(node_provider_id),
            ),
            pods,
            daemonsets: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            pdbs,
            nodeclaims,
            nodepools,
            nodeoverlays: None,
            overlays: None,
            pvcs,
            pvs,
            storageclasses: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            csinodes: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            dra,
        }
    }

    /// [`Caches::start`], and the NodeOverlays' watch when `node_overlay` (the feature gate:
    /// the engagement then applies them to any provider's instance types).
    pub fn start_gated(tasks: &mut Tasks, workload: &kube::Client, node_overlay: bool) -> Caches {
        let caches = Caches::start(tasks, workload);
        if node_overlay {
            return caches.with_overlays(tasks, workload);
        }
        caches
    }

    /// Also watches the workload cluster's NodeOverlays (the `NodeOverlay` feature gate).
    /// They are evaluated over the NodeClasses the NodePools reference (Karpenter evaluates
    /// them per NodePool).
    pub fn with_overlays(mut self, tasks: &mut Tasks, workload: &kube::Client) -> Caches {
        let cache: Cache<api::NodeOverlay> = Cache::start(
            tasks,
            Api::all(workload.clone()),
            watcher::Config::default(),
            keep,
            None,
        );
        let nodepools = self.nodepools.store();
        let lister: cloudprovider::overlay::store::NodeClassLister = Box::new(move || {
            nodepools
                .state()
                .iter()
                .map(|p| p.spec.template.spec.node_class_ref.name.clone())
                .collect()
        });
        self.overlays = Some(Arc::new(cloudprovider::overlay::OverlayStore::new(
            cache.store(),
            lister,
        )));
        self.nodeoverlays = Some(cache);
        self
    }

    /// Waits until every cache has its first full list.
    pub async fn ready(&self) {
        self.nodes.ready().await;
        self.pods.ready().await;
        self.daemonsets.ready().await;
        self.pdbs.ready().await;
        self.nodeclaims.ready().await;
        self.nodepools.ready().await;
        self.storageclasses.ready().await;
        self.csinodes.ready().await;
        if let Some(o) = &self.nodeoverlays {
            o.ready().await;
        }
        // A lazy watch wanted from the start (the cluster has NodePools): its first list.
        while self.pending() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Whether a lazy pod or PDB watch is wanted but has not listed yet
    /// ([`Cache::pending`]): their stores are not the cluster's, decide nothing on them.
    pub fn pending(&self) -> bool {
        self.pods.pending() || self.pdbs.pending() || self.pvcs.pending() || self.pvs.pending()
    }
}

/// The NodeClaim index key: `status.providerID`.
pub(crate) fn claim_provider_id(claim: &api::NodeClaim) -> Option<String> {
    claim.status.as_ref()?.provider_id.clone()
}

/// A Node's `spec.providerID` (the registration index).
pub(crate) fn node_provider_id(node: &k8s_openapi::api::core::v1::Node) -> Option<String> {
    node.spec
        .as_ref()?
        .provider_id
        .clone()
        .filter(|p| !p.is_empty())
}
