//! A test Cluster API infrastructure provider that behaves like a real one, for tests with
//! the real Cluster API core manager on the testbed.
//!
//! CRDs (contract label `cluster.x-k8s.io/v1beta2: v1beta2`, so Cluster API reads them with
//! the v1beta2 contract):
//!
//! | kind | group | role |
//! | --- | --- | --- |
//! | `TestCluster` | `infrastructure.cluster.x-k8s.io` | InfraCluster: provisioned at once, failure domains from `spec.failureDomains` |
//! | `TestControlPlane` | `controlplane.cluster.x-k8s.io` | an externally managed control plane (like EKS/AKS): initialized at once |
//! | `TestMachineTemplate` | `infrastructure.cluster.x-k8s.io` | InfraMachineTemplate; scale-from-zero `status.capacity`/`status.nodeInfo` |
//! | `TestMachine` | `infrastructure.cluster.x-k8s.io` | InfraMachine: providerID, provisioned, then a kwok Node |
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
//!    `spec.allocatable`, else [`ProviderConfig::default_capacity`]) and records it in
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
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Group of [`TEST_CONTROL_PLANE_KIND`].
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";
/// The one version the test CRDs serve.
pub const VERSION: &str = "v1beta2";
pub const TEST_CLUSTER_KIND: &str = "TestCluster";
pub const TEST_MACHINE_KIND: &str = "TestMachine";
pub const TEST_MACHINE_TEMPLATE_KIND: &str = "TestMachineTemplate";
pub const TEST_CONTROL_PLANE_KIND: &str = "TestControlPlane";

/// TestMachine annotation: fail provisioning with this message.
pub const FAIL_ANNOTATION: &str = "testbed.cluster.x-k8s.io/fail";
/// TestMachine annotation: never set a providerID.
pub const NO_PROVIDER_ID_ANNOTATION: &str = "testbed.cluster.x-k8s.io/no-provider-id";
/// TestMachine annotation: set the providerID but never create a Node.
pub const NO_NODE_ANNOTATION: &str = "testbed.cluster.x-k8s.io/no-node";
/// TestMachine annotation: provisioning delay for this object (`"2s"`, `"500ms"`, `"1m"`).
pub const PROVISION_DELAY_ANNOTATION: &str = "testbed.cluster.x-k8s.io/provision-delay";
/// Finalizer the provider keeps on TestMachines until their Node is deleted.
pub const FINALIZER: &str = "testbed.cluster.x-k8s.io/testmachine";
/// Reason of the `Ready=False` condition of a failed TestMachine.
pub const FAILURE_REASON: &str = "ProvisioningFailed";
/// The deprecated `status.failureReason` of a failed TestMachine.
pub const DEPRECATED_FAILURE_REASON: &str = "CreateError";
/// Prefix of the providerIDs (`test://<namespace>/<name>`).
pub const PROVIDER_ID_PREFIX: &str = "test://";

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
    /// Also act as a minimal kubeadm bootstrap provider: for each `KubeadmConfig`, write a
    /// data Secret (in the test format: `nodeLabels`/`nodeTaints` from its
    /// `joinConfiguration.nodeRegistration`) and report `dataSecretCreated`.
    pub kubeadm_bootstrap: bool,
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
            kubeadm_bootstrap: false,
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
            .field("kubeadm_bootstrap", &self.kubeadm_bootstrap)
            .finish()
    }
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, VERSION, kind), plural)
}

pub fn test_cluster_resource() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, TEST_CLUSTER_KIND, "testclusters")
}
pub fn test_machine_resource() -> ApiResource {
    resource(INFRASTRUCTURE_GROUP, TEST_MACHINE_KIND, "testmachines")
}
pub fn test_machine_template_resource() -> ApiResource {
    resource(
        INFRASTRUCTURE_GROUP,
        TEST_MACHINE_TEMPLATE_KIND,
        "testmachinetemplates",
    )
}
pub fn test_control_plane_resource() -> ApiResource {
    resource(
        CONTROL_PLANE_GROUP,
        TEST_CONTROL_PLANE_KIND,
        "testcontrolplanes",
    )
}
/// `cluster.x-k8s.io/v1beta2` Cluster.
pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
    )
}
/// `cluster.x-k8s.io/v1beta2` Machine.
pub fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
        "machines",
    )
}
fn kubeadm_config_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfig"),
        "kubeadmconfigs",
    )
}

