//! Drift detection, a step of the NodeClaim lifecycle: a launched NodeClaim gets
//! `Drifted=True` with the first reason that holds, and loses the condition when none does.
//! Reasons 1–3 are Karpenter's core ones, judged here for every provider ([`core_drifted`],
//! the catalog read through the provider seam); 4–5 are the Cluster API provider's answer to
//! `CloudProvider::is_drifted` ([`provider_drifted`], [`observe`]).
//!
//! 1. `NodePoolDrifted`: the NodePool's hash ([`nodepool_hash`]) differs from the one the
//!    NodeClaim was stamped with, both of our hash version. A NodeClaim of another version
//!    (Karpenter's `v3`, an older scheme of ours) is re-stamped instead, unless it is
//!    drifted already: a new scheme never rolls a fleet.
//! 2. `RequirementsDrifted`: the NodeClaim's labels no longer satisfy the NodePool's
//!    requirements (Karpenter's strict compatibility).
//! 3. `InstanceTypeNotFound`: its instance type, or its zone/capacity-type offering, left
//!    the NodeClass's catalog (only for NodeClaims older than [`INSTANCE_TYPE_GRACE`]).
//! 4. `NodeClassDrifted`: the Kubernetes version a Machine would get now (NodeClass
//!    `version`, else the Cluster's topology or control-plane version) differs from the
//!    Machine's `spec.version`, or the NodeClass's bootstrap source is not the one launched.
//! 5. `TemplateDrifted`: the InfrastructureMachineTemplate (or bootstrap config template)
//!    cloned at launch changed its `spec` since (the launch plan records a hash of each),
//!    is gone, or is no longer selected by the NodeClass.
//!
//! Triggers: the NodeClaim, its NodePool, NodeClass, Cluster, any template change, and the
//! lifecycle's periodic re-check. The control-plane version and bootstrap template are read
//! from the API, remembered for [`LOOKUP_TTL`].

use std::time::Duration;

use api::consts::annotations::{NODEPOOL_HASH, NODEPOOL_HASH_VERSION as HASH_VERSION_KEY};
use api::consts::{conditions as types, reasons};
use api::karpenter::NodeClaimStatus;
use api::{ClusterAPINodeClass, NodeClaim, NodePool};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use templates::model::Catalog;

use super::context::{Ctx, Error, Shared};
use super::objects::bootstrap_template_hash;
use super::plan::{Plan, spec_hash};
use crate::metrics::TypeLabels;
use crate::objects::annotation;
use crate::provisioning::convert;
use crate::provisioning::nodeclaim::{NODEPOOL_HASH_VERSION, nodepool_hash};

/// A hit: the `Drifted` reason and what changed.
/// Karpenter looks for a missing instance type only on NodeClaims older than this (a new
/// one may be ahead of the catalog).
pub const INSTANCE_TYPE_GRACE: Duration = Duration::from_secs(3600);

pub use crate::cloudprovider::Drift;

fn hit(reason: &'static str, message: String) -> Option<Drift> {
    Some(Drift { reason, message })
}

/// Everything drift is judged on.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    pub claim: &'a NodeClaim,
    pub plan: &'a Plan,
    pub pool: Option<&'a NodePool>,
    pub nodeclass: Option<&'a ClusterAPINodeClass>,
    pub catalog: Option<&'a Catalog>,
    /// `spec.version` of the Machine; `None` while it is not cached.
    pub machine_version: Option<Option<&'a str>>,
    /// The version a Machine would get now (`None`: unknown).
    pub want_version: Option<&'a str>,
    /// Spec hash of the plan's InfrastructureMachineTemplate now (`None`: gone).
    pub infrastructure_template: Option<&'a str>,
    /// Spec hash of the plan's bootstrap config template now (`None`: no template used,
    /// or unknown; `Some(None)`: gone).
    pub bootstrap_template: Option<Option<&'a str>>,
    pub now: Timestamp,
}

/// The first drift reason that holds.
pub fn drifted(o: &Observed) -> Option<Drift> {
    core_drifted(o).or_else(|| provider_drifted(o))
}

/// Karpenter's core reasons, the same for every provider: the NodePool's hash and
/// requirements, and an instance type or offering gone from the provider's catalog
/// ([`CloudProvider::instance_types`](crate::cloudprovider::CloudProvider::instance_types)).
pub fn core_drifted(o: &Observed) -> Option<Drift> {
    nodepool_drifted(o)
        .or_else(|| requirements_drifted(o))
        .or_else(|| instance_type_not_found(o))
}

