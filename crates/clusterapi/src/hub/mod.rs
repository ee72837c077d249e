//! Hub mode (`karpenter-capi run --mode hub`): one process in the management cluster serves
//! every Cluster API `Cluster` labelled `karpenter.cluster.x-k8s.io/enabled: "true"` (and
//! matching `--cluster-selector`, `--namespaces` and Cluster API's `--watch-filter`), one
//! [`karpenter_core::engagement::Engagement`] per Cluster ([`engage`]).
//!
//! The management side is shared by every engagement: the Clusters cache (watched with the
//! opt-in label, the watch filter and the selector, so the API server filters) and the
//! template index. Each engagement has its own clients — workload and management, each with
//! its own client-side QPS budget —, its own workload caches and Machine watch (label-selected
//! by its cluster id, so the API server filters), cluster state, loops and probe: no work queue
//! or rate limit is shared across clusters, so one cluster's backlog cannot starve another's.
//!
//! A Cluster is engaged once it is eligible ([`eligible`]: opted in, not paused, not being
//! deleted, control plane initialized) and its kubeconfig Secret exists ([`engage::credentials`]);
//! a changed Secret (resourceVersion) re-engages it; a Cluster that stops being eligible (deleted,
//! unlabelled, paused) is disengaged: its loops stop, nothing of it is deleted. Which eligible
//! Clusters this replica engages is [`Ownership`]'s decision: one replica owns all; several
//! split them ([`shard`]): by rendezvous hashing over the live peers ([`peers`]), or by
//! `--shard-count/--shard-index`; each owner holds the Cluster's fence Lease while it serves
//! it ([`engage`]). A Cluster that moves to another replica is cancelled here (its loops
//! aborted) and its fence Lease released; the new owner takes it then (or once it expires).

pub mod credentials;
pub mod engage;
pub mod peers;
pub mod shard;
pub mod status;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;

pub use crate::catalogs::ClusterKey;
use api::consts::{annotations, conditions, labels};
use clusterapi_api::Cluster;

/// Hub mode's settings (`run --mode hub`).
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// Extra label selector on Clusters (`--cluster-selector`).
    pub cluster_selector: Option<String>,
    /// Only Clusters in these namespaces (`--namespaces`); empty = all.
    pub namespaces: Vec<String>,
    /// Cluster API's `--watch-filter`: only Clusters labelled `cluster.x-k8s.io/watch-filter`
    /// with this value.
    pub watch_filter: Option<String>,
    /// How often each engaged cluster's API server is probed.
    pub probe_interval: Duration,
    /// How often the kubeconfig Secrets of engaged Clusters are read again (a changed one
    /// re-engages).
    pub resync: Duration,
    /// The `NodeOverlay` feature gate: each engaged cluster's NodeOverlays watched and
    /// applied.
    pub node_overlay: bool,
    /// `--shard-count/--shard-index`: static shards instead of rendezvous over peers.
    pub shard: Option<shard::StaticShard>,
    /// Label each engagement's series with `cluster="<namespace>/<name>"`
    /// (`--metrics-cluster-label`; off: summed over the clusters, fewer series).
    pub metrics_cluster_label: bool,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            cluster_selector: None,
            namespaces: Vec::new(),
            watch_filter: None,
            probe_interval: karpenter_core::health::INTERVAL,
            resync: Duration::from_secs(10),
            node_overlay: true,
            shard: None,
            metrics_cluster_label: true,
        }
    }
}

impl HubConfig {
    /// The label selector of the Clusters watch: the opt-in label with any value (one that
    /// is not `"true"` is counted and shown as ineligible, not left unseen), the watch
    /// filter, the selector.
    pub fn selector(&self) -> String {
        let mut parts = vec![labels::HUB_ENABLED.to_string()];
        if let Some(v) = &self.watch_filter {
            parts.push(format!("{}={v}", labels::WATCH_FILTER));
        }
        if let Some(s) = self
            .cluster_selector
            .as_ref()
            .filter(|s| !s.trim().is_empty())
        {
            parts.push(s.clone());
        }
        parts.join(",")
    }
}

/// Which eligible Clusters this replica engages. One replica owns them all
/// ([`AllClusters`]); sharding across replicas (a Lease per cluster, rendezvous hashing over
/// live peers, or `--shard-count/--shard-index`) implements this.
pub trait Ownership: Send + Sync {
    fn owns(&self, cluster: &ClusterKey) -> bool;

    /// What changes ownership besides the Clusters (the live peers), if anything.
    fn changes(&self) -> Option<watch::Receiver<Vec<String>>> {
        None
    }
}

/// Every Cluster is ours (one replica, or the leader of several).
pub struct AllClusters;

impl Ownership for AllClusters {
    fn owns(&self, _: &ClusterKey) -> bool {
        true
    }
}

