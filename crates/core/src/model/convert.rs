//! Pure mapping of typed Kubernetes objects (pods, daemonsets, NodePools, NodeClaims,
//! catalogs) into the scheduling model (the `nodeclaim` module maps the solver's output back).

use std::collections::BTreeMap;

use api::NodePool;
use api::karpenter::{self as k, NodeSelectorRequirementWithMinValues};
use k8s_openapi::api::apps::v1::DaemonSet as K8sDaemonSet;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use scheduling::{
    DaemonSet, HostPort, InstanceType, LabelSelector, NodeInclusionPolicy, Offering, Operator,
    PodAffinityTerm, Protocol, Requirement, Resources, Taint, TaintEffect, Toleration,
    TolerationOperator, TopologySpread, Weighted, WhenUnsatisfiable,
};

/// Quantity map (`{"cpu": "500m", ...}`) → resources (cpu in millicores); unparsable
/// quantities are left out.
pub fn resources(q: &BTreeMap<String, Quantity>) -> Resources {
    q.iter()
        .filter_map(|(k, q)| {
            let parsed = if k == "cpu" {
                cloudprovider::quantity::parse_milli(&q.0)
            } else {
                cloudprovider::quantity::parse_value(&q.0)
            };
            parsed.ok().map(|n| (k.clone(), n))
        })
        .collect()
}

fn opt_resources(q: Option<&BTreeMap<String, Quantity>>) -> Resources {
    q.map(resources).unwrap_or_default()
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

/// One amount as a quantity string (`1500m`, `16Gi`, `110`).
pub fn quantity(resource: &str, v: i64) -> Quantity {
    Quantity(if resource == "cpu" {
        if v % 1000 == 0 {
            format!("{}", v / 1000)
        } else {
            format!("{v}m")
        }
    } else if resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-")
    {
        binary(v)
    } else {
        v.to_string()
    })
}

/// Resources → quantities.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    r.iter()
        .map(|(k, v)| (k.clone(), quantity(k, *v)))
        .collect()
}

/// The scheduler's operator for the API's.
pub fn operator(op: k::Operator) -> Operator {
    match op {
        k::Operator::In => Operator::In,
        k::Operator::NotIn => Operator::NotIn,
        k::Operator::Exists => Operator::Exists,
        k::Operator::DoesNotExist => Operator::DoesNotExist,
        k::Operator::Gt => Operator::Gt,
        k::Operator::Lt => Operator::Lt,
        k::Operator::Gte => Operator::Gte,
        k::Operator::Lte => Operator::Lte,
    }
}

/// Karpenter requirements (NodePool, NodeClaim) → the scheduler's.
pub fn requirements(reqs: &[NodeSelectorRequirementWithMinValues]) -> Vec<Requirement> {
    reqs.iter()
        .map(|r| Requirement {
            key: r.key.clone(),
            operator: operator(r.operator),
            values: r.values.clone(),
            // A negative count (snapshots are not validated) is no minimum.
            min_values: r.min_values.and_then(|m| u32::try_from(m).ok()),
        })
        .collect()
}

/// Core requirements (`key`, string `operator`, `values`): unknown operators are skipped.
fn core_requirements<'a>(
    reqs: impl IntoIterator<Item = (&'a str, &'a str, Option<&'a Vec<String>>)>,
) -> Vec<Requirement> {
    reqs.into_iter()
        .filter_map(|(key, op, values)| {
            Some(Requirement {
                key: key.to_string(),
                operator: Operator::parse(op)?,
                values: values.cloned().unwrap_or_default(),
                min_values: None,
            })
        })
        .collect()
}

fn node_selector_requirements(
    reqs: Option<&Vec<core::NodeSelectorRequirement>>,
) -> Vec<Requirement> {
    core_requirements(
        reqs.into_iter()
            .flatten()
            .map(|r| (r.key.as_str(), r.operator.as_str(), r.values.as_ref())),
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

fn api_effect(e: k::TaintEffect) -> TaintEffect {
    match e {
        k::TaintEffect::NoSchedule => TaintEffect::NoSchedule,
        k::TaintEffect::PreferNoSchedule => TaintEffect::PreferNoSchedule,
        k::TaintEffect::NoExecute => TaintEffect::NoExecute,
    }
}

/// The API name of a taint effect.
pub fn effect_name(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// Karpenter taints (NodePool, NodeClaim) → the scheduler's.
pub fn taints(taints: &[k::Taint]) -> Vec<Taint> {
    taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: api_effect(t.effect),
        })
        .collect()
}

/// A Node's taints → the scheduler's (unknown effects skipped).
pub fn node_taints(taints: Option<&Vec<core::Taint>>) -> Vec<Taint> {
    taints
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: effect(&t.effect)?,
            })
        })
        .collect()
}