/// The Cluster API provider's reasons (its `is_drifted`): the NodeClass and the templates.
pub fn provider_drifted(o: &Observed) -> Option<Drift> {
    nodeclass_drifted(o).or_else(|| template_drifted(o))
}

fn nodepool_drifted(o: &Observed) -> Option<Drift> {
    let pool = o.pool?;
    let (have, version) = (
        annotation(o.claim, NODEPOOL_HASH)?,
        annotation(o.claim, HASH_VERSION_KEY)?,
    );
    let want = nodepool_hash(pool);
    (version == NODEPOOL_HASH_VERSION && have != want).then_some(())?;
    hit(
        reasons::NODEPOOL_DRIFTED,
        format!(
            "NodePool {} template changed (hash {have} -> {want})",
            pool.name_any()
        ),
    )
}

fn requirements_drifted(o: &Observed) -> Option<Drift> {
    let pool = o.pool?;
    let wanted = scheduling::Requirements::from_list(&convert::requirements(
        &pool.spec.template.spec.requirements,
    ));
    let labels = scheduling::Requirements::from_labels(o.claim.labels());
    let Err(e) = labels.compatible(&wanted, |_| false) else {
        return None;
    };
    hit(
        reasons::REQUIREMENTS_DRIFTED,
        format!(
            "labels no longer satisfy NodePool {} requirements: {e}",
            pool.name_any()
        ),
    )
}

fn instance_type_not_found(o: &Observed) -> Option<Drift> {
    let catalog = o.catalog?;
    let created = o.claim.metadata.creation_timestamp.as_ref()?.0;
    let age = Duration::try_from(o.now.duration_since(created)).ok()?;
    if age < INSTANCE_TYPE_GRACE {
        return None;
    }
    // The offering the claim was launched on: its labels (as Karpenter reads them), else
    // what the launch plan recorded.
    let labels = o.claim.labels();
    let label = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
    let p = o.plan;
    let instance_type =
        label(api::consts::labels::INSTANCE_TYPE).unwrap_or_else(|| p.instance_type.clone());
    let zone = label(api::consts::labels::ZONE).or_else(|| p.zone.clone());
    let capacity_type =
        label(api::consts::labels::CAPACITY_TYPE).unwrap_or_else(|| p.capacity_type.clone());
    if instance_type.is_empty() {
        return None;
    }
    // A size of a resizable template is offered while its bounds still contain it.
    let Some(it) = catalog.lookup(&instance_type) else {
        return hit(
            reasons::INSTANCE_TYPE_NOT_FOUND,
            format!("instance type {instance_type} is no longer offered"),
        );
    };
    let offered = it
        .offerings
        .iter()
        .any(|x| x.zone == zone && x.capacity_type == capacity_type);
    (!offered).then_some(())?;
    hit(
        reasons::INSTANCE_TYPE_NOT_FOUND,
        format!(
            "instance type {instance_type} is no longer offered in zone {} as {capacity_type}",
            zone.as_deref().unwrap_or("-"),
        ),
    )
}

fn nodeclass_drifted(o: &Observed) -> Option<Drift> {
    if let (Some(want), Some(have)) = (o.want_version, o.machine_version)
        && have != Some(want)
    {
        return hit(
            reasons::NODECLASS_DRIFTED,
            format!("Kubernetes version {} -> {want}", have.unwrap_or("(unset)")),
        );
    }
    let bootstrap = &o.nodeclass?.spec.bootstrap;
    let now = bootstrap
        .config_template_ref
        .as_ref()
        .map(|r| (r.kind.as_str(), r.name.as_str()));
    let then = o
        .plan
        .bootstrap_template
        .as_ref()
        .map(|r| (r.kind.as_str(), r.name.as_str()));
    if now != then || bootstrap.data_secret_name != o.plan.data_secret_name {
        return hit(
            reasons::NODECLASS_DRIFTED,
            format!(
                "bootstrap source changed ({} -> {})",
                source(then, o.plan.data_secret_name.as_deref()),
                source(now, bootstrap.data_secret_name.as_deref())
            ),
        );
    }
    None
}

