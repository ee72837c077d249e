//! Resizable templates: a template whose machines can be any size inside declared ranges
//! (vSphere, Nutanix, Proxmox, Elf, KubeVirt machines).
//!
//! Annotations on the template (all in [`api::consts::annotations`]):
//! - `…/resizable-cpu: "2-64/2"` — vCPU `min-max/step` (whole vCPUs);
//! - `…/resizable-memory: "4Gi-512Gi/4Gi"` — memory `min-max/step` (whole MiB);
//! - `…/resizable-memory-per-cpu: "1Gi-16Gi"` (optional) — the memory per vCPU a size keeps;
//! - `…/price-per-cpu`, `…/price-per-gib` (optional, per hour) — else the default formula;
//! - `…/resizable-headroom: "10"` (optional) — percent added to a NodeClaim's demand;
//! - `…/resizable-fields` (optional for the built-in kinds, see [`FieldMap`]).
//!
//! Both ranges make a template resizable (one without the other is an error); it then needs
//! no `status.capacity`. The catalog offers a bounded grid of sizes ([`ResizeSpec::grid`],
//! at most [`MAX_GRID`]) named `<instance-type>-<cpu>c-<memory>` (`vs-6c-20gi`); after the
//! solve each NodeClaim is shrunk to the smallest lattice size that fits it (the `sizing`
//! module), which the catalog synthesizes by name on demand.

use api::consts::annotations as ann;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::TemplateError;
use crate::quantity::{format_bytes, parse_milli, parse_value};
use crate::reference::TemplateRef;

pub use cloudprovider::resize::{MAX_GRID, Range, Size, Sizing, parse_sized_name, sized_name};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// How a memory value is written in the clone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MemoryUnit {
    /// An integer number of MiB (`memoryMiB`).
    MiB,
    /// An integer number of GiB.
    GiB,
    /// A Kubernetes quantity string (`"20Gi"`).
    Quantity,
}

/// Where a size goes in the InfraMachine, as paths in the template (`spec.template.spec.…`,
/// written at `spec.…` of the clone).
///
/// Annotation syntax: `role=path[:unit]`, comma-separated. Roles: `cpu` (total vCPUs),
/// `cpu-sockets` and `cpu-cores-per-socket` (vCPUs = sockets × cores per socket; the
/// template's cores per socket is kept when it divides the size), `memory` (unit `MiB`,
/// `GiB` or `quantity`, default `MiB`). A cpu role and `memory` are required.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FieldMap {
    pub cpu: Option<String>,
    pub sockets: Option<String>,
    pub cores_per_socket: Option<String>,
    pub memory: String,
    pub memory_unit: Option<MemoryUnit>,
}

/// The built-in field map of a template kind (verified against each provider's API types).
pub fn builtin_fields(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "VSphereMachineTemplate" => {
            "cpu=spec.template.spec.numCPUs,cpu-cores-per-socket=spec.template.spec.numCoresPerSocket,memory=spec.template.spec.memoryMiB:MiB"
        }
        "NutanixMachineTemplate" => {
            "cpu-sockets=spec.template.spec.vcpuSockets,cpu-cores-per-socket=spec.template.spec.vcpusPerSocket,memory=spec.template.spec.memorySize:quantity"
        }
        "ProxmoxMachineTemplate" => {
            "cpu-sockets=spec.template.spec.numSockets,cpu-cores-per-socket=spec.template.spec.numCores,memory=spec.template.spec.memoryMiB:MiB"
        }
        // Elf's JSON name is `numCPUS`.
        "ElfMachineTemplate" => {
            "cpu=spec.template.spec.numCPUS,cpu-cores-per-socket=spec.template.spec.numCoresPerSocket,memory=spec.template.spec.memoryMiB:MiB"
        }
        "KubevirtMachineTemplate" => {
            "cpu=spec.template.spec.virtualMachineTemplate.spec.template.spec.domain.cpu.cores,memory=spec.template.spec.virtualMachineTemplate.spec.template.spec.domain.memory.guest:quantity"
        }
        "TestMachineTemplate" => {
            "cpu=spec.template.spec.capacity.cpu:quantity,memory=spec.template.spec.capacity.memory:quantity"
        }
        _ => return None,
    })
}

const CLONE_PREFIX: &str = "spec.template.";

