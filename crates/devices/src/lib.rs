//! Dynamic Resource Allocation objects (`resource.k8s.io/v1`) read into the solver's model
//! ([`scheduling::dra`]): DeviceClasses, ResourceClaims, ResourceClaimTemplates,
//! ResourceSlices, the pods' `spec.resourceClaims`, and the devices of each instance type
//! ([`cloudprovider::Devices`]). Pure: the caller hands the objects from its caches or a
//! snapshot; [`dra`] gives the [`scheduling::dra::Dra`] of one solve.
//!
//! Read as kube-scheduler and Karpenter read them:
//! - a pod's claim is `resourceClaimName`, or the claim its `status.resourceClaimStatuses`
//!   names for a `resourceClaimTemplateName` (no name there: it needs no claim). A template
//!   claim not generated yet (a pending pod the ResourceClaim controller has not seen, or a
//!   snapshot's workload) is made from the template, named `<pod>-<entry>`, the pod's own;
//!   a missing template blocks the pod with that reason;
//! - a device's `consumesCounters` and a slice's `sharedCounters` (partitionable devices)
//!   are kept, so allocations stay within the pool's budgets;
//! - a device's `allowMultipleAllocations` and its capacities' `requestPolicy` (default,
//!   valid values, range) are kept, and an allocation's `consumedCapacity` per device, so a
//!   shared device (consumable capacity) is allocated by what is left of it;
//! - a ResourceSlice counts for the node its `spec.nodeName` names; slices of older
//!   generations of a pool are ignored; slices for many nodes (`allNodes`, `nodeSelector`:
//!   network-attached devices) are network pools, one per driver and pool, reachable from
//!   the nodes the selector allows (per-device node selection is not read);
//! - a claim's `status.allocation` gives its devices (taken on their node) and its node
//!   selector: `matchFields` on `metadata.name` is the node, `matchExpressions` the rest.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{NodeSelector, Pod};
use k8s_openapi::api::resource::v1 as k8s;
use scheduling::dra::{self as model, ClaimKey, Dra};
use scheduling::{Operator, Requirement};

/// The DRA objects of a cluster (or snapshot).
#[derive(Clone, Copy, Default)]
pub struct Objects<'a> {
    pub classes: &'a [k8s::DeviceClass],
    pub claims: &'a [k8s::ResourceClaim],
    pub templates: &'a [k8s::ResourceClaimTemplate],
    pub slices: &'a [k8s::ResourceSlice],
}

/// The DRA side of a solve of `pending` pods, with the devices of `instance_types` (by name;
/// the first of a name wins).
pub fn dra<'a>(
    objects: Objects<'_>,
    pending: impl IntoIterator<Item = &'a Pod>,
    instance_types: impl IntoIterator<Item = &'a cloudprovider::InstanceType>,
) -> Dra {
    let mut out = Dra::default();
    for c in objects.classes {
        if let Some(name) = &c.metadata.name {
            out.classes.insert(name.clone(), device_class(c));
        }
    }
    for c in objects.claims {
        out.claims.insert(key(&c.metadata), claim(c));
    }
    let templates: HashMap<ClaimKey, &k8s::ResourceClaimTemplate> = objects
        .templates
        .iter()
        .map(|t| (key(&t.metadata), t))
        .collect();
    for p in pending {
        let pod_key = key(&p.metadata);
        match pod_claims(p, &templates, &mut out.claims) {
            Ok(keys) if keys.is_empty() => {}
            Ok(keys) => {
                out.pod_claims.insert(pod_key, keys);
            }
            Err(why) => {
                out.blocked.insert(pod_key, why);
            }
        }
    }
    for it in instance_types {
        if let Some(d) = &it.devices {
            out.instance_types
                .entry(it.name.clone())
                .or_insert_with(|| instance_type_slices(d));
        }
    }
    out.nodes = node_slices(objects.slices);
    out.network = network_pools(objects.slices);
    out
}

