//! Template → instance type, and templates → catalog. Pure: no I/O, never panics on input.
//!
//! Per template (any `infrastructure.cluster.x-k8s.io` `*MachineTemplate`):
//! - **capacity**: `status.capacity`, overridden by the cluster-autoscaler annotations
//!   `capacity.cluster-autoscaler.kubernetes.io/{cpu,memory,ephemeral-disk,gpu-count,gpu-type}`
//!   (`gpu-type` is the resource name, default `nvidia.com/gpu`); `pods` always set (see
//!   [`crate::settings`]). cpu and memory must both be known and positive.
//! - **labels**: `kubernetes.io/arch` / `kubernetes.io/os` from `status.nodeInfo` (default
//!   amd64 / linux, reported in [`Catalog::defaults_applied`]), then the `…/labels` annotation
//!   (which may override them), then `node.kubernetes.io/instance-type` (the template's label
//!   of that name, else the template name), `karpenter.sh/capacity-type` (template label, else
//!   the labels annotation, else `on-demand`), and our well-known
//!   `karpenter.cluster.x-k8s.io/instance-{cpu,memory,gpu-count,template}`.
//! - **taints**: the `…/taints` annotation, `key=value:Effect` or `key:Effect`, comma-separated.
//! - **zones**: the template's `topology.kubernetes.io/zone` label (or the labels annotation),
//!   else one offering per Cluster failure domain, else one zone-less offering.
//! - **price**: annotation `karpenter.cluster.x-k8s.io/price` (decimal per hour), else
//!   [`default_price`].
//!
//! Templates with the same instance-type name merge into one instance type with the union of
//! their offerings, provided capacity, labels and taints agree; otherwise the later template
//! (in namespace/name order) is excluded with [`TemplateError::ConflictingShape`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::error::{SettingsError, TemplateError};
use crate::model::{
    Catalog, DefaultApplied, Excluded, InstanceType, Offering, PriceSource, Resources, TemplateRef,
};
use crate::names::*;
use crate::quantity::{parse_milli, parse_value};
use crate::settings::{CatalogSettings, DEFAULT_MAX_PODS, Resolved, scalar_string};

/// Default GPU resource name when `…/gpu-count` has no `…/gpu-type`.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Default price per hour of an offering without a price annotation:
///
/// `(0.03 × vCPU + 0.004 × memory GiB + 0.5 × GPUs) × f`, with `f = 0.4` for spot and
/// `f = 1` otherwise, rounded to 6 decimals. Roughly public-cloud on-demand rates
/// (2 vCPU / 8 GiB → 0.092), so a smaller shape is always cheaper than a bigger one and spot
/// is preferred over on-demand for the same shape.
pub fn default_price(capacity: &Resources, capacity_type: &str) -> f64 {
    let vcpu = capacity.cpu_milli() as f64 / 1000.0;
    let gib = capacity.memory_bytes() as f64 / (1u64 << 30) as f64;
    let gpus = capacity.gpu_count() as f64;
    let factor = if capacity_type == "spot" { 0.4 } else { 1.0 };
    round6((0.03 * vcpu + 0.004 * gib + 0.5 * gpus) * factor)
}

