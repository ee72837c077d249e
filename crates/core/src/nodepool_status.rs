//! NodePool status: `resources` (capacity of the pool's NodeClaims not being deleted), `nodes`,
//! `nodeClassObservedGeneration` and the conditions ValidationSucceeded, NodeClassReady,
//! NodeRegistrationHealthy and Ready (= ValidationSucceeded ∧ NodeClassReady), as Karpenter
//! writes them. Also the `karpenter_nodepools_usage` / `_limit` gauges.
//!
//! The status is a pure function of cached objects; the loop recomputes it every tick and
//! writes only what changed, so it is idempotent and safe to restart anywhere.

use std::time::Duration;

use std::sync::Arc;

use api::conditions::{self as cond, FALSE, TRUE, UNKNOWN};
use api::consts::conditions as types;
use api::karpenter::NodePoolStatus as Status;
use api::{NodeClaim, NodePool};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;

use crate::write::{Expectations, Outcome, Writer, manager};
use serde_json::json;

use crate::metrics::{Metrics, ResourceLabels};
use crate::model::convert;
use crate::objects::{deleting, name};
use crate::provisioning::snapshot;
use crate::state::ClusterState;
use cloudprovider::{CloudProvider, NodeClassKind};

pub(crate) use crate::reports::RegistrationFailures;

/// How often the status is recomputed from the caches.
const TICK: Duration = Duration::from_secs(1);

const VALIDATION_FAILED: &str = "NodeClassRefInvalid";
const NODECLASS_NOT_FOUND: &str = "NodeClassNotFound";
const NODECLASS_NOT_READY: &str = "NodeClassNotReady";
const REGISTRATION_FAILED: &str = "RegistrationFailed";

/// What NodePool status reads of a NodeClass, whatever its kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeClassReadiness {
    pub generation: Option<i64>,
    pub conditions: Vec<Condition>,
}

/// Finds a NodeClass by its reference (group, kind, name); `None`: not found.
pub type NodeClassLookup =
    Arc<dyn Fn(&str, &str, &str) -> Option<NodeClassReadiness> + Send + Sync>;

/// The status `pool` should have, given its NodeClaims, the NodeClass kinds the provider
/// serves (`supported`, from `CloudProvider::supported_node_classes`) and its NodeClass
/// (if found).
pub(crate) fn desired(
    pool: &NodePool,
    claims: &[&NodeClaim],
    supported: &[NodeClassKind],
    nodeclass: Option<&NodeClassReadiness>,
    last_failure: Option<&(Timestamp, String)>,
    now: Timestamp,
) -> Status {
    let generation = pool.metadata.generation;
    let mut conditions = pool
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let class_ref = &pool.spec.template.spec.node_class_ref;
    let (group, kind) = (class_ref.group.as_str(), class_ref.kind.as_str());
    let served = supported.iter().any(|k| k.group == group && k.kind == kind);
    set_validation(&mut conditions, supported, (group, kind), generation, now);
    // A NodeClass of the same name does not make an unserved kind's reference ready.
    let nodeclass = if served { nodeclass } else { None };
    set_nodeclass_ready(&mut conditions, pool, served, nodeclass, generation, now);
    set_registration_healthy(&mut conditions, claims, last_failure, generation, now);
    cond::set_ready_from(
        &mut conditions,
        types::NODEPOOL_READY_PARTS,
        generation,
        now,
    );

    // What Karpenter counts (its cluster state's NodePool resources): NodeClaims being
    // deleted, or whose instance is terminating, no longer count.
    let counted: Vec<&NodeClaim> = claims.iter().copied().filter(|c| !leaving(c)).collect();
    let mut resources = scheduling::Resources::from([("nodes".to_string(), 0)]);
    for c in &counted {
        // `nodes` included, as Karpenter does (`kubectl get nodepools` shows it).
        for (k, v) in snapshot::claim_usage(c) {
            *resources.entry(k).or_insert(0) += v;
        }
    }
    Status {
        resources: convert::quantities(&resources),
        nodes: Some(i64::try_from(counted.len()).unwrap_or(i64::MAX)),
        node_class_observed_generation: nodeclass.and_then(|nc| nc.generation),
        conditions,
    }
}

