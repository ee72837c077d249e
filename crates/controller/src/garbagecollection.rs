//! Garbage collection decisions (pure): Machines carrying our NodeClaim label whose NodeClaim
//! no longer exists, after a grace period (a launch in flight has created the Machine but the
//! watch cache may not show the NodeClaim yet), and launched NodeClaims whose Machine is gone.

use std::time::Duration;

use api::{Machine, NodeClaim};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// Default grace before a Machine without its NodeClaim is deleted.
pub const MACHINE_GRACE: Duration = Duration::from_secs(60);

/// The NodeClaim a Machine belongs to (its label value), if it is one of ours.
pub fn owning_claim<'a>(machine: &'a Machine, label: &str) -> Option<&'a str> {
    machine
        .metadata
        .labels
        .as_ref()?
        .get(label)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// Machines of ours, older than `grace`, not being deleted, whose NodeClaim is gone.
pub fn orphaned_machines<'a>(
    machines: impl IntoIterator<Item = &'a Machine>,
    label: &str,
    claim_exists: impl Fn(&str) -> bool,
    now: Timestamp,
    grace: Duration,
) -> Vec<&'a Machine> {
    machines
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            m.metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|t| now.duration_since(t.0).as_secs_f64() >= grace.as_secs_f64())
        })
        .filter(|m| owning_claim(m, label).is_some_and(|c| !claim_exists(c)))
        .collect()
}

/// Sorted names, for logs and events.
pub fn names(objects: &[&Machine]) -> Vec<String> {
    let mut n: Vec<String> = objects.iter().map(|o| o.name_any()).collect();
    n.sort();
    n
}

/// Every `interval`, deletes Machines of ours whose NodeClaim is gone (after `grace`).
pub async fn run(
    management: kube::Client,
    machines: kube::runtime::reflector::Store<Machine>,
    nodeclaims: kube::runtime::reflector::Store<NodeClaim>,
    interval: Duration,
    grace: Duration,
) {
    let label = crate::names::NODECLAIM_LABEL;
    loop {
        tokio::time::sleep(interval).await;
        if machines.wait_until_ready().await.is_err()
            || nodeclaims.wait_until_ready().await.is_err()
        {
            return;
        }
        let all = machines.state();
        let claims: std::collections::HashSet<String> =
            nodeclaims.state().iter().map(|c| c.name_any()).collect();
        let orphans = orphaned_machines(
            all.iter().map(|m| m.as_ref()),
            label,
            |c| claims.contains(c),
            Timestamp::now(),
            grace,
        );
        for m in orphans {
            let ns = m.namespace().unwrap_or_default();
            let api: kube::Api<Machine> = kube::Api::namespaced(management.clone(), &ns);
            match api.delete(&m.name_any(), &Default::default()).await {
                Ok(_) => {
                    tracing::info!(machine = %format!("{ns}/{}", m.name_any()), "garbage-collected machine without nodeclaim")
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    tracing::warn!(machine = %m.name_any(), error = %e, "garbage collection failed")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LABEL: &str = "karpenter.cluster.x-k8s.io/nodeclaim";

    fn machine(name: &str, claim: Option<&str>, created: &str, deleting: bool) -> Machine {
        let mut labels = serde_json::Map::new();
        if let Some(c) = claim {
            labels.insert(LABEL.into(), json!(c));
        }
        let mut meta = json!({"name": name, "labels": labels, "creationTimestamp": created});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-11-22T10:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta,
            "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": name}}
        }))
        .expect("fixture")
    }

    #[test]
    fn finds_only_old_orphans_of_ours() {
        let now: Timestamp = "2026-11-22T10:05:00Z".parse().expect("time");
        let ms = [
            machine("orphan", Some("gone"), "2026-11-22T10:00:00Z", false),
            machine("young", Some("gone-too"), "2026-11-22T10:04:30Z", false),
            machine("alive", Some("exists"), "2026-11-22T10:00:00Z", false),
            machine("not-ours", None, "2026-11-22T10:00:00Z", false),
            machine("deleting", Some("gone"), "2026-11-22T10:00:00Z", true),
        ];
        let found = orphaned_machines(ms.iter(), LABEL, |c| c == "exists", now, MACHINE_GRACE);
        assert_eq!(names(&found), ["orphan"]);
    }
}
