//! Process wiring for `karpenter-capi run`: clients for the workload and management
//! clusters, the metrics/health server, leader election, and the control loops. Every
//! replica warms its caches; only the leader runs the loops that write.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use karpenter_core::cache::Caches;
pub use karpenter_core::clients::{ClientOptions, client, client_from_yaml, user_agent};
use karpenter_core::engagement::ProviderFactory;
use karpenter_core::leader::{Election, LeaderConfig, LeaderError};
use karpenter_core::metrics::Metrics;
use karpenter_core::ratelimit::ClientRate;
use karpenter_core::server::{self, Readiness};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Clients(#[from] karpenter_core::clients::ClientError),
    #[error("kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("serving {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Leader(#[from] LeaderError),
    #[error("lost leadership; exiting so that exactly one replica writes")]
    LostLeadership,
    #[error(transparent)]
    RepairPolicies(#[from] cloudprovider::InvalidPolicies),
    #[error(transparent)]
    Fence(#[from] clusterapi::fence::FenceError),
}

/// Everything `run` needs, parsed from flags/env by the binary.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Workload cluster kubeconfig (Karpenter objects, Nodes, Pods); None = in-cluster or
    /// the default kubeconfig.
    pub kubeconfig: Option<PathBuf>,
    /// Management cluster kubeconfig (Cluster API objects); None = the workload cluster.
    pub management_kubeconfig: Option<PathBuf>,
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
    pub leader_election: Option<LeaderConfig>,
    pub batch_idle: Duration,
    pub batch_max: Duration,
    /// How often garbage collection runs, and how old an orphaned Machine must be.
    pub gc_interval: Duration,
    pub gc_grace: Duration,
    /// A Node NotReady/Unknown this long is replaced.
    pub node_repair_after: Duration,
    /// The Cluster API provider's repair policies (`--repair-policies`); `None`: `Ready`
    /// False or Unknown for `node_repair_after`, replaced.
    pub repair_policies: Option<Vec<cloudprovider::RepairPolicy>>,
    /// Client-side rate limit of each client (workload, management).
    pub client_rate: ClientRate,
    /// The identity of the workload cluster on everything we create in the management
    /// cluster; None = the UID of the workload cluster's kube-system namespace.
    pub cluster_id: Option<String>,
    /// How long a surge-first disruption waits for its replacements to initialize before
    /// it is rolled back.
    pub disruption_timeout: Duration,
    /// How long a disruption move (emptiness, consolidation) is validated before it is
    /// taken: Karpenter's 15 s; tests shorten it.
    pub disruption_validation: Duration,
    /// How often the disruption loop runs a pass (every 5 s; tests shorten it).
    pub disruption_tick: Duration,
    /// How often a NodeClaim's `Consolidatable` message alone may be rewritten (once a
    /// minute; tests shorten it).
    pub disruption_message_refresh: Duration,
    /// How long a template's reported `available-count` is trusted.
    pub count_staleness: Duration,
    /// `--min-values-policy`: what provisioning does when a NodeClaim's instance types
    /// cannot meet a `minValues` (Karpenter's `Strict`, the default, or `BestEffort`).
    pub min_values_policy: scheduling::MinValuesPolicy,
    /// The `NodeOverlay` feature gate: NodeOverlays watched, evaluated and applied to every
    /// provider's instance types (on by default, as in Karpenter v1.15.0).
    pub node_overlay: bool,
    /// Hub mode (`--mode hub`): the process runs against the management cluster only
    /// (`management_kubeconfig`, else `kubeconfig`, else in-cluster) and engages every
    /// opted-in Cluster API `Cluster` (see `hub`). `None`: single-cluster mode.
    pub hub: Option<clusterapi::hub::HubConfig>,
    /// The provider (`--provider`): `None` is Cluster API's; another is built by its
    /// factory, with no Cluster API kind watched.
    pub provider: Option<ProviderFactory>,
}

impl Default for RunConfig {
    /// The defaults of `karpenter-capi run` without leader election; tests override the
    /// addresses and what they need.
    fn default() -> Self {
        Self {
            kubeconfig: None,
            management_kubeconfig: None,
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            health_addr: SocketAddr::from(([0, 0, 0, 0], 8081)),
            leader_election: None,
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            gc_interval: Duration::from_secs(30),
            gc_grace: karpenter_core::garbagecollection::INSTANCE_GRACE,
            node_repair_after: Duration::from_secs(600),
            repair_policies: None,
            client_rate: ClientRate::default(),
            cluster_id: None,
            disruption_timeout: karpenter_core::disruption::orchestrate::TIMEOUT,
            disruption_validation: karpenter_core::disruption::VALIDATION,
            disruption_tick: karpenter_core::disruption::TICK,
            disruption_message_refresh: karpenter_core::disruption::status::MESSAGE_REFRESH,
            count_staleness: clusterapi::availability::counts::DEFAULT_STALENESS,
            min_values_policy: scheduling::MinValuesPolicy::Strict,
            node_overlay: true,
            hub: None,
            provider: None,
        }
    }
}

impl RunConfig {
    /// This replica's name: its Lease identity, or `karpenter-capi` without election.
    pub fn identity(&self) -> String {
        self.leader_election
            .as_ref()
            .map(|l| l.identity.clone())
            .unwrap_or_else(|| "karpenter-capi".into())
    }

    /// How this replica's clients talk to the API servers.
    pub fn client_options(&self) -> ClientOptions {
        ClientOptions {
            rate: self.client_rate,
            user_agent: user_agent(self.leader_election.as_ref().map(|l| l.identity.as_str())),
        }
    }
}

/// Shared by every control loop.
#[derive(Clone)]
pub struct Context {
    /// Karpenter objects, Nodes, Pods, Events.
    pub workload: Client,
    /// Cluster API objects (the same cluster unless split).
    pub management: Client,
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub config: Arc<RunConfig>,
}

impl Context {
    /// What the engagement of this process's workload cluster is built from.
    pub fn sources(&self) -> karpenter_core::engagement::Sources {
        let c = &self.config;
        karpenter_core::engagement::Sources {
            workload: self.workload.clone(),
            management: self.management.clone(),
            metrics: self.metrics.clone(),
            knobs: karpenter_core::engagement::Knobs {
                node_repair_after: c.node_repair_after,
                repair_policies: c.repair_policies.clone().map(std::sync::Arc::new),
                disruption_timeout: c.disruption_timeout,
                disruption_validation: c.disruption_validation,
                disruption_tick: c.disruption_tick,
                disruption_message_refresh: c.disruption_message_refresh,
                batch_idle: c.batch_idle,
                batch_max: c.batch_max,
                gc_interval: c.gc_interval,
                gc_grace: c.gc_grace,
                count_staleness: c.count_staleness,
                min_values_policy: c.min_values_policy,
            },
            engaged: None,
            connection: Default::default(),
        }
    }
}

/// Builds the shared context: clients, metrics registry, readiness flag.
pub async fn context(config: RunConfig) -> Result<(Context, Registry), RuntimeError> {
    let options = config.client_options();
    let (workload, management) = if config.hub.is_some() {
        // A hub talks to the management cluster only; each engagement builds its own
        // workload client from its Cluster's kubeconfig Secret.
        let path = config.management_kubeconfig.as_ref();
        let management = client(path.or(config.kubeconfig.as_ref()), &options).await?;
        (management.clone(), management)
    } else {
        let workload = client(config.kubeconfig.as_ref(), &options).await?;
        let management = match &config.management_kubeconfig {
            // Its own bucket: client-go gives every rest.Config its own limiter too.
            Some(path) => client(Some(path), &options).await?,
            None => workload.clone(),
        };
        (workload, management)
    };
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    Ok((
        Context {
            workload,
            management,
            metrics,
            readiness: Readiness::default(),
            config: Arc::new(config),
        },
        registry,
    ))
}

/// Serves `/metrics`, `/healthz`, `/readyz` on the configured addresses until `shutdown`
/// flips to true. The same router serves both addresses (they may be equal).
pub async fn serve_endpoints(
    ctx: &Context,
    registry: Registry,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RuntimeError> {
    let exposition = karpenter_core::metrics::Exposition::new(registry, &ctx.metrics);
    let router = server::router(exposition, ctx.readiness.clone());
    let mut addrs = vec![ctx.config.metrics_addr];
    if ctx.config.health_addr != ctx.config.metrics_addr {
        addrs.push(ctx.config.health_addr);
    }
    let mut servers = tokio::task::JoinSet::new();
    for addr in addrs {
        let mut stop = shutdown.clone();
        let router = router.clone();
        servers.spawn(async move {
            server::serve(addr, router, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
            .map_err(|source| RuntimeError::Serve { addr, source })
        });
    }
    while let Some(joined) = servers.join_next().await {
        if let Ok(result) = joined {
            result?;
        }
    }
    Ok(())
}

/// Waits for leadership when election is on; returns the election (to watch for loss and
/// to release on shutdown). A hub with election on has no leader: every replica serves the
/// Clusters it owns, each fenced by its own Lease (see `hub`).
pub async fn lead(ctx: &Context) -> Result<Option<Election>, RuntimeError> {
    let Some(leader) = &ctx.config.leader_election else {
        return Ok(None);
    };
    if ctx.config.hub.is_some() {
        return Ok(None);
    }
    let mut election = Election::start(ctx.workload.clone(), leader).await?;
    tracing::info!(lease = %leader.name, identity = %leader.identity, "waiting for leadership");
    if !election.acquired().await {
        return Err(RuntimeError::LostLeadership);
    }
    tracing::info!(identity = %leader.identity, "acquired leadership");
    Ok(Some(election))
}

/// What a replica warms before it leads: one engagement's caches (single-cluster mode), or
/// the hub's shared management-side caches.
enum Warm {
    Single {
        caches: Box<karpenter_core::cache::Caches>,
        provider: WarmProvider,
    },
    Hub {
        clusters: karpenter_core::cache::Cache<clusterapi_api::Cluster>,
    },
}

/// The provider of a single-cluster replica, with what it warms.
enum WarmProvider {
    /// Cluster API: its own caches and the fencing id.
    ClusterApi {
        capi: Box<clusterapi::caches::ClusterApiCaches>,
        cluster_id: String,
    },
    /// Another provider (`run --provider`), built by its factory.
    Other(ProviderFactory),
}

/// What runs once this replica leads.
enum Running {
    Single {
        loops: karpenter_core::tasks::Tasks,
        gc: tokio::task::AbortHandle,
    },
    /// The hub's task, in a set so that dropping it (a killed operator) aborts it, and with
    /// it every engagement.
    Hub(karpenter_core::tasks::Tasks),
}

impl Running {
    /// Stops everything at once (leadership lost: not one more write).
    fn abort(self) {
        match self {
            Running::Single { mut loops, gc } => {
                gc.abort();
                loops.abort_all();
            }
            Running::Hub(mut hub) => hub.abort_all(),
        }
    }

    /// Stops cleanly (`stop` was sent): in-flight reconciles finish.
    async fn finish(self) {
        match self {
            Running::Single { mut loops, gc } => {
                gc.abort();
                while loops.join_next().await.is_some() {}
            }
            Running::Hub(mut hub) => while hub.join_next().await.is_some() {},
        }
    }
}

/// Starts the caches of this replica's mode (every replica, so failover is warm).
async fn warm(
    ctx: &Context,
    tasks: &mut karpenter_core::tasks::Tasks,
) -> Result<Warm, RuntimeError> {
    let overlays = ctx.config.node_overlay;
    if let Some(factory) = &ctx.config.provider {
        // Another provider: the workload cluster's kinds only, no fencing id (nothing is
        // made in a management cluster).
        return Ok(Warm::Single {
            caches: Box::new(Caches::start_gated(tasks, &ctx.workload, overlays)),
            provider: WarmProvider::Other(factory.clone()),
        });
    }
    match &ctx.config.hub {
        None => {
            let cluster_id =
                clusterapi::fence::cluster_id(&ctx.workload, ctx.config.cluster_id.as_deref())
                    .await?;
            tracing::info!(cluster_id = %cluster_id, "fencing our Cluster API objects by cluster id");
            let caches = Caches::start_gated(tasks, &ctx.workload, overlays);
            let capi = clusterapi::caches::ClusterApiCaches::start_single(
                tasks,
                &ctx.workload,
                &ctx.management,
                &cluster_id,
            );
            Ok(Warm::Single {
                caches: Box::new(caches),
                provider: WarmProvider::ClusterApi {
                    capi: Box::new(capi),
                    cluster_id,
                },
            })
        }
        Some(hub) => {
            let selector = hub.selector();
            // A bad selector fails here, not as a watch that never lists.
            let api: kube::Api<clusterapi_api::Cluster> = kube::Api::all(ctx.management.clone());
            api.list_metadata(&kube::api::ListParams::default().labels(&selector).limit(1))
                .await?;
            tracing::info!(selector = %selector, "hub mode: engaging the Clusters matching");
            let clusters = karpenter_core::cache::Cache::start(
                tasks,
                api,
                kube::runtime::watcher::Config::default().labels(&selector),
                karpenter_core::cache::keep,
                None,
            );
            Ok(Warm::Hub { clusters })
        }
    }
}

/// A hub's fence and peer Lease settings: its leader-election settings, when on.
fn fencing(config: &RunConfig) -> Option<clusterapi::hub::shard::Fencing> {
    let l = config.leader_election.as_ref()?;
    Some(clusterapi::hub::shard::Fencing {
        namespace: l.namespace.clone(),
        identity: l.identity.clone(),
        duration: l.duration,
        grace: l.grace,
    })
}

/// Starts the hub: the peer registry (rendezvous sharding: its first pass done, so the
/// first decisions see the other replicas) and the hub's task.
async fn start_hub(
    ctx: &Context,
    clusters: karpenter_core::cache::Cache<clusterapi_api::Cluster>,
    index: templates::watch::TemplateIndex,
    identity: String,
    stop: &watch::Receiver<bool>,
) -> Running {
    let config = ctx.config.hub.clone().unwrap_or_default();
    let fencing = fencing(&ctx.config);
    let mut task = karpenter_core::tasks::Tasks::default();
    let peers = match (&fencing, config.shard) {
        (Some(f), None) => {
            let (mut registry, peers) =
                clusterapi::hub::peers::Registry::new(ctx.management.clone(), f.clone());
            registry.refresh().await;
            task.spawn(registry.run(stop.clone()));
            Some(peers)
        }
        _ => None,
    };
    let ownership = clusterapi::hub::shard::ownership(config.shard, fencing.as_ref(), peers);
    let recorder = karpenter_core::events::Recorder::new(
        ctx.management.clone(),
        karpenter_core::events::Reporter {
            controller: "karpenter-capi-hub".into(),
            instance: Some(identity.clone()),
        },
    );
    let c = &ctx.config;
    let hub = clusterapi::hub::engage::Hub {
        management: ctx.management.clone(),
        management_kubeconfig: c.management_kubeconfig.clone().or(c.kubeconfig.clone()),
        clusters,
        index,
        metrics: ctx.metrics.clone(),
        knobs: ctx.sources().knobs,
        options: ctx.config.client_options(),
        identity,
        config,
        ownership,
        recorder,
        fencing,
        status: clusterapi::hub::status::Table::new(ctx.metrics.clusters.clone()),
    };
    task.spawn(clusterapi::hub::run(Arc::new(hub), stop.clone()));
    Running::Hub(task)
}

/// Starts the loops of single-cluster mode once this replica leads.
fn start_single(
    ctx: &Context,
    caches: &karpenter_core::cache::Caches,
    provider: WarmProvider,
    index: templates::watch::TemplateIndex,
    identity: String,
    tasks: &mut karpenter_core::tasks::Tasks,
    stop: &watch::Receiver<bool>,
) -> Running {
    let sources = ctx.sources();
    let engagement = match provider {
        WarmProvider::Other(factory) => {
            karpenter_core::engagement::Engagement::build(&sources, caches, identity, |r| {
                (factory.build)(tasks, &ctx.workload, caches, r)
            })
        }
        WarmProvider::ClusterApi { capi, cluster_id } => {
            karpenter_core::engagement::Engagement::build(&sources, caches, identity, |recorder| {
                clusterapi::wiring::parts(&sources, caches, &capi, index, cluster_id, recorder)
            })
        }
    };
    let (loops, gc) = engagement.run(tasks, stop);
    Running::Single { loops, gc }
}

/// Runs the operator until SIGTERM/SIGINT: caches on every replica, loops on the leader.
pub async fn run_operator(config: RunConfig) -> Result<(), RuntimeError> {
    if let Some(policies) = &config.repair_policies {
        cloudprovider::repair::validate(policies)?;
    }
    let identity = config.identity();
    let (ctx, registry) = context(config).await?;
    // Everything spawned here is aborted if this future is dropped (a killed operator).
    let mut tasks = karpenter_core::tasks::Tasks::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut endpoints = tokio::task::JoinSet::new();
    {
        let ctx = ctx.clone();
        let stop = stop_rx.clone();
        endpoints.spawn(async move { serve_endpoints(&ctx, registry, stop).await });
    }

    let warmed = warm(&ctx, &mut tasks).await?;
    let index = templates::watch::TemplateIndex::new();
    let cluster_api = ctx.config.provider.is_none();
    if cluster_api {
        tasks.spawn(templates::watch::run(
            ctx.management.clone(),
            index.clone(),
            templates::watch::WatchConfig::default(),
        ));
    }
    match &warmed {
        Warm::Single { caches, provider } => {
            caches.ready().await;
            if let WarmProvider::ClusterApi { capi, .. } = provider {
                capi.ready().await;
            }
        }
        Warm::Hub { clusters } => clusters.ready().await,
    }
    if cluster_api {
        warm_templates(&ctx.management, &index).await;
    }
    ctx.readiness.set_ready();
    tracing::info!("caches synced");

    let shutdown_signal = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {},
        }
    };
    tokio::pin!(shutdown_signal);

    let mut election = tokio::select! {
        e = lead(&ctx) => e?,
        _ = &mut shutdown_signal => {
            let _ = stop_tx.send(true);
            let _ = endpoints.join_next().await;
            return Ok(());
        }
    };

    let running = match warmed {
        Warm::Hub { clusters } => start_hub(&ctx, clusters, index, identity, &stop_rx).await,
        Warm::Single { caches, provider } => start_single(
            &ctx, &caches, provider, index, identity, &mut tasks, &stop_rx,
        ),
    };

    let lost = async {
        match election.as_mut() {
            Some(e) => e.lost().await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        _ = &mut shutdown_signal => Ok(()),
        _ = lost => Err(RuntimeError::LostLeadership),
    };
    let _ = stop_tx.send(true);
    if result.is_err() {
        // Another replica may already lead: not one more write from this one.
        tracing::warn!("lost leadership: aborting in-flight work");
        running.abort();
        drop(tasks);
        return result;
    }
    tracing::info!("shutting down: finishing in-flight reconciles");
    running.finish().await;
    if let Some(e) = election {
        e.release().await;
    }
    let _ = endpoints.join_next().await;
    result
}

/// Waits until the template index watches every template kind that exists now and has
/// listed them: a restarted operator must not judge a NodeClass by an empty catalog.
async fn warm_templates(management: &Client, index: &templates::watch::TemplateIndex) {
    let crds: kube::Api<templates::crd::CrdSummary> = kube::Api::all(management.clone());
    let expected: Vec<templates::watch::TemplateKind> = match crds.list(&Default::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter_map(templates::watch::template_kind_from_crd)
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "listing CRDs for template discovery failed");
            Vec::new()
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let have = index.kinds();
        if expected
            .iter()
            .all(|k| have.iter().any(|h| h.group == k.group && h.kind == k.kind))
        {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("template kinds not all discovered after 60s; starting anyway");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    index.ready().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::leader::LeaderConfig;

    #[test]
    fn user_agent_names_the_replica() {
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(user_agent(None), format!("karpenter-capi/{version}"));
        let config = RunConfig {
            leader_election: Some(LeaderConfig {
                namespace: "karpenter".into(),
                name: "lease".into(),
                identity: "replica-a".into(),
                duration: Duration::from_secs(15),
                grace: Duration::from_secs(5),
            }),
            ..RunConfig::default()
        };
        let options = config.client_options();
        assert_eq!(
            options.user_agent,
            format!("karpenter-capi/{version} (replica-a)")
        );
        assert_eq!(options.rate, ClientRate::default());
        assert_eq!(
            RunConfig::default().client_options().user_agent,
            user_agent(None)
        );
    }
}
