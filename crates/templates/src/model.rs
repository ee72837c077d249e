//! The catalog: instance types with offerings, as the scheduler and the NodeClass status see it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use api::consts::labels as label;
use k8s_openapi::api::core::v1::Taint;
use serde::{Serialize, Serializer};

pub use cloudprovider::model::{
    InstanceType, Offering, PriceSource, Resources, format_resource, is_gpu_resource,
};

use crate::count::CountLimits;
use crate::error::TemplateError;
pub use crate::reference::TemplateRef;
use crate::resize::FieldMap;
pub use cloudprovider::InstanceTypes;
pub use cloudprovider::resize::{MakeSized, ResizableGroup};

/// Default price per hour of an offering without a price annotation:
///
/// `(0.03 × vCPU + 0.004 × memory GiB + 0.5 × GPUs) × f`, with `f = 0.4` for spot and
/// `f = 1` otherwise, rounded to 6 decimals. Roughly public-cloud on-demand rates
/// (2 vCPU / 8 GiB → 0.092), so a smaller shape is always cheaper than a bigger one and spot
/// is preferred over on-demand for the same shape.
pub(crate) fn default_price(capacity: &Resources, capacity_type: &str) -> f64 {
    let vcpu = capacity.cpu_milli() as f64 / 1000.0;
    let gib = capacity.memory_bytes() as f64 / (1u64 << 30) as f64;
    let gpus = capacity.gpu_count() as f64;
    let factor = if capacity_type == "spot" { 0.4 } else { 1.0 };
    round6((0.03 * vcpu + 0.004 * gib + 0.5 * gpus) * factor)
}

fn round6(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

/// The offering a catalog builds for one zone of `template`: its id is the template
/// ([`TemplateRef::id`]), its provider labels the template's name and any reservation.
pub fn offering(
    template: &TemplateRef,
    zone: Option<String>,
    capacity_type: &str,
    price: f64,
    price_source: PriceSource,
) -> Offering {
    let reservation_id =
        (capacity_type == label::CAPACITY_TYPE_RESERVED).then(|| template.name.clone());
    let mut labels =
        BTreeMap::from([(label::INSTANCE_TEMPLATE.to_string(), template.name.clone())]);
    if let Some(id) = &reservation_id {
        labels.insert(label::RESERVATION_ID.to_string(), id.clone());
    }
    Offering {
        id: template.id(),
        zone,
        capacity_type: capacity_type.to_string(),
        price,
        price_source,
        reservation_id,
        labels,
        available: true,
        count: None,
    }
}

/// The template `offering` launches from (`None`: not an offering of a catalog).
pub fn template_of(offering: &Offering) -> Option<TemplateRef> {
    TemplateRef::from_id(&offering.id)
}

/// The template `offering` launches from; an offering whose id is no template's is named by
/// its id (no kind, no namespace).
pub fn launched_from(offering: &Offering) -> TemplateRef {
    template_of(offering).unwrap_or_else(|| TemplateRef {
        api_version: String::new(),
        kind: String::new(),
        namespace: None,
        name: offering.id.clone(),
    })
}

/// Every template `it` is launched from (one per distinct template of its offerings), in
/// the order the catalog read them (namespace, name, kind).
pub fn templates_of(it: &InstanceType) -> Vec<TemplateRef> {
    let mut refs: Vec<TemplateRef> = it.offerings.iter().filter_map(template_of).collect();
    refs.sort_by(|a, b| (&a.namespace, &a.name, &a.kind).cmp(&(&b.namespace, &b.name, &b.kind)));
    refs.dedup();
    refs
}

/// A template that yields no instance type, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Excluded {
    pub template: TemplateRef,
    pub error: TemplateError,
}

impl Serialize for Excluded {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Excluded", 3)?;
        st.serialize_field("template", &self.template)?;
        st.serialize_field("reason", self.error.reason())?;
        st.serialize_field("message", &self.error.detail())?;
        st.end()
    }
}

/// A default the catalog applied because the template did not say (stated in the NodeClass
/// status so users know what was assumed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultApplied {
    pub template: TemplateRef,
    /// What was defaulted, e.g. `kubernetes.io/arch`.
    pub field: String,
    /// The value used.
    pub value: String,
}

