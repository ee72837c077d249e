//! Drift detection, a step of the NodeClaim lifecycle: a launched NodeClaim gets
//! `Drifted=True` with the first reason that holds, and loses the condition when none does.
//! Reasons 1–3 are Karpenter's core ones, judged here for every provider ([`core_drifted`],
//! the catalog read through the provider seam); then the provider is asked
//! (`CloudProvider::is_drifted`; for Cluster API, `cloudprovider::clusterapi::drift`:
//! `NodeClassDrifted`, `TemplateDrifted`).
//!
//! 1. `NodePoolDrifted`: the NodePool's hash ([`nodepool_hash`]) differs from the one the
//!    NodeClaim was stamped with, both of our hash version. A NodeClaim of another version
//!    (Karpenter's `v3`, an older scheme of ours) is re-stamped instead, unless it is
//!    drifted already: a new scheme never rolls a fleet.
//! 2. `RequirementsDrifted`: the NodeClaim's labels no longer satisfy the NodePool's
//!    requirements (Karpenter's strict compatibility).
//! 3. `InstanceTypeNotFound`: its instance type, or its zone/capacity-type offering, left
//!    the NodeClass's catalog (only for NodeClaims older than [`INSTANCE_TYPE_GRACE`]).
//!
//! Triggers: the NodeClaim, its NodePool, NodeClass, Cluster, any template change, and the
//! lifecycle's periodic re-check.

use std::time::Duration;

use api::consts::annotations::{NODEPOOL_HASH, NODEPOOL_HASH_VERSION as HASH_VERSION_KEY};
use api::consts::{conditions as types, reasons};
use api::karpenter::NodeClaimStatus;
use api::{NodeClaim, NodePool};
use cloudprovider::InstanceTypes;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::context::{Ctx, Error};
use super::labels::{Recorded, nodepool_of};
use crate::metrics::TypeLabels;
use crate::model::convert;
use crate::objects::annotation;
use crate::provisioning::nodeclaim::{NODEPOOL_HASH_VERSION, nodepool_hash};
use cloudprovider::{Drift, Instance};

/// Karpenter looks for a missing instance type only on NodeClaims older than this (a new
/// one may be ahead of the catalog).
pub(crate) const INSTANCE_TYPE_GRACE: Duration = Duration::from_secs(3600);

/// Everything the core reasons are judged on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observed<'a> {
    pub(crate) claim: &'a NodeClaim,
    pub(crate) pool: Option<&'a NodePool>,
    pub(crate) catalog: Option<&'a InstanceTypes>,
    /// The offering the provider says (its instance), read where the claim's labels do not.
    pub(crate) recorded: &'a Recorded,
    pub(crate) now: Timestamp,
}

/// Karpenter's core reasons, the same for every provider: the NodePool's hash and
/// requirements, and an instance type or offering gone from the provider's catalog
/// ([`CloudProvider::instance_types`](cloudprovider::CloudProvider::instance_types)).
pub(crate) fn core_drifted(o: &Observed) -> Option<Drift> {
    nodepool_drifted(o)
        .or_else(|| requirements_drifted(o))
        .or_else(|| instance_type_not_found(o))
}

