//! Shared set-up of the end-to-end tests: the testbed with the Cluster API manager, the test
//! infrastructure provider, kwok, a Cluster, templates, a NodeClass and the operator.
// Test-support module: `pub` here shares items between test files of one test crate.
#![allow(dead_code, unreachable_pub)]

pub mod gate;
pub mod hub;
pub mod manifests;
pub mod mirror;
pub mod passes;
pub mod process;
pub mod replica;
pub mod shared;

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use testbed::provider::{self, CapiCluster, ProviderConfig, TestProvider};
use testbed::{Options, Testbed, wait_for};

pub fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("test fixture is valid")
}

/// `part` ⊆ `whole`: every field of `part` is in `whole` with the same value (YAML numbers
/// and strings for quantities compare as text).
pub fn is_subset(part: &Value, whole: &Value) -> bool {
    match (part, whole) {
        (Value::Object(p), Value::Object(w)) => p
            .iter()
            .all(|(k, v)| w.get(k).is_some_and(|wv| is_subset(v, wv))),
        (Value::Array(p), Value::Array(w)) => {
            p.len() == w.len() && p.iter().zip(w).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(n), Value::String(s)) | (Value::String(s), Value::Number(n)) => {
            n.to_string() == *s
        }
        _ => part == whole,
    }
}

pub fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn nodeclaims(c: &Client) -> Api<DynamicObject> {
    Api::all_with(
        c.clone(),
        &ar("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
    )
}

pub fn nodeclasses(c: &Client) -> Api<DynamicObject> {
    Api::all_with(
        c.clone(),
        &ar(
            "karpenter.cluster.x-k8s.io",
            "v1alpha1",
            "ClusterAPINodeClass",
            "clusterapinodeclasses",
        ),
    )
}

/// Every object `api` lists with `params`. A failed list fails the test, naming what was
/// listed: read as an empty list it would pass every "none left" and "nothing new" check.
pub async fn list<K>(api: &Api<K>, params: &kube::api::ListParams) -> Vec<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.list(params).await {
        Ok(l) => l.items,
        Err(e) => panic!(
            "list {} ({:?}, {:?}): {e}",
            api.resource_url(),
            params.label_selector,
            params.field_selector
        ),
    }
}

pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

pub fn condition(obj: &DynamicObject, type_: &str) -> Option<String> {
    condition_field(obj, type_, "status")
}

/// The `field` (status, reason, message) of `obj`'s condition `type_`.
pub fn condition_field(obj: &DynamicObject, type_: &str, field: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c[field].as_str())
        .map(str::to_string)
}

/// The control plane of an [`Env`]: the binary's shared one for this test's turn, or one
/// of its own.
pub enum Tb {
    Shared(shared::Lease),
    Own(Box<Testbed>),
}

impl std::ops::Deref for Tb {
    type Target = Testbed;
    fn deref(&self) -> &Testbed {
        match self {
            Tb::Shared(lease) => lease,
            Tb::Own(tb) => tb,
        }
    }
}

pub struct Env {
    pub tb: Tb,
    /// The provider of a control plane of the test's own (a shared one runs its own).
    pub _provider: Option<TestProvider>,
    pub cluster: CapiCluster,
    pub operator: tokio::task::JoinHandle<()>,
    /// Where the operator serves `/metrics`.
    pub metrics_addr: SocketAddr,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.operator.abort();
    }
}

/// A TestMachineTemplate: name, cpu, memory, price, annotations for the cloned TestMachines
/// (Cluster Autoscaler's `capacity.cluster-autoscaler.kubernetes.io/*` go on the template).
pub type Tpl = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Value,
);

pub fn default_templates(annotations: Value) -> Vec<Tpl> {
    vec![
        ("small", "2", "4Gi", "0.10", annotations.clone()),
        ("large", "8", "32Gi", "0.40", annotations),
    ]
}

/// Testbed + CAPI + provider + a Cluster with two failure domains + templates + a
/// NodeClass, and the operator running. On the binary's shared control plane (see
/// [`shared`]) unless `TESTBED_SHARED=0`.
pub async fn env(templates_spec: Vec<Tpl>) -> Env {
    env_as(templates_spec, Identity::Admin).await
}

