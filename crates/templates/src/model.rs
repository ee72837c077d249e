//! The catalog: instance types with offerings, as the scheduler and the NodeClass status see it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use api::consts::labels as label;
use k8s_openapi::api::core::v1::Taint;
use serde::{Serialize, Serializer};

use crate::count::CountLimits;
use crate::error::TemplateError;
use crate::quantity::{format_bytes, format_milli};
pub use crate::reference::TemplateRef;
use crate::resize::{ResizeSpec, Size};

/// Resource amounts in canonical integer units: `cpu` in millicores, everything else
/// (memory, ephemeral-storage, pods, GPUs, hugepages) in bytes or counts.
///
/// Serialized as a Kubernetes ResourceList (`{"cpu": "3500m", "memory": "16Gi"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources(pub BTreeMap<String, i64>);

impl Resources {
    pub const CPU: &'static str = "cpu";
    pub const MEMORY: &'static str = "memory";
    pub(crate) const EPHEMERAL_STORAGE: &'static str = "ephemeral-storage";
    pub const PODS: &'static str = "pods";

    /// The amount of `name` (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }
    /// Millicores.
    pub fn cpu_milli(&self) -> i64 {
        self.get(Self::CPU)
    }
    /// Bytes.
    pub fn memory_bytes(&self) -> i64 {
        self.get(Self::MEMORY)
    }
    /// Pods.
    pub fn pods(&self) -> i64 {
        self.get(Self::PODS)
    }
    /// Sum of all `*/gpu` resources (nvidia.com/gpu, amd.com/gpu, ...).
    pub fn gpu_count(&self) -> i64 {
        self.0
            .iter()
            .filter(|(k, _)| is_gpu_resource(k))
            .map(|(_, v)| *v)
            .sum()
    }
    /// The amount of `name` as a Kubernetes quantity string.
    pub fn quantity(&self, name: &str) -> String {
        format_resource(name, self.get(name))
    }
    /// As a k8s ResourceList.
    pub fn to_resource_list(
        &self,
    ) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
        self.0
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(format_resource(k, *v)),
                )
            })
            .collect()
    }
}

pub(crate) fn is_gpu_resource(name: &str) -> bool {
    name.ends_with("/gpu")
}

fn is_byte_resource(name: &str) -> bool {
    name == Resources::MEMORY
        || name == Resources::EPHEMERAL_STORAGE
        || name == "storage"
        || name.starts_with("hugepages-")
}

/// Formats one resource amount in its natural unit.
pub(crate) fn format_resource(name: &str, v: i64) -> String {
    if name == Resources::CPU {
        format_milli(v)
    } else if is_byte_resource(name) {
        format_bytes(v)
    } else {
        v.to_string()
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, format_resource(k, *v))))
    }
}

/// Where a price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PriceSource {
    /// The `karpenter.cluster.x-k8s.io/price` annotation.
    Annotation,
    /// The documented default formula ([`default_price`]).
    Default,
    /// A NodeOverlay's `price` or `priceAdjustment` (see the overlay module).
    Overlay,
}

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

/// One way to launch an instance type: a template, in a zone, with a capacity type.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    /// `topology.kubernetes.io/zone` of launched nodes; `None` when the template has no zone
    /// and the Cluster no failure domains.
    pub zone: Option<String>,
    /// `karpenter.sh/capacity-type`: spot, on-demand or reserved.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    pub price_source: PriceSource,
    /// The template a Machine for this offering is cloned from.
    pub template: TemplateRef,
    /// The template's count annotations (see [`crate::count`]); empty: unbounded.
    #[serde(skip_serializing_if = "CountLimits::is_empty")]
    pub limits: CountLimits,
    /// For a `reserved` offering: the reservation it draws from (the template's name).
    /// Reserved offerings are preferred over any other, as Karpenter prefers reserved capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
}

impl Offering {
    /// Labels that vary per offering: zone, capacity type, instance template.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = BTreeMap::new();
        if let Some(z) = &self.zone {
            l.insert(label::ZONE.to_string(), z.clone());
        }
        l.insert(label::CAPACITY_TYPE.to_string(), self.capacity_type.clone());
        l.insert(
            label::INSTANCE_TEMPLATE.to_string(),
            self.template.name.clone(),
        );
        if let Some(id) = &self.reservation_id {
            l.insert(label::RESERVATION_ID.to_string(), id.clone());
        }
        l
    }

    /// The value of one of [`Self::labels`] without building them (`None`: not an
    /// offering label, or unset).
    pub fn label(&self, key: &str) -> Option<&str> {
        match key {
            label::ZONE => self.zone.as_deref(),
            label::CAPACITY_TYPE => Some(&self.capacity_type),
            label::INSTANCE_TEMPLATE => Some(&self.template.name),
            label::RESERVATION_ID => self.reservation_id.as_deref(),
            _ => None,
        }
    }

    /// Whether this offering draws from a reservation (preferred over any other).
    pub fn is_reserved(&self) -> bool {
        self.capacity_type == label::CAPACITY_TYPE_RESERVED
    }
}

