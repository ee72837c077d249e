//! The devices (Dynamic Resource Allocation) a template's nodes publish, as its annotations
//! declare them ([`annotations::RESOURCE_SLICES`], or Cluster Autoscaler's
//! [`annotations::CA_DRA_DRIVER`] with [`annotations::CA_GPU_COUNT`]); read here once for the
//! catalog (`templates::devices`) and the test provider that plays the driver.
//!
//! - resource-slices: ResourceSlices as YAML (or JSON), so a user can copy them from a running
//!   node: the output of `kubectl get resourceslices --field-selector spec.nodeName=NODE -o
//!   yaml` (a `List`), a list of ResourceSlices, one ResourceSlice, or a list of their `spec`s.
//!   Of each slice only `driver` and `devices` (name, attributes, capacity) are read (slices of
//!   one driver are joined); partitionable devices (`sharedCounters`, `consumesCounters`) are
//!   refused.
//! - dra-driver with gpu-count `n`: devices `gpu-0` … `gpu-{n-1}` of that driver, each with the
//!   one attribute `type: gpu`, no capacity (Cluster Autoscaler's `InstanceResourceSlices`);
//!   `n` = 0: none.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, ResourceSlice};
use serde_json::Value;

use crate::consts::annotations;

/// One driver's devices on a node of the template.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredSlice {
    pub driver: String,
    pub devices: Vec<Device>,
}

/// Attribute of Cluster Autoscaler's synthetic devices (`GpuDeviceType`).
pub const CA_DEVICE_TYPE: &str = "gpu";

/// Devices per slice Kubernetes allows (`ResourceSliceMaxDevices`).
const MAX_DEVICES: usize = 128;

/// The devices `annotations` declare (resource-slices first), and the annotation that
/// failed with why; empty: none.
pub fn declared(
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<DeclaredSlice>, (&'static str, String)> {
    if let Some(raw) = annotations.get(annotations::RESOURCE_SLICES) {
        parse_resource_slices(raw).map_err(|r| (annotations::RESOURCE_SLICES, r))
    } else if let Some(driver) = annotations.get(annotations::CA_DRA_DRIVER) {
        let count = annotations
            .get(annotations::CA_GPU_COUNT)
            .map_or("0", String::as_str);
        ca_slices(driver, count)
    } else {
        Ok(Vec::new())
    }
}

/// Cluster Autoscaler's form: `count` devices `gpu-i` of `driver`.
pub fn ca_slices(driver: &str, count: &str) -> Result<Vec<DeclaredSlice>, (&'static str, String)> {
    let driver = driver.trim();
    validate_driver(driver).map_err(|r| (annotations::CA_DRA_DRIVER, r))?;
    let n: usize = count.trim().parse().map_err(|_| {
        (
            annotations::CA_GPU_COUNT,
            format!("gpu-count {count:?} is not a non-negative integer"),
        )
    })?;
    if n > MAX_DEVICES {
        return Err((
            annotations::CA_GPU_COUNT,
            format!("gpu-count {n} is more than the {MAX_DEVICES} devices a ResourceSlice holds"),
        ));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let devices = (0..n)
        .map(|i| Device {
            name: format!("gpu-{i}"),
            attributes: Some(BTreeMap::from([(
                "type".to_string(),
                DeviceAttribute {
                    string: Some(CA_DEVICE_TYPE.to_string()),
                    ..DeviceAttribute::default()
                },
            )])),
            ..Device::default()
        })
        .collect();
    Ok(vec![DeclaredSlice {
        driver: driver.to_string(),
        devices,
    }])
}

/// Whether the ResourceSlice belongs to Node `node` (`spec.nodeName`, or a Node owner).
pub fn slice_of_node(slice: &ResourceSlice, node: &str) -> bool {
    slice.spec.node_name.as_deref() == Some(node)
        || slice
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Node" && o.name == node)
}

/// The complete pools among `slices` (Karpenter's and kube-scheduler's rule: the slices of
/// the pool's newest generation number its `resourceSliceCount`, not zero), as (driver, pool)
/// → that generation.
fn complete_pools<'a>(slices: &[&'a ResourceSlice]) -> BTreeMap<(&'a str, &'a str), i64> {
    // (driver, pool) → (generation, slices seen of it, resourceSliceCount)
    let mut pools: BTreeMap<(&str, &str), (i64, i64, i64)> = BTreeMap::new();
    for s in slices {
        let pool = &s.spec.pool;
        let e = pools
            .entry((s.spec.driver.as_str(), pool.name.as_str()))
            .or_insert((pool.generation, 0, pool.resource_slice_count));
        if pool.generation > e.0 {
            *e = (pool.generation, 0, pool.resource_slice_count);
        }
        if pool.generation == e.0 {
            e.1 += 1;
        }
    }
    pools
        .into_iter()
        .filter(|(_, (_, seen, count))| *count > 0 && seen == count)
        .map(|(k, (generation, _, _))| (k, generation))
        .collect()
}

