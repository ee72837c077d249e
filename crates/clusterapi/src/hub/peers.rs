//! The hub's peer registry: each replica holds its own Lease
//! (`karpenter-capi-peer-<identity>`, labelled [`PEER_LABEL`], in the operator namespace)
//! and renews it; the live peers are the holders of the unexpired ones. A replica publishes
//! the live peers (sorted) for rendezvous ownership, itself included while its own Lease is
//! fresh: a replica that could not renew its own Lease for longer than the renew grace
//! allows drops itself from the set, so it owns nothing (and cancels its engagements) before
//! the others count it dead. On a clean stop it releases its Lease (empty holder), so the
//! others drop it at their next refresh instead of at expiry.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;

use super::shard::{Fencing, peer_lease_name};

/// The label of peer Leases.
pub(crate) const PEER_LABEL: &str = "karpenter.cluster.x-k8s.io/hub-peer";

/// The registry of one replica.
pub struct Registry {
    api: Api<Lease>,
    fencing: Fencing,
    name: String,
    /// When our own Lease was last renewed.
    renewed: Option<tokio::time::Instant>,
    tx: watch::Sender<Vec<String>>,
}

impl Registry {
    /// The registry, and what it publishes (empty until the first [`Registry::refresh`]).
    pub fn new(client: Client, fencing: Fencing) -> (Self, watch::Receiver<Vec<String>>) {
        let (tx, rx) = watch::channel(Vec::new());
        let registry = Registry {
            api: Api::namespaced(client, &fencing.namespace),
            name: peer_lease_name(&fencing.identity),
            fencing,
            renewed: None,
            tx,
        };
        (registry, rx)
    }

    fn seconds(&self) -> i32 {
        i32::try_from(self.fencing.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Creates or renews our own Lease.
    async fn renew(&self) -> Result<(), kube::Error> {
        let now = MicroTime(Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(self.fencing.identity.clone()),
            lease_duration_seconds: Some(self.seconds()),
            renew_time: Some(now.clone()),
            ..LeaseSpec::default()
        };
        match self.api.get_opt(&self.name).await? {
            Some(mut lease) => {
                let acquire = lease.spec.as_ref().and_then(|s| {
                    (s.holder_identity.as_deref() == Some(self.fencing.identity.as_str()))
                        .then(|| s.acquire_time.clone())
                        .flatten()
                });
                lease.spec = Some(LeaseSpec {
                    acquire_time: Some(acquire.unwrap_or(now)),
                    ..spec
                });
                // Carries the resourceVersion it was read at.
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
            }
            None => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(self.name.clone()),
                        labels: Some([(PEER_LABEL.to_string(), "true".to_string())].into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        acquire_time: Some(now),
                        ..spec
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await?;
            }
        }
        Ok(())
    }

    /// The holders of the unexpired peer Leases.
    async fn live(&self) -> Result<Vec<String>, kube::Error> {
        let list = self
            .api
            .list(&ListParams::default().labels(&format!("{PEER_LABEL}=true")))
            .await?;
        let now = Timestamp::now();
        let mut live: Vec<String> = list
            .items
            .iter()
            .filter_map(|l| live_holder(l, now))
            .collect();
        live.sort();
        live.dedup();
        Ok(live)
    }

    /// One pass: renew our Lease, list the peers, publish them.
    pub async fn refresh(&mut self) {
        match self.renew().await {
            Ok(()) => self.renewed = Some(tokio::time::Instant::now()),
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %e, "renewing our peer Lease failed")
            }
        }
        let mut live = match self.live().await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "listing the peer Leases failed");
                self.tx.borrow().clone()
            }
        };
        let me = &self.fencing.identity;
        let fresh = self
            .renewed
            .is_some_and(|t| t.elapsed() < self.fencing.renew_every());
        live.retain(|p| p != me);
        if fresh {
            live.push(me.clone());
            live.sort();
        }
        self.tx.send_if_modified(|old| {
            if *old == live {
                return false;
            }
            tracing::info!(peers = %live.join(", "), "hub peers changed");
            *old = live;
            true
        });
    }

    /// Renews and refreshes every renew period until `stop`, then releases our Lease.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let every = self.fencing.renew_every().min(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(every) => {}
            }
            self.refresh().await;
        }
        self.release().await;
    }

    /// Clears the holder of our Lease (best effort: it expires anyway).
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let ours = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.fencing.identity.as_str());
        if !ours {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        if let Err(e) = self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            tracing::debug!(error = %e, "releasing our peer Lease failed; it expires");
        }
    }
}

/// The holder of `lease` if it has one and the Lease is not expired at `now`.
fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let seconds = spec.lease_duration_seconds?;
    (renewed + SignedDuration::from_secs(i64::from(seconds)) > now).then(|| holder.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_ago: i64, seconds: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(
                    Timestamp::now() - SignedDuration::from_secs(renewed_ago),
                )),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_peer_is_live_while_its_lease_is_held_and_unexpired() {
        let now = Timestamp::now();
        assert_eq!(
            live_holder(&lease(Some("hub-0"), 3, 15), now).as_deref(),
            Some("hub-0")
        );
        assert_eq!(
            live_holder(&lease(Some("hub-0"), 20, 15), now),
            None,
            "expired"
        );
        assert_eq!(live_holder(&lease(None, 1, 15), now), None, "released");
        assert_eq!(live_holder(&lease(Some(""), 1, 15), now), None, "released");
        assert_eq!(live_holder(&Lease::default(), now), None);
    }
}
