//! The test infrastructure provider against the real Cluster API v1.14 core manager, kwok,
//! kube-controller-manager and kube-scheduler: orphan Machines (no owner) with a hand-cloned
//! TestMachine reach Running, are deleted with their Node, and report failures.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider::{
    self, CapiCluster, ClusterSetup, FAIL_ANNOTATION, NO_NODE_ANNOTATION,
    NO_PROVIDER_ID_ANNOTATION, ProviderConfig, TestProvider,
};
use testbed::{Component, Options, Testbed, wait_for};

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("test fixture is valid")
}

const TEMPLATE: &str = "test-large";
const HOOK: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/test";

fn data_secret() -> Value {
    json!({"dataSecretName": "bootstrap-data"})
}

async fn start(kubeadm_bootstrap: bool) -> (Testbed, TestProvider, CapiCluster) {
    let tb = Testbed::start(Options::all())
        .await
        .expect("testbed with Cluster API starts");
    let provider = TestProvider::start(
        tb.client(),
        ProviderConfig {
            provision_delay: Duration::from_millis(500),
            kubeadm_bootstrap,
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("test provider starts");
    let cluster = provider::setup_cluster(&tb, "c1", &["zone-a", "zone-b"])
        .await
        .expect("Cluster provisioned and initialized");
    fixtures(&tb.client(), &cluster.namespace).await;
    (tb, provider, cluster)
}

/// The bootstrap data Secret and the TestMachineTemplate.
async fn fixtures(client: &Client, ns: &str) {
    // Bootstrap data in the provider's test format: what the "kubelet" registers with.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "bootstrap-data"},
                "stringData": {"value": "nodeLabels:\n  example.com/pool: general\nnodeTaints:\n- key: karpenter.sh/unregistered\n  effect: NoExecute\n"}
            })),
        )
        .await
        .expect("bootstrap secret");
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &provider::test_machine_template_resource(),
    );
    templates
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
                "metadata": {"name": TEMPLATE},
                "spec": {"template": {
                    "metadata": {"labels": {"example.com/template": TEMPLATE}},
                    "spec": {
                        "instanceType": "test.large",
                        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                        "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"},
                        "nodeLabels": {"example.com/from-spec": "yes"}
                    }
                }}
            })),
        )
        .await
        .expect("template created");
}

/// Clones the template into a TestMachine by hand (as a MachineSet or our launch would) and
/// creates an orphan Machine referencing it.
async fn launch(
    client: &Client,
    cluster: &CapiCluster,
    name: &str,
    annotations: Value,
    bootstrap: Value,
) -> (Api<DynamicObject>, Api<DynamicObject>) {
    let ns = &cluster.namespace;
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &provider::test_machine_template_resource(),
    );
    let template = templates.get(TEMPLATE).await.expect("template");
    let mut anns = annotations;
    anns["cluster.x-k8s.io/cloned-from-name"] = json!(TEMPLATE);
    anns["cluster.x-k8s.io/cloned-from-groupkind"] =
        json!("TestMachineTemplate.infrastructure.cluster.x-k8s.io");
    let infra: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &provider::test_machine_resource());
    infra
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachine",
                "metadata": {
                    "name": name,
                    "labels": {"example.com/template": TEMPLATE, "cluster.x-k8s.io/cluster-name": cluster.name},
                    "annotations": anns
                },
                "spec": template.data["spec"]["template"]["spec"]
            })),
        )
        .await
        .expect("TestMachine created");
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &provider::machine_resource());
    machines
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster.name}},
                "spec": {
                    "clusterName": cluster.name,
                    "version": "v1.36.3",
                    "bootstrap": bootstrap,
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TestMachine", "name": name},
                    "failureDomain": "zone-b",
                    "deletion": {"nodeDeletionTimeoutSeconds": 10}
                }
            })),
        )
        .await
        .expect("Machine created");
    (machines, infra)
}