/// The providerID the provider gives a TestMachine.
pub fn provider_id(namespace: &str, name: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{namespace}/{name}")
}

// --- CRDs ------------------------------------------------------------------------------

fn open_object() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// Schema of a TestMachine spec (also a TestMachineTemplate's `spec.template.spec`).
/// Declared fields are documentation; anything else is kept.
fn machine_spec_schema() -> Value {
    let quantities = json!({
        "type": "object",
        "additionalProperties": {"x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}]}
    });
    json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "providerID": {"type": "string"},
            "instanceType": {"type": "string"},
            "nodeName": {"type": "string"},
            "capacity": quantities,
            "allocatable": quantities,
            "nodeInfo": {"type": "object", "properties": {
                "architecture": {"type": "string"},
                "operatingSystem": {"type": "string"}
            }},
            "nodeLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "nodeTaints": {"type": "array", "items": {
                "type": "object",
                "required": ["key", "effect"],
                "properties": {
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]}
                }
            }}
        }
    })
}

fn crd(group: &str, kind: &str, plural: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{group}"),
            "labels": {
                "cluster.x-k8s.io/v1beta2": VERSION,
                "cluster.x-k8s.io/provider": if group == CONTROL_PLANE_GROUP { "control-plane-test" } else { "infrastructure-test" }
            }
        },
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "categories": ["cluster-api"]
            },
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status
                    }
                }}
            }]
        }
    })
}

/// The test provider's CRDs: TestCluster, TestMachine, TestMachineTemplate
/// (`infrastructure.cluster.x-k8s.io`) and TestControlPlane (`controlplane.cluster.x-k8s.io`),
/// all `v1beta2` with the contract label `cluster.x-k8s.io/v1beta2: v1beta2`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let template_status = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "capacity": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": true,
                "anyOf": [{"type": "integer"}, {"type": "string"}]}},
            "nodeInfo": {"type": "object", "properties": {
                "architecture": {"type": "string"},
                "operatingSystem": {"type": "string"}
            }}
        }
    });
    let template_spec = json!({
        "type": "object",
        "required": ["template"],
        "properties": {"template": {
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}}
                }},
                "spec": machine_spec_schema()
            }
        }}
    });
    [
        crd(
            INFRASTRUCTURE_GROUP,
            TEST_CLUSTER_KIND,
            "testclusters",
            open_object(),
            open_object(),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            TEST_MACHINE_KIND,
            "testmachines",
            machine_spec_schema(),
            open_object(),
        ),
        crd(
            INFRASTRUCTURE_GROUP,
            TEST_MACHINE_TEMPLATE_KIND,
            "testmachinetemplates",
            template_spec,
            template_status,
        ),
        crd(
            CONTROL_PLANE_GROUP,
            TEST_CONTROL_PLANE_KIND,
            "testcontrolplanes",
            open_object(),
            open_object(),
        ),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("static CRD definitions are valid"))
    .collect()
}

/// The CRDs as multi-document YAML (for `hack/testbed/up.sh --crds` or kubectl).
pub fn crds_yaml() -> Result<String> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).map_err(|e| Error::Invalid {
            kind: "CustomResourceDefinition",
            name: crd.name_any(),
            message: e.to_string(),
        })?);
    }
    Ok(out)
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
}

