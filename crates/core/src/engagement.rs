//! One engagement per workload cluster: everything the loops of one workload cluster need —
//! the provider seam, the shared caches' stores, the cluster state — built by one function
//! for any provider ([`Engagement::build`], given the provider's [`ProviderParts`]) and run
//! by one ([`Engagement::run`]), so that a process could hold several.
//! `runtime::run_operator` builds the process-wide pieces (clients, caches, leadership) and
//! one engagement; the Cluster API provider's parts come from
//! `cloudprovider::clusterapi::wiring`.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use futures::future::BoxFuture;

use crate::cache::Caches;
use crate::events::{Recorder, Reporter};
use crate::metrics::Metrics;
use crate::nodeclaim::context::{Ctx, Settings, Shared};
use crate::nodeclaim::lifecycle;
use crate::nodepool_status::RegistrationFailures as Failures;
use crate::state::ClusterState;
use crate::tasks::Tasks;

/// The cluster an engagement serves in a hub (for Cluster API, its `Cluster`), as
/// `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The loops' timing knobs (from the command line).
#[derive(Clone, Debug)]
pub struct Knobs {
    pub node_repair_after: Duration,
    /// The user's repair policies for the provider (`None`: the provider's own).
    pub repair_policies: Option<Arc<Vec<cloudprovider::RepairPolicy>>>,
    pub disruption_timeout: Duration,
    /// How long a disruption move is validated before it is taken.
    pub disruption_validation: Duration,
    /// How often the disruption loop runs a pass.
    pub disruption_tick: Duration,
    /// How often a NodeClaim's `Consolidatable` message alone may be rewritten.
    pub disruption_message_refresh: Duration,
    pub batch_idle: Duration,
    pub batch_max: Duration,
    pub gc_interval: Duration,
    pub gc_grace: Duration,
    /// How long a template's reported `available-count` is trusted.
    pub count_staleness: Duration,
    /// `--min-values-policy`.
    pub min_values_policy: scheduling::MinValuesPolicy,
}

/// What an engagement is built from: the clients of its workload cluster and of the
/// management cluster, the metrics, the knobs, and in hub mode the Cluster it serves and
/// whether that cluster answers.
#[derive(Clone)]
pub struct Sources {
    pub workload: kube::Client,
    pub management: kube::Client,
    pub metrics: Metrics,
    pub knobs: Knobs,
    /// The engaged Cluster (hub mode): NodeClasses naming another are refused. `None`:
    /// single-cluster mode, any Cluster.
    pub engaged: Option<ClusterKey>,
    /// Whether the workload cluster answers (always, in single-cluster mode).
    pub connection: crate::health::Connection,
}

/// A provider as an engagement takes it: the seam, how NodePool status reads the readiness
/// of its NodeClasses, what the provisioner hears of its offerings' availability changing,
/// and its own loops (they get the engagement's stop signal).
pub struct ProviderParts {
    pub provider: Arc<dyn cloudprovider::CloudProvider>,
    pub nodeclasses: crate::nodepool_status::NodeClassLookup,
    pub offering_changes: crate::provisioning::OfferingChanges,
    pub loops: Vec<ProviderLoop>,
    /// The provider's own gauges of the cluster, if any.
    pub gauges: Option<Arc<dyn crate::metrics::gauges::Gauges>>,
}

/// Builds the parts of a provider other than Cluster API (`run --provider`), given the
/// tasks its own watches run on, the workload cluster's client and the engagement's event
/// recorder.
#[derive(Clone)]
pub struct ProviderFactory {
    pub name: &'static str,
    #[allow(clippy::type_complexity)]
    pub build: Arc<
        dyn Fn(
                &mut crate::tasks::Tasks,
                &Client,
                &crate::cache::Caches,
                crate::events::Recorder,
            ) -> ProviderParts
            + Send
            + Sync,
    >,
}

impl std::fmt::Debug for ProviderFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProviderFactory({})", self.name)
    }
}

/// A provider's loop: given the engagement's stop signal (true: stop), the loop.
pub type ProviderLoop = Box<dyn FnOnce(watch::Receiver<bool>) -> BoxFuture<'static, ()> + Send>;

/// A future that resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The loops of one workload cluster, ready to run.
pub struct Engagement {
    lifecycle: Ctx,
    triggers: lifecycle::Triggers,
    provisioner: crate::provisioning::Provisioner,
    static_pools: crate::static_pools::StaticPools,
    disruption: crate::disruption::Disruption,
    nodepool_status: crate::nodepool_status::NodePoolStatus,
    /// The provider's own loops.
    provider_loops: Vec<ProviderLoop>,
    /// The NodeOverlay status loop and what triggers it (the `NodeOverlay` feature gate).
    overlay_status: Option<OverlayLoop>,
    pods: crate::cache::Cache<k8s_openapi::api::core::v1::Pod>,
    nodeclaims: kube::runtime::reflector::Store<api::NodeClaim>,
    nodepools: kube::runtime::reflector::Store<api::NodePool>,
    gc_interval: Duration,
    gc_grace: Duration,
}

