//! Launch: one Cluster API Machine per NodeClaim, exactly once.
//!
//! 1. Choose the cheapest available compatible offering and record the plan on the NodeClaim
//!    (annotation `karpenter.cluster.x-k8s.io/launch`) before anything is created, so a
//!    restart at any line resumes the same plan instead of choosing again.
//! 2. Clone the bootstrap template (or use `dataSecretName`) and the infrastructure template
//!    under the Machine's deterministic name (the NodeClaim's), then create the Machine.
//!    AlreadyExists means a previous attempt got that far: the object is adopted when it
//!    carries this NodeClaim's UID. If the Machine cannot be created, the clones are removed.
//! 3. Write the chosen labels and the Machine annotation, then `Launched=True`.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::claim::Claim;
use super::context::{Ctx, Error, nodeclass_resource, set_condition, with_ready};
use super::offering::{choose, requests_from_quantities};
use crate::clone::{CloneTarget, clone_template, inject_unregistered_taint};
use crate::machine::{Bootstrap, MachineParams, ObjectRef as CapiRef, build_machine};
use crate::metrics::NodePoolLabels;
use crate::names;
use crate::nodeclass::{NodeClass, parse_duration};

/// A `{apiVersion, kind, name}` of an object launch created or read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypedRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl TypedRef {
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(_, v)| v)
            .unwrap_or(&self.api_version)
    }
    fn capi_ref(&self) -> CapiRef {
        CapiRef {
            api_group: self.group().to_string(),
            kind: self.kind.clone(),
            name: self.name.clone(),
        }
    }
}

/// The launch plan, recorded on the NodeClaim before any side effect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub namespace: String,
    pub machine: String,
    pub cluster: String,
    pub instance_type: String,
    pub zone: Option<String>,
    pub capacity_type: String,
    pub price: f64,
    /// The InfrastructureMachineTemplate, and the InfraMachine cloned from it.
    pub infrastructure_template: TypedRef,
    pub infrastructure: TypedRef,
    /// The bootstrap config template and its clone, when a template is used.
    pub bootstrap_template: Option<TypedRef>,
    pub bootstrap: Option<TypedRef>,
    pub data_secret_name: Option<String>,
    pub failure_domain: Option<String>,
    /// Labels the NodeClaim (and then its Node) gets from the chosen offering.
    pub labels: BTreeMap<String, String>,
    pub capacity: BTreeMap<String, String>,
    pub allocatable: BTreeMap<String, String>,
}

impl Plan {
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Option<Plan> {
        annotations
            .get(names::LAUNCH_PLAN_ANNOTATION)
            .and_then(|s| serde_json::from_str(s).ok())
    }
}

/// What the lifecycle does after launch.
pub enum Launch {
    /// Launched: go on with registration.
    Launched(Box<Plan>),
    /// The NodeClaim was deleted (nothing can be launched for it).
    Deleted,
}

fn kind_without_template(kind: &str) -> String {
    kind.strip_suffix("Template").unwrap_or(kind).to_string()
}

