//! Dynamic Resource Allocation in the simulation (`resource.k8s.io/v1`): the devices a node
//! publishes, the ResourceClaims pods reference, the DeviceClasses those name, trimmed to what
//! an allocation reads.
//!
//! [`Dra`] is the DRA side of one solve ([`crate::solve_with_devices`]): the pending pods'
//! claims, the claims themselves (allocated ones pin their pods to their node), the devices a
//! node of each instance type would publish and those existing nodes publish. A pod with no
//! claim is not in it and costs the solve nothing.
//!
//! Selectors (of a DeviceClass and of a request) are CEL expressions, evaluated as
//! Kubernetes' DRA environment does ([`cel`]): `device.driver`,
//! `device.attributes["domain"].name`, `device.capacity["domain"].name` (a quantity, compared
//! with `compareTo`, `isGreaterThan`, `isLessThan`). An expression that does not compile, or
//! calls what the environment lacks, makes the pod unplaceable with that reason; one that
//! fails on a device (an attribute it does not have) rules that device's node or instance
//! type out for the claim, as kube-scheduler's allocator does.
//!
//! Partitionable devices: a device that consumes counters (`consumesCounters`) draws on its
//! pool's counter sets (`sharedCounters`), and the devices allocated on a node stay within
//! every budget; one drawing on a set or counter its pool lacks is never allocated. A request's
//! `capacity` must fit a device (its names, the amounts rounded up by the capacity's
//! `requestPolicy`). A device allowing multiple allocations (consumable capacity) is shared
//! by capacity: each allocation consumes, per capacity of the device, the request's amount
//! (rounded up by the policy), else the policy's default, else all of it, and the
//! allocations on it stay within its capacity.
//!
//! Network-attached devices (ResourceSlices for many nodes: `allNodes`, `nodeSelector`) are
//! [`Dra::network`] pools every node the selector allows reaches. A pending pod's claim is
//! allocated from them first (as Karpenter tries in-cluster devices before an instance
//! type's), whole — a claim takes all its devices from one such pool or none — and its pods
//! then carry the pool's node selector; the pool's devices are taken for the whole solve.
//!
//! Pure: the caller reads the objects from its caches (or a snapshot).

pub mod cel;
mod quantity;

use std::collections::BTreeMap;

pub use quantity::{Quantity, QuantityError};

use crate::Requirement;

/// A claim: (namespace, name).
pub type ClaimKey = (String, String);

/// The DRA side of one solve. Empty (the default): no pod claims devices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dra {
    /// By name.
    pub classes: BTreeMap<String, DeviceClass>,
    /// Every claim a pending pod references, and every allocated claim (its devices are
    /// taken on their node). A pod's claim from a ResourceClaimTemplate that does not exist
    /// yet is here too, made from the template (see [`Dra::pod_claims`]).
    pub claims: BTreeMap<ClaimKey, ResourceClaim>,
    /// The claims of each pending pod, by (namespace, name) of the pod. A pod not listed
    /// claims nothing.
    pub pod_claims: BTreeMap<(String, String), Vec<ClaimKey>>,
    /// The ResourceSlices a node of each instance type publishes, by instance-type name
    /// (`node.kubernetes.io/instance-type`). The pool of each is the node's name.
    pub instance_types: BTreeMap<String, Vec<Slice>>,
    /// The ResourceSlices each existing node publishes, by node name. A node not listed
    /// publishes the devices of its instance type (an in-flight NodeClaim whose driver has
    /// not published yet), if that type has any.
    pub nodes: BTreeMap<String, Vec<Slice>>,
    /// Pending pods whose claims cannot be read (e.g. their ResourceClaimTemplate does not
    /// exist), by (namespace, name), with why: no node can take them.
    pub blocked: BTreeMap<(String, String), String>,
    /// Pools of network-attached devices (ResourceSlices for many nodes), in the order they
    /// are tried.
    pub network: Vec<NetworkPool>,
}

/// A pool of devices reachable from many nodes: the slices of one driver and pool published
/// with `allNodes` or a `nodeSelector`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetworkPool {
    /// Its slices (`pool`: the pool's name, as allocations name it).
    pub slices: Vec<Slice>,
    /// The nodes that reach it: the selector's terms, ANDed as Karpenter reads an
    /// allocation's node selector; empty: every node (`allNodes`).
    pub node_selector: Vec<Vec<Requirement>>,
}

