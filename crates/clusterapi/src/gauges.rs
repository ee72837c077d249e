//! The Cluster API provider's own gauges of a cluster: its Machines by nodepool and phase.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::consts::labels;
use clusterapi_api::Machine;
use kube::ResourceExt;

use karpenter_core::cache::Cache;
use karpenter_core::metrics::gauges::{Family, Gauges, Labels};

/// `karpenter_capi_machines`, from the engagement's Machines cache.
pub(crate) struct MachineGauges {
    pub machines: Cache<Machine>,
}

impl Gauges for MachineGauges {
    fn families(&self) -> Vec<Family> {
        vec![Family {
            name: "karpenter_capi_machines",
            help: "Cluster API Machines of nodeclaims, by nodepool and phase.",
            samples: machine_phases(&self.machines.store().state()),
        }]
    }
}

/// Machines by nodepool and phase (`Pending` until Cluster API reports one).
fn machine_phases(machines: &[Arc<Machine>]) -> Vec<(Labels, f64)> {
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for m in machines {
        let pool = m
            .labels()
            .get(labels::NODEPOOL)
            .cloned()
            .unwrap_or_default();
        let phase = m
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "Pending".into());
        *counts.entry((pool, phase)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((nodepool, phase), n)| (vec![("nodepool", nodepool), ("phase", phase)], n as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn machines_by_nodepool_and_phase() {
        let machine = |name: &str, phase: Option<&str>| -> Arc<Machine> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "ns", "labels": {"karpenter.sh/nodepool": "default"}},
                    "spec": {"clusterName": "c1", "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "k", "name": name}},
                    "status": phase.map_or(json!({}), |p| json!({"phase": p}))
                }))
                .expect("machine"),
            )
        };
        let machines = [
            machine("m1", Some("Running")),
            machine("m2", Some("Provisioning")),
            machine("m3", None),
            machine("m4", Some("Running")),
        ];
        let phases: Vec<(String, f64)> = machine_phases(&machines)
            .into_iter()
            .map(|(l, v)| (l[1].1.clone(), v))
            .collect();
        assert_eq!(
            phases,
            [
                ("Pending".into(), 1.0),
                ("Provisioning".into(), 1.0),
                ("Running".into(), 2.0)
            ]
        );
    }
}
