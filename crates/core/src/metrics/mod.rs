//! Prometheus metrics with Karpenter's names and labels where the meaning is the same, so
//! dashboards built for Karpenter carry over, plus `karpenter_capi_*` metrics of our own.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod controller;
pub mod gauges;
pub mod labels;
pub(crate) mod scope;

pub use gauges::ClusterGauges;
pub use scope::ScopedFamily;

pub use labels::*;

fn duration_histogram() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn reboot_histogram() -> Histogram {
    // 10 s .. 1280 s, Karpenter's
    Histogram::new(exponential_buckets(10.0, 2.0, 8))
}

fn launch_histogram() -> Histogram {
    // 0.5 s .. ~34 min
    Histogram::new(exponential_buckets(0.5, 2.0, 13))
}

/// A metric whose description is served before its first series too, so `/metrics` lists
/// everything the operator exports (the dashboard's queries are checked against it).
#[derive(Debug)]
struct Declared<M>(M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> std::fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

/// Every metric the operator exports. Cheap to clone (all handles are shared).
#[derive(Clone)]
pub struct Metrics {
    pub nodeclaims_created: ScopedFamily<CreatedLabels, Counter>,
    pub nodeclaims_terminated: ScopedFamily<TerminatedLabels, Counter>,
    pub nodeclaims_disrupted: ScopedFamily<CreatedLabels, Counter>,
    pub nodeclaims_unhealthy_disrupted: ScopedFamily<UnhealthyLabels, Counter>,
    pub nodeclaims_drifted: ScopedFamily<TypeLabels, Counter>,
    pub disruption_decisions: ScopedFamily<DecisionLabels, Counter>,
    pub disruption_queue_failures: ScopedFamily<DecisionLabels, Counter>,
    pub decisions_by_nodepool: ScopedFamily<PoolDecisionLabels, Counter>,
    pub terminate_first_decisions: ScopedFamily<TerminateFirstLabels, Counter>,
    pub nodes_consuming_budgets: ScopedFamily<PoolReasonLabels, Gauge>,
    pub pods_disruption_initiated: ScopedFamily<PodDisruptionLabels, Counter>,
    pub nodes_created: ScopedFamily<NodeLabels, Counter>,
    pub nodes_terminated: ScopedFamily<NodeLabels, Counter>,
    /// Reboots by result; their duration (requested to done), recovery (issued to back).
    pub reboots: ScopedFamily<ResultLabels, Counter>,
    pub reboot_duration: ScopedFamily<ResultLabels, Histogram, fn() -> Histogram>,
    pub reboot_recovery: ScopedFamily<NoLabels, Histogram, fn() -> Histogram>,
    /// Eviction API requests of drains, by response code.
    pub pods_eviction_requests: ScopedFamily<CodeLabels, Counter>,
    /// Pods evicted or deleted by drains, by the reason their Node was drained.
    pub pods_drained: ScopedFamily<DrainedLabels, Counter>,
    /// Pending pods the provisioner ignores (invalid for scheduling), as of its last batch.
    pub ignored_pods: Gauge,
    pub scheduling_duration: ScopedFamily<ControllerLabels, Histogram, fn() -> Histogram>,
    pub cloudprovider_duration: ScopedFamily<MethodLabels, Histogram, fn() -> Histogram>,
    pub cloudprovider_errors: ScopedFamily<ErrorLabels, Counter>,
    pub nodepools_usage: ScopedFamily<ResourceLabels, Gauge<f64, AtomicU64>>,
    pub nodepools_limit: ScopedFamily<ResourceLabels, Gauge<f64, AtomicU64>>,
    pub machines_launched: ScopedFamily<NodePoolLabels, Counter>,
    /// Launches put on hold by a failing preflight check, counted when each hold starts.
    pub preflight_holds: ScopedFamily<PreflightLabels, Counter>,
    pub launch_duration: ScopedFamily<NodePoolLabels, Histogram, fn() -> Histogram>,
    pub catalog_instance_types: ScopedFamily<NodeClassLabels, Gauge>,
    pub nodeoverlay_matched_offerings: ScopedFamily<OverlayLabels, Gauge>,
    /// Counted offerings: how many more Machines each can become.
    pub offering_available: ScopedFamily<OfferingLabels, Gauge>,
    /// 1 while an offering is backed off after a failed launch or has no count left.
    pub offering_unavailable: ScopedFamily<OfferingLabels, Gauge>,
    pub voluntary_disruption_eligible_nodes: ScopedFamily<EligibleLabels, Gauge>,
    pub nodepools_allowed_disruptions: ScopedFamily<PoolReasonLabels, Gauge>,
    pub consolidation_score: ScopedFamily<NodePoolLabels, Gauge<f64, AtomicU64>>,
    /// Pod creation to Ready, for pods seen Pending (a summary, as Karpenter's).
    pub pod_startup: Summary,
    /// NodeClaim creation to each launch step.
    pub launch_steps: ScopedFamily<StepLabels, Histogram, fn() -> Histogram>,
    /// The gauges computed from the caches at scrape time (attached on the leader).
    pub cluster: ClusterGauges,
    /// Hub mode: 1 while an engaged cluster's API server answers its probes, 0 after
    /// repeated failures (see `health`).
    pub cluster_connected: Family<ClusterLabels, Gauge>,
    /// Hub mode: engagements started per Cluster (the first, and one per re-engagement after
    /// its kubeconfig Secret changed).
    pub cluster_engagements: Family<ClusterLabels, Counter>,
    /// Garbage-collection passes skipped because the workload cluster was disconnected
    /// (per cluster in hub mode).
    pub gc_skipped: ScopedFamily<NoLabels, Counter>,
    /// Disruption passes skipped because the workload cluster was disconnected (per
    /// cluster in hub mode).
    pub disruption_skipped: ScopedFamily<NoLabels, Counter>,
    /// Hub mode: the opted-in Clusters by state (engaged, disconnected, waiting, not owned).
    pub clusters: Family<StateLabels, Gauge>,
}

// The per-engagement families: labelled with their cluster in hub mode (see `scope`).
#[rustfmt::skip]
crate::metrics::scope::scoped_families! {
    nodeclaims_created, nodeclaims_terminated, nodeclaims_disrupted,
    nodeclaims_unhealthy_disrupted, nodeclaims_drifted, disruption_decisions,
    disruption_queue_failures, decisions_by_nodepool, terminate_first_decisions,
    nodes_consuming_budgets,
    pods_disruption_initiated, nodes_created, nodes_terminated, reboots, reboot_duration,
    reboot_recovery, pods_eviction_requests,
    pods_drained, scheduling_duration,
    cloudprovider_duration, cloudprovider_errors, nodepools_usage, nodepools_limit,
    machines_launched, preflight_holds, launch_duration, catalog_instance_types, nodeoverlay_matched_offerings,
    voluntary_disruption_eligible_nodes, nodepools_allowed_disruptions, consolidation_score,
    launch_steps, gc_skipped, disruption_skipped,
}

impl Metrics {
    /// The cluster label this view's per-cluster series carry (see [`Metrics::scoped`]).
    pub fn scope(&self) -> Option<std::sync::Arc<str>> {
        self.nodeclaims_created.scope()
    }

    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            nodeclaims_created: ScopedFamily::default(),
            nodeclaims_terminated: ScopedFamily::default(),
            nodeclaims_disrupted: ScopedFamily::default(),
            nodeclaims_unhealthy_disrupted: ScopedFamily::default(),
            nodeclaims_drifted: ScopedFamily::default(),
            disruption_decisions: ScopedFamily::default(),
            disruption_queue_failures: ScopedFamily::default(),
            decisions_by_nodepool: ScopedFamily::default(),
            terminate_first_decisions: ScopedFamily::default(),
            nodes_consuming_budgets: ScopedFamily::default(),
            pods_disruption_initiated: ScopedFamily::default(),
            nodes_created: ScopedFamily::default(),
            nodes_terminated: ScopedFamily::default(),
            reboots: ScopedFamily::default(),
            reboot_duration: ScopedFamily::new_with_constructor(reboot_histogram),
            reboot_recovery: ScopedFamily::new_with_constructor(reboot_histogram),
            pods_eviction_requests: ScopedFamily::default(),
            pods_drained: ScopedFamily::default(),
            ignored_pods: Gauge::default(),
            scheduling_duration: ScopedFamily::new_with_constructor(duration_histogram),
            cloudprovider_duration: ScopedFamily::new_with_constructor(duration_histogram),
            cloudprovider_errors: ScopedFamily::default(),
            nodepools_usage: ScopedFamily::default(),
            nodepools_limit: ScopedFamily::default(),
            machines_launched: ScopedFamily::default(),
            preflight_holds: ScopedFamily::default(),
            launch_duration: ScopedFamily::new_with_constructor(launch_histogram),
            catalog_instance_types: ScopedFamily::default(),
            nodeoverlay_matched_offerings: ScopedFamily::default(),
            offering_available: ScopedFamily::default(),
            offering_unavailable: ScopedFamily::default(),
            voluntary_disruption_eligible_nodes: ScopedFamily::default(),
            nodepools_allowed_disruptions: ScopedFamily::default(),
            consolidation_score: ScopedFamily::default(),
            pod_startup: Summary::default(),
            launch_steps: ScopedFamily::new_with_constructor(launch_histogram),
            cluster: ClusterGauges::default(),
            cluster_connected: Family::default(),
            cluster_engagements: Family::default(),
            gc_skipped: ScopedFamily::default(),
            disruption_skipped: ScopedFamily::default(),
            clusters: Family::default(),
        };
        registry.register_collector(Box::new(m.cluster.clone()));
        let k = registry.sub_registry_with_prefix("karpenter");
        m.register_nodeclaims(k);
        m.register_disruption(k);
        m.register_nodes(k);
        m.register_scheduling(k);
        m.register_nodepools(k);
        let ours = k.sub_registry_with_prefix("capi");
        m.register_capi(ours);
        m
    }

    /// The NodeClaim lifecycle counters.
    fn register_nodeclaims(&self, r: &mut Registry) {
        r.register(
            "nodeclaims_created",
            "Number of nodeclaims created, by reason and nodepool.",
            Declared(self.nodeclaims_created.family()),
        );
        r.register(
            "nodeclaims_terminated",
            "Number of nodeclaims terminated, by nodepool, capacity type and zone.",
            Declared(self.nodeclaims_terminated.family()),
        );
        r.register(
            "nodeclaims_unhealthy_disrupted",
            "Number of nodeclaims repaired (deleted) for an unhealthy node, by the condition that failed, nodepool and capacity type.",
            Declared(self.nodeclaims_unhealthy_disrupted.family()),
        );
        r.register(
            "nodeclaims_disrupted",
            "Number of nodeclaims disrupted, by reason (empty, expired) and nodepool.",
            Declared(self.nodeclaims_disrupted.family()),
        );
        r.register(
            "nodeclaims_drifted",
            "Number of nodeclaims drifted reasons in total by Karpenter. Labeled by drift type of the nodeclaim and the owning nodepool.",
            Declared(self.nodeclaims_drifted.family()),
        );
    }

    /// Disruption decisions and rolled-back commands.
    fn register_disruption(&self, r: &mut Registry) {
        r.register(
            "voluntary_disruption_decisions",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
            Declared(self.disruption_decisions.family()),
        );
        r.register(
            "voluntary_disruption_queue_failures",
            "Surge-first disruption commands rolled back, by decision, reason and consolidation type.",
            Declared(self.disruption_queue_failures.family()),
        );
        r.register(
            "voluntary_disruption_decisions_by_nodepool",
            "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type.",
            Declared(self.decisions_by_nodepool.family()),
        );
        r.register(
            "voluntary_disruption_terminate_first_decisions",
            "Number of disruption decisions that terminated a node before launching its replacement. Labeled by nodepool, reason and the reason surge was impossible.",
            Declared(self.terminate_first_decisions.family()),
        );
        r.register(
            "nodepools_nodes_consuming_budgets",
            "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool.",
            Declared(self.nodes_consuming_budgets.family()),
        );
        r.register(
            "pods_disruption_initiated",
            "Number of pod disruptions initiated in total by Karpenter, incremented by the reschedulable pod count whenever the underlying nodeclaim is disrupted. Labeled by reason the nodeclaim was disrupted, the owning nodepool, the capacity type, the consolidation policy, and the termination mode. Pods owned by DaemonSets and mirror pods are excluded.",
            Declared(self.pods_disruption_initiated.family()),
        );
    }

    /// The Node counters.
    fn register_nodes(&self, r: &mut Registry) {
        r.register(
            "nodes_created",
            "Number of nodes registered, by nodepool and zone.",
            Declared(self.nodes_created.family()),
        );
        r.register(
            "nodes_terminated",
            "Number of nodes terminated, by nodepool and zone.",
            Declared(self.nodes_terminated.family()),
        );
        r.register(
            "nodes_reboots",
            "Node reboots repair finished, by result (succeeded, provider_error, recovery_timeout, invalid_request).",
            Declared(self.reboots.family()),
        );
        r.register(
            "nodes_reboot_duration_seconds",
            "From a reboot's request to its end, by result.",
            Declared(self.reboot_duration.family()),
        );
        r.register(
            "nodes_reboot_recovery_duration_seconds",
            "From a reboot's issue to the Node back Ready with a new boot ID.",
            Declared(self.reboot_recovery.family()),
        );
        r.register(
            "pods_eviction_requests",
            "The total number of pod eviction requests made by Karpenter, labeled by response code",
            Declared(self.pods_eviction_requests.family()),
        );
        r.register(
            "pods_drained",
            "The total number of pods drained during node termination by Karpenter, labeled by reason",
            Declared(self.pods_drained.family()),
        );
    }

    /// Scheduling simulations and cloud provider calls.
    fn register_scheduling(&self, r: &mut Registry) {
        r.register(
            "scheduler_ignored_pods_count",
            "Number of pods ignored during scheduling by Karpenter",
            self.ignored_pods.clone(),
        );
        r.register(
            "scheduler_scheduling_duration_seconds",
            "Duration of one scheduling simulation.",
            Declared(self.scheduling_duration.family()),
        );
        r.register(
            "cloudprovider_duration_seconds",
            "Duration of cloud provider (Cluster API) calls.",
            Declared(self.cloudprovider_duration.family()),
        );
        r.register(
            "cloudprovider_errors",
            "Cloud provider (Cluster API) call errors.",
            Declared(self.cloudprovider_errors.family()),
        );
    }

    /// Per NodePool: usage, limits, what disruption may take, scores.
    fn register_nodepools(&self, r: &mut Registry) {
        r.register(
            "nodepools_usage",
            "Resources used by each nodepool's nodes.",
            Declared(self.nodepools_usage.family()),
        );
        r.register(
            "nodepools_limit",
            "Resource limits of each nodepool.",
            Declared(self.nodepools_limit.family()),
        );
        r.register(
            "voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
            Declared(self.voluntary_disruption_eligible_nodes.family()),
        );
        r.register(
            "nodepools_allowed_disruptions",
            "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be deleted at any point.",
            Declared(self.nodepools_allowed_disruptions.family()),
        );
        r.register(
            "consolidation_score",
            "The Balanced consolidation policy's last score of a move, by nodepool.",
            Declared(self.consolidation_score.family()),
        );
    }

    /// Our own (`karpenter_capi_*`): launches and catalogs.
    fn register_capi(&self, r: &mut Registry) {
        r.register(
            "machines_launched",
            "Cluster API Machines created for nodeclaims.",
            Declared(self.machines_launched.family()),
        );
        r.register(
            "preflight_holds",
            "Machine launches put on hold by a failing preflight check (counted when a nodeclaim's hold starts), by check and nodepool.",
            Declared(self.preflight_holds.family()),
        );
        r.register(
            "launch_duration_seconds",
            "Time from nodeclaim creation to its Machine having a providerID.",
            Declared(self.launch_duration.family()),
        );
        r.register(
            "catalog_instance_types",
            "Instance types in each nodeclass's catalog.",
            Declared(self.catalog_instance_types.family()),
        );
        r.register(
            "nodeoverlay_matched_offerings",
            "Offerings each nodeoverlay selects, over every nodeclass's catalog.",
            Declared(self.nodeoverlay_matched_offerings.family()),
        );
        r.register(
            "offering_available",
            "Machines each counted offering can still become (the smallest of its template's counts).",
            Declared(self.offering_available.family()),
        );
        r.register(
            "offering_unavailable",
            "1 while an offering is backed off after a failed launch or has no count left.",
            Declared(self.offering_unavailable.family()),
        );
        r.register(
            "launch_step_duration_seconds",
            "Time from a nodeclaim's creation to each launch step: machine_created (its Cluster API Machine exists), launched (the Machine has a providerID), registered (its Node joined), initialized.",
            Declared(self.launch_steps.family()),
        );
        // Hub mode only: no series (nor description) in single-cluster mode.
        r.register(
            "cluster_connected",
            "Hub mode: whether an engaged workload cluster's API server answers (1) or failed its last probes (0); while 0, nothing is disrupted, garbage-collected or deleted for it.",
            self.cluster_connected.clone(),
        );
        r.register(
            "garbage_collection_skipped",
            "Garbage-collection passes skipped because the workload cluster was disconnected.",
            Declared(self.gc_skipped.family()),
        );
        r.register(
            "disruption_skipped",
            "Disruption passes skipped because the workload cluster was disconnected.",
            Declared(self.disruption_skipped.family()),
        );
        r.register(
            "cluster_engagements",
            "Hub mode: engagements started for a Cluster (re-engagements after its kubeconfig Secret changed included).",
            self.cluster_engagements.clone(),
        );
        r.register(
            "clusters",
            "Hub mode: the opted-in Clusters this replica sees, by state: engaged, disconnected, connecting, waiting-lease (another replica still holds its fence Lease), waiting-credentials, not-owned (another replica's), ineligible (paused, not initialized, filtered out).",
            self.clusters.clone(),
        );
    }
    /// The summaries `/metrics` serves besides the registry (prometheus-client has no
    /// summary type): name, help, summary.
    pub fn summaries(&self) -> Vec<(&'static str, &'static str, Summary)> {
        vec![(
            "karpenter_pods_startup_duration_seconds",
            "The time from pod creation until the pod is running.",
            self.pod_startup.clone(),
        )]
    }
}

