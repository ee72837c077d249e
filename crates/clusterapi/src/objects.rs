//! Creating the objects of a recorded launch plan: the bootstrap config and the
//! InfraMachine cloned from their templates, then the Machine, all under the plan's
//! deterministic names and marked with our cluster id and the NodeClaim's UID (see
//! `cloudprovider::clusterapi::fence`).
//! AlreadyExists adopts the object when it carries this NodeClaim's UID (adding our cluster
//! id to one made before fencing); what cannot ever succeed (a template or kind gone, an
//! object rejected, a name taken by another NodeClaim or workload cluster) is a permanent
//! error; a failed Machine create rolls the clones back.

use std::collections::BTreeMap;

use api::NodeClaim;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use serde_json::json;

use super::clone::{CloneTarget, clone_template, inject_unregistered_taint};
use super::context::Context;
use super::fence::{self, Ownership};
use super::machine::{Bootstrap, MachineParams, build_machine};
use super::nodeclass::NodeClass;
use super::plan::{Plan, TypedRef, spec_hash};
use api::duration::parse_duration;
use karpenter_core::nodeclaim::error::Error;
use karpenter_core::nodeclaim::labels::nodepool_of;
use karpenter_core::objects::uid_of;
use karpenter_core::write::{Created, Writer, manager};

/// Takes over `existing` for NodeClaim `uid`: ours as it is, or one made before fencing
/// (our UID, no cluster id) once labelled with our cluster id; anything else is permanent.
async fn adopt(
    api: &Api<DynamicObject>,
    existing: &DynamicObject,
    uid: &str,
    cluster_id: &str,
) -> Result<(), Error> {
    let kind = existing
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_else(|| "object".into());
    match fence::ownership(existing, uid, cluster_id) {
        Ownership::Ours => Ok(()),
        Ownership::Adopt => {
            let out = writer(api)
                .patch(
                    existing,
                    json!({"metadata": {"labels": {api::consts::labels::CLUSTER_ID: cluster_id}}}),
                )
                .await?;
            out.required(format!("{kind} {}", fence::key(existing)))?;
            tracing::info!(object = %fence::key(existing), kind, "adopted an object made before fencing");
            Ok(())
        }
        Ownership::Foreign => Err(Error::permanent(
            "NameConflict",
            format!(
                "{kind} {} exists and belongs to another NodeClaim or workload cluster (nodeclaim uid {}, cluster id {})",
                existing.name_any(),
                fence::claim_uid(existing).unwrap_or("none"),
                fence::cluster_of(existing).unwrap_or("none"),
            ),
        )),
    }
}

/// Creates `object` unless it exists; an existing one must belong to this NodeClaim.
/// Returns whether it was created (false: adopted).
async fn create_or_adopt(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    uid: &str,
    cluster_id: &str,
) -> Result<bool, Error> {
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_else(|| "object".into());
    match writer(api).create(object).await {
        Ok(Created::Created(_)) => Ok(true),
        Ok(Created::Exists) => {
            let existing = api.get(&object.name_any()).await?;
            adopt(api, &existing, uid, cluster_id).await?;
            Ok(false)
        }
        Err(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => Err(Error::permanent(
            "MachineRejected",
            format!("{kind} {} was rejected: {}", object.name_any(), s.message),
        )),
        Err(e) => Err(e.into()),
    }
}

/// The Machine of a recorded plan, if it exists already (an earlier attempt, or a Machine
/// made before fencing that our cache does not show): adopted with its clones. Returns
/// whether it existed.
pub(super) async fn adopt_existing(ctx: &Context, plan: &Plan, uid: &str) -> Result<bool, Error> {
    let machines = ctx.machines_dynamic(&plan.namespace);
    let Some(machine) = machines.get_opt(&plan.machine).await? else {
        return Ok(false);
    };
    let unfenced = fence::ownership(&machine, uid, &ctx.cluster_id) == Ownership::Adopt;
    adopt(&machines, &machine, uid, &ctx.cluster_id).await?;
    if unfenced {
        // Its clones were made before fencing too: mark them, so that garbage collection
        // and termination recognise them.
        for r in std::iter::once(&plan.infrastructure).chain(plan.bootstrap.as_ref()) {
            let Ok(ar) = ctx.resource(&r.api_version, &r.kind).await else {
                continue;
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.management.clone(), &plan.namespace, &ar);
            if let Ok(Some(clone)) = api.get_opt(&r.name).await
                && let Err(e) = adopt(&api, &clone, uid, &ctx.cluster_id).await
            {
                tracing::warn!(object = %fence::key(&clone), error = %e, "not adopting a clone");
            }
        }
    }
    Ok(true)
}

/// The writer of the lifecycle's Cluster API objects.
fn writer(api: &Api<DynamicObject>) -> Writer<DynamicObject> {
    Writer::new(api.clone(), manager::LIFECYCLE)
}

async fn delete_quietly(api: &Api<DynamicObject>, name: &str) {
    match writer(api).delete_named(name).await {
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(name, error = %e, "rolling back a clone failed; garbage collection will retry")
        }
    }
}