/// Who the operator runs as.
#[derive(Clone, Copy, Debug)]
pub enum Identity {
    /// The testbed's cluster admin.
    Admin,
    /// The ServiceAccount of `deploy/base` with exactly the RBAC it installs (impersonated).
    DeployBase,
    /// The ServiceAccount of the Helm chart (default values) with exactly its RBAC
    /// (impersonated).
    HelmChart,
}

/// As `env`, with the operator running as `identity`.
pub async fn env_as(templates_spec: Vec<Tpl>, identity: Identity) -> Env {
    env_with(templates_spec, identity, Options::all()).await
}

/// As `env_as`, on a testbed started with `options` (e.g. with the audit log).
pub async fn env_with(templates_spec: Vec<Tpl>, identity: Identity, options: Options) -> Env {
    env_tuned(templates_spec, identity, options, |_| {}).await
}

/// As `env_with`, with the operator's configuration adjusted by `tune`. With
/// `Options::all()` the test takes its turn on the binary's shared control plane; other
/// options (e.g. the audit log) start one of its own.
pub async fn env_tuned(
    templates_spec: Vec<Tpl>,
    identity: Identity,
    options: Options,
    tune: impl FnOnce(&mut operator::RunConfig),
) -> Env {
    env_nodeclass(templates_spec, identity, options, json!({}), tune).await
}

/// As `env_tuned`, with the NodeClass `default`'s spec fields `nodeclass` (e.g. its
/// timeouts) set from its creation, before the operator starts: its first look at a
/// NodeClaim already sees them.
pub async fn env_nodeclass(
    templates_spec: Vec<Tpl>,
    identity: Identity,
    options: Options,
    nodeclass: Value,
    tune: impl FnOnce(&mut operator::RunConfig),
) -> Env {
    let share =
        options == Options::all() && std::env::var("TESTBED_SHARED").map_or(true, |v| v != "0");
    let (tb, provider, cluster) = if share {
        let lease = shared::lease().await;
        let cluster = lease.slot.cluster.clone();
        install_fixtures_with(&lease, &cluster.namespace, &templates_spec, &nodeclass).await;
        (Tb::Shared(lease), None, cluster)
    } else {
        let (tb, provider, cluster) = prepare_with(templates_spec, options, &nodeclass).await;
        (Tb::Own(Box::new(tb)), Some(provider), cluster)
    };
    let client = tb.client();
    let installed = match identity {
        Identity::Admin => None,
        Identity::DeployBase => Some(manifests::kustomize("deploy/base")),
        Identity::HelmChart => Some(manifests::helm_template(&["--include-crds"])),
    };
    let mut config = operator_config(&tb);
    if let Some(yaml) = installed {
        config.kubeconfig = Some(as_service_account_of(&tb, &yaml).await);
        // The default: the kube-system namespace's UID (proves the RBAC to read it).
        config.cluster_id = None;
    }
    tune(&mut config);
    let metrics_addr = config.metrics_addr;
    let operator = spawn_operator(config);
    nodeclass_ready(&client).await;
    Env {
        tb,
        _provider: provider,
        cluster,
        operator,
        metrics_addr,
    }
}