fn round6(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

/// Whether `api_version`/`kind` name an InfrastructureMachineTemplate.
pub fn is_machine_template(api_version: &str, kind: &str) -> bool {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    kind.ends_with("MachineTemplate") && kind != "MachineTemplate" && group == INFRASTRUCTURE_GROUP
}

/// The reference of an object (api version, kind, namespace, name).
pub fn template_ref(obj: &DynamicObject) -> TemplateRef {
    let (api_version, kind) = obj
        .types
        .as_ref()
        .map(|t| (t.api_version.clone(), t.kind.clone()))
        .unwrap_or_default();
    TemplateRef {
        api_version,
        kind,
        namespace: obj.metadata.namespace.clone(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

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

/// Checks a label value: ≤ 63 characters, alphanumerics with `-_.` inside.
pub fn validate_label_value(v: &str) -> Result<(), String> {
    if v.len() > 63 {
        return Err("longer than 63 characters".into());
    }
    if v.is_empty() {
        return Ok(());
    }
    let ok_inner = v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let bytes = v.as_bytes();
    let ends = bytes[0].is_ascii_alphanumeric() && bytes[bytes.len() - 1].is_ascii_alphanumeric();
    if ok_inner && ends {
        Ok(())
    } else {
        Err(
            "must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
                .into(),
        )
    }
}

/// Checks a label (or taint) key: `[prefix/]name`, prefix a DNS subdomain.
pub fn validate_label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if name.is_empty() {
        return Err("empty name".into());
    }
    validate_label_value(name).map_err(|e| format!("name {e}"))?;
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            });
        if !ok {
            return Err(format!("prefix {p:?} is not a DNS subdomain"));
        }
    }
    Ok(())
}

/// Labels a template may not set through the labels annotation: the `karpenter.sh` domain
/// (except `karpenter.sh/capacity-type`), `kubernetes.io/hostname`, and our own domain
/// (its well-known labels are computed from the template).
pub fn is_restricted_label(key: &str) -> bool {
    let domain = key.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let in_domain = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    (in_domain("karpenter.sh") && key != LABEL_CAPACITY_TYPE)
        || key == "kubernetes.io/hostname"
        || in_domain(DOMAIN)
}