impl TestProvider {
    /// Installs the CRDs (server-side apply, waits until Established) and starts the
    /// controllers for TestCluster, TestControlPlane, TestMachineTemplate and TestMachine
    /// (and KubeadmConfig when [`ProviderConfig::kubeadm_bootstrap`]) in all namespaces.
    pub async fn start(client: Client, config: ProviderConfig) -> Result<Self> {
        install_crds(&client).await?;
        let ctx = Arc::new(Ctx {
            workload: config.workload.clone().unwrap_or_else(|| client.clone()),
            mgmt: client.clone(),
            config,
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
            spawn(&ctx, test_machine_resource(), |o, c| {
                Box::pin(reconcile_machine(o, c))
            }),
        ];
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
    let kind = ar.kind.clone();
    let controller = Controller::new_with(api, watcher::Config::default(), ar).run(
        reconcile,
        move |obj, err: &Error, _| {
            tracing::debug!(kind = %kind, name = %obj.name_any(), error = %err, "test provider retries");
            Action::requeue(Duration::from_millis(500))
        },
        ctx.clone(),
    );
    tokio::spawn(controller.for_each(|_| async {}))
}

async fn install_crds(client: &Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let crds = crds();
    for crd in &crds {
        api.patch(&crd.name_any(), &params, &Patch::Apply(crd))
            .await?;
    }
    for crd in &crds {
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

async fn reconcile_cluster(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = namespaced(&ctx, &obj, &test_cluster_resource())?;
    let failure_domains: Vec<Value> = obj.data["spec"]["failureDomains"]
        .as_array()
        .map(|fds| {
            fds.iter()
                .map(|fd| match fd {
                    Value::String(name) => json!({"name": name, "controlPlane": false}),
                    other => other.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut status = json!({
        "initialization": {"provisioned": true},
        "ready": true,
        "conditions": [condition(&obj, "Ready", true, "Provisioned", "")]
    });
    if !failure_domains.is_empty() {
        status["failureDomains"] = Value::Array(failure_domains);
    }
    patch_status(&api, &obj, status).await?;
    Ok(Action::await_change())
}

async fn reconcile_control_plane(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = namespaced(&ctx, &obj, &test_control_plane_resource())?;
    let status = json!({
        "initialization": {"controlPlaneInitialized": true},
        "initialized": true,
        "ready": true,
        "externalManagedControlPlane": true,
        "conditions": [condition(&obj, "Available", true, "Available", "")]
    });
    patch_status(&api, &obj, status).await?;
    Ok(Action::await_change())
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

fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

fn elapsed_since(ts: Option<&Timestamp>) -> Duration {
    ts.and_then(|t| Duration::try_from(Timestamp::now().duration_since(*t)).ok())
        .unwrap_or(Duration::ZERO)
}

fn has_finalizer(obj: &DynamicObject) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

async fn set_finalizers(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    finalizers: Vec<String>,
) -> Result<()> {
    // resourceVersion makes this an optimistic update: a concurrent change makes it fail and retry.
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.resource_version()
        }})),
    )
    .await?;
    Ok(())
}

/// The Machine that owns this object (controller ownerRef set by Cluster API).
async fn owner_machine(ctx: &Ctx, obj: &DynamicObject) -> Result<Option<DynamicObject>> {
    let Some(owner) = obj.owner_references().iter().find(|o| {
        o.kind == "Machine"
            && o.api_version.starts_with("cluster.x-k8s.io/")
            && o.controller == Some(true)
    }) else {
        return Ok(None);
    };
    let machines = namespaced(ctx, obj, &machine_resource())?;
    Ok(machines.get_opt(&owner.name).await?)
}

fn node_name(obj: &DynamicObject) -> String {
    obj.data["status"]["nodeName"]
        .as_str()
        .or_else(|| obj.data["spec"]["nodeName"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| obj.name_any())
}

async fn reconcile_machine(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    let api = namespaced(&ctx, &obj, &test_machine_resource())?;
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let pid = provider_id(&ns, &name);

    if obj.metadata.deletion_timestamp.is_some() {
        if !has_finalizer(&obj) {
            return Ok(Action::await_change());
        }
        delete_node(&ctx, &node_name(&obj), &pid).await?;
        let rest: Vec<String> = obj
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        set_finalizers(&api, &obj, rest).await?;
        return Ok(Action::await_change());
    }
    if !has_finalizer(&obj) {
        let mut finalizers = obj.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        set_finalizers(&api, &obj, finalizers).await?;
        return Ok(Action::await_change());
    }

    let annotations = obj.annotations();
    let provisioned = obj.data["status"]["initialization"]["provisioned"] == true;
    if !provisioned {
        if let Some(message) = annotations.get(FAIL_ANNOTATION) {
            let message = if message.is_empty() {
                "provisioning failed"
            } else {
                message.as_str()
            };
            let status = json!({
                "initialization": {"provisioned": false},
                "ready": false,
                "failureReason": DEPRECATED_FAILURE_REASON,
                "failureMessage": message,
                "conditions": [condition(&obj, "Ready", false, FAILURE_REASON, message)]
            });
            patch_status(&api, &obj, status).await?;
            return Ok(Action::await_change());
        }
        let Some(machine) = owner_machine(&ctx, &obj).await? else {
            let status = json!({"conditions": [condition(&obj, "Ready", false, "WaitingForMachine",
                "waiting for a Machine to own this TestMachine")]});
            patch_status(&api, &obj, status).await?;
            return Ok(Action::requeue(Duration::from_secs(1)));
        };
        if !machine.data["spec"]["bootstrap"]["dataSecretName"].is_string() {
            let status = json!({"conditions": [condition(&obj, "Ready", false, "WaitingForBootstrapData",
                "waiting for the Machine's spec.bootstrap.dataSecretName")]});
            patch_status(&api, &obj, status).await?;
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let delay = annotations
            .get(PROVISION_DELAY_ANNOTATION)
            .and_then(|d| parse_duration(d))
            .unwrap_or(ctx.config.provision_delay);
        let age = elapsed_since(obj.metadata.creation_timestamp.as_ref().map(|t| &t.0));
        if age < delay {
            let status = json!({"conditions": [condition(&obj, "Ready", false, "Provisioning", "instance is being created")]});
            patch_status(&api, &obj, status).await?;
            return Ok(Action::requeue(delay - age));
        }
        if annotations.contains_key(NO_PROVIDER_ID_ANNOTATION) {
            let status = json!({"conditions": [condition(&obj, "Ready", false, "Provisioning",
                "instance is being created (never gets a providerID)")]});
            patch_status(&api, &obj, status).await?;
            return Ok(Action::await_change());
        }
        if obj.data["spec"]["providerID"].as_str() != Some(pid.as_str()) {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": pid}})),
            )
            .await?;
        }
        let node = node_name(&obj);
        let mut status = json!({
            "initialization": {"provisioned": true},
            "ready": true,
            "addresses": [
                {"type": "InternalIP", "address": internal_ip(&ns, &name)},
                {"type": "Hostname", "address": node},
            ],
            "conditions": [condition(&obj, "Ready", true, "Provisioned", "")]
        });
        if let Some(fd) = machine.data["spec"]["failureDomain"]
            .as_str()
            .filter(|s| !s.is_empty())
        {
            status["failureDomain"] = json!(fd);
        }
        patch_status(&api, &obj, status).await?;
        return Ok(Action::requeue(ctx.config.registration_delay));
    }

    // Provisioned: the "kubelet" registers the Node once.
    if annotations.contains_key(NO_NODE_ANNOTATION) || obj.data["status"]["nodeName"].is_string() {
        return Ok(Action::await_change());
    }
    let since = obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(|t| t.parse::<Timestamp>().ok());
    let waited = elapsed_since(since.as_ref());
    if waited < ctx.config.registration_delay {
        return Ok(Action::requeue(ctx.config.registration_delay - waited));
    }
    let machine = owner_machine(&ctx, &obj).await?;
    let node = build_node(&ctx, &obj, machine.as_ref(), &pid).await?;
    let nodes: Api<Node> = Api::all(ctx.workload.clone());
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = nodes.get(&node.name_any()).await?;
            let existing_pid = existing
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref());
            if existing_pid != Some(pid.as_str()) {
                return Err(Error::Invalid {
                    kind: "TestMachine",
                    name,
                    message: format!(
                        "Node {} exists with providerID {existing_pid:?}",
                        node.name_any()
                    ),
                });
            }
        }
        Err(e) => return Err(e.into()),
    }
    patch_status(&api, &obj, json!({"nodeName": node.name_any()})).await?;
    Ok(Action::await_change())
}

fn internal_ip(ns: &str, name: &str) -> String {
    // A stable fake address in 10.200.0.0/16 derived from the object's identity.
    let h = format!("{ns}/{name}").bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    format!("10.200.{}.{}", (h >> 8) & 0xff, (h & 0xff).max(1))
}

async fn delete_node(ctx: &Ctx, name: &str, pid: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(ctx.workload.clone());
    let Some(node) = nodes.get_opt(name).await? else {
        return Ok(());
    };
    if node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) != Some(pid) {
        return Ok(());
    }
    match nodes.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Labels and taints requested by bootstrap data or the TestMachine spec.
#[derive(Default)]
struct Registration {
    labels: BTreeMap<String, String>,
    taints: Vec<Value>,
}

impl Registration {
    fn add_labels(&mut self, labels: &Value) {
        if let Some(map) = labels.as_object() {
            for (k, v) in map {
                if let Some(v) = v.as_str() {
                    self.labels.insert(k.clone(), v.to_string());
                }
            }
        }
    }
    fn add_label_list(&mut self, list: &str) {
        for pair in list.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            self.labels
                .insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    fn add_taints(&mut self, taints: &Value) {
        for t in taints.as_array().into_iter().flatten() {
            let Some(key) = t["key"].as_str() else {
                continue;
            };
            let effect = t["effect"].as_str().unwrap_or("NoSchedule");
            self.taints
                .retain(|x| !(x["key"] == key && x["effect"] == effect));
            let mut taint = json!({"key": key, "effect": effect});
            if let Some(v) = t["value"].as_str() {
                taint["value"] = json!(v);
            }
            self.taints.push(taint);
        }
    }
    /// A KubeadmConfig's join (or init) nodeRegistration: taints and `node-labels`.
    fn add_kubeadm(&mut self, config: &Value) {
        for phase in ["initConfiguration", "joinConfiguration"] {
            let reg = &config["spec"][phase]["nodeRegistration"];
            self.add_taints(&reg["taints"]);
            match &reg["kubeletExtraArgs"] {
                // v1beta2: [{name, value}]
                Value::Array(args) => {
                    for a in args.iter().filter(|a| a["name"] == "node-labels") {
                        if let Some(v) = a["value"].as_str() {
                            self.add_label_list(v);
                        }
                    }
                }
                // v1beta1: {name: value}
                Value::Object(args) => {
                    if let Some(v) = args.get("node-labels").and_then(Value::as_str) {
                        self.add_label_list(v);
                    }
                }
                _ => {}
            }
        }
    }
}

async fn build_node(
    ctx: &Ctx,
    obj: &DynamicObject,
    machine: Option<&DynamicObject>,
    pid: &str,
) -> Result<Node> {
    let spec = &obj.data["spec"];
    let name = node_name(obj);
    let mut reg = Registration::default();
    let nodeinfo = &spec["nodeInfo"];
    let arch = nodeinfo["architecture"].as_str().unwrap_or("amd64");
    let os = nodeinfo["operatingSystem"].as_str().unwrap_or("linux");
    reg.labels
        .insert("kubernetes.io/hostname".into(), name.clone());
    reg.labels.insert("kubernetes.io/arch".into(), arch.into());
    reg.labels.insert("kubernetes.io/os".into(), os.into());
    let instance_type = spec["instanceType"].as_str().or_else(|| {
        obj.annotations()
            .get(CLONED_FROM_NAME_ANNOTATION)
            .map(String::as_str)
    });
    if let Some(it) = instance_type {
        reg.labels
            .insert("node.kubernetes.io/instance-type".into(), it.into());
    }
    let zone = obj.data["status"]["failureDomain"]
        .as_str()
        .or_else(|| machine.and_then(|m| m.data["spec"]["failureDomain"].as_str()));
    if let Some(zone) = zone.filter(|z| !z.is_empty()) {
        reg.labels
            .insert("topology.kubernetes.io/zone".into(), zone.into());
    }
    if let Some(machine) = machine {
        let ns = machine.namespace().unwrap_or_default();
        let bootstrap = &machine.data["spec"]["bootstrap"];
        if bootstrap["configRef"]["kind"] == "KubeadmConfig" {
            if let Some(cfg_name) = bootstrap["configRef"]["name"].as_str() {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(ctx.mgmt.clone(), &ns, &kubeadm_config_resource());
                if let Some(cfg) = api.get_opt(cfg_name).await? {
                    reg.add_kubeadm(&cfg.data);
                }
            }
        } else if let Some(secret) = bootstrap["dataSecretName"].as_str() {
            let secrets: Api<Secret> = Api::namespaced(ctx.mgmt.clone(), &ns);
            if let Some(s) = secrets.get_opt(secret).await? {
                let value = s.data.as_ref().and_then(|d| d.get("value"));
                if let Some(doc) = value
                    .and_then(|v| std::str::from_utf8(&v.0).ok())
                    .and_then(|text| serde_saphyr::from_str::<Value>(text).ok())
                {
                    reg.add_labels(&doc["nodeLabels"]);
                    reg.add_taints(&doc["nodeTaints"]);
                }
            }
        }
    }
    reg.add_labels(&spec["nodeLabels"]);
    reg.add_taints(&spec["nodeTaints"]);

    let capacity: BTreeMap<String, String> = match spec["capacity"].as_object() {
        Some(c) if !c.is_empty() => c
            .iter()
            .map(|(k, v)| (k.clone(), quantity_string(v)))
            .collect(),
        _ => ctx.config.default_capacity.clone(),
    };
    let mut allocatable = capacity.clone();
    if let Some(a) = spec["allocatable"].as_object() {
        allocatable.extend(a.iter().map(|(k, v)| (k.clone(), quantity_string(v))));
    }
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": reg.labels,
            "annotations": {
                KWOK_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0"
            }
        },
        "spec": {"providerID": pid, "taints": reg.taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "nodeInfo": {
                "architecture": arch, "operatingSystem": os,
                "kubeletVersion": machine.and_then(|m| m.data["spec"]["version"].as_str()).unwrap_or("v1.36.3"),
                "kubeProxyVersion": "", "bootID": "", "machineID": "", "systemUUID": "",
                "containerRuntimeVersion": "kwok", "kernelVersion": "", "osImage": "testbed"
            },
            "addresses": [{"type": "InternalIP", "address": internal_ip(&obj.namespace().unwrap_or_default(), &obj.name_any())}]
        }
    });
    Ok(serde_json::from_value(node)?)
}

