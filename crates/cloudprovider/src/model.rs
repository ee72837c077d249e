//! The provider-neutral instance-type model (Karpenter's `cloudprovider.InstanceType` and
//! `Offering`): what a provider answers `instance_types` with and what the core plans on.
//!
//! An offering is one way to launch an instance type (a zone, a capacity type, a price).
//! The provider marks it [`Offering::available`] and gives its [`Offering::count`] when it is
//! bounded; the core reads only these, never why (Karpenter's `Offering.Available`, with the
//! provider keeping its own unavailable-offerings cache). [`Offering::id`] is the provider's
//! own reference, opaque to the core.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Serialize, Serializer};

/// Well-known label keys an offering sets (Kubernetes' and Karpenter's own).
pub mod labels {
    /// `topology.kubernetes.io/zone`.
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    /// `karpenter.sh/capacity-type`.
    pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
    /// The capacity type of reserved capacity.
    pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
}

/// Resource amounts in canonical integer units: `cpu` in millicores, everything else
/// (memory, ephemeral-storage, pods, GPUs, hugepages) in bytes or counts.
///
/// Serialized as a Kubernetes ResourceList (`{"cpu": "3500m", "memory": "16Gi"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources(pub BTreeMap<String, i64>);

impl Resources {
    pub const CPU: &'static str = "cpu";
    pub const MEMORY: &'static str = "memory";
    pub const EPHEMERAL_STORAGE: &'static str = "ephemeral-storage";
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
    pub fn to_resource_list(&self) -> BTreeMap<String, Quantity> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), Quantity(format_resource(k, *v))))
            .collect()
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, format_resource(k, *v))))
    }
}

/// Whether `name` is a GPU resource (`nvidia.com/gpu`, `amd.com/gpu`, ...).
pub fn is_gpu_resource(name: &str) -> bool {
    name.ends_with("/gpu")
}

fn is_byte_resource(name: &str) -> bool {
    name == Resources::MEMORY
        || name == Resources::EPHEMERAL_STORAGE
        || name == "storage"
        || name.starts_with("hugepages-")
}

/// Formats one resource amount in its natural unit.
pub fn format_resource(name: &str, v: i64) -> String {
    if name == Resources::CPU {
        format_milli(v)
    } else if is_byte_resource(name) {
        format_bytes(v)
    } else {
        v.to_string()
    }
}

/// Formats millicores as a quantity: `"4"`, `"3500m"`.
pub fn format_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else {
        format!("{milli}m")
    }
}

/// Formats a byte count with the largest exact binary suffix: `"16Gi"`, `"1536Mi"`, `"1000"`.
pub fn format_bytes(bytes: i64) -> String {
    const SUFFIXES: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    if bytes != 0 {
        for (suffix, unit) in SUFFIXES {
            if bytes % unit == 0 {
                return format!("{}{suffix}", bytes / unit);
            }
        }
    }
    format!("{bytes}")
}

/// Where a price came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PriceSource {
    /// The provider's own price (for Cluster API: the template's price annotation).
    Annotation,
    /// The provider's default for a shape without a price.
    Default,
    /// A NodeOverlay's `price` or `priceAdjustment`.
    Overlay,
}

/// How many more instances an offering can launch now, as the solver shares it: offerings
/// with the same `key` draw from one count (e.g. every zone of one template).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferingCount {
    /// Offerings with the same key share the count.
    pub key: String,
    /// How many are left.
    pub available: u32,
    /// What to tell a user when none is left (`template metal: 0 of 3 hosts available`).
    pub exhausted: String,
}

/// One way to launch an instance type: in a zone, with a capacity type, at a price.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    /// The provider's reference of what it launches this offering from; opaque to the core.
    /// Offerings of one instance type may share it (one per zone, say).
    #[serde(skip)]
    pub id: String,
    /// `topology.kubernetes.io/zone` of launched nodes; `None`: no zone.
    pub zone: Option<String>,
    /// `karpenter.sh/capacity-type`: spot, on-demand or reserved.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    pub price_source: PriceSource,
    /// For a `reserved` offering: the reservation it draws from. Reserved offerings are
    /// preferred over any other, as Karpenter prefers reserved capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
    /// Provider labels that vary per offering, beyond zone and capacity type (the
    /// reservation's label, the provider's own).
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
    /// Whether it can be launched now (the provider's view: backed off after a failed
    /// launch, no count left, ...). The core plans only on available offerings.
    #[serde(skip)]
    pub available: bool,
    /// Its count when bounded (`None`: unbounded).
    #[serde(skip)]
    pub count: Option<OfferingCount>,
}

impl Offering {
    /// An available, unbounded offering of the provider's `id`, without provider labels.
    pub fn new(
        id: &str,
        zone: Option<&str>,
        capacity_type: &str,
        price: f64,
        price_source: PriceSource,
    ) -> Offering {
        Offering {
            id: id.to_string(),
            zone: zone.map(str::to_string),
            capacity_type: capacity_type.to_string(),
            price,
            price_source,
            reservation_id: None,
            labels: BTreeMap::new(),
            available: true,
            count: None,
        }
    }

