//! Resizable instance types, provider-neutral: a type whose machines can be any size inside
//! declared ranges (a VM of vSphere, Nutanix, Proxmox or KubeVirt). A provider describes the
//! ranges ([`Sizing`]) and how one size becomes an instance type ([`ResizableGroup`]); the
//! core sizes a NodeClaim to the smallest size of the lattice that holds its demand
//! ([`ResizableGroup::size_for`]) and names it `<base>-<cpu>c-<memory>` ([`sized_name`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{InstanceType, Offering, Resources, format_bytes, format_resource};

/// At most this many synthetic instance types per resizable template.
pub const MAX_GRID: usize = 200;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// One size: whole vCPUs (in millicores) and memory (bytes, whole MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Size {
    /// Millicores (a multiple of 1000).
    pub cpu: i64,
    /// Bytes (a multiple of 1 MiB).
    pub memory: i64,
}

impl Size {
    /// Whole vCPUs.
    pub fn vcpus(&self) -> i64 {
        self.cpu / 1000
    }
    /// `cpu=6,memory=20Gi`, as a NodeClaim records its size.
    pub fn annotation(&self) -> String {
        format!("cpu={},memory={}", self.vcpus(), format_bytes(self.memory))
    }
    /// The name suffix: `6c-20gi` (or `6c-1536mi`).
    fn suffix(&self) -> String {
        let mem = if self.memory % GIB == 0 {
            format!("{}gi", self.memory / GIB)
        } else {
            format!("{}mi", self.memory / MIB)
        };
        format!("{}c-{mem}", self.vcpus())
    }
    fn parse_suffix(s: &str) -> Option<Size> {
        let (cpu, mem) = s.split_once("c-")?;
        let cpu: i64 = cpu.parse().ok()?;
        let memory = if let Some(g) = mem.strip_suffix("gi") {
            g.parse::<i64>().ok()?.checked_mul(GIB)?
        } else {
            mem.strip_suffix("mi")?
                .parse::<i64>()
                .ok()?
                .checked_mul(MIB)?
        };
        Some(Size {
            cpu: cpu.checked_mul(1000)?,
            memory,
        })
    }
}

/// `min-max/step` of one resource, in its canonical unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Range {
    pub min: i64,
    pub max: i64,
    pub step: i64,
}

impl Range {
    /// Whether `v` is on the lattice `min + k × step` and within the bounds.
    pub fn contains(&self, v: i64) -> bool {
        v >= self.min && v <= self.max && (v - self.min) % self.step == 0
    }
    /// The smallest lattice value ≥ `v` (`None` above `max`).
    pub(crate) fn round_up(&self, v: i64) -> Option<i64> {
        if v <= self.min {
            return Some(self.min);
        }
        let k = (v - self.min + self.step - 1) / self.step;
        let r = self.min.checked_add(k.checked_mul(self.step)?)?;
        (r <= self.max).then_some(r)
    }
    /// Roughly geometric values from `min` to `max` (each about ×`factor` the last, on the
    /// lattice), both ends included.
    fn geometric(&self, factor: f64) -> Vec<i64> {
        let mut out = vec![self.min];
        let mut v = self.min;
        while v < self.max {
            let next = ((v as f64) * factor).ceil() as i64;
            v = self.round_up(next.max(v + 1)).unwrap_or(self.max);
            out.push(v);
        }
        out
    }
}

/// How a resizable instance type may be sized: its ranges, the memory per cpu a size keeps,
/// its price per unit and the headroom added to a demand.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sizing {
    pub cpu: Range,
    pub memory: Range,
    /// Bytes of memory per vCPU a size keeps (min, max).
    pub memory_per_cpu: Option<(i64, i64)>,
    pub price_per_cpu: Option<f64>,
    pub price_per_gib: Option<f64>,
    /// Percent added to a NodeClaim's demand before sizing.
    pub headroom_percent: i64,
}

impl Sizing {
    /// Whether `size` is a size of this type (on both lattices, inside the bounds and
    /// the memory per cpu).
    pub fn contains(&self, size: Size) -> bool {
        self.cpu.contains(size.cpu) && self.memory.contains(size.memory) && self.ratio_ok(size)
    }

    fn ratio_ok(&self, size: Size) -> bool {
        self.memory_per_cpu.is_none_or(|(lo, hi)| {
            let v = size.vcpus().max(1);
            size.memory >= lo.saturating_mul(v) && size.memory <= hi.saturating_mul(v)
        })
    }

