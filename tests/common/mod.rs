//! Shared set-up of the end-to-end tests: the testbed with the Cluster API manager, the test
//! infrastructure provider, kwok, a Cluster, templates, a NodeClass and the operator.
#![allow(dead_code)]

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

pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

pub fn condition(obj: &DynamicObject, type_: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

pub struct Env {
    pub tb: Testbed,
    pub _provider: TestProvider,
    pub cluster: CapiCluster,
    pub operator: tokio::task::JoinHandle<()>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.operator.abort();
    }
}

/// A TestMachineTemplate: name, cpu, memory, price, annotations for the cloned TestMachines.
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
/// NodeClass, and the operator running.
pub async fn env(templates_spec: Vec<Tpl>) -> Env {
    env_as(templates_spec, false).await
}

/// As `env`; with `least_privilege` the operator runs as the ServiceAccount of
/// `deploy/base` with exactly the RBAC it installs (impersonated), not as cluster admin.
pub async fn env_as(templates_spec: Vec<Tpl>, least_privilege: bool) -> Env {
    env_with(templates_spec, least_privilege, Options::all()).await
}

/// As `env_as`, on a testbed started with `options` (e.g. with the audit log).
pub async fn env_with(templates_spec: Vec<Tpl>, least_privilege: bool, options: Options) -> Env {
    let tb = Testbed::start(options).await.expect("testbed starts");
    let client = tb.client();
    let provider = TestProvider::start(
        client.clone(),
        ProviderConfig {
            provision_delay: Duration::from_millis(500),
            // Also answers KubeadmConfigs (no kubeadm bootstrap controller on the testbed).
            kubeadm_bootstrap: true,
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("provider starts");
    let cluster = provider::setup_cluster(&tb, "c1", &["zone-a", "zone-b"])
        .await
        .expect("cluster ready");
    let ns = cluster.namespace.clone();
    // Bootstrap data (the provider reads nodeLabels/nodeTaints; the unregistered taint is
    // what a real bootstrap would add).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
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
        &ns,
        &provider::test_machine_template_resource(),
    );
    for (name, cpu, mem, price, template_annotations) in templates_spec {
        let t: DynamicObject = from_json(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
            "metadata": {"name": name,
                "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
                "annotations": {"karpenter.cluster.x-k8s.io/price": price}},
            "spec": {"template": {"metadata": {"annotations": template_annotations.clone()},
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
    let _ = &templates;
    nodeclasses(&client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
                "metadata": {"name": "default"},
                "spec": {"clusterRef": {"namespace": ns, "name": "c1"},
                         "bootstrap": {"dataSecretName": "bootstrap-data"},
                         "launchTimeout": "60s", "registrationTimeout": "60s"}
            })),
        )
        .await
        .expect("nodeclass");
    let operator = if least_privilege {
        let config = controller::runtime::RunConfig {
            kubeconfig: Some(as_deploy_base_service_account(&tb).await),
            ..operator_config(&tb)
        };
        spawn_operator(config)
    } else {
        start_operator(&tb)
    };
    wait_for("NodeClass Ready", Duration::from_secs(60), || async {
        let nc = nodeclasses(&client).get("default").await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await
    .expect("NodeClass Ready");
    Env {
        tb,
        _provider: provider,
        cluster,
        operator,
    }
}

pub fn operator_config(tb: &Testbed) -> controller::runtime::RunConfig {
    controller::runtime::RunConfig {
        kubeconfig: Some(tb.kubeconfig().to_path_buf()),
        metrics_addr: free_addr(),
        health_addr: free_addr(),
        gc_interval: Duration::from_secs(2),
        gc_grace: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Runs the operator's loops in this process (as `karpenter-capi run` does).
pub fn start_operator(tb: &Testbed) -> tokio::task::JoinHandle<()> {
    spawn_operator(operator_config(tb))
}

pub fn spawn_operator(config: controller::runtime::RunConfig) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = controller::runtime::run_operator(config).await {
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
    api.list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// `karpenter.sh/v1` NodePools.
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

/// Installs `deploy/base` without the Deployment and Service (the operator runs in this
/// process) and returns a kubeconfig that impersonates its ServiceAccount.
pub async fn as_deploy_base_service_account(tb: &Testbed) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tb
        .kubectl()
        .arg("kustomize")
        .arg(root.join("deploy/base"))
        .output()
        .expect("kubectl kustomize runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("rendered YAML");
    let mut service_account = None;
    for d in docs {
        match d["kind"].as_str() {
            Some("Deployment" | "Service") => continue,
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
            .expect("deploy/base object applies");
    }
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