fn condition<'a>(obj: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits for `check` on the named object; on timeout panics with the object's last state.
async fn wait_obj<T>(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&DynamicObject) -> Option<T>,
) -> T {
    let check = &check;
    match wait_for(what, timeout, || async move {
        check(&api.get(name).await.ok()?)
    })
    .await
    {
        Ok(v) => v,
        Err(e) => {
            let last = api.get_opt(name).await.ok().flatten();
            panic!(
                "{e}\nlast state: {}",
                serde_json::to_string_pretty(&last).unwrap_or_default()
            );
        }
    }
}

#[tokio::test]
async fn orphan_machine_runs_and_is_deleted_with_its_node() {
    let (tb, _provider, cluster) = start(false).await;
    let ns = cluster.namespace.clone();
    let fds: Vec<&str> = cluster.cluster.data["status"]["failureDomains"]
        .as_array()
        .expect("failure domains")
        .iter()
        .filter_map(|fd| fd["name"].as_str())
        .collect();
    assert_eq!(fds, ["zone-a", "zone-b"], "copied from TestCluster");

    // Scale-from-zero contract on the template, reported by the provider.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        tb.client(),
        &ns,
        &provider::test_machine_template_resource(),
    );
    wait_obj(
        &templates,
        TEMPLATE,
        "template status.capacity",
        Duration::from_secs(30),
        |t| {
            (t.data["status"]["capacity"]["cpu"] == "8"
                && t.data["status"]["nodeInfo"]["architecture"] == "arm64")
                .then_some(())
        },
    )
    .await;

    let client = tb.client();
    let (machines, infra) = launch(&client, &cluster, "m-1", json!({}), data_secret()).await;
    let pid = provider::provider_id(&ns, "m-1");
    let machine = wait_obj(
        &machines,
        "m-1",
        "Machine Running with a nodeRef",
        Duration::from_secs(90),
        |m| {
            (m.data["status"]["phase"] == "Running"
                && m.data["status"]["nodeRef"]["name"].is_string())
            .then(|| m.clone())
        },
    )
    .await;
    assert_eq!(
        machine.data["spec"]["providerID"],
        pid.as_str(),
        "copied by Cluster API"
    );
    assert_eq!(machine.data["status"]["nodeRef"]["name"], "m-1");
    assert_eq!(
        machine.data["status"]["initialization"]["infrastructureProvisioned"],
        true
    );
    // With spec.bootstrap.dataSecretName (no configRef) Cluster API v1.14 leaves
    // status.initialization.bootstrapDataSecretCreated unset.
    assert!(
        machine.data["status"]["initialization"]["bootstrapDataSecretCreated"].is_null(),
        "{}",
        machine.data["status"]
    );
    assert_eq!(machine.data["status"]["failureDomain"], "zone-b");
    let addresses = machine.data["status"]["addresses"]
        .as_array()
        .expect("addresses copied");
    assert!(
        addresses.iter().any(|a| a["type"] == "InternalIP"),
        "{addresses:?}"
    );
    assert_eq!(
        condition(&machine, "InfrastructureReady").expect("condition")["status"],
        "True"
    );

    // Cluster API made itself the controller owner of the hand-cloned TestMachine.
    let tm = infra.get("m-1").await.expect("TestMachine");
    let owner = tm
        .owner_references()
        .iter()
        .find(|o| o.kind == "Machine")
        .expect("Machine owns the TestMachine");
    assert_eq!(owner.name, "m-1");
    assert_eq!(owner.controller, Some(true));
    assert_eq!(tm.data["spec"]["providerID"], pid.as_str());

    // The Node: kwok made it Ready; labels/taints from bootstrap data and the spec.
    let nodes: Api<Node> = Api::all(tb.client());
    let node = wait_for(
        "kwok to make the Node Ready",
        Duration::from_secs(60),
        || async {
            let n = nodes.get("m-1").await.ok()?;
            let ready = n
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(n)
        },
    )
    .await
    .expect("Node Ready");
    let spec = node.spec.clone().expect("node spec");
    assert_eq!(spec.provider_id.as_deref(), Some(pid.as_str()));
    let labels = node.labels();
    for (k, v) in [
        ("example.com/pool", "general"),
        ("example.com/from-spec", "yes"),
        ("node.kubernetes.io/instance-type", "test.large"),
        ("topology.kubernetes.io/zone", "zone-b"),
        ("kubernetes.io/arch", "arm64"),
    ] {
        assert_eq!(
            labels.get(k).map(String::as_str),
            Some(v),
            "label {k}: {labels:?}"
        );
    }
    let taints = spec.taints.unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "karpenter.sh/unregistered" && t.effect == "NoExecute"),
        "{taints:?}"
    );
    let capacity = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.clone())
        .expect("capacity");
    assert_eq!(capacity.get("cpu").map(|q| q.0.as_str()), Some("8"));
    assert_eq!(capacity.get("memory").map(|q| q.0.as_str()), Some("32Gi"));
    // Cluster API annotates the Node it matched.
    wait_for(
        "Cluster API to annotate the Node",
        Duration::from_secs(30),
        || async {
            let n = nodes.get("m-1").await.ok()?;
            (n.annotations()
                .get("cluster.x-k8s.io/machine")
                .map(String::as_str)
                == Some("m-1"))
            .then_some(())
        },
    )
    .await
    .expect("node annotated by Cluster API");

    // A pod on the Node, to see Cluster API drain it.
    let pods: Api<Pod> = Api::namespaced(tb.client(), &ns);
    pods.create(
        &PostParams::default(),
        &from_json(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web"},
            "spec": {
                "nodeName": "m-1",
                "containers": [{"name": "web", "image": "registry.invalid/web:1"}],
                "tolerations": [{"key": "karpenter.sh/unregistered", "operator": "Exists"}]
            }
        })),
    )
    .await
    .expect("pod created");
    wait_for("pod Running", Duration::from_secs(60), || async {
        let p = pods.get("web").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await
    .expect("pod Running on the kwok Node");

    // Deleting the Machine: Cluster API cordons and drains the Node, runs pre-terminate
    // hooks, deletes the TestMachine (our finalizer deletes the Node) and the Node, then
    // releases the Machine. A pre-terminate hook holds it after the drain.
    machines
        .patch(
            "m-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {HOOK: "test"}}})),
        )
        .await
        .expect("hook added");
    machines
        .delete("m-1", &DeleteParams::default())
        .await
        .expect("Machine deleted");
    let held = wait_obj(
        &machines,
        "m-1",
        "Machine drained and held by the pre-terminate hook",
        Duration::from_secs(60),
        |m| {
            let c = condition(m, "Deleting")?;
            (c["reason"] == "WaitingForPreTerminateHook").then(|| m.clone())
        },
    )
    .await;
    assert_eq!(held.data["status"]["phase"], "Deleting");
    assert!(
        pods.get_opt("web").await.expect("get pod").is_none(),
        "pod evicted by the drain"
    );
    let cordoned = nodes.get("m-1").await.expect("Node still there");
    assert_eq!(cordoned.spec.and_then(|s| s.unschedulable), Some(true));
    assert!(infra.get_opt("m-1").await.expect("get").is_some());
    machines
        .patch(
            "m-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {HOOK: null}}})),
        )
        .await
        .expect("hook removed");
    wait_for(
        "Machine, TestMachine and Node gone",
        Duration::from_secs(90),
        || async {
            let m = machines.get_opt("m-1").await.ok()?;
            let t = infra.get_opt("m-1").await.ok()?;
            let n = nodes.get_opt("m-1").await.ok()?;
            (m.is_none() && t.is_none() && n.is_none()).then_some(())
        },
    )
    .await
    .expect("everything deleted");
}

/// A KubeadmConfig asking for a join taint and node labels (served by the provider's
/// minimal kubeadm bootstrap stand-in).
async fn kubeadm_config(client: &Client, ns: &str, name: &str) -> Value {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "bootstrap.cluster.x-k8s.io",
                "v1beta2",
                "KubeadmConfig",
            ),
            "kubeadmconfigs",
        ),
    );
    api.create(
        &PostParams::default(),
        &from_json(json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": name},
            "spec": {"joinConfiguration": {"nodeRegistration": {
                "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
                "kubeletExtraArgs": [{"name": "node-labels", "value": "example.com/kubeadm=yes"}]
            }}}
        })),
    )
    .await
    .expect("KubeadmConfig created");
    json!({"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}})
}

#[tokio::test]
async fn failures_missing_provider_id_or_node_and_kubeadm_bootstrap() {
    let (tb, _provider, cluster) = start(true).await;
    let ns = cluster.namespace.clone();
    let client = tb.client();
    let (machines, infra) = launch(
        &client,
        &cluster,
        "m-fail",
        json!({FAIL_ANNOTATION: "out of capacity in zone-b"}),
        data_secret(),
    )
    .await;
    let bootstrap = kubeadm_config(&client, &ns, "m-no-id").await;
    launch(
        &client,
        &cluster,
        "m-no-id",
        json!({NO_PROVIDER_ID_ANNOTATION: ""}),
        bootstrap,
    )
    .await;
    launch(
        &client,
        &cluster,
        "m-no-node",
        json!({NO_NODE_ANNOTATION: ""}),
        data_secret(),
    )
    .await;
    let bootstrap = kubeadm_config(&client, &ns, "m-kubeadm").await;
    launch(&client, &cluster, "m-kubeadm", json!({}), bootstrap).await;

    // Failure: Cluster API mirrors the InfraMachine's Ready condition into the Machine's
    // InfrastructureReady condition and copies the deprecated failureReason/failureMessage.
    let failed = wait_obj(
        &machines,
        "m-fail",
        "failure surfaced on the Machine",
        Duration::from_secs(60),
        |m| {
            let c = condition(m, "InfrastructureReady")?;
            let copied = m.data["status"]["deprecated"]["v1beta1"]["failureReason"].is_string();
            (c["reason"] == provider::FAILURE_REASON && copied).then(|| m.clone())
        },
    )
    .await;
    let c = condition(&failed, "InfrastructureReady").expect("condition");
    assert_eq!(c["status"], "False");
    assert!(
        c["message"]
            .as_str()
            .unwrap_or_default()
            .contains("out of capacity in zone-b"),
        "{c}"
    );
    let v1beta1 = &failed.data["status"]["deprecated"]["v1beta1"];
    assert_eq!(
        v1beta1["failureReason"],
        provider::DEPRECATED_FAILURE_REASON,
        "{v1beta1}"
    );
    assert!(
        v1beta1["failureMessage"]
            .as_str()
            .unwrap_or_default()
            .contains("out of capacity in zone-b"),
        "{v1beta1}"
    );
    // With only spec.bootstrap.dataSecretName the Machine never leaves Pending before a
    // providerID (bootstrapDataSecretCreated stays unset in Cluster API v1.14).
    assert_eq!(failed.data["status"]["phase"], "Pending");
    assert!(failed.data["spec"]["providerID"].is_null());

    // No providerID: the provider has passed its delay and says so; the Machine (bootstrap
    // ready through the KubeadmConfig) mirrors it and stays Provisioning.
    let no_id = wait_obj(
        &machines,
        "m-no-id",
        "Machine to mirror the provider's Provisioning condition",
        Duration::from_secs(60),
        |m| {
            let c = condition(m, "InfrastructureReady")?;
            c["message"]
                .as_str()?
                .contains("never gets a providerID")
                .then(|| m.clone())
        },
    )
    .await;
    assert_eq!(
        no_id.data["status"]["phase"], "Provisioning",
        "{}",
        no_id.data["status"]
    );
    assert_eq!(
        no_id.data["status"]["initialization"]["bootstrapDataSecretCreated"],
        true
    );
    assert_eq!(no_id.data["spec"]["bootstrap"]["dataSecretName"], "m-no-id");
    assert!(no_id.data["spec"]["providerID"].is_null());
    assert!(no_id.data["status"]["nodeRef"].is_null());
    let tm = infra.get("m-no-id").await.expect("TestMachine");
    assert!(tm.data["spec"]["providerID"].is_null());

    // providerID but no Node: Provisioned, waiting for the Node.
    let no_node = wait_obj(
        &machines,
        "m-no-node",
        "Machine Provisioned without a Node",
        Duration::from_secs(60),
        |m| (m.data["status"]["phase"] == "Provisioned").then(|| m.clone()),
    )
    .await;
    assert_eq!(
        no_node.data["spec"]["providerID"],
        provider::provider_id(&ns, "m-no-node").as_str()
    );
    assert!(no_node.data["status"]["nodeRef"].is_null());
    let nodes: Api<Node> = Api::all(tb.client());
    assert!(
        nodes
            .get_opt("m-no-node")
            .await
            .expect("get node")
            .is_none()
    );
    let node_ready = condition(&no_node, "NodeReady").expect("NodeReady condition");
    assert_eq!(node_ready["status"], "Unknown", "{node_ready}");
    assert_eq!(node_ready["reason"], "InspectionFailed", "{node_ready}");
    assert!(
        node_ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Waiting for a Node with spec.providerID"),
        "{node_ready}"
    );

    // KubeadmConfig bootstrap: the Node registers with the join taint and node-labels.
    wait_obj(
        &machines,
        "m-kubeadm",
        "kubeadm-bootstrapped Machine Running",
        Duration::from_secs(60),
        |m| (m.data["status"]["phase"] == "Running").then_some(()),
    )
    .await;
    let node = nodes.get("m-kubeadm").await.expect("Node");
    assert_eq!(
        node.labels().get("example.com/kubeadm").map(String::as_str),
        Some("yes")
    );
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "karpenter.sh/unregistered" && t.effect == "NoExecute"),
        "{taints:?}"
    );

    // Machines that never got a providerID or a Node are deleted cleanly too (what a launch
    // or registration timeout does), with their TestMachines.
    let names = ["m-fail", "m-no-id", "m-no-node", "m-kubeadm"];
    for name in names {
        machines
            .delete(name, &DeleteParams::default())
            .await
            .expect("Machine deleted");
    }
    wait_for(
        "all Machines, TestMachines and Nodes gone",
        Duration::from_secs(90),
        || async {
            for name in names {
                if machines.get_opt(name).await.ok()?.is_some()
                    || infra.get_opt(name).await.ok()?.is_some()
                    || nodes.get_opt(name).await.ok()?.is_some()
                {
                    return None;
                }
            }
            Some(())
        },
    )
    .await
    .expect("everything deleted");
}