/// Waits until the NodeClass `default` is Ready.
pub async fn nodeclass_ready(client: &Client) {
    wait_for("NodeClass Ready", Duration::from_secs(60), || async {
        let nc = nodeclasses(client).get("default").await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await
    .expect("NodeClass Ready");
}

/// How the tests' infrastructure provider behaves (also to start it again).
pub fn provider_config() -> ProviderConfig {
    ProviderConfig {
        provision_delay: Duration::from_millis(500),
        // Also answers KubeadmConfigs (no kubeadm bootstrap controller on the testbed).
        kubeadm_bootstrap: true,
        // BareMetalHosts for the inventory tests (claimed only by TestMachines with a
        // hostSelector).
        bare_metal_hosts: true,
        // A zonal CSI driver (CSIDriver, provisioner, a CSINode per Node) for the volume
        // tests.
        storage: true,
        ..ProviderConfig::default()
    }
}

/// Testbed + CAPI + provider + a Cluster `c1` with two failure domains + templates + the
/// NodeClass `default`, without the operator.
pub async fn prepare(
    templates_spec: Vec<Tpl>,
    options: Options,
) -> (Testbed, TestProvider, CapiCluster) {
    prepare_with(templates_spec, options, &json!({})).await
}

/// As `prepare`, with the NodeClass spec fields `nodeclass` (see `install_fixtures_with`).
pub async fn prepare_with(
    templates_spec: Vec<Tpl>,
    options: Options,
    nodeclass: &Value,
) -> (Testbed, TestProvider, CapiCluster) {
    let tb = Testbed::start(options).await.expect("testbed starts");
    let provider = TestProvider::start(tb.client(), provider_config())
        .await
        .expect("provider starts");
    let cluster = provider::setup_cluster(&tb, "c1", &["zone-a", "zone-b"])
        .await
        .expect("cluster ready");
    install_fixtures_with(&tb, &cluster.namespace, &templates_spec, nodeclass).await;
    (tb, provider, cluster)
}

/// In the Cluster's namespace `ns`: the bootstrap data Secret and the templates; and the
/// NodeClass `default` for Cluster `ns/c1`.
pub async fn install_fixtures(tb: &Testbed, ns: &str, templates_spec: &[Tpl]) {
    install_fixtures_with(tb, ns, templates_spec, &json!({})).await;
}

/// As `install_fixtures`, with the NodeClass spec fields `nodeclass` set over the fixture's
/// (e.g. `{"launchTimeout": "20s"}`).
pub async fn install_fixtures_with(
    tb: &Testbed,
    ns: &str,
    templates_spec: &[Tpl],
    nodeclass: &Value,
) {
    let client = tb.client();
    // Bootstrap data (the provider reads nodeLabels/nodeTaints; the unregistered taint is
    // what a real bootstrap would add).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "bootstrap-data"},
                "stringData": {"value": "nodeTaints:\n- {key: karpenter.sh/unregistered, effect: NoExecute}\n"}
            })),
        )
        .await
        .expect("secret");
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &provider::test_machine_template_resource(),
    );
    for t in templates_spec {
        create_template(&templates, t).await;
    }
    let mut spec = json!({"clusterRef": {"namespace": ns, "name": "c1"},
                          "bootstrap": {"dataSecretName": "bootstrap-data"},
                          "launchTimeout": "60s", "registrationTimeout": "60s"});
    if let (Some(spec), Some(over)) = (spec.as_object_mut(), nodeclass.as_object()) {
        spec.extend(over.clone());
    }
    nodeclasses(&client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
                "metadata": {"name": "default"},
                "spec": spec
            })),
        )
        .await
        .expect("nodeclass");
}

/// Creates the opted-in TestMachineTemplate `tpl` with its status (capacity, node info) in
/// the namespace of `templates`.
pub async fn create_template(templates: &Api<DynamicObject>, tpl: &Tpl) {
    let (name, cpu, mem, price, template_annotations) = tpl;
    // Cluster Autoscaler's annotations belong on the template itself (the catalog reads them
    // there); the others are for the cloned TestMachines.
    let mut own = json!({"karpenter.cluster.x-k8s.io/price": price});
    let mut template_annotations = template_annotations.clone();
    if let (Some(map), Some(own)) = (template_annotations.as_object_mut(), own.as_object_mut()) {
        let ca: Vec<String> = map
            .keys()
            .filter(|k| k.starts_with("capacity.cluster-autoscaler.kubernetes.io/"))
            .cloned()
            .collect();
        for k in ca {
            if let Some(v) = map.remove(&k) {
                own.insert(k, v);
            }
        }
    }
    let t: DynamicObject = from_json(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
        "metadata": {"name": name,
            "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
            "annotations": own},
        "spec": {"template": {"metadata": {"annotations": template_annotations},
                              "spec": {"capacity": {"cpu": cpu, "memory": mem, "pods": "110"}}}}
    }));
    templates
        .create(&PostParams::default(), &t)
        .await
        .expect("template");
    templates
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"cpu": cpu, "memory": mem},
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}})),
        )
        .await
        .expect("template status");
}

