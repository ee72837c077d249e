//! One template read on its own: capacity, labels, taints, zones and price (the per-template
//! rules of the catalog module, [`crate::build_catalog`]).

use std::collections::BTreeMap;

use api::consts::{annotations as ann, groups, labels as label};
use k8s_openapi::api::core::v1::Taint;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::count::{CountLimits, read_limits};
use crate::error::{SettingsError, TemplateError};
use crate::labels::{
    is_restricted_label, parse_labels, parse_taints, validate_label_key, validate_label_value,
};
use crate::model::{DefaultApplied, PriceSource, Resources, TemplateRef, default_price};
use crate::quantity::{parse_milli, parse_value};
use crate::reference::{is_machine_template, template_ref};
use crate::resize::{self, ResizeSpec, Size};
use crate::settings::{CatalogSettings, DEFAULT_MAX_PODS, Resolved, scalar_string};

/// Default GPU resource name when `…/gpu-count` has no `…/gpu-type`.
pub(crate) const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

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
    /// Attach limits per CSI driver from the `…/csi-driver` annotation (a driver not listed,
    /// or listed with `0`, is unlimited).
    pub volume_limits: BTreeMap<String, u32>,
    /// The devices its nodes publish, from the device annotations (see [`crate::devices`]).
    pub devices: Option<cloudprovider::Devices>,
    pub capacity_type: String,
    /// One entry per offering.
    pub zones: Vec<Option<String>>,
    pub price: f64,
    pub price_source: PriceSource,
    /// The count annotations (none: unbounded).
    pub limits: CountLimits,
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
    /// Defaults applied so far, in the order they were applied.
    defaults: Vec<DefaultApplied>,
}

