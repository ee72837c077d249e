//! A whole Cluster: namespace, kubeconfig Secret, TestCluster, TestControlPlane, Cluster.

use super::*;

// --- the TestCluster and TestControlPlane controllers ---

pub(super) async fn reconcile_cluster(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action> {
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

pub(super) async fn reconcile_control_plane(
    obj: Arc<DynamicObject>,
    ctx: Arc<Ctx>,
) -> Result<Action> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = namespaced(&ctx, &obj, &test_control_plane_resource())?;
    let mut status = json!({
        "initialization": {"controlPlaneInitialized": true},
        "initialized": true,
        "ready": true,
        "externalManagedControlPlane": true,
        "conditions": [condition(&obj, "Available", true, "Available", "")]
    });
    // The control-plane contract's versions: the one it runs is `spec.version` at once,
    // unless the test holds it at another (an upgrade in progress).
    let running = obj
        .annotations()
        .get(CONTROL_PLANE_VERSION_ANNOTATION)
        .cloned()
        .or_else(|| obj.data["spec"]["version"].as_str().map(str::to_string));
    if let Some(v) = running {
        status["version"] = json!(v);
    }
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
    /// How long to wait for the Cluster to be ready (a wait on its status: the whole bound is
    /// spent only when the machine is starved, e.g. several control planes starting at once
    /// on two cores, where 90 s was once not enough).
    pub timeout: Duration,
}

impl ClusterSetup {
    pub fn new(namespace: &str, name: &str, workload_kubeconfig: impl Into<PathBuf>) -> Self {
        ClusterSetup {
            namespace: namespace.into(),
            name: name.into(),
            failure_domains: Vec::new(),
            workload_kubeconfig: workload_kubeconfig.into(),
            timeout: Duration::from_secs(180),
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
    apply_kubeconfig(client, setup).await?;
    apply_cluster_objects(client, setup).await?;
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

/// The Cluster's namespace and its `<name>-kubeconfig` Secret (the workload kubeconfig).
async fn apply_kubeconfig(client: &Client, setup: &ClusterSetup) -> Result<()> {
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
    Ok(())
}

/// The TestCluster, the TestControlPlane and the Cluster referring to them.
async fn apply_cluster_objects(client: &Client, setup: &ClusterSetup) -> Result<()> {
    let ns = setup.namespace.as_str();
    let name = setup.name.as_str();
    let params = PatchParams::apply(FIELD_MANAGER).force();
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
    Ok(())
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

/// YAML of a TestMachineTemplate `template` with `annotations` (the body of a flow map), a
/// TestMachine `name` cloned from it by hand (spec `spec`, a flow map) and an orphan Machine
/// `name` of Cluster `cluster` in failure domain `zone` referencing it: one Node, made as
/// Cluster API would, without a MachineDeployment.
pub fn orphan_machine_yaml(
    cluster: &str,
    (template, name): (&str, &str),
    annotations: &str,
    spec: &str,
    zone: &str,
) -> String {
    format!(
        r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: TestMachineTemplate
metadata:
  name: {template}
  annotations: {{{annotations}}}
spec: {{template: {{spec: {spec}}}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: TestMachine
metadata:
  name: {name}
  labels: {{cluster.x-k8s.io/cluster-name: {cluster}}}
  annotations: {{cluster.x-k8s.io/cloned-from-name: {template}}}
spec: {spec}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: {name}
  labels: {{cluster.x-k8s.io/cluster-name: {cluster}}}
spec:
  clusterName: {cluster}
  version: v1.36.3
  bootstrap: {{dataSecretName: none}}
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TestMachine, name: {name}}}
  failureDomain: {zone}
---
"#
    )
}
