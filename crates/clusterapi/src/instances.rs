//! What the Cluster API provider has launched for this workload cluster, for
//! [`CloudProvider::list`](super::CloudProvider::list): our Machines (from the cache) and the
//! InfraMachine and bootstrap config clones no Machine owns (listed per kind and namespace),
//! each as an [`Instance`] whose annotations carry a launch plan naming it, so that
//! `delete` removes exactly it.
//!
//! Fenced (see `clusterapi::fence`): only objects labelled with our cluster id, of a Cluster
//! one of our NodeClasses references, are listed; the NodeClaim they belong to is named by its
//! UID (the object's `nodeclaim-uid` mark), never by its name — two workload clusters may both
//! have a NodeClaim `default-x7k2p`. A clone a Machine owns is left to Cluster API (deleting the
//! Machine deletes it).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use kube::api::{Api, DynamicObject, ListParams};
use kube::{Resource, ResourceExt};

use clusterapi_api::Machine;
use k8s_openapi::jiff::Timestamp;

use super::Instance;
use crate::context::Context;
use crate::fence;
use crate::machine;
use crate::plan::{Plan, TypedRef, kind_without_template};
use karpenter_core::nodeclaim::repair::Unhealthy;

/// Ours (cluster id), of a Cluster in `clusters`, not owned by a Machine.
pub(crate) fn fenced<K: Resource>(
    obj: &K,
    cluster_id: &str,
    clusters: &HashSet<(String, String)>,
) -> bool {
    let meta = obj.meta();
    let cluster = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(api::consts::labels::CLUSTER_NAME));
    let ns = meta.namespace.clone().unwrap_or_default();
    fence::cluster_of(obj) == Some(cluster_id)
        && cluster.is_some_and(|c| clusters.contains(&(ns, c.clone())))
        && !meta
            .owner_references
            .as_ref()
            .is_some_and(|rs| rs.iter().any(|r| r.kind == "Machine"))
}

/// `(namespace, name)` of the Clusters our NodeClasses reference.
fn referenced_clusters(shared: &Context) -> HashSet<(String, String)> {
    shared
        .nodeclasses
        .state()
        .iter()
        .map(|nc| {
            (
                nc.spec.cluster_ref.namespace.clone(),
                nc.spec.cluster_ref.name.clone(),
            )
        })
        .collect()
}

/// The clone kinds (group, kind): every InfrastructureMachineTemplate kind watched and every
/// bootstrap config template kind a NodeClass names, each without its `Template` suffix.
fn clone_kinds(shared: &Context) -> BTreeSet<(String, String)> {
    let mut kinds: BTreeSet<(String, String)> = shared
        .catalogs
        .template_kinds()
        .into_iter()
        .map(|(g, k)| (g, kind_without_template(&k)))
        .collect();
    for nc in shared.nodeclasses.state() {
        if let Some(r) = &nc.spec.bootstrap.config_template_ref {
            kinds.insert((r.api_group.clone(), kind_without_template(&r.kind)));
        }
    }
    kinds
}

/// The plan that names exactly `object` (namespace, Machine name, and `object` as what to
/// delete once no Machine of that name is left), as annotations.
fn plan_naming(ns: &str, machine: &str, object: TypedRef) -> BTreeMap<String, String> {
    let plan = Plan {
        namespace: ns.to_string(),
        machine: machine.to_string(),
        infrastructure: object,
        ..Plan::default()
    };
    serde_json::to_string(&plan)
        .map(|json| BTreeMap::from([(api::consts::annotations::LAUNCH_PLAN.to_string(), json)]))
        .unwrap_or_default()
}

/// A clone no Machine owns, as an instance.
fn clone_instance(obj: &DynamicObject, api_version: &str, kind: &str) -> Option<Instance> {
    let claim = obj.labels().get(api::consts::labels::NODECLAIM)?.clone();
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    Some(Instance {
        nodeclaim: claim,
        description: format!("{kind} {ns}/{name}"),
        terminating: obj.metadata.deletion_timestamp.is_some(),
        nodeclaim_uid: fence::claim_uid(obj).map(str::to_string),
        created: obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
        annotations: plan_naming(
            &ns,
            &name,
            TypedRef {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                name: name.clone(),
            },
        ),
        ..Instance::default()
    })
}

/// Every instance of ours: Machines from the cache, clones no Machine owns from the API.
pub(super) async fn list(shared: &Context) -> Result<Vec<Instance>, super::Error> {
    let clusters = referenced_clusters(shared);
    let cluster_id = shared.cluster_id.as_str();
    let machines = shared.machines.state();
    let mut found: Vec<Instance> = machines
        .iter()
        .filter(|m| fenced(m.as_ref(), cluster_id, &clusters))
        .filter_map(|m| {
            let claim = m.labels().get(api::consts::labels::NODECLAIM)?.clone();
            let ns = m.namespace().unwrap_or_default();
            let mut i = instance(
                claim,
                &Plan {
                    namespace: ns.clone(),
                    machine: m.name_any(),
                    ..Plan::default()
                },
                m,
            );
            // Deleting the Machine deletes its clones (Cluster API): the plan names only it.
            i.annotations = plan_naming(&ns, &m.name_any(), TypedRef::default());
            Some(i)
        })
        .collect();
    let namespaces: BTreeSet<&str> = clusters.iter().map(|(ns, _)| ns.as_str()).collect();
    let selector = fence::selector(cluster_id);
    for (group, kind) in clone_kinds(shared) {
        let Ok((api_version, ar)) = shared.preferred(&group, &kind).await else {
            continue;
        };
        for ns in &namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(shared.management.clone(), ns, &ar);
            // One kind that cannot be listed (not served, no RBAC) does not hide the others.
            let list = match api.list(&ListParams::default().labels(&selector)).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(kind, namespace = ns, error = %e, "listing clones failed");
                    continue;
                }
            };
            found.extend(
                list.items
                    .iter()
                    .filter(|o| fenced(*o, cluster_id, &clusters))
                    .filter_map(|o| clone_instance(o, &api_version, &kind)),
            );
        }
    }
    Ok(found)
}