impl Ctx<'_> {
    fn t(&self) -> Box<TemplateRef> {
        Box::new(self.tref.clone())
    }
    fn note(&mut self, field: &str, value: &str) {
        self.defaults.push(DefaultApplied {
            template: self.tref.clone(),
            field: field.to_string(),
            value: value.to_string(),
        })
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

type Map = BTreeMap<String, String>;

/// Reads one template into its shape. `settings` must be resolved from a [`CatalogSettings`].
/// A resizable template reads as its smallest offered size.
pub(crate) fn shape_of(
    obj: &DynamicObject,
    settings: &Resolved,
) -> Result<TemplateShape, TemplateError> {
    let tref = template_ref(obj);
    let empty = BTreeMap::new();
    let annotations = obj.metadata.annotations.as_ref().unwrap_or(&empty);
    match resize::spec_of(&tref, annotations)? {
        Some(spec) => {
            let size = spec.grid().first().copied().ok_or(TemplateError::NoCpu {
                template: Box::new(tref.clone()),
            })?;
            sized_shape_of(obj, settings, Some((&spec, size)))
        }
        None => sized_shape_of(obj, settings, None),
    }
}

/// Reads one template into its shape; with a resize spec and a size, as that size (its
/// cpu and memory, price and instance-type name).
pub(crate) fn sized_shape_of(
    obj: &DynamicObject,
    settings: &Resolved,
    sized: Option<(&ResizeSpec, Size)>,
) -> Result<TemplateShape, TemplateError> {
    let tref = template_ref(obj);
    let mut cx = Ctx {
        tref: &tref,
        defaults: Vec::new(),
    };
    check_template(&cx)?;
    let empty = BTreeMap::new();
    let annotations = obj.metadata.annotations.as_ref().unwrap_or(&empty);
    let tlabels = obj.metadata.labels.as_ref().unwrap_or(&empty);
    let capacity = read_capacity(&mut cx, obj, annotations, settings, sized.map(|s| s.1))?;
    let allocatable = read_allocatable(&cx, &capacity, settings)?;
    let (mut labels, ann_labels) = read_labels(&mut cx, obj, annotations)?;
    let mut instance_type = instance_type_of(&cx, tlabels)?;
    if let Some((_, size)) = sized {
        instance_type = resize::sized_name(&instance_type, size);
        validate_label_value(&instance_type)
            .map_err(|e| cx.label_err("metadata.name", &instance_type, e))?;
    }
    let capacity_type = capacity_type_of(&cx, tlabels, &ann_labels)?;
    let zones = zones_of(&cx, tlabels, &ann_labels, settings)?;

    // Per-offering labels are added when offerings are known; everything else is fixed here.
    labels.remove(label::ZONE);
    labels.remove(label::CAPACITY_TYPE);
    labels.insert(label::INSTANCE_TYPE.to_string(), instance_type.clone());
    labels.insert(
        label::INSTANCE_CPU.to_string(),
        (capacity.cpu_milli() / 1000).to_string(),
    );
    labels.insert(
        label::INSTANCE_MEMORY.to_string(),
        (capacity.memory_bytes() >> 20).to_string(),
    );
    labels.insert(
        label::INSTANCE_GPU_COUNT.to_string(),
        capacity.gpu_count().to_string(),
    );
    labels.remove(label::INSTANCE_TEMPLATE);

    let taints = match annotations.get(ann::CA_TAINTS) {
        Some(s) => parse_taints(s).map_err(|(entry, reason)| TemplateError::Taint {
            template: cx.t(),
            field: ann_field(ann::CA_TAINTS),
            value: entry,
            reason,
        })?,
        None => Vec::new(),
    };
    let volume_limits = volume_limits_of(&cx, annotations)?;
    let devices = match crate::devices::learned(settings.learned_devices.get(&cx.tref.name)) {
        Some(learned) => Some(learned),
        None => crate::devices::declared(cx.tref, annotations)?,
    };
    let (price, price_source) = match sized.and_then(|(spec, size)| spec.price(size)) {
        Some(p) => (p, PriceSource::Annotation),
        None if sized.is_some() => (
            default_price(&capacity, &capacity_type),
            PriceSource::Default,
        ),
        None => price_of(&cx, annotations, &capacity, &capacity_type)?,
    };
    let limits = read_limits(&tref, annotations)?;

    Ok(TemplateShape {
        template: tref.clone(),
        instance_type,
        capacity,
        allocatable,
        labels,
        taints,
        volume_limits,
        devices,
        capacity_type,
        zones,
        price,
        price_source,
        limits,
        defaults_applied: cx.defaults,
    })
}

/// The object is an InfrastructureMachineTemplate with a name.
fn check_template(cx: &Ctx) -> Result<(), TemplateError> {
    let tref = cx.tref;
    if !is_machine_template(&tref.api_version, &tref.kind) {
        return Err(TemplateError::NotATemplate {
            template: cx.t(),
            reason: format!(
                "kind {:?} in {:?} is not an {} *MachineTemplate",
                tref.kind,
                tref.api_version,
                groups::INFRASTRUCTURE
            ),
        });
    }
    if tref.name.is_empty() {
        return Err(TemplateError::NotATemplate {
            template: cx.t(),
            reason: "metadata.name is empty".into(),
        });
    }
    Ok(())
}

/// Capacity: status.capacity, then annotations; pods always set, cpu and memory positive.
fn read_capacity(
    cx: &mut Ctx,
    obj: &DynamicObject,
    annotations: &Map,
    settings: &Resolved,
    size: Option<Size>,
) -> Result<Resources, TemplateError> {
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
        (ann::CA_CPU, Resources::CPU),
        (ann::CA_MEMORY, Resources::MEMORY),
        (ann::CA_EPHEMERAL_DISK, Resources::EPHEMERAL_STORAGE),
    ] {
        if let Some(v) = annotations.get(key) {
            cap.insert(res.to_string(), cx.quantity(ann_field(key), res, v)?);
        }
    }
    if let Some(count) = annotations.get(ann::CA_GPU_COUNT) {
        gpu_capacity(cx, annotations, count, &mut cap)?;
    }
    let pods = if let Some(p) = settings.max_pods {
        p
    } else if let Some(v) = annotations.get(ann::CA_MAX_PODS) {
        cx.integer(ann_field(ann::CA_MAX_PODS), v)?
    } else if let Some(p) = cap.get(Resources::PODS).copied() {
        p
    } else {
        cx.note("pods", &DEFAULT_MAX_PODS.to_string());
        DEFAULT_MAX_PODS
    };
    cap.insert(Resources::PODS.to_string(), pods);
    if let Some(size) = size {
        // What the template's Nodes really get: the size less the calibrated shortfall.
        let (cpu_short, mem_short) = settings
            .resize_corrections
            .get(&cx.tref.name)
            .copied()
            .unwrap_or((0, 0));
        cap.insert(
            Resources::CPU.to_string(),
            size.cpu.saturating_sub(cpu_short),
        );
        cap.insert(
            Resources::MEMORY.to_string(),
            size.memory.saturating_sub(mem_short),
        );
    }
    if cap.get(Resources::CPU).copied().unwrap_or(0) <= 0 {
        return Err(TemplateError::NoCpu { template: cx.t() });
    }
    if cap.get(Resources::MEMORY).copied().unwrap_or(0) <= 0 {
        return Err(TemplateError::NoMemory { template: cx.t() });
    }
    Ok(Resources(cap))
}

