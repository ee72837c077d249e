//! A test Cluster API infrastructure provider that behaves like a real one, for tests with
//! the real Cluster API core manager on the testbed.
//!
//! CRDs (contract label `cluster.x-k8s.io/v1beta2: v1beta2`, so Cluster API reads them with
//! the v1beta2 contract):
//!
//! | kind | group | role |
//! | --- | --- | --- |
//! | `TestCluster` | `infrastructure.cluster.x-k8s.io` | InfraCluster: provisioned at once, failure domains from `spec.failureDomains` |
//! | `TestControlPlane` | `controlplane.cluster.x-k8s.io` | an externally managed control plane (like EKS/AKS): initialized at once; `status.version` = `spec.version` (or [`CONTROL_PLANE_VERSION_ANNOTATION`] while an upgrade is held) |
//! | `TestMachineTemplate` | `infrastructure.cluster.x-k8s.io` | InfraMachineTemplate; scale-from-zero `status.capacity`/`status.nodeInfo` |
//! | `TestMachine` | `infrastructure.cluster.x-k8s.io` | InfraMachine: providerID, provisioned, then a kwok Node |
//! | `BareMetalHost` | `metal3.io` | with [`ProviderConfig::bare_metal_hosts`]: hosts a TestMachine with a `hostSelector` claims, rebooted on `reboot.metal3.io` as the baremetal-operator does, the consumer's Node booting again (the hosts module) |
//!
//! With [`ProviderConfig::storage`] it also plays a zonal CSI driver (the storage module).
//! For a template that declares devices it plays their DRA driver (the dra module): the
//! Node's ResourceSlices.
//!
//! [`TestProvider::start`] installs the CRDs and runs the controllers in the test process;
//! dropping it stops them. [`create_cluster`] / [`setup_cluster`] create a whole Cluster
//! (namespace, `<cluster>-kubeconfig` Secret, TestCluster, TestControlPlane, Cluster) and
//! wait until Cluster API reports infrastructure provisioned and control plane initialized.
//!
//! What the TestMachine controller does, like a real provider:
//! 1. adds the finalizer [`FINALIZER`];
//! 2. waits for the owning Machine (the controller ownerRef Cluster API sets) and for its
//!    `spec.bootstrap.dataSecretName` (bootstrap data ready);
//! 3. waits [`ProviderConfig::provision_delay`] since the TestMachine's creation (or the
//!    [`PROVISION_DELAY_ANNOTATION`] value);
//! 4. sets `spec.providerID` = `test://<namespace>/<name>` and `status.initialization.provisioned`
//!    (and v1beta1 `status.ready`), `status.addresses`, `status.failureDomain` (the Machine's
//!    `spec.failureDomain`) and the `Ready` condition;
//! 5. after [`ProviderConfig::registration_delay`], creates the workload Node once (name =
//!    `spec.nodeName` or the TestMachine's name; annotation `kwok.x-k8s.io/node: fake` so kwok
//!    makes it Ready; `spec.providerID` equal; capacity/allocatable from `spec.capacity` /
//!    `spec.allocatable`, else [`ProviderConfig::default_capacity`]; `status.nodeInfo.bootID`
//!    `boot-1-<node>`, a new one at each reboot of its host) and records it in
//!    `status.nodeName`. A Node deleted later is not re-created;
//! 6. on deletion deletes that Node (only if its providerID still matches) and releases the
//!    finalizer.
//!
//! Node labels and taints, merged in this order (later wins):
//! `kubernetes.io/hostname`, `kubernetes.io/arch`/`os` (from `spec.nodeInfo`, default
//! amd64/linux), `node.kubernetes.io/instance-type` (`spec.instanceType`, else the
//! `cluster.x-k8s.io/cloned-from-name` annotation: the template name, as the catalog does),
//! `topology.kubernetes.io/zone` (the Machine's failure domain); then what the bootstrap data
//! asks for: a referenced `KubeadmConfig`'s `spec.joinConfiguration.nodeRegistration.taints` and
//! the `node-labels` kubelet extra arg, or, for `dataSecretName` Secrets, a `value` that is a
//! YAML/JSON mapping with `nodeLabels` (map) and `nodeTaints` (list of `{key, value, effect}`)
//! (other content is ignored); then the TestMachine's own `spec.nodeLabels` / `spec.nodeTaints`.
//!
//! Annotations on a TestMachine (clone them from the template's `spec.template.metadata`):
//! - [`FAIL_ANNOTATION`]` = "<message>"`: never provisions; reports the failure the way providers
//!   do: condition `Ready=False` reason [`FAILURE_REASON`] with the message, plus the deprecated
//!   `status.failureReason: CreateError` / `status.failureMessage` that Cluster API v1.14 still
//!   copies into `Machine.status.deprecated.v1beta1`;
//! - [`NO_PROVIDER_ID_ANNOTATION`]: never sets a providerID (nor provisioned);
//! - [`NO_NODE_ANNOTATION`]: provisions (providerID) but never creates a Node;
//! - [`PROVISION_DELAY_ANNOTATION`]` = "2s" | "500ms"`: per-object provisioning delay.
//!
//! The annotations act only before provisioning; a provisioned TestMachine ignores them.
//!
//! Cluster API v1.14.2 behaviour this relies on (read in its source, checked by
//! `tests/provider.rs`):
//! - the Machine controller reaches the workload cluster through Secret `<cluster>-kubeconfig`
//!   (key `value`), read through a cache that only sees Secrets labelled
//!   `cluster.x-k8s.io/cluster-name`; it connects once the Cluster's
//!   `status.initialization.infrastructureProvisioned` is true and watches Nodes once the
//!   Cluster's `ControlPlaneInitialized` condition is True;
//! - without a `controlPlaneRef` the control plane counts as initialized only when a
//!   control-plane Machine has a nodeRef, and Node drain/deletion on Machine deletion is skipped
//!   when the Cluster has no control-plane Machines — unless the `controlPlaneRef` object
//!   reports `status.externalManagedControlPlane: true`. Hence `TestControlPlane`;
//! - the InfraMachine's `spec.providerID` is read only once `status.initialization.provisioned`
//!   is true; `status.addresses` and `status.failureDomain` are copied with it; its `Ready`
//!   condition is mirrored into the Machine's `InfrastructureReady` condition, and the
//!   deprecated `status.failureReason/failureMessage` into `Machine.status.deprecated.v1beta1`;
//! - a Machine with only `spec.bootstrap.dataSecretName` never gets
//!   `status.initialization.bootstrapDataSecretCreated`, so its phase stays `Pending` (not
//!   `Provisioning`) until it has a providerID; with a `configRef` it is `Provisioning`;
//! - deletion: cordon + drain (unmanaged pods are evicted too; the drain re-checks every 20 s),
//!   wait for volume detach, pre-terminate hooks, delete InfraMachine, delete Node.

