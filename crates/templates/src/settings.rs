//! What the catalog needs from the ClusterAPINodeClass and the Cluster, and the kubelet
//! reservation defaults.
//!
//! # Allocatable
//! `allocatable = capacity − kubeReserved − systemReserved − evictionHard`, per resource, for
//! `cpu`, `memory` and `ephemeral-storage` (other resources, pods and GPUs are not reduced).
//! The NodeClass `spec.kubelet` values override the defaults key by key (as Karpenter's
//! AWS provider does); defaults, Karpenter-like:
//!
//! - **kubeReserved cpu**: 6% of the first core, 1% of the second, 0.5% of the third and
//!   fourth, 0.25% of every further core (the GKE/EKS curve): 2 cores → 70m, 4 → 80m,
//!   16 → 110m.
//! - **kubeReserved memory**: `11MiB × pods + 255MiB` (110 pods → 1465MiB).
//! - **kubeReserved ephemeral-storage**: `1Gi`.
//! - **systemReserved**: none.
//! - **evictionHard**: `memory.available: 100Mi`, `nodefs.available: 10%` (percentages are of
//!   the capacity; `nodefs.available` reduces `ephemeral-storage`).
//!
//! # Pods
//! `pods` capacity is the NodeClass `kubelet.maxPods` when set (it configures the kubelet
//! of every node of the NodeClass), else the template's `…/maxPods` annotation, else its
//! `status.capacity.pods`, else 110.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::SettingsError;
use crate::model::Resources;
use crate::quantity::{parse_milli, parse_value};

/// Pods per node when nothing says otherwise (kubelet default).
pub(crate) const DEFAULT_MAX_PODS: i64 = 110;

/// The inputs of the catalog besides the templates: the NodeClass's kubelet settings and the
/// Cluster's failure domains. Values are raw Kubernetes strings as in the NodeClass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogSettings {
    /// `spec.kubelet.kubeReserved` (resource name → quantity).
    pub kube_reserved: BTreeMap<String, String>,
    /// `spec.kubelet.systemReserved`.
    pub system_reserved: BTreeMap<String, String>,
    /// `spec.kubelet.evictionHard` (signal → quantity or percentage).
    pub eviction_hard: BTreeMap<String, String>,
    /// `spec.kubelet.maxPods`.
    pub max_pods: Option<i32>,
    /// Names of the Cluster's failure domains (`status.failureDomains`), for templates
    /// without a zone.
    pub failure_domains: Vec<String>,
    /// `status.resizeCorrections`: resizable template name → (cpu, memory) its Nodes lack
    /// against the size asked (quantities).
    pub resize_corrections: BTreeMap<String, (String, String)>,
    /// `status.learnedDevices`: template name → the devices a Node of it published (the
    /// resource-slices annotation's form).
    pub learned_devices: BTreeMap<String, String>,
}

/// An eviction threshold: absolute or a fraction of capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Threshold {
    Absolute(i64),
    /// Hundredths of a percent (10% = 1000) of capacity.
    Percent(i64),
}

/// Settings parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    kube_reserved: BTreeMap<String, i64>,
    system_reserved: BTreeMap<String, i64>,
    eviction_hard: BTreeMap<String, Threshold>,
    pub max_pods: Option<i64>,
    pub failure_domains: Vec<String>,
    /// Template name → (millicores, bytes) its Nodes lack (unparseable entries dropped:
    /// the status is ours).
    pub resize_corrections: BTreeMap<String, (i64, i64)>,
    /// Template name → the devices its Nodes publish (see [`CatalogSettings`]).
    pub learned_devices: BTreeMap<String, String>,
}

const RESERVABLE: [&str; 3] = [
    Resources::CPU,
    Resources::MEMORY,
    Resources::EPHEMERAL_STORAGE,
];

fn parse_resource_map(
    field: &str,
    m: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, i64>, SettingsError> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let f = format!("{field}.{k}");
        let parsed = if k == Resources::CPU {
            parse_milli(v)
        } else {
            parse_value(v)
        }
        .map_err(|source| SettingsError::Quantity {
            field: f.clone(),
            value: v.clone(),
            source,
        })?;
        if parsed < 0 {
            return Err(SettingsError::Negative {
                field: f,
                value: v.clone(),
            });
        }
        out.insert(k.clone(), parsed);
    }
    Ok(out)
}

