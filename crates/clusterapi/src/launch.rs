//! Launch: one Cluster API Machine per NodeClaim, exactly once.
//!
//! 1. Choose the cheapest available compatible offering and hand the whole plan back to the
//!    core to record on the NodeClaim (`Created::Record`: annotation
//!    `karpenter.cluster.x-k8s.io/launch`, with the deterministic names of every object it
//!    will create, and the offering's labels; the core writes them with its finalizer in one
//!    write) before anything is created: a restart at any line resumes the same plan.
//! 2. Clone the bootstrap template (or use `dataSecretName`) and the infrastructure template
//!    under the Machine's deterministic name (the NodeClaim's plus a hash of the cluster id,
//!    see `names::object_name`), then create the Machine (`objects`). AlreadyExists means a
//!    previous attempt got that far: the object is adopted when it carries this NodeClaim's
//!    UID (see `fence`). If the Machine cannot be created, the clones are removed.
//!    Before anything is created, Cluster API's preflight checks (`versions`, `preflight`):
//!    a failing one holds the launch (`Held`, retried when the control plane changes).
//! 3. `Launched=True` is written by the lifecycle once the Machine has a providerID (the
//!    infrastructure exists), in the same status write as whatever else changed.

use std::time::Instant;

use api::NodeClaim;
use api::consts::reasons;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::context::{Context, nodeclass_of};
use super::fence::{self, Ownership};
use super::names;
use super::nodeclass::NodeClass;
use super::objects::bootstrap_template_hash;
use super::offering::{Choice, NoOffering, Requirement, choose, requests_from_quantities};
use super::plan::{Plan, PlanSize, TypedRef, kind_without_template, spec_hash};
use crate::availability::counts::{LaunchState, OfferingCounts};
use cloudprovider::{Created, Error as ProviderError, Intent, Retry};
use karpenter_core::metrics::NodePoolLabels;
use karpenter_core::nodeclaim::error::Error;
use karpenter_core::nodeclaim::labels::nodepool_of;
use karpenter_core::objects::uid_of;

/// Runs launch for a NodeClaim: plans it (once: the plan comes back for the core to record
/// on the claim), then makes sure the Machine of the recorded plan exists.
pub(crate) async fn reconcile(ctx: &Context, claim: &NodeClaim) -> Result<Created, Error> {
    let uid = uid_of(claim);
    let Some(plan) = Plan::of(claim) else {
        let plan = match plan(ctx, claim).await? {
            Planned::Plan(p) => *p,
            Planned::Refused(reason, message) => return Err(Error::permanent(reason, message)),
        };
        // Recorded first: from then on every restart resumes exactly this launch.
        let plan_json = serde_json::to_string(&plan).map_err(|source| Error::Decode {
            what: "launch plan".into(),
            source,
        })?;
        return Ok(Created::Record(Intent {
            labels: plan.labels.clone(),
            annotations: [
                (api::consts::annotations::LAUNCH_PLAN.to_string(), plan_json),
                (
                    api::consts::annotations::MACHINE.to_string(),
                    format!("{}/{}", plan.namespace, plan.machine),
                ),
            ]
            .into(),
        }));
    };
    let cached = ctx
        .machines
        .get(&ObjectRef::new(&plan.machine).within(&plan.namespace));
    if let Some(m) = &cached
        && fence::ownership(m.as_ref(), &uid, &ctx.cluster_id) == Ownership::Foreign
    {
        // A plan copied from another NodeClaim (re-applied under another name, or restored
        // from a backup with a new UID): that Machine is not ours.
        return Err(Error::permanent(
            "NameConflict",
            format!(
                "Machine {}/{} of the launch plan belongs to another NodeClaim (uid {})",
                plan.namespace,
                plan.machine,
                fence::claim_uid(m.as_ref()).unwrap_or("none")
            ),
        ));
    }
    if cached.is_some() || ctx.launched.contains(&uid) {
        return Ok(Created::Launched);
    }
    if super::objects::adopt_existing(ctx, &plan, &uid).await? {
        ctx.launched.insert(&uid);
        return Ok(Created::Launched);
    }
    // Cluster API's preflight checks, as a MachineSet runs them before it creates a
    // Machine: a failing one holds the launch (nothing is created) until the control plane
    // changes (see `versions`).
    let nodeclass = nodeclass_of(ctx, claim).unwrap_or_default();
    let version =
        super::versions::launch_version(ctx, claim, &nodeclass, &plan.namespace, &plan.cluster)
            .await?;
    create(ctx, claim, &plan, &nodeclass, version).await?;
    Ok(Created::Launched)
}