/// Parses `k1=v1,k2=v2` (the cluster-autoscaler labels annotation).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, (String, String)> {
    let mut out = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((k, v)) = entry.split_once('=') else {
            return Err((entry.to_string(), "expected key=value".into()));
        };
        let (k, v) = (k.trim(), v.trim());
        validate_label_key(k).map_err(|e| (entry.to_string(), format!("key: {e}")))?;
        validate_label_value(v).map_err(|e| (entry.to_string(), format!("value: {e}")))?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Parses `key=value:Effect,key:Effect` (the cluster-autoscaler taints annotation).
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, (String, String)> {
    let mut out: Vec<Taint> = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let err = |reason: &str| (entry.to_string(), reason.to_string());
        let Some((kv, effect)) = entry.rsplit_once(':') else {
            return Err(err("missing :Effect"));
        };
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(err(
                "effect must be NoSchedule, PreferNoSchedule or NoExecute",
            ));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (kv, None),
        };
        validate_label_key(key).map_err(|e| err(&format!("key: {e}")))?;
        if let Some(v) = value {
            validate_label_value(v).map_err(|e| err(&format!("value: {e}")))?;
        }
        if out.iter().any(|t| t.key == key && t.effect == effect) {
            return Err(err("duplicate key and effect"));
        }
        out.push(Taint {
            key: key.to_string(),
            value: value.filter(|v| !v.is_empty()).map(str::to_string),
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(out)
}

const ARCHES: [&str; 4] = ["amd64", "arm64", "s390x", "ppc64le"];
const OSES: [&str; 2] = ["linux", "windows"];
const CAPACITY_TYPES: [&str; 3] = ["spot", "on-demand", "reserved"];

/// Reads one template into its shape. `settings` must be resolved from a [`CatalogSettings`].
fn shape_of(obj: &DynamicObject, settings: &Resolved) -> Result<TemplateShape, TemplateError> {
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

fn describe_difference(a: &TemplateShape, b: &TemplateShape) -> String {
    if a.capacity != b.capacity {
        let mut diffs = Vec::new();
        let keys: std::collections::BTreeSet<&String> =
            a.capacity.0.keys().chain(b.capacity.0.keys()).collect();
        for k in keys {
            if a.capacity.get(k) != b.capacity.get(k) {
                diffs.push(format!(
                    "{k} {} vs {}",
                    a.capacity.quantity(k),
                    b.capacity.quantity(k)
                ));
            }
        }
        return format!("capacity ({})", diffs.join(", "));
    }
    if a.labels != b.labels {
        let keys: std::collections::BTreeSet<&String> =
            a.labels.keys().chain(b.labels.keys()).collect();
        let diffs: Vec<String> = keys
            .into_iter()
            .filter(|k| a.labels.get(*k) != b.labels.get(*k))
            .map(|k| {
                format!(
                    "{k} {:?} vs {:?}",
                    a.labels.get(k).map(String::as_str).unwrap_or(""),
                    b.labels.get(k).map(String::as_str).unwrap_or("")
                )
            })
            .collect();
        return format!("labels ({})", diffs.join(", "));
    }
    if a.taints != b.taints {
        return "taints".into();
    }
    if a.allocatable != b.allocatable {
        return "allocatable".into();
    }
    String::new()
}

/// Builds the catalog of one NodeClass from the templates it selects.
///
/// Fails only when the NodeClass settings themselves are invalid; a bad template is listed in
/// [`Catalog::excluded`] and the others still yield instance types.
pub fn build_catalog(
    templates: &[DynamicObject],
    settings: &CatalogSettings,
) -> Result<Catalog, SettingsError> {
    let resolved = settings.resolve()?;
    let mut objs: Vec<&DynamicObject> = templates.iter().collect();
    objs.sort_by_key(|o| {
        let r = template_ref(o);
        (r.namespace.clone(), r.name.clone(), r.kind.clone())
    });

    let mut excluded = Vec::new();
    let mut defaults_applied = Vec::new();
    // instance type name → (first shape, offerings)
    let mut types: BTreeMap<String, (TemplateShape, Vec<TemplateRef>, Vec<Offering>)> =
        BTreeMap::new();
    for obj in objs {
        let shape = match shape_of(obj, &resolved) {
            Ok(s) => s,
            Err(error) => {
                excluded.push(Excluded {
                    template: error.template().clone(),
                    error,
                });
                continue;
            }
        };
        let offerings: Vec<Offering> = shape
            .zones
            .iter()
            .map(|zone| Offering {
                zone: zone.clone(),
                capacity_type: shape.capacity_type.clone(),
                price: shape.price,
                price_source: shape.price_source,
                template: shape.template.clone(),
            })
            .collect();
        match types.get_mut(&shape.instance_type) {
            None => {
                defaults_applied.extend(shape.defaults_applied.iter().cloned());
                types.insert(
                    shape.instance_type.clone(),
                    (shape.clone(), vec![shape.template.clone()], offerings),
                );
            }
            Some((first, trefs, existing)) => {
                let difference = describe_difference(first, &shape);
                if !difference.is_empty() {
                    excluded.push(Excluded {
                        template: shape.template.clone(),
                        error: TemplateError::ConflictingShape {
                            template: Box::new(shape.template.clone()),
                            instance_type: shape.instance_type.clone(),
                            other: Box::new(first.template.clone()),
                            difference,
                        },
                    });
                    continue;
                }
                let dup = offerings.iter().find_map(|o| {
                    existing
                        .iter()
                        .find(|e| e.zone == o.zone && e.capacity_type == o.capacity_type)
                });
                if let Some(d) = dup {
                    excluded.push(Excluded {
                        template: shape.template.clone(),
                        error: TemplateError::DuplicateOffering {
                            template: Box::new(shape.template.clone()),
                            instance_type: shape.instance_type.clone(),
                            zone: d.zone.clone().unwrap_or_else(|| "(none)".into()),
                            capacity_type: d.capacity_type.clone(),
                            other: Box::new(d.template.clone()),
                        },
                    });
                    continue;
                }
                defaults_applied.extend(shape.defaults_applied.iter().cloned());
                trefs.push(shape.template.clone());
                existing.extend(offerings);
            }
        }
    }

    let mut instance_types: Vec<InstanceType> = types
        .into_iter()
        .map(|(name, (shape, templates, mut offerings))| {
            offerings.sort_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.zone.cmp(&b.zone))
                    .then_with(|| a.capacity_type.cmp(&b.capacity_type))
                    .then_with(|| a.template.cmp(&b.template))
            });
            let mut labels = shape.labels;
            let uniform = |f: &dyn Fn(&Offering) -> &str| -> Option<String> {
                let first = offerings.first().map(f)?;
                offerings
                    .iter()
                    .all(|o| f(o) == first)
                    .then(|| first.to_string())
            };
            if let Some(ct) = uniform(&|o: &Offering| o.capacity_type.as_str()) {
                labels.insert(LABEL_CAPACITY_TYPE.to_string(), ct);
            }
            if let Some(t) = uniform(&|o: &Offering| o.template.name.as_str()) {
                labels.insert(LABEL_INSTANCE_TEMPLATE.to_string(), t);
            }
            InstanceType {
                name,
                templates,
                capacity: shape.capacity,
                allocatable: shape.allocatable,
                labels,
                taints: shape.taints,
                offerings,
            }
        })
        .collect();
    instance_types.sort_by(|a, b| {
        let pa = a.cheapest().map(|o| o.price).unwrap_or(f64::MAX);
        let pb = b.cheapest().map(|o| o.price).unwrap_or(f64::MAX);
        pa.total_cmp(&pb).then_with(|| a.name.cmp(&b.name))
    });
    excluded.sort_by(|a, b| a.template.cmp(&b.template));
    Ok(Catalog {
        instance_types,
        excluded,
        defaults_applied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints() {
        let t = parse_taints("a=b:NoSchedule, gpu:NoExecute ,").expect("valid");
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].key, "a");
        assert_eq!(t[0].value.as_deref(), Some("b"));
        assert_eq!(t[1].value, None);
        assert_eq!(t[1].effect, "NoExecute");
        let ex = parse_taints("example.com/x=y:NoSchedule").expect("prefixed key");
        assert_eq!(ex[0].key, "example.com/x");
        for bad in [
            "a=b",
            "a=b:Never",
            "=b:NoSchedule",
            "a b=c:NoSchedule",
            "a=b c:NoSchedule",
            "a:NoSchedule,a=x:NoSchedule",
        ] {
            assert!(parse_taints(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn labels() {
        let l = parse_labels("a=b, example.com/c=d,e=").expect("valid");
        assert_eq!(l.len(), 3);
        assert_eq!(l["e"], "");
        for bad in [
            "a",
            "Bad_Prefix/x=y",
            "a=-b",
            &format!("a={}", "x".repeat(64)),
        ] {
            assert!(parse_labels(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn template_kinds() {
        assert!(is_machine_template(
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "AWSMachineTemplate"
        ));
        assert!(!is_machine_template(
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate"
        ));
        assert!(!is_machine_template(
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "AWSMachine"
        ));
        assert!(!is_machine_template("example.com/v1", "FooMachineTemplate"));
    }

    #[test]
    fn price_is_monotonic_in_shape() {
        let r = |cpu: i64, mem_gi: i64, gpu: i64| {
            let mut m = BTreeMap::from([
                ("cpu".to_string(), cpu * 1000),
                ("memory".to_string(), mem_gi << 30),
            ]);
            if gpu > 0 {
                m.insert("nvidia.com/gpu".into(), gpu);
            }
            Resources(m)
        };
        assert_eq!(default_price(&r(2, 8, 0), "on-demand"), 0.092);
        assert!(default_price(&r(2, 4, 0), "on-demand") < default_price(&r(2, 8, 0), "on-demand"));
        assert!(default_price(&r(2, 8, 0), "on-demand") < default_price(&r(4, 8, 0), "on-demand"));
        assert!(
            default_price(&r(4, 16, 0), "on-demand") < default_price(&r(4, 16, 1), "on-demand")
        );
        assert!(default_price(&r(4, 16, 0), "spot") < default_price(&r(4, 16, 0), "on-demand"));
    }
}