/// Whether a NodeClaim is being deleted or its instance is terminating.
fn leaving(c: &NodeClaim) -> bool {
    deleting(c)
        || c.status
            .as_ref()
            .is_some_and(|s| cond::is_true(&s.conditions, types::INSTANCE_TERMINATING))
}

/// The kinds the provider serves, for messages: `Kind.group, ...`.
fn kinds(supported: &[NodeClassKind]) -> String {
    let names: Vec<String> = supported
        .iter()
        .map(|k| format!("{}.{}", k.kind, k.group))
        .collect();
    names.join(", ")
}

/// ValidationSucceeded: the nodeClassRef names a kind the provider serves.
fn set_validation(
    conditions: &mut Vec<Condition>,
    supported: &[NodeClassKind],
    (group, kind): (&str, &str),
    generation: Option<i64>,
    now: Timestamp,
) {
    if supported.iter().any(|k| k.group == group && k.kind == kind) {
        cond::set(
            conditions,
            types::VALIDATION_SUCCEEDED,
            TRUE,
            types::VALIDATION_SUCCEEDED,
            "",
            generation,
            now,
        );
    } else {
        cond::set(
            conditions,
            types::VALIDATION_SUCCEEDED,
            FALSE,
            VALIDATION_FAILED,
            &format!(
                "nodeClassRef {kind}.{group} is not served by this operator; use {}",
                kinds(supported)
            ),
            generation,
            now,
        );
    }
}

/// NodeClassReady: the referenced NodeClass (`nodeclass`, if found and of a served kind)
/// exists and is Ready.
fn set_nodeclass_ready(
    conditions: &mut Vec<Condition>,
    pool: &NodePool,
    served: bool,
    nodeclass: Option<&NodeClassReadiness>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let class_ref = &pool.spec.template.spec.node_class_ref;
    let (group, kind) = (class_ref.group.as_str(), class_ref.kind.as_str());
    let class_name = class_ref.name.as_str();
    match nodeclass {
        None if !served => cond::set(
            conditions,
            types::NODECLASS_READY,
            FALSE,
            VALIDATION_FAILED,
            &format!(
                "nodeClassRef {kind}.{group} {class_name} is not of a kind this operator serves"
            ),
            generation,
            now,
        ),
        None => cond::set(
            conditions,
            types::NODECLASS_READY,
            FALSE,
            NODECLASS_NOT_FOUND,
            &format!("{kind} {class_name} not found"),
            generation,
            now,
        ),
        Some(nc) => {
            let ready = cond::get(&nc.conditions, types::READY);
            match ready.map(|c| c.status.as_str()) {
                Some(TRUE) => cond::set(
                    conditions,
                    types::NODECLASS_READY,
                    TRUE,
                    types::NODECLASS_READY,
                    "",
                    generation,
                    now,
                ),
                status => cond::set(
                    conditions,
                    types::NODECLASS_READY,
                    if status == Some(FALSE) {
                        FALSE
                    } else {
                        UNKNOWN
                    },
                    NODECLASS_NOT_READY,
                    &format!(
                        "{kind} {class_name}: {}",
                        ready.map_or("status not reported yet", |c| c.message.as_str())
                    ),
                    generation,
                    now,
                ),
            }
        }
    };
}