#[tokio::test]
async fn split_management_and_workload_clusters() {
    let (mgmt, work) = tokio::join!(
        Testbed::start(Options::default().with(Component::ClusterApi)),
        Testbed::start(Options::default().with(Component::Kwok)),
    );
    let mgmt = mgmt.expect("management testbed starts");
    let work = work.expect("workload testbed starts");
    let _provider = TestProvider::start(
        mgmt.client(),
        ProviderConfig {
            provision_delay: Duration::from_millis(200),
            workload: Some(work.client()),
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("test provider starts");
    let ns = mgmt.temp_namespace().await.expect("namespace");
    let cluster = provider::create_cluster(
        &mgmt.client(),
        &ClusterSetup::new(&ns, "work", work.kubeconfig()),
    )
    .await
    .expect("Cluster provisioned and initialized");
    fixtures(&mgmt.client(), &ns).await;
    let (machines, _) = launch(&mgmt.client(), &cluster, "m-1", json!({}), data_secret()).await;
    wait_obj(
        &machines,
        "m-1",
        "Machine Running with a Node in the workload cluster",
        Duration::from_secs(90),
        |m| (m.data["status"]["phase"] == "Running").then_some(()),
    )
    .await;
    let work_nodes: Api<Node> = Api::all(work.client());
    let mgmt_nodes: Api<Node> = Api::all(mgmt.client());
    assert!(work_nodes.get_opt("m-1").await.expect("get").is_some());
    assert!(mgmt_nodes.get_opt("m-1").await.expect("get").is_none());
    machines
        .delete("m-1", &DeleteParams::default())
        .await
        .expect("Machine deleted");
    wait_for(
        "Machine and workload Node gone",
        Duration::from_secs(90),
        || async {
            let m = machines.get_opt("m-1").await.ok()?;
            let n = work_nodes.get_opt("m-1").await.ok()?;
            (m.is_none() && n.is_none()).then_some(())
        },
    )
    .await
    .expect("deleted");
}
