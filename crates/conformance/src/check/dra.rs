//! Devices (Dynamic Resource Allocation), as a necessary condition of kube-scheduler's
//! DynamicResources filter on a new node: the unallocated claims of the pods placed on it must
//! find enough devices among those the instance type publishes (its ResourceSliceTemplates).
//! Written from the `resource.k8s.io/v1` semantics, without the solver's model or its CEL:
//!
//! - a pod's claims are its `spec.resourceClaims`: `resourceClaimName`, or the claim its
//!   `status.resourceClaimStatuses` names for a template (no name: none needed), else the
//!   `<pod>-<entry>` claim generated from the template; a claim or template that does not
//!   exist, or a request naming a DeviceClass that does not exist, refuses the pod anywhere;
//!   a claim shared by pods counts once;
//! - a request's driver is read from its DeviceClass when each class selector is exactly
//!   `device.driver == "<driver>"` and the request has no selectors of its own; any other
//!   request is not checked (the checker errs towards accepting);
//! - per driver, the devices asked for (`exactly` `count`, `All` at least one; of
//!   `firstAvailable` the smallest count, and only when it is the request's one driver) fit in
//!   the devices published, and those drawing on counters (partitionable devices) fit the
//!   pool's counter sets, each device charged at least its smallest consumption; a device
//!   drawing on a counter set its pool lacks is unusable;
//! - devices allowing multiple allocations (consumable capacity) are shared: a driver with
//!   any is checked by capacity instead, each requested dimension within the sum the devices
//!   offer (a request's own amounts; an unnamed dimension counted as zero);
//! - a claim already allocated, and a driver with ResourceSlices for many nodes (`allNodes`,
//!   `nodeSelector`: devices outside the node), are not checked.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    Device, DeviceClass, DeviceRequest, ResourceClaimSpec, ResourceClaimTemplate,
};

use super::resources;
use crate::record::{Record, RecordedInstanceType};

/// A claim as the checker reads it: its spec, or why it cannot be used.
enum ClaimState<'a> {
    Open(&'a ResourceClaimSpec),
    Allocated,
    Refused(String),
}

/// The claims of `pod` by (namespace, name), each with its state.
fn pod_claims<'a>(rec: &'a Record, pod: &Pod) -> Vec<((String, String), ClaimState<'a>)> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_deref())
        .unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut out = Vec::new();
    for rc in spec
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default()
    {
        let (claim, template) = match (&rc.resource_claim_name, &rc.resource_claim_template_name) {
            (Some(c), _) => (c.clone(), None),
            (None, Some(t)) => match statuses.iter().find(|s| s.name == rc.name) {
                Some(s) => match &s.resource_claim_name {
                    Some(c) => (c.clone(), None),
                    None => continue,
                },
                None => (format!("{name}-{}", rc.name), Some(t.as_str())),
            },
            (None, None) => continue,
        };
        let found = rec.input.resource_claims.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(ns.as_str())
                && c.metadata.name.as_deref() == Some(claim.as_str())
        });
        let state = match (found, template) {
            (Some(c), _) => match c.status.as_ref().and_then(|s| s.allocation.as_ref()) {
                Some(_) => ClaimState::Allocated,
                None => ClaimState::Open(&c.spec),
            },
            (None, Some(t)) => match template_spec(rec, &ns, t) {
                Some(s) => ClaimState::Open(s),
                None => ClaimState::Refused(format!("ResourceClaimTemplate {ns}/{t} not found")),
            },
            (None, None) => ClaimState::Refused(format!("ResourceClaim {ns}/{claim} not found")),
        };
        out.push(((ns.clone(), claim), state));
    }
    out
}

fn template_spec<'a>(rec: &'a Record, ns: &str, name: &str) -> Option<&'a ResourceClaimSpec> {
    rec.input
        .resource_claim_templates
        .iter()
        .find(|t: &&ResourceClaimTemplate| {
            t.metadata.namespace.as_deref() == Some(ns) && t.metadata.name.as_deref() == Some(name)
        })
        .map(|t| &t.spec.spec)
}

