//! One template read on its own: capacity, labels, taints, zones and price (the per-template
//! rules of [`crate::catalog`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::catalog::{default_price, is_machine_template, template_ref};
use crate::error::{SettingsError, TemplateError};
use crate::labels::{
    is_restricted_label, parse_labels, parse_taints, validate_label_key, validate_label_value,
};
use crate::model::{DefaultApplied, PriceSource, Resources, TemplateRef};
use crate::names::*;
use crate::quantity::{parse_milli, parse_value};
use crate::settings::{CatalogSettings, DEFAULT_MAX_PODS, Resolved, scalar_string};

/// Default GPU resource name when `…/gpu-count` has no `…/gpu-type`.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

/// One template read on its own, before merging.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateShape {
    pub template: TemplateRef,
    pub instance_type: String,
    pub capacity: Resources,
    pub allocatable: Resources,
    /// Labels without the per-offering ones (zone, capacity type, instance template).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub capacity_type: String,
    /// One entry per offering.
    pub zones: Vec<Option<String>>,
    pub price: f64,
    pub price_source: PriceSource,
    pub defaults_applied: Vec<DefaultApplied>,
}

fn ann_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}
fn label_field(key: &str) -> String {
    format!("metadata.labels[{key}]")
}

struct Ctx<'a> {
    tref: &'a TemplateRef,
}

