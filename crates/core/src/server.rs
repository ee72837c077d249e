//! The operator's HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process
//! serves) and `/readyz` (every watch cache has synced).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Exposition;

/// Shared readiness flag, set once the caches are warm.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }
    pub(crate) fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
pub struct ServerState {
    exposition: Arc<Exposition>,
    readiness: Readiness,
}

/// The router with `/metrics`, `/healthz` and `/readyz`.
pub fn router(exposition: Exposition, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(ServerState {
            exposition: Arc::new(exposition),
            readiness,
        })
}

async fn metrics(State(state): State<ServerState>) -> impl IntoResponse {
    // Off the async workers: the scrape-time gauges walk every cached pod and Node.
    let exposition = state.exposition.clone();
    match tokio::task::spawn_blocking(move || exposition.encode()).await {
        Ok(Ok(body)) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Ok(Err(_)) | Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn ready(State(state): State<ServerState>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

/// Binds `addr` and serves until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn endpoints_answer() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::metrics::Metrics::register(&mut registry);
        metrics
            .nodes_created
            .get_or_create(&crate::metrics::NodeLabels {
                nodepool: "default".into(),
                zone: "zone-a".into(),
            })
            .inc();
        let readiness = Readiness::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        metrics.pod_startup.observe(2.0);
        let app = router(Exposition::new(registry, &metrics), readiness.clone());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        assert!(get(addr, "/healthz").await.ends_with("ok"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        readiness.set_ready();
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        let body = get(addr, "/metrics").await;
        assert!(
            body.contains(r#"karpenter_nodes_created_total{nodepool="default",zone="zone-a"} 1"#),
            "{body}"
        );
        assert!(
            body.contains("karpenter_pods_startup_duration_seconds_count 1\n")
                && body.trim_end().ends_with("# EOF"),
            "{body}"
        );
        server.abort();
    }
}
