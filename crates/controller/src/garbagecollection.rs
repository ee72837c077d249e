//! Garbage collection: our Machines, InfraMachine clones and bootstrap config clones whose
//! NodeClaim no longer exists, after a grace period (a launch in flight has created them but
//! the watch cache may not show the NodeClaim yet).
//!
//! Fenced (see `fence`): only objects labelled with our cluster id, of a Cluster one of our
//! NodeClasses references, are considered, and a NodeClaim is recognised by its UID (the
//! object's `nodeclaim-uid` mark), never by its name — two workload clusters may both have a
//! NodeClaim `default-x7k2p`. A clone a Machine owns is left to Cluster API (deleting the
//! Machine deletes it).

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};

use crate::write::{Writer, manager};
use kube::{Resource, ResourceExt};

use crate::fence;
use crate::names;
use crate::nodeclaim::context::Ctx;

pub use crate::nodeclaim::context::MACHINE_GRACE;

/// What garbage collection knows of this workload cluster.
pub struct Ours<'a> {
    pub cluster_id: &'a str,
    /// UIDs of every NodeClaim (being deleted or not).
    pub claims: &'a HashSet<String>,
    /// `(namespace, name)` of the Clusters our NodeClasses reference.
    pub clusters: &'a HashSet<(String, String)>,
}

/// Objects of ours (cluster id, Cluster), older than `grace`, not being deleted, not owned
/// by a Machine, whose NodeClaim (by UID) is gone.
pub fn orphaned<'a, K: Resource + 'a>(
    objects: impl IntoIterator<Item = &'a K>,
    ours: &Ours<'_>,
    now: Timestamp,
    grace: Duration,
) -> Vec<&'a K> {
    objects
        .into_iter()
        .filter(|o| fence::cluster_of(*o) == Some(ours.cluster_id))
        .filter(|o| {
            let cluster = o
                .meta()
                .labels
                .as_ref()
                .and_then(|l| l.get(names::CAPI_CLUSTER_NAME_LABEL));
            let ns = o.meta().namespace.clone().unwrap_or_default();
            cluster.is_some_and(|c| ours.clusters.contains(&(ns, c.clone())))
        })
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .filter(|o| {
            !o.meta()
                .owner_references
                .as_ref()
                .is_some_and(|rs| rs.iter().any(|r| r.kind == "Machine"))
        })
        .filter(|o| {
            o.meta()
                .creation_timestamp
                .as_ref()
                .is_some_and(|t| now.duration_since(t.0).as_secs_f64() >= grace.as_secs_f64())
        })
        .filter(|o| fence::claim_uid(*o).is_some_and(|u| !ours.claims.contains(u)))
        .collect()
}

/// Sorted `namespace/name`s, for logs and tests.
pub fn keys<K: Resource>(objects: &[&K]) -> Vec<String> {
    let mut n: Vec<String> = objects.iter().map(|o| fence::key(*o)).collect();
    n.sort();
    n
}

/// Deletes `obj` (the very object we judged: UID precondition); false when it was gone.
async fn delete<K>(api: &Api<K>, obj: &K) -> bool
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match Writer::new(api.clone(), manager::GC).delete(obj).await {
        Ok(out) => out.written().is_some(),
        Err(e) => {
            tracing::warn!(object = %fence::key(obj), error = %e, "garbage collection failed");
            false
        }
    }
}

/// The clone kinds (group, kind) to look at: every InfrastructureMachineTemplate kind the
/// template index watches and every bootstrap config template kind a NodeClass names, each
/// without its `Template` suffix.
fn clone_kinds(ctx: &Ctx, index: &templates::watch::TemplateIndex) -> BTreeSet<(String, String)> {
    let strip = |k: &str| k.strip_suffix("Template").unwrap_or(k).to_string();
    let mut kinds: BTreeSet<(String, String)> = index
        .kinds()
        .into_iter()
        .map(|k| (k.group, strip(&k.kind)))
        .collect();
    for nc in ctx.nodeclasses.state() {
        if let Some(r) = &nc.spec.bootstrap.config_template_ref {
            kinds.insert((r.api_group.clone(), strip(&r.kind)));
        }
    }
    kinds
}

/// One pass: Machines from the cache, clones listed per kind and namespace.
async fn collect(ctx: &Ctx, index: &templates::watch::TemplateIndex, grace: Duration) {
    let claims: HashSet<String> = ctx
        .nodeclaims
        .state()
        .iter()
        .filter_map(|c| c.metadata.uid.clone())
        .collect();
    let clusters: HashSet<(String, String)> = ctx
        .nodeclasses
        .state()
        .iter()
        .map(|nc| {
            (
                nc.spec.cluster_ref.namespace.clone(),
                nc.spec.cluster_ref.name.clone(),
            )
        })
        .collect();
    let ours = Ours {
        cluster_id: &ctx.cluster_id,
        claims: &claims,
        clusters: &clusters,
    };
    let now = Timestamp::now();
    let machines = ctx.machines.state();
    for m in orphaned(machines.iter().map(|m| m.as_ref()), &ours, now, grace) {
        let api = ctx.machines_api(&m.namespace().unwrap_or_default());
        if delete(&api, m).await {
            tracing::info!(machine = %fence::key(m), "garbage-collected machine without nodeclaim");
        }
    }
    let namespaces: BTreeSet<&str> = clusters.iter().map(|(ns, _)| ns.as_str()).collect();
    let selector = fence::selector(&ctx.cluster_id);
    for (group, kind) in clone_kinds(ctx, index) {
        let Ok((_, ar)) = ctx.preferred(&group, &kind).await else {
            continue;
        };
        for ns in &namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &ar);
            let list = match api.list(&ListParams::default().labels(&selector)).await {
                Ok(l) => l.items,
                Err(e) => {
                    tracing::debug!(kind, namespace = ns, error = %e, "listing clones failed");
                    continue;
                }
            };
            for obj in orphaned(list.iter(), &ours, now, grace) {
                if delete(&api, obj).await {
                    tracing::info!(object = %fence::key(obj), kind, "garbage-collected clone without nodeclaim");
                }
            }
        }
    }
}