pub fn tolerations(tolerations: Option<&Vec<core::Toleration>>) -> Vec<Toleration> {
    tolerations
        .into_iter()
        .flatten()
        .map(|t| Toleration {
            key: t.key.clone().filter(|k| !k.is_empty()),
            operator: if t.operator.as_deref() == Some("Exists") {
                TolerationOperator::Exists
            } else {
                TolerationOperator::Equal
            },
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.as_deref().and_then(effect),
        })
        .collect()
}

fn selector(s: Option<&meta::LabelSelector>) -> LabelSelector {
    let Some(s) = s else {
        return LabelSelector::default();
    };
    LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: core_requirements(
            s.match_expressions
                .iter()
                .flatten()
                .map(|r| (r.key.as_str(), r.operator.as_str(), r.values.as_ref())),
        ),
    }
}

/// A pod affinity term. An empty `namespaceSelector` selects every namespace (Karpenter lists
/// the namespaces it matches); a non-empty one is not resolved (namespace labels are not
/// cached), so only `namespaces`, else the pod's own, count.
fn affinity_term(t: &core::PodAffinityTerm, namespace: &str) -> PodAffinityTerm {
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if namespaces.is_empty() {
        namespaces.push(namespace.to_string());
    }
    let all_namespaces = t.namespace_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    });
    PodAffinityTerm {
        topology_key: t.topology_key.clone(),
        selector: selector(t.label_selector.as_ref()),
        namespaces,
        all_namespaces,
    }
}

/// A spread constraint's `nodeAffinityPolicy` / `nodeTaintsPolicy`, else its default.
fn inclusion(policy: Option<&String>, default: NodeInclusionPolicy) -> NodeInclusionPolicy {
    match policy.map(String::as_str) {
        Some("Honor") => NodeInclusionPolicy::Honor,
        Some("Ignore") => NodeInclusionPolicy::Ignore,
        _ => default,
    }
}

pub(crate) fn node_selector_terms(s: Option<&core::NodeSelector>) -> Vec<Vec<Requirement>> {
    s.map(|s| {
        s.node_selector_terms
            .iter()
            .map(|t| node_selector_requirements(t.match_expressions.as_ref()))
            .collect()
    })
    .unwrap_or_default()
}

/// Which amounts of a container's resources: its requests or its limits.
type Amounts = fn(&core::ResourceRequirements) -> Option<&BTreeMap<String, Quantity>>;

fn container_amounts(cs: &[core::Container], amounts: Amounts) -> Vec<Resources> {
    cs.iter()
        .map(|c| opt_resources(c.resources.as_ref().and_then(amounts)))
        .collect()
}

/// Karpenter's formula over `amounts` of a pod spec: containers summed, init containers as a
/// maximum, plus the overhead (and `pods: 1`).
fn spec_amounts(spec: Option<&core::PodSpec>, amounts: Amounts) -> Resources {
    let Some(spec) = spec else {
        return scheduling::pod_requests(&[], &[], &Resources::new());
    };
    scheduling::pod_requests(
        &container_amounts(&spec.containers, amounts),
        &container_amounts(spec.init_containers.as_deref().unwrap_or_default(), amounts),
        &opt_resources(spec.overhead.as_ref()),
    )
}

/// Total requests of a pod spec (containers, init containers, overhead, `pods: 1`).
pub fn spec_requests(spec: Option<&core::PodSpec>) -> Resources {
    spec_amounts(spec, |r| r.requests.as_ref())
}

/// Total limits of a pod spec, by the same formula as [`spec_requests`].
pub(crate) fn spec_limits(spec: Option<&core::PodSpec>) -> Resources {
    spec_amounts(spec, |r| r.limits.as_ref())
}

