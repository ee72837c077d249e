//! The Cluster API provider's own watches of one engagement ([`ClusterApiCaches`]).

use kube::api::Api;
use kube::runtime::watcher;

use clusterapi_api::{Cluster, ClusterAPINodeClass, Machine, MachineDrainRule, MachineHealthCheck};
use karpenter_core::cache::{Cache, keep};
use karpenter_core::tasks::Tasks;

/// The Cluster API kinds one engagement reads: its ClusterAPINodeClasses (workload
/// cluster), its Machines (management cluster, fenced by the engagement's cluster id) and
/// the management side's Clusters (shared by every engagement of a hub).
#[derive(Clone)]
pub struct ClusterApiCaches {
    pub nodeclasses: Cache<ClusterAPINodeClass>,
    /// Only Machines carrying our NodeClaim label and our cluster id (see [`super::fence`]).
    pub machines: Cache<Machine>,
    pub clusters: Cache<Cluster>,
    /// The management side's MachineHealthChecks (which one owns a Machine's remediation).
    pub health_checks: Cache<MachineHealthCheck>,
    /// The management side's MachineDrainRules (how the core drains a Machine's Node).
    pub drain_rules: Cache<MachineDrainRule>,
}

impl ClusterApiCaches {
    /// Starts the watches of one engagement, over the management side's `clusters`.
    pub fn start(
        tasks: &mut Tasks,
        workload: &kube::Client,
        management: &kube::Client,
        cluster_id: &str,
        clusters: Cache<Cluster>,
    ) -> ClusterApiCaches {
        let all = watcher::Config::default;
        ClusterApiCaches {
            nodeclasses: Cache::start(tasks, Api::all(workload.clone()), all(), keep, None),
            machines: Cache::start(
                tasks,
                Api::all(management.clone()),
                all().labels(&super::fence::selector(cluster_id)),
                keep,
                Some(super::machine::provider_id_key),
            ),
            clusters,
            health_checks: Cache::start(tasks, Api::all(management.clone()), all(), keep, None),
            drain_rules: Cache::start(tasks, Api::all(management.clone()), all(), keep, None),
        }
    }

    /// Starts the watches of a single-cluster engagement, Clusters included.
    pub fn start_single(
        tasks: &mut Tasks,
        workload: &kube::Client,
        management: &kube::Client,
        cluster_id: &str,
    ) -> ClusterApiCaches {
        let clusters = Cache::start(
            tasks,
            Api::all(management.clone()),
            watcher::Config::default(),
            keep,
            None,
        );
        Self::start(tasks, workload, management, cluster_id, clusters)
    }

    /// Waits until every cache has its first full list.
    pub async fn ready(&self) {
        self.nodeclasses.ready().await;
        self.machines.ready().await;
        self.clusters.ready().await;
        self.health_checks.ready().await;
        self.drain_rules.ready().await;
    }
}