fn parse_threshold(field: &str, v: &str) -> Result<Threshold, SettingsError> {
    if let Some(p) = v.trim().strip_suffix('%') {
        let bad = || SettingsError::Percentage {
            field: field.to_string(),
            value: v.to_string(),
        };
        let pct: f64 = p.trim().parse().map_err(|_| bad())?;
        if !pct.is_finite() || !(0.0..=100.0).contains(&pct) {
            return Err(bad());
        }
        return Ok(Threshold::Percent((pct * 100.0).round() as i64));
    }
    let q = parse_value(v).map_err(|source| SettingsError::Quantity {
        field: field.to_string(),
        value: v.to_string(),
        source,
    })?;
    if q < 0 {
        return Err(SettingsError::Negative {
            field: field.to_string(),
            value: v.to_string(),
        });
    }
    Ok(Threshold::Absolute(q))
}

impl CatalogSettings {
    /// Parses and validates the settings, merging the documented defaults.
    pub(crate) fn resolve(&self) -> Result<Resolved, SettingsError> {
        let kube_reserved = parse_resource_map("spec.kubelet.kubeReserved", &self.kube_reserved)?;
        let system_reserved =
            parse_resource_map("spec.kubelet.systemReserved", &self.system_reserved)?;
        let mut eviction_hard = BTreeMap::from([
            (
                "memory.available".to_string(),
                Threshold::Absolute(100 << 20),
            ),
            ("nodefs.available".to_string(), Threshold::Percent(1000)),
        ]);
        for (k, v) in &self.eviction_hard {
            let t = parse_threshold(&format!("spec.kubelet.evictionHard.{k}"), v)?;
            eviction_hard.insert(k.clone(), t);
        }
        let max_pods = match self.max_pods {
            Some(p) if p < 0 => {
                return Err(SettingsError::Negative {
                    field: "spec.kubelet.maxPods".into(),
                    value: p.to_string(),
                });
            }
            p => p.map(i64::from),
        };
        let mut failure_domains = self.failure_domains.clone();
        failure_domains.sort();
        failure_domains.dedup();
        let resize_corrections = self
            .resize_corrections
            .iter()
            .filter_map(|(t, (cpu, mem))| {
                let cpu = if cpu.is_empty() {
                    Ok(0)
                } else {
                    parse_milli(cpu)
                };
                let mem = if mem.is_empty() {
                    Ok(0)
                } else {
                    parse_value(mem)
                };
                Some((t.clone(), (cpu.ok()?.max(0), mem.ok()?.max(0))))
            })
            .collect();
        Ok(Resolved {
            kube_reserved,
            system_reserved,
            eviction_hard,
            max_pods,
            failure_domains,
            resize_corrections,
            learned_devices: self.learned_devices.clone(),
        })
    }

    /// The settings of a (typed) ClusterAPINodeClass's `spec.kubelet` and its Cluster's
    /// failure domains.
    pub fn from_node_class(
        nc: &clusterapi_api::ClusterAPINodeClass,
        cluster: Option<&clusterapi_api::Cluster>,
    ) -> Self {
        let kubelet = nc.spec.kubelet.as_ref();
        let quantities = |m: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            m.map(|m| m.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect())
                .unwrap_or_default()
        };
        Self {
            kube_reserved: quantities(kubelet.map(|k| &k.kube_reserved)),
            system_reserved: quantities(kubelet.map(|k| &k.system_reserved)),
            eviction_hard: kubelet.map(|k| k.eviction_hard.clone()).unwrap_or_default(),
            max_pods: kubelet.and_then(|k| k.max_pods),
            failure_domains: cluster
                .map(clusterapi_api::Cluster::failure_domain_names)
                .unwrap_or_default(),
            resize_corrections: nc
                .status
                .iter()
                .flat_map(|s| &s.resize_corrections)
                .map(|c| (c.template.clone(), (c.cpu.clone(), c.memory.clone())))
                .collect(),
            learned_devices: nc
                .status
                .iter()
                .flat_map(|s| &s.learned_devices)
                .map(|l| (l.template.clone(), l.resource_slices.clone()))
                .collect(),
        }
    }

    /// Reads `spec.kubelet` of a ClusterAPINodeClass given as JSON (any version of the type;
    /// missing fields are defaults). Non-string quantity values (YAML numbers) are accepted.
    pub(crate) fn from_node_class_json(node_class: &Value) -> Self {
        let kubelet = node_class.pointer("/spec/kubelet");
        let map = |key: &str| -> BTreeMap<String, String> {
            kubelet
                .and_then(|k| k.get(key))
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .filter_map(|(k, v)| scalar_string(v).map(|s| (k.clone(), s)))
                        .collect()
                })
                .unwrap_or_default()
        };
        Self {
            kube_reserved: map("kubeReserved"),
            system_reserved: map("systemReserved"),
            eviction_hard: map("evictionHard"),
            max_pods: kubelet
                .and_then(|k| k.get("maxPods"))
                .and_then(Value::as_i64)
                .and_then(|v| i32::try_from(v).ok()),
            failure_domains: Vec::new(),
            resize_corrections: node_class
                .pointer("/status/resizeCorrections")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let s = |k: &str| c.get(k).and_then(scalar_string).unwrap_or_default();
                    Some((
                        c.get("template")?.as_str()?.to_string(),
                        (s("cpu"), s("memory")),
                    ))
                })
                .collect(),
            learned_devices: node_class
                .pointer("/status/learnedDevices")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|l| {
                    Some((
                        l.get("template")?.as_str()?.to_string(),
                        l.get("resourceSlices")?.as_str()?.to_string(),
                    ))
                })
                .collect(),
        }
    }

    /// Sets the failure domains from a Cluster given as JSON: v1beta2 `status.failureDomains`
    /// (list of `{name, controlPlane, attributes}`) or v1beta1 (map name → `{controlPlane}`).
    ///
    /// All failure domains are used for workers: `controlPlane` only says whether control
    /// plane machines may go there (Cluster API places MachineDeployments in any of them).
    #[cfg(test)]
    pub(crate) fn with_cluster_json(mut self, cluster: &Value) -> Self {
        self.failure_domains = failure_domains_from_cluster_json(cluster);
        self
    }
}

