//! The ClusterAPINodeClass status controller (the catalog it summarises is
//! [`crate::catalogs`]). Conditions (computed by [`templates::status`]): ClusterReady (the Cluster exists,
//! its infrastructure is provisioned and its control plane initialized), TemplatesReady (at
//! least one instance type; broken templates are named but do not block the good ones),
//! BootstrapReady (the bootstrap template or data Secret exists), Ready (all three).
//! `status.instanceTypes` summarises the catalog ([`templates::status::summarize`]).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use templates::SettingsError;
use templates::model::Catalog;
use templates::status::{self, BootstrapState, ConditionValue};

use crate::cache::Cache;
pub use crate::catalogs::IndexCatalogs;
use crate::names;
use crate::resources::nodeclass_resource;
use api::ClusterAPINodeClass;
use api::consts::conditions::NODECLASS_READY_PARTS;

/// `cluster.x-k8s.io/v1beta2` Cluster.
pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(names::CAPI_GROUP, names::CAPI_VERSION, "Cluster"),
        "clusters",
    )
}

/// The status the controller computes for one NodeClass (pure, given what was looked up):
/// `parts` (ClusterReady, TemplatesReady, BootstrapReady) set on `current`, Ready from them,
/// and the catalog's instance types.
pub fn compute_status(
    current: &[Condition],
    generation: Option<i64>,
    parts: &[ConditionValue],
    catalog: &Result<Catalog, SettingsError>,
    now: Timestamp,
) -> Value {
    let mut c = current.to_vec();
    for p in parts {
        api::conditions::set(
            &mut c, p.type_, p.status, p.reason, &p.message, generation, now,
        );
    }
    api::conditions::set_ready_from(&mut c, NODECLASS_READY_PARTS, generation, now);
    let instance_types = catalog
        .as_ref()
        .map(templates::status::summarize)
        .unwrap_or_default();
    json!({"conditions": c, "instanceTypes": instance_types, "instanceTypeCount": instance_types.len()})
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

/// Where the NodeClass's bootstrap data comes from, looked up in the Cluster's namespace.
/// API errors are returned (the reconcile retries); an unserved kind counts as missing.
async fn bootstrap_state(ctx: &StatusCtx, nc: &Value) -> Result<BootstrapState, kube::Error> {
    let ns = nc
        .pointer("/spec/clusterRef/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if let Some(r) = nc.pointer("/spec/bootstrap/configTemplateRef") {
        let field = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or_default();
        let (group, kind, name) = (field("apiGroup"), field("kind"), field("name"));
        let missing = || BootstrapState::TemplateMissing {
            kind: kind.to_string(),
            name: name.to_string(),
        };
        let Ok(g) = kube::discovery::oneshot::group(&ctx.management, group).await else {
            return Ok(missing());
        };
        let Some(ar) = g
            .versioned_resources(g.preferred_version_or_latest())
            .into_iter()
            .map(|(ar, _)| ar)
            .find(|ar| ar.kind == kind)
        else {
            return Ok(missing());
        };
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &ar);
        return Ok(match api.get_metadata_opt(name).await? {
            Some(_) => BootstrapState::TemplateFound {
                kind: kind.to_string(),
                name: name.to_string(),
            },
            None => missing(),
        });
    }
    if let Some(name) = nc
        .pointer("/spec/bootstrap/dataSecretName")
        .and_then(Value::as_str)
    {
        let api: Api<Secret> = Api::namespaced(ctx.management.clone(), ns);
        let name = name.to_string();
        return Ok(match api.get_metadata_opt(&name).await? {
            Some(_) => BootstrapState::SecretFound { name },
            None => BootstrapState::SecretMissing { name },
        });
    }
    Ok(BootstrapState::Invalid(
        "spec.bootstrap has neither configTemplateRef nor dataSecretName".into(),
    ))
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
    let field = |p: &str| nc.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (ns, cluster_name) = (
        field("/spec/clusterRef/namespace"),
        field("/spec/clusterRef/name"),
    );
    let cluster = ctx.catalogs.cluster_of(&nc);
    let catalog = ctx.catalogs.catalog_for(&nc);
    let bootstrap = bootstrap_state(&ctx, &nc).await?;
    let parts = [
        status::cluster_ready(cluster.as_deref(), ns, cluster_name),
        status::templates_ready(&catalog),
        status::bootstrap_ready(&bootstrap, ns),
    ];
    let status = compute_status(
        &conditions,
        obj.metadata.generation,
        &parts,
        &catalog,
        Timestamp::now(),
    );
    let unchanged = nc.get("status").is_some_and(|s| {
        s.get("instanceTypes") == status.get("instanceTypes")
            && s.get("instanceTypeCount") == status.get("instanceTypeCount")
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
    use api::Cluster;
    use templates::CatalogSettings;

    fn template(name: &str, cpu: &str, node_info: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "DockerMachineTemplate",
            "metadata": {"name": name, "namespace": "ns", "annotations": {
                "capacity.cluster-autoscaler.kubernetes.io/cpu": cpu,
                "capacity.cluster-autoscaler.kubernetes.io/memory": "8Gi",
                "capacity.cluster-autoscaler.kubernetes.io/gpu-count": "1"}},
            "status": {"nodeInfo": node_info},
        }))
        .expect("template")
    }

    fn cond(s: &Value, t: &str) -> (String, String, String) {
        let c = s["conditions"]
            .as_array()
            .expect("list")
            .iter()
            .find(|c| c["type"] == t)
            .expect("cond");
        let text = |f: &str| c[f].as_str().unwrap_or("").to_string();
        (text("status"), text("reason"), text("message"))
    }

    #[test]
    fn instance_types_carry_arch_os_pods_and_gpus() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("time");
        let settings = CatalogSettings {
            failure_domains: vec!["z1".into()],
            max_pods: Some(58),
            ..Default::default()
        };
        let catalog = templates::build_catalog(
            &[template(
                "arm",
                "4",
                json!({"architecture": "arm64", "operatingSystem": "linux"}),
            )],
            &settings,
        );
        let parts = [status::templates_ready(&catalog)];
        let s = compute_status(&[], Some(1), &parts, &catalog, now);
        let list: Vec<api::nodeclass::InstanceTypeSummary> =
            serde_json::from_value(s["instanceTypes"].clone()).expect("typed summary");
        assert_eq!(list.len(), 1);
        assert_eq!(s["instanceTypeCount"], 1);
        let it = &list[0];
        assert_eq!(it.name, "arm");
        assert_eq!((it.arch.as_str(), it.os.as_str()), ("arm64", "linux"));
        assert_eq!(it.pods, 58);
        assert_eq!(it.gpus, 1);
        assert_eq!((it.cpu.as_str(), it.memory.as_str()), ("4", "8Gi"));
        assert_eq!(it.zones, ["z1"]);
        assert_eq!(it.templates, ["arm"]);
        assert!(!it.price.is_empty());
    }

    #[test]
    fn ready_needs_cluster_templates_and_bootstrap() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("time");
        let empty = Ok(Catalog::default());
        let found = status::bootstrap_ready(
            &BootstrapState::SecretFound {
                name: "data".into(),
            },
            "ns",
        );
        let parts = [
            status::cluster_ready(None, "a", "b"),
            status::templates_ready(&empty),
            status::bootstrap_ready(
                &BootstrapState::SecretMissing {
                    name: "data".into(),
                },
                "a",
            ),
        ];
        let s = compute_status(&[], Some(1), &parts, &empty, now);
        assert_eq!(cond(&s, "ClusterReady").1, "ClusterNotFound");
        assert_eq!(cond(&s, "TemplatesReady").1, "NoTemplates");
        assert_eq!(cond(&s, "BootstrapReady").1, "BootstrapSecretNotFound");
        let ready = cond(&s, "Ready");
        assert_eq!(
            (ready.0.as_str(), ready.1.as_str()),
            ("False", "DependenciesNotReady")
        );
        assert_eq!(
            ready.2,
            "ClusterReady=False, TemplatesReady=False, BootstrapReady=False"
        );
        assert!(s["instanceTypes"].as_array().is_some_and(Vec::is_empty));

        // Broken templates are named (message cut to the condition limit) and do not block.
        let mut many: Vec<DynamicObject> = (0..200)
            .map(|i| template(&format!("bad-{i}"), "x", json!({})))
            .collect();
        many.push(template("good", "2", json!({})));
        let catalog = templates::build_catalog(&many, &CatalogSettings::default());
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "b", "namespace": "a"}, "spec": {},
            "status": {"initialization": {
                "infrastructureProvisioned": true, "controlPlaneInitialized": true}}}))
        .expect("cluster");
        let parts = [
            status::cluster_ready(Some(&cluster), "a", "b"),
            status::templates_ready(&catalog),
            found,
        ];
        let s = compute_status(&[], Some(1), &parts, &catalog, now);
        let templates = cond(&s, "TemplatesReady");
        assert_eq!(
            (templates.0.as_str(), templates.1.as_str()),
            ("True", "TemplatesExcluded")
        );
        assert!(templates.2.len() <= api::conditions::MAX_MESSAGE && templates.2.ends_with("..."));
        assert_eq!(cond(&s, "Ready").0, "True");
    }
}