mod cluster;
mod crds;
mod dra;
mod hosts;
mod machine;
mod storage;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::{FIELD_MANAGER, Testbed, wait_for};

/// Group of the test infrastructure kinds (the real providers' group).
pub(crate) const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Group of [`TEST_CONTROL_PLANE_KIND`].
pub(crate) const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
/// The one version the test CRDs serve.
pub const VERSION: &str = "v1beta2";
pub(crate) const TEST_CLUSTER_KIND: &str = "TestCluster";
pub(crate) const TEST_MACHINE_KIND: &str = "TestMachine";
pub(crate) const TEST_MACHINE_TEMPLATE_KIND: &str = "TestMachineTemplate";
pub(crate) const TEST_CONTROL_PLANE_KIND: &str = "TestControlPlane";

/// TestMachine annotation: fail provisioning with this message.
pub const FAIL_ANNOTATION: &str = "testbed.cluster.x-k8s.io/fail";
/// TestMachine annotation: never set a providerID.
pub const NO_PROVIDER_ID_ANNOTATION: &str = "testbed.cluster.x-k8s.io/no-provider-id";
/// TestMachine annotation: set the providerID but never create a Node.
pub const NO_NODE_ANNOTATION: &str = "testbed.cluster.x-k8s.io/no-node";
/// TestMachine annotation: provisioning delay for this object (`"2s"`, `"500ms"`, `"1m"`).
pub(crate) const PROVISION_DELAY_ANNOTATION: &str = "testbed.cluster.x-k8s.io/provision-delay";
/// TestControlPlane annotation: the version it reports running (`status.version`) while its
/// `spec.version` may be ahead (an upgrade in progress); without it, `status.version`
/// follows `spec.version` at once.
pub const CONTROL_PLANE_VERSION_ANNOTATION: &str = "testbed.cluster.x-k8s.io/running-version";
/// Finalizer the provider keeps on TestMachines until their Node is deleted.
pub(crate) const FINALIZER: &str = "testbed.cluster.x-k8s.io/testmachine";
/// Reason of the `Ready=False` condition of a failed TestMachine.
pub const FAILURE_REASON: &str = "ProvisioningFailed";
/// The deprecated `status.failureReason` of a failed TestMachine.
pub const DEPRECATED_FAILURE_REASON: &str = "CreateError";
/// Prefix of the providerIDs (`test://<namespace>/<name>`).
pub(crate) const PROVIDER_ID_PREFIX: &str = "test://";