/// The key of a Cluster.
pub fn key_of(c: &Cluster) -> ClusterKey {
    ClusterKey {
        namespace: c.metadata.namespace.clone().unwrap_or_default(),
        name: c.metadata.name.clone().unwrap_or_default(),
    }
}

/// Whether the hub engages `c` now; `Err(why not)` otherwise.
pub fn eligible(c: &Cluster, config: &HubConfig) -> Result<(), Cow<'static, str>> {
    let label = |k: &str| c.metadata.labels.as_ref().and_then(|l| l.get(k));
    match label(labels::HUB_ENABLED).map(String::as_str) {
        Some("true") => {}
        None => return Err("not opted in".into()),
        Some(other) => {
            return Err(format!(
                "label {} is \"{other}\": only \"true\" opts in",
                labels::HUB_ENABLED
            )
            .into());
        }
    }
    if let Some(v) = &config.watch_filter
        && label(labels::WATCH_FILTER) != Some(v)
    {
        return Err("outside the watch filter".into());
    }
    let ns = c.metadata.namespace.as_deref().unwrap_or_default();
    if !config.namespaces.is_empty() && !config.namespaces.iter().any(|n| n == ns) {
        return Err("outside --namespaces".into());
    }
    if c.metadata.deletion_timestamp.is_some() {
        return Err("being deleted".into());
    }
    let paused_annotation = c
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::PAUSED));
    if c.spec.paused == Some(true) || paused_annotation {
        return Err("paused".into());
    }
    let status = c.status.as_ref();
    let initialized = status
        .and_then(|s| s.initialization.as_ref())
        .is_some_and(|i| i.control_plane_initialized == Some(true))
        || status.is_some_and(|s| {
            api::conditions::is_true(&s.conditions, conditions::CLUSTER_CONTROL_PLANE_INITIALIZED)
        });
    if !initialized {
        return Err("control plane not initialized".into());
    }
    Ok(())
}

/// Runs the hub until `stop`: engages, re-engages and disengages Clusters as they come, go
/// and change; on `stop`, stops every engagement cleanly.
pub async fn run(hub: Arc<engage::Hub>, mut stop: watch::Receiver<bool>) {
    let mut engaged: BTreeMap<ClusterKey, engage::Engaged> = BTreeMap::new();
    let triggers = hub.clusters.subscribe();
    futures::pin_mut!(triggers);
    let mut resync = tokio::time::interval(hub.config.resync);
    let mut peers = hub.ownership.changes();
    let mut reread = true;
    loop {
        reconcile(&hub, &mut engaged, reread).await;
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = triggers.next() => reread = false,
            _ = peers_changed(&mut peers) => reread = false,
            _ = resync.tick() => reread = true,
        }
    }
    tracing::info!(
        clusters = engaged.len(),
        "hub stopping: disengaging every cluster"
    );
    for (_, e) in std::mem::take(&mut engaged) {
        e.disengage().await;
    }
}