impl Dra {
    /// Whether any pending pod claims devices (a solve without claims skips DRA entirely).
    pub fn is_empty(&self) -> bool {
        self.pod_claims.values().all(Vec::is_empty) && self.blocked.is_empty()
    }
}

/// A DeviceClass, trimmed: its CEL selectors (ANDed with the request's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceClass {
    pub selectors: Vec<String>,
}

/// A ResourceClaim, trimmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceClaim {
    /// `spec.devices.requests`.
    pub requests: Vec<DeviceRequest>,
    /// `spec.devices.constraints`.
    pub constraints: Vec<Constraint>,
    /// `status.allocation`, when allocated.
    pub allocation: Option<Allocation>,
}

/// One request of a claim: `exactly` (one alternative) or `firstAvailable` (tried in
/// order, the first that can be allocated wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceRequest {
    pub name: String,
    pub alternatives: Vec<SubRequest>,
}

/// `exactly`, or one `firstAvailable` entry (then `name` is the subrequest's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubRequest {
    /// The subrequest's name (`None` for `exactly`).
    pub name: Option<String>,
    pub device_class: String,
    /// CEL expressions, ANDed with the class's.
    pub selectors: Vec<String>,
    pub mode: AllocationMode,
    /// `capacity.requests`: what each device must offer, by capacity name (a bare name is in
    /// the device's driver's domain).
    pub capacity: BTreeMap<String, Quantity>,
}

impl SubRequest {
    /// `exactly` `count` devices of `class`.
    pub fn exactly(class: &str, count: u32) -> Self {
        SubRequest {
            name: None,
            device_class: class.to_string(),
            selectors: Vec::new(),
            mode: AllocationMode::ExactCount(count),
            capacity: BTreeMap::new(),
        }
    }
}

impl DeviceRequest {
    /// A request of `count` devices of `class`.
    pub fn exactly(name: &str, class: &str, count: u32) -> Self {
        DeviceRequest {
            name: name.to_string(),
            alternatives: vec![SubRequest::exactly(class, count)],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocationMode {
    /// `ExactCount` (Kubernetes' default, `count` defaulting to 1).
    ExactCount(u32),
    /// `All`: every matching device of the node, at least one, none allocated already.
    All,
}

/// A constraint across requests of one claim (`requests` empty: every request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint {
    pub requests: Vec<String>,
    pub kind: ConstraintKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ConstraintKind {
    /// `matchAttribute`: every device has the attribute (a fully qualified name), with one
    /// value.
    MatchAttribute(String),
    /// `distinctAttribute`: every device has the attribute, each a different value.
    DistinctAttribute(String),
}

/// `status.allocation` of a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allocation {
    /// The devices it holds.
    pub devices: Vec<DeviceId>,
    /// What it consumes of devices allowing multiple allocations
    /// (`results[].consumedCapacity`), by device and capacity name.
    pub consumed: BTreeMap<DeviceId, BTreeMap<String, Quantity>>,
    /// The node its devices are on (`nodeSelector`'s `matchFields` on `metadata.name`).
    pub node_name: Option<String>,
    /// The rest of `nodeSelector`: OR of terms, each the AND of its `matchExpressions`;
    /// empty: any node.
    pub node_selector: Vec<Vec<Requirement>>,
}

/// A device: driver, pool, name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// One ResourceSlice, trimmed: a driver's devices in a pool, or the pool's shared counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    pub driver: String,
    /// The pool; for an instance type's slices, empty (the node's name once it runs).
    pub pool: String,
    pub devices: Vec<Device>,
    /// `sharedCounters`: the budgets the pool's partitionable devices draw on.
    pub counters: Vec<CounterSet>,
}

/// A counter set of a pool (`sharedCounters`): budget per counter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSet {
    pub name: String,
    pub counters: BTreeMap<String, Quantity>,
}