fn host_ports(spec: Option<&core::PodSpec>) -> Vec<HostPort> {
    let ports = spec
        .into_iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten());
    ports
        .filter_map(|p| {
            let port = u16::try_from(p.host_port?).ok().filter(|p| *p != 0)?;
            Some(HostPort {
                port,
                protocol: match p.protocol.as_deref() {
                    Some("UDP") => Protocol::Udp,
                    Some("SCTP") => Protocol::Sctp,
                    _ => Protocol::Tcp,
                },
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn required_terms(terms: Option<&Vec<core::PodAffinityTerm>>, ns: &str) -> Vec<PodAffinityTerm> {
    terms
        .into_iter()
        .flatten()
        .map(|t| affinity_term(t, ns))
        .collect()
}

fn preferred_terms(
    terms: Option<&Vec<core::WeightedPodAffinityTerm>>,
    ns: &str,
) -> Vec<Weighted<PodAffinityTerm>> {
    terms
        .into_iter()
        .flatten()
        .map(|t| Weighted {
            weight: t.weight,
            term: affinity_term(&t.pod_affinity_term, ns),
        })
        .collect()
}

fn str_map(m: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.cloned().unwrap_or_default()
}

/// A pod → the solver's pod.
pub fn pod(p: &core::Pod) -> scheduling::Pod {
    let meta = &p.metadata;
    let spec = p.spec.as_ref();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let aff = spec.and_then(|s| s.affinity.as_ref());
    let na = aff.and_then(|a| a.node_affinity.as_ref());
    let pa = aff.and_then(|a| a.pod_affinity.as_ref());
    let paa = aff.and_then(|a| a.pod_anti_affinity.as_ref());
    scheduling::Pod {
        unplaceable: Default::default(),
        volume_requirements: Default::default(),
        volumes: Default::default(),
        namespace: namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        creation: meta
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_millisecond()),
        labels: str_map(meta.labels.as_ref()),
        requests: spec_requests(spec),
        node_selector: str_map(spec.and_then(|s| s.node_selector.as_ref())),
        required_node_affinity: node_selector_terms(na.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })),
        preferred_node_affinity: na
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
            .map(|t| Weighted {
                weight: t.weight,
                term: node_selector_requirements(t.preference.match_expressions.as_ref()),
            })
            .collect(),
        tolerations: tolerations(spec.and_then(|s| s.tolerations.as_ref())),
        host_ports: host_ports(spec),
        topology_spread: spec
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .into_iter()
            .flatten()
            // A constraint without a label selector counts no pod: it never constrains.
            .filter(|t| t.label_selector.is_some())
            .map(|t| TopologySpread {
                topology_key: t.topology_key.clone(),
                // A negative skew (snapshots are not validated) is the default, 1.
                max_skew: u32::try_from(t.max_skew).unwrap_or(1),
                when_unsatisfiable: if t.when_unsatisfiable == "ScheduleAnyway" {
                    WhenUnsatisfiable::ScheduleAnyway
                } else {
                    WhenUnsatisfiable::DoNotSchedule
                },
                selector: selector(t.label_selector.as_ref()),
                min_domains: t.min_domains.and_then(|m| u32::try_from(m).ok()),
                node_affinity_policy: inclusion(
                    t.node_affinity_policy.as_ref(),
                    NodeInclusionPolicy::Honor,
                ),
                node_taints_policy: inclusion(
                    t.node_taints_policy.as_ref(),
                    NodeInclusionPolicy::Ignore,
                ),
            })
            .collect(),
        pod_affinity: required_terms(
            pa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &namespace,
        ),
        pod_anti_affinity: required_terms(
            paa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &namespace,
        ),
        preferred_pod_affinity: preferred_terms(
            pa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &namespace,
        ),
        preferred_pod_anti_affinity: preferred_terms(
            paa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &namespace,
        ),
        moving: false,
    }
}

/// A pod bound to a node → its requests and what the solver keeps of it (no full pod
/// conversion: this runs for every bound pod of the cluster).
pub(crate) fn bound_pod(p: &core::Pod) -> (Resources, scheduling::BoundPod) {
    let spec = p.spec.as_ref();
    let namespace = p.metadata.namespace.clone().unwrap_or_default();
    let anti = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    (
        spec_requests(spec),
        scheduling::BoundPod {
            volumes: Default::default(),
            pod_anti_affinity: required_terms(anti, &namespace),
            namespace,
            labels: str_map(p.metadata.labels.as_ref()),
            host_ports: host_ports(spec),
        },
    )
}

/// A DaemonSet → its per-node overhead.
pub fn daemonset(ds: &K8sDaemonSet) -> DaemonSet {
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    DaemonSet {
        name: format!(
            "{}/{}",
            ds.metadata.namespace.as_deref().unwrap_or_default(),
            ds.metadata.name.as_deref().unwrap_or_default()
        ),
        requests: spec_requests(spec),
        node_selector: str_map(spec.and_then(|s| s.node_selector.as_ref())),
        required_node_affinity: node_selector_terms(
            spec.and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
        ),
        tolerations: tolerations(spec.and_then(|s| s.tolerations.as_ref())),
    }
}

/// Whether a plan reads the availability the provider gave each offering, as launching
/// does, or ignores it (every offering available and unbounded: plans of what could be,
/// e.g. `inspect`'s verdicts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// `Offering::available` and `Offering::count` as the provider set them.
    Offered,
    /// Every offering available and unbounded.
    Ignored,
}