/// The object `template` describes, for `target`; a template that is gone or malformed is
/// permanent (`reasons`: not found, invalid). The template is taken from the template
/// index when it holds it (the copy the plan's hash was computed from: no read per launch),
/// else read.
async fn cloned(
    ctx: &Context,
    ns: &str,
    template: &TypedRef,
    target: &CloneTarget<'_>,
    reasons: (&'static str, &'static str),
) -> Result<DynamicObject, Error> {
    // The index's copy, in the version the plan names (an older plan may name another).
    let cached = ctx
        .catalogs
        .template(template.group(), &template.kind, ns, &template.name)
        .map(|t| {
            let mut t = (*t).clone();
            t.types.get_or_insert_with(|| kube::api::TypeMeta {
                api_version: template.api_version.clone(),
                kind: template.kind.clone(),
            });
            t
        })
        .filter(|t| t.types.as_ref().map(|t| &t.api_version) == Some(&template.api_version));
    let found = match cached {
        Some(t) => t,
        None => {
            let ar = served(ctx, &template.api_version, &template.kind).await?;
            let templates: Api<DynamicObject> =
                Api::namespaced_with(ctx.management.clone(), ns, &ar);
            templates.get(&template.name).await.map_err(|e| {
                gone(e, reasons.0, || {
                    format!("{} {ns}/{} not found", template.kind, template.name)
                })
            })?
        }
    };
    clone_template(&found, target).map_err(|e| Error::permanent(reasons.1, e.to_string()))
}

/// The served resource of `apiVersion` + `kind`; a kind that is not served (its CRD gone)
/// is permanent for this launch.
async fn served(
    ctx: &Context,
    api_version: &str,
    kind: &str,
) -> Result<kube::api::ApiResource, Error> {
    ctx.resource(api_version, kind).await.map_err(|e| {
        gone(e, "KindNotServed", || {
            format!("{api_version} {kind} is not served by the management cluster")
        })
    })
}

/// A 404 as a permanent failure with `reason`; anything else as it is.
fn gone(e: kube::Error, reason: &'static str, message: impl FnOnce() -> String) -> Error {
    let e = Error::from(e);
    if e.is_not_found() {
        Error::permanent(reason, message())
    } else {
        e
    }
}

/// A clone to create: its API and the object.
type Clone = (Api<DynamicObject>, DynamicObject);