/// The seam's calls (`cloudprovider::metered::Metered`): `karpenter_cloudprovider_duration_seconds`
/// and `karpenter_cloudprovider_errors_total` by controller (the calling loop:
/// [`controller::current`]), method and provider.
impl cloudprovider::metered::CallRecorder for Metrics {
    fn record(
        &self,
        method: &'static str,
        provider: &'static str,
        took: Duration,
        error: Option<&cloudprovider::Error>,
    ) {
        self.cloudprovider_duration
            .get_or_create(&MethodLabels {
                controller: controller::current().into(),
                method: method.into(),
                provider: provider.into(),
            })
            .observe(took.as_secs_f64());
        if let Some(e) = error {
            self.cloudprovider_errors
                .get_or_create(&ErrorLabels {
                    controller: controller::current().into(),
                    method: method.into(),
                    provider: provider.into(),
                    error: e.metric_label().into(),
                })
                .inc();
        }
    }
}

/// How long an observation counts towards a summary's quantiles (Prometheus' default).
const SUMMARY_MAX_AGE: Duration = Duration::from_secs(600);
/// At most this many observations are kept for the quantiles (the oldest go first).
const SUMMARY_MAX_SAMPLES: usize = 2048;
/// The quantiles Karpenter's summaries export.
const SUMMARY_QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