/// The `--cluster-id` of the operator the tests start (see [`machine_name`]).
pub const CLUSTER_ID: &str = "testbed";

/// The name of the Machine (and its clones) of NodeClaim `claim` launched by the tests'
/// operator.
pub fn machine_name(claim: &str) -> String {
    clusterapi::names::object_name(claim, CLUSTER_ID)
}

pub fn operator_config(tb: &Testbed) -> operator::RunConfig {
    operator::RunConfig {
        cluster_id: Some(CLUSTER_ID.into()),
        kubeconfig: Some(tb.kubeconfig().to_path_buf()),
        metrics_addr: free_addr(),
        health_addr: free_addr(),
        gc_interval: Duration::from_secs(2),
        gc_grace: Duration::from_secs(5),
        // Karpenter validates a disruption move for 15 s; the suites wait for many moves one
        // after another, and what validation guards (a move still valid later, pods not
        // bound meanwhile) is the same at 5 s. The core's unit tests keep the 15 s.
        disruption_validation: Duration::from_secs(5),
        // A pass every second instead of every 5 s: a move is seen, validated and carried on
        // (replacements Initialized, then the candidates deleted) up to a tick sooner at each
        // step. What a pass decides is the same at any rate (ages count from timestamps,
        // validation from the pass that first saw the move).
        disruption_tick: Duration::from_secs(1),
        ..Default::default()
    }
}

/// Runs the operator's loops in this process (as `karpenter-capi run` does).
pub fn start_operator(tb: &Testbed) -> tokio::task::JoinHandle<()> {
    spawn_operator(operator_config(tb))
}

/// The operator's log on the test's output when `TEST_LOG` is set (an env filter such as
/// `karpenter_core=debug,clusterapi=debug`); once per test process.
fn init_test_log() {
    if let Ok(filter) = std::env::var("TEST_LOG")
        && let Ok(filter) = tracing_subscriber::EnvFilter::try_new(filter)
    {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

pub fn spawn_operator(config: operator::RunConfig) -> tokio::task::JoinHandle<()> {
    init_test_log();
    tokio::spawn(async move {
        if let Err(e) = operator::run_operator(config).await {
            panic!("operator failed: {e}");
        }
    })
}

pub fn nodeclaim(name: &str, requirements: Value) -> DynamicObject {
    from_json(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io", "kind": "ClusterAPINodeClass", "name": "default"},
            "requirements": requirements,
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            "taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]
        }
    }))
}

pub async fn events_for(client: &Client, name: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    list(&api, &Default::default())
        .await
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A KubeadmConfigTemplate `workers` (its Nodes join with label `example.com/pool=<pool>`)
/// in `ns` and the ClusterAPINodeClass `name` that clones it for Cluster `ns/c1`.
pub async fn create_kubeadm_nodeclass(client: &Client, ns: &str, name: &str, pool: &str) {
    let kct = ar(
        "bootstrap.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmConfigTemplate",
        "kubeadmconfigtemplates",
    );
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kct)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
                "metadata": {"name": "workers"},
                "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": {
                    "kubeletExtraArgs": [{"name": "node-labels", "value": format!("example.com/pool={pool}")}]
                }}}}}
            })),
        )
        .await
        .expect("KubeadmConfigTemplate");
    nodeclasses(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
                "metadata": {"name": name},
                "spec": {"clusterRef": {"namespace": ns, "name": "c1"},
                         "bootstrap": {"configTemplateRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                                        "kind": "KubeadmConfigTemplate", "name": "workers"}}}
            })),
        )
        .await
        .expect("nodeclass");
}

