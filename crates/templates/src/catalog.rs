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
//! - **volume limits**: the `…/csi-driver` annotation, `driver=limit,…` (see [`api::csi`]):
//!   a driver with a positive limit gets it in `volume_limits`; `0` (installed, unlimited)
//!   and unlisted drivers are unlimited. A node's CSINode `allocatable.count` wins once the
//!   node exists.
//! - **zones**: the template's `topology.kubernetes.io/zone` label (or the labels annotation),
//!   else one offering per Cluster failure domain, else one zone-less offering.
//! - **price**: annotation `karpenter.cluster.x-k8s.io/price` (decimal per hour), else
//!   [`default_price`].
//!
//! Templates with the same instance-type name merge into one instance type with the union of
//! their offerings, provided capacity, labels, taints and volume limits agree; otherwise the
//! later template (in namespace/name order) is excluded with
//! [`TemplateError::ConflictingShape`].

use std::collections::BTreeMap;
use std::sync::Arc;

use api::consts::labels as label;
use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::error::{SettingsError, TemplateError};
use crate::model::{
    Catalog, Excluded, InstanceType, InstanceTypes, Offering, ResizableGroup, template_of,
};
use crate::reference::template_ref;
use crate::resize::{self, ResizeSpec, Size};
use crate::settings::{CatalogSettings, Resolved};
use crate::shape::{TemplateShape, shape_of, sized_shape_of};

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
    if a.volume_limits != b.volume_limits {
        let keys: std::collections::BTreeSet<&String> = a
            .volume_limits
            .keys()
            .chain(b.volume_limits.keys())
            .collect();
        let limit = |s: &TemplateShape, k: &String| {
            s.volume_limits
                .get(k)
                .map_or_else(|| "unlimited".to_string(), u32::to_string)
        };
        let diffs: Vec<String> = keys
            .into_iter()
            .filter(|k| a.volume_limits.get(*k) != b.volume_limits.get(*k))
            .map(|k| format!("{k} {} vs {}", limit(a, k), limit(b, k)))
            .collect();
        return format!("volume limits ({})", diffs.join(", "));
    }
    if a.allocatable != b.allocatable {
        return "allocatable".into();
    }
    if a.devices != b.devices {
        return "devices".into();
    }
    String::new()
}

/// Instance type name → (first shape, offerings).
type Merged = BTreeMap<String, (TemplateShape, Vec<Offering>)>;

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
    let mut limits = BTreeMap::new();
    let mut types = Merged::new();
    // base name → (spec, templates) of the resizable templates.
    let mut groups: BTreeMap<String, (ResizeSpec, Vec<DynamicObject>)> = BTreeMap::new();
    for obj in objs {
        let shapes = match template_shapes(obj, &resolved, &mut groups) {
            Ok(s) => s,
            Err(error) => {
                excluded.push(Excluded {
                    template: error.template().clone(),
                    error,
                });
                continue;
            }
        };
        for (i, shape) in shapes.into_iter().enumerate() {
            let defaults = shape.defaults_applied.clone();
            if !shape.limits.is_empty() {
                limits.insert(shape.template.id(), shape.limits);
            }
            match merge(&mut types, shape) {
                // A resizable template's defaults are the same for every size: once.
                Ok(()) if i == 0 => defaults_applied.extend(defaults),
                Ok(()) => {}
                Err(error) => {
                    excluded.push(Excluded {
                        template: error.template().clone(),
                        error,
                    });
                    break;
                }
            }
        }
    }

    let mut instance_types: Vec<InstanceType> = types
        .into_iter()
        .map(|(name, (shape, offerings))| instance_type(name, shape, offerings))
        .collect();
    // A template excluded after its limits were read offers nothing.
    let offered: std::collections::BTreeSet<&str> = instance_types
        .iter()
        .flat_map(|it| it.offerings.iter().map(|o| o.id.as_str()))
        .collect();
    limits.retain(|id, _| offered.contains(id.as_str()));
    sort_instance_types(&mut instance_types);
    excluded.sort_by(|a, b| a.template.cmp(&b.template));
    let resize_fields = groups
        .iter()
        .map(|(base, (spec, _))| (base.clone(), spec.fields.clone()))
        .collect();
    let resizable = groups
        .into_iter()
        .map(|(base, (spec, objs))| resizable_group(base, spec, objs, &resolved))
        .collect();
    Ok(Catalog {
        types: Arc::new(InstanceTypes {
            instance_types,
            resizable,
        }),
        excluded,
        defaults_applied,
        limits,
        resize_fields,
    })
}