/// NodeRegistrationHealthy, from the last registration of the pool's `claims` and the last
/// registration failure.
fn set_registration_healthy(
    conditions: &mut Vec<Condition>,
    claims: &[&NodeClaim],
    last_failure: Option<&(Timestamp, String)>,
    generation: Option<i64>,
    now: Timestamp,
) {
    // Karpenter: True after a NodeClaim registers, False after a registration timeout,
    // whichever happened last; Unknown before either.
    let last_registration = claims
        .iter()
        .filter_map(|c| {
            let r = cond::get(&c.status.as_ref()?.conditions, types::REGISTERED)?;
            (r.status == TRUE).then_some(r.last_transition_time.0)
        })
        .max();
    match (last_registration, last_failure) {
        (registered, Some((failed, message))) if registered.is_none_or(|r| r < *failed) => {
            cond::set(
                conditions,
                types::NODE_REGISTRATION_HEALTHY,
                FALSE,
                REGISTRATION_FAILED,
                message,
                generation,
                now,
            );
        }
        (Some(_), _) => {
            cond::set(
                conditions,
                types::NODE_REGISTRATION_HEALTHY,
                TRUE,
                types::NODE_REGISTRATION_HEALTHY,
                "",
                generation,
                now,
            );
        }
        _ if cond::get(conditions, types::NODE_REGISTRATION_HEALTHY).is_none() => {
            cond::set(
                conditions,
                types::NODE_REGISTRATION_HEALTHY,
                UNKNOWN,
                "AwaitingReconciliation",
                "no NodeClaim of this NodePool has registered yet",
                generation,
                now,
            );
        }
        _ => {}
    }
}

/// Whether `pool`'s current status differs from `status` (every field of it is ours).
fn differs(pool: &NodePool, status: &Status) -> bool {
    pool.status.as_ref() != Some(status)
}

/// What the loop reads and writes.
#[derive(Clone)]
pub(crate) struct NodePoolStatus {
    pub client: kube::Client,
    pub metrics: Metrics,
    /// The NodePools and their NodeClaims.
    pub state: ClusterState,
    /// Which NodeClass kinds count as served.
    pub provider: Arc<dyn CloudProvider>,
    /// The NodeClasses pools refer to.
    pub nodeclasses: NodeClassLookup,
    pub registration_failures: std::sync::Arc<RegistrationFailures>,
    /// Our status writes the cache has not shown yet: such a pool is not decided again.
    pub expectations: std::sync::Arc<Expectations>,
}

impl NodePoolStatus {
    /// One pass over every NodePool; returns how many statuses were written.
    pub(crate) async fn reconcile_all(&self) -> usize {
        let cluster = self.state.current();
        let writer: Writer<api::NodePool> =
            Writer::new(Api::all(self.client.clone()), manager::NODEPOOL_STATUS)
                .expecting(self.expectations.clone());
        self.expectations.retain(|uid| {
            cluster
                .nodepools
                .iter()
                .any(|p| p.metadata.uid.as_deref() == Some(uid))
        });
        let supported = self.provider.supported_node_classes();
        let mut written = 0;
        for pool in &cluster.nodepools {
            let pool_name = name(pool.as_ref());
            if self.expectations.stale_object(pool.as_ref()) {
                continue;
            }
            let r = &pool.spec.template.spec.node_class_ref;
            let nodeclass = (self.nodeclasses)(&r.group, &r.kind, &r.name);
            let pool_claims: Vec<&NodeClaim> = cluster
                .claims_of_pool(pool_name)
                .map(|(c, _)| c.as_ref())
                .collect();
            let failure = self.registration_failures.last(pool_name);
            let status = desired(
                pool,
                &pool_claims,
                &supported,
                nodeclass.as_ref(),
                failure.as_ref(),
                Timestamp::now(),
            );
            self.record_metrics(pool, &status);
            if !differs(pool, &status) {
                continue;
            }
            // Conditional on the version it was computed from: a conflict means a newer pool,
            // which the next pass decides on.
            match writer.patch_status(pool.as_ref(), json!(status)).await {
                Ok(Outcome::Written(_)) => written += 1,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(nodepool = pool_name, error = %e, "writing NodePool status failed")
                }
            }
        }
        written
    }

    fn record_metrics(&self, pool: &NodePool, status: &Status) {
        let gauge = |family: &crate::metrics::ScopedFamily<ResourceLabels, _>,
                     resources: &scheduling::Resources| {
            for (k, n) in resources {
                let value = if k == "cpu" {
                    *n as f64 / 1000.0
                } else {
                    *n as f64
                };
                let g: &prometheus_client::metrics::gauge::Gauge<
                    f64,
                    std::sync::atomic::AtomicU64,
                > = &family.get_or_create(&ResourceLabels {
                    nodepool: name(pool).to_string(),
                    resource_type: k.clone(),
                });
                g.set(value);
            }
        };
        gauge(
            &self.metrics.nodepools_usage,
            &convert::resources(&status.resources),
        );
        gauge(
            &self.metrics.nodepools_limit,
            &convert::resources(&pool.spec.limits),
        );
    }
}