    /// The sizes a catalog offers: roughly geometric steps of cpu and memory (×1.5,
    /// coarser when that would exceed [`MAX_GRID`]), every pair within the memory per cpu,
    /// plus for each cpu the smallest memory it allows; both ends of each range included.
    pub fn grid(&self) -> Vec<Size> {
        let mut factor = 1.5;
        loop {
            let cpus = self.cpu.geometric(factor);
            let mems = self.memory.geometric(factor);
            let mut out = BTreeSet::new();
            for &cpu in &cpus {
                for &memory in &mems {
                    let s = Size { cpu, memory };
                    if self.ratio_ok(s) {
                        out.insert(s);
                    }
                }
                if let Some(s) = self.smallest_memory_for(cpu) {
                    out.insert(s);
                }
            }
            if out.len() <= MAX_GRID || factor > 16.0 {
                return out.into_iter().take(MAX_GRID).collect();
            }
            factor *= 1.25;
        }
    }

    /// The smallest size with `cpu` (memory raised to the memory per cpu); `None` when no
    /// memory fits.
    fn smallest_memory_for(&self, cpu: i64) -> Option<Size> {
        let lo = self
            .memory_per_cpu
            .map(|(lo, _)| lo.saturating_mul(cpu / 1000))
            .unwrap_or(0);
        let memory = self.memory.round_up(lo)?;
        let s = Size { cpu, memory };
        self.ratio_ok(s).then_some(s)
    }

    /// The smallest size of this type with at least `cpu` millicores and `memory`
    /// bytes (raised to keep the memory per cpu); `None` when it exceeds the ranges.
    pub(crate) fn round_up(&self, cpu: i64, memory: i64) -> Option<Size> {
        let mut cpu = self.cpu.round_up(cpu)?;
        let mut memory = self.memory.round_up(memory)?;
        for _ in 0..4 {
            let s = Size { cpu, memory };
            if self.ratio_ok(s) {
                return Some(s);
            }
            let Some((lo, hi)) = self.memory_per_cpu else {
                return Some(s);
            };
            if memory < lo.saturating_mul(cpu / 1000) {
                memory = self.memory.round_up(lo.saturating_mul(cpu / 1000))?;
            } else if memory > hi.saturating_mul(cpu / 1000) {
                let need = (memory + hi - 1) / hi.max(1);
                cpu = self.cpu.round_up(need.saturating_mul(1000))?;
            }
        }
        let s = Size { cpu, memory };
        self.ratio_ok(s).then_some(s)
    }

    /// The price of `size` from the per-cpu and per-GiB prices; `None` when neither is set.
    pub fn price(&self, size: Size) -> Option<f64> {
        if self.price_per_cpu.is_none() && self.price_per_gib.is_none() {
            return None;
        }
        let p = self.price_per_cpu.unwrap_or(0.0) * size.vcpus() as f64
            + self.price_per_gib.unwrap_or(0.0) * size.memory as f64 / GIB as f64;
        Some((p * 1e6).round() / 1e6)
    }
}

/// The instance-type name of `size` for the base name `base`.
pub fn sized_name(base: &str, size: Size) -> String {
    format!("{base}-{}", size.suffix())
}

/// The size a name of `base` stands for (`None`: not one of its names).
pub fn parse_sized_name(base: &str, name: &str) -> Option<Size> {
    Size::parse_suffix(name.strip_prefix(base)?.strip_prefix('-')?)
}

/// Makes the instance type of one size of a resizable group (`None`: not a size of it).
pub type MakeSized = dyn Fn(Size) -> Option<InstanceType> + Send + Sync;

/// The resizable instance types sharing one base name (one template per zone, say).
#[derive(Clone)]
pub struct ResizableGroup {
    /// The base name: `<base>-<cpu>c-<memory>` are its instance types.
    pub base: String,
    pub spec: Sizing,
    make: Arc<MakeSized>,
}

impl std::fmt::Debug for ResizableGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResizableGroup")
            .field("base", &self.base)
            .field("spec", &self.spec)
            .finish()
    }
}

impl PartialEq for ResizableGroup {
    fn eq(&self, other: &Self) -> bool {
        self.base == other.base && self.spec == other.spec
    }
}

impl ResizableGroup {
    /// A group of `base` sized by `spec`, whose sizes `make` turns into instance types.
    pub fn new(base: String, spec: Sizing, make: Arc<MakeSized>) -> ResizableGroup {
        ResizableGroup { base, spec, make }
    }

    /// The instance type of `size` (`None` when the spec does not contain it).
    pub fn instance_type(&self, size: Size) -> Option<InstanceType> {
        if !self.spec.contains(size) {
            return None;
        }
        (self.make)(size)
    }