enum Planned {
    Plan(Box<Plan>),
    /// Nothing can be launched: (event reason, message).
    Refused(&'static str, String),
}

/// The bootstrap config template a plan clones, its clone (named `object`, in the served
/// version resolved now so that the plan names it) and the template's spec hash.
async fn bootstrap_refs(
    ctx: &Context,
    nodeclass: &NodeClass,
    ns: &str,
    object: &str,
) -> Result<(Option<TypedRef>, Option<TypedRef>, Option<String>), Error> {
    // The bootstrap clone's served version is resolved now, so the plan names it.
    let (bootstrap_template, bootstrap) = match &nodeclass.bootstrap.config_template_ref {
        Some(r) => {
            let (api_version, _) = ctx.preferred(&r.api_group, &r.kind).await?;
            (
                Some(TypedRef {
                    api_version: api_version.clone(),
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                }),
                Some(TypedRef {
                    api_version,
                    kind: kind_without_template(&r.kind),
                    name: object.to_string(),
                }),
            )
        }
        None => (None, None),
    };
    let bootstrap_template_hash = match &bootstrap_template {
        Some(bt) => bootstrap_template_hash(ctx, ns, bt).await?,
        None => None,
    };
    Ok((bootstrap_template, bootstrap, bootstrap_template_hash))
}

/// The resource requests of a claim, parsed (a message naming the bad one otherwise).
fn claim_requests(claim: &NodeClaim) -> Result<templates::model::Resources, String> {
    let requests = karpenter_core::objects::claim_requests(claim);
    requests_from_quantities(requests.iter().map(|(k, v)| (k, v.as_str())))
}

/// Hub mode: a tenant's NodeClass naming another tenant's Cluster launches nothing.
fn foreign_cluster(ctx: &Context, nodeclass: &str) -> Option<Planned> {
    let nc = ctx
        .nodeclasses
        .get(&kube::runtime::reflector::ObjectRef::new(nodeclass))?;
    let why = ctx.catalogs.cluster_ref_mismatch(&nc)?;
    Some(Planned::Refused(
        api::consts::conditions::CLUSTER_REF_MISMATCH,
        format!("ClusterAPINodeClass {nodeclass}: {why}"),
    ))
}

/// The claim's NodeClass when it may launch: it exists, names the engaged Cluster and is
/// Ready (Karpenter deletes the NodeClaim otherwise: `Ok(Err(refusal))`); `Err` to retry.
fn admitted(ctx: &Context, claim: &NodeClaim) -> Result<Result<NodeClass, Planned>, Error> {
    // NodeClass must exist and be Ready (Karpenter deletes the NodeClaim otherwise).
    let Some(nodeclass) = nodeclass_of(ctx, claim) else {
        return Ok(Err(Planned::Refused(
            api::consts::events::NODECLASS_NOT_READY,
            format!(
                "ClusterAPINodeClass {} not found",
                claim.spec.node_class_ref.name
            ),
        )));
    };
    if let Some(refused) = foreign_cluster(ctx, &nodeclass.name) {
        return Ok(Err(refused));
    }
    if !nodeclass.readiness_reported() {
        // A new NodeClass whose status controller has not spoken yet: wait, don't refuse.
        return Err(Error::Launch(format!(
            "ClusterAPINodeClass {} has not reported readiness yet; retrying",
            nodeclass.name
        )));
    }
    let (ready, why) = nodeclass.readiness();
    if !ready {
        return Ok(Err(Planned::Refused(
            api::consts::events::NODECLASS_NOT_READY,
            format!("ClusterAPINodeClass {} is not ready: {why}", nodeclass.name),
        )));
    }
    Ok(Ok(nodeclass))
}

/// Chooses the offering and names everything launch will create.
async fn plan(ctx: &Context, claim: &NodeClaim) -> Result<Planned, Error> {
    let name = claim.name_any();
    let nodeclass = match admitted(ctx, claim)? {
        Ok(nodeclass) => nodeclass,
        Err(refused) => return Ok(refused),
    };
    // As the core planned on it: with the NodeOverlays applied (their prices choose the
    // offering, their capacity fits the requests and is the claim's).
    let Some(catalog) = ctx.catalogs.overlaid(&nodeclass.name) else {
        // The NodeClass says Ready but this replica's template caches disagree (still
        // filling, or a template just changed): retry rather than give up the claim.
        return Err(Error::Launch(format!(
            "ClusterAPINodeClass {} is Ready but its catalog is empty here; retrying",
            nodeclass.name
        )));
    };
    let requests = match claim_requests(claim) {
        Ok(r) => r,
        Err(e) => return Ok(Planned::Refused(reasons::LAUNCH_FAILED, e)),
    };
    // A shrunk claim names a size of a resizable template that may be off the grid.
    let catalog = catalog.with_sizes(
        claim
            .spec
            .requirements
            .iter()
            .filter(|r| r.key == api::consts::labels::INSTANCE_TYPE)
            .flat_map(|r| r.values.iter().map(String::as_str)),
    );
    let choice = match choice(ctx, claim, &catalog, &requests) {
        Ok(c) => c,
        Err(e) => {
            return Ok(Planned::Refused(
                api::consts::events::INSUFFICIENT_CAPACITY_ERROR,
                e.to_string(),
            ));
        }
    };
    let ns = nodeclass.cluster.namespace.clone();
    let template = &templates::model::launched_from(choice.offering);
    // One name for the Machine and its clones, unique per workload cluster (see
    // `cloudprovider::clusterapi::fence`).
    let object = names::object_name(&name, &ctx.cluster_id);
    let (bootstrap_template, bootstrap, bootstrap_template_hash) =
        bootstrap_refs(ctx, &nodeclass, &ns, &object).await?;
    // What is cloned, for drift detection: a hash of each template's spec. (A template
    // edited between now and the clone shows as drift once: replaced, never missed.)
    let template_obj = ctx
        .catalogs
        .template(template.group(), &template.kind, &ns, &template.name);
    let infrastructure_template_hash = template_obj.as_ref().map(|t| spec_hash(t));
    let resize = plan_size(
        &catalog,
        &choice.instance_type.name,
        template_obj.as_deref(),
    );
    let resource_list = |r: &templates::model::Resources| {
        r.to_resource_list()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()
    };
    Ok(Planned::Plan(Box::new(Plan {
        namespace: ns,
        machine: object.clone(),
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
            name: object,
        },
        infrastructure_template_hash,
        bootstrap_template,
        bootstrap,
        bootstrap_template_hash,
        data_secret_name: nodeclass.bootstrap.data_secret_name.clone(),
        failure_domain: choice.offering.zone.clone(),
        labels: choice.labels.clone(),
        capacity: resource_list(&choice.instance_type.capacity),
        allocatable: resource_list(&choice.instance_type.allocatable),
        resize,
    })))
}