const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const CLONED_FROM_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-name";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Testbed(#[from] crate::Error),
    #[error("{kind} {name}: {message}")]
    Invalid {
        kind: &'static str,
        name: String,
        message: String,
    },
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the provider behaves.
#[derive(Clone)]
pub struct ProviderConfig {
    /// Time from a TestMachine's creation until it is provisioned (providerID set).
    pub provision_delay: Duration,
    /// Time from provisioning until the Node is created ("kubelet registers").
    pub registration_delay: Duration,
    /// Capacity of Nodes whose TestMachine has no `spec.capacity`.
    pub default_capacity: BTreeMap<String, String>,
    /// Where Nodes are created; `None`: the management client (one cluster for both).
    pub workload: Option<Client>,
    /// Per Cluster name (the TestMachine's `cluster.x-k8s.io/cluster-name` label): where that
    /// Cluster's Nodes are created, overriding `workload` (several workload clusters sharing
    /// one management cluster).
    pub workloads: BTreeMap<String, Client>,
    /// For a Cluster not in `workloads`: reach its workload cluster the way Cluster API
    /// does, through the kubeconfig in its `<cluster>-kubeconfig` Secret (key `value`, in
    /// the TestMachine's namespace; a client per Secret resourceVersion), before falling
    /// back to `workload`.
    pub workloads_from_secrets: bool,
    /// Also act as a minimal kubeadm bootstrap provider: for each `KubeadmConfig`, write a
    /// data Secret (in the test format: `nodeLabels`/`nodeTaints` from its
    /// `joinConfiguration.nodeRegistration`) and report `dataSecretCreated`.
    pub kubeadm_bootstrap: bool,
    /// Also install Metal3's BareMetalHost CRD (trimmed) and claim a host for every
    /// TestMachine with a `spec.hostSelector` (see the hosts module).
    pub bare_metal_hosts: bool,
    /// Also play the zonal CSI driver [`ZONAL_DRIVER`] in the workload clusters: its
    /// CSIDriver, a provisioner, a CSINode per Node (the storage module).
    pub storage: bool,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            provision_delay: Duration::from_secs(1),
            registration_delay: Duration::ZERO,
            default_capacity: [
                ("cpu", "4"),
                ("memory", "16Gi"),
                ("pods", "110"),
                ("ephemeral-storage", "100Gi"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            workload: None,
            workloads: BTreeMap::new(),
            workloads_from_secrets: false,
            kubeadm_bootstrap: false,
            bare_metal_hosts: false,
            storage: false,
        }
    }
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("provision_delay", &self.provision_delay)
            .field("registration_delay", &self.registration_delay)
            .field("default_capacity", &self.default_capacity)
            .field("split_workload", &self.workload.is_some())
            .field("workloads", &self.workloads.keys().collect::<Vec<_>>())
            .field("workloads_from_secrets", &self.workloads_from_secrets)
            .field("kubeadm_bootstrap", &self.kubeadm_bootstrap)
            .field("bare_metal_hosts", &self.bare_metal_hosts)
            .field("storage", &self.storage)
            .finish()
    }
}