    /// A group whose every size is an instance type of that capacity (allocatable the same,
    /// no labels or taints), launched from `offering`, priced by `spec` when it has prices.
    pub fn uniform(base: &str, spec: Sizing, offering: Offering) -> ResizableGroup {
        let (name_base, priced) = (base.to_string(), spec.clone());
        let make = move |size: Size| {
            let resources = Resources(
                [
                    (Resources::CPU.to_string(), size.cpu),
                    (Resources::MEMORY.to_string(), size.memory),
                ]
                .into(),
            );
            let mut o = offering.clone();
            o.price = priced.price(size).unwrap_or(o.price);
            Some(InstanceType {
                name: sized_name(&name_base, size),
                capacity: resources.clone(),
                allocatable: resources,
                labels: Default::default(),
                taints: Vec::new(),
                offerings: vec![o],
                capacity_overlaid: false,
                volume_limits: Default::default(),
                devices: None,
            })
        };
        ResizableGroup::new(base.to_string(), spec, Arc::new(make))
    }

    /// The instance types of its grid ([`Sizing::grid`]).
    pub fn grid(&self) -> Vec<InstanceType> {
        self.spec
            .grid()
            .into_iter()
            .filter_map(|s| self.instance_type(s))
            .collect()
    }

    /// The instance type of `size` as the provider makes it, on the lattice or not.
    pub fn make(&self, size: Size) -> Option<InstanceType> {
        (self.make)(size)
    }
}

/// Why a demand has no size in a resizable group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// The demand exceeds the largest size.
    #[error(
        "instance type {base}: needs {want} {resource} allocatable, more than its largest size offers ({max})"
    )]
    TooLarge {
        base: String,
        resource: String,
        want: String,
        max: String,
    },
}

impl ResizableGroup {
    /// The smallest size whose allocatable holds `demand` plus the headroom: the smallest
    /// vCPUs that fit the cpu, then the smallest memory that fits the memory (each on its
    /// lattice), raised to keep the memory per cpu.
    pub fn size_for(&self, demand: &Resources) -> Result<Size, SizeError> {
        let h = self.spec.headroom_percent;
        let want = |name: &str| {
            let v = i128::from(demand.get(name)) * i128::from(100 + h);
            i64::try_from((v + 99) / 100).unwrap_or(i64::MAX)
        };
        let (want_cpu, want_mem) = (want(Resources::CPU), want(Resources::MEMORY));
        let alloc = |s: Size| (self.make)(s).map(|it| it.allocatable);
        let cpu_fits = |c: i64| {
            alloc(Size {
                cpu: c,
                memory: self.spec.memory.max,
            })
            .is_some_and(|a| a.cpu_milli() >= want_cpu)
        };
        let cpu = smallest(&self.spec.cpu, want_cpu, cpu_fits)
            .ok_or_else(|| self.too_large(Resources::CPU, want_cpu))?;
        let mem_fits =
            |m: i64| alloc(Size { cpu, memory: m }).is_some_and(|a| a.memory_bytes() >= want_mem);
        let memory = smallest(&self.spec.memory, want_mem, mem_fits)
            .ok_or_else(|| self.too_large(Resources::MEMORY, want_mem))?;
        let size = self
            .spec
            .round_up(cpu, memory)
            .ok_or_else(|| self.too_large(Resources::MEMORY, want_mem))?;
        let it = (self.make)(size).ok_or_else(|| self.too_large(Resources::CPU, want_cpu))?;
        if let Some((name, v)) = demand
            .0
            .iter()
            .find(|(name, v)| it.allocatable.get(name) < **v)
        {
            return Err(self.too_large(name, *v));
        }
        Ok(size)
    }

    fn too_large(&self, resource: &str, want: i64) -> SizeError {
        let largest = Size {
            cpu: self.spec.cpu.max,
            memory: self.spec.memory.max,
        };
        let max = (self.make)(largest)
            .map(|it: InstanceType| it.allocatable.get(resource))
            .unwrap_or(0);
        SizeError::TooLarge {
            base: self.base.clone(),
            resource: resource.to_string(),
            want: format_resource(resource, want),
            max: format_resource(resource, max),
        }
    }
}

/// The smallest lattice value of `range`, at least `at_least`, for which `fits` holds
/// (`fits` monotonic: a larger value fits when a smaller one does); binary search.
fn smallest(range: &Range, at_least: i64, fits: impl Fn(i64) -> bool) -> Option<i64> {
    let start = range.round_up(at_least)?;
    let mut lo = (start - range.min) / range.step;
    let mut hi = (range.max - range.min) / range.step;
    let at = |k: i64| range.min + k * range.step;
    if !fits(at(hi)) {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(at(mid)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(at(lo))
}