/// A Prometheus summary: quantiles over the last ten minutes of observations (bounded),
/// sum and count over all time. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct Summary(Arc<Mutex<SummaryState>>);

#[derive(Debug, Default)]
struct SummaryState {
    window: VecDeque<(Instant, f64)>,
    sum: f64,
    count: u64,
}

impl Summary {
    pub fn observe(&self, v: f64) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if s.window.len() >= SUMMARY_MAX_SAMPLES {
            s.window.pop_front();
        }
        s.window.push_back((Instant::now(), v));
        s.sum += v;
        s.count += 1;
    }

    /// `(quantile, value)` for each exported quantile (NaN without recent observations),
    /// the sum and the count.
    pub fn snapshot(&self) -> (Vec<(f64, f64)>, f64, u64) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        while s
            .window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > SUMMARY_MAX_AGE)
        {
            s.window.pop_front();
        }
        let mut values: Vec<f64> = s.window.iter().map(|(_, v)| *v).collect();
        values.sort_by(f64::total_cmp);
        let quantiles = SUMMARY_QUANTILES
            .iter()
            .map(|q| (*q, nearest_rank(&values, *q)))
            .collect();
        (quantiles, s.sum, s.count)
    }

    /// The summary in the OpenMetrics text format.
    fn encode(&self, name: &str, help: &str, out: &mut String) -> std::fmt::Result {
        let (quantiles, sum, count) = self.snapshot();
        writeln!(out, "# HELP {name} {help}")?;
        writeln!(out, "# TYPE {name} summary")?;
        for (q, v) in quantiles {
            writeln!(out, "{name}{{quantile=\"{q}\"}} {}", float(v))?;
        }
        writeln!(out, "{name}_sum {}", float(sum))?;
        writeln!(out, "{name}_count {count}")
    }
}

