//! The ClusterAPINodeClass status controller (the catalog it summarises is
//! [`crate::catalogs`]). Conditions (computed by [`templates::status`]): ClusterReady (the Cluster exists,
//! its infrastructure is provisioned and its control plane initialized), TemplatesReady (at
//! least one instance type; broken templates are named but do not block the good ones),
//! BootstrapReady (the bootstrap template or data Secret exists), Ready (all three);
//! with `spec.inventory`, InventoryReady (its hosts can be read: [`super::availability::hosts`]; not
//! a part of Ready) and a Warning Event with its reason while it is False.
//! `status.instanceTypes` summarises the catalog ([`templates::status::summarize`]).
//! Termination (as Karpenter's NodeClass termination controller): every NodeClass carries the
//! finalizer `karpenter.cluster.x-k8s.io/termination`; a deleted NodeClass keeps it, with a
//! `WaitingOnNodeClaimTermination` event, until none of its NodeClaims is left.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use serde_json::json;
use templates::SettingsError;
use templates::model::Catalog;
use templates::status::{self, BootstrapState, ConditionValue};

use crate::catalogs::IndexCatalogs;
use api::consts::conditions::{INVENTORY_READY, NODECLASS_READY_PARTS};
use clusterapi_api::ClusterAPINodeClass;
use clusterapi_api::nodeclass::ClusterAPINodeClassStatus;
use karpenter_core::cache::Cache;
use karpenter_core::write::{Expectations, Outcome, Writer, manager};

/// The status the controller computes for one NodeClass (pure, given what was looked up):
/// `parts` (ClusterReady, TemplatesReady, BootstrapReady) set on `current`, Ready from them,
/// and the catalog's instance types.
pub(crate) fn compute_status(
    current: &[Condition],
    generation: Option<i64>,
    parts: &[ConditionValue],
    catalog: &Result<std::sync::Arc<Catalog>, SettingsError>,
    now: Timestamp,
) -> ClusterAPINodeClassStatus {
    let mut c = current.to_vec();
    for p in parts {
        api::conditions::set(
            &mut c, p.type_, p.status, p.reason, &p.message, generation, now,
        );
    }
    api::conditions::set_ready_from(&mut c, NODECLASS_READY_PARTS, generation, now);
    let instance_types = catalog
        .as_ref()
        .map(|c| templates::status::summarize(c))
        .unwrap_or_default();
    ClusterAPINodeClassStatus {
        conditions: c,
        instance_type_count: i64::try_from(instance_types.len()).unwrap_or(i64::MAX),
        instance_types,
        resize_corrections: Vec::new(),
        offerings: Vec::new(),
        learned_devices: Vec::new(),
    }
}

#[derive(Clone)]
pub(crate) struct StatusCtx {
    pub workload: Client,
    pub management: Client,
    pub catalogs: IndexCatalogs,
    pub nodeclaims: kube::runtime::reflector::Store<api::NodeClaim>,
    /// The workload cluster's Nodes (calibration of resizable templates).
    pub nodes: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
    /// The workload cluster's ResourceSlices (learned devices).
    pub slices: kube::runtime::reflector::Store<k8s_openapi::api::resource::v1::ResourceSlice>,
    pub recorder: karpenter_core::events::Recorder,
    /// The offerings' counts and backoffs (`status.offerings`, the offering gauges).
    pub offerings: super::offering_status::OfferingStatus,
    /// Our writes the cache has not shown yet: no NodeClass is decided again before.
    pub expectations: Arc<Expectations>,
    /// The NodeOverlays (their changes move the prices shown), when the feature gate is on.
    pub nodeoverlays: Option<Cache<api::NodeOverlay>>,
}

impl StatusCtx {
    fn writer(&self) -> Writer<ClusterAPINodeClass> {
        Writer::new(Api::all(self.workload.clone()), manager::NODECLASS_STATUS)
            .expecting(self.expectations.clone())
    }
}

/// How soon a NodeClass whose cached object predates our own write is looked at again.
const STALE_RETRY: Duration = Duration::from_millis(100);

/// How often a deleted NodeClass looks for its NodeClaims again.
const TERMINATION_RECHECK: Duration = Duration::from_secs(2);