/// `karpenter.sh/v1` NodePools.
/// Sets the `default` NodeClass's Kubernetes `version`: every node launched at another one
/// drifts (`NodeClassDrifted`).
pub async fn drift_nodeclass_version(client: &Client, version: &str) {
    nodeclasses(client)
        .patch(
            "default",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"version": version}})),
        )
        .await
        .expect("drift the NodeClass");
}

pub fn nodepools(c: &Client) -> Api<DynamicObject> {
    Api::all_with(
        c.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
            "nodepools",
        ),
    )
}

pub async fn create_nodepool(client: &Client, limits: Value) -> DynamicObject {
    create_nodepool_with(client, limits, json!({"consolidateAfter": "Never"})).await
}

/// NodePool `default` consolidating underutilized nodes at once (`consolidateAfter: 0s`),
/// any number at a time (the default budget, 10%, allows one node of a small pool).
pub async fn create_consolidating_nodepool(client: &Client) -> DynamicObject {
    create_nodepool_with(
        client,
        json!({}),
        json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await
}

/// NodePool `default` (template label team=web, on-demand only) with `limits` and
/// `disruption`, once Ready.
pub async fn create_nodepool_with(
    client: &Client,
    limits: Value,
    disruption: Value,
) -> DynamicObject {
    nodepools(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "default"},
                "spec": {
                    "template": {
                        "metadata": {"labels": {"team": "web"}},
                        "spec": {
                            "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                                             "kind": "ClusterAPINodeClass", "name": "default"},
                            "requirements": [{"key": "karpenter.sh/capacity-type",
                                              "operator": "In", "values": ["on-demand"]}]
                        }
                    },
                    "limits": limits,
                    "disruption": disruption
                }
            })),
        )
        .await
        .expect("nodepool");
    wait_for("NodePool Ready", Duration::from_secs(30), || async {
        let np = nodepools(client).get("default").await.ok()?;
        (condition(&np, "Ready").as_deref() == Some("True")).then_some(np)
    })
    .await
    .expect("NodePool becomes Ready")
}

/// Applies rendered install manifests (`deploy/base`, the Helm chart) with server-side apply,
/// all but the Deployment (the operator runs in this process; its pods would be pending
/// pods), and returns a kubeconfig that impersonates their ServiceAccount.
pub async fn as_service_account_of(tb: &Testbed, yaml: &str) -> std::path::PathBuf {
    let docs = manifests::docs(yaml);
    // helm renders no Namespace (`--create-namespace` makes it).
    let namespaces: std::collections::BTreeSet<&str> = docs
        .iter()
        .filter_map(|d| d["metadata"]["namespace"].as_str())
        .collect();
    for ns in namespaces {
        let doc = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        tb.apply_yaml(&doc.to_string(), "default")
            .await
            .expect("namespace applies");
    }
    let mut service_account = None;
    for d in docs {
        match d["kind"].as_str() {
            Some("Deployment") => continue,
            Some("ServiceAccount") => {
                service_account = Some(format!(
                    "system:serviceaccount:{}:{}",
                    d["metadata"]["namespace"].as_str().unwrap_or_default(),
                    d["metadata"]["name"].as_str().unwrap_or_default()
                ));
            }
            _ => {}
        }
        tb.apply_yaml(&d.to_string(), "default")
            .await
            .unwrap_or_else(|e| panic!("{} {} applies: {e}", d["kind"], d["metadata"]["name"]));
    }
    assert!(
        service_account.is_some(),
        "the manifests hold a ServiceAccount"
    );
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(tb.kubeconfig()).expect("testbed kubeconfig");
    for a in &mut kubeconfig.auth_infos {
        if let Some(info) = a.auth_info.as_mut() {
            info.impersonate = service_account.clone();
        }
    }
    let path = tb.kubeconfig().with_extension("operator-sa");
    std::fs::write(
        &path,
        serde_json::to_string(&kubeconfig).expect("kubeconfig JSON"),
    )
    .expect("write kubeconfig");
    path
}

