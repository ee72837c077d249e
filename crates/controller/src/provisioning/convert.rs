//! Pure mapping of Kubernetes JSON (pods, daemonsets, NodePools, catalogs) into the
//! scheduling model, and of the solver's output back into NodeClaim JSON.

use std::collections::BTreeMap;

use scheduling::{
    DaemonSet, HostPort, InstanceType, LabelSelector, Offering, Operator, PodAffinityTerm,
    Protocol, Requirement, Resources, Taint, TaintEffect, Toleration, TolerationOperator,
    TopologySpread, Weighted, WhenUnsatisfiable,
};
use serde_json::{Value, json};

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn str_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), s(v))).collect())
        .unwrap_or_default()
}

/// Numbers out of the field's range keep their side (snapshots are not validated by an API
/// server): `minValues: 4294967297` is unsatisfiable, not 1.
fn saturate_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn saturate_i32(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX })
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// Quantity map (`{"cpu": "500m", ...}`) → resources (cpu/memory-like in millicores for cpu).
pub fn resources(v: &Value) -> Resources {
    let mut out = Resources::new();
    if let Some(m) = v.as_object() {
        for (k, q) in m {
            let q = match q {
                Value::String(q) => q.clone(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            let parsed = if k == "cpu" {
                templates::quantity::parse_milli(&q)
            } else {
                templates::quantity::parse_value(&q)
            };
            if let Ok(n) = parsed {
                out.insert(k.clone(), n);
            }
        }
    }
    out
}

/// Bytes with the largest binary suffix that divides them exactly (`16Gi`, `1536Mi`).
fn binary(v: i64) -> String {
    const SUFFIXES: [(&str, i64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    SUFFIXES
        .iter()
        .find(|(_, unit)| v != 0 && v % unit == 0)
        .map_or_else(|| v.to_string(), |(s, unit)| format!("{}{s}", v / unit))
}

/// Resources → quantity strings.
pub fn quantities(r: &Resources) -> Value {
    let m: serde_json::Map<String, Value> = r
        .iter()
        .map(|(k, v)| {
            let q = if k == "cpu" {
                if v % 1000 == 0 {
                    format!("{}", v / 1000)
                } else {
                    format!("{v}m")
                }
            } else if k == "memory" || k == "ephemeral-storage" || k.starts_with("hugepages-") {
                binary(*v)
            } else {
                v.to_string()
            };
            (k.clone(), Value::String(q))
        })
        .collect();
    Value::Object(m)
}

/// `[{key, operator, values, minValues}]` → requirements (unknown operators skipped).
pub fn requirements(v: &Value) -> Vec<Requirement> {
    arr(v)
        .iter()
        .filter_map(|r| {
            Some(Requirement {
                key: s(&r["key"]),
                operator: Operator::parse(r["operator"].as_str()?)?,
                values: arr(&r["values"]).iter().map(s).collect(),
                min_values: r["minValues"].as_u64().map(saturate_u32),
            })
        })
        .collect()
}

pub fn requirements_json(reqs: &[Requirement]) -> Value {
    Value::Array(
        reqs.iter()
            .map(|r| {
                let mut o = json!({"key": r.key, "operator": r.operator.as_str()});
                if !r.values.is_empty() {
                    o["values"] = json!(r.values);
                }
                if let Some(m) = r.min_values {
                    o["minValues"] = json!(m);
                }
                o
            })
            .collect(),
    )
}

fn effect(v: &str) -> Option<TaintEffect> {
    Some(match v {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        _ => return None,
    })
}

fn effect_name(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

pub fn taints(v: &Value) -> Vec<Taint> {
    arr(v)
        .iter()
        .filter_map(|t| {
            Some(Taint {
                key: s(&t["key"]),
                value: s(&t["value"]),
                effect: effect(t["effect"].as_str()?)?,
            })
        })
        .collect()
}

pub fn taints_json(taints: &[Taint]) -> Value {
    Value::Array(
        taints
            .iter()
            .map(|t| {
                let mut o = json!({"key": t.key, "effect": effect_name(t.effect)});
                if !t.value.is_empty() {
                    o["value"] = json!(t.value);
                }
                o
            })
            .collect(),
    )
}

pub fn tolerations(v: &Value) -> Vec<Toleration> {
    arr(v)
        .iter()
        .map(|t| Toleration {
            key: t["key"]
                .as_str()
                .filter(|k| !k.is_empty())
                .map(str::to_string),
            operator: if t["operator"].as_str() == Some("Exists") {
                TolerationOperator::Exists
            } else {
                TolerationOperator::Equal
            },
            value: s(&t["value"]),
            effect: t["effect"].as_str().and_then(effect),
        })
        .collect()
}

fn selector(v: &Value) -> LabelSelector {
    LabelSelector {
        match_labels: str_map(&v["matchLabels"]),
        match_expressions: requirements(&v["matchExpressions"]),
    }
}

fn affinity_term(v: &Value, namespace: &str) -> PodAffinityTerm {
    let mut namespaces: Vec<String> = arr(&v["namespaces"]).iter().map(s).collect();
    if namespaces.is_empty() {
        namespaces.push(namespace.to_string());
    }
    PodAffinityTerm {
        topology_key: s(&v["topologyKey"]),
        selector: selector(&v["labelSelector"]),
        namespaces,
    }
}

fn node_selector_terms(v: &Value) -> Vec<Vec<Requirement>> {
    arr(&v["nodeSelectorTerms"])
        .iter()
        .map(|t| requirements(&t["matchExpressions"]))
        .collect()
}

fn container_requests(v: &Value) -> Vec<Resources> {
    arr(v)
        .iter()
        .map(|c| resources(&c["resources"]["requests"]))
        .collect()
}

/// Total requests of a pod spec (containers, init containers, overhead, `pods: 1`).
pub fn spec_requests(spec: &Value) -> Resources {
    scheduling::pod_requests(
        &container_requests(&spec["containers"]),
        &container_requests(&spec["initContainers"]),
        &resources(&spec["overhead"]),
    )
}

fn host_ports(spec: &Value) -> Vec<HostPort> {
    let mut out = Vec::new();
    for c in arr(&spec["containers"]) {
        for p in arr(&c["ports"]) {
            let Some(port) = p["hostPort"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            if port == 0 {
                continue;
            }
            out.push(HostPort {
                port,
                protocol: match p["protocol"].as_str() {
                    Some("UDP") => Protocol::Udp,
                    Some("SCTP") => Protocol::Sctp,
                    _ => Protocol::Tcp,
                },
                host_ip: s(&p["hostIP"]),
            });
        }
    }
    out
}

/// A pod's JSON (`metadata`, `spec`) → the solver's pod.
pub fn pod(v: &Value) -> scheduling::Pod {
    let meta = &v["metadata"];
    let spec = &v["spec"];
    let namespace = s(&meta["namespace"]);
    let aff = &spec["affinity"];
    let na = &aff["nodeAffinity"];
    let pa = &aff["podAffinity"];
    let paa = &aff["podAntiAffinity"];
    let required = |x: &Value| -> Vec<PodAffinityTerm> {
        arr(&x["requiredDuringSchedulingIgnoredDuringExecution"])
            .iter()
            .map(|t| affinity_term(t, &namespace))
            .collect()
    };
    let preferred = |x: &Value| -> Vec<Weighted<PodAffinityTerm>> {
        arr(&x["preferredDuringSchedulingIgnoredDuringExecution"])
            .iter()
            .map(|t| Weighted {
                weight: saturate_i32(t["weight"].as_i64().unwrap_or(1)),
                term: affinity_term(&t["podAffinityTerm"], &namespace),
            })
            .collect()
    };
    scheduling::Pod {
        namespace: namespace.clone(),
        name: s(&meta["name"]),
        uid: s(&meta["uid"]),
        creation: meta["creationTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map_or(0, |t| t.as_millisecond()),
        labels: str_map(&meta["labels"]),
        requests: spec_requests(spec),
        node_selector: str_map(&spec["nodeSelector"]),
        required_node_affinity: node_selector_terms(
            &na["requiredDuringSchedulingIgnoredDuringExecution"],
        ),
        preferred_node_affinity: arr(&na["preferredDuringSchedulingIgnoredDuringExecution"])
            .iter()
            .map(|t| Weighted {
                weight: saturate_i32(t["weight"].as_i64().unwrap_or(1)),
                term: requirements(&t["preference"]["matchExpressions"]),
            })
            .collect(),
        tolerations: tolerations(&spec["tolerations"]),
        host_ports: host_ports(spec),
        topology_spread: arr(&spec["topologySpreadConstraints"])
            .iter()
            .map(|t| TopologySpread {
                topology_key: s(&t["topologyKey"]),
                max_skew: saturate_u32(t["maxSkew"].as_u64().unwrap_or(1)),
                when_unsatisfiable: if t["whenUnsatisfiable"].as_str() == Some("ScheduleAnyway") {
                    WhenUnsatisfiable::ScheduleAnyway
                } else {
                    WhenUnsatisfiable::DoNotSchedule
                },
                selector: selector(&t["labelSelector"]),
            })
            .collect(),
        pod_affinity: required(pa),
        pod_anti_affinity: required(paa),
        preferred_pod_affinity: preferred(pa),
        preferred_pod_anti_affinity: preferred(paa),
    }
}

/// Karpenter's provisionable pod: PodScheduled=False reason Unschedulable, no nodeName, not
/// preempting (no `status.nominatedNodeName`), not owned by a DaemonSet or Node, not
/// terminating.
pub fn provisionable(v: &Value) -> bool {
    let unschedulable = arr(&v["status"]["conditions"]).iter().any(|c| {
        c["type"] == "PodScheduled" && c["status"] == "False" && c["reason"] == "Unschedulable"
    });
    let bound = v["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let owned_by_node = arr(&v["metadata"]["ownerReferences"])
        .iter()
        .any(|o| o["kind"] == "DaemonSet" || o["kind"] == "Node");
    let terminating = !v["metadata"]["deletionTimestamp"].is_null();
    let preempting = v["status"]["nominatedNodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    unschedulable && !bound && !owned_by_node && !terminating && !preempting
}

/// A DaemonSet's JSON → its per-node overhead.
pub fn daemonset(v: &Value) -> DaemonSet {
    let spec = &v["spec"]["template"]["spec"];
    DaemonSet {
        name: format!(
            "{}/{}",
            s(&v["metadata"]["namespace"]),
            s(&v["metadata"]["name"])
        ),
        requests: spec_requests(spec),
        node_selector: str_map(&spec["nodeSelector"]),
        required_node_affinity: node_selector_terms(
            &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        ),
        tolerations: tolerations(&spec["tolerations"]),
    }
}

/// A catalog instance type → the solver's, with `available(name, zone, capacity_type)`.
pub fn instance_type(
    it: &templates::model::InstanceType,
    available: impl Fn(&str, Option<&str>, &str) -> bool,
) -> InstanceType {
    let mut overhead = Resources::new();
    for (k, cap) in &it.capacity.0 {
        let alloc = it.allocatable.0.get(k).copied().unwrap_or(*cap);
        if cap - alloc != 0 {
            overhead.insert(k.clone(), cap - alloc);
        }
    }
    InstanceType {
        name: it.name.clone(),
        requirements: it
            .labels
            .iter()
            .map(|(k, v)| Requirement::new(k.clone(), Operator::In, &[v.as_str()]))
            .collect(),
        capacity: it.capacity.0.clone(),
        overhead,
        offerings: it
            .offerings
            .iter()
            .map(|o| Offering {
                zone: o.zone.clone().unwrap_or_default(),
                capacity_type: o.capacity_type.clone(),
                price: o.price,
                available: available(&it.name, o.zone.as_deref(), &o.capacity_type),
            })
            .collect(),
        taints: it
            .taints
            .iter()
            .filter_map(|t| {
                Some(Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: effect(&t.effect)?,
                })
            })
            .collect(),
    }
}

/// A NodePool's JSON (without instance types and usage).
pub fn node_pool(v: &Value) -> scheduling::NodePool {
    let tpl = &v["spec"]["template"];
    let mut p = scheduling::NodePool::new(&s(&v["metadata"]["name"]), Vec::new());
    p.weight = saturate_i32(v["spec"]["weight"].as_i64().unwrap_or(0));
    p.requirements = requirements(&tpl["spec"]["requirements"]);
    p.labels = str_map(&tpl["metadata"]["labels"]);
    p.taints = taints(&tpl["spec"]["taints"]);
    p.startup_taints = taints(&tpl["spec"]["startupTaints"]);
    p.limits = resources(&v["spec"]["limits"]);
    p
}

/// FNV-1a 64 of the canonical JSON of the pool's `spec.template` (stable across processes).
pub fn nodepool_hash(v: &Value) -> String {
    let text = v["spec"]["template"].to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.to_string()
}

/// The NodeClaim to create for one planned claim of `pool` (the NodePool JSON).
pub fn nodeclaim(pool: &Value, claim: &scheduling::NewNodeClaim) -> Value {
    let name = s(&pool["metadata"]["name"]);
    let tpl = &pool["spec"]["template"];
    let mut labels = tpl["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(scheduling::LABEL_NODEPOOL.into(), json!(name));
    let mut annotations = tpl["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.insert(
        "karpenter.sh/nodepool-hash".into(),
        json!(nodepool_hash(pool)),
    );
    annotations.insert("karpenter.sh/nodepool-hash-version".into(), json!("v3"));
    let mut spec = json!({
        "nodeClassRef": tpl["spec"]["nodeClassRef"],
        "requirements": requirements_json(&claim.requirements),
        "resources": {"requests": quantities(&claim.requests)},
    });
    if !claim.taints.is_empty() {
        spec["taints"] = taints_json(&claim.taints);
    }
    if !claim.startup_taints.is_empty() {
        spec["startupTaints"] = taints_json(&claim.startup_taints);
    }
    for k in ["expireAfter", "terminationGracePeriod"] {
        if !tpl["spec"][k].is_null() {
            spec[k] = tpl["spec"][k].clone();
        }
    }
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "generateName": format!("{name}-"),
            // The lifecycle's finalizer comes with the object: one write less per claim.
            "finalizers": [api::consts::finalizers::TERMINATION],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "name": name,
                "uid": pool["metadata"]["uid"],
                "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_json_maps_requests_tolerations_selectors_affinity_and_spread() {
        let v = json!({
            "metadata": {"namespace": "ns", "name": "p", "uid": "u", "labels": {"app": "a"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "containers": [
                    {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                     "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"resources": {"requests": {"cpu": "1"}}}
                ],
                "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
                "overhead": {"cpu": "100m"},
                "nodeSelector": {"kubernetes.io/arch": "arm64"},
                "tolerations": [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"},
                                {"operator": "Exists"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1", "z2"]}]},
                            {"matchExpressions": [{"key": "x", "operator": "Exists"}]}
                        ]},
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 5, "preference": {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}
                        ]
                    },
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "a"}}}
                    ]}
                },
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "a"}}}]
            }
        });
        let p = pod(&v);
        assert_eq!(p.uid, "u");
        assert_eq!(p.creation, 1_767_225_600_000);
        // max(500m + 1, 2) + 100m
        assert_eq!(p.requests["cpu"], 2100);
        assert_eq!(p.requests["memory"], 1 << 30);
        assert_eq!(p.requests["pods"], 1);
        assert_eq!(p.node_selector["kubernetes.io/arch"], "arm64");
        assert_eq!(p.tolerations.len(), 2);
        assert_eq!(p.tolerations[1].key, None);
        assert_eq!(p.tolerations[1].operator, TolerationOperator::Exists);
        assert_eq!(p.tolerations[0].effect, Some(TaintEffect::NoSchedule));
        assert_eq!(p.required_node_affinity.len(), 2);
        assert_eq!(p.required_node_affinity[0][0].values, vec!["z1", "z2"]);
        assert_eq!(p.required_node_affinity[1][0].operator, Operator::Exists);
        assert_eq!(p.preferred_node_affinity[0].weight, 5);
        assert_eq!(p.pod_anti_affinity[0].namespaces, vec!["ns"]);
        assert_eq!(p.pod_anti_affinity[0].selector.match_labels["app"], "a");
        assert_eq!(
            p.topology_spread[0].when_unsatisfiable,
            WhenUnsatisfiable::ScheduleAnyway
        );
        assert_eq!(p.host_ports[0].port, 8080);
    }

    /// Found reading tests/prop_snapshot.rs inputs: casts wrapped out-of-range numbers.
    #[test]
    fn out_of_range_numbers_do_not_wrap() {
        let reqs = requirements(
            &json!([{"key": "k", "operator": "Exists", "minValues": 4_294_967_297u64}]),
        );
        assert_eq!(reqs[0].min_values, Some(u32::MAX));
        let p = pod(&json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"ports": [{"hostPort": 65_616}, {"hostPort": 8080}]}],
            "topologySpreadConstraints": [{"topologyKey": "z", "maxSkew": 4_294_967_296u64}]}}));
        assert_eq!(
            p.host_ports.iter().map(|h| h.port).collect::<Vec<_>>(),
            [8080]
        );
        assert_eq!(p.topology_spread[0].max_skew, u32::MAX);
        let pool =
            node_pool(&json!({"metadata": {"name": "p"}, "spec": {"weight": 4_294_967_396u64}}));
        assert_eq!(pool.weight, i32::MAX);
    }

    #[test]
    fn provisionable_follows_karpenter() {
        let base = json!({
            "metadata": {"name": "p"},
            "spec": {},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        });
        assert!(provisionable(&base));
        let mut bound = base.clone();
        bound["spec"]["nodeName"] = json!("n");
        assert!(!provisionable(&bound));
        let mut ds = base.clone();
        ds["metadata"]["ownerReferences"] = json!([{"kind": "DaemonSet", "name": "d"}]);
        assert!(!provisionable(&ds));
        let mut term = base.clone();
        term["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(!provisionable(&term));
        let mut preempting = base.clone();
        preempting["status"]["nominatedNodeName"] = json!("n");
        assert!(!provisionable(&preempting));
        let pending = json!({"metadata": {"name": "p"}, "spec": {}, "status": {}});
        assert!(!provisionable(&pending));
    }

    #[test]
    fn nodeclaim_json_from_pool_and_plan() {
        let pool = json!({
            "metadata": {"name": "default", "uid": "pu"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"},
                         "expireAfter": "720h",
                         "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
            }}
        });
        let claim = scheduling::NewNodeClaim {
            node_pool: "default".into(),
            requirements: vec![Requirement::new(
                scheduling::LABEL_INSTANCE_TYPE,
                Operator::In,
                &["small", "large"],
            )],
            requests: [("cpu".to_string(), 1500), ("memory".to_string(), 1024)].into(),
            taints: vec![],
            startup_taints: vec![Taint::new("s", "", TaintEffect::NoSchedule)],
            pods: vec![],
            cheapest: scheduling::Cheapest {
                instance_type: "small".into(),
                zone: String::new(),
                capacity_type: "on-demand".into(),
                price: 0.1,
            },
        };
        let nc = nodeclaim(&pool, &claim);
        assert_eq!(nc["metadata"]["generateName"], "default-");
        assert_eq!(nc["metadata"]["labels"]["karpenter.sh/nodepool"], "default");
        assert_eq!(nc["metadata"]["labels"]["team"], "a");
        assert_eq!(nc["metadata"]["ownerReferences"][0]["uid"], "pu");
        assert_eq!(
            nc["metadata"]["annotations"]["karpenter.sh/nodepool-hash"],
            json!(nodepool_hash(&pool))
        );
        assert_eq!(nc["spec"]["resources"]["requests"]["cpu"], "1500m");
        assert_eq!(nc["spec"]["resources"]["requests"]["memory"], "1Ki");
        assert_eq!(
            nc["spec"]["requirements"][0]["values"],
            json!(["small", "large"])
        );
        assert_eq!(nc["spec"]["startupTaints"][0]["key"], "s");
        assert_eq!(nc["spec"]["expireAfter"], "720h");
        assert_eq!(nc["spec"]["nodeClassRef"]["name"], "nc");
        let p = node_pool(&pool);
        assert_eq!(p.requirements[0].key, "kubernetes.io/arch");
        assert_eq!(p.labels["team"], "a");
    }
}
