//! Pure: a [`Cluster`] (the cluster state's join, or one built from files by `simulate`)
//! → the solver's input. Shared by the provisioner loop, disruption and `simulate`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use api::consts::conditions as types;
use api::{NodeClaim, NodePool};
use cloudprovider::InstanceTypes;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::model::convert;
use crate::model::convert::Availability;
use crate::objects::{claim_condition, claim_node_name, deleting, name};
use crate::state::Cluster;

/// Result of one snapshot: the solver input, the NodePool objects by name and the
/// catalog each pool's instance types came from.
pub struct Snapshot {
    pub input: scheduling::Input,
    pub pools: BTreeMap<String, Arc<NodePool>>,
    pub catalogs: BTreeMap<String, Arc<InstanceTypes>>,
}

impl Snapshot {
    /// The names of the solver's nodes in flight (NodeClaims launching, Nodes not
    /// initialized): a pod placed there waits for them.
    pub fn in_flight(&self) -> HashSet<&str> {
        self.input
            .nodes
            .iter()
            .filter(|n| n.state == scheduling::NodeState::InFlight)
            .map(|n| n.name.as_str())
            .collect()
    }

    /// The NodeClaim to create for a claim the solver planned on one of this snapshot's
    /// pools (`None`: not one of them).
    pub fn nodeclaim(&self, claim: &scheduling::NewNodeClaim) -> Option<NodeClaim> {
        let pool = self.pools.get(&claim.node_pool)?;
        let catalog = self.catalogs.get(&claim.node_pool).map(|c| c.as_ref());
        Some(super::nodeclaim::nodeclaim(pool, claim, catalog))
    }
}