fn nodepool_drifted(o: &Observed) -> Option<Drift> {
    let pool = o.pool?;
    let (have, version) = (
        annotation(o.claim, NODEPOOL_HASH)?,
        annotation(o.claim, HASH_VERSION_KEY)?,
    );
    let want = nodepool_hash(pool);
    (version == NODEPOOL_HASH_VERSION && have != want).then_some(())?;
    Drift::hit(
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
    Drift::hit(
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
    // what the provider says of its instance.
    let labels = o.claim.labels();
    let label = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
    let p = o.recorded;
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
        return Drift::hit(
            reasons::INSTANCE_TYPE_NOT_FOUND,
            format!("instance type {instance_type} is no longer offered"),
        );
    };
    let offered = it
        .offerings
        .iter()
        .any(|x| x.zone == zone && x.capacity_type == capacity_type);
    (!offered).then_some(())?;
    Drift::hit(
        reasons::INSTANCE_TYPE_NOT_FOUND,
        format!(
            "instance type {instance_type} is no longer offered in zone {} as {capacity_type}",
            zone.as_deref().unwrap_or("-"),
        ),
    )
}

/// The hash and version to re-stamp a NodeClaim with: when its hash version is not ours
/// and it is not drifted.
pub(crate) fn restamp(claim: &NodeClaim, pool: &NodePool) -> Option<String> {
    let drifted = claim
        .status
        .as_ref()
        .is_some_and(|s| api::conditions::get(&s.conditions, types::DRIFTED).is_some());
    (annotation(claim, HASH_VERSION_KEY) != Some(NODEPOOL_HASH_VERSION) && !drifted)
        .then(|| nodepool_hash(pool))
}

/// Counts a NodeClaim that became drifted (`karpenter_nodeclaims_drifted_total{type}`), once
/// the status saying so is written.
pub(crate) fn count(ctx: &Ctx, claim: &NodeClaim, newly: Option<&'static str>) {
    if let Some(reason) = newly {
        ctx.metrics
            .nodeclaims_drifted
            .get_or_create(&TypeLabels {
                r#type: reason.into(),
                nodepool: nodepool_of(claim),
            })
            .inc();
    }
}

/// The drift step: re-stamps the hash version when due (a metadata write; `claim` becomes
/// the written object) and sets or removes `Drifted` in `status`. Returns the reason when
/// the NodeClaim becomes drifted now (for [`count`] once written).
pub(crate) async fn reconcile(
    ctx: &Ctx,
    claim: &mut std::sync::Arc<NodeClaim>,
    instance: Option<&Instance>,
    status: &mut NodeClaimStatus,
) -> Result<Option<&'static str>, Error> {
    if !api::conditions::is_true(&status.conditions, types::LAUNCHED) {
        api::conditions::remove(&mut status.conditions, types::DRIFTED);
        return Ok(None);
    }
    let pool = nodepool_of(claim);
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
    let recorded = Recorded::of(instance);
    let catalog = ctx.provider.instance_types(&claim.spec.node_class_ref.name);
    let core = core_drifted(&Observed {
        claim,
        pool: pool.as_deref(),
        catalog: catalog.as_deref(),
        recorded: &recorded,
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

#[cfg(test)]
mod tests {
    use super::*;
    use cloudprovider::{InstanceType, Offering, PriceSource, Resources};
    use serde_json::Value;

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

    /// The offering the provider recorded (the claim's labels name only its zone).
    fn recorded() -> Recorded {
        Recorded {
            instance_type: "small".into(),
            zone: Some("zone-b".into()),
            capacity_type: "on-demand".into(),
        }
    }

    /// Instance types of one, `small`, launched from `id`, offered on demand in `zone`.
    fn catalog(id: &str, zone: &str) -> InstanceTypes {
        InstanceTypes {
            instance_types: vec![InstanceType {
                devices: None,
                volume_limits: Default::default(),
                name: "small".into(),
                capacity: Resources::default(),
                allocatable: Resources::default(),
                labels: Default::default(),
                taints: vec![],
                offerings: vec![Offering::new(
                    id,
                    Some(zone),
                    "on-demand",
                    0.1,
                    PriceSource::Default,
                )],
                capacity_overlaid: false,
            }],
            ..InstanceTypes::default()
        }
    }

    const NOW: &str = "2026-11-22T12:00:00Z";
    const OLD: &str = "2026-11-22T10:00:00Z";

    struct Case {
        pool: NodePool,
        claim: NodeClaim,
        recorded: Recorded,
        catalog: InstanceTypes,
    }

    impl Case {
        fn new() -> Case {
            let pool = pool(&["zone-a", "zone-b"], "a");
            Case {
                claim: claim(&pool, NODEPOOL_HASH_VERSION, OLD),
                pool,
                recorded: recorded(),
                catalog: catalog("small", "zone-b"),
            }
        }

        fn drift(&self) -> Option<&'static str> {
            core_drifted(&Observed {
                claim: &self.claim,
                pool: Some(&self.pool),
                catalog: Some(&self.catalog),
                recorded: &self.recorded,
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
    fn the_first_reason_wins() {
        // The NodePool's template changed and its requirements narrowed, and the claim's
        // offering left the catalog: the hash is reported, then the requirements.
        let mut c = Case::new();
        c.pool = pool(&["zone-a"], "b");
        c.catalog = catalog("small", "zone-a");
        assert_eq!(c.drift(), Some(reasons::NODEPOOL_DRIFTED));
        let hash = nodepool_hash(&c.pool);
        c.claim.annotations_mut().insert(NODEPOOL_HASH.into(), hash);
        assert_eq!(c.drift(), Some(reasons::REQUIREMENTS_DRIFTED));
    }

    /// A size of a resizable template (off its grid) is offered while the template's
    /// ranges contain it; narrowed ranges drift it.
    #[test]
    fn a_size_outside_the_resizable_ranges_drifts() {
        let flex = |max_cpu: i64| -> InstanceTypes {
            let gib = 1 << 30;
            let sizing = cloudprovider::resize::Sizing {
                cpu: cloudprovider::resize::Range {
                    min: 2000,
                    max: max_cpu,
                    step: 2000,
                },
                memory: cloudprovider::resize::Range {
                    min: 4 * gib,
                    max: 32 * gib,
                    step: 4 * gib,
                },
                memory_per_cpu: None,
                price_per_cpu: None,
                price_per_gib: None,
                headroom_percent: 0,
            };
            let offering = Offering::new(
                "flex",
                Some("zone-b"),
                "on-demand",
                0.1,
                PriceSource::Default,
            );
            InstanceTypes::of_group(cloudprovider::resize::ResizableGroup::uniform(
                "flex", sizing, offering,
            ))
        };
        let mut c = Case::new();
        c.recorded.instance_type = "flex-6c-16gi".into();
        c.catalog = flex(8000);
        assert!(c.catalog.get("flex-6c-16gi").is_none(), "off the grid");
        assert_eq!(c.drift(), None);
        c.catalog = flex(4000);
        assert_eq!(c.drift(), Some(reasons::INSTANCE_TYPE_NOT_FOUND));
    }
}
