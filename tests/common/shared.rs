//! One control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok, the Cluster
//! API manager), one test provider and one Cluster `c1` per test binary, shared by its
//! operator tests one at a time.
//!
//! The operator's objects are cluster-wide (NodePools, NodeClaims, NodeClasses, Nodes) and
//! two operators on one API server would both act on them, so tests take turns: a test
//! leases the control plane ([`lease`]), [`reset`] returns it to the state a fresh one has
//! (no NodePools, NodeClaims, NodeClasses, Nodes, Machines, templates, workloads or Events)
//! and the test sets up its templates, NodeClass and its own operator. The lease ends when
//! the test's `Env` drops (its operator is aborted first).
//!
//! Up to `TESTBED_SHARED_MAX` shared control planes per process (default: as many as tests
//! run at once: `--test-threads`, `RUST_TEST_THREADS` or the CPU count, as the harness
//! decides): a test
//! takes a free one or starts another below the limit. Most of these tests wait (launch and
//! registration timeouts, batch windows), so two lanes on two cores finish sooner than one.
//!
//! The control planes outlive every test's Tokio runtime: each runs its provider on a
//! runtime of its own thread, and `Testbed::client` hands each test a client of its own
//! runtime. They are never dropped: their watchdogs stop them when the process exits.

use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::provider::{self, CapiCluster, TestProvider};
use testbed::{Options, Testbed, wait_for};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::ar;

/// A shared control plane with its Cluster `c1` (the provider runs on `_runtime`'s thread).
pub struct Slot {
    pub tb: Testbed,
    pub cluster: CapiCluster,
}

/// A test's turn on a shared control plane; ends on drop.
pub struct Lease {
    pub slot: &'static Slot,
    _permit: SemaphorePermit<'static>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        FREE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.slot);
    }
}

impl std::ops::Deref for Lease {
    type Target = Testbed;
    fn deref(&self) -> &Testbed {
        &self.slot.tb
    }
}

static PERMITS: LazyLock<Semaphore> = LazyLock::new(|| {
    let from = |var: &str| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
    };
    // `--test-threads N` / `--test-threads=N` as the harness reads it.
    let args: Vec<String> = std::env::args().collect();
    let threads_arg = args.iter().enumerate().find_map(|(i, a)| {
        let v = match a.strip_prefix("--test-threads") {
            Some("") => args.get(i + 1)?.as_str(),
            Some(rest) => rest.strip_prefix('=')?,
            None => return None,
        };
        v.parse::<usize>().ok().filter(|n| *n > 0)
    });
    let max = from("TESTBED_SHARED_MAX")
        .or(threads_arg)
        .or_else(|| from("RUST_TEST_THREADS"))
        .or_else(|| std::thread::available_parallelism().ok().map(usize::from))
        .unwrap_or(1);
    Semaphore::new(max)
});
static FREE: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

/// Waits for a free shared control plane (starting one while fewer than
/// `TESTBED_SHARED_MAX` exist) and resets it.
pub async fn lease() -> Lease {
    let permit = PERMITS
        .acquire()
        .await
        .expect("the semaphore is never closed");
    let free = FREE.lock().unwrap_or_else(PoisonError::into_inner).pop();
    let slot = match free {
        Some(slot) => slot,
        None => start_slot().await,
    };
    // Hand the slot back if the reset panics, so the next test gets a turn.
    let lease = Lease {
        slot,
        _permit: permit,
    };
    reset(&lease).await;
    lease
}