fn add(into: &mut scheduling::Resources, r: &scheduling::Resources) {
    for (k, v) in r {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

/// Builds the solver input: the Nodes with room and the NodeClaims in flight of `cluster`,
/// `nodepools` (those of `cluster` to launch from; static ones never are) and the `pending`
/// pods.
/// `catalog(nodeclass)` gives a NodeClass's instance types (with each offering's availability
/// and count as the provider marked them, e.g. not ones that just failed to launch);
/// `offerings` says whether the plan reads those or ignores them.
pub fn build(
    cluster: &Cluster,
    nodepools: &[Arc<NodePool>],
    pending: &[Arc<Pod>],
    catalog: &dyn Fn(&str) -> Option<Arc<InstanceTypes>>,
    offerings: Availability,
) -> Snapshot {
    // A NodeClass's catalog is asked for once per build, not once per node.
    let seen: RefCell<HashMap<String, Option<Arc<InstanceTypes>>>> = RefCell::default();
    let once = |nodeclass: &str| {
        seen.borrow_mut()
            .entry(nodeclass.to_string())
            .or_insert_with(|| catalog(nodeclass))
            .clone()
    };
    let type_limits =
        |labels: Option<&BTreeMap<String, String>>| instance_type_limits(cluster, labels, &once);
    let mut nodes: Vec<scheduling::ExistingNode> = cluster
        .nodes
        .iter()
        .filter(|n| cluster.has_room(n) && !deleting(n.as_ref()))
        .map(|n| existing_node(cluster, n, &type_limits))
        .collect();
    nodes.extend(
        cluster
            .in_flight()
            .map(|c| in_flight_node(cluster, c, &type_limits)),
    );
    let mut node_pools = Vec::new();
    let mut pools = BTreeMap::new();
    let mut catalogs = BTreeMap::new();
    for p in nodepools {
        // A static pool (`replicas`) launches only through its own loop; its Nodes and
        // NodeClaims are existing capacity above.
        if deleting(p.as_ref()) || p.spec.replicas.is_some() {
            continue;
        }
        let mut pool = convert::node_pool(p);
        let mut usage = scheduling::Resources::new();
        for (c, _) in cluster.claims_of_pool(&pool.name) {
            add(&mut usage, &claim_usage(c));
        }
        pool.usage = usage;
        if let Some(catalog) = once(&p.spec.template.spec.node_class_ref.name) {
            pool.instance_types = catalog
                .instance_types
                .iter()
                .map(|it| convert::instance_type(it, offerings))
                .collect();
            catalogs.insert(pool.name.clone(), catalog);
        }
        pools.insert(pool.name.clone(), Arc::clone(p));
        node_pools.push(pool);
    }
    Snapshot {
        input: scheduling::Input {
            node_pools,
            nodes,
            daemonsets: cluster
                .daemonsets
                .iter()
                .map(|d| convert::daemonset(d))
                .collect(),
            pods: pending
                .iter()
                .map(|p| {
                    let mut model = convert::pod(p);
                    crate::model::volumes::apply(p, cluster.volumes(), &mut model);
                    model
                })
                .collect(),
            min_values_policy: Default::default(),
        },
        pools,
        catalogs,
    }
}

/// Requests and the scheduling model of the pods bound to `node` (by name), with the
/// volumes they attach.
fn bound(cluster: &Cluster, node: &str) -> (scheduling::Resources, Vec<scheduling::BoundPod>) {
    cluster
        .bound(node)
        .map(|b| {
            let pods = b
                .pods
                .iter()
                .map(|p| {
                    let mut model = convert::bound_pod(p).1;
                    model.volumes = crate::model::volumes::uses(p, cluster.volumes());
                    model
                })
                .collect();
            (b.requests.clone(), pods)
        })
        .unwrap_or_default()
}

/// The attach limits an instance type declares, for a node or NodeClaim with `labels`
/// (its NodePool's NodeClass catalog, its instance-type label): what holds until its
/// CSINode says.
fn instance_type_limits(
    cluster: &Cluster,
    labels: Option<&BTreeMap<String, String>>,
    catalog: &dyn Fn(&str) -> Option<Arc<InstanceTypes>>,
) -> BTreeMap<String, u32> {
    let label = |k: &str| labels.and_then(|l| l.get(k));
    let (Some(pool), Some(it)) = (
        label(api::consts::labels::NODEPOOL),
        label(scheduling::LABEL_INSTANCE_TYPE),
    ) else {
        return BTreeMap::new();
    };
    cluster
        .nodepools
        .iter()
        .find(|p| name(p.as_ref()) == pool)
        .and_then(|p| catalog(&p.spec.template.spec.node_class_ref.name))
        .and_then(|c| {
            c.instance_types
                .iter()
                .find(|t| &t.name == it)
                .map(|t| t.volume_limits.clone())
        })
        .unwrap_or_default()
}

/// The attach limits a NodeClaim not launched yet will have at most: per driver, the
/// smallest limit among its candidate instance types (`node.kubernetes.io/instance-type In
/// [...]`).
fn candidate_limits(
    c: &NodeClaim,
    labels: &BTreeMap<String, String>,
    limits: &TypeLimits,
) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    let candidates = convert::requirements(&c.spec.requirements)
        .into_iter()
        .filter(|r| {
            r.key == scheduling::LABEL_INSTANCE_TYPE && r.operator == scheduling::Operator::In
        })
        .flat_map(|r| r.values);
    for it in candidates {
        let mut one = labels.clone();
        one.insert(scheduling::LABEL_INSTANCE_TYPE.to_string(), it);
        for (driver, n) in limits(Some(&one)) {
            out.entry(driver)
                .and_modify(|m| *m = (*m).min(n))
                .or_insert(n);
        }
    }
    out
}

/// Limits of a node or NodeClaim from its labels: [`instance_type_limits`].
type TypeLimits<'a> = dyn Fn(Option<&BTreeMap<String, String>>) -> BTreeMap<String, u32> + 'a;

/// A Node with room. One whose NodeClaim is not initialized yet still carries ephemeral
/// and startup taints that will go away: Karpenter schedules onto it as in flight.
fn existing_node(cluster: &Cluster, n: &Node, limits: &TypeLimits) -> scheduling::ExistingNode {
    let node_name = name(n);
    let claim = cluster.claim_of(node_name);
    let initialized = claim.is_none_or(|c| claim_condition(c, types::INITIALIZED));
    let (requested, pods) = bound(cluster, node_name);
    scheduling::ExistingNode {
        volume_limits: crate::model::volumes::limits(
            &limits(n.metadata.labels.as_ref()),
            cluster.published_limits(node_name),
        ),
        name: node_name.to_string(),
        state: if initialized {
            scheduling::NodeState::Ready
        } else {
            scheduling::NodeState::InFlight
        },
        labels: n.metadata.labels.clone().unwrap_or_default(),
        taints: convert::node_taints(n.spec.as_ref().and_then(|s| s.taints.as_ref())),
        startup_taints: claim
            .map(|c| convert::taints(&c.spec.startup_taints))
            .unwrap_or_default(),
        allocatable: node_allocatable(n, claim.filter(|_| !initialized).map(AsRef::as_ref)),
        requested,
        pods,
        refuses_moving: false,
    }
}

/// A Node's allocatable; while its NodeClaim is not initialized, a resource the Node reports
/// as zero or not at all (the kubelet zeroes extended resources until their device plugin
/// registers) is the NodeClaim's, as Karpenter reads it.
fn node_allocatable(n: &Node, uninitialized: Option<&NodeClaim>) -> scheduling::Resources {
    let mut alloc = n
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(convert::resources)
        .unwrap_or_default();
    if let Some(c) = uninitialized {
        for (k, v) in claim_resources(c, Which::Allocatable) {
            let e = alloc.entry(k).or_insert(0);
            if *e == 0 {
                *e = v;
            }
        }
    }
    alloc
}

/// A NodeClaim in flight, as the node it will be: its labels and the single-valued
/// requirements, its allocatable, the pods already bound to the Node it named.
fn in_flight_node(
    cluster: &Cluster,
    c: &NodeClaim,
    limits: &TypeLimits,
) -> scheduling::ExistingNode {
    let mut labels = c.metadata.labels.clone().unwrap_or_default();
    for r in convert::requirements(&c.spec.requirements) {
        if r.operator == scheduling::Operator::In && r.values.len() == 1 {
            labels.entry(r.key).or_insert_with(|| r.values[0].clone());
        }
    }
    let claim_name = name(c).to_string();
    labels
        .entry(scheduling::LABEL_HOSTNAME.into())
        .or_insert_with(|| claim_name.clone());
    let node_name = cluster
        .node_of(&claim_name)
        .map(|n| name(n.as_ref()))
        .or_else(|| claim_node_name(c))
        .unwrap_or_default();
    let (requested, pods) = bound(cluster, node_name);
    // Not launched yet: any of its candidate types may be, so each driver's smallest limit.
    let fallback = if labels.contains_key(scheduling::LABEL_INSTANCE_TYPE) {
        limits(Some(&labels))
    } else {
        candidate_limits(c, &labels, limits)
    };
    let volume_limits =
        crate::model::volumes::limits(&fallback, cluster.published_limits(node_name));
    scheduling::ExistingNode {
        volume_limits,
        name: claim_name,
        state: scheduling::NodeState::InFlight,
        labels,
        taints: convert::taints(&c.spec.taints),
        startup_taints: convert::taints(&c.spec.startup_taints),
        allocatable: claim_resources(c, Which::Allocatable),
        requested,
        pods,
        refuses_moving: false,
    }
}

/// What one NodeClaim counts against its NodePool's limits: its capacity once known, its
/// requests before, plus `nodes: 1`.
pub(crate) fn claim_usage(c: &NodeClaim) -> scheduling::Resources {
    let mut u = claim_resources(c, Which::Capacity);
    u.insert("nodes".into(), 1);
    u
}

/// A NodeClaim's capacity or allocatable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Capacity,
    Allocatable,
}