/// Minimal kubeadm bootstrap stand-in: writes a data Secret in the test bootstrap format
/// and reports `status.initialization.dataSecretCreated` / `status.dataSecretName`.
async fn reconcile_kubeadm_config(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = namespaced(&ctx, &obj, &kubeadm_config_resource())?;
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let mut reg = Registration::default();
    reg.add_kubeadm(&obj.data);
    let value =
        serde_json::to_string(&json!({"nodeLabels": reg.labels, "nodeTaints": reg.taints}))?;
    let mut labels = BTreeMap::new();
    if let Some(cluster) = obj.labels().get(CLUSTER_NAME_LABEL) {
        labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster.clone());
    }
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": name, "namespace": ns, "labels": labels,
            "ownerReferences": [{
                "apiVersion": format!("bootstrap.cluster.x-k8s.io/{VERSION}"), "kind": "KubeadmConfig",
                "name": name, "uid": obj.metadata.uid.clone().unwrap_or_default(), "controller": true
            }]
        },
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": value, "format": "testbed"}
    }))?;
    let secrets: Api<Secret> = Api::namespaced(ctx.mgmt.clone(), &ns);
    secrets
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    let status = json!({
        "initialization": {"dataSecretCreated": true},
        "ready": true,
        "dataSecretName": name,
        "conditions": [condition(&obj, "Ready", true, "DataSecretAvailable", "")]
    });
    patch_status(&api, &obj, status).await?;
    Ok(Action::await_change())
}

