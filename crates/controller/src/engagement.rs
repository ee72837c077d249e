//! One engagement per workload cluster: everything the loops of one workload cluster need —
//! the provider seam and its context, the shared caches' stores, the catalogs, the fencing
//! id — built by one function ([`Engagement::build`]) and run by one ([`Engagement::run`]), so
//! that a process could hold several. `runtime::run_operator` builds the management-side
//! pieces (clients, caches, the template index, leadership) and one engagement.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::cache::Caches;
use crate::catalogs::IndexCatalogs;
use crate::cloudprovider::clusterapi::context::{Context, Settings as ProviderSettings};
use crate::cloudprovider::clusterapi::availability::unavailable::UnavailableOfferings as Unavailable;
use crate::cloudprovider::clusterapi::nodeclass_status::{self, StatusCtx};
use crate::cloudprovider::clusterapi::{ClusterApi, Watches};
use crate::events::{Recorder, Reporter};
use crate::metrics::Metrics;
use crate::nodeclaim::context::{Ctx, Settings, Shared};
use crate::nodeclaim::lifecycle;
use crate::nodepool_status::RegistrationFailures as Failures;
use crate::state::ClusterState;
use crate::tasks::Tasks;

/// The loops' timing knobs (from the command line).
#[derive(Clone, Debug)]
pub struct Knobs {
    pub node_repair_after: Duration,
    pub disruption_timeout: Duration,
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
    pub engaged: Option<crate::catalogs::ClusterKey>,
    /// Whether the workload cluster answers (always, in single-cluster mode).
    pub connection: crate::health::Connection,
}

/// The loops of one workload cluster, ready to run.
pub(crate) struct Engagement {
    lifecycle: Ctx,
    triggers: lifecycle::Triggers,
    provisioner: crate::provisioning::Provisioner,
    static_pools: crate::static_pools::StaticPools,
    disruption: crate::disruption::Disruption,
    nodepool_status: crate::nodepool_status::NodePoolStatus,
    latency: crate::latency::Latency,
    status: StatusCtx,
    /// The NodeOverlay status loop and the caches that trigger it (feature gate on).
    overlay_status: Option<OverlayLoop>,
    pods: crate::cache::Cache<k8s_openapi::api::core::v1::Pod>,
    nodeclasses: crate::cache::Cache<api::ClusterAPINodeClass>,
    nodeclaims: kube::runtime::reflector::Store<api::NodeClaim>,
    nodepools: kube::runtime::reflector::Store<api::NodePool>,
    gc_interval: Duration,
    gc_grace: Duration,
}

impl Engagement {
    /// Builds the engagement of the workload cluster `ctx` serves, over its synced caches.
    pub(crate) fn build(
        ctx: &Sources,
        caches: &Caches,
        index: templates::watch::TemplateIndex,
        cluster_id: String,
        identity: String,
    ) -> Engagement {
        // The one cluster state every reader of this workload cluster shares.
        let state = ClusterState::new(crate::state::Sources::of(caches));
        let catalogs = catalogs(ctx, caches, index);
        let inventory = crate::cloudprovider::clusterapi::availability::hosts::Inventory::new(
            crate::cloudprovider::clusterapi::availability::hosts::Hosts::new(
                ctx.management.clone(),
            ),
            caches.nodeclasses.store(),
            Arc::new(catalogs.clone()),
        );
        let reporter = Reporter {
            controller: "karpenter".into(),
            instance: Some(identity),
        };
        let recorder = Recorder::new(ctx.workload.clone(), reporter);
        let unavailable: Arc<Unavailable> = Arc::default();
        let registration_failures: Arc<Failures> = Arc::default();
        let provider = ClusterApi::new(
            provider_context(
                ctx,
                caches,
                recorder.clone(),
                Arc::new(catalogs.clone()),
                (unavailable.clone(), inventory.clone()),
                cluster_id,
            ),
            Some(watches(caches, &catalogs.index)),
        );
        let lifecycle_ctx = Ctx {
            shared: shared(ctx, caches, recorder, registration_failures.clone()),
            provider: Arc::new(provider),
        };
        let nodepool_status = crate::nodepool_status::NodePoolStatus {
            client: ctx.workload.clone(),
            metrics: ctx.metrics.clone(),
            state: state.clone(),
            provider: lifecycle_ctx.provider.clone(),
            nodeclasses: crate::cloudprovider::clusterapi::nodeclass::readiness_lookup(
                caches.nodeclasses.store(),
            ),
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
            crate::cloudprovider::clusterapi::availability::changes(inventory.clone(), unavailable.clone()),
        );
        let static_pools = static_pools(ctx, &provisioner);
        let lifecycle_ctx_recorder = lifecycle_ctx.recorder.clone();
        let triggers = triggers(caches);
        attach_gauges(ctx, caches, state, lifecycle_ctx.provider.clone());
        let latency = crate::latency::Latency {
            metrics: ctx.metrics.clone(),
            pods: caches.pods.clone(),
            nodeclaims: caches.nodeclaims.clone(),
            machines: caches.machines.clone(),
        };
        let overlay_status = overlay_loop(ctx, caches, &catalogs);
        Engagement {
            overlay_status,
            status: status(
                ctx,
                caches,
                catalogs,
                lifecycle_ctx_recorder,
                (unavailable.clone(), inventory),
            ),
            gc_interval: ctx.knobs.gc_interval,
            gc_grace: ctx.knobs.gc_grace,
            lifecycle: lifecycle_ctx,
            triggers,
            provisioner,
            static_pools,
            disruption,
            nodepool_status,
            latency,
            pods: caches.pods.clone(),
            nodeclasses: caches.nodeclasses.clone(),
            nodeclaims: caches.nodeclaims.store(),
            nodepools: caches.nodepools.store(),
        }
    }