impl FieldMap {
    /// Parses the annotation syntax; `Err(reason)`.
    pub fn parse(s: &str) -> Result<FieldMap, String> {
        let mut m = FieldMap::default();
        let mut cpu_unit_ok = true;
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (role, rest) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?}: expected role=path[:unit]"))?;
            let (path, unit) = match rest.rsplit_once(':') {
                Some((p, u)) => (p.trim(), Some(u.trim())),
                None => (rest.trim(), None),
            };
            let rest_of = path.strip_prefix(CLONE_PREFIX).unwrap_or("");
            if rest_of.is_empty() || path.split('.').any(str::is_empty) {
                return Err(format!(
                    "{path:?}: a path must start with {CLONE_PREFIX:?} and have no empty segment"
                ));
            }
            let path = path.to_string();
            match role.trim() {
                "cpu" => {
                    cpu_unit_ok = matches!(unit, None | Some("quantity") | Some("count"));
                    m.cpu = Some(path)
                }
                "cpu-sockets" => m.sockets = Some(path),
                "cpu-cores-per-socket" => m.cores_per_socket = Some(path),
                "memory" => {
                    m.memory = path;
                    m.memory_unit = Some(match unit {
                        None | Some("MiB") => MemoryUnit::MiB,
                        Some("GiB") => MemoryUnit::GiB,
                        Some("quantity") => MemoryUnit::Quantity,
                        Some(u) => {
                            return Err(format!("unknown memory unit {u:?} (MiB, GiB, quantity)"));
                        }
                    });
                }
                r => {
                    return Err(format!(
                        "unknown role {r:?} (cpu, cpu-sockets, cpu-cores-per-socket, memory)"
                    ));
                }
            }
        }
        if !cpu_unit_ok {
            return Err("cpu takes no unit other than quantity".into());
        }
        if m.cpu.is_none() && m.sockets.is_none() {
            return Err("no cpu or cpu-sockets field".into());
        }
        if m.memory.is_empty() {
            return Err("no memory field".into());
        }
        Ok(m)
    }

    /// The writes that put `size` into a clone of `template` (its `spec.template.spec`
    /// read for the cores per socket it keeps): `(path in the clone, value)`.
    pub fn writes(&self, size: Size, template: &Value) -> Vec<FieldWrite> {
        let total = size.vcpus();
        let quantity_cpu = self
            .cpu
            .as_ref()
            .is_some_and(|p| p.ends_with(".capacity.cpu"));
        let mut out = Vec::new();
        let kept = self
            .cores_per_socket
            .as_ref()
            .and_then(|p| read_path(template, p))
            .and_then(Value::as_i64)
            .filter(|v| *v > 0);
        let per = kept.map(|k| gcd(k, total)).unwrap_or(1).max(1);
        if let Some(p) = &self.cpu {
            let v = if quantity_cpu {
                Value::String(total.to_string())
            } else {
                Value::from(total)
            };
            out.push(FieldWrite::new(p, v));
        }
        if let Some(p) = &self.sockets {
            out.push(FieldWrite::new(p, Value::from(total / per)));
        }
        if let Some(p) = &self.cores_per_socket
            && (kept.is_some() || self.sockets.is_some())
        {
            out.push(FieldWrite::new(p, Value::from(per)));
        }
        let mem = match self.memory_unit.unwrap_or(MemoryUnit::MiB) {
            MemoryUnit::MiB => Value::from(size.memory / MIB),
            MemoryUnit::GiB => Value::from(size.memory / GIB),
            MemoryUnit::Quantity => Value::String(format_bytes(size.memory)),
        };
        out.push(FieldWrite::new(&self.memory, mem));
        out
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The value at a dotted path of a JSON object.
fn read_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// One field of the clone to set: a dotted path from the clone's root (`spec.numCPUs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FieldWrite {
    pub path: String,
    pub value: Value,
}

impl FieldWrite {
    fn new(template_path: &str, value: Value) -> FieldWrite {
        FieldWrite {
            path: template_path
                .strip_prefix(CLONE_PREFIX)
                .unwrap_or(template_path)
                .to_string(),
            value,
        }
    }

    /// Sets the field in `obj` (a clone's data), creating the objects on the way; false
    /// when a value on the way is not an object.
    pub fn apply(&self, obj: &mut Value) -> bool {
        let mut cur = obj;
        let mut parts = self.path.split('.').peekable();
        while let Some(k) = parts.next() {
            let Some(map) = cur.as_object_mut() else {
                return false;
            };
            if parts.peek().is_none() {
                map.insert(k.to_string(), self.value.clone());
                return true;
            }
            cur = map
                .entry(k.to_string())
                .or_insert_with(|| Value::Object(Default::default()));
        }
        false
    }
}

/// A resizable template's declaration: how it may be sized, and where a size goes in the
/// InfraMachine.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResizeSpec {
    #[serde(flatten)]
    pub sizing: Sizing,
    pub fields: FieldMap,
}

impl std::ops::Deref for ResizeSpec {
    type Target = Sizing;
    fn deref(&self) -> &Sizing {
        &self.sizing
    }
}