// --- a whole Cluster -------------------------------------------------------------------

/// What [`create_cluster`] creates.
#[derive(Clone, Debug)]
pub struct ClusterSetup {
    /// Namespace (created if missing).
    pub namespace: String,
    /// Name of the Cluster, TestCluster and TestControlPlane.
    pub name: String,
    /// Failure domains the TestCluster reports (copied by Cluster API into
    /// `Cluster.status.failureDomains`).
    pub failure_domains: Vec<String>,
    /// Kubeconfig of the workload cluster, stored in the `<name>-kubeconfig` Secret.
    pub workload_kubeconfig: PathBuf,
    /// How long to wait for the Cluster to be ready.
    pub timeout: Duration,
}

impl ClusterSetup {
    pub fn new(namespace: &str, name: &str, workload_kubeconfig: impl Into<PathBuf>) -> Self {
        ClusterSetup {
            namespace: namespace.into(),
            name: name.into(),
            failure_domains: Vec::new(),
            workload_kubeconfig: workload_kubeconfig.into(),
            timeout: Duration::from_secs(90),
        }
    }

    pub fn failure_domains<I: IntoIterator<Item = S>, S: Into<String>>(mut self, fds: I) -> Self {
        self.failure_domains = fds.into_iter().map(Into::into).collect();
        self
    }
}

