//! Client-side rate limit for the operator's Kubernetes clients, like client-go's QPS/burst
//! (Karpenter's `KUBE_CLIENT_QPS`/`KUBE_CLIENT_BURST`): a token bucket holding `burst`
//! tokens, refilled at `qps` per second; every request takes one token and waits for it
//! when the bucket is empty. A watch is one request (when it starts).
//!
//! The bucket is `governor`'s GCRA on tokio's clock, so it follows tokio's paused clock in
//! tests. It is a tower layer for [`kube::client::ClientBuilder::with_layer`]; the wait
//! happens in `poll_ready`, which kube's client buffer drives for each request in turn.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tower::{Layer, Service};

/// Requests per second and bucket size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientRate {
    pub qps: NonZeroU32,
    pub burst: NonZeroU32,
}

/// Karpenter's defaults.
pub const DEFAULT_QPS: NonZeroU32 = NonZeroU32::new(200).expect("nonzero");
pub const DEFAULT_BURST: NonZeroU32 = NonZeroU32::new(300).expect("nonzero");

impl Default for ClientRate {
    fn default() -> Self {
        Self {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

/// tokio's clock for governor (std `Instant`s taken from `tokio::time::Instant`, so a
/// paused test clock applies).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> Self::Instant {
        tokio::time::Instant::now().into_std()
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<std::time::Instant>>;

/// One bucket shared by every service this layer wraps (one per client).
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<Limiter>,
}

impl RateLimitLayer {
    pub fn new(rate: ClientRate) -> Self {
        let quota = Quota::per_second(rate.qps).allow_burst(rate.burst);
        Self {
            limiter: Arc::new(RateLimiter::direct_with_clock(quota, TokioClock)),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            limiter: self.limiter.clone(),
            permit: false,
            sleep: None,
        }
    }
}

/// A service that is ready only once it holds a token for the next request.
pub struct RateLimited<S> {
    inner: S,
    limiter: Arc<Limiter>,
    /// A token taken for the next `call`.
    permit: bool,
    /// Waiting for the bucket to refill.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S, Req> Service<Req> for RateLimited<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.permit {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            match self.limiter.check() {
                Ok(()) => self.permit = true,
                Err(not_until) => {
                    let wait = not_until.wait_time_from(TokioClock.now());
                    self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        // tower's contract: `call` follows a successful `poll_ready`, which took the token.
        self.permit = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::time::Duration;
    use tokio::time::Instant;
    use tower::ServiceExt;

    fn rate(qps: u32, burst: u32) -> ClientRate {
        ClientRate {
            qps: NonZeroU32::new(qps).expect("qps"),
            burst: NonZeroU32::new(burst).expect("burst"),
        }
    }

    /// A limited service answering when the request reached it.
    fn clock_service(
        layer: &RateLimitLayer,
    ) -> impl Service<(), Response = Instant, Error = Infallible> {
        layer.layer(tower::service_fn(|_: ()| async {
            Ok::<_, Infallible>(Instant::now())
        }))
    }

    /// Waits until `svc` is ready, sends one request and returns when it passed.
    async fn send_one(
        svc: &mut impl Service<(), Response = Instant, Error = Infallible>,
    ) -> Instant {
        let Ok(passed) = svc.ready().await.map(|s| s.call(()));
        let Ok(at) = passed.await;
        at
    }

    /// Sends `n` requests one after the other through a limited service and returns
    /// when each was let through, as offsets from the start.
    async fn send(layer: &RateLimitLayer, n: usize) -> Vec<Duration> {
        let start = Instant::now();
        let mut svc = clock_service(layer);
        let mut at = Vec::new();
        for _ in 0..n {
            at.push(send_one(&mut svc).await - start);
        }
        at
    }

    #[tokio::test(start_paused = true)]
    async fn burst_passes_at_once_then_one_per_interval() {
        let layer = RateLimitLayer::new(rate(10, 5));
        let at = send(&layer, 8).await;
        assert!(
            at[..5].iter().all(|d| *d == Duration::ZERO),
            "the burst is not delayed: {at:?}"
        );
        // Then one request per 1/qps = 100 ms (tokio timers tick in whole milliseconds).
        for (i, d) in at[5..].iter().enumerate() {
            let expected = Duration::from_millis(100 * (i as u64 + 1));
            assert!(
                *d >= expected && *d <= expected + Duration::from_millis(1),
                "request {} at {d:?}, expected {expected:?}: {at:?}",
                i + 5
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_while_idle_up_to_burst() {
        let layer = RateLimitLayer::new(rate(10, 3));
        let first = send(&layer, 3).await;
        assert!(first.iter().all(|d| *d == Duration::ZERO), "{first:?}");
        // Idle for much longer than it takes to refill: the bucket holds `burst` again,
        // not more.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let again = send(&layer, 4).await;
        assert!(again[..3].iter().all(|d| *d == Duration::ZERO), "{again:?}");
        assert!(
            again[3] >= Duration::from_millis(100) && again[3] <= Duration::from_millis(101),
            "{again:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn services_of_one_layer_share_the_bucket() {
        // kube's client is one service; a clone of the layer must not double the rate.
        let layer = RateLimitLayer::new(rate(10, 2));
        let a = send(&layer, 2).await;
        let b = send(&layer.clone(), 1).await;
        assert!(a.iter().all(|d| *d == Duration::ZERO), "{a:?}");
        assert!(
            b[0] >= Duration::from_millis(100) && b[0] <= Duration::from_millis(101),
            "{b:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn karpenter_defaults_space_requests_by_five_ms() {
        let layer = RateLimitLayer::new(ClientRate::default());
        let at = send(&layer, 302).await;
        assert!(at[..300].iter().all(|d| *d == Duration::ZERO));
        assert!(at[300] >= Duration::from_millis(5) && at[300] <= Duration::from_millis(6));
        assert!(at[301] >= Duration::from_millis(10) && at[301] <= Duration::from_millis(11));
    }

    #[tokio::test(start_paused = true)]
    async fn polling_ready_twice_takes_one_token() {
        let layer = RateLimitLayer::new(rate(10, 1));
        let mut svc = clock_service(&layer);
        let start = Instant::now();
        // Ready twice without a call: still only the one token of the burst is taken.
        svc.ready().await.expect("ready");
        svc.ready().await.expect("ready");
        let first = svc.call(()).await.expect("call");
        assert_eq!(first - start, Duration::ZERO);
        let second = send_one(&mut svc).await;
        let waited = second - start;
        assert!(
            waited >= Duration::from_millis(100) && waited <= Duration::from_millis(101),
            "{waited:?}"
        );
    }
}