/// The drivers with a complete pool among `slices`.
pub fn complete_drivers(slices: &[&ResourceSlice]) -> BTreeSet<String> {
    complete_pools(slices)
        .into_keys()
        .map(|(driver, _)| driver.to_string())
        .collect()
}

/// What a node's complete pools publish, in the resource-slices annotation's form (a JSON
/// list of `{driver, devices}`, drivers and devices sorted): what a template's later nodes are
/// expected to publish. `None` when no pool is complete.
pub fn learned_slices(slices: &[&ResourceSlice]) -> Option<String> {
    let complete = complete_pools(slices);
    if complete.is_empty() {
        return None;
    }
    let mut by_driver: BTreeMap<&str, Vec<&Device>> = BTreeMap::new();
    for s in slices {
        let key = (s.spec.driver.as_str(), s.spec.pool.name.as_str());
        if complete.get(&key) == Some(&s.spec.pool.generation) {
            by_driver
                .entry(s.spec.driver.as_str())
                .or_default()
                .extend(s.spec.devices.iter().flatten());
        }
    }
    let list: Vec<Value> = by_driver
        .into_iter()
        .map(|(driver, mut devices)| {
            devices.sort_by(|a, b| a.name.cmp(&b.name));
            devices.dedup_by(|a, b| a.name == b.name);
            serde_json::json!({"driver": driver, "devices": devices})
        })
        .collect();
    serde_json::to_string(&list).ok()
}

/// The resource-slices annotation's slices.
pub fn parse_resource_slices(raw: &str) -> Result<Vec<DeclaredSlice>, String> {
    let v: Value = serde_saphyr::from_str(raw).map_err(|e| format!("not YAML: {e}"))?;
    let items: Vec<&Value> = match &v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => match o.get("items") {
            Some(Value::Array(a)) => a.iter().collect(),
            Some(_) => return Err("items is not a list".into()),
            None => vec![&v],
        },
        _ => return Err("expected a list of ResourceSlices, a ResourceSlice or a List".into()),
    };
    let mut out: Vec<DeclaredSlice> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let spec = item.get("spec").unwrap_or(item);
        let slice = read_slice(spec).map_err(|e| format!("slice [{i}]: {e}"))?;
        if let Some(same) = out.iter_mut().find(|s| s.driver == slice.driver) {
            same.devices.extend(slice.devices);
        } else {
            out.push(slice);
        }
    }
    for s in &out {
        let mut seen = BTreeSet::new();
        if let Some(d) = s.devices.iter().find(|d| !seen.insert(d.name.as_str())) {
            return Err(format!(
                "driver {}: device {} listed twice",
                s.driver, d.name
            ));
        }
    }
    Ok(out)
}

/// One slice's `spec`: its driver and devices.
fn read_slice(spec: &Value) -> Result<DeclaredSlice, String> {
    let driver = spec
        .get("driver")
        .and_then(Value::as_str)
        .ok_or("spec.driver is missing")?;
    validate_driver(driver)?;
    if spec
        .get("sharedCounters")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err("partitionable devices (sharedCounters) are not supported".into());
    }
    let raw = match spec.get("devices") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err("devices is not a list".into()),
    };
    if raw.len() > MAX_DEVICES {
        return Err(format!("more than {MAX_DEVICES} devices"));
    }
    let mut devices = Vec::with_capacity(raw.len());
    for (j, d) in raw.into_iter().enumerate() {
        let dev: Device = serde_json::from_value(d).map_err(|e| format!("devices[{j}]: {e}"))?;
        check_device(&dev).map_err(|e| format!("devices[{j}] ({}): {e}", dev.name))?;
        devices.push(dev);
    }
    Ok(DeclaredSlice {
        driver: driver.to_string(),
        devices,
    })
}

fn check_device(d: &Device) -> Result<(), String> {
    if d.name.is_empty() {
        return Err("name is empty".into());
    }
    if d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err("partitionable devices (consumesCounters) are not supported".into());
    }
    for (k, a) in d.attributes.iter().flatten() {
        let set = [
            a.int.is_some(),
            a.bool.is_some(),
            a.string.is_some(),
            a.version.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return Err(format!(
                "attribute {k}: exactly one of int, bool, string, version must be set"
            ));
        }
        if let Some(v) = &a.version
            && semver_ok(v).is_err()
        {
            return Err(format!(
                "attribute {k}: version {v:?} is not a semantic version"
            ));
        }
    }
    Ok(())
}

/// `major.minor.patch[-pre][+build]`, numbers without leading zeros.
fn semver_ok(v: &str) -> Result<(), ()> {
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = |p: &&str| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p.len() == 1 || !p.starts_with('0'))
    };
    if parts.len() == 3 && parts.iter().all(numeric) {
        Ok(())
    } else {
        Err(())
    }
}

/// A DRA driver name: a DNS subdomain of at most 63 characters (Kubernetes validates it so).
fn validate_driver(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "driver {name:?} is not a DNS subdomain of at most 63 characters"
        ))
    }
}