/// A Cluster created by [`create_cluster`].
#[derive(Clone, Debug)]
pub struct CapiCluster {
    pub namespace: String,
    pub name: String,
    /// The Cluster as last read (infrastructure provisioned, control plane initialized).
    pub cluster: DynamicObject,
}

/// Creates namespace, `<name>-kubeconfig` Secret (key `value`, label
/// `cluster.x-k8s.io/cluster-name`, which the Cluster API manager's Secret cache requires),
/// TestCluster, TestControlPlane and a `cluster.x-k8s.io/v1beta2` Cluster referencing them,
/// then waits until Cluster API reports `status.initialization.infrastructureProvisioned`,
/// `controlPlaneInitialized`, the `ControlPlaneInitialized` condition and (if any) the
/// failure domains. Needs a running [`TestProvider`] and the Cluster API manager.
pub async fn create_cluster(client: &Client, setup: &ClusterSetup) -> Result<CapiCluster> {
    let ns = setup.namespace.as_str();
    let name = setup.name.as_str();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )?;
    namespaces
        .patch(ns, &params, &Patch::Apply(&namespace))
        .await?;

    let kubeconfig =
        std::fs::read_to_string(&setup.workload_kubeconfig).map_err(|source| Error::Io {
            path: setup.workload_kubeconfig.clone(),
            source,
        })?;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{name}-kubeconfig"), "namespace": ns,
                     "labels": {CLUSTER_NAME_LABEL: name}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": kubeconfig}
    }))?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .patch(
            &format!("{name}-kubeconfig"),
            &params,
            &Patch::Apply(&secret),
        )
        .await?;

    let apply = |ar: ApiResource, obj: Value| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let params = params.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(obj)?;
            api.patch(&obj.name_any(), &params, &Patch::Apply(&obj))
                .await
                .map_err(Error::from)
        }
    };
    apply(
        test_cluster_resource(),
        json!({
            "apiVersion": format!("{INFRASTRUCTURE_GROUP}/{VERSION}"), "kind": TEST_CLUSTER_KIND,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"failureDomains": setup.failure_domains}
        }),
    )
    .await?;
    apply(
        test_control_plane_resource(),
        json!({
            "apiVersion": format!("{CONTROL_PLANE_GROUP}/{VERSION}"), "kind": TEST_CONTROL_PLANE_KIND,
            "metadata": {"name": name, "namespace": ns},
            "spec": {}
        }),
    )
    .await?;
    apply(
        cluster_resource(),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}},
                "infrastructureRef": {"apiGroup": INFRASTRUCTURE_GROUP, "kind": TEST_CLUSTER_KIND, "name": name},
                "controlPlaneRef": {"apiGroup": CONTROL_PLANE_GROUP, "kind": TEST_CONTROL_PLANE_KIND, "name": name}
            }
        }),
    )
    .await?;

    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &cluster_resource());
    let want_fds = setup.failure_domains.len();
    let cluster = wait_for(
        &format!("Cluster {ns}/{name} to be provisioned and initialized"),
        setup.timeout,
        || async {
            let c = clusters.get(name).await.ok()?;
            let st = &c.data["status"];
            let init = &st["initialization"];
            let cp_condition = st["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == "True");
            let fds = st["failureDomains"].as_array().map_or(0, Vec::len);
            (init["infrastructureProvisioned"] == true
                && init["controlPlaneInitialized"] == true
                && cp_condition
                && fds == want_fds)
                .then_some(c)
        },
    )
    .await?;
    Ok(CapiCluster {
        namespace: ns.to_string(),
        name: name.to_string(),
        cluster,
    })
}