/// An instance type with Karpenter semantics.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceType {
    /// `node.kubernetes.io/instance-type`.
    pub name: String,
    /// Every template this type is launched from (one per distinct template of its offerings).
    pub templates: Vec<TemplateRef>,
    pub capacity: Resources,
    /// capacity − kubeReserved − systemReserved − evictionHard.
    pub allocatable: Resources,
    /// Labels every node of this type carries, whichever offering it is launched from.
    /// `karpenter.sh/capacity-type` and `…/instance-template` are here only when all
    /// offerings agree; the zone never is (see [`Offering::labels`]).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Reserved first, then by price, zone, capacity type.
    pub offerings: Vec<Offering>,
    /// Whether a NodeOverlay added to (or set) its capacity (see the overlay module).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub capacity_overlaid: bool,
}

impl InstanceType {
    /// The labels of a node launched from `offering`.
    pub fn node_labels(&self, offering: &Offering) -> BTreeMap<String, String> {
        let mut l = self.labels.clone();
        l.extend(offering.labels());
        l
    }
    /// The preferred offering: a reserved one, else the cheapest.
    pub fn cheapest(&self) -> Option<&Offering> {
        self.offerings.first()
    }
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

/// The instance types one NodeClass can launch.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    /// Sorted by cheapest offering, then name.
    pub instance_types: Vec<InstanceType>,
    /// Templates that yield nothing, sorted by template.
    pub excluded: Vec<Excluded>,
    pub defaults_applied: Vec<DefaultApplied>,
    /// The resizable templates (by instance-type base name): their grid is in
    /// `instance_types`, any other size of theirs is made on demand ([`Catalog::lookup`]).
    #[serde(skip)]
    pub resizable: Vec<ResizableGroup>,
}

/// Makes the instance type of one size of a resizable group (`None`: not a size of it).
pub type MakeSized = dyn Fn(Size) -> Option<InstanceType> + Send + Sync;

/// The resizable templates sharing one instance-type base name (one per zone, say).
#[derive(Clone)]
pub struct ResizableGroup {
    /// The base name: `<base>-<cpu>c-<memory>` are its instance types.
    pub base: String,
    pub spec: ResizeSpec,
    /// The templates of the group.
    pub templates: Vec<TemplateRef>,
    pub(crate) make: Arc<MakeSized>,
}

impl std::fmt::Debug for ResizableGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResizableGroup")
            .field("base", &self.base)
            .field("spec", &self.spec)
            .field("templates", &self.templates)
            .finish()
    }
}

impl PartialEq for ResizableGroup {
    fn eq(&self, other: &Self) -> bool {
        self.base == other.base && self.spec == other.spec && self.templates == other.templates
    }
}

impl ResizableGroup {
    /// The instance type of `size` (`None` when the spec does not contain it).
    pub fn instance_type(&self, size: Size) -> Option<InstanceType> {
        if !self.spec.contains(size) {
            return None;
        }
        (self.make)(size)
    }
}

impl Catalog {
    /// The instance type called `name`.
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.instance_types.iter().find(|t| t.name == name)
    }

    /// The resizable group `name` is a size of, and the size.
    pub fn resizable_of(&self, name: &str) -> Option<(&ResizableGroup, Size)> {
        self.resizable
            .iter()
            .find_map(|g| Some((g, crate::resize::parse_sized_name(&g.base, name)?)))
    }

    /// The instance type called `name`: in the catalog, or a size of a resizable group
    /// within its bounds (made now).
    pub fn lookup(&self, name: &str) -> Option<Cow<'_, InstanceType>> {
        if let Some(it) = self.get(name) {
            return Some(Cow::Borrowed(it));
        }
        let (group, size) = self.resizable_of(name)?;
        group.instance_type(size).map(Cow::Owned)
    }

    /// The catalog with the instance types of `names` that are sizes of its resizable
    /// groups but not in its grid added (borrowed when there are none).
    pub fn with_sizes<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Cow<'_, Catalog> {
        let extra: Vec<InstanceType> = names
            .into_iter()
            .filter(|n| self.get(n).is_none())
            .filter_map(|n| self.lookup(n).map(Cow::into_owned))
            .collect();
        if extra.is_empty() {
            return Cow::Borrowed(self);
        }
        let mut c = self.clone();
        c.instance_types.extend(extra);
        sort_instance_types(&mut c.instance_types);
        Cow::Owned(c)
    }
}
/// Instance types by cheapest offering, then name.
pub(crate) fn sort_instance_types(instance_types: &mut [InstanceType]) {
    instance_types.sort_by(|a, b| {
        let pa = a.cheapest().map(|o| o.price).unwrap_or(f64::MAX);
        let pb = b.cheapest().map(|o| o.price).unwrap_or(f64::MAX);
        pa.total_cmp(&pb).then_with(|| a.name.cmp(&b.name))
    });
}