/// Runs launch for a NodeClaim that is not Launched yet, or returns its recorded plan.
pub async fn reconcile(ctx: &Ctx, obj: &DynamicObject, claim: &Claim) -> Result<Launch, Error> {
    if let Some(plan) = Plan::from_annotations(&claim.annotations) {
        if claim.is_true("Launched") {
            return Ok(Launch::Launched(Box::new(plan)));
        }
        return create(ctx, claim, plan).await;
    }
    // NodeClass must exist and be Ready (Karpenter deletes the NodeClaim otherwise).
    let Some(nc_obj) = ctx.nodeclasses.get(&ObjectRef::new_with(
        &claim.node_class,
        nodeclass_resource(),
    )) else {
        return refuse(
            ctx,
            obj,
            "NodeClassNotReady",
            format!("ClusterAPINodeClass {:?} not found", claim.node_class),
        )
        .await;
    };
    let nodeclass =
        NodeClass::from_json(
            &serde_json::to_value(&*nc_obj).map_err(|source| Error::Decode {
                what: "ClusterAPINodeClass".into(),
                source,
            })?,
        )
        .map_err(|source| Error::Decode {
            what: format!("ClusterAPINodeClass {}", claim.node_class),
            source,
        })?;
    if !nodeclass.readiness_reported() {
        // A new NodeClass whose status controller has not spoken yet: wait, don't refuse.
        return Err(Error::Launch(format!(
            "ClusterAPINodeClass {} has not reported readiness yet; retrying",
            nodeclass.name
        )));
    }
    let (ready, why) = nodeclass.readiness();
    if !ready {
        return refuse(
            ctx,
            obj,
            "NodeClassNotReady",
            format!("ClusterAPINodeClass {} is not ready: {why}", nodeclass.name),
        )
        .await;
    }
    let Some(catalog) = ctx.catalogs.catalog(&nodeclass.name) else {
        // The NodeClass says Ready but this replica's template caches disagree (still
        // filling, or a template just changed): retry rather than give up the claim.
        return Err(Error::Launch(format!(
            "ClusterAPINodeClass {} is Ready but its catalog is empty here; retrying",
            nodeclass.name
        )));
    };
    let requests =
        match requests_from_quantities(claim.requests.iter().map(|(k, v)| (k, v.as_str()))) {
            Ok(r) => r,
            Err(e) => return refuse(ctx, obj, "LaunchFailed", e).await,
        };
    let choice = match choose(
        &catalog,
        &claim.requirements,
        &requests,
        &ctx.unavailable,
        Instant::now(),
    ) {
        Ok(c) => c,
        Err(e) => return refuse(ctx, obj, "InsufficientCapacityError", e.to_string()).await,
    };
    let ns = nodeclass.cluster.namespace.clone();
    let template = &choice.offering.template;
    let bootstrap_template = nodeclass
        .bootstrap
        .config_template_ref
        .as_ref()
        .map(|r| TypedRef {
            api_version: String::new(), // resolved at creation (the template's served version)
            kind: r.kind.clone(),
            name: r.name.clone(),
        });
    let bootstrap_group = nodeclass
        .bootstrap
        .config_template_ref
        .as_ref()
        .map(|r| r.api_group.clone());
    let plan = Plan {
        namespace: ns.clone(),
        machine: claim.name.clone(),
        cluster: nodeclass.cluster.name.clone(),
        instance_type: choice.instance_type.name.clone(),
        zone: choice.offering.zone.clone(),
        capacity_type: choice.offering.capacity_type.clone(),
        price: choice.offering.price,
        infrastructure_template: TypedRef {
            api_version: template.api_version.clone(),
            kind: template.kind.clone(),
            name: template.name.clone(),
        },
        infrastructure: TypedRef {
            api_version: template.api_version.clone(),
            kind: kind_without_template(&template.kind),
            name: claim.name.clone(),
        },
        bootstrap_template: bootstrap_template.map(|mut t| {
            t.api_version = bootstrap_group.clone().unwrap_or_default();
            t
        }),
        bootstrap: None,
        data_secret_name: nodeclass.bootstrap.data_secret_name.clone(),
        failure_domain: choice.offering.zone.clone(),
        labels: choice.labels.clone(),
        capacity: choice
            .instance_type
            .capacity
            .to_resource_list()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
        allocatable: choice
            .instance_type
            .allocatable
            .to_resource_list()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect(),
    };
    // Record the plan first: from here on every restart resumes exactly this launch.
    let plan_json = serde_json::to_string(&plan).map_err(|source| Error::Decode {
        what: "launch plan".into(),
        source,
    })?;
    ctx.patch_claim(
        &claim.name,
        json!({"metadata": {
            "resourceVersion": obj.resource_version(),
            "annotations": {
                names::LAUNCH_PLAN_ANNOTATION: plan_json,
                names::CAPI_MACHINE_ANNOTATION: format!("{ns}/{}", claim.name),
            }
        }}),
    )
    .await?;
    create(ctx, claim, plan).await
}

/// Deletes a NodeClaim that cannot be launched, with the Karpenter event reason.
async fn refuse(
    ctx: &Ctx,
    obj: &DynamicObject,
    reason: &str,
    message: String,
) -> Result<Launch, Error> {
    tracing::info!(nodeclaim = %obj.name_any(), reason, %message, "launch refused; deleting nodeclaim");
    ctx.event(obj, EventType::Warning, reason, message.clone())
        .await;
    let claim = Claim::from_json(&serde_json::to_value(obj).map_err(|source| Error::Decode {
        what: "NodeClaim".into(),
        source,
    })?)
    .map_err(|source| Error::Decode {
        what: "NodeClaim".into(),
        source,
    })?;
    let conditions = set_condition(
        &claim.conditions,
        "Launched",
        "False",
        reason,
        &message,
        None,
        Timestamp::now(),
    );
    ctx.patch_claim_status(
        &claim.name,
        json!({"conditions": with_ready(conditions, Timestamp::now())}),
    )
    .await?;
    ctx.delete_claim(&claim.name).await?;
    Ok(Launch::Deleted)
}

/// Creates `object` unless it exists; an existing one must belong to this NodeClaim.
async fn create_or_adopt(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    uid: &str,
) -> Result<(), Error> {
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(&object.name_any()).await?;
            let owner = existing
                .annotations()
                .get(names::NODECLAIM_UID_ANNOTATION)
                .cloned();
            if owner.as_deref() == Some(uid) {
                Ok(())
            } else {
                Err(Error::Launch(format!(
                    "{} {} exists and belongs to another NodeClaim (uid {:?})",
                    object
                        .types
                        .as_ref()
                        .map(|t| t.kind.as_str())
                        .unwrap_or("object"),
                    object.name_any(),
                    owner
                )))
            }
        }
        Err(e) => Err(e.into()),
    }
}

