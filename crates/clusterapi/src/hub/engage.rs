//! One engaged Cluster: its credentials, its workload client, caches, loops and probe, run
//! on one task until told to stop ([`Engaged::disengage`]) or cancelled ([`Engaged::cancel`]).
//!
//! A sharded hub fences each engagement with the Cluster's own Lease
//! ([`super::shard::fence_name`], the leader-election machinery of `leader`): the task takes
//! it before it connects, renews it while it serves, and when it loses it (another holder,
//! seen at a renewal) the engagement is dropped at once — every loop, watch and probe
//! aborted, as a replica that lost its leadership — before anything else is written; it then
//! waits to take the Lease again. A stopped engagement releases its Lease once its loops are
//! done, so the next owner need not wait for it to expire.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use tokio::sync::watch;

use super::shard::Fencing;
use super::status::{State, Table};
use super::{HubConfig, Ownership};
use crate::catalogs::ClusterKey;
use clusterapi_api::Cluster;
use karpenter_core::cache::{Cache, Caches};
use karpenter_core::clients::ClientOptions;
use karpenter_core::engagement::{Engagement, Knobs, Sources};
use karpenter_core::events::{Event, EventType, Recorder};
use karpenter_core::health::Connection;
use karpenter_core::metrics::{ClusterLabels, Metrics};
use karpenter_core::tasks::Tasks;

/// How long a stopping engagement may take to finish its in-flight reconciles before it
/// is aborted.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// What every engagement of the hub shares (the management side).
pub struct Hub {
    /// The hub's own management client: the Clusters watch, the Secrets, the Events.
    pub management: Client,
    /// Where each engagement's own management client comes from (its own rate-limit
    /// budget for its Machines); `None`: in-cluster.
    pub management_kubeconfig: Option<std::path::PathBuf>,
    /// The opted-in Clusters (watched with [`HubConfig::selector`]).
    pub clusters: Cache<Cluster>,
    pub index: templates::watch::TemplateIndex,
    pub metrics: Metrics,
    pub knobs: Knobs,
    /// How each engagement's workload client is built (its own rate-limit budget).
    pub options: ClientOptions,
    pub identity: String,
    pub config: HubConfig,
    pub ownership: Arc<dyn Ownership>,
    /// Events on the Cluster objects (management side).
    pub recorder: Recorder,
    /// The per-cluster fence Leases (a sharded hub); `None`: one replica, no Lease.
    pub fencing: Option<Fencing>,
    /// Each Cluster's state (`karpenter_capi_clusters`).
    pub status: Table,
}

/// A Cluster's kubeconfig, as read from its Secret ([`super::credentials`]).
pub(crate) type Credentials = super::credentials::Kubeconfig;