pub use cluster::{CapiCluster, ClusterSetup, create_cluster, orphan_machine_yaml, setup_cluster};
use cluster::{reconcile_cluster, reconcile_control_plane};
pub use crds::{
    cluster_resource, crds, machine_resource, test_control_plane_resource, test_machine_resource,
    test_machine_template_resource,
};
use crds::{kubeadm_config_resource, test_cluster_resource};
pub use dra::{NO_SLICES_ANNOTATION, REAL_SLICES_ANNOTATION, slice_name};
pub use hosts::{
    BARE_METAL_HOST_KIND, HOST_ANNOTATION, METAL3_GROUP, METAL3_VERSION, NO_HOST_REASON,
    POWER_OFF_TIME, REBOOT_ANNOTATION, bare_metal_host_crd, bare_metal_host_resource,
};
use machine::{reconcile_kubeadm_config, reconcile_machine};
pub use storage::{
    PROVISIONED_BY_ANNOTATION, SELECTED_NODE_ANNOTATION, ZONAL_DRIVER, volume_name,
    zonal_storage_class,
};

/// The providerID the provider gives a TestMachine.
pub fn provider_id(namespace: &str, name: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{namespace}/{name}")
}

// --- the provider ----------------------------------------------------------------------

/// The running provider controllers. Dropping it stops them.
pub struct TestProvider {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

struct Ctx {
    mgmt: Client,
    workload: Client,
    config: ProviderConfig,
    /// `namespace/cluster` -> (the kubeconfig Secret's resourceVersion, its client).
    secret_clients: std::sync::Mutex<BTreeMap<String, (String, Client)>>,
}

impl Ctx {
    /// The cluster where `obj`'s Node lives (by its Cluster name label).
    async fn workload_of(&self, obj: &DynamicObject) -> Client {
        let cluster = obj.labels().get(CLUSTER_NAME_LABEL);
        if let Some(client) = cluster.and_then(|c| self.config.workloads.get(c)) {
            return client.clone();
        }
        if self.config.workloads_from_secrets
            && let Some(c) = cluster
            && let Some(client) = self
                .secret_client(&obj.namespace().unwrap_or_default(), c)
                .await
        {
            return client;
        }
        self.workload.clone()
    }

    /// A client from Cluster `ns/cluster`'s kubeconfig Secret; `None` without one.
    async fn secret_client(&self, ns: &str, cluster: &str) -> Option<Client> {
        let secrets: Api<Secret> = Api::namespaced(self.mgmt.clone(), ns);
        let secret = secrets
            .get_opt(&format!("{cluster}-kubeconfig"))
            .await
            .ok()??;
        let version = secret.resource_version().unwrap_or_default();
        let key = format!("{ns}/{cluster}");
        let cached = |clients: &BTreeMap<String, (String, Client)>| {
            clients
                .get(&key)
                .filter(|(v, _)| *v == version)
                .map(|(_, c)| c.clone())
        };
        if let Some(client) = cached(
            &self
                .secret_clients
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        ) {
            return Some(client);
        }
        let value = secret.data.as_ref()?.get("value")?;
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&value.0).ok()?).ok()?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .ok()?;
        let client = Client::try_from(config).ok()?;
        self.secret_clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (version, client.clone()));
        Some(client)
    }
}

