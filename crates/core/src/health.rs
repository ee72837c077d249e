//! Whether an engaged workload cluster answers (hub mode): [`probe`] asks its API server
//! (`/readyz`) every interval and, after [`FAILURES`] consecutive failures, marks it
//! disconnected; the first success marks it connected again. [`Connection`] is what the loops
//! that delete consult — garbage collection, disruption, and the NodeClaim lifecycle's
//! liveness, repair and termination: while disconnected none of them acts (their view of the
//! cluster is stale), launches already planned continue. Single-cluster mode has no probe:
//! its connection is always up ([`Connection::default`]), as before.

use std::time::Duration;

use tokio::sync::watch;

/// Consecutive failed probes before a cluster counts as disconnected (Cluster API's
/// cluster cache: 5 failures at 10 s; ours answers sooner, 3).
pub const FAILURES: u32 = 3;

/// How often a cluster is probed by default.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Timeout of one probe.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection state of one workload cluster, as the loops read it.
#[derive(Clone, Debug)]
pub struct Connection(watch::Receiver<bool>);

impl Default for Connection {
    /// Always connected (single-cluster mode: a process that cannot reach its cluster has
    /// no cache to act on anyway).
    fn default() -> Self {
        Connection(watch::channel(true).1)
    }
}

impl Connection {
    /// A connection and the sender that flips it.
    pub fn new() -> (watch::Sender<bool>, Connection) {
        let (tx, rx) = watch::channel(true);
        (tx, Connection(rx))
    }

    /// Whether the cluster answered its last probes.
    pub fn connected(&self) -> bool {
        *self.0.borrow()
    }
}

/// Counts probe results into a connected/disconnected verdict.
#[derive(Debug, Default)]
pub struct Tracker {
    failures: u32,
    disconnected: bool,
}

impl Tracker {
    /// Records one probe; `Some(connected)` when the verdict changes.
    pub fn observe(&mut self, ok: bool) -> Option<bool> {
        if ok {
            self.failures = 0;
            if self.disconnected {
                self.disconnected = false;
                return Some(true);
            }
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        if !self.disconnected && self.failures >= FAILURES {
            self.disconnected = true;
            return Some(false);
        }
        None
    }
}

/// One probe: the API server's `/readyz`.
pub async fn ready(client: &kube::Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, client.request_text(request)).await,
        Ok(Ok(_))
    )
}

/// Probes `client` every `interval` until `stop`, sending each change of verdict to `tx` and
/// calling `changed` with it (metrics, Events).
pub async fn probe<F, Fut>(
    client: kube::Client,
    interval: Duration,
    tx: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
    mut changed: F,
) where
    F: FnMut(bool) -> Fut + Send,
    Fut: std::future::Future<Output = ()> + Send,
{
    let mut tracker = Tracker::default();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if let Some(connected) = tracker.observe(ready(&client).await) {
            let _ = tx.send(connected);
            changed(connected).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_failures_disconnect_one_success_reconnects() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(false), None);
        assert_eq!(t.observe(false), None);
        assert_eq!(t.observe(true), None, "a success resets the count");
        assert_eq!(t.observe(false), None);
        assert_eq!(t.observe(false), None);
        assert_eq!(t.observe(false), Some(false));
        assert_eq!(t.observe(false), None, "told once");
        assert_eq!(t.observe(true), Some(true));
        assert_eq!(t.observe(true), None);
    }

    #[test]
    fn default_connection_is_up_and_follows_its_sender() {
        assert!(Connection::default().connected());
        let (tx, c) = Connection::new();
        assert!(c.connected());
        tx.send(false).expect("receiver alive");
        assert!(!c.connected());
    }
}