/// The driver a class selects when its selectors are exactly `device.driver == "<driver>"`.
fn class_driver(class: &DeviceClass) -> Option<String> {
    let mut driver: Option<String> = None;
    for s in class.spec.selectors.iter().flatten() {
        let e = s.cel.as_ref()?.expression.trim();
        let rest = e.strip_prefix("device.driver")?.trim_start();
        let quoted = rest.strip_prefix("==")?.trim();
        let d = quoted.strip_prefix('"')?.strip_suffix('"')?;
        if d.contains('"') || driver.as_deref().is_some_and(|x| x != d) {
            return None;
        }
        driver = Some(d.to_string());
    }
    driver
}

/// What one request asks of one driver: devices, and capacity per dimension.
#[derive(Default)]
struct Demand {
    devices: i64,
    capacity: BTreeMap<String, i64>,
}

/// Where a demand stands: a driver's demand, not checked, or refused.
enum Asked {
    Driver(String, Demand),
    Unchecked,
    Refused(String),
}

fn request(rec: &Record, r: &DeviceRequest) -> Asked {
    // (class, selectors present, count, all, capacity) of each alternative.
    let mut alts = Vec::new();
    if let Some(e) = &r.exactly {
        let all = e.allocation_mode.as_deref() == Some("All");
        let cap = e.capacity.as_ref().and_then(|c| c.requests.as_ref());
        let sel = e.selectors.as_ref().is_some_and(|s| !s.is_empty());
        alts.push((&e.device_class_name, sel, e.count.unwrap_or(1), all, cap));
    }
    for s in r.first_available.iter().flatten() {
        let all = s.allocation_mode.as_deref() == Some("All");
        let cap = s.capacity.as_ref().and_then(|c| c.requests.as_ref());
        let sel = s.selectors.as_ref().is_some_and(|s| !s.is_empty());
        alts.push((&s.device_class_name, sel, s.count.unwrap_or(1), all, cap));
    }
    let mut best: Option<(String, Demand)> = None;
    for (class, selectors, count, all, cap) in alts {
        let Some(c) = rec
            .input
            .device_classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(class.as_str()))
        else {
            if r.first_available.is_none() {
                return Asked::Refused(format!("DeviceClass {class} not found"));
            }
            continue;
        };
        let Some(driver) = class_driver(c).filter(|_| !selectors) else {
            return Asked::Unchecked;
        };
        let demand = Demand {
            devices: if all { 1 } else { count },
            capacity: cap.map(resources::parse).unwrap_or_default(),
        };
        best = match best {
            None => Some((driver, demand)),
            Some((d, prev)) if d == driver => {
                let smaller = demand.devices < prev.devices;
                Some((d, if smaller { demand } else { prev }))
            }
            Some(_) => return Asked::Unchecked,
        };
    }
    match best {
        Some((d, demand)) => Asked::Driver(d, demand),
        None => Asked::Unchecked,
    }
}

/// Why the pods' devices cannot all be on a new node of `it` (None: they may be).
pub(super) fn shortfall(rec: &Record, pods: &[&Pod], it: &RecordedInstanceType) -> Option<String> {
    let mut seen = BTreeSet::new();
    let mut demand: BTreeMap<String, Demand> = BTreeMap::new();
    for p in pods {
        for (key, state) in pod_claims(rec, p) {
            if !seen.insert(key.clone()) {
                continue;
            }
            let spec = match state {
                ClaimState::Refused(why) => return Some(why),
                ClaimState::Allocated => continue,
                ClaimState::Open(s) => s,
            };
            for r in spec
                .devices
                .iter()
                .flat_map(|d| d.requests.iter().flatten())
            {
                match request(rec, r) {
                    Asked::Refused(why) => return Some(format!("claim {}: {why}", key.1)),
                    Asked::Unchecked => {}
                    Asked::Driver(d, a) => {
                        let total = demand.entry(d).or_default();
                        total.devices += a.devices;
                        for (k, v) in a.capacity {
                            *total.capacity.entry(k).or_insert(0) += v;
                        }
                    }
                }
            }
        }
    }
    let elsewhere: BTreeSet<&str> = rec
        .input
        .resource_slices
        .iter()
        .filter(|s| s.spec.node_name.is_none())
        .map(|s| s.spec.driver.as_str())
        .collect();
    demand
        .iter()
        .filter(|(d, _)| !elsewhere.contains(d.as_str()))
        .find_map(|(d, asked)| supply_short(it, d, asked))
}