/// A provider's instance type → the solver's, with each offering's availability and count
/// (as the provider marked them, or ignored).
pub fn instance_type(it: &cloudprovider::InstanceType, availability: Availability) -> InstanceType {
    let offered = availability == Availability::Offered;
    let mut overhead = Resources::new();
    for (k, cap) in &it.capacity.0 {
        let alloc = it.allocatable.0.get(k).copied().unwrap_or(*cap);
        if cap - alloc != 0 {
            overhead.insert(k.clone(), cap - alloc);
        }
    }
    InstanceType {
        volume_limits: it.volume_limits.clone(),
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
                available: !offered || o.available,
                count: o
                    .count
                    .as_ref()
                    .filter(|_| offered)
                    .map(|c| scheduling::OfferingCount {
                        key: c.key.clone(),
                        available: c.available,
                    }),
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

/// A NodePool (without instance types and usage).
pub fn node_pool(pool: &NodePool) -> scheduling::NodePool {
    let tpl = &pool.spec.template;
    let mut p = scheduling::NodePool::new(
        pool.metadata.name.as_deref().unwrap_or_default(),
        Vec::new(),
    );
    p.weight = pool.spec.weight.unwrap_or(0);
    p.requirements = requirements(&tpl.spec.requirements);
    p.labels = tpl.metadata.labels.clone();
    p.taints = taints(&tpl.spec.taints);
    p.startup_taints = taints(&tpl.spec.startup_taints);
    p.limits = resources(&pool.spec.limits);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    #[test]
    fn pod_maps_requests_tolerations_selectors_affinity_and_spread() {
        let v = json!({
            "metadata": {"namespace": "ns", "name": "p", "uid": "u", "labels": {"app": "a"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                     "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"name": "b", "resources": {"requests": {"cpu": "1"}}}
                ],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
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
        let p = pod(&typed(v));
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
        let (requests, bound) = bound_pod(&typed(json!({
            "metadata": {"namespace": "ns", "name": "p", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}
        })));
        assert_eq!(requests["cpu"], 1000);
        assert_eq!(bound.labels["app"], "a");
    }

    /// Found by the conformance corpus (Karpenter's "should not spread when a nil label
    /// selector is defined"): a spread without a selector counts no pod, so it never
    /// constrains (we read it as selecting every pod); minDomains is kept.
    #[test]
    fn spread_without_selector_is_dropped_and_min_domains_kept() {
        let p = pod(&typed(json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c"}],
            "topologySpreadConstraints": [
                {"topologyKey": "z", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"},
                {"topologyKey": "z", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule",
                 "minDomains": 3, "labelSelector": {"matchLabels": {"a": "b"}}}]}})));
        assert_eq!(p.topology_spread.len(), 1);
        assert_eq!(p.topology_spread[0].min_domains, Some(3));
    }

    /// Found reading tests/prop_snapshot.rs inputs: casts wrapped out-of-range numbers.
    #[test]
    fn out_of_range_numbers_do_not_wrap() {
        let reqs = requirements(&[typed(
            json!({"key": "k", "operator": "Exists", "minValues": -3}),
        )]);
        assert_eq!(reqs[0].min_values, None);
        let p = pod(&typed(json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 65_616},
                                                   {"containerPort": 2, "hostPort": 8080}]}],
            "topologySpreadConstraints": [{"topologyKey": "z", "maxSkew": -4, "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {}}]}})));
        assert_eq!(
            p.host_ports.iter().map(|h| h.port).collect::<Vec<_>>(),
            [8080]
        );
        assert_eq!(p.topology_spread[0].max_skew, 1);
    }

    /// Found by the conformance corpus: spread node inclusion policies (defaults Honor for
    /// affinity, Ignore for taints) and an empty namespaceSelector (every namespace).
    #[test]
    fn spread_policies_and_empty_namespace_selector_are_read() {
        let p = pod(&typed(
            json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {
            "containers": [{"name": "c"}],
            "topologySpreadConstraints": [
                {"topologyKey": "z", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {}},
                {"topologyKey": "z", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {}, "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"}],
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "z", "labelSelector": {}, "namespaceSelector": {}},
                {"topologyKey": "z", "labelSelector": {},
                 "namespaceSelector": {"matchLabels": {"team": "a"}}},
                {"topologyKey": "z", "labelSelector": {}}]}}}}),
        ));
        let policies: Vec<_> = p
            .topology_spread
            .iter()
            .map(|t| (t.node_affinity_policy, t.node_taints_policy))
            .collect();
        assert_eq!(
            policies,
            [
                (NodeInclusionPolicy::Honor, NodeInclusionPolicy::Ignore),
                (NodeInclusionPolicy::Ignore, NodeInclusionPolicy::Honor)
            ]
        );
        let all: Vec<bool> = p.pod_affinity.iter().map(|t| t.all_namespaces).collect();
        assert_eq!(all, [true, false, false]);
        assert_eq!(p.pod_affinity[2].namespaces, ["ns"]);
    }
}
