//! Garbage collection, as Karpenter's: every instance the provider lists
//! ([`CloudProvider::list`]) whose NodeClaim no longer exists is deleted through the provider
//! ([`CloudProvider::delete`]), after a grace period (a launch in flight has created it but
//! the watch cache may not show the NodeClaim yet). A NodeClaim is recognised by its UID,
//! never by its name — two workload clusters may both have a NodeClaim `default-x7k2p`; the
//! provider lists only what is fenced to this cluster (see `cloudprovider::clusterapi::instances`).

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::metrics::NoLabels;
use crate::nodeclaim::context::Ctx;
use cloudprovider::{CloudProvider, Instance};

pub use crate::nodeclaim::context::INSTANCE_GRACE;

/// Instances older than `grace`, not being deleted, whose NodeClaim (by UID) is not in
/// `claims`. An instance without a UID mark is never ours to judge.
pub(crate) fn orphaned<'a>(
    instances: &'a [Instance],
    claims: &HashSet<String>,
    now: Timestamp,
    grace: Duration,
) -> Vec<&'a Instance> {
    instances
        .iter()
        .filter(|i| !i.terminating)
        .filter(|i| {
            i.created
                .is_some_and(|t| now.duration_since(t).as_secs_f64() >= grace.as_secs_f64())
        })
        .filter(|i| {
            i.nodeclaim_uid
                .as_ref()
                .is_some_and(|u| !u.is_empty() && !claims.contains(u))
        })
        .collect()
}

/// One pass: lists the provider's instances and deletes the orphaned ones. Returns what it
/// deleted (descriptions), for logs and tests.
pub(crate) async fn collect(
    provider: &dyn CloudProvider,
    claims: &HashSet<String>,
    now: Timestamp,
    grace: Duration,
) -> Vec<String> {
    let instances = match provider.list().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "garbage collection: listing instances failed");
            return Vec::new();
        }
    };
    let mut deleted = Vec::new();
    for i in orphaned(&instances, claims, now, grace) {
        match provider.delete(&i.as_claim()).await {
            Ok(_) => {
                tracing::info!(instance = %i.description, nodeclaim = %i.nodeclaim,
                    "garbage-collected instance without nodeclaim");
                deleted.push(i.description.clone());
            }
            Err(e) => {
                tracing::warn!(instance = %i.description, error = %e, "garbage collection failed")
            }
        }
    }
    deleted
}

/// Every `interval`, deletes instances whose NodeClaim is gone (after `grace`).
pub(crate) async fn run(ctx: Ctx, interval: Duration, grace: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        if ctx.nodeclaims.wait_until_ready().await.is_err() {
            return;
        }
        if !ctx.connection.connected() {
            // The workload cluster does not answer: its NodeClaim cache may be stale, and
            // an instance whose NodeClaim we cannot see is not an orphan.
            tracing::info!("garbage collection skipped: workload cluster disconnected");
            ctx.metrics.gc_skipped.get_or_create(&NoLabels {}).inc();
            continue;
        }
        let claims: HashSet<String> = ctx
            .nodeclaims
            .state()
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        collect(ctx.provider.as_ref(), &claims, Timestamp::now(), grace).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudprovider::fake::FakeCloudProvider;

    const NOW: &str = "2026-11-22T10:05:00Z";

    fn instance(name: &str, uid: Option<&str>, created: &str, terminating: bool) -> Instance {
        Instance {
            nodeclaim: name.into(),
            description: format!("fake instance {name}"),
            nodeclaim_uid: uid.map(str::to_string),
            created: Some(created.parse().expect("time")),
            terminating,
            ..Instance::default()
        }
    }

    fn fixtures() -> Vec<Instance> {
        vec![
            instance("orphan", Some("gone"), "2026-11-22T10:00:00Z", false),
            instance("young", Some("gone"), "2026-11-22T10:04:30Z", false),
            instance("alive", Some("live-uid"), "2026-11-22T10:00:00Z", false),
            instance("deleting", Some("gone"), "2026-11-22T10:00:00Z", true),
            instance("no-uid-mark", None, "2026-11-22T10:00:00Z", false),
        ]
    }

    #[test]
    fn only_old_instances_whose_claim_uid_is_gone_are_orphans() {
        let instances = fixtures();
        let claims = HashSet::from(["live-uid".to_string()]);
        let found: Vec<&str> = orphaned(
            &instances,
            &claims,
            NOW.parse().expect("time"),
            INSTANCE_GRACE,
        )
        .iter()
        .map(|i| i.nodeclaim.as_str())
        .collect();
        assert_eq!(found, ["orphan"]);
    }

    #[test]
    fn a_claim_of_the_same_name_does_not_keep_an_instance_names_do_not_count() {
        // Our NodeClaim `default-abc` is gone; a NodeClaim of the same name (another UID)
        // exists. UIDs count, names do not.
        let instances = [instance(
            "default-abc",
            Some("uid-of-ours"),
            "2026-11-22T10:00:00Z",
            false,
        )];
        let claims = HashSet::from(["uid-of-the-new-default-abc".to_string()]);
        let now = NOW.parse().expect("time");
        assert_eq!(orphaned(&instances, &claims, now, INSTANCE_GRACE).len(), 1);
    }

    /// A pass over the fake provider: the orphan is deleted through the provider, the rest
    /// are left, and a pass with nothing to do deletes nothing.
    #[tokio::test]
    async fn a_pass_deletes_orphans_through_the_provider() {
        let fake = FakeCloudProvider::default();
        fake.state(|s| {
            for i in fixtures() {
                s.instances.insert(i.nodeclaim.clone(), i);
            }
        });
        let claims = HashSet::from(["live-uid".to_string()]);
        let now = NOW.parse().expect("time");
        let deleted = collect(&fake, &claims, now, INSTANCE_GRACE).await;
        assert_eq!(deleted, ["fake instance orphan"]);
        let (left, calls) = fake.state(|s| {
            (
                s.instances.keys().cloned().collect::<Vec<_>>(),
                s.delete_calls.clone(),
            )
        });
        assert_eq!(calls, ["orphan"]);
        assert_eq!(left, ["alive", "deleting", "no-uid-mark", "young"]);
        assert!(
            collect(&fake, &claims, now, INSTANCE_GRACE)
                .await
                .is_empty()
        );
        // A failing delete is reported, not counted, and retried on the next pass.
        fake.state(|s| {
            s.instances.insert("orphan".into(), fixtures().remove(0));
            s.delete_errors
                .push_back(cloudprovider::Error::NodeClaimNotFound("orphan".into()));
        });
        assert!(
            collect(&fake, &claims, now, INSTANCE_GRACE)
                .await
                .is_empty()
        );
        assert_eq!(
            collect(&fake, &claims, now, INSTANCE_GRACE).await,
            ["fake instance orphan"]
        );
    }
}