impl TestProvider {
    /// Installs the CRDs (server-side apply, waits until Established) and starts the
    /// controllers for TestCluster, TestControlPlane, TestMachineTemplate and TestMachine
    /// (and KubeadmConfig when [`ProviderConfig::kubeadm_bootstrap`]) in all namespaces.
    pub async fn start(client: Client, config: ProviderConfig) -> Result<Self> {
        let mut crds = crds();
        if config.bare_metal_hosts {
            crds.push(bare_metal_host_crd());
        }
        install_crds(&client, &crds).await?;
        let ctx = Arc::new(Ctx {
            workload: config.workload.clone().unwrap_or_else(|| client.clone()),
            mgmt: client.clone(),
            config,
            secret_clients: Default::default(),
        });
        let mut tasks = vec![
            spawn(&ctx, test_cluster_resource(), |o, c| {
                Box::pin(reconcile_cluster(o, c))
            }),
            spawn(&ctx, test_control_plane_resource(), |o, c| {
                Box::pin(reconcile_control_plane(o, c))
            }),
            spawn(&ctx, test_machine_template_resource(), |o, c| {
                Box::pin(reconcile_template(o, c))
            }),
            spawn_machines(&ctx),
        ];
        if ctx.config.bare_metal_hosts {
            tasks.push(spawn(&ctx, bare_metal_host_resource(), |o, c| {
                Box::pin(hosts::reconcile_host(o, c))
            }));
        }
        if ctx.config.storage {
            tasks.extend(storage::spawn(&ctx));
        }
        if ctx.config.kubeadm_bootstrap {
            tasks.push(spawn(&ctx, kubeadm_config_resource(), |o, c| {
                Box::pin(reconcile_kubeadm_config(o, c))
            }));
        }
        Ok(TestProvider { tasks })
    }
}

impl Drop for TestProvider {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

type ReconcileFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Action>> + Send>>;

fn spawn(
    ctx: &Arc<Ctx>,
    ar: ApiResource,
    reconcile: fn(Arc<DynamicObject>, Arc<Ctx>) -> ReconcileFuture,
) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::all_with(ctx.mgmt.clone(), &ar);
    let retry = retry(&ar);
    let controller = Controller::new_with(api, watcher::Config::default(), ar).run(
        reconcile,
        retry,
        ctx.clone(),
    );
    tokio::spawn(controller.for_each(|_| async {}))
}

/// Every test provider controller's error policy: log at debug, try again in 500 ms.
fn retry(ar: &ApiResource) -> impl Fn(Arc<DynamicObject>, &Error, Arc<Ctx>) -> Action + use<> {
    let kind = ar.kind.clone();
    move |obj, err, _| {
        tracing::debug!(kind = %kind, name = %obj.name_any(), error = %err, "test provider retries");
        Action::requeue(Duration::from_millis(500))
    }
}

/// The TestMachine controller. Like every Cluster API infrastructure provider it also
/// watches Machines and wakes the TestMachine a Machine points at: the ownerRef and the
/// bootstrap data it waits for are written to the Machine, not to the TestMachine.
fn spawn_machines(ctx: &Arc<Ctx>) -> tokio::task::JoinHandle<()> {
    let ar = test_machine_resource();
    let api: Api<DynamicObject> = Api::all_with(ctx.mgmt.clone(), &ar);
    let machines_ar = machine_resource();
    let machines: Api<DynamicObject> = Api::all_with(ctx.mgmt.clone(), &machines_ar);
    let target = ar.clone();
    let retry = retry(&ar);
    let controller = Controller::new_with(api, watcher::Config::default(), ar)
        .watches_with(
            machines,
            machines_ar,
            watcher::Config::default(),
            move |machine: DynamicObject| {
                let infra = &machine.data["spec"]["infrastructureRef"];
                let ns = machine.namespace();
                (infra["kind"] == TEST_MACHINE_KIND)
                    .then(|| infra["name"].as_str())
                    .flatten()
                    .zip(ns)
                    .map(|(name, ns)| {
                        kube::runtime::reflector::ObjectRef::new_with(name, target.clone())
                            .within(&ns)
                    })
            },
        )
        .run(reconcile_machine, retry, ctx.clone());
    tokio::spawn(controller.for_each(|_| async {}))
}