/// The instance a Machine of `plan` stands for.
pub(crate) fn instance(nodeclaim: String, plan: &Plan, m: &Machine) -> Instance {
    Instance {
        nodeclaim,
        provider_id: machine::provider_id(m).map(str::to_string),
        description: format!("Machine {}/{}", plan.namespace, plan.machine),
        instance_type: plan.instance_type.clone(),
        zone: plan.zone.clone(),
        capacity_type: plan.capacity_type.clone(),
        capacity: plan.capacity.clone(),
        allocatable: plan.allocatable.clone(),
        failure: machine::infrastructure_failure(m),
        unhealthy: machine_unhealthy(m),
        terminating: m.metadata.deletion_timestamp.is_some(),
        remediated_elsewhere: None,
        nodeclaim_uid: fence::claim_uid(m).map(str::to_string),
        created: m.metadata.creation_timestamp.as_ref().map(|t| t.0),
        annotations: Default::default(),
    }
}

/// The Machine's own health signals: `NodeHealthy=False`, or a failed infrastructure; the
/// longest-held one.
pub(crate) fn machine_unhealthy(m: &Machine) -> Option<Unhealthy> {
    let conditions = m
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let mut found = Vec::new();
    if let Some(c) = api::conditions::get(conditions, "NodeHealthy")
        && c.status == api::conditions::FALSE
    {
        found.push(Unhealthy {
            condition: "NodeHealthy".into(),
            detail: format!("Machine NodeHealthy=False ({})", c.reason),
            since: c.last_transition_time.0,
        });
    }
    if let Some(why) = machine::infrastructure_failure(m) {
        let since = api::conditions::get(conditions, "InfrastructureReady")
            .map(|c| c.last_transition_time.0)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        found.push(Unhealthy {
            condition: "InfrastructureReady".into(),
            detail: format!("Machine infrastructure failed: {why}"),
            since,
        });
    }
    found.into_iter().min_by_key(|u| u.since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixture {
        cluster_id: Option<&'static str>,
        cluster: &'static str,
        owned: bool,
    }

    const BASE: Fixture = Fixture {
        cluster_id: Some("me"),
        cluster: "c1",
        owned: false,
    };

    fn object(name: &str, f: Fixture) -> DynamicObject {
        let mut labels = json!({api::consts::labels::NODECLAIM: "default-abc",
                                api::consts::labels::CLUSTER_NAME: f.cluster});
        if let Some(c) = f.cluster_id {
            labels[api::consts::labels::CLUSTER_ID] = json!(c);
        }
        let mut meta = json!({"name": name, "namespace": "ns", "labels": labels,
            "creationTimestamp": "2026-11-22T10:00:00Z",
            "annotations": {api::consts::annotations::NODECLAIM_UID: "gone"}});
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
    fn only_objects_of_ours_of_a_referenced_cluster_not_owned_by_a_machine_are_listed() {
        let objects = [
            object("ours", BASE),
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
                "owned-by-its-machine",
                Fixture {
                    owned: true,
                    ..BASE
                },
            ),
        ];
        let clusters = HashSet::from([("ns".to_string(), "c1".to_string())]);
        let listed: Vec<String> = objects
            .iter()
            .filter(|o| fenced(*o, "me", &clusters))
            .map(|o| o.name_any())
            .collect();
        assert_eq!(listed, ["ours"]);
    }

    #[test]
    fn a_clone_is_an_instance_whose_plan_names_exactly_it() {
        let obj = object("default-abc-1a2b3c4d", BASE);
        let i = clone_instance(
            &obj,
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "TestMachine",
        )
        .expect("instance");
        assert_eq!(i.nodeclaim, "default-abc");
        assert_eq!(i.nodeclaim_uid.as_deref(), Some("gone"));
        assert_eq!(i.description, "TestMachine ns/default-abc-1a2b3c4d");
        let claim = i.as_claim();
        assert!(claim.metadata.resource_version.is_none());
        let plan = Plan::of(&claim).expect("plan");
        assert_eq!(
            (plan.namespace.as_str(), plan.machine.as_str()),
            ("ns", "default-abc-1a2b3c4d")
        );
        assert_eq!(plan.infrastructure.kind, "TestMachine");
        assert_eq!(plan.infrastructure.name, "default-abc-1a2b3c4d");
    }
}
