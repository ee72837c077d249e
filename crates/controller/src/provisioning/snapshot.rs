//! Pure: the cluster as JSON objects (what the watch caches hold, or what `simulate` reads
//! from files) → the solver's input. Shared by the provisioner loop and `simulate`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use templates::model::Catalog;

use super::convert;

/// The objects a scheduling decision depends on, as JSON.
#[derive(Debug, Default, Clone)]
pub struct State {
    /// All pods: bound ones count against their node, pending ones are not read from here.
    pub pods: Vec<Value>,
    pub nodes: Vec<Value>,
    pub nodeclaims: Vec<Value>,
    pub nodepools: Vec<Value>,
    pub daemonsets: Vec<Value>,
}

/// Result of one snapshot: the solver input and the NodePool objects by name.
pub struct Snapshot {
    pub input: scheduling::Input,
    pub pools: BTreeMap<String, Value>,
}

fn add(into: &mut scheduling::Resources, r: &scheduling::Resources) {
    for (k, v) in r {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

/// Whether `obj` has condition `type_` with status True.
pub fn condition_true(obj: &Value, type_: &str) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

fn str_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

/// Whether `v` has a deletionTimestamp.
pub fn deleting(v: &Value) -> bool {
    !v["metadata"]["deletionTimestamp"].is_null()
}

/// Builds the solver input. `catalog(nodeclass)` gives a NodeClass's instance types;
/// `available(instance_type, zone, capacity_type)` filters offerings (e.g. ones that just
/// failed to launch).
pub fn build(
    state: &State,
    pending: &[Value],
    catalog: &dyn Fn(&str) -> Option<Arc<Catalog>>,
    available: &dyn Fn(&str, Option<&str>, &str) -> bool,
) -> Snapshot {
    // Requests and bound pods per node.
    let mut bound: HashMap<&str, (scheduling::Resources, Vec<scheduling::BoundPod>)> =
        HashMap::new();
    for v in &state.pods {
        let Some(node) = v["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            continue;
        };
        let phase = v["status"]["phase"].as_str().unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            continue;
        }
        let sp = convert::pod(v);
        let e = bound.entry(node).or_default();
        add(&mut e.0, &sp.requests);
        e.1.push(scheduling::BoundPod {
            namespace: sp.namespace,
            labels: sp.labels,
            host_ports: sp.host_ports,
            pod_anti_affinity: sp.pod_anti_affinity,
        });
    }
    // NodeClaims by the Node they registered as.
    let claim_of_node: HashMap<&str, &Value> = state
        .nodeclaims
        .iter()
        .filter_map(|c| Some((c["status"]["nodeName"].as_str()?, c)))
        .filter(|(n, _)| !n.is_empty())
        .collect();
    let mut nodes = Vec::new();
    let mut ready_nodes = HashSet::new();
    for n in &state.nodes {
        if !condition_true(n, "Ready") || deleting(n) {
            continue;
        }
        let node_name = name(n);
        ready_nodes.insert(node_name);
        let (requested, pods) = bound.remove(node_name).unwrap_or_default();
        // A Node whose NodeClaim is not initialized yet still carries ephemeral and startup
        // taints that will go away: Karpenter schedules onto it as in flight.
        let claim = claim_of_node.get(node_name);
        let initialized = claim.is_none_or(|c| condition_true(c, "Initialized"));
        nodes.push(scheduling::ExistingNode {
            name: node_name.to_string(),
            state: if initialized {
                scheduling::NodeState::Ready
            } else {
                scheduling::NodeState::InFlight
            },
            labels: str_map(&n["metadata"]["labels"]),
            taints: convert::taints(&n["spec"]["taints"]),
            startup_taints: claim
                .map(|c| convert::taints(&c["spec"]["startupTaints"]))
                .unwrap_or_default(),
            allocatable: convert::resources(&n["status"]["allocatable"]),
            requested,
            pods,
        });
    }
    let mut usage: HashMap<String, scheduling::Resources> = HashMap::new();
    for c in &state.nodeclaims {
        let Some(pool) = c["metadata"]["labels"][scheduling::LABEL_NODEPOOL].as_str() else {
            continue;
        };
        add(usage.entry(pool.to_string()).or_default(), &claim_usage(c));
        if deleting(c) {
            continue;
        }
        let node_name = c["status"]["nodeName"].as_str().unwrap_or_default();
        if !node_name.is_empty() && ready_nodes.contains(node_name) {
            continue; // represented by its Node
        }
        let mut labels = str_map(&c["metadata"]["labels"]);
        for r in convert::requirements(&c["spec"]["requirements"]) {
            if r.operator == scheduling::Operator::In && r.values.len() == 1 {
                labels.entry(r.key).or_insert_with(|| r.values[0].clone());
            }
        }
        let claim_name = name(c).to_string();
        labels
            .entry(scheduling::LABEL_HOSTNAME.into())
            .or_insert_with(|| claim_name.clone());
        let (requested, pods) = bound.remove(node_name).unwrap_or_default();
        nodes.push(scheduling::ExistingNode {
            name: claim_name,
            state: scheduling::NodeState::InFlight,
            labels,
            taints: convert::taints(&c["spec"]["taints"]),
            startup_taints: convert::taints(&c["spec"]["startupTaints"]),
            allocatable: claim_resources(c, "allocatable"),
            requested,
            pods,
        });
    }
    let mut node_pools = Vec::new();
    let mut pools = BTreeMap::new();
    for v in &state.nodepools {
        if deleting(v) {
            continue;
        }
        let mut pool = convert::node_pool(v);
        pool.usage = usage.remove(&pool.name).unwrap_or_default();
        let nodeclass = v["spec"]["template"]["spec"]["nodeClassRef"]["name"]
            .as_str()
            .unwrap_or_default();
        if let Some(catalog) = catalog(nodeclass) {
            pool.instance_types = catalog
                .instance_types
                .iter()
                .map(|it| convert::instance_type(it, available))
                .collect();
        }
        pools.insert(pool.name.clone(), v.clone());
        node_pools.push(pool);
    }
    Snapshot {
        input: scheduling::Input {
            node_pools,
            nodes,
            daemonsets: state.daemonsets.iter().map(convert::daemonset).collect(),
            pods: pending.iter().map(convert::pod).collect(),
        },
        pools,
    }
}

/// What one NodeClaim counts against its NodePool's limits: its capacity once known, its
/// requests before, plus `nodes: 1`.
pub fn claim_usage(c: &Value) -> scheduling::Resources {
    let mut u = claim_resources(c, "capacity");
    u.insert("nodes".into(), 1);
    u
}

/// A NodeClaim's `capacity` or `allocatable`: from its status once launched, else from its
/// launch plan (the instance type is chosen before anything is created), else what it
/// requests.
pub fn claim_resources(c: &Value, which: &str) -> scheduling::Resources {
    let from_status = convert::resources(&c["status"][which]);
    if !from_status.is_empty() {
        return from_status;
    }
    let planned = c["metadata"]["annotations"][api::consts::annotations::LAUNCH_PLAN]
        .as_str()
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .map(|p| convert::resources(&p[which]))
        .unwrap_or_default();
    if !planned.is_empty() {
        return planned;
    }
    convert::resources(&c["spec"]["resources"]["requests"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ready_node(name: &str, taints: Value) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        })
    }

    fn claim(name: &str, node: &str, initialized: bool) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"resources": {"requests": {"cpu": "1"}},
                     "startupTaints": [{"key": "s", "effect": "NoSchedule"}],
                     "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]},
            "status": {"nodeName": node, "capacity": {"cpu": "4", "memory": "8Gi"},
                       "conditions": [{"type": "Initialized", "status": if initialized {"True"} else {"False"}}]}
        })
    }

    fn no_catalog(_: &str) -> Option<Arc<Catalog>> {
        None
    }

    #[test]
    fn nodes_of_uninitialized_claims_are_in_flight_and_claims_count_towards_usage() {
        let unregistered = json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]);
        let state = State {
            pods: vec![json!({
                "metadata": {"name": "bound", "namespace": "d"},
                "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "1500m"}}}]},
                "status": {"phase": "Running"}
            })],
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
            nodepools: vec![
                json!({"metadata": {"name": "default"}, "spec": {"template": {"spec": {}}}}),
            ],
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
}