/// [`create_cluster`] on a testbed that is both management and workload cluster: a fresh
/// namespace, the testbed's own kubeconfig in the `<name>-kubeconfig` Secret.
pub async fn setup_cluster(
    tb: &Testbed,
    name: &str,
    failure_domains: &[&str],
) -> Result<CapiCluster> {
    let ns = tb.temp_namespace().await?;
    let setup = ClusterSetup::new(&ns, name, tb.kubeconfig())
        .failure_domains(failure_domains.iter().copied());
    create_cluster(&tb.client(), &setup).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("x"), None);
    }

    #[test]
    fn crds_carry_contract_labels() {
        let crds = crds();
        assert_eq!(crds.len(), 4);
        for crd in &crds {
            assert_eq!(
                crd.labels()
                    .get("cluster.x-k8s.io/v1beta2")
                    .map(String::as_str),
                Some(VERSION),
                "{}",
                crd.name_any()
            );
        }
        assert!(
            crds.iter()
                .any(|c| c.name_any() == "testmachinetemplates.infrastructure.cluster.x-k8s.io")
        );
    }

    #[test]
    fn kubeadm_registration_is_read() {
        let mut reg = Registration::default();
        reg.add_kubeadm(&json!({"spec": {"joinConfiguration": {"nodeRegistration": {
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
            "kubeletExtraArgs": [{"name": "node-labels", "value": "a=b,c=d"}]
        }}}}));
        assert_eq!(reg.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(reg.labels.get("c").map(String::as_str), Some("d"));
        assert_eq!(
            reg.taints,
            vec![json!({"key": "karpenter.sh/unregistered", "effect": "NoExecute"})]
        );
    }

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

#[cfg(test)]
mod crd_file {
    /// `crates/testbed/crds/test-provider.yaml` is generated from [`super::crds`]; regenerate
    /// with `TESTBED_UPDATE_CRDS=1 cargo test -p testbed --lib`.
    #[test]
    fn crd_yaml_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/test-provider.yaml");
        let want = format!(
            "# Generated from crates/testbed/src/provider.rs (crds()); do not edit.\n{}",
            super::crds_yaml().expect("CRDs serialize")
        );
        if std::env::var_os("TESTBED_UPDATE_CRDS").is_some() {
            std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir crds");
            std::fs::write(&path, &want).expect("write CRD YAML");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is stale: run TESTBED_UPDATE_CRDS=1 cargo test -p testbed --lib",
            path.display()
        );
    }
}