/// The resources of a launch plan (the annotation launch records; other fields ignored).
#[derive(serde::Deserialize, Default)]
struct PlannedResources {
    #[serde(default)]
    capacity: BTreeMap<String, Quantity>,
    #[serde(default)]
    allocatable: BTreeMap<String, Quantity>,
}

/// A NodeClaim's `capacity` or `allocatable`: from its status once launched, else from its
/// launch plan (the instance type is chosen before anything is created), else what it
/// requests.
pub(crate) fn claim_resources(c: &NodeClaim, which: Which) -> scheduling::Resources {
    fn pick<'a, T>(which: Which, capacity: &'a T, allocatable: &'a T) -> &'a T {
        match which {
            Which::Capacity => capacity,
            Which::Allocatable => allocatable,
        }
    }
    if let Some(s) = &c.status {
        let from_status = convert::resources(pick(which, &s.capacity, &s.allocatable));
        if !from_status.is_empty() {
            return from_status;
        }
    }
    let planned = crate::objects::annotation(c, api::consts::annotations::LAUNCH_PLAN)
        .and_then(|p| serde_json::from_str::<PlannedResources>(p).ok())
        .map(|p| convert::resources(pick(which, &p.capacity, &p.allocatable)))
        .unwrap_or_default();
    if !planned.is_empty() {
        return planned;
    }
    c.spec
        .resources
        .as_ref()
        .map(|r| convert::resources(&r.requests))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Objects;
    use serde_json::{Value, json};
    use std::collections::HashMap;

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("fixture"))
    }

    fn ready_node(name: &str, taints: Value) -> Arc<Node> {
        typed(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
    }

    fn claim(name: &str, node: &str, initialized: bool) -> Arc<NodeClaim> {
        typed(json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"resources": {"requests": {"cpu": "1"}},
                     "nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                     "startupTaints": [{"key": "s", "effect": "NoSchedule"}],
                     "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]},
            "status": {"nodeName": node, "capacity": {"cpu": "4", "memory": "8Gi"},
                       "conditions": [{"type": "Initialized", "status": if initialized {"True"} else {"False"},
                                       "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
    }

    fn no_catalog(_: &str) -> Option<Arc<InstanceTypes>> {
        None
    }

    /// One instance type offered in z1 (cheaper) and z2; the provider marks z1 as it says.
    fn offered(z1_available: bool) -> Arc<InstanceTypes> {
        let price_source = cloudprovider::PriceSource::Annotation;
        let mut z1 = cloudprovider::Offering::new("t", Some("z1"), "on-demand", 0.1, price_source);
        z1.available = z1_available;
        let z2 = cloudprovider::Offering::new("t", Some("z2"), "on-demand", 0.2, price_source);
        let r = cloudprovider::Resources(BTreeMap::from([
            ("cpu".to_string(), 4000),
            ("memory".to_string(), 8 << 30),
            ("pods".to_string(), 110),
        ]));
        Arc::new(InstanceTypes {
            instance_types: vec![cloudprovider::InstanceType {
                devices: None,
                volume_limits: Default::default(),
                name: "small".into(),
                capacity: r.clone(),
                allocatable: r,
                labels: BTreeMap::from([("kubernetes.io/arch".into(), "amd64".into())]),
                taints: Vec::new(),
                offerings: vec![z1, z2],
                capacity_overlaid: false,
            }],
            ..InstanceTypes::default()
        })
    }

    /// The zone of the one NodeClaim planned for a pending pod over `catalog`.
    fn planned_zone(catalog: Arc<InstanceTypes>, availability: Availability) -> Vec<String> {
        let state = Cluster::new(Objects {
            pods: vec![typed(json!({
                "metadata": {"name": "p", "namespace": "d", "uid": "p"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Pending"}
            }))],
            nodepools: vec![typed(
                json!({"metadata": {"name": "default"}, "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}}}}),
            )],
            ..Objects::default()
        });
        let pending = state.pods.clone();
        let s = build(
            &state,
            &state.nodepools,
            &pending,
            &|_| Some(Arc::clone(&catalog)),
            availability,
        );
        let out = scheduling::solve(&s.input);
        out.new_node_claims
            .iter()
            .map(|c| c.cheapest.zone.clone())
            .collect()
    }

    #[test]
    fn an_offering_the_provider_marks_unavailable_is_not_planned() {
        // Positive control: available, the cheaper z1 is planned.
        assert_eq!(planned_zone(offered(true), Availability::Offered), ["z1"]);
        // Marked unavailable by the provider: the pod goes to z2.
        assert_eq!(planned_zone(offered(false), Availability::Offered), ["z2"]);
        // A plan that ignores availability still takes z1.
        assert_eq!(planned_zone(offered(false), Availability::Ignored), ["z1"]);
    }

    #[test]
    fn nodes_of_uninitialized_claims_are_in_flight_and_claims_count_towards_usage() {
        let unregistered = json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]);
        let state = Cluster::new(Objects {
            pods: vec![typed(json!({
                "metadata": {"name": "bound", "namespace": "d"},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}}}]},
                "status": {"phase": "Running"}
            }))],
            nodes: vec![
                ready_node("n1", json!([])),
                ready_node("n2", unregistered),
                ready_node("n3", json!([])),
            ],
            nodeclaims: vec![
                claim("c1", "n1", true),
                claim("c2", "n2", false),
                claim("c4", "", false),
            ],
            nodepools: vec![typed(
                json!({"metadata": {"name": "default"}, "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}}}}),
            )],
            ..Objects::default()
        });
        let s = build(
            &state,
            &state.nodepools,
            &[],
            &no_catalog,
            Availability::Ignored,
        );
        let by_name: HashMap<&str, &scheduling::ExistingNode> =
            s.input.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        assert_eq!(by_name.len(), 4, "{:?}", by_name.keys());
        assert_eq!(by_name["n1"].state, scheduling::NodeState::Ready);
        assert_eq!(by_name["n1"].requested["cpu"], 1500);
        assert_eq!(by_name["n2"].state, scheduling::NodeState::InFlight);
        assert_eq!(by_name["n2"].startup_taints[0].key, "s");
        // A Node without a NodeClaim is taken as it is.
        assert_eq!(by_name["n3"].state, scheduling::NodeState::Ready);
        // A claim without a Node yet: in flight, zone from its requirements.
        assert_eq!(by_name["c4"].state, scheduling::NodeState::InFlight);
        assert_eq!(by_name["c4"].labels["topology.kubernetes.io/zone"], "z1");
        assert_eq!(by_name["c4"].labels["kubernetes.io/hostname"], "c4");
        let usage = &s.input.node_pools[0].usage;
        assert_eq!(usage["nodes"], 3);
        assert_eq!(usage["cpu"], 12_000);
    }

    /// Found by the conformance corpus (Karpenter's "should handle resource zeroing of
    /// extended resources by kubelet").
    #[test]
    fn uninitialized_node_takes_resources_it_reports_as_zero_from_its_claim() {
        let node = |name: &str| {
            typed(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "example.com/gpu": "0"},
                           "conditions": [{"type": "Ready", "status": "True"}]}
            }))
        };
        let claim = |name: &str, node: &str, initialized: bool| {
            typed(json!({
                "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
                "status": {"nodeName": node,
                           "allocatable": {"cpu": "8", "example.com/gpu": "2", "pods": "10"},
                           "conditions": [{"type": "Initialized", "status": if initialized {"True"} else {"False"},
                                           "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
            }))
        };
        let state = Cluster::new(Objects {
            nodes: vec![node("new"), node("old")],
            nodeclaims: vec![claim("c1", "new", false), claim("c2", "old", true)],
            ..Objects::default()
        });
        let s = build(&state, &[], &[], &no_catalog, Availability::Ignored);
        let by_name: HashMap<&str, &scheduling::ExistingNode> =
            s.input.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let new = &by_name["new"].allocatable;
        assert_eq!(
            (new["cpu"], new["example.com/gpu"], new["pods"]),
            (4000, 2, 10)
        );
        let old = &by_name["old"].allocatable;
        assert_eq!((old["cpu"], old["example.com/gpu"]), (4000, 0));
        assert!(!old.contains_key("pods"));
    }

    #[test]
    fn nodes_of_deleting_claims_and_cordoned_nodes_are_no_room() {
        let mut gone = (*claim("c1", "n1", true)).clone();
        gone.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().expect("ts"),
            ));
        let mut cordoned = (*ready_node("n2", json!([]))).clone();
        cordoned.spec.get_or_insert_default().unschedulable = Some(true);
        let state = Cluster::new(Objects {
            nodes: vec![
                ready_node("n1", json!([])),
                Arc::new(cordoned),
                ready_node("n3", json!([])),
            ],
            nodeclaims: vec![Arc::new(gone)],
            ..Objects::default()
        });
        let s = build(&state, &[], &[], &no_catalog, Availability::Ignored);
        let names: Vec<&str> = s.input.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n3"]);
    }

    #[test]
    fn claim_resources_come_from_status_then_launch_plan_then_requests() {
        let mut c = (*claim("c", "", false)).clone();
        assert_eq!(claim_resources(&c, Which::Capacity)["cpu"], 4000);
        c.status = None;
        assert_eq!(claim_resources(&c, Which::Capacity)["cpu"], 1000);
        c.metadata.annotations = Some(BTreeMap::from([(
            api::consts::annotations::LAUNCH_PLAN.to_string(),
            r#"{"machine": "m", "capacity": {"cpu": "8"}, "allocatable": {"cpu": "7"}}"#
                .to_string(),
        )]));
        assert_eq!(claim_resources(&c, Which::Capacity)["cpu"], 8000);
        assert_eq!(claim_resources(&c, Which::Allocatable)["cpu"], 7000);
    }
}