impl Engagement {
    /// Builds the engagement of the workload cluster `ctx` serves, over its synced caches,
    /// for the provider `provider` makes (given the engagement's event recorder): the one
    /// function every provider's engagement is built by.
    pub fn build(
        ctx: &Sources,
        caches: &Caches,
        identity: String,
        provider: impl FnOnce(Recorder) -> ProviderParts,
    ) -> Engagement {
        // The one cluster state every reader of this workload cluster shares.
        let state = ClusterState::new(crate::state::Sources::of(caches));
        let reporter = Reporter {
            controller: "karpenter".into(),
            instance: Some(identity),
        };
        let recorder = Recorder::new(ctx.workload.clone(), reporter);
        let parts = provider(recorder.clone());
        let registration_failures: Arc<Failures> = Arc::default();
        let (seam, overlay_status) = overlaid(ctx, caches, parts.provider);
        let lifecycle_ctx = Ctx {
            shared: shared(ctx, caches, recorder, registration_failures.clone()),
            // Every call of the seam timed and its errors counted, for any provider.
            provider: Arc::new(cloudprovider::metered::Metered::new(
                seam,
                ctx.metrics.clone(),
            )),
        };
        let nodepool_status = crate::nodepool_status::NodePoolStatus {
            client: ctx.workload.clone(),
            metrics: ctx.metrics.clone(),
            state: state.clone(),
            provider: lifecycle_ctx.provider.clone(),
            nodeclasses: parts.nodeclasses,
            registration_failures,
            expectations: Default::default(),
        };
        let disruption = disruption(
            ctx,
            caches,
            state.clone(),
            lifecycle_ctx.recorder.clone(),
            lifecycle_ctx.provider.clone(),
        );
        let provisioner = provisioner(
            ctx,
            state.clone(),
            lifecycle_ctx.recorder.clone(),
            lifecycle_ctx.provider.clone(),
            parts.offering_changes,
        );
        let static_pools = static_pools(ctx, &provisioner);
        let triggers = triggers(caches);
        attach_gauges(ctx, state, lifecycle_ctx.provider.clone(), parts.gauges);
        Engagement {
            provider_loops: parts.loops,
            overlay_status,
            gc_interval: ctx.knobs.gc_interval,
            gc_grace: ctx.knobs.gc_grace,
            lifecycle: lifecycle_ctx,
            triggers,
            provisioner,
            static_pools,
            disruption,
            nodepool_status,
            pods: caches.pods.clone(),
            nodeclaims: caches.nodeclaims.store(),
            nodepools: caches.nodepools.store(),
        }
    }

    /// Spawns the loops (they stop when `stop` turns true) and garbage collection (aborted
    /// by the caller through the returned handle).
    pub fn run(self, tasks: &mut Tasks, stop: &watch::Receiver<bool>) -> (Tasks, AbortHandle) {
        use crate::metrics::controller::run_as;
        let mut loops = Tasks::default();
        loops.spawn(run_as(
            lifecycle::LIFECYCLE,
            lifecycle::run(self.lifecycle.clone(), self.triggers, stopped(stop.clone())),
        ));
        loops.spawn(run_as(
            "provisioner",
            crate::provisioning::run(self.provisioner, stopped(stop.clone())),
        ));
        loops.spawn(run_as(
            "static.provisioning",
            crate::static_pools::run(self.static_pools, stopped(stop.clone())),
        ));
        let claim_writes = self.disruption.claim_writes.clone();
        loops.spawn(run_as(
            "disruption",
            crate::disruption::run(self.disruption, stopped(stop.clone())),
        ));
        loops.spawn(crate::disruption::podevents::run(
            self.lifecycle.workload.clone(),
            self.pods,
            self.nodeclaims,
            self.nodepools,
            claim_writes,
            stopped(stop.clone()),
        ));
        loops.spawn(run_as(
            "nodepool.readiness",
            crate::nodepool_status::run(self.nodepool_status, stopped(stop.clone())),
        ));
        if let Some((status, overlays, nodepools)) = self.overlay_status {
            loops.spawn(run_as(
                "nodeoverlay.status",
                crate::overlay_status::run(status, overlays, nodepools, stopped(stop.clone())),
            ));
        }
        for provider_loop in self.provider_loops {
            loops.spawn(provider_loop(stop.clone()));
        }
        let gc = tasks.spawn(run_as(
            "nodeclaim.garbagecollection",
            crate::garbagecollection::run(self.lifecycle, self.gc_interval, self.gc_grace),
        ));
        (loops, gc)
    }
}

/// The NodeOverlay status loop's context, the overlays and the NodePools.
type OverlayLoop = (
    crate::overlay_status::OverlayStatus,
    crate::cache::Cache<api::NodeOverlay>,
    crate::cache::Cache<api::NodePool>,
);