/// Waits for the next change of the live peers (never, without peers).
async fn peers_changed(peers: &mut Option<watch::Receiver<Vec<String>>>) {
    if let Some(rx) = peers
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// One pass: disengages what is no longer eligible, (re-)engages what is. The kubeconfig
/// Secret of an already engaged Cluster is read again only when `reread`.
async fn reconcile(
    hub: &engage::Hub,
    engaged: &mut BTreeMap<ClusterKey, engage::Engaged>,
    reread: bool,
) {
    let all = hub.clusters.store().state();
    hub.status.retain(|k| all.iter().any(|c| key_of(c) == *k));
    let mut wanted: BTreeMap<ClusterKey, Arc<Cluster>> = BTreeMap::new();
    let mut moved: Vec<ClusterKey> = Vec::new();
    for c in all {
        let key = key_of(&c);
        if let Err(why) = eligible(&c, &hub.config) {
            if hub.status.set(&key, status::State::Ineligible) {
                tracing::info!(cluster = %key, %why, "not engaged: ineligible");
            }
        } else if !hub.ownership.owns(&key) {
            moved.push(key);
        } else {
            wanted.insert(key, c);
        }
    }
    // Another replica's now: cancelled at once (not one more write), Lease released.
    for key in moved {
        if let Some(e) = engaged.remove(&key) {
            tracing::info!(cluster = %key, "cancelling: the Cluster is now another replica's");
            e.cancel().await;
        }
        hub.status.set(&key, status::State::NotOwned);
    }
    let gone: Vec<ClusterKey> = engaged
        .keys()
        .filter(|k| !wanted.contains_key(*k))
        .cloned()
        .collect();
    for key in gone {
        if let Some(e) = engaged.remove(&key) {
            tracing::info!(cluster = %key, "disengaging: the Cluster is gone, unlabelled or paused");
            e.disengage().await;
        }
    }
    for (key, cluster) in wanted {
        if engaged.contains_key(&key) && !reread {
            continue;
        }
        let creds = match credentials::read(&hub.management, &cluster).await {
            Ok(Ok(c)) => c,
            Ok(Err(missing)) => {
                if !engaged.contains_key(&key)
                    && hub.status.set(&key, status::State::WaitingCredentials)
                {
                    // Once per wait (the state's change), not every pass.
                    tracing::warn!(cluster = %key, problem = missing.kind(), "waiting for credentials: {missing}");
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(cluster = %key, error = %e, "reading the kubeconfig Secret failed");
                if !engaged.contains_key(&key) {
                    hub.status.set(&key, status::State::WaitingCredentials);
                }
                continue;
            }
        };
        if engaged
            .get(&key)
            .is_some_and(|e| e.version == creds.version)
        {
            continue;
        }
        if let Some(old) = engaged.remove(&key) {
            tracing::info!(cluster = %key, secret = %creds.secret, "kubeconfig Secret changed: re-engaging");
            old.disengage().await;
        }
        engaged.insert(key.clone(), engage::engage(hub, key, &cluster, creds));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(v: serde_json::Value) -> Cluster {
        serde_json::from_value(v).expect("cluster fixture")
    }

    fn ready(labels: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "a", "namespace": "t1", "labels": labels},
            "spec": {},
            "status": {"initialization": {"controlPlaneInitialized": true}}
        })
    }

    #[test]
    fn eligibility_follows_label_filters_pause_and_initialization() {
        let config = HubConfig::default();
        let on = serde_json::json!({"karpenter.cluster.x-k8s.io/enabled": "true"});
        assert_eq!(eligible(&cluster(ready(on.clone())), &config), Ok(()));
        assert!(eligible(&cluster(ready(serde_json::json!({}))), &config).is_err());
        let off = serde_json::json!({"karpenter.cluster.x-k8s.io/enabled": "false"});
        assert!(eligible(&cluster(ready(off)), &config).is_err());
        let yes = serde_json::json!({"karpenter.cluster.x-k8s.io/enabled": "yes"});
        assert_eq!(
            eligible(&cluster(ready(yes)), &config)
                .expect_err("yes")
                .as_ref(),
            "label karpenter.cluster.x-k8s.io/enabled is \"yes\": only \"true\" opts in"
        );
        assert_eq!(
            eligible(&cluster(ready(serde_json::json!({}))), &config),
            Err("not opted in".into())
        );

        let mut paused = ready(on.clone());
        paused["spec"]["paused"] = true.into();
        assert_eq!(eligible(&cluster(paused), &config), Err("paused".into()));
        let mut annotated = ready(on.clone());
        annotated["metadata"]["annotations"] = serde_json::json!({"cluster.x-k8s.io/paused": ""});
        assert_eq!(eligible(&cluster(annotated), &config), Err("paused".into()));

        let mut uninit = ready(on.clone());
        uninit["status"] = serde_json::json!({});
        assert_eq!(
            eligible(&cluster(uninit.clone()), &config),
            Err("control plane not initialized".into())
        );
        uninit["status"] = serde_json::json!({"conditions": [{"type": "ControlPlaneInitialized",
            "status": "True", "reason": "x", "message": "", "lastTransitionTime": "2026-11-24T00:00:00Z"}]});
        assert_eq!(
            eligible(&cluster(uninit), &config),
            Ok(()),
            "the v1beta2 condition counts"
        );

        let namespaced = HubConfig {
            namespaces: vec!["t2".into()],
            ..HubConfig::default()
        };
        assert_eq!(
            eligible(&cluster(ready(on.clone())), &namespaced),
            Err("outside --namespaces".into())
        );
        let filtered = HubConfig {
            watch_filter: Some("shard-a".into()),
            ..HubConfig::default()
        };
        assert!(eligible(&cluster(ready(on)), &filtered).is_err());
        let both = serde_json::json!({"karpenter.cluster.x-k8s.io/enabled": "true",
            "cluster.x-k8s.io/watch-filter": "shard-a"});
        assert_eq!(eligible(&cluster(ready(both)), &filtered), Ok(()));
    }

    #[test]
    fn the_watch_selector_combines_opt_in_filter_and_selector() {
        assert_eq!(
            HubConfig::default().selector(),
            "karpenter.cluster.x-k8s.io/enabled"
        );
        let config = HubConfig {
            watch_filter: Some("a".into()),
            cluster_selector: Some("env in (prod)".into()),
            ..HubConfig::default()
        };
        assert_eq!(
            config.selector(),
            "karpenter.cluster.x-k8s.io/enabled,cluster.x-k8s.io/watch-filter=a,env in (prod)"
        );
    }
}