fn key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ClaimKey {
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// A pod's claims; a claim from a template not generated yet is added to `claims`.
fn pod_claims(
    p: &Pod,
    templates: &HashMap<ClaimKey, &k8s::ResourceClaimTemplate>,
    claims: &mut BTreeMap<ClaimKey, model::ResourceClaim>,
) -> Result<Vec<ClaimKey>, String> {
    let ns = p.metadata.namespace.clone().unwrap_or_default();
    let pod = p.metadata.name.clone().unwrap_or_default();
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    let mut out = Vec::new();
    for rc in p
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(name) = &rc.resource_claim_name {
            out.push((ns.clone(), name.clone()));
            continue;
        }
        let Some(template) = &rc.resource_claim_template_name else {
            continue;
        };
        match statuses.and_then(|s| s.iter().find(|s| s.name == rc.name)) {
            Some(s) => {
                // No name: the pod needs no claim for this entry.
                if let Some(n) = &s.resource_claim_name {
                    out.push((ns.clone(), n.clone()));
                }
            }
            None => {
                let t = templates
                    .get(&(ns.clone(), template.clone()))
                    .ok_or_else(|| {
                        format!("resourceclaimtemplate {ns}/{template} does not exist")
                    })?;
                let k = (ns.clone(), format!("{pod}-{}", rc.name));
                claims
                    .entry(k.clone())
                    .or_insert_with(|| claim_spec(&t.spec.spec));
                out.push(k);
            }
        }
    }
    Ok(out)
}

/// A DeviceClass: its CEL selectors.
pub fn device_class(c: &k8s::DeviceClass) -> model::DeviceClass {
    model::DeviceClass {
        selectors: selectors(c.spec.selectors.as_ref()),
    }
}

fn selectors(s: Option<&Vec<k8s::DeviceSelector>>) -> Vec<String> {
    s.into_iter()
        .flatten()
        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone()))
        .collect()
}

/// A ResourceClaim: its requests, constraints and allocation.
pub fn claim(c: &k8s::ResourceClaim) -> model::ResourceClaim {
    let mut out = claim_spec(&c.spec);
    out.allocation = c
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .map(allocation);
    out
}

/// A claim's spec (of a ResourceClaim or a ResourceClaimTemplate).
pub fn claim_spec(spec: &k8s::ResourceClaimSpec) -> model::ResourceClaim {
    let devices = spec.devices.as_ref();
    let requests = devices
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .map(request)
        .collect();
    let constraints = devices
        .and_then(|d| d.constraints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let kind = match (&c.match_attribute, &c.distinct_attribute) {
                (Some(a), _) => model::ConstraintKind::MatchAttribute(a.clone()),
                (None, Some(a)) => model::ConstraintKind::DistinctAttribute(a.clone()),
                (None, None) => return None,
            };
            Some(model::Constraint {
                requests: c.requests.clone().unwrap_or_default(),
                kind,
            })
        })
        .collect();
    model::ResourceClaim {
        requests,
        constraints,
        allocation: None,
    }
}

fn request(r: &k8s::DeviceRequest) -> model::DeviceRequest {
    let mut alternatives = Vec::new();
    if let Some(e) = &r.exactly {
        alternatives.push(model::SubRequest {
            name: None,
            device_class: e.device_class_name.clone(),
            selectors: selectors(e.selectors.as_ref()),
            mode: mode(e.allocation_mode.as_deref(), e.count),
            capacity: capacity_requests(e.capacity.as_ref()),
        });
    }
    for s in r.first_available.iter().flatten() {
        alternatives.push(model::SubRequest {
            name: Some(s.name.clone()),
            device_class: s.device_class_name.clone(),
            selectors: selectors(s.selectors.as_ref()),
            mode: mode(s.allocation_mode.as_deref(), s.count),
            capacity: capacity_requests(s.capacity.as_ref()),
        });
    }
    model::DeviceRequest {
        name: r.name.clone(),
        alternatives,
    }
}

/// A request's `capacity.requests` (an unparseable amount asks for more than any device has).
fn capacity_requests(
    c: Option<&k8s::CapacityRequirements>,
) -> std::collections::BTreeMap<String, model::Quantity> {
    c.and_then(|c| c.requests.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let q = model::Quantity::parse(&v.0).unwrap_or(model::Quantity::from_units(i64::MAX));
            (k.clone(), q)
        })
        .collect()
}

