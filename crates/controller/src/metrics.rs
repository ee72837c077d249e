//! Prometheus metrics with Karpenter's names and labels where the meaning is the same, so
//! dashboards built for Karpenter carry over, plus `karpenter_capi_*` metrics of our own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodePoolLabels {
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete` or `replace`.
    pub decision: String,
    /// `drifted`, `empty`, `underutilized`.
    pub reason: String,
    /// `single`, `multi`, `empty`, or empty for drift.
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminatedLabels {
    pub nodepool: String,
    pub capacity_type: String,
}

/// Karpenter's labels of `karpenter_nodeclaims_unhealthy_disrupted_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnhealthyLabels {
    pub condition: String,
    pub nodepool: String,
    pub capacity_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub nodepool: String,
    pub resource_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeClassLabels {
    pub nodeclass: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EligibleLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolReasonLabels {
    pub nodepool: String,
    pub reason: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn launch_histogram() -> Histogram {
    // 0.5 s .. ~34 min
    Histogram::new(exponential_buckets(0.5, 2.0, 13))
}

/// Every metric the operator exports. Cheap to clone (all handles are shared).
#[derive(Clone)]
pub struct Metrics {
    pub nodeclaims_created: Family<CreatedLabels, Counter>,
    pub nodeclaims_terminated: Family<TerminatedLabels, Counter>,
    pub nodeclaims_disrupted: Family<CreatedLabels, Counter>,
    pub nodeclaims_unhealthy_disrupted: Family<UnhealthyLabels, Counter>,
    pub nodeclaims_drifted: Family<TypeLabels, Counter>,
    pub disruption_decisions: Family<DecisionLabels, Counter>,
    pub disruption_queue_failures: Family<DecisionLabels, Counter>,
    pub nodes_created: Family<NodePoolLabels, Counter>,
    pub nodes_terminated: Family<NodePoolLabels, Counter>,
    pub scheduling_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    pub cloudprovider_duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
    pub cloudprovider_errors: Family<ErrorLabels, Counter>,
    pub nodepools_usage: Family<ResourceLabels, Gauge<f64, AtomicU64>>,
    pub nodepools_limit: Family<ResourceLabels, Gauge<f64, AtomicU64>>,
    pub machines_launched: Family<NodePoolLabels, Counter>,
    pub launch_duration: Family<NodePoolLabels, Histogram, fn() -> Histogram>,
    pub catalog_instance_types: Family<NodeClassLabels, Gauge>,
    pub voluntary_disruption_eligible_nodes: Family<EligibleLabels, Gauge>,
    pub nodepools_allowed_disruptions: Family<PoolReasonLabels, Gauge>,
    pub consolidation_score: Family<NodePoolLabels, Gauge<f64, AtomicU64>>,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            nodeclaims_unhealthy_disrupted: Family::default(),
            nodeclaims_drifted: Family::default(),
            disruption_decisions: Family::default(),
            disruption_queue_failures: Family::default(),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            scheduling_duration: Family::new_with_constructor(duration_histogram),
            cloudprovider_duration: Family::new_with_constructor(duration_histogram),
            cloudprovider_errors: Family::default(),
            nodepools_usage: Family::default(),
            nodepools_limit: Family::default(),
            machines_launched: Family::default(),
            launch_duration: Family::new_with_constructor(launch_histogram),
            catalog_instance_types: Family::default(),
            voluntary_disruption_eligible_nodes: Family::default(),
            nodepools_allowed_disruptions: Family::default(),
            consolidation_score: Family::default(),
        };
        let k = registry.sub_registry_with_prefix("karpenter");
        k.register(
            "nodeclaims_created",
            "Number of nodeclaims created, by reason and nodepool.",
            m.nodeclaims_created.clone(),
        );
        k.register(
            "nodeclaims_terminated",
            "Number of nodeclaims terminated, by nodepool and capacity type.",
            m.nodeclaims_terminated.clone(),
        );
        k.register(
            "nodeclaims_unhealthy_disrupted",
            "Number of nodeclaims repaired (deleted) for an unhealthy node, by the condition that failed, nodepool and capacity type.",
            m.nodeclaims_unhealthy_disrupted.clone(),
        );
        k.register(
            "nodeclaims_disrupted",
            "Number of nodeclaims disrupted, by reason (empty, expired) and nodepool.",
            m.nodeclaims_disrupted.clone(),
        );
        k.register(
            "nodeclaims_drifted",
            "Number of nodeclaims found drifted, by drift type (the Drifted reason).",
            m.nodeclaims_drifted.clone(),
        );
        k.register(
            "voluntary_disruption_decisions",
            "Disruption decisions started, by decision, reason and consolidation type.",
            m.disruption_decisions.clone(),
        );
        k.register(
            "voluntary_disruption_queue_failures",
            "Surge-first disruption commands rolled back, by decision, reason and consolidation type.",
            m.disruption_queue_failures.clone(),
        );
        k.register(
            "nodes_created",
            "Number of nodes registered, by nodepool.",
            m.nodes_created.clone(),
        );
        k.register(
            "nodes_terminated",
            "Number of nodes terminated, by nodepool.",
            m.nodes_terminated.clone(),
        );
        k.register(
            "scheduler_scheduling_duration_seconds",
            "Duration of one scheduling simulation.",
            m.scheduling_duration.clone(),
        );
        k.register(
            "cloudprovider_duration_seconds",
            "Duration of cloud provider (Cluster API) calls.",
            m.cloudprovider_duration.clone(),
        );
        k.register(
            "cloudprovider_errors",
            "Cloud provider (Cluster API) call errors.",
            m.cloudprovider_errors.clone(),
        );
        k.register(
            "nodepools_usage",
            "Resources used by each nodepool's nodes.",
            m.nodepools_usage.clone(),
        );
        k.register(
            "nodepools_limit",
            "Resource limits of each nodepool.",
            m.nodepools_limit.clone(),
        );
        k.register(
            "voluntary_disruption_eligible_nodes",
            "Nodes that are part of a disruption move now, by reason.",
            m.voluntary_disruption_eligible_nodes.clone(),
        );
        k.register(
            "nodepools_allowed_disruptions",
            "Disruptions each nodepool's budgets allow now, by reason.",
            m.nodepools_allowed_disruptions.clone(),
        );
        k.register(
            "consolidation_score",
            "The Balanced consolidation policy's last score of a move, by nodepool.",
            m.consolidation_score.clone(),
        );
        let ours = k.sub_registry_with_prefix("capi");
        ours.register(
            "machines_launched",
            "Cluster API Machines created for nodeclaims.",
            m.machines_launched.clone(),
        );
        ours.register(
            "launch_duration_seconds",
            "Time from nodeclaim creation to its Machine having a providerID.",
            m.launch_duration.clone(),
        );
        ours.register(
            "catalog_instance_types",
            "Instance types in each nodeclass's catalog.",
            m.catalog_instance_types.clone(),
        );
        m
    }
}

/// Renders the registry in the Prometheus text format.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karpenter_names_are_exported() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: "provisioning".into(),
                nodepool: "default".into(),
            })
            .inc();
        m.machines_launched
            .get_or_create(&NodePoolLabels {
                nodepool: "default".into(),
            })
            .inc_by(2);
        m.scheduling_duration
            .get_or_create(&ControllerLabels {
                controller: "provisioner".into(),
            })
            .observe(0.02);
        m.nodeclaims_drifted
            .get_or_create(&TypeLabels {
                r#type: "NodeClassDrifted".into(),
            })
            .inc();
        let text = encode(&registry).expect("encodes");
        assert!(
            text.contains(r#"karpenter_nodeclaims_drifted_total{type="NodeClassDrifted"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"karpenter_nodeclaims_created_total{reason="provisioning",nodepool="default"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"karpenter_capi_machines_launched_total{nodepool="default"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("karpenter_scheduler_scheduling_duration_seconds_count{controller=\"provisioner\"} 1"),
            "{text}"
        );
    }
}