/// Every `interval`, deletes objects of ours whose NodeClaim is gone (after `grace`).
pub async fn run(
    ctx: Ctx,
    index: templates::watch::TemplateIndex,
    interval: Duration,
    grace: Duration,
) {
    loop {
        tokio::time::sleep(interval).await;
        if ctx.machines.wait_until_ready().await.is_err()
            || ctx.nodeclaims.wait_until_ready().await.is_err()
            || ctx.nodeclasses.wait_until_ready().await.is_err()
        {
            return;
        }
        collect(&ctx, &index, grace).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixture {
        uid: Option<&'static str>,
        cluster_id: Option<&'static str>,
        cluster: &'static str,
        created: &'static str,
        deleting: bool,
        owned: bool,
    }

    const BASE: Fixture = Fixture {
        uid: Some("gone"),
        cluster_id: Some("me"),
        cluster: "c1",
        created: "2026-11-22T10:00:00Z",
        deleting: false,
        owned: false,
    };

    fn object(name: &str, f: Fixture) -> DynamicObject {
        let mut labels = json!({names::NODECLAIM_LABEL: "default-abc",
                                names::CAPI_CLUSTER_NAME_LABEL: f.cluster});
        if let Some(c) = f.cluster_id {
            labels[names::CLUSTER_ID_LABEL] = json!(c);
        }
        let mut meta = json!({"name": name, "namespace": "ns", "labels": labels,
                              "creationTimestamp": f.created});
        if let Some(u) = f.uid {
            meta["annotations"] = json!({names::NODECLAIM_UID_ANNOTATION: u});
        }
        if f.deleting {
            meta["deletionTimestamp"] = json!("2026-11-22T10:00:00Z");
        }
        if f.owned {
            meta["ownerReferences"] = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine", "name": name, "uid": "m", "controller": true}]);
        }
        serde_json::from_value(
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "TestMachine", "metadata": meta}),
        )
        .expect("fixture")
    }

    #[test]
    fn collects_only_old_orphans_of_ours_by_uid() {
        let now: Timestamp = "2026-11-22T10:05:00Z".parse().expect("time");
        let objects = [
            object("orphan", BASE),
            object(
                "young",
                Fixture {
                    created: "2026-11-22T10:04:30Z",
                    ..BASE
                },
            ),
            object(
                "alive",
                Fixture {
                    uid: Some("live-uid"),
                    ..BASE
                },
            ),
            object(
                "other-workload-cluster",
                Fixture {
                    cluster_id: Some("them"),
                    ..BASE
                },
            ),
            object(
                "before-fencing",
                Fixture {
                    cluster_id: None,
                    ..BASE
                },
            ),
            object(
                "unreferenced-cluster",
                Fixture {
                    cluster: "c9",
                    ..BASE
                },
            ),
            object(
                "deleting",
                Fixture {
                    deleting: true,
                    ..BASE
                },
            ),
            object(
                "owned-by-its-machine",
                Fixture {
                    owned: true,
                    ..BASE
                },
            ),
            object("no-uid-mark", Fixture { uid: None, ..BASE }),
        ];
        let claims = HashSet::from(["live-uid".to_string()]);
        let clusters = HashSet::from([("ns".to_string(), "c1".to_string())]);
        let ours = Ours {
            cluster_id: "me",
            claims: &claims,
            clusters: &clusters,
        };
        let found = orphaned(objects.iter(), &ours, now, MACHINE_GRACE);
        assert_eq!(keys(&found), ["ns/orphan"]);
    }

    #[test]
    fn a_claim_of_the_same_name_in_another_cluster_does_not_keep_ours() {
        // Our NodeClaim `default-abc` is gone; another workload cluster has one of the same
        // name. Names do not count, UIDs do.
        let now: Timestamp = "2026-11-22T10:05:00Z".parse().expect("time");
        let objects = [object("default-abc-1a2b3c4d", BASE)];
        let claims = HashSet::from(["uid-of-their-default-abc".to_string()]);
        let clusters = HashSet::from([("ns".to_string(), "c1".to_string())]);
        let ours = Ours {
            cluster_id: "me",
            claims: &claims,
            clusters: &clusters,
        };
        assert_eq!(orphaned(objects.iter(), &ours, now, MACHINE_GRACE).len(), 1);
    }
}
