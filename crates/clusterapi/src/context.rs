//! The Cluster API provider's own context: the management cluster's client, the Machine,
//! NodeClass and Cluster caches, the template catalogs, the offerings backed off, the host
//! inventories, the workload cluster's identity on our objects, and what this process
//! remembers ahead of its caches (Machines it created, discovered kinds, recent reads). The
//! NodeClaim loops never see it: they reach the provider through `CloudProvider`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::NodeClaim;
use clusterapi_api::{ClusterAPINodeClass, Machine};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};

use super::nodeclass::NodeClass;
use crate::availability::unavailable::UnavailableOfferings;
use crate::catalogs::Catalogs;
use karpenter_core::events::Recorder;
use karpenter_core::metrics::Metrics;
use karpenter_core::nodeclaim::error::Error;

/// The provider's timing knobs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How long a Node `Ready` False or Unknown, or a Machine's health signal, is tolerated
    /// (unless a MachineHealthCheck selects the Machine: `health_checks`).
    pub node_repair_after: Duration,
    /// The user's repair policies (`--repair-policies`); `None`: `Ready` False or Unknown
    /// for `node_repair_after`, replaced.
    pub repair_policies: Option<std::sync::Arc<Vec<cloudprovider::RepairPolicy>>>,
    /// How soon a Machine being deleted is looked at again (its watch usually says sooner).
    pub poll: Duration,
    /// How long a template's reported `available-count` is trusted.
    pub count_staleness: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_repair_after: Duration::from_secs(600),
            repair_policies: None,
            poll: Duration::from_secs(30),
            count_staleness: crate::availability::counts::DEFAULT_STALENESS,
        }
    }
}

/// Discovered API resources, by `apiVersion/kind` (or `group//kind` for the preferred
/// version): one discovery request per kind per process instead of one per launch.
#[derive(Debug, Default)]
pub struct Kinds(Mutex<HashMap<String, (String, ApiResource)>>);

impl Kinds {
    fn get(&self, key: &str) -> Option<(String, ApiResource)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }
    fn put(&self, key: String, value: (String, ApiResource)) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, value);
    }
}

/// How long a bootstrap template read is reused.
pub(crate) const LOOKUP_TTL: Duration = Duration::from_secs(15);

/// Reads from the API remembered for [`LOOKUP_TTL`] (bootstrap template hashes), so a periodic re-check of every NodeClaim is not a read each.
#[derive(Debug, Default)]
pub struct Lookups(Mutex<HashMap<String, (Instant, Option<String>)>>);

impl Lookups {
    pub(crate) async fn get<F>(&self, key: String, read: F) -> Result<Option<String>, Error>
    where
        F: std::future::Future<Output = Result<Option<String>, Error>>,
    {
        {
            let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, v)) = m.get(&key)
                && at.elapsed() < LOOKUP_TTL
            {
                return Ok(v.clone());
            }
        }
        let v = read.await?;
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|_, (at, _)| at.elapsed() < LOOKUP_TTL);
        m.insert(key, (Instant::now(), v.clone()));
        Ok(v)
    }
}

/// The NodeClaim UIDs whose Machine this process created (or adopted), ahead of the Machine
/// cache: a second reconcile before the cache shows it does not create again.
#[derive(Debug, Default)]
pub struct Launched(Mutex<HashSet<String>>);

impl Launched {
    pub fn contains(&self, uid: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(uid)
    }

    pub fn insert(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_string());
    }

    /// Nothing of the claim's launch is left.
    pub fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }
}