impl Ctx<'_> {
    fn t(&self) -> Box<TemplateRef> {
        Box::new(self.tref.clone())
    }
    fn quantity(&self, field: String, resource: &str, value: &str) -> Result<i64, TemplateError> {
        let parsed = if resource == Resources::CPU {
            parse_milli(value)
        } else {
            parse_value(value)
        };
        let v = parsed.map_err(|source| TemplateError::Quantity {
            template: self.t(),
            field: field.clone(),
            value: value.to_string(),
            source,
        })?;
        if v < 0 {
            return Err(TemplateError::Negative {
                template: self.t(),
                field,
                value: value.to_string(),
            });
        }
        Ok(v)
    }
    fn integer(&self, field: String, value: &str) -> Result<i64, TemplateError> {
        match value.trim().parse::<i64>() {
            Ok(v) if v >= 0 => Ok(v),
            _ => Err(TemplateError::Integer {
                template: self.t(),
                field,
                value: value.to_string(),
            }),
        }
    }
    fn label_err(&self, field: &str, value: &str, reason: impl Into<String>) -> TemplateError {
        TemplateError::Label {
            template: self.t(),
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

const ARCHES: [&str; 4] = ["amd64", "arm64", "s390x", "ppc64le"];
const OSES: [&str; 2] = ["linux", "windows"];
const CAPACITY_TYPES: [&str; 3] = ["spot", "on-demand", "reserved"];

/// Reads one template into its shape. `settings` must be resolved from a [`CatalogSettings`].
pub(crate) fn shape_of(
    obj: &DynamicObject,
    settings: &Resolved,
) -> Result<TemplateShape, TemplateError> {
    let tref = template_ref(obj);
    let cx = Ctx { tref: &tref };
    if !is_machine_template(&tref.api_version, &tref.kind) {
        return Err(TemplateError::NotATemplate {
            template: cx.t(),
            reason: format!(
                "kind {:?} in {:?} is not an {INFRASTRUCTURE_GROUP} *MachineTemplate",
                tref.kind, tref.api_version
            ),
        });
    }
    if tref.name.is_empty() {
        return Err(TemplateError::NotATemplate {
            template: cx.t(),
            reason: "metadata.name is empty".into(),
        });
    }
    let empty = BTreeMap::new();
    let annotations = obj.metadata.annotations.as_ref().unwrap_or(&empty);
    let tlabels = obj.metadata.labels.as_ref().unwrap_or(&empty);
    let mut defaults = Vec::new();
    let mut note = |field: &str, value: &str| {
        defaults.push(DefaultApplied {
            template: tref.clone(),
            field: field.to_string(),
            value: value.to_string(),
        })
    };

    // Capacity: status.capacity, then annotations.
    let mut cap = BTreeMap::<String, i64>::new();
    if let Some(status_cap) = obj.data.pointer("/status/capacity") {
        let Some(m) = status_cap.as_object() else {
            return Err(TemplateError::Quantity {
                template: cx.t(),
                field: "status.capacity".into(),
                value: status_cap.to_string(),
                source: crate::quantity::QuantityError::Syntax(
                    "status.capacity must be a map".into(),
                ),
            });
        };
        for (k, v) in m {
            let field = format!("status.capacity[{k}]");
            let s = scalar_string(v).unwrap_or_else(|| v.to_string());
            cap.insert(k.clone(), cx.quantity(field, k, &s)?);
        }
    }
    for (key, res) in [
        (CA_CPU, Resources::CPU),
        (CA_MEMORY, Resources::MEMORY),
        (CA_EPHEMERAL_DISK, Resources::EPHEMERAL_STORAGE),
    ] {
        if let Some(v) = annotations.get(key) {
            cap.insert(res.to_string(), cx.quantity(ann_field(key), res, v)?);
        }
    }
    if let Some(count) = annotations.get(CA_GPU_COUNT) {
        let n = cx.integer(ann_field(CA_GPU_COUNT), count)?;
        let res = match annotations.get(CA_GPU_TYPE).map(|s| s.trim()) {
            Some(t) if !t.is_empty() => {
                validate_label_key(t).map_err(|e| cx.label_err(&ann_field(CA_GPU_TYPE), t, e))?;
                t.to_string()
            }
            _ => {
                if n > 0 {
                    note(CA_GPU_TYPE, DEFAULT_GPU_RESOURCE);
                }
                DEFAULT_GPU_RESOURCE.to_string()
            }
        };
        if n > 0 {
            cap.insert(res, n);
        } else {
            cap.remove(&res);
        }
    }
    let pods = if let Some(p) = settings.max_pods {
        p
    } else if let Some(v) = annotations.get(CA_MAX_PODS) {
        cx.integer(ann_field(CA_MAX_PODS), v)?
    } else if let Some(p) = cap.get(Resources::PODS).copied() {
        p
    } else {
        note("pods", &DEFAULT_MAX_PODS.to_string());
        DEFAULT_MAX_PODS
    };
    cap.insert(Resources::PODS.to_string(), pods);
    if cap.get(Resources::CPU).copied().unwrap_or(0) <= 0 {
        return Err(TemplateError::NoCpu { template: cx.t() });
    }
    if cap.get(Resources::MEMORY).copied().unwrap_or(0) <= 0 {
        return Err(TemplateError::NoMemory { template: cx.t() });
    }
    let capacity = Resources(cap);

    // Allocatable.
    let overhead = settings.overhead(&capacity);
    let mut alloc = capacity.0.clone();
    for (res, held) in &overhead {
        let Some(c) = alloc.get_mut(*res) else {
            continue;
        };
        let left = c.saturating_sub(*held);
        if left <= 0 && (*res == Resources::CPU || *res == Resources::MEMORY) {
            return Err(TemplateError::NothingAllocatable {
                template: cx.t(),
                resource: res.to_string(),
                capacity: capacity.quantity(res),
                allocatable: crate::model::format_resource(res, left),
            });
        }
        *c = left.max(0);
    }
    let allocatable = Resources(alloc);

    // Labels.
    let node_info = obj.data.pointer("/status/nodeInfo");
    let info = |k: &str| {
        node_info
            .and_then(|n| n.get(k))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let mut labels = BTreeMap::new();
    match info("architecture") {
        Some(a) => {
            labels.insert(LABEL_ARCH.to_string(), a.to_string());
        }
        None => {
            note(LABEL_ARCH, "amd64");
            labels.insert(LABEL_ARCH.to_string(), "amd64".to_string());
        }
    }
    match info("operatingSystem") {
        Some(os) => {
            labels.insert(LABEL_OS.to_string(), os.to_string());
        }
        None => {
            note(LABEL_OS, "linux");
            labels.insert(LABEL_OS.to_string(), "linux".to_string());
        }
    }
    let arch_from_info = info("architecture").is_some();
    let os_from_info = info("operatingSystem").is_some();
    let mut ann_labels = BTreeMap::new();
    if let Some(s) = annotations.get(CA_LABELS) {
        ann_labels = parse_labels(s)
            .map_err(|(entry, reason)| cx.label_err(&ann_field(CA_LABELS), &entry, reason))?;
        if let Some((k, v)) = ann_labels.iter().find(|(k, _)| is_restricted_label(k)) {
            return Err(cx.label_err(
                &ann_field(CA_LABELS),
                &format!("{k}={v}"),
                "restricted label: set by Karpenter or the catalog itself",
            ));
        }
    }
    // The defaults notes are only true if the annotation did not set them either.
    if !arch_from_info && ann_labels.contains_key(LABEL_ARCH) {
        defaults.retain(|d| d.field != LABEL_ARCH);
    }
    if !os_from_info && ann_labels.contains_key(LABEL_OS) {
        defaults.retain(|d| d.field != LABEL_OS);
    }
    labels.extend(ann_labels.clone());
    let arch_field = if ann_labels.contains_key(LABEL_ARCH) {
        ann_field(CA_LABELS)
    } else {
        "status.nodeInfo.architecture".into()
    };
    let os_field = if ann_labels.contains_key(LABEL_OS) {
        ann_field(CA_LABELS)
    } else {
        "status.nodeInfo.operatingSystem".into()
    };
    let arch = labels.get(LABEL_ARCH).cloned().unwrap_or_default();
    if !ARCHES.contains(&arch.as_str()) {
        return Err(TemplateError::Architecture {
            template: cx.t(),
            field: arch_field,
            value: arch,
        });
    }
    let os = labels.get(LABEL_OS).cloned().unwrap_or_default();
    if !OSES.contains(&os.as_str()) {
        return Err(TemplateError::OperatingSystem {
            template: cx.t(),
            field: os_field,
            value: os,
        });
    }

    let (instance_type, it_field) = match tlabels.get(LABEL_INSTANCE_TYPE) {
        Some(v) => (v.trim().to_string(), label_field(LABEL_INSTANCE_TYPE)),
        None => (tref.name.clone(), "metadata.name".to_string()),
    };
    if instance_type.is_empty() {
        return Err(cx.label_err(&it_field, &instance_type, "empty instance type"));
    }
    validate_label_value(&instance_type).map_err(|e| cx.label_err(&it_field, &instance_type, e))?;

    let (capacity_type, ct_field) = if let Some(v) = tlabels.get(LABEL_CAPACITY_TYPE) {
        (v.trim().to_string(), label_field(LABEL_CAPACITY_TYPE))
    } else if let Some(v) = ann_labels.get(LABEL_CAPACITY_TYPE) {
        (v.clone(), ann_field(CA_LABELS))
    } else {
        ("on-demand".to_string(), String::new())
    };
    if !CAPACITY_TYPES.contains(&capacity_type.as_str()) {
        return Err(TemplateError::CapacityType {
            template: cx.t(),
            field: ct_field,
            value: capacity_type,
        });
    }

    let zone = if let Some(z) = tlabels.get(LABEL_ZONE) {
        let z = z.trim().to_string();
        validate_label_value(&z).map_err(|e| cx.label_err(&label_field(LABEL_ZONE), &z, e))?;
        Some(z).filter(|z| !z.is_empty())
    } else {
        ann_labels
            .get(LABEL_ZONE)
            .cloned()
            .filter(|z| !z.is_empty())
    };
    let zones: Vec<Option<String>> = match zone {
        Some(z) => vec![Some(z)],
        None if !settings.failure_domains.is_empty() => {
            settings.failure_domains.iter().cloned().map(Some).collect()
        }
        None => vec![None],
    };

    // Per-offering labels are added when offerings are known; everything else is fixed here.
    labels.remove(LABEL_ZONE);
    labels.remove(LABEL_CAPACITY_TYPE);
    labels.insert(LABEL_INSTANCE_TYPE.to_string(), instance_type.clone());
    labels.insert(
        LABEL_INSTANCE_CPU.to_string(),
        (capacity.cpu_milli() / 1000).to_string(),
    );
    labels.insert(
        LABEL_INSTANCE_MEMORY.to_string(),
        (capacity.memory_bytes() >> 20).to_string(),
    );
    labels.insert(
        LABEL_INSTANCE_GPU_COUNT.to_string(),
        capacity.gpu_count().to_string(),
    );
    labels.remove(LABEL_INSTANCE_TEMPLATE);

    let taints = match annotations.get(CA_TAINTS) {
        Some(s) => parse_taints(s).map_err(|(entry, reason)| TemplateError::Taint {
            template: cx.t(),
            field: ann_field(CA_TAINTS),
            value: entry,
            reason,
        })?,
        None => Vec::new(),
    };

    let (price, price_source) = match annotations.get(ANNOTATION_PRICE) {
        Some(raw) => {
            let bad = |reason: &str| TemplateError::Price {
                template: cx.t(),
                field: ann_field(ANNOTATION_PRICE),
                value: raw.clone(),
                reason: reason.to_string(),
            };
            let p: f64 = raw
                .trim()
                .parse()
                .map_err(|_| bad("not a decimal number"))?;
            if !p.is_finite() {
                return Err(bad("not finite"));
            }
            if p < 0.0 {
                return Err(bad("negative"));
            }
            (p, PriceSource::Annotation)
        }
        None => (
            default_price(&capacity, &capacity_type),
            PriceSource::Default,
        ),
    };

    Ok(TemplateShape {
        template: tref.clone(),
        instance_type,
        capacity,
        allocatable,
        labels,
        taints,
        capacity_type,
        zones,
        price,
        price_source,
        defaults_applied: defaults,
    })
}

/// Reads one template on its own (no merging), with the given settings.
pub fn template_shape(
    obj: &DynamicObject,
    settings: &CatalogSettings,
) -> Result<Result<TemplateShape, TemplateError>, SettingsError> {
    let resolved = settings.resolve()?;
    Ok(shape_of(obj, &resolved))
}