/// Whether `it`'s devices of `driver` fall short of `asked`.
fn supply_short(it: &RecordedInstanceType, driver: &str, asked: &Demand) -> Option<String> {
    let templates: Vec<_> = it
        .resource_slice_templates
        .iter()
        .filter(|t| t.driver == driver)
        .collect();
    // Counter sets by (pool, name) → counter → budget.
    let mut budgets: BTreeMap<(&str, &str), BTreeMap<String, i64>> = BTreeMap::new();
    for t in &templates {
        for cs in &t.shared_counters {
            let counters = cs
                .counters
                .iter()
                .map(|(k, c)| (k.clone(), resources::quantity(&c.value)))
                .collect();
            budgets.insert((t.pool.as_str(), cs.name.as_str()), counters);
        }
    }
    let usable: Vec<(&str, &Device)> = templates
        .iter()
        .flat_map(|t| t.devices.iter().map(move |d| (t.pool.as_str(), d)))
        .filter(|(pool, d)| {
            d.consumes_counters
                .iter()
                .flatten()
                .all(|c| budgets.contains_key(&(*pool, c.counter_set.as_str())))
        })
        .collect();
    let shared = usable
        .iter()
        .any(|(_, d)| d.allow_multiple_allocations == Some(true));
    if shared {
        for (dim, want) in &asked.capacity {
            let offered: i64 = usable
                .iter()
                .filter_map(|(_, d)| d.capacity.as_ref()?.get(dim))
                .map(|c| resources::quantity(&c.value))
                .sum();
            if *want > offered {
                return Some(format!(
                    "{driver}: {dim} {want} asked, {offered} offered by {}",
                    it.name
                ));
            }
        }
        return None;
    }
    let n = usize::try_from(asked.devices.max(0)).unwrap_or(usize::MAX);
    if n > usable.len() {
        return Some(format!(
            "{driver}: {n} devices asked, {} usable on {}",
            usable.len(),
            it.name
        ));
    }
    counters_short(&usable, &budgets, n).map(|why| format!("{driver} on {}: {why}", it.name))
}