/// The instance types one NodeClass can launch (the neutral model), with what only the
/// templates know: the templates that yield nothing, the defaults applied, the count
/// annotations of each template, the resizable groups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    /// What the core sees ([`InstanceTypes`]): sorted by cheapest offering, then name; each
    /// offering's id is its template ([`template_of`]); the resizable groups by base name.
    /// The catalog derefs to it.
    pub types: Arc<InstanceTypes>,
    /// Templates that yield nothing, sorted by template.
    pub excluded: Vec<Excluded>,
    pub defaults_applied: Vec<DefaultApplied>,
    /// The count annotations of the templates that have any, by offering id (see
    /// [`crate::count`]); a template not here is unbounded.
    pub limits: BTreeMap<String, CountLimits>,
    /// Where a size goes in the InfraMachine, by resizable group base name.
    pub resize_fields: BTreeMap<String, FieldMap>,
}

impl std::ops::Deref for Catalog {
    type Target = InstanceTypes;
    fn deref(&self) -> &InstanceTypes {
        &self.types
    }
}

impl std::ops::DerefMut for Catalog {
    fn deref_mut(&mut self) -> &mut InstanceTypes {
        Arc::make_mut(&mut self.types)
    }
}

/// An offering as the catalog shows it: with its template and count annotations.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OfferingView<'a> {
    #[serde(flatten)]
    offering: &'a Offering,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<TemplateRef>,
    #[serde(skip_serializing_if = "CountLimits::is_empty")]
    limits: CountLimits,
}

/// An instance type as the catalog shows it: with its templates.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceTypeView<'a> {
    name: &'a str,
    templates: Vec<TemplateRef>,
    capacity: &'a Resources,
    allocatable: &'a Resources,
    labels: &'a BTreeMap<String, String>,
    taints: &'a [Taint],
    offerings: Vec<OfferingView<'a>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    capacity_overlaid: bool,
    /// Attach limits per CSI driver (the `…/csi-driver` annotation).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    volume_limits: &'a BTreeMap<String, u32>,
    /// The devices its nodes publish (Dynamic Resource Allocation), and their source.
    #[serde(skip_serializing_if = "Option::is_none")]
    devices: Option<&'a cloudprovider::Devices>,
}

impl Serialize for Catalog {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let types: Vec<InstanceTypeView<'_>> = self
            .instance_types
            .iter()
            .map(|it| InstanceTypeView {
                name: &it.name,
                templates: templates_of(it),
                capacity: &it.capacity,
                allocatable: &it.allocatable,
                labels: &it.labels,
                taints: &it.taints,
                offerings: it
                    .offerings
                    .iter()
                    .map(|o| OfferingView {
                        offering: o,
                        template: template_of(o),
                        limits: self.limits_of(o),
                    })
                    .collect(),
                capacity_overlaid: it.capacity_overlaid,
                volume_limits: &it.volume_limits,
                devices: it.devices.as_ref(),
            })
            .collect();
        let mut st = s.serialize_struct("Catalog", 3)?;
        st.serialize_field("instanceTypes", &types)?;
        st.serialize_field("excluded", &self.excluded)?;
        st.serialize_field("defaultsApplied", &self.defaults_applied)?;
        st.end()
    }
}

impl Catalog {
    /// The count annotations of `offering`'s template (empty: unbounded).
    pub fn limits_of(&self, offering: &Offering) -> CountLimits {
        self.limits.get(&offering.id).copied().unwrap_or_default()
    }

    /// A catalog of these instance types only (no templates excluded, no counts).
    pub fn of(instance_types: Vec<InstanceType>) -> Catalog {
        Catalog {
            types: Arc::new(InstanceTypes::of(instance_types)),
            ..Catalog::default()
        }
    }

    /// The catalog with the instance types of `names` that are sizes of its resizable
    /// groups but not in its grid added (borrowed when there are none).
    pub fn with_sizes<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Cow<'_, Catalog> {
        match self.types.with_sizes(names) {
            Cow::Borrowed(_) => Cow::Borrowed(self),
            Cow::Owned(types) => Cow::Owned(Catalog {
                types: Arc::new(types),
                ..self.clone()
            }),
        }
    }
}

pub(crate) use cloudprovider::model::sort_instance_types;