/// What the Cluster API provider of one workload cluster reads and remembers.
#[derive(Clone)]
pub struct Context {
    pub management: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub machines: Store<Machine>,
    pub nodeclasses: Store<ClusterAPINodeClass>,
    pub clusters: Store<clusterapi_api::Cluster>,
    /// MachineHealthChecks (who remediates a Machine, `health_checks`).
    pub health_checks: Store<clusterapi_api::MachineHealthCheck>,
    /// MachineDrainRules (how the core drains a Machine's Node, `drain_rules`).
    pub drain_rules: Store<clusterapi_api::MachineDrainRule>,
    /// The workload cluster's NodeClaims (offering counts).
    pub nodeclaims: Store<NodeClaim>,
    pub catalogs: Arc<dyn Catalogs>,
    pub unavailable: Arc<UnavailableOfferings>,
    /// The NodeClasses' host inventories (templates' free hosts).
    pub inventory: crate::availability::hosts::Inventory,
    pub settings: Settings,
    pub kinds: Arc<Kinds>,
    /// API reads drift detection reuses for a few seconds.
    pub lookups: Arc<Lookups>,
    /// The Clusters' control planes, watched (versions, preflight checks).
    pub control_planes: Arc<crate::control_planes::ControlPlanes>,
    pub launched: Arc<Launched>,
    /// The workload cluster's identity on our Cluster API objects (see `fence`).
    pub cluster_id: String,
}

/// The NodeClass a claim refers to, from the cache.
pub(crate) fn nodeclass_of(ctx: &Context, claim: &NodeClaim) -> Option<NodeClass> {
    ctx.nodeclasses
        .get(&ObjectRef::new(&claim.spec.node_class_ref.name))
        .map(|nc| NodeClass::from_typed(&nc))
}

impl Context {
    /// The API resource of `apiVersion` + `kind` in the management cluster.
    pub async fn resource(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<ApiResource, kube::Error> {
        let key = format!("{api_version}/{kind}");
        if let Some((_, ar)) = self.kinds.get(&key) {
            return Ok(ar);
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.management, &gvk).await?;
        self.kinds.put(key, (api_version.to_string(), ar.clone()));
        Ok(ar)
    }

    /// The preferred served version of `group` + `kind`: (apiVersion, resource).
    pub async fn preferred(&self, group: &str, kind: &str) -> Result<(String, ApiResource), Error> {
        let key = format!("{group}//{kind}");
        if let Some(v) = self.kinds.get(&key) {
            return Ok(v);
        }
        let apigroup = kube::discovery::oneshot::group(&self.management, group).await?;
        for (ar, _) in apigroup.versioned_resources(apigroup.preferred_version_or_latest()) {
            if ar.kind == kind {
                let v = (ar.api_version.clone(), ar);
                self.kinds.put(key, v.clone());
                return Ok(v);
            }
        }
        Err(Error::Launch(format!(
            "kind {kind} is not served in group {group}"
        )))
    }

    /// Machines in `namespace` as we create them (the object is built as JSON so that the
    /// fields a newer Cluster API adds survive).
    pub(crate) fn machines_dynamic(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.management.clone(),
            namespace,
            &super::machine::machine_resource(),
        )
    }

    pub(crate) fn machines_api(&self, namespace: &str) -> Api<Machine> {
        Api::namespaced(self.management.clone(), namespace)
    }

    /// Publishes an event about a NodeClaim (best effort).
    pub async fn event(&self, claim: &NodeClaim, type_: EventType, reason: &str, note: String) {
        karpenter_core::nodeclaim::context::publish(
            &self.recorder,
            claim.object_ref(&()),
            type_,
            reason,
            note,
        )
        .await;
    }
}

/// The catalog of NodeClass `nodeclass` with its offerings' availability now (what
/// `instance_types` answers): the backoff, and the counts from the cached NodeClaims and
/// Machines and the free hosts. Nothing is counted when no template of any NodeClass has a
/// count annotation or an inventory (the common case costs no pass over the caches).
pub(crate) fn offered(shared: &Context, nodeclass: &str) -> Option<Arc<templates::model::Catalog>> {
    use crate::availability::{LaunchState, OfferingCounts, resolve};
    let catalog = shared.catalogs.catalog(nodeclass)?;
    let hosts = shared.inventory.tallies();
    let counts = if catalog.limits.is_empty() && hosts.is_empty() {
        OfferingCounts::default()
    } else {
        OfferingCounts::new(
            &shared.nodeclaims.state(),
            &shared.machines.state(),
            k8s_openapi::jiff::Timestamp::now(),
            shared.settings.count_staleness,
        )
        .with_hosts(hosts)
    };
    let state = LaunchState {
        unavailable: &shared.unavailable,
        counts: &counts,
        now: Instant::now(),
    };
    Some(resolve(&catalog, &state))
}
