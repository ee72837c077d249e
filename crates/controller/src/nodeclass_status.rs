//! The ClusterAPINodeClass status controller and the per-NodeClass catalog the other loops
//! read. Conditions: ClusterReady (the Cluster exists), TemplatesReady (at least one
//! instance type; broken templates are named but do not block the good ones),
//! BootstrapReady (the bootstrap template or data Secret exists), Ready (all three).
//! `status.instanceTypes` summarises the catalog.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use templates::model::Catalog;
use templates::selection::Selection;
use templates::settings::CatalogSettings;
use templates::watch::TemplateIndex;

use crate::cache::Cache;
use crate::names;
use crate::nodeclaim::context::{Catalogs, nodeclass_resource};
use api::{Cluster, ClusterAPINodeClass};

/// `conditions` with `type_` set (the shared helper, on a copy).
fn set_condition(
    conditions: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out = conditions.to_vec();
    api::conditions::set(&mut out, type_, status, reason, message, generation, now);
    out
}

/// `cluster.x-k8s.io/v1beta2` Cluster.
pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(names::CAPI_GROUP, names::CAPI_VERSION, "Cluster"),
        "clusters",
    )
}

/// Catalogs built from the template caches, the NodeClass and its Cluster (all cached).
#[derive(Clone)]
pub struct IndexCatalogs {
    pub index: TemplateIndex,
    pub nodeclasses: Store<ClusterAPINodeClass>,
    pub clusters: Store<Cluster>,
}

impl IndexCatalogs {
    fn cluster_of(&self, nc: &Value) -> Option<Arc<Cluster>> {
        let ns = nc.pointer("/spec/clusterRef/namespace")?.as_str()?;
        let name = nc.pointer("/spec/clusterRef/name")?.as_str()?;
        self.clusters.get(&ObjectRef::new(name).within(ns))
    }

    /// The catalog of a NodeClass given as JSON.
    pub fn catalog_for(&self, nc: &Value) -> Arc<Result<Catalog, templates::SettingsError>> {
        let selection = Selection::from_node_class_json(nc);
        let mut settings = CatalogSettings::from_node_class_json(nc);
        if let Some(cluster) = self.cluster_of(nc) {
            settings =
                settings.with_cluster_json(&serde_json::to_value(&*cluster).unwrap_or(Value::Null));
        }
        self.index.catalog_cached(&selection, &settings)
    }
}

impl Catalogs for IndexCatalogs {
    fn catalog(&self, nodeclass: &str) -> Option<Arc<Catalog>> {
        let nc = self.nodeclasses.get(&ObjectRef::new(nodeclass))?;
        let value = serde_json::to_value(&*nc).ok()?;
        match &*self.catalog_for(&value) {
            Ok(c) if !c.instance_types.is_empty() => Some(Arc::new(c.clone())),
            _ => None,
        }
    }
}

