//! Kubernetes clients: each with its own client-side rate limit (`ratelimit`) and the
//! User-Agent by which the API server's audit log tells the replicas apart. Built from a
//! kubeconfig path, the environment, or kubeconfig text (hub mode: a Cluster's Secret).
//!
//! Requests answered 429, 503 or 504 are retried as kube's default client does
//! (`RetryPolicy::server_retry`), except evictions: a PodDisruptionBudget refusing one answers
//! 429, which the drain reads at once and asks again later (as client-go, which retries a 429
//! only with a `Retry-After` the eviction API does not send) instead of waiting minutes inside
//! one request.

use std::path::PathBuf;

use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::ratelimit::{ClientRate, RateLimitLayer};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("user agent {0:?} is not a valid HTTP header value")]
    UserAgent(String),
}

/// `karpenter-capi/<version>`, with the replica in parentheses when given: the API
/// server's audit log and metrics then tell the replicas apart.
pub fn user_agent(identity: Option<&str>) -> String {
    let base = concat!("karpenter-capi/", env!("CARGO_PKG_VERSION"));
    match identity {
        Some(id) => format!("{base} ({id})"),
        None => base.to_string(),
    }
}

/// Rate limit and User-Agent of a client.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub rate: ClientRate,
    pub user_agent: String,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            rate: ClientRate::default(),
            user_agent: user_agent(None),
        }
    }
}

/// Builds a client from a kubeconfig path, or the environment's default configuration.
/// Every request it sends carries the User-Agent and waits for the client's rate limit.
pub async fn client(
    path: Option<&PathBuf>,
    options: &ClientOptions,
) -> Result<Client, ClientError> {
    let config = match path {
        Some(path) => {
            let bad = |message: String| ClientError::Kubeconfig {
                path: path.display().to_string(),
                message,
            };
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| bad(e.to_string()))?
        }
        None => Config::infer().await.map_err(|e| ClientError::Kubeconfig {
            path: "(inferred)".into(),
            message: e.to_string(),
        })?,
    };
    client_from_config(config, options)
}

/// A client from kubeconfig text (hub mode: a Cluster's kubeconfig Secret), with its own
/// rate limit.
pub async fn client_from_yaml(yaml: &str, options: &ClientOptions) -> Result<Client, ClientError> {
    let bad = |message: String| ClientError::Kubeconfig {
        path: "(Secret)".into(),
        message,
    };
    let kubeconfig = Kubeconfig::from_yaml(yaml).map_err(|e| bad(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    client_from_config(config, options)
}

/// A client over `config` sending the User-Agent and waiting for its own rate limit.
fn client_from_config(mut config: Config, options: &ClientOptions) -> Result<Client, ClientError> {
    let agent = http::HeaderValue::from_str(&options.user_agent)
        .map_err(|_| ClientError::UserAgent(options.user_agent.clone()))?;
    config.headers.push((http::header::USER_AGENT, agent));
    config.default_retry = false;
    Ok(ClientBuilder::try_from(config)?
        // A cloneable service for the retry to send a request again through.
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(NoEvictionRetry(
            RetryPolicy::server_retry(),
        )))
        .with_layer(&RateLimitLayer::new(options.rate))
        .build())
}

/// kube's default retry of transient answers, but never of an eviction.
#[derive(Clone)]
struct NoEvictionRetry(RetryPolicy);

impl<Res, E> tower::retry::Policy<http::Request<Body>, http::Response<Res>, E> for NoEvictionRetry
where
    RetryPolicy: tower::retry::Policy<http::Request<Body>, http::Response<Res>, E>,
{
    type Future =
        <RetryPolicy as tower::retry::Policy<http::Request<Body>, http::Response<Res>, E>>::Future;

    fn retry(
        &mut self,
        req: &mut http::Request<Body>,
        result: &mut Result<http::Response<Res>, E>,
    ) -> Option<Self::Future> {
        if is_eviction(req) {
            return None;
        }
        self.0.retry(req, result)
    }

    fn clone_request(&mut self, req: &http::Request<Body>) -> Option<http::Request<Body>> {
        if is_eviction(req) {
            return None;
        }
        self.0.clone_request(req)
    }
}

fn is_eviction<B>(req: &http::Request<B>) -> bool {
    req.method() == http::Method::POST && req.uri().path().ends_with("/eviction")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::retry::Policy;

    fn answer(code: u16) -> Result<http::Response<()>, tower::BoxError> {
        Ok(http::Response::builder()
            .status(code)
            .body(())
            .expect("response"))
    }

    fn request(method: http::Method, path: &str) -> http::Request<Body> {
        http::Request::builder()
            .method(method)
            .uri(path)
            .body(Body::from(b"{}".to_vec()))
            .expect("request")
    }

    type P = dyn Policy<
            http::Request<Body>,
            http::Response<()>,
            tower::BoxError,
            Future = tokio::time::Sleep,
        >;

    fn clone_request(policy: &mut NoEvictionRetry, req: &http::Request<Body>) -> bool {
        let p: &mut P = policy;
        p.clone_request(req).is_some()
    }

    #[test]
    fn an_eviction_is_never_retried_other_requests_are() {
        let mut policy = NoEvictionRetry(RetryPolicy::server_retry());
        let mut eviction = request(http::Method::POST, "/api/v1/namespaces/a/pods/p/eviction");
        assert!(policy.retry(&mut eviction, &mut answer(429)).is_none());
        assert!(!clone_request(&mut policy, &eviction));
        // Positive control: a 429 to any other request is retried, as kube's default.
        let mut patch = request(http::Method::PATCH, "/api/v1/namespaces/a/pods/p");
        assert!(clone_request(&mut policy, &patch));
        let retry = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(async { policy.retry(&mut patch, &mut answer(429)).is_some() });
        assert!(retry);
        assert!(!is_eviction(&request(
            http::Method::GET,
            "/api/v1/namespaces/a/pods/eviction"
        )));
    }
}
