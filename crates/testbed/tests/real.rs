//! Proves the testbed is a real control plane: schema validation by the API server,
//! scheduling by kube-scheduler onto kwok Nodes, the real Cluster API CRDs and manager.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use testbed::{Options, Testbed, wait_for};

fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("test fixture is valid")
}

/// The control plane the tests here share (all but the audit log's): every component, so
/// each test finds what it needs; each works in its own namespace with its own names.
async fn shared() -> &'static Testbed {
    testbed::shared(Options::all())
        .await
        .expect("testbed starts")
}

#[tokio::test]
async fn structural_crd_rejects_bad_object() {
    let tb = shared().await;
    let crd: CustomResourceDefinition = from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.testbed.io"},
        "spec": {
            "group": "example.testbed.io",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 10}}
                    }}
                }}
            }]
        }
    }));
    tb.install_crds(&[crd]).await.expect("CRD established");
    let ns = tb.temp_namespace().await.expect("namespace");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.testbed.io", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(tb.client(), &ns, &ar);
    let widget = |name: &str, size: i64| -> DynamicObject {
        from_json(json!({
            "apiVersion": "example.testbed.io/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": size}
        }))
    };
    let good = api
        .create(&PostParams::default(), &widget("good", 3))
        .await
        .expect("valid object accepted");
    assert_eq!(good.data["spec"]["size"], 3);
    let err = api
        .create(&PostParams::default(), &widget("bad", 11))
        .await
        .expect_err("object violating the schema is rejected");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains("spec.size"), "{}", status.message);
        }
        other => panic!("unexpected error {other}"),
    }
}

#[tokio::test]
async fn deployment_runs_on_kwok_node() {
    let tb = shared().await;
    let nodes: Api<Node> = Api::all(tb.client());
    let node: Node = from_json(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": "kwok-node-0",
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": "kwok-node-0", "type": "kwok"}
        },
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                   "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}
    }));
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node created");
    wait_for(
        "kwok to make the node Ready",
        Duration::from_secs(60),
        || async {
            let n = nodes.get("kwok-node-0").await.ok()?;
            let ready = n
                .status?
                .conditions?
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        },
    )
    .await
    .expect("node Ready");

    let ns = tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(tb.client(), &ns);
    let deployment: Deployment = from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{"name": "web", "image": "registry.invalid/web:1",
                                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}],
                    "nodeSelector": {"type": "kwok"},
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
                }
            }
        }
    }));
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("deployment created");
    let pods: Api<Pod> = Api::namespaced(tb.client(), &ns);
    let running = wait_for(
        "3 pods Running on the kwok node",
        Duration::from_secs(90),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let running: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .collect();
            (running.len() == 3).then_some(running)
        },
    )
    .await
    .expect("pods Running");
    for pod in running {
        let spec = pod.spec.expect("pod has a spec");
        assert_eq!(
            spec.node_name.as_deref(),
            Some("kwok-node-0"),
            "bound by kube-scheduler"
        );
    }
}

fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
        "machines",
    )
}

#[tokio::test]
async fn capi_machine_round_trips() {
    let tb = shared().await;
    let ns = tb.temp_namespace().await.expect("namespace");
    let api: Api<DynamicObject> = Api::namespaced_with(tb.client(), &ns, &machine_resource());
    let machine: DynamicObject = from_json(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "m-0", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {
            "clusterName": "c1",
            "version": "v1.36.3",
            "bootstrap": {"dataSecretName": "bootstrap-data"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": "m-0"},
            "failureDomain": "zone-a",
            "deletion": {"nodeDeletionTimeoutSeconds": 10}
        }
    }));
    api.create(&PostParams::default(), &machine)
        .await
        .expect("machine created");
    let got = api.get("m-0").await.expect("machine read back");
    assert_eq!(got.data["spec"]["clusterName"], "c1");
    assert_eq!(
        got.data["spec"]["infrastructureRef"]["kind"],
        "DockerMachine"
    );
    assert_eq!(
        got.data["spec"]["bootstrap"]["dataSecretName"],
        "bootstrap-data"
    );
    assert_eq!(
        got.data["spec"]["deletion"]["nodeDeletionTimeoutSeconds"],
        10
    );
    // The real CRD schema rejects a Machine without the required infrastructureRef.
    let mut bad = machine.clone();
    bad.metadata.name = Some("m-bad".into());
    bad.data["spec"]
        .as_object_mut()
        .expect("spec is an object")
        .remove("infrastructureRef");
    let err = api
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("Machine without infrastructureRef rejected");
    assert!(err.to_string().contains("infrastructureRef"), "{err}");
}