fn source(template: Option<(&str, &str)>, secret: Option<&str>) -> String {
    match (template, secret) {
        (Some((kind, name)), _) => format!("{kind} {name}"),
        (None, Some(s)) => format!("Secret {s}"),
        (None, None) => "none".into(),
    }
}

fn template_drifted(o: &Observed) -> Option<Drift> {
    let p = o.plan;
    let it = &p.infrastructure_template;
    let Some(now) = o.infrastructure_template else {
        return hit(
            reasons::TEMPLATE_DRIFTED,
            format!("{} {} is gone", it.kind, it.name),
        );
    };
    if let Some(then) = &p.infrastructure_template_hash
        && then != now
    {
        return hit(
            reasons::TEMPLATE_DRIFTED,
            format!("{} {} spec changed since the clone", it.kind, it.name),
        );
    }
    if let Some(catalog) = o.catalog
        && !catalog
            .instance_types
            .iter()
            .flat_map(|t| &t.templates)
            .any(|t| t.kind == it.kind && t.name == it.name)
    {
        return hit(
            reasons::TEMPLATE_DRIFTED,
            format!(
                "{} {} is no longer selected by the NodeClass",
                it.kind, it.name
            ),
        );
    }
    let bt = p.bootstrap_template.as_ref()?;
    match o.bootstrap_template? {
        None => hit(
            reasons::TEMPLATE_DRIFTED,
            format!("{} {} is gone", bt.kind, bt.name),
        ),
        Some(now)
            if p.bootstrap_template_hash
                .as_deref()
                .is_some_and(|t| t != now) =>
        {
            hit(
                reasons::TEMPLATE_DRIFTED,
                format!("{} {} spec changed since the clone", bt.kind, bt.name),
            )
        }
        Some(_) => None,
    }
}

/// The hash and version to re-stamp a NodeClaim with: when its hash version is not ours
/// and it is not drifted.
pub fn restamp(claim: &NodeClaim, pool: &NodePool) -> Option<String> {
    let drifted = claim
        .status
        .as_ref()
        .is_some_and(|s| api::conditions::get(&s.conditions, types::DRIFTED).is_some());
    (annotation(claim, HASH_VERSION_KEY) != Some(NODEPOOL_HASH_VERSION) && !drifted)
        .then(|| nodepool_hash(pool))
}

/// Counts a NodeClaim that became drifted (`karpenter_nodeclaims_drifted_total{type}`), once
/// the status saying so is written.
pub fn count(ctx: &Ctx, claim: &NodeClaim, newly: Option<&'static str>) {
    if let Some(reason) = newly {
        ctx.metrics
            .nodeclaims_drifted
            .get_or_create(&TypeLabels {
                r#type: reason.into(),
                nodepool: super::plan::nodepool_of(claim),
            })
            .inc();
    }
}

/// The drift step: re-stamps the hash version when due (a metadata write; `claim` becomes
/// the written object) and sets or removes `Drifted` in `status`. Returns the reason when
/// the NodeClaim becomes drifted now (for [`count`] once written).
pub async fn reconcile(
    ctx: &Ctx,
    claim: &mut std::sync::Arc<NodeClaim>,
    status: &mut NodeClaimStatus,
) -> Result<Option<&'static str>, Error> {
    if !api::conditions::is_true(&status.conditions, types::LAUNCHED) {
        api::conditions::remove(&mut status.conditions, types::DRIFTED);
        return Ok(None);
    }
    let pool = super::plan::nodepool_of(claim);
    let pool = ctx.nodepools.get(&ObjectRef::new(&pool));
    if let Some(pool) = &pool
        && let Some(hash) = restamp(claim, pool)
    {
        let written = ctx
            .patch_claim(
                claim,
                json!({"annotations": {NODEPOOL_HASH: hash, HASH_VERSION_KEY: NODEPOOL_HASH_VERSION}}),
            )
            .await?;
        *claim = std::sync::Arc::new(written);
    }
    // Core reasons first (from the caches and the provider's catalog), then the provider's.
    let plan = Plan::of(claim).unwrap_or_default();
    let catalog = ctx.provider.instance_types(&claim.spec.node_class_ref.name);
    let core = core_drifted(&Observed {
        claim,
        plan: &plan,
        pool: pool.as_deref(),
        nodeclass: None,
        catalog: catalog.as_deref(),
        machine_version: None,
        want_version: None,
        infrastructure_template: None,
        bootstrap_template: None,
        now: Timestamp::now(),
    });
    let found = match core {
        Some(d) => Some(d),
        None => ctx.provider.is_drifted(claim).await?,
    };
    let was = api::conditions::is_true(&status.conditions, types::DRIFTED);
    let Some(d) = found else {
        api::conditions::remove(&mut status.conditions, types::DRIFTED);
        return Ok(None);
    };
    api::conditions::set(
        &mut status.conditions,
        types::DRIFTED,
        api::conditions::TRUE,
        d.reason,
        &d.message,
        None,
        Timestamp::now(),
    );
    if was {
        return Ok(None);
    }
    tracing::info!(nodeclaim = %claim.name_any(), reason = d.reason, message = %d.message, "drifted");
    Ok(Some(d.reason))
}