/// The value at quantile `q` of sorted `values` (nearest rank); NaN when empty.
fn nearest_rank(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let rank = (q * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

/// A float as OpenMetrics writes it.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// Renders the registry in the Prometheus text format.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// What `/metrics` serves: the registry and the summaries of [`Metrics::summaries`].
#[derive(Clone)]
pub struct Exposition {
    registry: Arc<Registry>,
    summaries: Vec<(&'static str, &'static str, Summary)>,
}

impl Exposition {
    pub fn new(registry: Registry, metrics: &Metrics) -> Self {
        Exposition {
            registry: Arc::new(registry),
            summaries: metrics.summaries(),
        }
    }

    /// The OpenMetrics text of everything.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &self.registry)?;
        for (name, help, summary) in &self.summaries {
            summary.encode(name, help, &mut out)?;
        }
        prometheus_client::encoding::text::encode_eof(&mut out)?;
        Ok(out)
    }
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
                nodepool: "default".into(),
            })
            .inc();
        let text = encode(&registry).expect("encodes");
        // Described before their first series: the dashboard finds them before any decision.
        for family in [
            "# TYPE karpenter_voluntary_disruption_decisions counter",
            "# TYPE karpenter_voluntary_disruption_eligible_nodes gauge",
            "# TYPE karpenter_nodepools_allowed_disruptions gauge",
            "# TYPE karpenter_capi_launch_step_duration_seconds histogram",
        ] {
            assert!(text.contains(family), "{family}: {text}");
        }
        assert!(
            text.contains(
                r#"karpenter_nodeclaims_drifted_total{type="NodeClassDrifted",nodepool="default"} 1"#
            ),
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
    #[test]
    fn summaries_export_quantiles_sum_and_count() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        let exposition = Exposition::new(registry, &m);
        let empty = exposition.encode().expect("encodes");
        assert!(
            empty.contains("karpenter_pods_startup_duration_seconds{quantile=\"0.5\"} NaN\n"),
            "{empty}"
        );
        for v in 1..=10 {
            m.pod_startup.observe(f64::from(v));
        }
        let text = exposition.encode().expect("encodes");
        for line in [
            "# TYPE karpenter_pods_startup_duration_seconds summary",
            "karpenter_pods_startup_duration_seconds{quantile=\"0\"} 1.0",
            "karpenter_pods_startup_duration_seconds{quantile=\"0.5\"} 5.0",
            "karpenter_pods_startup_duration_seconds{quantile=\"0.9\"} 9.0",
            "karpenter_pods_startup_duration_seconds{quantile=\"0.99\"} 10.0",
            "karpenter_pods_startup_duration_seconds_sum 55.0",
            "karpenter_pods_startup_duration_seconds_count 10",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line}: {text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