/// The finalizer step: adds ours to a live NodeClass; on a deleted one, releases it once no
/// NodeClaim refers to the NodeClass. `Some(action)` when the reconcile ends here.
async fn finalize(
    obj: &ClusterAPINodeClass,
    ctx: &StatusCtx,
) -> Result<Option<Action>, StatusError> {
    let finalizer = api::consts::finalizers::NODECLASS;
    let has = obj.finalizers().iter().any(|f| f == finalizer);
    let write = |finalizers: Vec<String>| async move {
        let out = ctx
            .writer()
            .patch(obj, json!({"metadata": {"finalizers": finalizers}}))
            .await?;
        // A conflict: the newer object's watch event reconciles again.
        Ok::<_, kube::Error>(out)
    };
    if obj.metadata.deletion_timestamp.is_none() {
        if !has {
            let mut finalizers = obj.finalizers().to_vec();
            finalizers.push(finalizer.to_string());
            write(finalizers).await?;
            // The status is computed from the object this write produced (its watch event
            // reconciles again), never from the version before it.
            return Ok(Some(Action::await_change()));
        }
        return Ok(None);
    }
    if !has {
        return Ok(Some(Action::await_change()));
    }
    let name = obj.name_any();
    let mut claims: Vec<String> = ctx
        .nodeclaims
        .state()
        .iter()
        .filter(|c| {
            let r = &c.spec.node_class_ref;
            r.name == name
                && r.group == api::consts::groups::NODECLASS
                && r.kind == api::consts::groups::NODECLASS_KIND
        })
        .map(|c| c.name_any())
        .collect();
    if !claims.is_empty() {
        claims.sort();
        let shown: Vec<&str> = claims.iter().take(5).map(String::as_str).collect();
        let more = claims.len().saturating_sub(shown.len());
        let note = format!(
            "waiting on {} NodeClaim(s) to terminate: {}{}",
            claims.len(),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
        karpenter_core::nodeclaim::context::publish(
            &ctx.recorder,
            kube::Resource::object_ref(obj, &()),
            kube::runtime::events::EventType::Normal,
            api::consts::events::WAITING_ON_NODECLAIM_TERMINATION,
            note,
        )
        .await;
        return Ok(Some(Action::requeue(TERMINATION_RECHECK)));
    }
    let finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if write(finalizers).await?.written().is_some()
        && let Some(uid) = obj.uid()
    {
        // Released: the NodeClass goes, nothing more to expect of it.
        ctx.expectations.forget(&uid);
    }
    Ok(Some(Action::await_change()))
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Where the NodeClass's bootstrap data comes from, looked up in the Cluster's namespace.
/// API errors are returned (the reconcile retries); an unserved kind counts as missing.
async fn bootstrap_state(
    ctx: &StatusCtx,
    nc: &ClusterAPINodeClass,
) -> Result<BootstrapState, kube::Error> {
    let ns = nc.spec.cluster_ref.namespace.as_str();
    if let Some(r) = &nc.spec.bootstrap.config_template_ref {
        let (group, kind, name) = (r.api_group.as_str(), r.kind.as_str(), r.name.as_str());
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
    if let Some(name) = &nc.spec.bootstrap.data_secret_name {
        let api: Api<Secret> = Api::namespaced(ctx.management.clone(), ns);
        let name = name.clone();
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
    if ctx.expectations.stale_object(obj.as_ref()) {
        return Ok(Action::requeue(STALE_RETRY));
    }
    if let Some(action) = finalize(&obj, &ctx).await? {
        return Ok(action);
    }
    let stored = obj.status.clone().unwrap_or_default();
    let r = &obj.spec.cluster_ref;
    let cluster = ctx.catalogs.cluster_of(&obj);
    let catalog = ctx.catalogs.catalog_for(&obj);
    let bootstrap = bootstrap_state(&ctx, &obj).await?;
    let cluster_ready = match crate::catalogs::mismatch(ctx.catalogs.engaged.as_ref(), &obj) {
        Some(message) => status::ConditionValue {
            type_: api::consts::conditions::CLUSTER_READY,
            status: "False",
            reason: api::consts::conditions::CLUSTER_REF_MISMATCH,
            message,
        },
        None => status::cluster_ready(cluster.as_deref(), &r.namespace, &r.name),
    };
    let inventory = ctx.offerings.inventory.condition(&obj);
    let mut parts = vec![
        cluster_ready,
        status::templates_ready(&catalog),
        status::bootstrap_ready(&bootstrap, &r.namespace),
    ];
    parts.extend(inventory.clone());
    let mut status = compute_status(
        &stored.conditions,
        obj.metadata.generation,
        &parts,
        &catalog,
        Timestamp::now(),
    );
    if inventory.is_none() {
        api::conditions::remove(&mut status.conditions, INVENTORY_READY);
    }
    if let Some(c) = inventory.filter(|c| c.status == "False") {
        // Aggregated by the recorder while it repeats.
        karpenter_core::nodeclaim::context::publish(
            &ctx.recorder,
            kube::Resource::object_ref(obj.as_ref(), &()),
            kube::runtime::events::EventType::Warning,
            c.reason,
            c.message,
        )
        .await;
    }
    status.resize_corrections = resize_corrections(&ctx, &obj, &stored);
    status.learned_devices = super::learned::learned_devices(
        &obj.name_any(),
        &ctx.nodeclaims.state(),
        &ctx.slices.state(),
        &stored.learned_devices,
    );
    status.offerings = ctx.offerings.compute(
        &obj.name_any(),
        catalog.as_ref().as_ref().ok().map(|c| c.as_ref()),
        &ctx.nodeclaims.state(),
    );
    if !unchanged(&stored, &status) {
        // Conditional on the version it was computed from (a 409 requeues at once).
        if ctx.writer().patch_status(&obj, json!(status)).await? == Outcome::Conflict {
            return Ok(Action::requeue(Duration::ZERO));
        }
    }
    let next = next_look(&parts);
    Ok(Action::requeue(if status.offerings.is_empty() {
        next
    } else {
        next.min(OFFERINGS_RECHECK)
    }))
}

/// The NodeClass's resize corrections: the stored ones and the shortfalls of the Nodes of
/// its NodeClaims (see the calibration module).
fn resize_corrections(
    ctx: &StatusCtx,
    nc: &ClusterAPINodeClass,
    stored: &ClusterAPINodeClassStatus,
) -> Vec<clusterapi_api::nodeclass::ResizeCorrection> {
    let name = nc.metadata.name.as_deref().unwrap_or_default();
    let observed = ctx
        .nodeclaims
        .state()
        .into_iter()
        .filter(|c| c.spec.node_class_ref.name == name)
        .filter_map(|c| {
            let node = c.status.as_ref()?.node_name.as_deref()?;
            let node = ctx
                .nodes
                .get(&kube::runtime::reflector::ObjectRef::new(node))?;
            super::calibration::shortfall(&c, &node)
        })
        .collect::<Vec<_>>();
    super::calibration::corrections(&stored.resize_corrections, observed)
}

/// How soon a NodeClass is looked at again without a trigger. The bootstrap source (a
/// Secret, a config template) has no watch — watching Secrets would take list/watch on every
/// Secret of the management cluster — so while it is missing it is looked up every few
/// seconds: a Secret created after its NodeClass is noticed within [`BOOTSTRAP_RECHECK`].
fn next_look(parts: &[ConditionValue]) -> Duration {
    let bootstrap_missing = parts
        .iter()
        .any(|p| p.type_ == api::consts::conditions::BOOTSTRAP_READY && p.status != "True");
    if bootstrap_missing {
        BOOTSTRAP_RECHECK
    } else {
        Duration::from_secs(60)
    }
}

/// How often a NodeClass with counted or backed-off offerings is looked at again (counts
/// move with every launch; a host change triggers it at once).
const OFFERINGS_RECHECK: Duration = Duration::from_secs(10);

/// How often a missing bootstrap source is looked up again.
pub(crate) const BOOTSTRAP_RECHECK: Duration = Duration::from_secs(3);

/// Whether the stored status already says what `next` says (transition times aside).
fn unchanged(stored: &ClusterAPINodeClassStatus, next: &ClusterAPINodeClassStatus) -> bool {
    let without_conditions = |s: &ClusterAPINodeClassStatus| ClusterAPINodeClassStatus {
        conditions: Vec::new(),
        ..s.clone()
    };
    api::conditions::same_untimed(&stored.conditions, &next.conditions)
        && without_conditions(stored) == without_conditions(next)
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
/// every template, NodeOverlay, host or ResourceSlice change.
pub(crate) async fn run(
    ctx: StatusCtx,
    nodeclasses: Cache<ClusterAPINodeClass>,
    (nodeclaims, slices): (
        Cache<api::NodeClaim>,
        Cache<k8s_openapi::api::resource::v1::ResourceSlice>,
    ),
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let changes = futures::stream::unfold(ctx.catalogs.index.subscribe(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    // The prices in `status.instanceTypes` are the NodeOverlays' too.
    let overlays = match &ctx.nodeoverlays {
        Some(c) => c.subscribe().map(|_| ()).boxed(),
        None => futures::stream::pending().boxed(),
    };
    // Host changes move the offerings' counts.
    let hosts = match ctx.offerings.inventory.subscribe() {
        Some(rx) => futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        })
        .boxed(),
        None => futures::stream::pending().boxed(),
    };
    // A Node's published devices are learned: on its slices' changes, and when the NodeClaim
    // of a Node with slices changes (its slices usually come before it registers).
    let published = slices.store();
    let registered = nodeclaims
        .subscribe()
        .filter(move |c| {
            let node = c.status.as_ref().and_then(|s| s.node_name.as_deref());
            let has_slices = node.is_some_and(|n| {
                published
                    .state()
                    .iter()
                    .any(|s| api::dra::slice_of_node(s, n))
            });
            futures::future::ready(has_slices)
        })
        .map(|_| ());
    let devices = futures::stream::select(slices.subscribe().map(|_| ()), registered);
    let overlays =
        futures::stream::select(futures::stream::select(overlays, hosts), devices.boxed());
    let (tx, rx) = futures::channel::mpsc::channel::<()>(1);
    let mut tasks = karpenter_core::tasks::Tasks::default();
    tasks.spawn(async move {
        let mut tx = tx;
        let mut changes = futures::stream::select(changes.boxed(), overlays);
        while changes.next().await.is_some() {
            // Coalesce bursts of template and overlay events.
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
    use clusterapi_api::Cluster;
    use serde_json::Value;
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

    fn cond(s: &ClusterAPINodeClassStatus, t: &str) -> (String, String, String) {
        let c = s.conditions.iter().find(|c| c.type_ == t).expect("cond");
        (c.status.clone(), c.reason.clone(), c.message.clone())
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
        )
        .map(Arc::new);
        let parts = [status::templates_ready(&catalog)];
        let s = compute_status(&[], Some(1), &parts, &catalog, now);
        let list = &s.instance_types;
        assert_eq!(list.len(), 1);
        assert_eq!(s.instance_type_count, 1);
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
    fn a_status_without_instance_types_is_not_rewritten() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("time");
        let empty = Ok(Arc::new(Catalog::default()));
        let parts = [status::templates_ready(&empty)];
        let next = compute_status(&[], Some(1), &parts, &empty, now);
        // As the API server stores it and the typed cache serialises it back: the empty
        // list omitted.
        let json = serde_json::to_value(&next).expect("json");
        assert!(json.get("instanceTypes").is_none());
        let stored: ClusterAPINodeClassStatus = serde_json::from_value(json).expect("typed status");
        let later = compute_status(
            &stored.conditions,
            Some(1),
            &parts,
            &empty,
            "2026-11-22T10:05:00Z".parse().expect("time"),
        );
        assert!(unchanged(&stored, &later), "{stored:?} vs {later:?}");
    }

    #[test]
    fn ready_needs_cluster_templates_and_bootstrap() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().expect("time");
        let empty = Ok(Arc::new(Catalog::default()));
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
        assert!(s.instance_types.is_empty());

        // Broken templates are counted, the first few named in full; they do not block.
        let mut many: Vec<DynamicObject> = (0..200)
            .map(|i| template(&format!("bad-{i}"), "x", json!({})))
            .collect();
        many.push(template("good", "2", json!({})));
        let catalog = templates::build_catalog(&many, &CatalogSettings::default()).map(Arc::new);
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
        assert!(
            templates.2.len() <= api::conditions::MAX_MESSAGE,
            "{}",
            templates.2
        );
        assert!(
            templates
                .2
                .contains("200 excluded: DockerMachineTemplate ns/bad-0: "),
            "{}",
            templates.2
        );
        assert!(
            templates
                .2
                .ends_with("and 197 more (`karpenter-capi instance-types` lists them all)"),
            "{}",
            templates.2
        );
        assert_eq!(cond(&s, "Ready").0, "True");
    }
}