/// The offering to launch `claim` on: compatible, fitting `requests`, not backed off, with
/// count left (as the caches hold them now, without the unit this claim holds itself).
fn choice<'a>(
    ctx: &Context,
    claim: &NodeClaim,
    catalog: &'a templates::model::Catalog,
    requests: &templates::model::Resources,
) -> Result<Choice<'a>, NoOffering> {
    let counts = OfferingCounts::new(
        &ctx.nodeclaims.state(),
        &ctx.machines.state(),
        k8s_openapi::jiff::Timestamp::now(),
        ctx.settings.count_staleness,
    )
    .with_hosts(ctx.inventory.tallies())
    .launching(claim);
    let state = LaunchState {
        unavailable: &ctx.unavailable,
        counts: &counts,
        now: Instant::now(),
    };
    choose(catalog, &requirements(claim), requests, &|it, o| {
        state.skip(catalog, it, o)
    })
}

/// The requirements of a NodeClaim in the form offering selection reads.
fn requirements(claim: &NodeClaim) -> Vec<Requirement> {
    claim
        .spec
        .requirements
        .iter()
        .map(|r| Requirement {
            key: r.key.clone(),
            operator: serde_json::to_value(r.operator)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            values: r.values.clone(),
        })
        .collect()
}

/// Creates (or adopts) the clones and the Machine of a recorded plan.
async fn create(
    ctx: &Context,
    claim: &NodeClaim,
    plan: &Plan,
    nodeclass: &NodeClass,
    version: Option<String>,
) -> Result<(), Error> {
    let result = super::objects::create_objects(ctx, claim, plan, nodeclass, version).await;
    let uid = uid_of(claim);
    match result {
        Ok(created) => {
            ctx.launched.insert(&uid);
            if created {
                ctx.metrics
                    .machines_launched
                    .get_or_create(&NodePoolLabels {
                        nodepool: nodepool_of(claim),
                    })
                    .inc();
                tracing::info!(nodeclaim = %claim.name_any(), machine = %format!("{}/{}", plan.namespace, plan.machine),
                    instance_type = %plan.instance_type, zone = plan.zone.as_deref().unwrap_or("-"), "launched machine");
            }
            Ok(())
        }
        Err(e) if matches!(e, Error::Permanent { .. }) => Err(e),
        Err(e) => {
            if rejected(&e) {
                // The API server refused the objects of this offering (a quota, an admission
                // webhook): other claims and the scheduler skip it for a while.
                let hold = ctx.unavailable.mark(
                    crate::availability::unavailable::OfferingKey::of_plan(plan),
                    e.to_string(),
                    Instant::now(),
                );
                tracing::info!(nodeclaim = %claim.name_any(), template = %plan.infrastructure_template.name,
                    hold_seconds = hold.as_secs(), "offering backed off after a refused create");
            }
            // The core records `Launched=Unknown` (`LaunchFailed`) with the message.
            if e.is_conflict() {
                return Err(e);
            }
            Err(Error::Provider(ProviderError::retryable(Retry::Launch, e)))
        }
    }
}

/// A create the API server refused for what it is (forbidden by a quota or policy, invalid,
/// rejected by a webhook), not for a passing condition (conflict, timeout, unavailable).
fn rejected(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422))
}

/// The size a resizable instance type `name` launches at, with where it goes in the
/// InfraMachine cloned from `template` (`None`: not a size of a resizable group).
fn plan_size(
    catalog: &templates::model::Catalog,
    name: &str,
    template: Option<&kube::api::DynamicObject>,
) -> Option<PlanSize> {
    let (group, size) = catalog.resizable_of(name)?;
    let data = template.map_or(&serde_json::Value::Null, |t| &t.data);
    Some(PlanSize {
        size,
        fields: catalog
            .resize_fields
            .get(&group.base)
            .map(|f| f.writes(size, data))
            .unwrap_or_default(),
    })
}