/// The seam `provider` is used through: with the NodeOverlays applied to its instance types
/// when the `NodeOverlay` feature gate is on (the caches watch them), for any provider; and
/// then the NodeOverlay status loop, reporting that decorator's evaluation.
fn overlaid(
    ctx: &Sources,
    caches: &Caches,
    provider: Arc<dyn cloudprovider::CloudProvider>,
) -> (Arc<dyn cloudprovider::CloudProvider>, Option<OverlayLoop>) {
    let (Some(store), Some(overlays)) = (&caches.overlays, &caches.nodeoverlays) else {
        return (provider, None);
    };
    let overlaid = Arc::new(cloudprovider::overlay::Overlaid::new(
        provider,
        store.clone(),
    ));
    let status = crate::overlay_status::OverlayStatus {
        client: ctx.workload.clone(),
        metrics: ctx.metrics.clone(),
        overlaid: overlaid.clone(),
        expectations: Arc::default(),
        gauged: Arc::default(),
    };
    (
        overlaid,
        Some((status, overlays.clone(), caches.nodepools.clone())),
    )
}

/// The scrape-time gauges: the leader's, as Karpenter's; in a hub, every engaged cluster's,
/// under its `cluster` label (detached when it is disengaged).
fn attach_gauges(
    ctx: &Sources,
    state: ClusterState,
    provider: Arc<dyn cloudprovider::CloudProvider>,
    gauges: Option<Arc<dyn crate::metrics::gauges::Gauges>>,
) {
    let key = ctx
        .engaged
        .as_ref()
        .map(|k| k.to_string())
        .unwrap_or_default();
    ctx.metrics.cluster.attach(
        &key,
        ctx.metrics.scope(),
        std::iter::once(
            Arc::new(crate::cluster_metrics::CoreGauges { state, provider })
                as Arc<dyn crate::metrics::gauges::Gauges>,
        )
        .chain(gauges)
        .collect(),
    );
}

/// What wakes the NodeClaim lifecycle: its caches' changes.
fn triggers(caches: &Caches) -> lifecycle::Triggers {
    lifecycle::Triggers {
        nodeclaims: caches.nodeclaims.clone(),
        nodes: caches.nodes.clone(),
        nodepools: caches.nodepools.clone(),
        slices: caches.dra.slices.clone(),
    }
}

/// What the lifecycle shares, over the engagement's caches.
fn shared(
    ctx: &Sources,
    caches: &Caches,
    recorder: Recorder,
    registration_failures: Arc<crate::nodepool_status::RegistrationFailures>,
) -> Shared {
    Shared {
        workload: ctx.workload.clone(),
        recorder,
        metrics: ctx.metrics.clone(),
        nodes: caches.nodes.clone(),
        pods: caches.pods.store(),
        nodeclaims: caches.nodeclaims.store(),
        nodepools: caches.nodepools.store(),
        slices: caches.dra.slices.store(),
        settings: Settings {
            node_repair_after: ctx.knobs.node_repair_after,
            ..Settings::default()
        },
        expectations: Arc::default(),
        backoff: Arc::default(),
        registration_failures,
        repairs: Arc::default(),
        repair_policies: Arc::default(),
        reboots: Arc::default(),
        connection: ctx.connection.clone(),
    }
}

/// The provisioner of the engagement.
fn provisioner(
    ctx: &Sources,
    state: ClusterState,
    recorder: Recorder,
    provider: Arc<dyn cloudprovider::CloudProvider>,
    offerings: crate::provisioning::OfferingChanges,
) -> crate::provisioning::Provisioner {
    crate::provisioning::Provisioner {
        client: ctx.workload.clone(),
        recorder,
        metrics: ctx.metrics.clone(),
        state,
        provider,
        offerings,
        min_values_policy: ctx.knobs.min_values_policy,
        batch_idle: ctx.knobs.batch_idle,
        batch_max: ctx.knobs.batch_max,
    }
}

/// The static NodePools' loop, over what the provisioner reads.
fn static_pools(
    ctx: &Sources,
    provisioner: &crate::provisioning::Provisioner,
) -> crate::static_pools::StaticPools {
    crate::static_pools::StaticPools {
        client: ctx.workload.clone(),
        recorder: provisioner.recorder.clone(),
        metrics: ctx.metrics.clone(),
        state: provisioner.state.clone(),
        provider: provisioner.provider.clone(),
        in_flight: Arc::default(),
        expectations: Arc::default(),
        connection: ctx.connection.clone(),
    }
}

/// The disruption loop's context.
fn disruption(
    ctx: &Sources,
    caches: &Caches,
    state: ClusterState,
    recorder: Recorder,
    provider: Arc<dyn cloudprovider::CloudProvider>,
) -> crate::disruption::Disruption {
    crate::disruption::Disruption {
        client: ctx.workload.clone(),
        recorder,
        metrics: ctx.metrics.clone(),
        state,
        nodeclaims: caches.nodeclaims.store(),
        nodes: caches.nodes.store(),
        provider,
        command_timeout: ctx.knobs.disruption_timeout,
        validation: ctx.knobs.disruption_validation,
        tick: ctx.knobs.disruption_tick,
        message_refresh: ctx.knobs.disruption_message_refresh,
        connection: ctx.connection.clone(),
        claim_writes: Arc::default(),
    }
}