/// A Deployment of `replicas` pause pods requesting `cpu`/`memory`; `extra` is merged into
/// the pod spec.
pub fn deployment(
    name: &str,
    replicas: i32,
    cpu: &str,
    memory: &str,
    extra: Value,
) -> k8s_openapi::api::apps::v1::Deployment {
    let mut spec = json!({
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        "terminationGracePeriodSeconds": 0
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    }))
}

pub fn running(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

pub async fn pods_of(
    api: &Api<k8s_openapi::api::core::v1::Pod>,
    app: &str,
) -> Vec<k8s_openapi::api::core::v1::Pod> {
    list(
        api,
        &kube::api::ListParams::default().labels(&format!("app={app}")),
    )
    .await
}

/// Each pod of `ns`: name, node and phase (for a failure message).
pub async fn pod_places(client: &Client, ns: &str) -> Vec<(String, String, Option<String>)> {
    list(
        &Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns),
        &kube::api::ListParams::default(),
    )
    .await
    .iter()
    .map(|p| {
        (
            kube::ResourceExt::name_any(p),
            node_of(p),
            p.status.as_ref().and_then(|s| s.phase.clone()),
        )
    })
    .collect()
}

/// What a failed wait saw, for its message: the pods of `app` (phase, node, why unscheduled)
/// and every NodeClaim (conditions that are not True, deleting).
pub async fn state_of(
    client: &Client,
    api: &Api<k8s_openapi::api::core::v1::Pod>,
    app: &str,
) -> String {
    let mut out = Vec::new();
    for p in pods_of(api, app).await {
        let status = p.status.as_ref();
        // Absent fields print as `None`, never as an empty value.
        let unscheduled = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status != "True")
            })
            .map(|c| c.message.as_deref());
        out.push(format!(
            "pod {} phase {:?} on {:?} unscheduled {unscheduled:?}",
            kube::ResourceExt::name_any(&p),
            status.and_then(|s| s.phase.as_deref()),
            node_of(&p),
        ));
    }
    match nodeclaims(client)
        .list(&kube::api::ListParams::default())
        .await
    {
        Ok(list) => {
            for c in list.items {
                let pending: Vec<String> = ["Launched", "Registered", "Initialized", "Ready"]
                    .iter()
                    .filter(|t| condition(&c, t).as_deref() != Some("True"))
                    .map(|t| format!("{t}:{:?}", condition_field(&c, t, "reason")))
                    .collect();
                let deleting = c.metadata.deletion_timestamp.is_some();
                out.push(format!(
                    "nodeclaim {} not {pending:?} deleting {deleting}",
                    kube::ResourceExt::name_any(&c)
                ));
            }
        }
        Err(e) => out.push(format!("nodeclaims: list failed: {e}")),
    }
    out.join("\n")
}

pub fn node_of(p: &k8s_openapi::api::core::v1::Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// The metrics page of an operator.
pub async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut body = String::new();
    s.read_to_string(&mut body).await.expect("response");
    body
}

/// Takes a Node away from kwok (no more heartbeats) and reports it NotReady.
pub async fn break_node(client: &kube::Client, name: &str) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kwok.x-k8s.io/node": null}}})),
        )
        .await
        .expect("unmanage node");
    // kwok may re-report Ready until it has seen the annotation go: report NotReady again
    // until three polls in a row see it.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    wait_for(&format!("{name} NotReady"), Duration::from_secs(30), || {
        let seen = seen.clone();
        let nodes = nodes.clone();
        async move {
            use std::sync::atomic::Ordering;
            let n = nodes.get(name).await.expect("read the Node");
            let broken = n
                .status
                .and_then(|s| s.conditions)
                .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status != "True");
            if broken {
                return (seen.fetch_add(1, Ordering::SeqCst) >= 2).then_some(());
            }
            seen.store(0, Ordering::SeqCst);
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let _ = nodes
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready",
                        "status": "False", "reason": "TestBroken", "message": "broken by the test",
                        "lastTransitionTime": now, "lastHeartbeatTime": now}]}})),
                )
                .await;
            None
        }
    })
    .await
    .expect("node stays NotReady");
}