/// The plan's InfraMachine, cloned from its template (not created yet).
async fn infra_clone(
    ctx: &Context,
    plan: &Plan,
    target: &CloneTarget<'_>,
    uid: &str,
) -> Result<Clone, Error> {
    let ns = &plan.namespace;
    let mut infra = cloned(
        ctx,
        ns,
        &plan.infrastructure_template,
        target,
        ("TemplateNotFound", "TemplateInvalid"),
    )
    .await?;
    infra.annotations_mut().insert(
        api::consts::annotations::NODECLAIM_UID.into(),
        uid.to_string(),
    );
    if let Some(resize) = &plan.resize {
        // The size goes into the clone only: the template is never edited.
        if let Some(w) = resize.fields.iter().find(|w| !w.apply(&mut infra.data)) {
            return Err(Error::permanent(
                "TemplateInvalid",
                format!(
                    "{} {}: cannot set {} for the size (a value on the way is not an object)",
                    plan.infrastructure_template.kind, plan.infrastructure_template.name, w.path
                ),
            ));
        }
        infra.annotations_mut().insert(
            api::consts::annotations::RESIZED.into(),
            resize.size.annotation(),
        );
    }
    let infra_ar = served(
        ctx,
        &plan.infrastructure.api_version,
        &plan.infrastructure.kind,
    )
    .await?;
    let infras: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &infra_ar);
    Ok((infras, infra))
}

/// The plan's bootstrap config, cloned from its template (not created yet); `None` when the
/// NodeClass names a data secret instead.
async fn bootstrap_clone(
    ctx: &Context,
    plan: &Plan,
    nodeclass: &NodeClass,
    target: &CloneTarget<'_>,
    uid: &str,
) -> Result<Option<Clone>, Error> {
    let (Some(bt), Some(clone)) = (&plan.bootstrap_template, &plan.bootstrap) else {
        return Ok(None);
    };
    let ns = &plan.namespace;
    let mut config = cloned(
        ctx,
        ns,
        bt,
        target,
        ("BootstrapTemplateNotFound", "BootstrapTemplateInvalid"),
    )
    .await?;
    config.annotations_mut().insert(
        api::consts::annotations::NODECLAIM_UID.into(),
        uid.to_string(),
    );
    if bt.kind == "KubeadmConfigTemplate"
        && nodeclass.bootstrap.inject_unregistered_taint != Some(false)
    {
        inject_unregistered_taint(&mut config);
    }
    let config_ar = served(ctx, &clone.api_version, &clone.kind).await?;
    let configs: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &config_ar);
    Ok(Some((configs, config)))
}

/// Creates (or adopts) the clones together; if any fails, the others are rolled back.
async fn create_clones(clones: &[Clone], uid: &str, cluster_id: &str) -> Result<(), Error> {
    let results = futures::future::join_all(
        clones
            .iter()
            .map(|(api, object)| create_or_adopt(api, object, uid, cluster_id)),
    )
    .await;
    let Some(failed) = results.iter().position(Result::is_err) else {
        return Ok(());
    };
    for ((api, object), result) in clones.iter().zip(&results) {
        if result.is_ok() {
            delete_quietly(api, &object.name_any()).await;
        }
    }
    match results.into_iter().nth(failed) {
        Some(Err(e)) => Err(e),
        _ => Ok(()),
    }
}

/// The Machine of a plan, as it is created.
fn machine_object(
    plan: &Plan,
    nodeclass: &NodeClass,
    labels: BTreeMap<String, String>,
    uid: &str,
    version: Option<String>,
    bootstrap: Bootstrap,
) -> Result<DynamicObject, Error> {
    let d = |s: &Option<String>| {
        s.as_deref()
            .and_then(parse_duration)
            .map(|d| d.as_secs() as i64)
    };
    let mut annotations = nodeclass.machine.annotations.clone();
    annotations.insert(
        api::consts::annotations::NODECLAIM_UID.into(),
        uid.to_string(),
    );
    if let Some(resize) = &plan.resize {
        annotations.insert(
            api::consts::annotations::RESIZED.into(),
            resize.size.annotation(),
        );
    }
    build_machine(&MachineParams {
        name: plan.machine.clone(),
        namespace: plan.namespace.clone(),
        cluster_name: plan.cluster.clone(),
        version,
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
    })
}

