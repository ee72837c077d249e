//! `karpenter-capi inspect` against a hub's management cluster: every opted-in Cluster with
//! its state — ineligible (why), waiting for its credentials, connecting or engaged (by which
//! replica: the holder of its fence Lease; engaged once its `ClusterEngaged` Event is there),
//! disconnected (its last health Event), or waiting to be engaged — read from the API server (Clusters, kubeconfig Secrets, fence Leases, Events),
//! not from the operator. `inspect --cluster ns/name` inspects that Cluster's workload cluster
//! through its kubeconfig Secret, as `inspect` does for one cluster.

use std::fmt::Write as _;

use api::Cluster;
use api::consts::{events as reasons, labels};
use controller::hub::{ClusterKey, HubConfig, eligible, key_of, shard::fence_name};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

/// One Cluster as the hub sees it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ClusterRow {
    pub cluster: String,
    pub state: String,
    /// The replica holding its fence Lease (a sharded hub).
    pub owner: Option<String>,
    pub reason: String,
}

/// The holder of `lease` while it is valid at `now`.
fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let until = spec.renew_time.as_ref()?.0
        + SignedDuration::from_secs(i64::from(spec.lease_duration_seconds?));
    (until > now).then_some(holder)
}

/// What the Cluster's last engagement/health Event says: `Some(true)` connected/engaged,
/// `Some(false)` disconnected.
fn last_health(events: &[Event], cluster: &ClusterKey) -> Option<bool> {
    events
        .iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Cluster")
                    && r.name.as_deref() == Some(cluster.name.as_str())
                    && r.namespace.as_deref() == Some(cluster.namespace.as_str())
            })
        })
        .filter_map(|e| {
            let at = e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or(e.event_time.as_ref().map(|t| t.0))?;
            let up = match e.reason.as_deref()? {
                reasons::CLUSTER_DISCONNECTED => false,
                reasons::CLUSTER_CONNECTED | reasons::CLUSTER_ENGAGED => true,
                _ => return None,
            };
            Some((at, up))
        })
        .max_by_key(|(at, _)| *at)
        .map(|(_, up)| up)
}

/// The row of one Cluster from what was read.
pub fn row(
    cluster: &Cluster,
    has_credentials: bool,
    owner: Option<String>,
    health: Option<bool>,
) -> ClusterRow {
    let key = key_of(cluster);
    let (state, reason) = match eligible(cluster, &HubConfig::default()) {
        Err(why) => ("ineligible", why.to_string()),
        Ok(()) if !has_credentials => (
            "waiting-credentials",
            "no kubeconfig Secret (annotation karpenter.cluster.x-k8s.io/kubeconfig-secret, else <cluster>-kubeconfig, key value)".into(),
        ),
        Ok(()) => match (health, &owner) {
            (Some(false), _) => (
                "disconnected",
                "its API server failed its last probes: no disruption, GC or deletes".into(),
            ),
            (Some(true), Some(o)) => ("engaged", format!("fence Lease held by {o}")),
            (None, Some(o)) => (
                "connecting",
                format!("fence Lease held by {o}; not engaged yet (no ClusterEngaged Event)"),
            ),
            (Some(true), None) => ("engaged", "no fence Lease (leader election disabled)".into()),
            (None, None) => ("waiting", "no replica has engaged it yet".into()),
        },
    };
    ClusterRow {
        cluster: key.to_string(),
        state: state.into(),
        owner,
        reason,
    }
}

/// The name of `cluster`'s kubeconfig Secret.
fn secret_name(cluster: &Cluster) -> String {
    cluster
        .annotations()
        .get(api::consts::annotations::KUBECONFIG_SECRET)
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| format!("{}-kubeconfig", cluster.name_any()))
}

/// The kubeconfig in `cluster`'s Secret, if there is one.
async fn kubeconfig(management: &Client, cluster: &Cluster) -> Result<Option<String>, kube::Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(management.clone(), &ns);
    let secret = secrets.get_opt(&secret_name(cluster)).await?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|d| d.get("value").cloned())
        .and_then(|v| String::from_utf8(v.0).ok()))
}