    /// Spawns the loops (they stop when `stop` turns true) and garbage collection (aborted
    /// by the caller through the returned handle).
    pub(crate) fn run(
        self,
        tasks: &mut Tasks,
        stop: &watch::Receiver<bool>,
    ) -> (Tasks, AbortHandle) {
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let mut loops = Tasks::default();
        loops.spawn(crate::latency::run(self.latency, stopped(stop.clone())));
        loops.spawn(lifecycle::run(
            self.lifecycle.clone(),
            self.triggers,
            stopped(stop.clone()),
        ));
        loops.spawn(crate::provisioning::run(
            self.provisioner,
            stopped(stop.clone()),
        ));
        loops.spawn(crate::static_pools::run(
            self.static_pools,
            stopped(stop.clone()),
        ));
        let pod_event_writes = self.disruption.pod_event_writes.clone();
        loops.spawn(crate::disruption::run(
            self.disruption,
            stopped(stop.clone()),
        ));
        loops.spawn(crate::disruption::podevents::run(
            self.lifecycle.workload.clone(),
            self.pods,
            self.nodeclaims,
            self.nodepools,
            pod_event_writes,
            stopped(stop.clone()),
        ));
        loops.spawn(crate::nodepool_status::run(
            self.nodepool_status,
            stopped(stop.clone()),
        ));
        if let Some(o) = self.overlay_status {
            loops.spawn(crate::overlay_status::run(
                o.ctx,
                o.overlays,
                self.nodeclasses.clone(),
                o.clusters,
                stopped(stop.clone()),
            ));
        }
        loops.spawn(nodeclass_status::run(
            self.status,
            self.nodeclasses,
            stopped(stop.clone()),
        ));
        let gc = tasks.spawn(crate::garbagecollection::run(
            self.lifecycle,
            self.gc_interval,
            self.gc_grace,
        ));
        (loops, gc)
    }
}

/// The NodeClass status loop's context.
fn status(
    ctx: &Sources,
    caches: &Caches,
    catalogs: IndexCatalogs,
    recorder: Recorder,
    (unavailable, inventory): (
        Arc<Unavailable>,
        crate::cloudprovider::clusterapi::availability::hosts::Inventory,
    ),
) -> StatusCtx {
    StatusCtx {
        workload: ctx.workload.clone(),
        management: ctx.management.clone(),
        catalogs,
        nodeclaims: caches.nodeclaims.store(),
        nodes: caches.nodes.store(),
        recorder,
        offerings: crate::cloudprovider::clusterapi::offering_status::OfferingStatus {
            machines: caches.machines.store(),
            unavailable,
            inventory,
            count_staleness: ctx.knobs.count_staleness,
            metrics: ctx.metrics.clone(),
            gauged: Arc::default(),
        },
        expectations: Arc::default(),
    }
}