/// Starts a control plane, the provider and Cluster `c1` on a thread whose runtime keeps the
/// provider running for the rest of the process.
async fn start_slot() -> &'static Slot {
    let (tx, rx) = tokio::sync::oneshot::channel::<Result<&'static Slot, String>>();
    std::thread::Builder::new()
        .name("shared-testbed".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = tx.send(Err(format!("runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let started = async {
                    let tb = Testbed::start(Options::all())
                        .await
                        .map_err(|e| format!("testbed: {e}"))?;
                    let provider = TestProvider::start(tb.client(), super::provider_config())
                        .await
                        .map_err(|e| format!("provider: {e}"))?;
                    let cluster = provider::setup_cluster(&tb, "c1", &["zone-a", "zone-b"])
                        .await
                        .map_err(|e| format!("cluster: {e}"))?;
                    Ok::<_, String>((Slot { tb, cluster }, provider))
                };
                match started.await {
                    Ok((slot, provider)) => {
                        let slot: &'static Slot = Box::leak(Box::new(slot));
                        let _ = tx.send(Ok(slot));
                        let _provider = provider;
                        std::future::pending::<()>().await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        })
        .expect("spawn the shared testbed's thread");
    match rx.await {
        Ok(Ok(slot)) => slot,
        Ok(Err(e)) => panic!("shared control plane did not start: {e}"),
        Err(_) => panic!("shared control plane's thread died while starting"),
    }
}

/// Namespaces a reset keeps (and whose workloads it keeps).
const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Returns the control plane to the state a fresh one has, with Cluster `c1` kept: deletes
/// every Karpenter object, Node, Cluster API Machine and clone, template, BareMetalHost,
/// bootstrap Secret,
/// workload, test namespace and Event (finalizers removed: no operator runs between tests),
/// and waits until they are gone.
pub async fn reset(lease: &Lease) {
    let client = lease.client();
    let keep_ns = lease.slot.cluster.namespace.as_str();
    let kinds = [
        ar("karpenter.sh", "v1", "NodePool", "nodepools"),
        ar("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
        ar("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays"),
        ar(
            "karpenter.cluster.x-k8s.io",
            "v1alpha1",
            "ClusterAPINodeClass",
            "clusterapinodeclasses",
        ),
        ar(
            "cluster.x-k8s.io",
            "v1beta2",
            "MachineDeployment",
            "machinedeployments",
        ),
        ar("cluster.x-k8s.io", "v1beta2", "MachineSet", "machinesets"),
        ar(
            "cluster.x-k8s.io",
            "v1beta2",
            "MachineDrainRule",
            "machinedrainrules",
        ),
        provider::machine_resource(),
        provider::test_machine_resource(),
        ar(
            "bootstrap.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmConfig",
            "kubeadmconfigs",
        ),
        provider::test_machine_template_resource(),
        provider::bare_metal_host_resource(),
        ar(
            "bootstrap.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmConfigTemplate",
            "kubeadmconfigtemplates",
        ),
    ];
    wait_for(
        "shared control plane reset",
        Duration::from_secs(120),
        || {
            let client = client.clone();
            let kinds = kinds.clone();
            async move {
                let mut left = 0;
                for kind in &kinds {
                    left += purge_dynamic(&client, kind).await?;
                }
                left += purge(
                    Api::<Node>::all(client.clone()),
                    |_| Api::all(client.clone()),
                    |_| false,
                )
                .await?;
                left += purge_workloads(&client, keep_ns).await?;
                (left == 0).then_some(())
            }
        },
    )
    .await
    .expect("the shared control plane resets");
    // Secrets of the Cluster's namespace other than its kubeconfig (bootstrap data).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), keep_ns);
    let kubeconfig = format!("{}-kubeconfig", lease.slot.cluster.name);
    for s in secrets
        .list(&ListParams::default())
        .await
        .expect("secrets")
        .items
    {
        if s.name_any() != kubeconfig {
            let _ = secrets
                .delete(&s.name_any(), &DeleteParams::default())
                .await;
        }
    }
    // Events last: deleting the objects above may have recorded some.
    for ns in namespaces(&client).await.unwrap_or_default() {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
        let _ = events
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
}

/// Deletes every object `list` lists, except those `keep` keeps (removing finalizers
/// first; `at` is the API for an object's namespace); how many there still were.
async fn purge<K>(
    list: Api<K>,
    at: impl Fn(Option<String>) -> Api<K>,
    keep: impl Fn(&K) -> bool,
) -> Option<usize>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let items = match list.list(&ListParams::default()).await {
        Ok(l) => l.items,
        // A kind this control plane does not serve has nothing to purge.
        Err(kube::Error::Api(s)) if s.code == 404 => return Some(0),
        Err(_) => return None,
    };
    let mut left = 0;
    for o in items.iter().filter(|o| !keep(o)) {
        left += 1;
        let name = o.name_any();
        let api = at(o.namespace());
        if !o.finalizers().is_empty() {
            let _ = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
        }
        if o.meta().deletion_timestamp.is_none() || o.finalizers().is_empty() {
            let _ = api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
        }
    }
    Some(left)
}

/// Deletes a typed kind everywhere but in `skip` namespaces.
async fn purge_typed<K>(client: &Client, skip: &[&str]) -> Option<usize>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    purge(
        Api::<K>::all(client.clone()),
        |ns| Api::namespaced(client.clone(), ns.as_deref().unwrap_or("default")),
        |o| skip.contains(&o.namespace().unwrap_or_default().as_str()),
    )
    .await
}

/// Deletes a custom kind everywhere (cluster-scoped or in any namespace).
async fn purge_dynamic(client: &Client, kind: &ApiResource) -> Option<usize> {
    purge(
        Api::<DynamicObject>::all_with(client.clone(), kind),
        |ns| match ns {
            Some(ns) => Api::namespaced_with(client.clone(), &ns, kind),
            None => Api::all_with(client.clone(), kind),
        },
        |_| false,
    )
    .await
}

/// Workloads, pods and their volumes everywhere but in the system namespaces (volumes and
/// StorageClasses everywhere), and the test namespaces
/// (`test-*`) but `keep_ns`; how many workloads and pods there still were.
async fn purge_workloads(client: &Client, keep_ns: &str) -> Option<usize> {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let skip = SYSTEM_NAMESPACES;
    let mut left = 0;
    left += purge_typed::<Deployment>(client, &skip).await?;
    left += purge_typed::<StatefulSet>(client, &skip).await?;
    left += purge_typed::<DaemonSet>(client, &skip).await?;
    left += purge_typed::<Job>(client, &skip).await?;
    left += purge_typed::<ReplicaSet>(client, &skip).await?;
    left += purge_typed::<PodDisruptionBudget>(client, &skip).await?;
    left += purge_typed::<Pod>(client, &skip).await?;
    left += purge_typed::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(client, &skip).await?;
    // Volumes and classes are cluster-scoped: every one is a test's.
    left += purge(
        Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone()),
        |_| Api::all(client.clone()),
        |_| false,
    )
    .await?;
    left += purge(
        Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone()),
        |_| Api::all(client.clone()),
        |_| false,
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces.list(&ListParams::default()).await.ok()?.items {
        let name = ns.name_any();
        if name.starts_with("test-") && name != keep_ns && ns.metadata.deletion_timestamp.is_none()
        {
            let _ = namespaces.delete(&name, &DeleteParams::default()).await;
        }
    }
    Some(left)
}

async fn namespaces(client: &Client) -> Option<Vec<String>> {
    let l = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    Some(l.items.iter().map(ResourceExt::name_any).collect())
}