/// Reads the resizable annotations of a template of `kind`: `None` when it is not
/// resizable, an error naming the annotation when one is malformed.
pub fn spec_of(
    tref: &TemplateRef,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<Option<ResizeSpec>, TemplateError> {
    let cpu_raw = annotations.get(ann::RESIZABLE_CPU);
    let mem_raw = annotations.get(ann::RESIZABLE_MEMORY);
    let err = |key: &str, value: &str, reason: String| TemplateError::Resizable {
        template: Box::new(tref.clone()),
        field: format!("metadata.annotations[{key}]"),
        value: value.to_string(),
        reason,
    };
    let (cpu_raw, mem_raw) = match (cpu_raw, mem_raw) {
        (None, None) => return Ok(None),
        (Some(c), Some(m)) => (c, m),
        (Some(c), None) => {
            return Err(err(
                ann::RESIZABLE_CPU,
                c,
                format!("needs {} too", ann::RESIZABLE_MEMORY),
            ));
        }
        (None, Some(m)) => {
            return Err(err(
                ann::RESIZABLE_MEMORY,
                m,
                format!("needs {} too", ann::RESIZABLE_CPU),
            ));
        }
    };
    let cpu = parse_range(cpu_raw, true).map_err(|r| err(ann::RESIZABLE_CPU, cpu_raw, r))?;
    let memory = parse_range(mem_raw, false).map_err(|r| err(ann::RESIZABLE_MEMORY, mem_raw, r))?;
    let memory_per_cpu = match annotations.get(ann::RESIZABLE_MEMORY_PER_CPU) {
        None => None,
        Some(raw) => Some(parse_pair(raw).map_err(|r| err(ann::RESIZABLE_MEMORY_PER_CPU, raw, r))?),
    };
    let price = |key: &str| -> Result<Option<f64>, TemplateError> {
        let Some(raw) = annotations.get(key) else {
            return Ok(None);
        };
        match raw.trim().parse::<f64>() {
            Ok(p) if p.is_finite() && p >= 0.0 => Ok(Some(p)),
            _ => Err(err(key, raw, "expected a non-negative decimal".into())),
        }
    };
    let headroom_percent = match annotations.get(ann::RESIZABLE_HEADROOM) {
        None => 0,
        Some(raw) => match raw.trim().trim_end_matches('%').parse::<i64>() {
            Ok(p) if (0..=1000).contains(&p) => p,
            _ => {
                return Err(err(
                    ann::RESIZABLE_HEADROOM,
                    raw,
                    "expected a percent 0-1000".into(),
                ));
            }
        },
    };
    let fields_raw = annotations
        .get(ann::RESIZABLE_FIELDS)
        .map(String::as_str)
        .or_else(|| builtin_fields(&tref.kind));
    let Some(fields_raw) = fields_raw else {
        return Err(err(
            ann::RESIZABLE_FIELDS,
            "",
            format!(
                "no built-in field map for kind {}: set this annotation",
                tref.kind
            ),
        ));
    };
    let fields =
        FieldMap::parse(fields_raw).map_err(|r| err(ann::RESIZABLE_FIELDS, fields_raw, r))?;
    let spec = ResizeSpec {
        sizing: Sizing {
            cpu,
            memory,
            memory_per_cpu,
            price_per_cpu: price(ann::PRICE_PER_CPU)?,
            price_per_gib: price(ann::PRICE_PER_GIB)?,
            headroom_percent,
        },
        fields,
    };
    if spec.grid().is_empty() {
        return Err(err(
            ann::RESIZABLE_MEMORY_PER_CPU,
            annotations
                .get(ann::RESIZABLE_MEMORY_PER_CPU)
                .map(String::as_str)
                .unwrap_or(""),
            "no size of the ranges keeps this memory per cpu".into(),
        ));
    }
    Ok(Some(spec))
}

/// `min-max/step`: cpu in whole vCPUs, memory in whole MiB.
fn parse_range(raw: &str, cpu: bool) -> Result<Range, String> {
    let (bounds, step) = raw
        .trim()
        .split_once('/')
        .ok_or_else(|| "expected min-max/step".to_string())?;
    let (min, max) = bounds
        .split_once('-')
        .ok_or_else(|| "expected min-max/step".to_string())?;
    let q = |s: &str| -> Result<i64, String> {
        let v = if cpu {
            parse_milli(s.trim())
        } else {
            parse_value(s.trim())
        }
        .map_err(|e| format!("{s:?}: {e}"))?;
        let unit = if cpu { 1000 } else { MIB };
        if v <= 0 || v % unit != 0 {
            return Err(format!(
                "{s:?}: must be positive and whole {}",
                if cpu { "vCPUs" } else { "MiB" }
            ));
        }
        Ok(v)
    };
    let r = Range {
        min: q(min)?,
        max: q(max)?,
        step: q(step)?,
    };
    if r.min > r.max {
        return Err("min is above max".into());
    }
    Ok(r)
}

/// `min-max` memory per vCPU.
fn parse_pair(raw: &str) -> Result<(i64, i64), String> {
    let (lo, hi) = raw
        .trim()
        .split_once('-')
        .ok_or_else(|| "expected min-max".to_string())?;
    let q = |s: &str| parse_value(s.trim()).map_err(|e| format!("{s:?}: {e}"));
    let (lo, hi) = (q(lo)?, q(hi)?);
    if lo < 0 || lo > hi || hi == 0 {
        return Err("expected 0 <= min <= max, max > 0".into());
    }
    Ok((lo, hi))
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;