/// `allocationMode` and `count` (ExactCount by default, count 1 by default; a count the API
/// would refuse asks for 0 devices, which the solver refuses).
fn mode(m: Option<&str>, count: Option<i64>) -> model::AllocationMode {
    match m {
        Some("All") => model::AllocationMode::All,
        _ => model::AllocationMode::ExactCount(count.map_or(1, |c| u32::try_from(c).unwrap_or(0))),
    }
}

fn allocation(a: &k8s::AllocationResult) -> model::Allocation {
    let (node_name, node_selector) = node_selector(a.node_selector.as_ref());
    let results = || {
        a.devices
            .as_ref()
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
    };
    let id = |r: &k8s::DeviceRequestAllocationResult| model::DeviceId {
        driver: r.driver.clone(),
        pool: r.pool.clone(),
        device: r.device.clone(),
    };
    // A shared device's allocations (consumable capacity) each record what they consume.
    let mut consumed: BTreeMap<model::DeviceId, _> = Default::default();
    for r in results() {
        let Some(c) = &r.consumed_capacity else {
            continue;
        };
        let amounts = consumed.entry(id(r)).or_insert_with(Default::default);
        add_amounts(amounts, &r.driver, c);
    }
    model::Allocation {
        devices: results().map(id).collect(),
        consumed,
        node_name,
        node_selector,
    }
}

/// Adds `c` (capacity amounts by name; unparseable ones left out) to `amounts`, by fully
/// qualified name.
fn add_amounts(
    amounts: &mut BTreeMap<String, model::Quantity>,
    driver: &str,
    c: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) {
    for (name, q) in c {
        let Ok(q) = model::Quantity::parse(&q.0) else {
            continue;
        };
        let slot = amounts.entry(model::qualified(name, driver)).or_default();
        *slot = slot.checked_add(q).unwrap_or(*slot);
    }
}

/// The node a selector names (`matchFields` `metadata.name In [node]`), and its
/// `matchExpressions` terms.
fn node_selector(s: Option<&NodeSelector>) -> (Option<String>, Vec<Vec<Requirement>>) {
    let mut node = None;
    let mut terms = Vec::new();
    for t in s.into_iter().flat_map(|s| &s.node_selector_terms) {
        for f in t.match_fields.iter().flatten() {
            if f.key == "metadata.name" && f.operator == "In" {
                node = f.values.as_ref().and_then(|v| v.first().cloned());
            }
        }
        let exprs: Vec<Requirement> = t
            .match_expressions
            .iter()
            .flatten()
            .filter_map(|e| {
                let op = Operator::parse(&e.operator)?;
                let vals: Vec<&str> = e.values.iter().flatten().map(String::as_str).collect();
                Some(Requirement::new(e.key.clone(), op, &vals))
            })
            .collect();
        if !exprs.is_empty() {
            terms.push(exprs);
        }
    }
    (node, terms)
}

/// The slices each node publishes (`spec.nodeName`), at each pool's newest generation.
pub fn node_slices(slices: &[k8s::ResourceSlice]) -> BTreeMap<String, Vec<model::Slice>> {
    let mut out: BTreeMap<String, Vec<model::Slice>> = BTreeMap::new();
    for s in newest(slices) {
        if let Some(node) = &s.spec.node_name {
            out.entry(node.clone()).or_default().push(slice(s));
        }
    }
    out
}

/// The pools of slices for many nodes (`allNodes`, or a `nodeSelector`), at each pool's
/// newest generation, by driver and pool name.
pub fn network_pools(slices: &[k8s::ResourceSlice]) -> Vec<model::NetworkPool> {
    let mut out: BTreeMap<(&str, &str), model::NetworkPool> = BTreeMap::new();
    for s in newest(slices) {
        if s.spec.node_name.is_some() || s.spec.per_device_node_selection == Some(true) {
            continue;
        }
        let node_selector = match (&s.spec.node_selector, s.spec.all_nodes) {
            (Some(sel), _) => node_selector(Some(sel)).1,
            (None, Some(true)) => Vec::new(),
            _ => continue,
        };
        out.entry((s.spec.driver.as_str(), s.spec.pool.name.as_str()))
            .or_insert_with(|| model::NetworkPool {
                slices: Vec::new(),
                node_selector,
            })
            .slices
            .push(slice(s));
    }
    out.into_values().collect()
}