/// Whether `n` of the `usable` devices, each charged its smallest consumption, overdraw a
/// counter set (all of a pool's devices are assumed to share its sets: a lower bound).
fn counters_short(
    usable: &[(&str, &Device)],
    budgets: &BTreeMap<(&str, &str), BTreeMap<String, i64>>,
    n: usize,
) -> Option<String> {
    for ((pool, set), counters) in budgets {
        for (counter, budget) in counters {
            let mut charges: Vec<i64> = usable
                .iter()
                .map(|(p, d)| {
                    if p != pool {
                        return 0;
                    }
                    d.consumes_counters
                        .iter()
                        .flatten()
                        .filter(|c| c.counter_set == *set)
                        .filter_map(|c| c.counters.get(counter))
                        .map(|c| resources::quantity(&c.value))
                        .sum()
                })
                .collect();
            charges.sort_unstable();
            let least: i64 = charges.iter().take(n).sum();
            if least > *budget {
                return Some(format!(
                    "counter {set}/{counter}: {least} drawn at least, budget {budget}"
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const GPU: &str = "gpu.example.com";

    /// Pods `p0…` each claiming its own claim `c<i>` of `count` devices of class `gpu`, whose
    /// selector is `class_cel`.
    fn record(pods: usize, count: i64, class_cel: &str) -> (Record, Vec<Pod>) {
        let claims: Vec<Value> = (0..pods)
            .map(|i| {
                json!({"metadata": {"name": format!("c{i}"), "namespace": "default"},
                "spec": {"devices": {"requests": [
                    {"name": "req", "exactly": {"deviceClassName": "gpu", "count": count}}]}}})
            })
            .collect();
        let pods: Vec<Pod> = (0..pods)
            .map(|i| {
                serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i}"), "namespace": "default"},
                    "spec": {"containers": [], "resourceClaims": [
                        {"name": "gpu", "resourceClaimName": format!("c{i}")}]}}))
                .expect("pod")
            })
            .collect();
        let rec = serde_json::from_value(json!({
            "scenario": "s", "solve": 1, "karpenter": {},
            "input": {
                "resourceClaims": claims,
                "deviceClasses": [{"metadata": {"name": "gpu"},
                    "spec": {"selectors": [{"cel": {"expression": class_cel}}]}}],
            }
        }))
        .expect("record");
        (rec, pods)
    }

    fn gpu_type(devices: Value, counters: Value) -> RecordedInstanceType {
        serde_json::from_value(json!({"name": "gpu-it", "resourceSliceTemplates": [
            {"driver": GPU, "pool": "p", "sharedCounters": counters},
            {"driver": GPU, "pool": "p", "devices": devices}]}))
        .expect("instance type")
    }

    fn plain(n: usize) -> RecordedInstanceType {
        let devices: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("gpu-{i}")}))
            .collect();
        gpu_type(json!(devices), json!([]))
    }

    fn driver_class() -> String {
        format!("device.driver == \"{GPU}\"")
    }

    #[test]
    fn claims_need_as_many_devices_as_they_ask_for() {
        let (rec, pods) = record(2, 1, &driver_class());
        let refs: Vec<&Pod> = pods.iter().collect();
        let short = shortfall(&rec, &refs, &plain(1)).expect("two devices on one");
        assert!(short.contains("2 devices asked, 1 usable"), "{short}");
        // Positive control: two devices take both, one takes either pod alone.
        assert_eq!(shortfall(&rec, &refs, &plain(2)), None);
        assert_eq!(shortfall(&rec, &refs[..1], &plain(1)), None);
    }

    #[test]
    fn partitionable_devices_draw_on_their_pools_counters() {
        let (rec, pods) = record(3, 1, &driver_class());
        let refs: Vec<&Pod> = pods.iter().collect();
        let profile = |i: usize, set: &str| {
            json!({"name": format!("profile-{i}"), "consumesCounters": [
                {"counterSet": set, "counters": {"memory": {"value": "40Gi"}}}]})
        };
        let budget = json!([{"name": "slices", "counters": {"memory": {"value": "80Gi"}}}]);
        let it = gpu_type(
            json!([
                profile(0, "slices"),
                profile(1, "slices"),
                profile(2, "slices")
            ]),
            budget.clone(),
        );
        let short = shortfall(&rec, &refs, &it).expect("three profiles over budget");
        assert!(short.contains("counter slices/memory"), "{short}");
        assert_eq!(shortfall(&rec, &refs[..2], &it), None, "two fit the budget");
        // A device drawing on a set its pool lacks is unusable.
        let lost = gpu_type(json!([profile(0, "other")]), budget);
        assert!(shortfall(&rec, &refs[..1], &lost).is_some());
    }

    #[test]
    fn other_selectors_are_not_checked_and_missing_classes_refuse() {
        let (rec, pods) = record(2, 1, "device.attributes[\"x\"].model == \"a\"");
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(shortfall(&rec, &refs, &plain(1)), None, "not checked");
        let (mut rec, _) = record(2, 1, &driver_class());
        rec.input.device_classes.clear();
        let why = shortfall(&rec, &refs, &plain(2)).expect("no class");
        assert!(why.contains("DeviceClass gpu not found"), "{why}");
    }
}
