//! Sizing a NodeClaim of a resizable template: the smallest size of the template's lattice
//! whose allocatable (capacity minus the kubelet's overhead, as the catalog computes it)
//! holds the claim's demand (its pods and daemonsets) plus the template's headroom.

use crate::model::{InstanceType, ResizableGroup, Resources, format_resource};
use crate::resize::{Range, Size};

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