/// `slices` of each pool's newest generation.
fn newest(slices: &[k8s::ResourceSlice]) -> impl Iterator<Item = &k8s::ResourceSlice> {
    let mut newest: HashMap<(&str, &str), i64> = HashMap::new();
    for s in slices {
        let g = newest
            .entry((s.spec.driver.as_str(), s.spec.pool.name.as_str()))
            .or_insert(s.spec.pool.generation);
        *g = (*g).max(s.spec.pool.generation);
    }
    slices.iter().filter(move |s| {
        newest.get(&(s.spec.driver.as_str(), s.spec.pool.name.as_str()))
            == Some(&s.spec.pool.generation)
    })
}

/// A ResourceSlice as the solver's slice.
fn slice(s: &k8s::ResourceSlice) -> model::Slice {
    model::Slice {
        counters: counter_sets(s.spec.shared_counters.iter().flatten()),
        driver: s.spec.driver.clone(),
        pool: s.spec.pool.name.clone(),
        devices: s
            .spec
            .devices
            .iter()
            .flatten()
            .map(|d| device(&s.spec.driver, d))
            .collect(),
    }
}

/// An instance type's devices as the solver's slices (pool: the node's name, unknown yet).
pub fn instance_type_slices(d: &cloudprovider::Devices) -> Vec<model::Slice> {
    d.slices
        .iter()
        .map(|s| model::Slice {
            counters: Vec::new(),
            driver: s.driver.clone(),
            pool: String::new(),
            devices: s.devices.iter().map(|d| device(&s.driver, d)).collect(),
        })
        .collect()
}

/// A device: attributes and capacity by fully qualified name. A value that cannot be read
/// (an attribute with no value or a list value, an unparseable capacity) is left out: a
/// selector on it fails on this device.
pub fn device(driver: &str, d: &k8s::Device) -> model::Device {
    let attributes = d
        .attributes
        .iter()
        .flatten()
        .filter_map(|(k, a)| {
            let v = if let Some(i) = a.int {
                model::Attribute::Int(i)
            } else if let Some(b) = a.bool {
                model::Attribute::Bool(b)
            } else if let Some(s) = &a.string {
                model::Attribute::String(s.clone())
            } else {
                model::Attribute::Version(a.version.clone()?)
            };
            Some((model::qualified(k, driver), v))
        })
        .collect();
    let capacity = d
        .capacity
        .iter()
        .flatten()
        .filter_map(|(k, c)| {
            let q = model::Quantity::parse(&c.value.0).ok()?;
            Some((model::qualified(k, driver), q))
        })
        .collect();
    let policies = d
        .capacity
        .iter()
        .flatten()
        .filter_map(|(k, c)| {
            Some((
                model::qualified(k, driver),
                policy(c.request_policy.as_ref()?),
            ))
        })
        .collect();
    let consumes = d
        .consumes_counters
        .iter()
        .flatten()
        .map(|c| model::CounterSet {
            name: c.counter_set.clone(),
            counters: counters(&c.counters),
        })
        .collect();
    model::Device {
        name: d.name.clone(),
        attributes,
        capacity,
        consumes,
        policies,
        multiple: d.allow_multiple_allocations == Some(true),
    }
}

/// A capacity's `requestPolicy` (unparseable amounts left out).
fn policy(p: &k8s::CapacityRequestPolicy) -> model::CapacityPolicy {
    let q = |v: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        model::Quantity::parse(&v.0).ok()
    };
    let range = p.valid_range.as_ref();
    model::CapacityPolicy {
        default: p.default.as_ref().and_then(q),
        valid_values: p.valid_values.iter().flatten().filter_map(q).collect(),
        min: range.and_then(|r| q(&r.min)),
        max: range.and_then(|r| r.max.as_ref()).and_then(q),
        step: range.and_then(|r| r.step.as_ref()).and_then(q),
    }
}

/// A pool's counter sets (`sharedCounters`).
pub fn counter_sets<'a>(
    sets: impl IntoIterator<Item = &'a k8s::CounterSet>,
) -> Vec<model::CounterSet> {
    sets.into_iter()
        .map(|c| model::CounterSet {
            name: c.name.clone(),
            counters: counters(&c.counters),
        })
        .collect()
}

