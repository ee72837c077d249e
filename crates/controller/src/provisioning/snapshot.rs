//! Pure: the cluster as typed objects (what the shared caches hold, or what `simulate` reads
//! from files) → the solver's input. Shared by the provisioner loop, disruption and
//! `simulate`. Objects are shared (`Arc`), never copied: a snapshot of 1000 pods costs 1000
//! pointers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use api::consts::conditions as types;
use api::{NodeClaim, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use templates::model::Catalog;

use super::convert;
use crate::objects::{
    claim_condition, claim_node_name, deleting, name, node_ready, nodepool_of, pod_node_name,
    terminal,
};

/// The objects a scheduling decision depends on.
#[derive(Debug, Default, Clone)]
pub struct State {
    /// All pods: bound ones count against their node, pending ones are not read from here.
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    pub nodeclaims: Vec<Arc<NodeClaim>>,
    pub nodepools: Vec<Arc<NodePool>>,
    pub daemonsets: Vec<Arc<DaemonSet>>,
}

/// Result of one snapshot: the solver input and the NodePool objects by name.
pub struct Snapshot {
    pub input: scheduling::Input,
    pub pools: BTreeMap<String, Arc<NodePool>>,
}

fn add(into: &mut scheduling::Resources, r: &scheduling::Resources) {
    for (k, v) in r {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

/// Requests and bound pods, by the name of the node they are bound to.
type Bound<'a> = HashMap<&'a str, (scheduling::Resources, Vec<scheduling::BoundPod>)>;

/// Builds the solver input. `catalog(nodeclass)` gives a NodeClass's instance types;
/// `available(instance_type, zone, capacity_type)` filters offerings (e.g. ones that just
/// failed to launch).
pub fn build(
    state: &State,
    pending: &[Arc<Pod>],
    catalog: &dyn Fn(&str) -> Option<Arc<Catalog>>,
    available: &dyn Fn(&str, Option<&str>, &str) -> bool,
) -> Snapshot {
    let mut bound = bound_pods(state);
    let (mut nodes, ready_nodes) = ready_nodes(state, &mut bound);
    let mut usage = claim_nodes(state, &ready_nodes, &mut bound, &mut nodes);
    let mut node_pools = Vec::new();
    let mut pools = BTreeMap::new();
    for p in &state.nodepools {
        if deleting(p.as_ref()) {
            continue;
        }
        let mut pool = convert::node_pool(p);
        pool.usage = usage.remove(&pool.name).unwrap_or_default();
        if let Some(catalog) = catalog(&p.spec.template.spec.node_class_ref.name) {
            pool.instance_types = catalog
                .instance_types
                .iter()
                .map(|it| convert::instance_type(it, available))
                .collect();
        }
        pools.insert(pool.name.clone(), Arc::clone(p));
        node_pools.push(pool);
    }
    Snapshot {
        input: scheduling::Input {
            node_pools,
            nodes,
            daemonsets: state
                .daemonsets
                .iter()
                .map(|d| convert::daemonset(d))
                .collect(),
            pods: pending.iter().map(|p| convert::pod(p)).collect(),
        },
        pools,
    }
}

/// Requests and bound pods per node (terminal pods left out).
fn bound_pods(state: &State) -> Bound<'_> {
    let mut bound: Bound = HashMap::new();
    for p in &state.pods {
        let Some(node) = pod_node_name(p) else {
            continue;
        };
        if terminal(p) {
            continue;
        }
        let (requests, bp) = convert::bound_pod(p);
        let e = bound.entry(node).or_default();
        add(&mut e.0, &requests);
        e.1.push(bp);
    }
    bound
}

/// The Nodes that can take pods (their bound pods taken from `bound`), and their names.
fn ready_nodes<'a>(
    state: &'a State,
    bound: &mut Bound,
) -> (Vec<scheduling::ExistingNode>, HashSet<&'a str>) {
    // NodeClaims by the Node they registered as.
    let claim_of_node: HashMap<&str, &NodeClaim> = state
        .nodeclaims
        .iter()
        .filter_map(|c| Some((claim_node_name(c)?, c.as_ref())))
        .collect();
    // Nodes of NodeClaims being deleted, and cordoned Nodes, are never free room: their
    // pods are leaving, nothing new may land there.
    let leaving: HashSet<&str> = state
        .nodeclaims
        .iter()
        .filter(|c| deleting(c.as_ref()))
        .filter_map(|c| claim_node_name(c))
        .collect();
    let mut nodes = Vec::new();
    let mut ready_nodes = HashSet::new();
    for n in &state.nodes {
        let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        if !node_ready(n) || deleting(n.as_ref()) || cordoned || leaving.contains(name(n.as_ref()))
        {
            continue;
        }
        let node_name = name(n.as_ref());
        ready_nodes.insert(node_name);
        let (requested, pods) = bound.remove(node_name).unwrap_or_default();
        // A Node whose NodeClaim is not initialized yet still carries ephemeral and startup
        // taints that will go away: Karpenter schedules onto it as in flight.
        let claim = claim_of_node.get(node_name);
        let initialized = claim.is_none_or(|c| claim_condition(c, types::INITIALIZED));
        nodes.push(scheduling::ExistingNode {
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
            allocatable: n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .map(convert::resources)
                .unwrap_or_default(),
            requested,
            pods,
            refuses_moving: false,
        });
    }
    (nodes, ready_nodes)
}

/// Adds the in-flight NodeClaims (not being deleted, not represented by a ready Node) to
/// `nodes`; returns every NodePool's usage.
fn claim_nodes(
    state: &State,
    ready_nodes: &HashSet<&str>,
    bound: &mut Bound,
    nodes: &mut Vec<scheduling::ExistingNode>,
) -> HashMap<String, scheduling::Resources> {
    let mut usage: HashMap<String, scheduling::Resources> = HashMap::new();
    for c in &state.nodeclaims {
        let Some(pool) = nodepool_of(c) else {
            continue;
        };
        add(usage.entry(pool.to_string()).or_default(), &claim_usage(c));
        if deleting(c.as_ref()) {
            continue;
        }
        let node_name = claim_node_name(c).unwrap_or_default();
        if !node_name.is_empty() && ready_nodes.contains(node_name) {
            continue; // represented by its Node
        }
        let mut labels = c.metadata.labels.clone().unwrap_or_default();
        for r in convert::requirements(&c.spec.requirements) {
            if r.operator == scheduling::Operator::In && r.values.len() == 1 {
                labels.entry(r.key).or_insert_with(|| r.values[0].clone());
            }
        }
        let claim_name = name(c.as_ref()).to_string();
        labels
            .entry(scheduling::LABEL_HOSTNAME.into())
            .or_insert_with(|| claim_name.clone());
        let (requested, pods) = bound.remove(node_name).unwrap_or_default();
        nodes.push(scheduling::ExistingNode {
            name: claim_name,
            state: scheduling::NodeState::InFlight,
            labels,
            taints: convert::taints(&c.spec.taints),
            startup_taints: convert::taints(&c.spec.startup_taints),
            allocatable: claim_resources(c, Which::Allocatable),
            requested,
            pods,
            refuses_moving: false,
        });
    }
    usage
}

/// What one NodeClaim counts against its NodePool's limits: its capacity once known, its
/// requests before, plus `nodes: 1`.
pub fn claim_usage(c: &NodeClaim) -> scheduling::Resources {
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
pub fn claim_resources(c: &NodeClaim, which: Which) -> scheduling::Resources {
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
    use serde_json::{Value, json};

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

    fn no_catalog(_: &str) -> Option<Arc<Catalog>> {
        None
    }

    #[test]
    fn nodes_of_uninitialized_claims_are_in_flight_and_claims_count_towards_usage() {
        let unregistered = json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]);
        let state = State {
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
            daemonsets: vec![],
        };
        let s = build(&state, &[], &no_catalog, &|_, _, _| true);
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

    #[test]
    fn nodes_of_deleting_claims_and_cordoned_nodes_are_no_room() {
        let mut gone = (*claim("c1", "n1", true)).clone();
        gone.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().expect("ts"),
            ));
        let mut cordoned = (*ready_node("n2", json!([]))).clone();
        cordoned.spec.get_or_insert_default().unschedulable = Some(true);
        let state = State {
            nodes: vec![
                ready_node("n1", json!([])),
                Arc::new(cordoned),
                ready_node("n3", json!([])),
            ],
            nodeclaims: vec![Arc::new(gone)],
            ..State::default()
        };
        let s = build(&state, &[], &no_catalog, &|_, _, _| true);
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