/// The status the controller computes for one NodeClass (pure, given what was looked up).
pub fn compute_status(
    current: &[Condition],
    generation: Option<i64>,
    cluster: Result<(), String>,
    catalog: &Result<Catalog, String>,
    bootstrap: Result<(), String>,
    now: Timestamp,
) -> Value {
    let mut c = current.to_vec();
    let set = |c: &mut Vec<Condition>,
               t: &str,
               r: &Result<(), String>,
               ok_reason: &str,
               bad_reason: &str| {
        *c = match r {
            Ok(()) => set_condition(c, t, "True", ok_reason, "", generation, now),
            Err(m) => set_condition(c, t, "False", bad_reason, m, generation, now),
        };
    };
    set(
        &mut c,
        "ClusterReady",
        &cluster,
        "ClusterFound",
        "ClusterNotFound",
    );
    let templates: Result<(), String> = match catalog {
        Ok(cat) if cat.instance_types.is_empty() => Err(if cat.excluded.is_empty() {
            "no opted-in template matches machineTemplateSelector".to_string()
        } else {
            format!(
                "no usable template; excluded: {}",
                cat.excluded
                    .iter()
                    .map(|e| e.error.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }),
        Ok(_) => Ok(()),
        Err(e) => Err(e.clone()),
    };
    set(
        &mut c,
        "TemplatesReady",
        &templates,
        "TemplatesFound",
        "NoInstanceTypes",
    );
    // Broken templates are named in the message even when others serve.
    if let (Ok(cat), Ok(())) = (catalog, &templates)
        && !cat.excluded.is_empty()
    {
        let msg = format!(
            "{} instance types; excluded: {}",
            cat.instance_types.len(),
            cat.excluded
                .iter()
                .map(|e| e.error.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
        c = set_condition(
            &c,
            "TemplatesReady",
            "True",
            "SomeTemplatesExcluded",
            &msg,
            generation,
            now,
        );
    }
    set(
        &mut c,
        "BootstrapReady",
        &bootstrap,
        "BootstrapFound",
        "BootstrapNotFound",
    );
    let not_ready: Vec<String> = ["ClusterReady", "TemplatesReady", "BootstrapReady"]
        .iter()
        .filter_map(|t| {
            c.iter()
                .find(|x| x.type_ == *t)
                .filter(|x| x.status != "True")
                .map(|x| format!("{t}: {}", x.message))
        })
        .collect();
    c = if not_ready.is_empty() {
        set_condition(&c, "Ready", "True", "Ready", "", generation, now)
    } else {
        set_condition(
            &c,
            "Ready",
            "False",
            "NotReady",
            &not_ready.join("; "),
            generation,
            now,
        )
    };
    let summary: Vec<Value> = match catalog {
        Ok(cat) => cat
            .instance_types
            .iter()
            .map(|it| {
                let mut zones: Vec<&str> = it
                    .offerings
                    .iter()
                    .filter_map(|o| o.zone.as_deref())
                    .collect();
                zones.sort();
                zones.dedup();
                let mut cts: Vec<&str> = it
                    .offerings
                    .iter()
                    .map(|o| o.capacity_type.as_str())
                    .collect();
                cts.sort();
                cts.dedup();
                let price = it
                    .offerings
                    .iter()
                    .map(|o| o.price)
                    .fold(f64::INFINITY, f64::min);
                json!({
                    "name": it.name,
                    "templates": it.templates.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
                    "zones": zones,
                    "capacityTypes": cts,
                    "cpu": it.capacity.quantity("cpu"),
                    "memory": it.capacity.quantity("memory"),
                    "price": if price.is_finite() { format!("{price:.4}") } else { String::new() },
                })
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    json!({"conditions": c, "instanceTypes": summary})
}

#[derive(Clone)]
pub struct StatusCtx {
    pub workload: Client,
    pub management: Client,
    pub catalogs: IndexCatalogs,
}

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

async fn bootstrap_exists(ctx: &StatusCtx, nc: &Value) -> Result<(), String> {
    let ns = nc
        .pointer("/spec/clusterRef/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if let Some(r) = nc.pointer("/spec/bootstrap/configTemplateRef") {
        let group = r
            .get("apiGroup")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
        let g = kube::discovery::oneshot::group(&ctx.management, group)
            .await
            .map_err(|e| format!("group {group} is not served: {e}"))?;
        let ar = g
            .versioned_resources(g.preferred_version_or_latest())
            .into_iter()
            .map(|(ar, _)| ar)
            .find(|ar| ar.kind == kind)
            .ok_or_else(|| format!("kind {kind} is not served in group {group}"))?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &ar);
        return match api.get_opt(name).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(format!("{kind} {ns}/{name} not found")),
            Err(e) => Err(format!("reading {kind} {ns}/{name}: {e}")),
        };
    }
    if let Some(name) = nc
        .pointer("/spec/bootstrap/dataSecretName")
        .and_then(Value::as_str)
    {
        let api: Api<Secret> = Api::namespaced(ctx.management.clone(), ns);
        return match api.get_metadata_opt(name).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(format!("Secret {ns}/{name} not found")),
            Err(e) => Err(format!("reading Secret {ns}/{name}: {e}")),
        };
    }
    Err("spec.bootstrap has neither configTemplateRef nor dataSecretName".into())
}

async fn reconcile(
    obj: Arc<ClusterAPINodeClass>,
    ctx: Arc<StatusCtx>,
) -> Result<Action, StatusError> {
    let nc = serde_json::to_value(&*obj).unwrap_or(Value::Null);
    let conditions: Vec<Condition> = nc
        .pointer("/status/conditions")
        .cloned()
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default();
    let cluster = match ctx.catalogs.cluster_of(&nc) {
        Some(_) => Ok(()),
        None => Err(format!(
            "Cluster {}/{} not found",
            nc.pointer("/spec/clusterRef/namespace")
                .and_then(Value::as_str)
                .unwrap_or(""),
            nc.pointer("/spec/clusterRef/name")
                .and_then(Value::as_str)
                .unwrap_or("")
        )),
    };
    let catalog = match &*ctx.catalogs.catalog_for(&nc) {
        Ok(c) => Ok(c.clone()),
        Err(e) => Err(e.to_string()),
    };
    let bootstrap = bootstrap_exists(&ctx, &nc).await;
    let status = compute_status(
        &conditions,
        obj.metadata.generation,
        cluster,
        &catalog,
        bootstrap,
        Timestamp::now(),
    );
    let unchanged = nc.get("status").is_some_and(|s| {
        s.get("instanceTypes") == status.get("instanceTypes")
            && strip_times(s.get("conditions")) == strip_times(status.get("conditions"))
    });
    if !unchanged {
        let api: Api<DynamicObject> = Api::all_with(ctx.workload.clone(), &nodeclass_resource());
        api.patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    }
    Ok(Action::requeue(Duration::from_secs(60)))
}

fn strip_times(conditions: Option<&Value>) -> Value {
    let mut v = conditions.cloned().unwrap_or(Value::Null);
    if let Value::Array(list) = &mut v {
        for c in list {
            if let Value::Object(m) = c {
                m.remove("lastTransitionTime");
            }
        }
    }
    v
}

fn error_policy(
    obj: Arc<ClusterAPINodeClass>,
    error: &StatusError,
    _ctx: Arc<StatusCtx>,
) -> Action {
    tracing::warn!(nodeclass = %obj.name_any(), %error, "nodeclass status failed");
    Action::requeue(Duration::from_secs(5))
}

/// Runs the NodeClass status controller: reconciles every NodeClass on its own changes and on
/// every template change.
pub async fn run(
    ctx: StatusCtx,
    nodeclasses: Cache<ClusterAPINodeClass>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let mut changes = ctx.catalogs.index.subscribe();
    let (tx, rx) = futures::channel::mpsc::channel::<()>(1);
    let mut tasks = crate::tasks::Tasks::default();
    tasks.spawn(async move {
        let mut tx = tx;
        while changes.changed().await.is_ok() {
            // Coalesce bursts of template events.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = tx.try_send(());
        }
    });
    Controller::for_shared_stream(nodeclasses.subscribe(), nodeclasses.store())
        .reconcile_all_on(futures::stream::once(futures::future::ready(())).chain(rx))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_cluster_templates_and_bootstrap() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("time");
        let empty = Ok(Catalog::default());
        let s = compute_status(&[], Some(1), Ok(()), &empty, Ok(()), now);
        let cond = |s: &Value, t: &str| -> (String, String) {
            let c = s["conditions"]
                .as_array()
                .expect("list")
                .iter()
                .find(|c| c["type"] == t)
                .expect("cond");
            (
                c["status"].as_str().unwrap_or("").into(),
                c["reason"].as_str().unwrap_or("").into(),
            )
        };
        assert_eq!(
            cond(&s, "TemplatesReady"),
            ("False".into(), "NoInstanceTypes".into())
        );
        assert_eq!(cond(&s, "Ready").0, "False");
        let s = compute_status(
            &[],
            Some(1),
            Err("Cluster a/b not found".into()),
            &empty,
            Err("x".into()),
            now,
        );
        assert_eq!(
            cond(&s, "ClusterReady"),
            ("False".into(), "ClusterNotFound".into())
        );
        assert_eq!(
            cond(&s, "BootstrapReady"),
            ("False".into(), "BootstrapNotFound".into())
        );
        assert!(s["conditions"].as_array().expect("list").iter().any(|c| {
            c["type"] == "Ready"
                && c["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("Cluster a/b not found")
        }));
    }
}