/// The catalogs over the caches: templates, NodeClasses, Clusters and NodeOverlays.
fn catalogs(
    ctx: &Sources,
    caches: &Caches,
    index: templates::watch::TemplateIndex,
) -> IndexCatalogs {
    IndexCatalogs {
        index,
        nodeclasses: caches.nodeclasses.store(),
        clusters: caches.clusters.store(),
        engaged: ctx.engaged.clone(),
        overlays: caches
            .nodeoverlays
            .clone()
            .map(crate::overlays::Overlays::new)
            .unwrap_or_default(),
    }
}

/// The NodeOverlay status loop's context and triggers.
struct OverlayLoop {
    ctx: crate::overlay_status::OverlayStatus,
    overlays: crate::cache::Cache<api::NodeOverlay>,
    clusters: crate::cache::Cache<api::Cluster>,
}

/// The NodeOverlay status loop, when the NodeOverlay cache runs (the feature gate).
fn overlay_loop(ctx: &Sources, caches: &Caches, catalogs: &IndexCatalogs) -> Option<OverlayLoop> {
    Some(OverlayLoop {
        ctx: crate::overlay_status::OverlayStatus {
            client: ctx.workload.clone(),
            metrics: ctx.metrics.clone(),
            catalogs: catalogs.clone(),
            expectations: Arc::default(),
            gauged: Arc::default(),
        },
        overlays: caches.nodeoverlays.clone()?,
        clusters: caches.clusters.clone(),
    })
}

/// What wakes the NodeClaim lifecycle: its caches' changes and the templates'.
/// The scrape-time gauges: the leader's, as Karpenter's; in a hub, every engaged cluster's,
/// under its `cluster` label (detached when it is disengaged).
fn attach_gauges(
    ctx: &Sources,
    caches: &Caches,
    state: ClusterState,
    provider: Arc<dyn crate::cloudprovider::CloudProvider>,
) {
    let key = ctx
        .engaged
        .as_ref()
        .map(|k| k.to_string())
        .unwrap_or_default();
    ctx.metrics.cluster.attach(
        &key,
        ctx.metrics.scope(),
        crate::cluster_metrics::Sources {
            state,
            machines: caches.machines.clone(),
            provider,
        },
    );
}

fn triggers(caches: &Caches) -> lifecycle::Triggers {
    lifecycle::Triggers {
        nodeclaims: caches.nodeclaims.clone(),
        nodes: caches.nodes.clone(),
        nodepools: caches.nodepools.clone(),
    }
}

/// What tells the lifecycle of the Cluster API objects' changes: the provider's caches and
/// the templates'.
fn watches(caches: &Caches, index: &templates::watch::TemplateIndex) -> Watches {
    Watches {
        machines: caches.machines.clone(),
        nodeclasses: caches.nodeclasses.clone(),
        clusters: caches.clusters.clone(),
        templates: Some(index.subscribe()),
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
        settings: Settings {
            node_repair_after: ctx.knobs.node_repair_after,
            ..Settings::default()
        },
        expectations: Arc::default(),
        backoff: Arc::default(),
        registration_failures,
        repairs: Arc::default(),
        connection: ctx.connection.clone(),
    }
}

/// The Cluster API provider's context, over the engagement's caches.
fn provider_context(
    ctx: &Sources,
    caches: &Caches,
    recorder: Recorder,
    catalogs: Arc<IndexCatalogs>,
    (unavailable, inventory): (
        Arc<crate::cloudprovider::clusterapi::availability::unavailable::UnavailableOfferings>,
        crate::cloudprovider::clusterapi::availability::hosts::Inventory,
    ),
    cluster_id: String,
) -> Context {
    Context {
        management: ctx.management.clone(),
        recorder,
        metrics: ctx.metrics.clone(),
        machines: caches.machines.store(),
        nodeclasses: caches.nodeclasses.store(),
        clusters: caches.clusters.store(),
        nodeclaims: caches.nodeclaims.store(),
        catalogs,
        unavailable,
        inventory,
        settings: ProviderSettings {
            node_repair_after: ctx.knobs.node_repair_after,
            count_staleness: ctx.knobs.count_staleness,
            ..ProviderSettings::default()
        },
        kinds: Arc::default(),
        lookups: Arc::default(),
        launched: Arc::default(),
        cluster_id,
    }
}

/// The provisioner of the engagement.
fn provisioner(
    ctx: &Sources,
    state: ClusterState,
    recorder: Recorder,
    provider: Arc<dyn crate::cloudprovider::CloudProvider>,
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
    provider: Arc<dyn crate::cloudprovider::CloudProvider>,
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
        connection: ctx.connection.clone(),
        pod_event_writes: Arc::default(),
    }
}