/// A device of a slice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    /// By fully qualified name (`domain/id`; a bare id of the slice is under the driver's
    /// domain).
    pub attributes: BTreeMap<String, Attribute>,
    /// By fully qualified name, like `attributes`.
    pub capacity: BTreeMap<String, Quantity>,
    /// `consumesCounters`: what allocating it draws from its pool's counter sets (a
    /// partitionable device). A set or counter the pool lacks makes it unallocatable.
    pub consumes: Vec<CounterSet>,
    /// Each capacity's `requestPolicy`, by fully qualified name, where it has one.
    pub policies: BTreeMap<String, CapacityPolicy>,
    /// `allowMultipleAllocations`: shared by capacity among allocations (see
    /// [`Device::consumption`]) instead of allocated whole.
    pub multiple: bool,
}

/// A capacity's `requestPolicy`: the amounts a request may take of it (`validValues`, or
/// `validRange` `min`, `max`, `step`); a request is rounded up to the next one allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapacityPolicy {
    /// What an allocation that does not request the capacity consumes of it.
    pub default: Option<Quantity>,
    pub valid_values: Vec<Quantity>,
    pub min: Option<Quantity>,
    pub max: Option<Quantity>,
    pub step: Option<Quantity>,
}

impl Device {
    /// Whether the device can serve a request of `capacity` (by name; a bare name is in
    /// `driver`'s domain): it has each capacity, and the amount — rounded up as the capacity's
    /// policy allows — is within it (for a shared device, what the allocation would consume
    /// is, see [`Device::consumption`]).
    pub fn serves(&self, driver: &str, capacity: &BTreeMap<String, Quantity>) -> bool {
        self.consumption(driver, capacity).is_some_and(|c| {
            c.iter()
                .all(|(name, amount)| self.capacity.get(name).is_some_and(|have| amount <= have))
        })
    }

    /// What one allocation for a request of `capacity` consumes of the device, by fully
    /// qualified capacity name; `None` when it asks for a capacity the device lacks or an
    /// amount its policy does not allow. An exclusive device: the requested amounts, rounded
    /// up. A shared one ([`Device::multiple`]): every capacity of the device — the requested
    /// amount rounded up, else the policy's default, else the whole capacity (Kubernetes'
    /// consumable capacity).
    pub fn consumption(
        &self,
        driver: &str,
        capacity: &BTreeMap<String, Quantity>,
    ) -> Option<BTreeMap<String, Quantity>> {
        let mut out = BTreeMap::new();
        for (name, want) in capacity {
            let name = qualified(name, driver);
            self.capacity.get(&name)?;
            let amount = match self.policies.get(&name) {
                Some(p) => p.round(*want)?,
                None => *want,
            };
            out.insert(name, amount);
        }
        if self.multiple {
            for (name, have) in &self.capacity {
                if !out.contains_key(name) {
                    let default = self.policies.get(name).and_then(|p| p.default);
                    out.insert(name.clone(), default.unwrap_or(*have));
                }
            }
        }
        Some(out)
    }
}

impl CapacityPolicy {
    /// `want` rounded up to an amount the policy allows (`None`: none).
    fn round(&self, want: Quantity) -> Option<Quantity> {
        if !self.valid_values.is_empty() {
            return self
                .valid_values
                .iter()
                .filter(|v| **v >= want)
                .min()
                .copied();
        }
        let mut amount = want;
        if let Some(min) = self.min {
            amount = amount.max(min);
            if let Some(step) = self.step.filter(|s| s.sign() > 0) {
                let mut v = min;
                while v < amount {
                    v = v.checked_add(step)?;
                }
                amount = v;
            }
        }
        match self.max {
            Some(max) if amount > max => None,
            _ => Some(amount),
        }
    }
}

impl Device {
    /// A device without attributes or capacity.
    pub fn named(name: &str) -> Self {
        Device {
            name: name.to_string(),
            ..Device::default()
        }
    }
}

/// A device attribute's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attribute {
    Int(i64),
    Bool(bool),
    String(String),
    /// A semantic version (`1.2.3`).
    Version(String),
}

/// A qualified name as Kubernetes reads it: `domain/id`, or a bare `id` in `driver`'s domain.
pub fn qualified(name: &str, driver: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{driver}/{name}")
    }
}