/// The Cluster API provider's drift reasons of a launched claim (its `is_drifted`), from the
/// caches and the API reads remembered in `lookups`.
pub async fn observe(ctx: &Shared, claim: &NodeClaim, plan: &Plan) -> Option<Drift> {
    let nodeclass = ctx
        .nodeclasses
        .get(&ObjectRef::new(&claim.spec.node_class_ref.name));
    let machine = ctx
        .machines
        .get(&ObjectRef::new(&plan.machine).within(&plan.namespace));
    let want_version = match nodeclass.as_ref().and_then(|nc| nc.spec.version.clone()) {
        Some(v) => Some(v),
        None => {
            let key = format!("cluster/{}/{}", plan.namespace, plan.cluster);
            // Unknown (Cluster not cached, control plane unreadable): no version drift now,
            // and the rest of the lifecycle goes on.
            ctx.lookups
                .get(
                    key,
                    super::objects::cluster_version(ctx, &plan.namespace, &plan.cluster),
                )
                .await
                .unwrap_or_else(|e| {
                    tracing::debug!(nodeclaim = %claim.name_any(), error = %e, "cluster version unknown");
                    None
                })
        }
    };
    let it = &plan.infrastructure_template;
    let infra = ctx
        .catalogs
        .template(it.group(), &it.kind, &plan.namespace, &it.name)
        .map(|t| spec_hash(&t));
    let bootstrap = match &plan.bootstrap_template {
        Some(bt) => ctx
            .lookups
            .get(
                format!("bootstrap/{}/{}/{}", plan.namespace, bt.kind, bt.name),
                bootstrap_template_hash(ctx, &plan.namespace, bt),
            )
            .await
            .inspect_err(|e| tracing::debug!(error = %e, "bootstrap template unknown"))
            .ok(),
        None => None,
    };
    provider_drifted(&Observed {
        claim,
        plan,
        pool: None,
        nodeclass: nodeclass.as_deref(),
        catalog: None,
        machine_version: machine.as_ref().map(|m| m.spec.version.as_deref()),
        want_version: want_version.as_deref(),
        infrastructure_template: infra.as_deref(),
        bootstrap_template: bootstrap.as_ref().map(|b| b.as_deref()),
        now: Timestamp::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeclaim::plan::TypedRef;
    use serde_json::Value;
    use templates::model::{InstanceType, Offering, PriceSource, Resources, TemplateRef};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    fn pool(zones: &[&str], team: &str) -> NodePool {
        typed(
            json!({"metadata": {"name": "default"}, "spec": {"template": {
            "metadata": {"labels": {"team": team}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"},
                     "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}]}}}}),
        )
    }

    fn claim(pool: &NodePool, version: &str, created: &str) -> NodeClaim {
        typed(
            json!({"metadata": {"name": "c", "creationTimestamp": created,
            "labels": {"karpenter.sh/nodepool": "default", "team": "a",
                       "topology.kubernetes.io/zone": "zone-b"},
            "annotations": {NODEPOOL_HASH: nodepool_hash(pool), HASH_VERSION_KEY: version}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"}, "requirements": []}}),
        )
    }

    fn nodeclass(bootstrap: Value) -> ClusterAPINodeClass {
        typed(json!({"metadata": {"name": "nc"}, "spec": {
            "clusterRef": {"namespace": "ns", "name": "c1"}, "bootstrap": bootstrap}}))
    }

    fn plan() -> Plan {
        Plan {
            instance_type: "small".into(),
            zone: Some("zone-b".into()),
            capacity_type: "on-demand".into(),
            infrastructure_template: TypedRef {
                api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
                kind: "TestMachineTemplate".into(),
                name: "small".into(),
            },
            infrastructure_template_hash: Some("h1".into()),
            data_secret_name: Some("data".into()),
            ..Plan::default()
        }
    }

    fn catalog(template: &str, zone: &str) -> Catalog {
        let tref = TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
            kind: "TestMachineTemplate".into(),
            namespace: Some("ns".into()),
            name: template.into(),
        };
        Catalog {
            instance_types: vec![InstanceType {
                name: "small".into(),
                templates: vec![tref.clone()],
                capacity: Resources::default(),
                allocatable: Resources::default(),
                labels: Default::default(),
                taints: vec![],
                offerings: vec![Offering {
                    zone: Some(zone.into()),
                    capacity_type: "on-demand".into(),
                    price: 0.1,
                    price_source: PriceSource::Default,
                    template: tref,
                    limits: Default::default(),
                    reservation_id: None,
                }],
                capacity_overlaid: false,
            }],
            ..Catalog::default()
        }
    }

    const NOW: &str = "2026-11-22T12:00:00Z";
    const OLD: &str = "2026-11-22T10:00:00Z";

    struct Case {
        pool: NodePool,
        claim: NodeClaim,
        plan: Plan,
        nodeclass: ClusterAPINodeClass,
        catalog: Catalog,
        machine_version: Option<&'static str>,
        want_version: Option<&'static str>,
        infra: Option<&'static str>,
        bootstrap: Option<Option<&'static str>>,
    }

    impl Case {
        fn new() -> Case {
            let pool = pool(&["zone-a", "zone-b"], "a");
            Case {
                claim: claim(&pool, NODEPOOL_HASH_VERSION, OLD),
                pool,
                plan: plan(),
                nodeclass: nodeclass(json!({"dataSecretName": "data"})),
                catalog: catalog("small", "zone-b"),
                machine_version: Some("v1.35.0"),
                want_version: Some("v1.35.0"),
                infra: Some("h1"),
                bootstrap: None,
            }
        }

        fn drift(&self) -> Option<&'static str> {
            drifted(&Observed {
                claim: &self.claim,
                plan: &self.plan,
                pool: Some(&self.pool),
                nodeclass: Some(&self.nodeclass),
                catalog: Some(&self.catalog),
                machine_version: Some(self.machine_version),
                want_version: self.want_version,
                infrastructure_template: self.infra,
                bootstrap_template: self.bootstrap,
                now: NOW.parse().expect("ts"),
            })
            .map(|d| d.reason)
        }
    }

    #[test]
    fn nothing_changed_is_no_drift() {
        assert_eq!(Case::new().drift(), None);
    }

    #[test]
    fn nodepool_drift_needs_equal_hash_versions() {
        let mut c = Case::new();
        c.pool = pool(&["zone-a", "zone-b"], "b");
        assert_eq!(c.drift(), Some(reasons::NODEPOOL_DRIFTED));
        // Karpenter's `v3` (or an older scheme of ours): re-stamped, not drifted.
        c.claim = claim(&pool(&["zone-a", "zone-b"], "a"), "v3", OLD);
        assert_eq!(c.drift(), None);
        assert_eq!(restamp(&c.claim, &c.pool), Some(nodepool_hash(&c.pool)));
        // Not re-stamped once drifted (that would hide the drift).
        c.claim.status = Some(typed(
            json!({"conditions": [{"type": "Drifted", "status": "True",
            "reason": "NodeClassDrifted", "message": "", "lastTransitionTime": OLD}]}),
        ));
        assert_eq!(restamp(&c.claim, &c.pool), None);
        // A limits or weight change is outside the hash.
        let mut c = Case::new();
        c.pool.spec.weight = Some(10);
        assert_eq!(c.drift(), None);
    }

    #[test]
    fn requirements_drift_when_labels_leave_the_requirements() {
        let mut c = Case::new();
        c.pool.spec.template.spec.requirements[0].values = vec!["zone-a".into()];
        let c_hash = nodepool_hash(&c.pool);
        c.claim
            .annotations_mut()
            .insert(NODEPOOL_HASH.into(), c_hash);
        assert_eq!(c.drift(), Some(reasons::REQUIREMENTS_DRIFTED));
    }

    #[test]
    fn a_missing_instance_type_or_offering_drifts_after_the_grace() {
        let mut c = Case::new();
        c.catalog = catalog("small", "zone-a");
        assert_eq!(c.drift(), Some(reasons::INSTANCE_TYPE_NOT_FOUND));
        c.claim.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-22T11:30:00Z".parse().expect("ts"),
            ));
        assert_ne!(
            c.drift(),
            Some(reasons::INSTANCE_TYPE_NOT_FOUND),
            "within the grace"
        );
        let mut c = Case::new();
        c.catalog.instance_types[0].name = "other".into();
        assert_eq!(c.drift(), Some(reasons::INSTANCE_TYPE_NOT_FOUND));
    }

    #[test]
    fn nodeclass_drift_on_version_or_bootstrap_source() {
        let mut c = Case::new();
        c.want_version = Some("v1.36.0");
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
        c.want_version = None;
        assert_eq!(c.drift(), None, "no version wanted: nothing to compare");
        let mut c = Case::new();
        c.nodeclass = nodeclass(json!({"dataSecretName": "other"}));
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
        c.nodeclass = nodeclass(json!({"configTemplateRef": {
            "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "t"}}));
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
    }

    #[test]
    fn template_drift_on_spec_change_deletion_deselection_or_bootstrap_template() {
        let mut c = Case::new();
        c.infra = Some("h2");
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED));
        c.infra = None;
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED));
        let mut c = Case::new();
        c.plan.infrastructure_template_hash = None;
        c.infra = Some("h2");
        assert_eq!(
            c.drift(),
            None,
            "a plan of an older version records no hash"
        );
        let mut c = Case::new();
        c.catalog.instance_types[0].templates[0].name = "small-v2".into();
        assert_eq!(
            c.drift(),
            Some(reasons::TEMPLATE_DRIFTED),
            "no longer selected"
        );
        let mut c = Case::new();
        c.plan.bootstrap_template = Some(TypedRef {
            api_version: "bootstrap.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmConfigTemplate".into(),
            name: "t".into(),
        });
        c.plan.bootstrap_template_hash = Some("b1".into());
        c.plan.data_secret_name = None;
        c.nodeclass = nodeclass(json!({"configTemplateRef": {
            "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "t"}}));
        c.bootstrap = Some(Some("b1"));
        assert_eq!(c.drift(), None);
        c.bootstrap = Some(Some("b2"));
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED));
        c.bootstrap = Some(None);
        assert_eq!(c.drift(), Some(reasons::TEMPLATE_DRIFTED), "gone");
    }

    #[test]
    fn the_first_reason_wins() {
        let mut c = Case::new();
        c.want_version = Some("v1.36.0");
        c.infra = Some("h2");
        assert_eq!(c.drift(), Some(reasons::NODECLASS_DRIFTED));
        c.pool = pool(&["zone-a", "zone-b"], "b");
        assert_eq!(c.drift(), Some(reasons::NODEPOOL_DRIFTED));
    }

    /// A size of a resizable template (off its grid) is offered while the template's
    /// ranges contain it; narrowed ranges drift it.
    #[test]
    fn a_size_outside_the_resizable_ranges_drifts() {
        let flex = |cpu: &str| -> Catalog {
            let t: kube::api::DynamicObject = typed(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
                "metadata": {"name": "flex", "namespace": "ns",
                    "labels": {"topology.kubernetes.io/zone": "zone-b"},
                    "annotations": {"karpenter.cluster.x-k8s.io/resizable-cpu": cpu,
                        "karpenter.cluster.x-k8s.io/resizable-memory": "4Gi-32Gi/4Gi"}},
                "spec": {"template": {"spec": {}}}}));
            templates::build_catalog(&[t], &templates::CatalogSettings::default()).expect("catalog")
        };
        let mut c = Case::new();
        c.plan.instance_type = "flex-6c-16gi".into();
        c.plan.infrastructure_template.name = "flex".into();
        c.catalog = flex("2-8/2");
        assert!(c.catalog.get("flex-6c-16gi").is_none(), "off the grid");
        assert_eq!(c.drift(), None);
        c.catalog = flex("2-4/2");
        assert_eq!(c.drift(), Some(reasons::INSTANCE_TYPE_NOT_FOUND));
    }
}