async fn install_crds(client: &Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        api.patch(&crd.name_any(), &params, &Patch::Apply(crd))
            .await?;
    }
    for crd in crds {
        let name = crd.name_any();
        wait_for(
            &format!("CRD {name} to be Established"),
            Duration::from_secs(30),
            || async {
                let c = api.get(&name).await.ok()?;
                c.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await?;
    }
    Ok(())
}

fn namespaced(ctx: &Ctx, obj: &DynamicObject, ar: &ApiResource) -> Result<Api<DynamicObject>> {
    let ns = obj.namespace().ok_or_else(|| Error::Invalid {
        kind: "object",
        name: obj.name_any(),
        message: "has no namespace".into(),
    })?;
    Ok(Api::namespaced_with(ctx.mgmt.clone(), &ns, ar))
}

fn now() -> Value {
    json!(Timestamp::now().to_string())
}

/// A metav1.Condition, keeping lastTransitionTime when the status did not change.
fn condition(obj: &DynamicObject, type_: &str, status: bool, reason: &str, message: &str) -> Value {
    let status = if status { "True" } else { "False" };
    let previous = obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    let since = match previous {
        Some(c) if c["status"] == status && c["lastTransitionTime"].is_string() => {
            c["lastTransitionTime"].clone()
        }
        _ => now(),
    };
    json!({
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": since,
        "observedGeneration": obj.metadata.generation.unwrap_or(0)
    })
}

/// Patches status only when `status` adds or changes something (avoids hot loops).
async fn patch_status(api: &Api<DynamicObject>, obj: &DynamicObject, status: Value) -> Result<()> {
    if is_subset(&status, &obj.data["status"]) {
        return Ok(());
    }
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await?;
    Ok(())
}

/// Whether every field of `want` is equal in `have` (objects compared recursively, with
/// conditions compared without their timestamps).
fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, v)| {
            if k == "lastTransitionTime" {
                return true;
            }
            h.get(k).is_some_and(|hv| is_subset(v, hv))
        }),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b))
        }
        _ => want == have,
    }
}

/// Scale-from-zero contract: `status.capacity` / `status.nodeInfo` from the template's
/// `spec.template.spec.capacity` / `nodeInfo` (only when given there).
async fn reconcile_template(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = namespaced(&ctx, &obj, &test_machine_template_resource())?;
    let spec = &obj.data["spec"]["template"]["spec"];
    let mut status = serde_json::Map::new();
    if let Some(capacity) = spec["capacity"].as_object() {
        let capacity: serde_json::Map<String, Value> = capacity
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(quantity_string(v))))
            .collect();
        status.insert("capacity".into(), Value::Object(capacity));
    }
    if spec["nodeInfo"].is_object() {
        status.insert("nodeInfo".into(), spec["nodeInfo"].clone());
    }
    if !status.is_empty() {
        patch_status(&api, &obj, Value::Object(status)).await?;
    }
    Ok(Action::await_change())
}

fn quantity_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_ignores_timestamps() {
        let have = json!({"a": 1, "conditions": [{"type": "Ready", "lastTransitionTime": "x"}]});
        assert!(is_subset(
            &json!({"conditions": [{"type": "Ready", "lastTransitionTime": "y"}]}),
            &have
        ));
        assert!(!is_subset(&json!({"a": 2}), &have));
    }
}