/// The failure-domain names of a Cluster (v1beta2 list or v1beta1 map), sorted.
pub(crate) fn failure_domains_from_cluster_json(cluster: &Value) -> Vec<String> {
    let mut names: Vec<String> = match cluster.pointer("/status/failureDomains") {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|fd| fd.get("name").and_then(Value::as_str))
            .map(str::to_string)
            .collect(),
        Some(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    };
    names.sort();
    names.dedup();
    names
}

pub(crate) fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Default kube-reserved cpu in millicores for a node of `cpu_milli` capacity (the GKE/EKS
/// curve: 6% of the first core, 1% of the second, 0.5% of cores 3–4, 0.25% above).
pub(crate) fn default_kube_reserved_cpu_milli(cpu_milli: i64) -> i64 {
    let tiers: [(i64, i64); 4] = [(1000, 600), (1000, 100), (2000, 50), (i64::MAX, 25)];
    let mut left = cpu_milli.max(0);
    // millicores × basis points: at most 25 × i64::MAX, exact in an i128.
    let mut reserved_x10000 = 0i128;
    for (width, basis_points) in tiers {
        let part = left.min(width);
        reserved_x10000 += i128::from(part) * i128::from(basis_points);
        left -= part;
        if left == 0 {
            break;
        }
    }
    // Round up to whole millicores (always below i64::MAX: at most a quarter of the capacity).
    i64::try_from((reserved_x10000 + 9999) / 10000).unwrap_or(i64::MAX)
}

/// Default kube-reserved memory in bytes: `11MiB × pods + 255MiB`.
pub(crate) fn default_kube_reserved_memory(pods: i64) -> i64 {
    pods.max(0)
        .saturating_mul(11 << 20)
        .saturating_add(255 << 20)
}

/// Default kube-reserved ephemeral storage: 1Gi.
pub(crate) const DEFAULT_KUBE_RESERVED_EPHEMERAL: i64 = 1 << 30;

impl Resolved {
    /// The total amount held back from `capacity` per reservable resource.
    pub(crate) fn overhead(&self, capacity: &Resources) -> BTreeMap<&'static str, i64> {
        let pods = capacity.pods();
        let mut out = BTreeMap::new();
        for res in RESERVABLE {
            let cap = capacity.get(res);
            let kube = self.kube_reserved.get(res).copied().unwrap_or(match res {
                Resources::CPU => default_kube_reserved_cpu_milli(cap),
                Resources::MEMORY => default_kube_reserved_memory(pods),
                _ => DEFAULT_KUBE_RESERVED_EPHEMERAL,
            });
            let system = self.system_reserved.get(res).copied().unwrap_or(0);
            let signal = match res {
                Resources::MEMORY => Some("memory.available"),
                Resources::EPHEMERAL_STORAGE => Some("nodefs.available"),
                _ => None,
            };
            let eviction = signal
                .and_then(|s| self.eviction_hard.get(s))
                .map(|t| match *t {
                    Threshold::Absolute(v) => v,
                    Threshold::Percent(bp) => {
                        let v = i128::from(cap) * i128::from(bp);
                        i64::try_from((v + 9999) / 10000).unwrap_or(i64::MAX)
                    }
                })
                .unwrap_or(0);
            out.insert(res, kube.saturating_add(system).saturating_add(eviction));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kube_reserved_cpu_curve() {
        assert_eq!(default_kube_reserved_cpu_milli(1000), 60);
        // 4e14 cores: 25 basis points of it overflowed an i64 (a panic in debug builds).
        assert_eq!(
            default_kube_reserved_cpu_milli(400_000_000_000_000_000),
            1_000_000_000_000_070
        );
        assert!(default_kube_reserved_cpu_milli(i64::MAX) > 0);
        assert_eq!(default_kube_reserved_cpu_milli(2000), 70);
        assert_eq!(default_kube_reserved_cpu_milli(4000), 80);
        assert_eq!(default_kube_reserved_cpu_milli(16000), 110);
        assert_eq!(default_kube_reserved_cpu_milli(500), 30);
        assert_eq!(default_kube_reserved_cpu_milli(0), 0);
        assert_eq!(default_kube_reserved_cpu_milli(-5), 0);
    }

    #[test]
    fn kube_reserved_memory() {
        assert_eq!(default_kube_reserved_memory(110), 1465 << 20);
        assert_eq!(default_kube_reserved_memory(0), 255 << 20);
    }

    #[test]
    fn overrides_merge_key_by_key() {
        let s = CatalogSettings {
            kube_reserved: BTreeMap::from([("cpu".into(), "200m".into())]),
            system_reserved: BTreeMap::from([("memory".into(), "1Gi".into())]),
            eviction_hard: BTreeMap::from([("memory.available".into(), "5%".into())]),
            ..Default::default()
        };
        let r = s.resolve().expect("valid");
        let cap = Resources(BTreeMap::from([
            ("cpu".into(), 4000),
            ("memory".into(), 16 << 30),
            ("pods".into(), 110),
        ]));
        let o = r.overhead(&cap);
        assert_eq!(o["cpu"], 200);
        // default kube memory + 1Gi system + 5% of 16Gi
        let five_pct = ((16i64 << 30) * 5 + 99) / 100;
        assert_eq!(o["memory"], (1465 << 20) + (1 << 30) + five_pct);
        // no ephemeral capacity: only kube default (1Gi) + 10% of 0
        assert_eq!(o["ephemeral-storage"], 1 << 30);
    }

    #[test]
    fn invalid_settings_name_the_field() {
        let s = CatalogSettings {
            kube_reserved: BTreeMap::from([("memory".into(), "lots".into())]),
            ..Default::default()
        };
        let e = s.resolve().expect_err("invalid");
        assert!(
            e.to_string().contains("spec.kubelet.kubeReserved.memory"),
            "{e}"
        );
        let s = CatalogSettings {
            eviction_hard: BTreeMap::from([("nodefs.available".into(), "150%".into())]),
            ..Default::default()
        };
        assert!(matches!(s.resolve(), Err(SettingsError::Percentage { .. })));
        let s = CatalogSettings {
            max_pods: Some(-1),
            ..Default::default()
        };
        assert!(matches!(s.resolve(), Err(SettingsError::Negative { .. })));
    }

    #[test]
    fn from_json() {
        let nc = json!({"spec": {"kubelet": {
            "kubeReserved": {"cpu": "100m", "memory": 536870912},
            "evictionHard": {"memory.available": "200Mi"},
            "maxPods": 58
        }}});
        let s = CatalogSettings::from_node_class_json(&nc);
        assert_eq!(s.kube_reserved["memory"], "536870912");
        assert_eq!(s.max_pods, Some(58));
        let v1beta2 = json!({"status": {"failureDomains": [
            {"name": "zone-b", "controlPlane": false}, {"name": "zone-a", "controlPlane": true}
        ]}});
        assert_eq!(
            s.clone().with_cluster_json(&v1beta2).failure_domains,
            vec!["zone-a", "zone-b"]
        );
        let v1beta1 =
            json!({"status": {"failureDomains": {"fd-2": {}, "fd-1": {"controlPlane": true}}}});
        assert_eq!(
            failure_domains_from_cluster_json(&v1beta1),
            vec!["fd-1", "fd-2"]
        );
        assert!(failure_domains_from_cluster_json(&json!({})).is_empty());
    }
}