/// Counters by name; an unparseable amount is left out (a device drawing on it cannot be
/// allocated, a budget without it allows none).
fn counters(
    c: &std::collections::BTreeMap<String, k8s::Counter>,
) -> std::collections::BTreeMap<String, model::Quantity> {
    c.iter()
        .filter_map(|(k, v)| Some((k.clone(), model::Quantity::parse(&v.value.0).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumable_capacity_is_read() {
        let d: k8s::Device = serde_json::from_value(serde_json::json!({
            "name": "gpu-0",
            "allowMultipleAllocations": true,
            "capacity": {"memory": {"value": "16Gi", "requestPolicy": {
                "default": "4Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}
        }))
        .expect("device");
        let m = device("gpu.example.com", &d);
        assert!(m.multiple);
        let p = &m.policies["gpu.example.com/memory"];
        assert_eq!(p.default, model::Quantity::parse("4Gi").ok());
        assert_eq!(p.min, model::Quantity::parse("1Gi").ok());
        // Control: a device that does not say so is exclusive.
        let plain: k8s::Device =
            serde_json::from_value(serde_json::json!({"name": "gpu-1"})).expect("device");
        assert!(!device("gpu.example.com", &plain).multiple);

        let a: k8s::AllocationResult = serde_json::from_value(serde_json::json!({
            "devices": {"results": [
                {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0", "request": "a",
                 "consumedCapacity": {"memory": "4Gi"}},
                {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0", "request": "b",
                 "consumedCapacity": {"gpu.example.com/memory": "6Gi"}},
                {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-1", "request": "c"}
            ]}
        }))
        .expect("allocation");
        let got = allocation(&a);
        assert_eq!(got.devices.len(), 3);
        let gpu0 = model::DeviceId {
            driver: "gpu.example.com".into(),
            pool: "n1".into(),
            device: "gpu-0".into(),
        };
        assert_eq!(
            got.consumed[&gpu0]["gpu.example.com/memory"],
            model::Quantity::parse("10Gi").expect("q"),
            "two requests' shares of one device add up"
        );
        assert_eq!(got.consumed.len(), 1, "gpu-1 records no consumption");
    }

    #[test]
    fn slices_for_many_nodes_are_network_pools() {
        let slice = |v: serde_json::Value| -> k8s::ResourceSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "s"},
                "spec": v
            }))
            .expect("slice")
        };
        let pool = |name: &str, generation: i64| serde_json::json!({"name": name, "generation": generation, "resourceSliceCount": 1});
        let slices = [
            slice(
                serde_json::json!({"driver": "gpu.example.com", "pool": pool("shared", 2),
                "allNodes": true, "devices": [{"name": "a"}]}),
            ),
            // An older generation of the same pool: ignored.
            slice(
                serde_json::json!({"driver": "gpu.example.com", "pool": pool("shared", 1),
                "allNodes": true, "devices": [{"name": "old"}]}),
            ),
            slice(
                serde_json::json!({"driver": "nic.example.com", "pool": pool("zoned", 1),
                "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]}]}]},
                "devices": [{"name": "n"}]}),
            ),
            // A node's own slice: not a network pool.
            slice(
                serde_json::json!({"driver": "gpu.example.com", "pool": pool("n1", 1),
                "nodeName": "n1", "devices": [{"name": "g"}]}),
            ),
        ];
        let pools = network_pools(&slices);
        assert_eq!(pools.len(), 2, "{pools:?}");
        assert_eq!(pools[0].slices[0].pool, "shared");
        assert_eq!(pools[0].slices.len(), 1, "the newest generation only");
        assert_eq!(pools[0].slices[0].devices[0].name, "a");
        assert!(pools[0].node_selector.is_empty(), "allNodes: every node");
        assert_eq!(
            pools[1].node_selector,
            [vec![Requirement::new(
                "topology.kubernetes.io/zone",
                Operator::In,
                &["z2"]
            )]]
        );
        assert_eq!(node_slices(&slices).len(), 1, "n1's own slice");
    }
}
