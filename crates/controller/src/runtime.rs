//! Process wiring for `karpenter-capi run`: clients for the workload and management
//! clusters, the metrics/health server, leader election, and the control loops. Every
//! replica warms its caches; only the leader runs the loops that write.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::leader::{Election, LeaderConfig, LeaderError};
use crate::metrics::Metrics;
use crate::server::{self, Readiness};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
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

/// Builds a client from a kubeconfig path, or the environment's default configuration.
pub async fn client(path: Option<&PathBuf>) -> Result<Client, RuntimeError> {
    let config = match path {
        Some(path) => {
            let bad = |message: String| RuntimeError::Kubeconfig {
                path: path.display().to_string(),
                message,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| bad(e.to_string()))?
        }
        None => Config::infer()
            .await
            .map_err(|e| RuntimeError::Kubeconfig {
                path: "(inferred)".into(),
                message: e.to_string(),
            })?,
    };
    Ok(Client::try_from(config)?)
}

/// Builds the shared context: clients, metrics registry, readiness flag.
pub async fn context(config: RunConfig) -> Result<(Context, Registry), RuntimeError> {
    let workload = client(config.kubeconfig.as_ref()).await?;
    let management = match &config.management_kubeconfig {
        Some(path) => client(Some(path)).await?,
        None => workload.clone(),
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
    let router = server::router(Arc::new(registry), ctx.readiness.clone());
    let mut addrs = vec![ctx.config.metrics_addr];
    if ctx.config.health_addr != ctx.config.metrics_addr {
        addrs.push(ctx.config.health_addr);
    }
    let mut spawned = crate::tasks::Tasks::default();
    let mut tasks = Vec::new();
    for addr in addrs {
        let mut stop = shutdown.clone();
        let router = router.clone();
        tasks.push(spawned.spawn(async move {
            server::serve(addr, router, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
            .map_err(|source| RuntimeError::Serve { addr, source })
        }));
    }
    for task in tasks {
        if let Ok(result) = task.await {
            result?;
        }
    }
    Ok(())
}

/// Waits for leadership when election is on; returns the election (to watch for loss and
/// to release on shutdown).
pub async fn lead(ctx: &Context) -> Result<Option<Election>, RuntimeError> {
    let Some(leader) = &ctx.config.leader_election else {
        return Ok(None);
    };
    let mut election = Election::start(ctx.workload.clone(), leader).await?;
    tracing::info!(lease = %leader.name, identity = %leader.identity, "waiting for leadership");
    if !election.acquired().await {
        return Err(RuntimeError::LostLeadership);
    }
    tracing::info!(identity = %leader.identity, "acquired leadership");
    Ok(Some(election))
}

/// Runs the operator until SIGTERM/SIGINT: caches on every replica, loops on the leader.
pub async fn run_operator(config: RunConfig) -> Result<(), RuntimeError> {
    use crate::nodeclaim::context::{Ctx, Settings};
    use crate::nodeclaim::lifecycle::{self, Caches};
    use crate::nodeclass_status::{self, IndexCatalogs, StatusCtx};
    use kube::runtime::events::{Recorder, Reporter};
    use kube::runtime::reflector;
    use kube::runtime::watcher;

    let identity = config
        .leader_election
        .as_ref()
        .map(|l| l.identity.clone())
        .unwrap_or_else(|| "karpenter-capi".into());
    let (ctx, registry) = context(config).await?;
    // Everything spawned here is aborted if this future is dropped (a killed operator).
    let mut tasks = crate::tasks::Tasks::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let endpoints = {
        let ctx = ctx.clone();
        let stop = stop_rx.clone();
        tasks.spawn(async move { serve_endpoints(&ctx, registry, stop).await })
    };

    // Caches (every replica): Nodes, our Machines, NodeClasses, Clusters, templates.
    let caches = Caches::start(&ctx.workload, &ctx.management);
    let cluster_ar = nodeclass_status::cluster_resource();
    let writer = reflector::store::Writer::new(cluster_ar.clone());
    let clusters = writer.as_reader();
    tasks.spawn(lifecycle::reflect(
        writer,
        watcher::watcher(
            kube::Api::<kube::api::DynamicObject>::all_with(ctx.management.clone(), &cluster_ar),
            watcher::Config::default(),
        ),
    ));
    let index = templates::watch::TemplateIndex::new();
    tasks.spawn(templates::watch::run(
        ctx.management.clone(),
        index.clone(),
        templates::watch::WatchConfig::default(),
    ));
    // Provisioner caches: Pods, DaemonSets, NodePools (NodeClaims are watched below).
    let (pods, w) = reflector::store::<k8s_openapi::api::core::v1::Pod>();
    tasks.spawn(lifecycle::reflect(
        w,
        watcher::watcher(
            kube::Api::all(ctx.workload.clone()),
            watcher::Config::default(),
        ),
    ));
    let (daemonsets, w) = reflector::store::<k8s_openapi::api::apps::v1::DaemonSet>();
    tasks.spawn(lifecycle::reflect(
        w,
        watcher::watcher(
            kube::Api::all(ctx.workload.clone()),
            watcher::Config::default(),
        ),
    ));
    let nodepools = {
        let ar = crate::provisioning::nodepool_resource();
        let writer = reflector::store::Writer::new(ar.clone());
        let store = writer.as_reader();
        tasks.spawn(lifecycle::reflect(
            writer,
            watcher::watcher(
                kube::Api::<kube::api::DynamicObject>::all_with(ctx.workload.clone(), &ar),
                watcher::Config::default(),
            ),
        ));
        store
    };
    caches.ready().await;
    let _ = clusters.wait_until_ready().await;
    let _ = pods.wait_until_ready().await;
    let _ = daemonsets.wait_until_ready().await;
    let _ = nodepools.wait_until_ready().await;
    warm_templates(&ctx.management, &index).await;
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
            let _ = endpoints.await;
            return Ok(());
        }
    };

    let catalogs = IndexCatalogs {
        index,
        nodeclasses: caches.nodeclasses.clone(),
        clusters,
    };
    let recorder = Recorder::new(
        ctx.workload.clone(),
        Reporter {
            controller: "karpenter".into(),
            instance: Some(identity),
        },
    );
    let unavailable: Arc<crate::unavailable::UnavailableOfferings> = Arc::default();
    let lifecycle_ctx = Ctx {
        workload: ctx.workload.clone(),
        management: ctx.management.clone(),
        recorder,
        metrics: ctx.metrics.clone(),
        nodes: caches.nodes.clone(),
        machines: caches.machines.clone(),
        nodeclasses: caches.nodeclasses.clone(),
        nodeclaims: reflector::store::Writer::new(crate::nodeclaim::context::nodeclaim_resource())
            .as_reader(),
        catalogs: Arc::new(catalogs.clone()),
        unavailable: unavailable.clone(),
        settings: Settings {
            node_repair_after: ctx.config.node_repair_after,
            ..Settings::default()
        },
        kinds: Arc::default(),
    };
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let nodeclaims_store = {
        // GC reads the NodeClaims through its own watch (the controller's store is private).
        let ar = crate::nodeclaim::context::nodeclaim_resource();
        let writer = reflector::store::Writer::new(ar.clone());
        let store = writer.as_reader();
        tasks.spawn(lifecycle::reflect(
            writer,
            watcher::watcher(
                kube::Api::<kube::api::DynamicObject>::all_with(ctx.workload.clone(), &ar),
                watcher::Config::default(),
            ),
        ));
        store
    };
    let nodepool_status = crate::nodepool_status::NodePoolStatus {
        client: ctx.workload.clone(),
        metrics: ctx.metrics.clone(),
        nodepools: nodepools.clone(),
        nodeclaims: nodeclaims_store.clone(),
        nodeclasses: caches.nodeclasses.clone(),
    };
    let provisioner = crate::provisioning::Provisioner {
        client: ctx.workload.clone(),
        recorder: lifecycle_ctx.recorder.clone(),
        metrics: ctx.metrics.clone(),
        pods,
        nodes: caches.nodes.clone(),
        daemonsets,
        nodeclaims: nodeclaims_store.clone(),
        nodepools,
        catalogs: Arc::new(catalogs.clone()),
        unavailable,
        batch_idle: ctx.config.batch_idle,
        batch_max: ctx.config.batch_max,
    };
    let loops = vec![
        tasks.spawn(lifecycle::run(lifecycle_ctx, stopped(stop_rx.clone()))),
        tasks.spawn(crate::provisioning::run(
            provisioner,
            stopped(stop_rx.clone()),
        )),
        tasks.spawn(crate::nodepool_status::run(
            nodepool_status,
            stopped(stop_rx.clone()),
        )),
        tasks.spawn(nodeclass_status::run(
            StatusCtx {
                workload: ctx.workload.clone(),
                management: ctx.management.clone(),
                catalogs,
            },
            stopped(stop_rx.clone()),
        )),
    ];
    let gc = tasks.spawn(crate::garbagecollection::run(
        ctx.management.clone(),
        caches.machines.clone(),
        nodeclaims_store,
        ctx.config.gc_interval,
        ctx.config.gc_grace,
    ));

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
    tracing::info!("shutting down: finishing in-flight reconciles");
    let _ = stop_tx.send(true);
    gc.abort();
    for l in loops {
        let _ = l.await;
    }
    if let Some(e) = election {
        e.release().await;
    }
    let _ = endpoints.await;
    result
}

/// Waits until the template index watches every template kind that exists now and has
/// listed them: a restarted operator must not judge a NodeClass by an empty catalog.
async fn warm_templates(management: &Client, index: &templates::watch::TemplateIndex) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(management.clone());
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