/// The `…/gpu-count` annotation (`count`) as the `…/gpu-type` resource.
fn gpu_capacity(
    cx: &mut Ctx,
    annotations: &Map,
    count: &str,
    cap: &mut BTreeMap<String, i64>,
) -> Result<(), TemplateError> {
    let n = cx.integer(ann_field(ann::CA_GPU_COUNT), count)?;
    let res = match annotations.get(ann::CA_GPU_TYPE).map(|s| s.trim()) {
        Some(t) if !t.is_empty() => {
            validate_label_key(t).map_err(|e| cx.label_err(&ann_field(ann::CA_GPU_TYPE), t, e))?;
            t.to_string()
        }
        // With a DRA driver the GPUs are devices, not an extended resource (as Cluster
        // Autoscaler reads them: a resource only with an explicit gpu-type).
        _ if annotations.contains_key(ann::CA_DRA_DRIVER) => return Ok(()),
        _ => {
            if n > 0 {
                cx.note(ann::CA_GPU_TYPE, DEFAULT_GPU_RESOURCE);
            }
            DEFAULT_GPU_RESOURCE.to_string()
        }
    };
    if n > 0 {
        cap.insert(res, n);
    } else {
        cap.remove(&res);
    }
    Ok(())
}

/// Allocatable: capacity minus the settings' overhead; cpu and memory must be left.
fn read_allocatable(
    cx: &Ctx,
    capacity: &Resources,
    settings: &Resolved,
) -> Result<Resources, TemplateError> {
    let overhead = settings.overhead(capacity);
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
    Ok(Resources(alloc))
}