async fn delete_quietly(api: &Api<DynamicObject>, name: &str) {
    match api.delete(name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            tracing::warn!(name, error = %e, "rolling back a clone failed; garbage collection will retry")
        }
    }
}

/// Creates (or adopts) the clones and the Machine of a recorded plan, then writes status.
async fn create(ctx: &Ctx, claim: &Claim, mut plan: Plan) -> Result<Launch, Error> {
    let started = Instant::now();
    let nodeclass = ctx
        .nodeclasses
        .get(&ObjectRef::new_with(
            &claim.node_class,
            nodeclass_resource(),
        ))
        .and_then(|o| serde_json::to_value(&*o).ok())
        .and_then(|v| NodeClass::from_json(&v).ok())
        .unwrap_or_default();
    let ns = plan.namespace.clone();
    let nodepool = claim
        .labels
        .get(names::NODEPOOL_LABEL)
        .cloned()
        .unwrap_or_default();
    let mut labels: BTreeMap<String, String> = nodeclass.machine.labels.clone();
    labels.insert(names::NODEPOOL_LABEL.into(), nodepool.clone());
    labels.insert(names::NODECLAIM_LABEL.into(), claim.name.clone());
    labels.insert(names::KARPENTER_MEMBER_LABEL.into(), String::new());
    let target = CloneTarget {
        name: &plan.machine,
        namespace: &ns,
        cluster_name: &plan.cluster,
        labels: &labels,
    };
    let uid_annotation = |o: &mut DynamicObject| {
        o.annotations_mut()
            .insert(names::NODECLAIM_UID_ANNOTATION.into(), claim.uid.clone());
    };

    // Bootstrap config from its template, if one is used.
    let mut created: Vec<(Api<DynamicObject>, String)> = Vec::new();
    let mut bootstrap = plan.data_secret_name.clone().map(Bootstrap::DataSecretName);
    if let Some(bt) = plan.bootstrap_template.clone() {
        let (api_version, ar) = ctx.preferred(&bt.api_version, &bt.kind).await?;
        let templates: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), &ns, &ar);
        let template = templates.get(&bt.name).await?;
        let mut config =
            clone_template(&template, &target).map_err(|e| Error::Launch(e.to_string()))?;
        uid_annotation(&mut config);
        if bt.kind == "KubeadmConfigTemplate"
            && nodeclass.bootstrap.inject_unregistered_taint != Some(false)
        {
            inject_unregistered_taint(&mut config);
        }
        let config_ar = ctx
            .resource(&api_version, &kind_without_template(&bt.kind))
            .await?;
        let configs: Api<DynamicObject> =
            Api::namespaced_with(ctx.management.clone(), &ns, &config_ar);
        create_or_adopt(&configs, &config, &claim.uid).await?;
        created.push((configs, plan.machine.clone()));
        let r = TypedRef {
            api_version,
            kind: kind_without_template(&bt.kind),
            name: plan.machine.clone(),
        };
        bootstrap = Some(Bootstrap::ConfigRef(r.capi_ref()));
        plan.bootstrap = Some(r);
    }
    let Some(bootstrap) = bootstrap else {
        return Err(Error::Launch(format!(
            "ClusterAPINodeClass {} has no bootstrap source (configTemplateRef or dataSecretName)",
            claim.node_class
        )));
    };

    // InfraMachine from the InfrastructureMachineTemplate.
    let it = &plan.infrastructure_template;
    let template_ar = ctx.resource(&it.api_version, &it.kind).await?;
    let templates: Api<DynamicObject> =
        Api::namespaced_with(ctx.management.clone(), &ns, &template_ar);
    let infra_result = async {
        let template = templates.get(&it.name).await?;
        let mut infra =
            clone_template(&template, &target).map_err(|e| Error::Launch(e.to_string()))?;
        uid_annotation(&mut infra);
        let infra_ar = ctx
            .resource(&plan.infrastructure.api_version, &plan.infrastructure.kind)
            .await?;
        let infras: Api<DynamicObject> =
            Api::namespaced_with(ctx.management.clone(), &ns, &infra_ar);
        create_or_adopt(&infras, &infra, &claim.uid).await?;
        Ok::<_, Error>(infras)
    }
    .await;
    let infras = match infra_result {
        Ok(api) => api,
        Err(e) => {
            for (api, name) in &created {
                delete_quietly(api, name).await;
            }
            return Err(e);
        }
    };
    created.push((infras, plan.machine.clone()));

    // The Machine.
    let d = |s: &Option<String>| {
        s.as_deref()
            .and_then(parse_duration)
            .map(|d| d.as_secs() as i64)
    };
    let mut annotations = nodeclass.machine.annotations.clone();
    annotations.insert(names::NODECLAIM_UID_ANNOTATION.into(), claim.uid.clone());
    let machine = build_machine(&MachineParams {
        name: plan.machine.clone(),
        namespace: ns.clone(),
        cluster_name: plan.cluster.clone(),
        version: match nodeclass.version.clone() {
            Some(v) => Some(v),
            None => cluster_version(ctx, &ns, &plan.cluster).await,
        },
        failure_domain: plan.failure_domain.clone(),
        bootstrap: Some(bootstrap),
        infrastructure: Some(plan.infrastructure.capi_ref()),
        labels,
        annotations,
        node_drain_timeout_seconds: d(&nodeclass.machine.node_drain_timeout),
        node_volume_detach_timeout_seconds: d(&nodeclass.machine.node_volume_detach_timeout),
        node_deletion_timeout_seconds: d(&nodeclass.machine.node_deletion_timeout),
    })
    .map_err(|source| Error::Decode {
        what: "Machine".into(),
        source,
    })?;
    if let Err(e) = create_or_adopt(&ctx.machines_api(&ns), &machine, &claim.uid).await {
        for (api, name) in &created {
            delete_quietly(api, name).await;
        }
        let now = Timestamp::now();
        let conditions = set_condition(
            &claim.conditions,
            "Launched",
            "Unknown",
            "LaunchFailed",
            &e.to_string(),
            None,
            now,
        );
        let _ = ctx
            .patch_claim_status(
                &claim.name,
                json!({"conditions": with_ready(conditions, now)}),
            )
            .await;
        ctx.metrics
            .cloudprovider_errors
            .get_or_create(&crate::metrics::ErrorLabels {
                controller: "nodeclaim.lifecycle".into(),
                method: "Create".into(),
                provider: "clusterapi".into(),
                error: e.metric_label().into(),
            })
            .inc();
        return Err(e);
    }
    ctx.metrics
        .cloudprovider_duration
        .get_or_create(&crate::metrics::MethodLabels {
            controller: "nodeclaim.lifecycle".into(),
            method: "Create".into(),
            provider: "clusterapi".into(),
        })
        .observe(started.elapsed().as_secs_f64());

    // Labels and the final plan (with the resolved bootstrap clone), then status.
    let plan_json = serde_json::to_string(&plan).map_err(|source| Error::Decode {
        what: "launch plan".into(),
        source,
    })?;
    ctx.patch_claim(
        &claim.name,
        json!({"metadata": {
            "labels": plan.labels,
            "annotations": {names::LAUNCH_PLAN_ANNOTATION: plan_json},
        }}),
    )
    .await?;
    let now = Timestamp::now();
    let conditions = set_condition(
        &claim.conditions,
        "Launched",
        "True",
        "Launched",
        "",
        None,
        now,
    );
    ctx.patch_claim_status(
        &claim.name,
        json!({
            "capacity": plan.capacity,
            "allocatable": plan.allocatable,
            "conditions": with_ready(conditions, now),
        }),
    )
    .await?;
    ctx.metrics
        .machines_launched
        .get_or_create(&NodePoolLabels { nodepool })
        .inc();
    tracing::info!(nodeclaim = %claim.name, machine = %format!("{ns}/{}", plan.machine), instance_type = %plan.instance_type,
        zone = ?plan.zone, "launched machine");
    Ok(Launch::Launched(Box::new(plan)))
}

/// The Kubernetes version of a Cluster: `spec.topology.version`, else its control plane's
/// `spec.version`; `None` when neither is known (the Machine then has no version).
async fn cluster_version(ctx: &Ctx, ns: &str, cluster: &str) -> Option<String> {
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        ctx.management.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(names::CAPI_GROUP, names::CAPI_VERSION, "Cluster"),
            "clusters",
        ),
    );
    let c = clusters.get(cluster).await.ok()?;
    if let Some(v) = c
        .data
        .pointer("/spec/topology/version")
        .and_then(|v| v.as_str())
    {
        return Some(v.to_string());
    }
    let cp = c.data.pointer("/spec/controlPlaneRef")?;
    let group = cp.get("apiGroup")?.as_str()?;
    let kind = cp.get("kind")?.as_str()?;
    let name = cp.get("name")?.as_str()?;
    let (_, ar) = ctx.preferred(group, kind).await.ok()?;
    let cps: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &ar);
    let obj = cps.get(name).await.ok()?;
    obj.data
        .pointer("/spec/version")
        .and_then(|v| v.as_str())
        .map(str::to_string)
}