/// Every opted-in Cluster's row; fence Leases read in `lease_namespace`.
pub async fn clusters(
    management: &Client,
    lease_namespace: &str,
) -> Result<Vec<ClusterRow>, kube::Error> {
    let opted_in = ListParams::default().labels(&format!("{}=true", labels::HUB_ENABLED));
    let clusters = Api::<Cluster>::all(management.clone())
        .list(&opted_in)
        .await?
        .items;
    let leases: Api<Lease> = Api::namespaced(management.clone(), lease_namespace);
    let now = Timestamp::now();
    let mut rows = Vec::new();
    for c in &clusters {
        let key = key_of(c);
        let events: Vec<Event> = Api::namespaced(management.clone(), &key.namespace)
            .list(&ListParams::default())
            .await?
            .items;
        let owner = match leases.get_opt(&fence_name(&key)).await {
            Ok(lease) => lease.and_then(|l| live_holder(&l, now)),
            // No read access to the Leases: the owner is not shown.
            Err(_) => None,
        };
        let creds = kubeconfig(management, c).await?.is_some();
        rows.push(row(c, creds, owner, last_health(&events, &key)));
    }
    rows.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    Ok(rows)
}

/// The workload client of Cluster `ns/name`, from its kubeconfig Secret.
pub async fn workload_client(
    management: &Client,
    cluster: &str,
    options: &controller::runtime::ClientOptions,
) -> anyhow::Result<Client> {
    let (ns, name) = cluster
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--cluster {cluster:?}: expected <namespace>/<name>"))?;
    let c = Api::<Cluster>::namespaced(management.clone(), ns)
        .get(name)
        .await?;
    let yaml = kubeconfig(management, &c).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "Cluster {cluster} has no kubeconfig Secret ({})",
            secret_name(&c)
        )
    })?;
    Ok(controller::runtime::client_from_yaml(&yaml, options).await?)
}

pub fn render_table(rows: &[ClusterRow]) -> String {
    let mut out = String::new();
    let width = rows
        .iter()
        .map(|r| r.cluster.len())
        .max()
        .unwrap_or(7)
        .max(7);
    let _ = writeln!(
        out,
        "{:<width$}  {:<20}  {:<24}  REASON",
        "CLUSTER", "STATE", "OWNER"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<width$}  {:<20}  {:<24}  {}",
            r.cluster,
            r.state,
            r.owner.as_deref().unwrap_or("-"),
            r.reason
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(paused: bool) -> Cluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "a", "namespace": "t1",
                         "labels": {"karpenter.cluster.x-k8s.io/enabled": "true"}},
            "spec": {"paused": paused},
            "status": {"initialization": {"controlPlaneInitialized": true}}
        }))
        .expect("cluster fixture")
    }

    #[test]
    fn the_state_follows_eligibility_credentials_lease_and_health() {
        let state = |c: &Cluster, creds, owner: Option<&str>, health| {
            row(c, creds, owner.map(str::to_string), health).state
        };
        assert_eq!(state(&cluster(true), true, None, None), "ineligible");
        let c = cluster(false);
        assert_eq!(state(&c, false, None, None), "waiting-credentials");
        assert_eq!(state(&c, true, None, None), "waiting");
        assert_eq!(state(&c, true, Some("hub-0"), None), "connecting");
        assert_eq!(state(&c, true, Some("hub-0"), Some(true)), "engaged");
        assert_eq!(state(&c, true, None, Some(true)), "engaged");
        assert_eq!(state(&c, true, Some("hub-0"), Some(false)), "disconnected");
        let r = row(&c, true, Some("hub-0".into()), None);
        assert_eq!(
            (r.cluster.as_str(), r.owner.as_deref()),
            ("t1/a", Some("hub-0"))
        );
        let table = render_table(&[r]);
        assert!(
            table.starts_with("CLUSTER") && table.contains("t1/a") && table.contains("hub-0"),
            "{table}"
        );
    }
}