    /// Labels that vary per offering: zone, capacity type, the provider's.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = self.labels.clone();
        if let Some(z) = &self.zone {
            l.insert(labels::ZONE.to_string(), z.clone());
        }
        l.insert(
            labels::CAPACITY_TYPE.to_string(),
            self.capacity_type.clone(),
        );
        l
    }

    /// The value of one of [`Self::labels`] without building them (`None`: not an
    /// offering label, or unset).
    pub fn label(&self, key: &str) -> Option<&str> {
        match key {
            labels::ZONE => self.zone.as_deref(),
            labels::CAPACITY_TYPE => Some(&self.capacity_type),
            _ => self.labels.get(key).map(String::as_str),
        }
    }

    /// Whether this offering draws from a reservation (preferred over any other).
    pub fn is_reserved(&self) -> bool {
        self.capacity_type == labels::CAPACITY_TYPE_RESERVED
    }
}

/// An instance type with Karpenter semantics.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceType {
    /// `node.kubernetes.io/instance-type`.
    pub name: String,
    pub capacity: Resources,
    /// capacity − kubeReserved − systemReserved − evictionHard.
    pub allocatable: Resources,
    /// Labels every node of this type carries, whichever offering it is launched from
    /// (an offering label is here only when all offerings agree; the zone never is).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Reserved first, then by price, zone, capacity type.
    pub offerings: Vec<Offering>,
    /// Whether a NodeOverlay added to (or set) its capacity.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub capacity_overlaid: bool,
    /// Volumes a node of this type is expected to attach per CSI driver, until its CSINode
    /// says (Karpenter's `VolumeAttachmentLimits`); a driver not listed is unlimited.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volume_limits: BTreeMap<String, u32>,
    /// The devices (Dynamic Resource Allocation) a node of this type publishes, and where
    /// that is known from; `None`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<Devices>,
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

/// The ResourceSlices a node of an instance type publishes (Karpenter's `DynamicResources`:
/// its `ResourceSliceTemplates`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Devices {
    pub source: DeviceSource,
    pub slices: Vec<DeviceSlice>,
}

/// Where an instance type's devices are known from, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DeviceSource {
    /// What a node of the type published once it ran.
    Learned,
    /// What the provider was told (for Cluster API: the template's annotations).
    Declared,
}

/// One ResourceSlice of a node: a driver's devices, in the pool named after the node.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSlice {
    pub driver: String,
    /// As in a ResourceSlice's `spec.devices` (name, attributes, capacity).
    pub devices: Vec<k8s_openapi::api::resource::v1::Device>,
}

impl Devices {
    /// The drivers, sorted, each once.
    pub fn drivers(&self) -> Vec<&str> {
        let mut d: Vec<&str> = self.slices.iter().map(|s| s.driver.as_str()).collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    /// How many devices each driver publishes.
    pub fn counts(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for s in &self.slices {
            *out.entry(s.driver.as_str()).or_insert(0) += s.devices.len();
        }
        out
    }
}

/// Instance types by cheapest offering, then name.
pub fn sort_instance_types(instance_types: &mut [InstanceType]) {
    instance_types.sort_by(|a, b| {
        let pa = a.cheapest().map(|o| o.price).unwrap_or(f64::MAX);
        let pb = b.cheapest().map(|o| o.price).unwrap_or(f64::MAX);
        pa.total_cmp(&pb).then_with(|| a.name.cmp(&b.name))
    });
}

/// Reserved offerings first (preferred as Karpenter prefers reserved capacity), then price,
/// zone, capacity type, offering id.
pub fn sort_offerings(offerings: &mut [Offering]) {
    offerings.sort_by(|a, b| {
        b.is_reserved()
            .cmp(&a.is_reserved())
            .then_with(|| a.price.total_cmp(&b.price))
            .then_with(|| a.zone.cmp(&b.zone))
            .then_with(|| a.capacity_type.cmp(&b.capacity_type))
            .then_with(|| a.id.cmp(&b.id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(zone: &str, capacity_type: &str) -> Offering {
        Offering {
            id: format!("t-{zone}"),
            zone: Some(zone.into()),
            capacity_type: capacity_type.into(),
            price: 1.0,
            price_source: PriceSource::Default,
            reservation_id: None,
            labels: BTreeMap::from([("example.com/pool".into(), "p".into())]),
            available: true,
            count: None,
        }
    }

    #[test]
    fn a_node_carries_its_offerings_labels() {
        let it = InstanceType {
            volume_limits: Default::default(),
            devices: None,
            name: "m".into(),
            capacity: Resources::default(),
            allocatable: Resources::default(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            offerings: vec![offering("a", "spot"), offering("b", "on-demand")],
            capacity_overlaid: false,
        };
        let node = it.node_labels(&it.offerings[1]);
        assert_eq!(node.get("example.com/pool").map(String::as_str), Some("p"));
        assert_eq!(node.get(labels::ZONE).map(String::as_str), Some("b"));
        assert_eq!(
            node.get(labels::CAPACITY_TYPE).map(String::as_str),
            Some("on-demand")
        );
    }

    #[test]
    fn quantities() {
        assert_eq!(format_milli(4000), "4");
        assert_eq!(format_milli(3500), "3500m");
        assert_eq!(format_bytes(16 << 30), "16Gi");
        assert_eq!(format_bytes(0), "0");
        let r = Resources(BTreeMap::from([
            ("cpu".into(), 3500),
            ("nvidia.com/gpu".into(), 2),
        ]));
        assert_eq!(r.quantity("cpu"), "3500m");
        assert_eq!(r.gpu_count(), 2);
    }
}
