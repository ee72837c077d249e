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
    let mut tasks = Vec::new();
    for addr in addrs {
        let mut stop = shutdown.clone();
        let router = router.clone();
        tasks.push(tokio::spawn(async move {
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