/// The objects of a plan, the Machine at `version` (resolved and checked by the caller,
/// see `versions`); returns whether the Machine was created by this call. The clones (their
/// templates usually from the template index) are created together, then the Machine: two
/// round trips to the API server after the plan is recorded, whatever the number of
/// objects.
pub(super) async fn create_objects(
    ctx: &Context,
    claim: &NodeClaim,
    plan: &Plan,
    nodeclass: &NodeClass,
    version: Option<String>,
) -> Result<bool, Error> {
    let ns = plan.namespace.clone();
    let uid = uid_of(claim);
    let mut labels: BTreeMap<String, String> = nodeclass.machine.labels.clone();
    labels.insert(api::consts::labels::NODEPOOL.into(), nodepool_of(claim));
    labels.insert(api::consts::labels::NODECLAIM.into(), claim.name_any());
    // The template it is cloned from: what counted offerings count Machines by.
    labels.insert(
        api::consts::labels::INSTANCE_TEMPLATE.into(),
        plan.infrastructure_template.name.clone(),
    );
    labels.insert(api::consts::labels::KARPENTER_MEMBER.into(), String::new());
    labels.insert(
        api::consts::labels::CLUSTER_ID.into(),
        ctx.cluster_id.clone(),
    );
    let target = CloneTarget {
        name: &plan.machine,
        namespace: &ns,
        cluster_name: &plan.cluster,
        labels: &labels,
    };
    let bootstrap = match (
        &plan.bootstrap_template,
        &plan.bootstrap,
        &plan.data_secret_name,
    ) {
        (Some(_), Some(clone), _) => Bootstrap::ConfigRef(clone.capi_ref()),
        (_, _, Some(secret)) => Bootstrap::DataSecretName(secret.clone()),
        _ => {
            return Err(Error::Launch(format!(
                "ClusterAPINodeClass {} has no bootstrap source (configTemplateRef or dataSecretName)",
                claim.spec.node_class_ref.name
            )));
        }
    };
    let (config, infra) = futures::try_join!(
        bootstrap_clone(ctx, plan, nodeclass, &target, &uid),
        infra_clone(ctx, plan, &target, &uid),
    )?;
    let clones: Vec<Clone> = config.into_iter().chain(std::iter::once(infra)).collect();
    create_clones(&clones, &uid, &ctx.cluster_id).await?;
    let rollback = || async {
        for (api, object) in &clones {
            delete_quietly(api, &object.name_any()).await;
        }
    };
    let machine = match machine_object(plan, nodeclass, labels, &uid, version, bootstrap) {
        Ok(m) => m,
        Err(e) => {
            rollback().await;
            return Err(e);
        }
    };
    match create_or_adopt(&ctx.machines_dynamic(&ns), &machine, &uid, &ctx.cluster_id).await {
        Ok(created) => Ok(created),
        Err(e) => {
            rollback().await;
            Err(e)
        }
    }
}

/// The spec hash of a bootstrap config template (`None`: gone).
pub(super) async fn bootstrap_template_hash(
    ctx: &Context,
    ns: &str,
    template: &TypedRef,
) -> Result<Option<String>, Error> {
    let ar = ctx
        .resource(&template.api_version, &template.kind)
        .await
        .map_err(Error::from);
    let ar = match ar {
        Ok(ar) => ar,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &ar);
    Ok(api.get_opt(&template.name).await?.map(|t| spec_hash(&t)))
}
/// Deletes the object `r` names if it is this NodeClaim's (`uid`); returns whether it did.
pub(super) async fn delete_ours(
    ctx: &Context,
    ns: &str,
    r: &TypedRef,
    uid: &str,
) -> Result<bool, Error> {
    if r.kind.is_empty() {
        return Ok(false);
    }
    let ar = match ctx.resource(&r.api_version, &r.kind).await {
        Ok(ar) => ar,
        // The kind is no longer served: nothing of it can be left.
        Err(e) if karpenter_core::write::is_gone(&e) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.management.clone(), ns, &ar);
    let Some(found) = api.get_opt(&r.name).await? else {
        return Ok(false);
    };
    if fence::ownership(&found, uid, &ctx.cluster_id) == Ownership::Foreign {
        tracing::warn!(object = %fence::key(&found), kind = %r.kind,
            owner = fence::claim_uid(&found).unwrap_or("none"),
            "not deleting an object of the plan that belongs to another NodeClaim");
        return Ok(false);
    }
    if found.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    Ok(writer(&api).delete(&found).await?.written().is_some())
}