/// The shapes of one template: one, or one per grid size of a resizable template (which
/// joins the group of its base name, whose resize settings it must share).
fn template_shapes(
    obj: &DynamicObject,
    resolved: &Resolved,
    groups: &mut BTreeMap<String, (ResizeSpec, Vec<DynamicObject>)>,
) -> Result<Vec<TemplateShape>, TemplateError> {
    let tref = template_ref(obj);
    let empty = BTreeMap::new();
    let annotations = obj.metadata.annotations.as_ref().unwrap_or(&empty);
    let Some(spec) = resize::spec_of(&tref, annotations)? else {
        return Ok(vec![shape_of(obj, resolved)?]);
    };
    let shapes = spec
        .grid()
        .into_iter()
        .map(|size| sized_shape_of(obj, resolved, Some((&spec, size))))
        .collect::<Result<Vec<_>, _>>()?;
    let base = obj
        .labels()
        .get(label::INSTANCE_TYPE)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| tref.name.clone());
    match groups.get_mut(&base) {
        Some((first, members)) if *first != spec => {
            return Err(TemplateError::Resizable {
                template: Box::new(tref),
                field: "metadata.annotations".into(),
                value: base,
                reason: format!(
                    "resizable settings differ from {} of the same instance type",
                    members
                        .first()
                        .map(|o| template_ref(o).to_string())
                        .unwrap_or_default()
                ),
            });
        }
        Some((_, members)) => members.push(obj.clone()),
        None => {
            groups.insert(base, (spec, vec![obj.clone()]));
        }
    }
    Ok(shapes)
}

/// The resizable group of `base`: makes any size of its templates on demand.
fn resizable_group(
    base: String,
    spec: ResizeSpec,
    objs: Vec<DynamicObject>,
    resolved: &Resolved,
) -> ResizableGroup {
    let resolved = resolved.clone();
    let make_spec = spec.clone();
    let make = move |size: Size| -> Option<InstanceType> {
        let mut types = Merged::new();
        for obj in &objs {
            let shape = sized_shape_of(obj, &resolved, Some((&make_spec, size))).ok()?;
            merge(&mut types, shape).ok()?;
        }
        let (name, (shape, offerings)) = types.into_iter().next()?;
        Some(instance_type(name, shape, offerings))
    };
    ResizableGroup::new(base, spec.sizing, Arc::new(make))
}

/// Adds one template's shape to the instance types: a new one, or its offerings joined to
/// the instance type of the same name (an error when it cannot join).
fn merge(types: &mut Merged, shape: TemplateShape) -> Result<(), TemplateError> {
    let offerings: Vec<Offering> = shape
        .zones
        .iter()
        .map(|zone| {
            crate::model::offering(
                &shape.template,
                zone.clone(),
                &shape.capacity_type,
                shape.price,
                shape.price_source,
            )
        })
        .collect();
    match types.get_mut(&shape.instance_type) {
        None => {
            types.insert(shape.instance_type.clone(), (shape, offerings));
        }
        Some((first, existing)) => {
            if let Some(error) = merge_conflict(first, &shape, &offerings, existing) {
                return Err(error);
            }
            existing.extend(offerings);
        }
    }
    Ok(())
}

/// The instance type of the templates merged under `name`: offerings reserved first, then by price, zone,
/// capacity type and template; capacity type and template labelled when all offerings agree.
fn instance_type(name: String, shape: TemplateShape, mut offerings: Vec<Offering>) -> InstanceType {
    sort_offerings(&mut offerings);
    let mut labels = shape.labels;
    let uniform = |f: &dyn Fn(&Offering) -> &str| -> Option<String> {
        let first = offerings.first().map(f)?;
        offerings
            .iter()
            .all(|o| f(o) == first)
            .then(|| first.to_string())
    };
    if let Some(ct) = uniform(&|o: &Offering| o.capacity_type.as_str()) {
        labels.insert(label::CAPACITY_TYPE.to_string(), ct);
    }
    if let Some(t) = uniform(&|o: &Offering| {
        o.labels
            .get(label::INSTANCE_TEMPLATE)
            .map_or("", String::as_str)
    }) {
        labels.insert(label::INSTANCE_TEMPLATE.to_string(), t);
    }
    InstanceType {
        volume_limits: shape.volume_limits,
        devices: shape.devices,
        name,
        capacity: shape.capacity,
        allocatable: shape.allocatable,
        labels,
        taints: shape.taints,
        offerings,
        capacity_overlaid: false,
    }
}

pub(crate) use crate::model::sort_instance_types;

pub(crate) use cloudprovider::model::sort_offerings;

/// Why a template whose instance type is already defined (by `first`, with offerings
/// `existing`) cannot join it: a different shape, or an offering already there.
fn merge_conflict(
    first: &TemplateShape,
    shape: &TemplateShape,
    offerings: &[Offering],
    existing: &[Offering],
) -> Option<TemplateError> {
    let difference = describe_difference(first, shape);
    if !difference.is_empty() {
        return Some(TemplateError::ConflictingShape {
            template: Box::new(shape.template.clone()),
            instance_type: shape.instance_type.clone(),
            other: Box::new(first.template.clone()),
            difference,
        });
    }
    let dup = offerings.iter().find_map(|o| {
        existing
            .iter()
            .find(|e| e.zone == o.zone && e.capacity_type == o.capacity_type)
    })?;
    Some(TemplateError::DuplicateOffering {
        template: Box::new(shape.template.clone()),
        instance_type: shape.instance_type.clone(),
        zone: dup.zone.clone().unwrap_or_else(|| "(none)".into()),
        capacity_type: dup.capacity_type.clone(),
        other: Box::new(template_of(dup).unwrap_or_else(|| shape.template.clone())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Resources, default_price};
    use crate::reference::is_machine_template;

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