/// Why a workload cluster could not be reached (retried).
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error(transparent)]
    Client(#[from] karpenter_core::clients::ClientError),
    #[error(transparent)]
    Fence(#[from] crate::fence::FenceError),
}

/// An engagement running on its own task; dropping it aborts the task (a hub that lost its
/// leadership, or was killed, leaves no engagement writing behind it).
pub(crate) struct Engaged {
    /// The resourceVersion of the Secret it was engaged with.
    pub(crate) version: String,
    stop: watch::Sender<bool>,
    cancel: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Engaged {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Engaged {
    /// Stops the engagement's loops (in-flight reconciles finish, up to [`STOP_GRACE`]) and
    /// its watches. Nothing of the cluster is deleted.
    pub(crate) async fn disengage(mut self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(STOP_GRACE, &mut self.task)
            .await
            .is_err()
        {
            tracing::warn!("engagement did not stop in time; aborting it");
            self.task.abort();
        }
    }

    /// Cancels the engagement (the Cluster moved to another replica): its loops are
    /// aborted, not finished, then its fence Lease is released.
    pub(crate) async fn cancel(mut self) {
        let _ = self.cancel.send(true);
        if tokio::time::timeout(STOP_GRACE, &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

/// Starts the engagement of `cluster` with `creds`.
pub(crate) fn engage(hub: &Hub, key: ClusterKey, cluster: &Cluster, creds: Credentials) -> Engaged {
    let (stop, stopped) = watch::channel(false);
    let (cancel, cancelled) = watch::channel(false);
    tracing::info!(cluster = %key, secret = %creds.secret, "engaging");
    let run = Run {
        management_kubeconfig: hub.management_kubeconfig.clone(),
        clusters: hub.clusters.clone(),
        index: hub.index.clone(),
        metrics: hub.metrics.clone(),
        knobs: hub.knobs.clone(),
        options: hub.options.clone(),
        identity: hub.identity.clone(),
        probe_interval: hub.config.probe_interval,
        cluster_label: hub.config.metrics_cluster_label,
        node_overlay: hub.config.node_overlay,
        recorder: hub.recorder.clone(),
        regarding: regarding(cluster),
        key,
        fence_client: hub.management.clone(),
        fencing: hub.fencing.clone(),
        status: hub.status.clone(),
    };
    Engaged {
        version: creds.version,
        stop,
        cancel,
        task: tokio::spawn(run.run(creds.kubeconfig, stopped, cancelled)),
    }
}

/// A reference to `cluster` for Events.
fn regarding(cluster: &Cluster) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!(
            "{}/{}",
            api::consts::groups::CLUSTER_API,
            api::consts::groups::CLUSTER_API_VERSION
        )),
        kind: Some("Cluster".into()),
        name: cluster.metadata.name.clone(),
        namespace: cluster.metadata.namespace.clone(),
        uid: cluster.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// An engagement's own clients (each with its own rate-limit budget) and its fencing id.
struct Connected {
    workload: Client,
    management: Client,
    cluster_id: String,
}

/// What the engagement's task owns.
#[derive(Clone)]
struct Run {
    management_kubeconfig: Option<std::path::PathBuf>,
    clusters: Cache<Cluster>,
    index: templates::watch::TemplateIndex,
    metrics: Metrics,
    knobs: Knobs,
    options: ClientOptions,
    identity: String,
    probe_interval: Duration,
    /// Whether the engagement's series carry its `cluster` label.
    cluster_label: bool,
    /// The `NodeOverlay` feature gate.
    node_overlay: bool,
    recorder: Recorder,
    regarding: ObjectReference,
    key: ClusterKey,
    /// Where the fence Lease lives (the hub's management client).
    fence_client: Client,
    fencing: Option<Fencing>,
    status: Table,
}

/// Waits until `rx` turns true (or its sender is gone).
async fn until(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

impl Run {
    fn labels(&self) -> ClusterLabels {
        ClusterLabels {
            cluster: self.key.to_string(),
        }
    }

    fn event(&self, type_: EventType, reason: &str, note: String) {
        self.recorder.record(
            Event {
                type_,
                reason: reason.into(),
                note: Some(note),
                action: "Engage".into(),
                secondary: None,
            },
            self.regarding.clone(),
        );
    }

    /// Serves the cluster until `stop` (loops finish) or `cancel` (loops aborted); when
    /// fenced, only while holding its fence Lease.
    async fn run(
        self,
        kubeconfig: String,
        stop: watch::Receiver<bool>,
        cancel: watch::Receiver<bool>,
    ) {
        let Some(fencing) = self.fencing.clone() else {
            tokio::select! {
                _ = self.serve(&kubeconfig, stop) => {}
                _ = until(cancel) => {}
            }
            return self.forget();
        };
        loop {
            self.status.set(&self.key, State::WaitingLease);
            let mut election = tokio::select! {
                _ = until(stop.clone()) => return,
                _ = until(cancel.clone()) => return,
                e = self.fence(&fencing) => e,
            };
            tokio::select! {
                _ = until(stop.clone()) => return election.release().await,
                _ = until(cancel.clone()) => return election.release().await,
                _ = election.acquired() => {}
            }
            tracing::info!(cluster = %self.key, lease = %super::shard::fence_name(&self.key), "fence Lease acquired");
            let lost = tokio::select! {
                _ = self.serve(&kubeconfig, stop.clone()) => false,
                _ = election.lost() => true,
                _ = until(cancel.clone()) => false,
            };
            // Dropped: every loop, watch and probe of the engagement is aborted.
            self.forget();
            if !lost {
                tracing::info!(cluster = %self.key, "releasing the fence Lease");
                return election.release().await;
            }
            tracing::warn!(cluster = %self.key, "fence Lease lost: engagement cancelled; waiting to hold it again");
        }
    }

    /// Drops the cluster's series: whoever serves it next reports them.
    fn forget(&self) {
        self.metrics.cluster_connected.remove(&self.labels());
        self.metrics.forget_cluster(&self.key.to_string());
        self.metrics.cluster.detach(&self.key.to_string());
    }

    /// Starts the election for the fence Lease (retried until it starts).
    async fn fence(&self, fencing: &Fencing) -> karpenter_core::leader::Election {
        let config = karpenter_core::leader::LeaderConfig {
            namespace: fencing.namespace.clone(),
            name: super::shard::fence_name(&self.key),
            identity: fencing.identity.clone(),
            duration: fencing.duration,
            grace: fencing.grace,
        };
        loop {
            match karpenter_core::leader::Election::start(self.fence_client.clone(), &config).await
            {
                Ok(e) => return e,
                Err(e) => {
                    tracing::warn!(cluster = %self.key, error = %e, "starting the fence Lease election failed; retrying");
                    tokio::time::sleep(self.probe_interval.min(Duration::from_secs(5))).await;
                }
            }
        }
    }

    /// Connects (retrying), starts the caches, the probe and the loops, and runs until
    /// `stop`.
    async fn serve(&self, kubeconfig: &str, mut stop: watch::Receiver<bool>) {
        self.status.set(&self.key, State::Connecting);
        let connected = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            c = self.connect(kubeconfig) => c,
        };
        let Connected {
            workload,
            management,
            cluster_id,
        } = connected;
        let mut tasks = Tasks::default();
        let mut caches = Caches::start_engaged(&mut tasks, &workload, true);
        let capi = crate::caches::ClusterApiCaches::start(
            &mut tasks,
            &workload,
            &management,
            &cluster_id,
            self.clusters.clone(),
        );
        if self.node_overlay {
            caches = caches.with_overlays(&mut tasks, &workload);
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = async { caches.ready().await; capi.ready().await } => {}
        }
        let (tx, connection) = Connection::new();
        self.metrics
            .cluster_connected
            .get_or_create(&self.labels())
            .set(1);
        self.metrics
            .cluster_engagements
            .get_or_create(&self.labels())
            .inc();
        self.status.set(&self.key, State::Engaged);
        tracing::info!(cluster = %self.key, cluster_id = %cluster_id, "engaged");
        self.event(
            EventType::Normal,
            api::consts::events::CLUSTER_ENGAGED,
            format!("karpenter-capi engaged this cluster (cluster id {cluster_id})"),
        );
        tasks.spawn(self.probe(workload.clone(), tx, stop.clone()));
        let sources = Sources {
            workload,
            management,
            metrics: self
                .metrics
                .scoped(self.cluster_label.then(|| self.key.to_string()).as_deref()),
            knobs: self.knobs.clone(),
            engaged: Some(self.key.clone()),
            connection,
        };
        let index = self.index.clone();
        let engagement = Engagement::build(&sources, &caches, self.identity.clone(), |recorder| {
            crate::wiring::parts(&sources, &caches, &capi, index, cluster_id, recorder)
        });
        let (mut loops, gc) = engagement.run(&mut tasks, &stop);
        let _ = stop.wait_for(|s| *s).await;
        gc.abort();
        while loops.join_next().await.is_some() {}
        tracing::info!(cluster = %self.key, "disengaged");
    }

    /// The engagement's clients and the cluster id, retried every probe interval until they
    /// come.
    async fn connect(&self, kubeconfig: &str) -> Connected {
        loop {
            let attempt = async {
                let workload =
                    karpenter_core::clients::client_from_yaml(kubeconfig, &self.options).await?;
                let management = karpenter_core::clients::client(
                    self.management_kubeconfig.as_ref(),
                    &self.options,
                )
                .await?;
                let cluster_id = crate::fence::cluster_id(&workload, None).await?;
                Ok::<_, ConnectError>(Connected {
                    workload,
                    management,
                    cluster_id,
                })
            };
            match attempt.await {
                Ok(found) => return found,
                Err(e) => {
                    tracing::warn!(cluster = %self.key, error = %e, "connecting to the workload cluster failed; retrying");
                    tokio::time::sleep(self.probe_interval).await;
                }
            }
        }
    }

    /// The probe task: the connected gauge, an Event on the Cluster and a log per change.
    fn probe(
        &self,
        client: Client,
        tx: watch::Sender<bool>,
        stop: watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let gauge = self
            .metrics
            .cluster_connected
            .get_or_create(&self.labels())
            .clone();
        let interval = self.probe_interval;
        let this = Arc::new(self.clone());
        karpenter_core::health::probe(client, interval, tx, stop, move |connected| {
            gauge.set(i64::from(connected));
            let state = if connected {
                State::Engaged
            } else {
                State::Disconnected
            };
            this.status.set(&this.key, state);
            let this = this.clone();
            async move {
                if connected {
                    tracing::info!(cluster = %this.key, "workload cluster answers again: resuming");
                    this.event(
                        EventType::Normal,
                        api::consts::events::CLUSTER_CONNECTED,
                        "The workload cluster's API server answers again; disruption, garbage collection and deletes resume".into(),
                    );
                } else {
                    tracing::warn!(cluster = %this.key, "workload cluster disconnected: no disruption, garbage collection or deletes until it answers");
                    this.event(
                        EventType::Warning,
                        api::consts::events::CLUSTER_DISCONNECTED,
                        format!(
                            "The workload cluster's API server failed {} probes in a row; no disruption, garbage collection or deletes for it until it answers",
                            karpenter_core::health::FAILURES
                        ),
                    );
                }
            }
        })
    }
}
