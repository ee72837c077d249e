//! `karpenter-capi inspect` against a hub's management cluster: every opted-in Cluster with
//! its state — ineligible (why), waiting for its credentials, connecting or engaged (by which
//! replica: the holder of its fence Lease; engaged once its `ClusterEngaged` Event is there),
//! disconnected (its last health Event), or waiting to be engaged — read from the API server (Clusters, kubeconfig Secrets, fence Leases, Events),
//! not from the operator. `inspect --cluster ns/name` inspects that Cluster's workload cluster
//! through its kubeconfig Secret, as `inspect` does for one cluster.

use std::fmt::Write as _;

use api::consts::{events as reasons, labels};
use clusterapi::hub::credentials::{self, Missing};
use clusterapi::hub::{ClusterKey, HubConfig, eligible, key_of, shard::fence_name};
use clusterapi_api::Cluster;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::{Api, Client};
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

/// The row of one Cluster from what was read (`credentials`: why it has none to use).
pub fn row(
    cluster: &Cluster,
    credentials: Result<(), &Missing>,
    owner: Option<String>,
    health: Option<bool>,
) -> ClusterRow {
    let key = key_of(cluster);
    let (state, reason) = match (eligible(cluster, &HubConfig::default()), credentials) {
        (Err(why), _) => ("ineligible", why.into_owned()),
        (Ok(()), Err(missing)) => (
            "waiting-credentials",
            format!("{}: {missing}", missing.kind()),
        ),
        (Ok(()), Ok(())) => match (health, &owner) {
            (Some(false), _) => (
                "disconnected",
                "its API server failed its last probes: no disruption, GC or deletes".into(),
            ),
            (Some(true), Some(o)) => ("engaged", format!("fence Lease held by {o}")),
            (None, Some(o)) => (
                "connecting",
                format!("fence Lease held by {o}; not engaged yet (no ClusterEngaged Event)"),
            ),
            (Some(true), None) => (
                "engaged",
                "no fence Lease (leader election disabled)".into(),
            ),
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

/// Every opted-in Cluster's row; fence Leases read in `lease_namespace`.
pub async fn clusters(
    management: &Client,
    lease_namespace: &str,
) -> Result<Vec<ClusterRow>, kube::Error> {
    // Every value of the opt-in label: one that is not "true" is shown as ineligible.
    let opted_in = ListParams::default().labels(labels::HUB_ENABLED);
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
        let creds = credentials::read(management, c).await?;
        rows.push(row(
            c,
            creds.as_ref().map(|_| ()),
            owner,
            last_health(&events, &key),
        ));
    }
    rows.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    Ok(rows)
}

/// The workload client of Cluster `ns/name`, from its kubeconfig Secret.
pub async fn workload_client(
    management: &Client,
    cluster: &str,
    options: &operator::ClientOptions,
) -> anyhow::Result<Client> {
    let (ns, name) = cluster
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--cluster {cluster:?}: expected <namespace>/<name>"))?;
    let c = Api::<Cluster>::namespaced(management.clone(), ns)
        .get(name)
        .await?;
    let creds = credentials::read(management, &c)
        .await?
        .map_err(|missing| anyhow::anyhow!("Cluster {cluster}: {missing}"))?;
    Ok(operator::client_from_yaml(&creds.kubeconfig, options).await?)
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
        let no_secret = Missing::Secret("t1/a-kubeconfig".into());
        let state = |c: &Cluster, creds: bool, owner: Option<&str>, health| {
            let creds = if creds { Ok(()) } else { Err(&no_secret) };
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
        let r = row(&c, Ok(()), Some("hub-0".into()), None);
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

    /// Each reason a Cluster is not engaged is its own line: the label's value, the missing
    /// Secret, the wrong key.
    #[test]
    fn the_reason_names_the_label_value_the_missing_secret_or_the_wrong_key() {
        let mut yes = cluster(false);
        yes.metadata.labels = Some(
            [(
                "karpenter.cluster.x-k8s.io/enabled".to_string(),
                "yes".to_string(),
            )]
            .into(),
        );
        let r = row(&yes, Ok(()), None, None);
        assert_eq!(
            (r.state.as_str(), r.reason.as_str()),
            (
                "ineligible",
                "label karpenter.cluster.x-k8s.io/enabled is \"yes\": only \"true\" opts in"
            )
        );
        let c = cluster(false);
        let r = row(
            &c,
            Err(&Missing::Secret("t1/a-kubeconfig".into())),
            None,
            None,
        );
        assert_eq!(r.state, "waiting-credentials");
        assert!(
            r.reason
                .starts_with("missing Secret: no kubeconfig Secret t1/a-kubeconfig"),
            "{}",
            r.reason
        );
        let wrong = Missing::Key {
            secret: "t1/a-kubeconfig".into(),
            keys: vec!["config".into()],
        };
        let r = row(&c, Err(&wrong), None, None);
        assert_eq!(
            r.reason,
            "wrong key: Secret t1/a-kubeconfig has no key `value` or `kubeconfig` (its keys: config)"
        );
    }
}