/// Runs until `shutdown`.
pub(crate) async fn run(s: NodePoolStatus, shutdown: impl std::future::Future<Output = ()> + Send) {
    tokio::pin!(shutdown);
    loop {
        s.reconcile_all().await;
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudprovider::fake::FakeCloudProvider;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::Value;

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    fn pool(kind: &str) -> NodePool {
        typed(json!({
            "metadata": {"name": "default", "generation": 3},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {
                "group": "karpenter.test.sh", "kind": kind, "name": "default"}}}}
        }))
    }

    fn claim(cpu: &str, registered: bool) -> NodeClaim {
        typed(json!({
            "metadata": {"name": "c", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"resources": {"requests": {"cpu": "1"}}, "requirements": [],
                     "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
            "status": {"capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Registered", "status": if registered {"True"} else {"Unknown"},
                                       "reason": "x", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
    }

    fn nodeclass(ready: &str) -> NodeClassReadiness {
        NodeClassReadiness {
            generation: Some(7),
            conditions: vec![typed(json!(
            {"type": "Ready", "status": ready, "reason": "r", "message": "TemplatesReady=False",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}))],
        }
    }

    /// `desired` for a provider serving the fake's `TestNodeClass`.
    fn want(
        pool: &NodePool,
        claims: &[&NodeClaim],
        nodeclass: Option<&NodeClassReadiness>,
        last_failure: Option<&(Timestamp, String)>,
        now: Timestamp,
    ) -> Status {
        let supported = [FakeCloudProvider::NODE_CLASS];
        desired(pool, claims, &supported, nodeclass, last_failure, now)
    }

    #[test]
    fn a_pool_is_ready_only_for_a_kind_the_provider_serves() {
        let fake = FakeCloudProvider::default();
        let nc = nodeclass("True");
        let of_kind = |kind: &str| {
            desired(
                &pool(kind),
                &[],
                &fake.supported_node_classes(),
                Some(&nc),
                None,
                Timestamp::now(),
            )
        };
        let served = of_kind("TestNodeClass");
        assert_eq!(condition(&served, "ValidationSucceeded").status, "True");
        assert_eq!(condition(&served, "NodeClassReady").status, "True");
        assert_eq!(condition(&served, "Ready").status, "True");
        // Another kind of the same group is not the provider's: not Ready, even with a
        // Ready NodeClass of that name.
        let other = of_kind("OtherNodeClass");
        let v = condition(&other, "ValidationSucceeded");
        assert_eq!(v.status, "False");
        assert!(
            v.message.contains("TestNodeClass.karpenter.test.sh"),
            "{v:?}"
        );
        assert_eq!(condition(&other, "NodeClassReady").status, "False");
        assert_eq!(condition(&other, "Ready").status, "False");
        // The provider serving that kind makes it Ready.
        fake.state(|s| {
            s.node_classes = Some(vec![NodeClassKind {
                group: "karpenter.test.sh",
                kind: "OtherNodeClass",
            }])
        });
        assert_eq!(
            condition(&of_kind("OtherNodeClass"), "Ready").status,
            "True"
        );
        assert_eq!(
            condition(&of_kind("TestNodeClass"), "Ready").status,
            "False"
        );
    }

    fn condition<'a>(status: &'a Status, t: &str) -> &'a Condition {
        cond::get(&status.conditions, t).expect("condition")
    }

    #[test]
    fn ready_pool_sums_claims_capacity() {
        let (a, b) = (claim("4", true), claim("2500m", false));
        let s = want(
            &pool("TestNodeClass"),
            &[&a, &b],
            Some(&nodeclass("True")),
            None,
            Timestamp::now(),
        );
        assert_eq!(s.nodes, Some(2));
        assert_eq!(s.resources["cpu"].0, "6500m");
        assert_eq!(s.resources["memory"].0, "16Gi");
        assert_eq!(s.resources["pods"].0, "220");
        assert_eq!(s.resources["nodes"].0, "2");
        assert_eq!(s.node_class_observed_generation, Some(7));
        assert_eq!(condition(&s, "Ready").status, "True");
        assert_eq!(condition(&s, "Ready").observed_generation, Some(3));
        assert_eq!(condition(&s, "NodeRegistrationHealthy").status, "True");
    }

    #[test]
    fn claims_being_deleted_or_terminating_are_not_counted() {
        let live = claim("4", true);
        let mut deleted = claim("2", true);
        deleted.metadata.deletion_timestamp = Some(typed(json!("2026-01-01T00:00:00Z")));
        let mut terminating = claim("1", true);
        if let Some(s) = terminating.status.as_mut() {
            cond::set(
                &mut s.conditions,
                "InstanceTerminating",
                TRUE,
                "InstanceTerminating",
                "",
                None,
                Timestamp::now(),
            );
        }
        let s = want(
            &pool("TestNodeClass"),
            &[&live, &deleted, &terminating],
            Some(&nodeclass("True")),
            None,
            Timestamp::now(),
        );
        assert_eq!(s.nodes, Some(1));
        assert_eq!(s.resources["nodes"].0, "1");
        assert_eq!(s.resources["cpu"].0, "4");
    }

    #[test]
    fn missing_or_unready_nodeclass_and_foreign_kind_make_the_pool_not_ready() {
        let s = want(&pool("TestNodeClass"), &[], None, None, Timestamp::now());
        assert_eq!(condition(&s, "NodeClassReady").reason, NODECLASS_NOT_FOUND);
        assert_eq!(condition(&s, "Ready").status, "False");
        assert_eq!(condition(&s, "NodeRegistrationHealthy").status, "Unknown");
        assert_eq!(s.nodes, Some(0));

        let s = want(
            &pool("TestNodeClass"),
            &[],
            Some(&nodeclass("False")),
            None,
            Timestamp::now(),
        );
        let c = condition(&s, "NodeClassReady");
        assert_eq!(c.status, "False");
        assert!(c.message.contains("TemplatesReady=False"), "{c:?}");

        let s = want(
            &pool("EC2NodeClass"),
            &[],
            Some(&nodeclass("True")),
            None,
            Timestamp::now(),
        );
        assert_eq!(condition(&s, "ValidationSucceeded").status, "False");
        assert_eq!(condition(&s, "Ready").status, "False");
        let c = condition(&s, "NodeClassReady");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", VALIDATION_FAILED),
            "a NodeClass of the same name does not make another kind ready: {c:?}"
        );
    }

    #[test]
    fn registration_health_follows_the_latest_registration_or_timeout() {
        let p = pool("TestNodeClass");
        let nc = nodeclass("True");
        let registered = claim("4", true); // Registered since 2026-01-01
        let at = |s: &str| s.parse::<Timestamp>().expect("time");
        let failure = (at("2026-02-01T00:00:00Z"), "no Node registered".to_string());
        let s = want(
            &p,
            &[&registered],
            Some(&nc),
            Some(&failure),
            Timestamp::now(),
        );
        let c = condition(&s, "NodeRegistrationHealthy");
        assert_eq!(c.status, "False");
        assert_eq!(c.reason, REGISTRATION_FAILED);
        assert_eq!(c.message, "no Node registered");
        // Ready does not depend on it.
        assert_eq!(condition(&s, "Ready").status, "True");
        let old_failure = (at("2025-12-01T00:00:00Z"), "old".to_string());
        let s = want(
            &p,
            &[&registered],
            Some(&nc),
            Some(&old_failure),
            Timestamp::now(),
        );
        assert_eq!(condition(&s, "NodeRegistrationHealthy").status, "True");
    }

    #[test]
    fn unchanged_status_is_not_rewritten() {
        let mut p = pool("TestNodeClass");
        let nc = nodeclass("True");
        let s = want(&p, &[], Some(&nc), None, Timestamp::now());
        assert!(differs(&p, &s));
        p.status = Some(s);
        let again = want(&p, &[], Some(&nc), None, Timestamp::now());
        assert!(!differs(&p, &again), "{again:?}");
    }
}
