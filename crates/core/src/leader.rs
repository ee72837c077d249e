//! Leader election with a `coordination.k8s.io` Lease (kube-lease-manager). Every replica
//! watches and warms its caches; only the holder of the Lease writes. A replica that loses
//! the Lease stops writing at once (the runtime exits, as controller-runtime does).

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {namespace}/{name}: {message}")]
    Lease {
        namespace: String,
        name: String,
        message: String,
    },
}

/// Where the Lease lives and how long it is held.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// Lease validity after the last renewal.
    pub duration: Duration,
    /// Renew this long before expiry.
    pub grace: Duration,
}

/// A running election: `is_leader` follows the Lease.
pub struct Election {
    pub is_leader: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

/// The field manager a replica's Lease writes carry: one per identity. kube-lease-manager
/// takes a free Lease with a server-side apply that does not force, so only a manager of
/// its own makes a second taker's apply conflict instead of silently replacing the holder
/// the first taker has already seen itself as (two leaders until the next renewal).
pub fn field_manager(identity: &str) -> String {
    format!("karpenter-capi-lease-{identity}")
}

impl Election {
    /// Starts trying to acquire and then keeps renewing the Lease.
    pub async fn start(client: Client, config: &LeaderConfig) -> Result<Self, LeaderError> {
        let manager = LeaseManagerBuilder::new(client, &config.name)
            .with_namespace(&config.namespace)
            .with_identity(&config.identity)
            .with_duration(config.duration.as_secs().max(2))
            .with_grace(config.grace.as_secs().max(1))
            .with_field_manager(field_manager(&config.identity))
            .build()
            .await
            .map_err(|e| LeaderError::Lease {
                namespace: config.namespace.clone(),
                name: config.name.clone(),
                message: e.to_string(),
            })?;
        let (is_leader, task) = manager.watch().await;
        Ok(Election { is_leader, task })
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquired(&mut self) -> bool {
        self.is_leader.wait_for(|leader| *leader).await.is_ok()
    }

    /// Waits until this replica no longer holds the Lease.
    pub async fn lost(&mut self) {
        let _ = self.is_leader.wait_for(|leader| !*leader).await;
    }

    /// Releases the Lease so another replica takes over without waiting for expiry.
    /// (kube-lease-manager releases the Lease when its watch channel closes.)
    pub async fn release(self) {
        drop(self.is_leader);
        let _ = self.task.await;
    }
}