#[tokio::test]
async fn capi_manager_is_healthy_and_reconciles() {
    let tb = shared().await;
    let ns = tb.temp_namespace().await.expect("namespace");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
    );
    let clusters: Api<DynamicObject> = Api::namespaced_with(tb.client(), &ns, &ar);
    let cluster: DynamicObject = from_json(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c1"},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}}}
    }));
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("cluster created");
    // The manager's Cluster controller adds its finalizer and reports a phase.
    let seen = wait_for(
        "the CAPI manager to reconcile the Cluster",
        Duration::from_secs(60),
        || async {
            let c = clusters.get("c1").await.ok()?;
            let has_finalizer = c
                .finalizers()
                .iter()
                .any(|f| f.starts_with("cluster.cluster.x-k8s.io"));
            let phase = c.data["status"]["phase"].as_str().map(str::to_string);
            (has_finalizer && phase.is_some()).then_some(phase)
        },
    )
    .await
    .expect("cluster reconciled");
    assert!(seen.is_some());
    let log = std::fs::read_to_string(tb.log("cluster-api")).expect("manager log");
    assert!(
        log.contains("Starting"),
        "manager log shows controllers starting"
    );
}

#[tokio::test]
async fn audit_log_records_each_request_with_its_user_agent() {
    let tb = Testbed::start(Options::default().audit_log())
        .await
        .expect("testbed starts");
    let kubeconfig = kube::config::Kubeconfig::read_from(tb.kubeconfig()).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static("audit-probe/1"),
    ));
    let client = kube::Client::try_from(config).expect("client");
    let ns = tb.temp_namespace().await.expect("namespace");
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, &ns);
    cms.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": "probe"}})),
    )
    .await
    .expect("create");
    cms.get("probe").await.expect("get");
    let events = tb.audit_events().expect("audit log");
    let probe: Vec<_> = events
        .iter()
        .filter(|e| e.user_agent == "audit-probe/1" && e.is_complete())
        .map(|e| (e.verb.as_str(), e.resource(), e.response_status.clone()))
        .collect();
    let ok = Some(testbed::audit::AuditStatus { code: Some(201) });
    let got = Some(testbed::audit::AuditStatus { code: Some(200) });
    assert_eq!(
        probe,
        vec![("create", "configmaps", ok), ("get", "configmaps", got)],
        "exactly the probe's two requests, in order"
    );
    // Other clients are in the log too: the testbed's own made the namespace.
    assert!(
        events
            .iter()
            .any(|e| e.verb == "create" && e.resource() == "namespaces"),
        "{events:?}"
    );
}

#[tokio::test]
async fn no_audit_log_by_default() {
    let tb = shared().await;
    tb.temp_namespace().await.expect("namespace");
    assert!(!tb.log("audit").exists());
    assert!(tb.audit_events().is_err());
}

#[tokio::test]
async fn without_cluster_api_refuses_the_cluster_api_manager() {
    // (The shared testbed of the other tests, `Options::all()`, is the positive control: with
    // Cluster API allowed the same components start.)
    let refused = Testbed::start(Options::all().without_cluster_api()).await;
    match refused {
        Err(testbed::Error::Start { output, .. }) => {
            assert!(output.contains("exclude each other"), "{output}");
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a testbed without Cluster API started its manager"),
    }
}
