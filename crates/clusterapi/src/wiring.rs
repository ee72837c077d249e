//! The Cluster API provider's parts of an engagement ([`parts`]): the provider over its
//! context (Machines, ClusterAPINodeClasses, Clusters, the template catalogs, the offerings'
//! backoff and free hosts, the fencing id), NodePool status's view of ClusterAPINodeClasses,
//! the free-host changes the provisioner hears, and the provider's own loops (NodeClass
//! status, launch latency). NodeOverlays are the core's (the engagement decorates the
//! provider); the catalogs share their evaluation.

use std::sync::Arc;

use karpenter_core::cache::Caches;

use super::caches::ClusterApiCaches;
use crate::catalogs::IndexCatalogs;
use karpenter_core::engagement::{ProviderLoop, ProviderParts, Sources, stopped};
use karpenter_core::events::Recorder;

use super::availability::hosts::{Hosts, Inventory};
use super::availability::unavailable::UnavailableOfferings as Unavailable;
use super::context::{Context, Settings as ProviderSettings};
use super::nodeclass_status::{self, StatusCtx};
use super::{ClusterApi, Watches};

/// The Cluster API provider of the engagement `ctx` describes, over its caches, the template
/// `index` and the fencing id `cluster_id`.
pub fn parts(
    ctx: &Sources,
    caches: &Caches,
    capi: &ClusterApiCaches,
    index: templates::watch::TemplateIndex,
    cluster_id: String,
    recorder: Recorder,
) -> ProviderParts {
    let catalogs = catalogs(ctx, caches, capi, index);
    let inventory = Inventory::new(
        Hosts::new(ctx.management.clone()),
        capi.nodeclasses.store(),
        Arc::new(catalogs.clone()),
    );
    let unavailable: Arc<Unavailable> = Arc::default();
    let provider = ClusterApi::new(
        provider_context(
            ctx,
            caches,
            capi,
            recorder.clone(),
            Arc::new(catalogs.clone()),
            (unavailable.clone(), inventory.clone()),
            cluster_id,
        ),
        Some(watches(capi, &catalogs.index)),
    );
    let mut loops: Vec<ProviderLoop> = Vec::new();
    let status = status(
        ctx,
        caches,
        capi,
        catalogs,
        recorder,
        (unavailable.clone(), inventory.clone()),
    );
    let nodeclasses = capi.nodeclasses.clone();
    let devices = (caches.nodeclaims.clone(), caches.dra.slices.clone());
    loops.push(Box::new(move |stop| {
        Box::pin(nodeclass_status::run(
            status,
            nodeclasses,
            devices,
            stopped(stop),
        ))
    }));
    let latency = super::latency::Latency {
        metrics: ctx.metrics.clone(),
        pods: caches.pods.clone(),
        nodeclaims: caches.nodeclaims.clone(),
        machines: capi.machines.clone(),
    };
    loops.push(Box::new(move |stop| {
        Box::pin(super::latency::run(latency, stopped(stop)))
    }));
    ProviderParts {
        provider: Arc::new(provider),
        nodeclasses: super::nodeclass::readiness_lookup(capi.nodeclasses.store()),
        offering_changes: super::availability::changes(inventory, unavailable),
        loops,
        gauges: Some(Arc::new(super::gauges::MachineGauges {
            machines: capi.machines.clone(),
        })),
    }
}

/// The NodeClass status loop's context.
fn status(
    ctx: &Sources,
    caches: &Caches,
    capi: &ClusterApiCaches,
    catalogs: IndexCatalogs,
    recorder: Recorder,
    (unavailable, inventory): (Arc<Unavailable>, crate::availability::hosts::Inventory),
) -> StatusCtx {
    StatusCtx {
        workload: ctx.workload.clone(),
        management: ctx.management.clone(),
        catalogs,
        nodeclaims: caches.nodeclaims.store(),
        nodes: caches.nodes.store(),
        slices: caches.dra.slices.store(),
        recorder,
        offerings: crate::offering_status::OfferingStatus {
            machines: capi.machines.store(),
            unavailable,
            inventory,
            count_staleness: ctx.knobs.count_staleness,
            metrics: ctx.metrics.clone(),
            gauged: Arc::default(),
        },
        expectations: Arc::default(),
        nodeoverlays: caches.nodeoverlays.clone(),
    }
}

/// The catalogs over the caches: templates, NodeClasses, Clusters, and the NodeOverlays' shared
/// evaluation.
fn catalogs(
    ctx: &Sources,
    caches: &Caches,
    capi: &ClusterApiCaches,
    index: templates::watch::TemplateIndex,
) -> IndexCatalogs {
    IndexCatalogs {
        index,
        nodeclasses: capi.nodeclasses.store(),
        clusters: capi.clusters.store(),
        engaged: ctx.engaged.clone(),
        overlays: caches.overlays.clone(),
    }
}

/// What tells the lifecycle of the Cluster API objects' changes: the provider's caches and
/// the templates'.
fn watches(capi: &ClusterApiCaches, index: &templates::watch::TemplateIndex) -> Watches {
    Watches {
        machines: capi.machines.clone(),
        nodeclasses: capi.nodeclasses.clone(),
        clusters: capi.clusters.clone(),
        health_checks: capi.health_checks.clone(),
        templates: Some(index.subscribe()),
    }
}

/// The Cluster API provider's context, over the engagement's caches.
fn provider_context(
    ctx: &Sources,
    caches: &Caches,
    capi: &ClusterApiCaches,
    recorder: Recorder,
    catalogs: Arc<IndexCatalogs>,
    (unavailable, inventory): (
        Arc<crate::availability::unavailable::UnavailableOfferings>,
        crate::availability::hosts::Inventory,
    ),
    cluster_id: String,
) -> Context {
    Context {
        management: ctx.management.clone(),
        recorder,
        metrics: ctx.metrics.clone(),
        machines: capi.machines.store(),
        nodeclasses: capi.nodeclasses.store(),
        clusters: capi.clusters.store(),
        health_checks: capi.health_checks.store(),
        drain_rules: capi.drain_rules.store(),
        nodeclaims: caches.nodeclaims.store(),
        catalogs,
        unavailable,
        inventory,
        settings: ProviderSettings {
            node_repair_after: ctx.knobs.node_repair_after,
            repair_policies: ctx.knobs.repair_policies.clone(),
            count_staleness: ctx.knobs.count_staleness,
            ..ProviderSettings::default()
        },
        kinds: Arc::default(),
        lookups: Arc::default(),
        control_planes: Arc::default(),
        launched: Arc::default(),
        cluster_id,
    }
}