/// Labels: arch and os from status.nodeInfo (defaulted), then the labels annotation.
/// Returns all labels and those of the annotation.
fn read_labels(
    cx: &mut Ctx,
    obj: &DynamicObject,
    annotations: &Map,
) -> Result<(Map, Map), TemplateError> {
    let node_info = obj.data.pointer("/status/nodeInfo");
    let info = |k: &str| {
        node_info
            .and_then(|n| n.get(k))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let mut labels = BTreeMap::new();
    for (label, key, default) in [
        (label::ARCH, "architecture", "amd64"),
        (label::OS, "operatingSystem", "linux"),
    ] {
        match info(key) {
            Some(v) => {
                labels.insert(label.to_string(), v.to_string());
            }
            None => {
                cx.note(label, default);
                labels.insert(label.to_string(), default.to_string());
            }
        }
    }
    let arch_from_info = info("architecture").is_some();
    let os_from_info = info("operatingSystem").is_some();
    let mut ann_labels = BTreeMap::new();
    if let Some(s) = annotations.get(ann::CA_LABELS) {
        ann_labels = parse_labels(s)
            .map_err(|(entry, reason)| cx.label_err(&ann_field(ann::CA_LABELS), &entry, reason))?;
        if let Some((k, v)) = ann_labels.iter().find(|(k, _)| is_restricted_label(k)) {
            return Err(cx.label_err(
                &ann_field(ann::CA_LABELS),
                &format!("{k}={v}"),
                "restricted label: set by Karpenter or the catalog itself",
            ));
        }
    }
    // The defaults notes are only true if the annotation did not set them either.
    if !arch_from_info && ann_labels.contains_key(label::ARCH) {
        cx.defaults.retain(|d| d.field != label::ARCH);
    }
    if !os_from_info && ann_labels.contains_key(label::OS) {
        cx.defaults.retain(|d| d.field != label::OS);
    }
    labels.extend(ann_labels.clone());
    let arch_field = if ann_labels.contains_key(label::ARCH) {
        ann_field(ann::CA_LABELS)
    } else {
        "status.nodeInfo.architecture".into()
    };
    let os_field = if ann_labels.contains_key(label::OS) {
        ann_field(ann::CA_LABELS)
    } else {
        "status.nodeInfo.operatingSystem".into()
    };
    let arch = labels.get(label::ARCH).cloned().unwrap_or_default();
    if !ARCHES.contains(&arch.as_str()) {
        return Err(TemplateError::Architecture {
            template: cx.t(),
            field: arch_field,
            value: arch,
        });
    }
    let os = labels.get(label::OS).cloned().unwrap_or_default();
    if !OSES.contains(&os.as_str()) {
        return Err(TemplateError::OperatingSystem {
            template: cx.t(),
            field: os_field,
            value: os,
        });
    }
    Ok((labels, ann_labels))
}

/// `node.kubernetes.io/instance-type`: the template's label, else its name.
fn instance_type_of(cx: &Ctx, tlabels: &Map) -> Result<String, TemplateError> {
    let (instance_type, it_field) = match tlabels.get(label::INSTANCE_TYPE) {
        Some(v) => (v.trim().to_string(), label_field(label::INSTANCE_TYPE)),
        None => (cx.tref.name.clone(), "metadata.name".to_string()),
    };
    if instance_type.is_empty() {
        return Err(cx.label_err(&it_field, &instance_type, "empty instance type"));
    }
    validate_label_value(&instance_type).map_err(|e| cx.label_err(&it_field, &instance_type, e))?;
    Ok(instance_type)
}

/// `karpenter.sh/capacity-type`: template label, else the labels annotation, else on-demand.
fn capacity_type_of(cx: &Ctx, tlabels: &Map, ann_labels: &Map) -> Result<String, TemplateError> {
    let (capacity_type, ct_field) = if let Some(v) = tlabels.get(label::CAPACITY_TYPE) {
        (v.trim().to_string(), label_field(label::CAPACITY_TYPE))
    } else if let Some(v) = ann_labels.get(label::CAPACITY_TYPE) {
        (v.clone(), ann_field(ann::CA_LABELS))
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
    Ok(capacity_type)
}

/// Zones: the template's zone label (or the labels annotation), else one per Cluster failure
/// domain, else one zone-less offering.
fn zones_of(
    cx: &Ctx,
    tlabels: &Map,
    ann_labels: &Map,
    settings: &Resolved,
) -> Result<Vec<Option<String>>, TemplateError> {
    let zone = if let Some(z) = tlabels.get(label::ZONE) {
        let z = z.trim().to_string();
        validate_label_value(&z).map_err(|e| cx.label_err(&label_field(label::ZONE), &z, e))?;
        Some(z).filter(|z| !z.is_empty())
    } else {
        ann_labels
            .get(label::ZONE)
            .cloned()
            .filter(|z| !z.is_empty())
    };
    Ok(match zone {
        Some(z) => vec![Some(z)],
        None if !settings.failure_domains.is_empty() => {
            settings.failure_domains.iter().cloned().map(Some).collect()
        }
        None => vec![None],
    })
}

/// Attach limits: the `…/csi-driver` annotation's drivers with a positive limit.
fn volume_limits_of(cx: &Ctx, annotations: &Map) -> Result<BTreeMap<String, u32>, TemplateError> {
    let Some(raw) = annotations.get(ann::CA_CSI_DRIVER) else {
        return Ok(BTreeMap::new());
    };
    let drivers = api::csi::parse_csi_drivers(raw).map_err(|e| TemplateError::CsiDriver {
        template: cx.t(),
        field: ann_field(ann::CA_CSI_DRIVER),
        value: e.item,
        reason: e.reason,
    })?;
    Ok(api::csi::volume_limits(&drivers))
}

/// Price: the price annotation, else [`default_price`].
fn price_of(
    cx: &Ctx,
    annotations: &Map,
    capacity: &Resources,
    capacity_type: &str,
) -> Result<(f64, PriceSource), TemplateError> {
    let Some(raw) = annotations.get(ann::PRICE) else {
        return Ok((default_price(capacity, capacity_type), PriceSource::Default));
    };
    let bad = |reason: &str| TemplateError::Price {
        template: cx.t(),
        field: ann_field(ann::PRICE),
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
    Ok((p, PriceSource::Annotation))
}

/// Reads one template on its own (no merging), with the given settings.
pub fn template_shape(
    obj: &DynamicObject,
    settings: &CatalogSettings,
) -> Result<Result<TemplateShape, TemplateError>, SettingsError> {
    let resolved = settings.resolve()?;
    Ok(shape_of(obj, &resolved))
}
