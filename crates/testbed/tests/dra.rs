//! The test provider plays a DRA driver on the testbed: a Node made from a template that
//! declares devices (Cluster Autoscaler's dra-driver with gpu-count, or the resource-slices
//! annotation) gets its ResourceSlice (`spec.nodeName` the Node, pool the Node's name,
//! devices `gpu-0…`), kube-scheduler allocates a pod's claim from it and kwok runs the pod,
//! and the slice goes with the Node. A Node from a template without devices gets none (the
//! control), and a pod whose claim asks for more devices than there are stays pending.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use testbed::provider::{self, ProviderConfig, TestProvider, slice_name};
use testbed::{Options, Testbed, wait_for};

const DRIVER: &str = "gpu.testbed.example.com";
const WAIT: Duration = Duration::from_secs(40);

#[tokio::test]
async fn nodes_of_device_templates_publish_slices_and_claims_are_allocated() {
    let tb = Testbed::start(Options::all())
        .await
        .expect("testbed starts");
    let client = tb.client();
    // resource.k8s.io/v1 is served (DRA is GA in 1.36).
    let groups = client.list_api_groups().await.expect("API groups");
    let resource = groups.groups.iter().find(|g| g.name == "resource.k8s.io");
    assert!(
        resource.is_some_and(|g| g.versions.iter().any(|v| v.version == "v1")),
        "resource.k8s.io/v1 is served"
    );
    let _provider = TestProvider::start(
        client.clone(),
        ProviderConfig {
            provision_delay: Duration::from_millis(200),
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("test provider starts");
    let cluster = provider::setup_cluster(&tb, "c1", &["zone-a"])
        .await
        .expect("Cluster ready");
    let ca = format!(
        "capacity.cluster-autoscaler.kubernetes.io/dra-driver: {DRIVER}, capacity.cluster-autoscaler.kubernetes.io/gpu-count: \"2\""
    );
    let copied = format!(
        "karpenter.cluster.x-k8s.io/resource-slices: '[{{driver: {DRIVER}, devices: [{{name: big-0, attributes: {{model: {{string: h100}}}}}}]}}]'"
    );
    let machines = [
        machine(&cluster.name, "gpus", &ca),
        machine(&cluster.name, "copied", &copied),
        machine(&cluster.name, "plain", ""),
    ]
    .concat();
    tb.apply_yaml(&machines, &cluster.namespace)
        .await
        .expect("templates, TestMachines and Machines");

    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let gpus = wait_slice(&slices, "gpus").await;
    assert_eq!(gpus.spec.node_name.as_deref(), Some("gpus"));
    assert_eq!(gpus.spec.pool.name, "gpus");
    assert_eq!(gpus.spec.driver, DRIVER);
    let names: Vec<String> = gpus
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| d.name.clone())
        .collect();
    assert_eq!(names, ["gpu-0", "gpu-1"]);
    let copied = wait_slice(&slices, "copied").await;
    let dev = &copied.spec.devices.as_ref().expect("devices")[0];
    assert_eq!(dev.name, "big-0");
    // The control: the plain template's Node exists and has no slice.
    wait_for("node plain", WAIT, || async {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        nodes.get_opt("plain").await.ok().flatten().map(|_| ())
    })
    .await
    .expect("node plain");
    let all = slices.list(&Default::default()).await.expect("slices");
    assert!(
        all.iter()
            .all(|s| s.spec.node_name.as_deref() != Some("plain")),
        "no slice for a template without devices"
    );

    // kube-scheduler allocates a claim of 2 GPUs from the gpus Node; one of 3 stays pending.
    let ns = tb.temp_namespace().await.expect("namespace");
    let workload = [
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {DRIVER}}}\nspec: {{selectors: [{{cel: {{expression: 'device.driver == \"{DRIVER}\"'}}}}]}}\n---\n"
        ),
        claim_and_pod("two", 2),
        claim_and_pod("three", 3),
    ]
    .concat();
    tb.apply_yaml(&workload, &ns).await.expect("workload");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let ran = wait_for("pod two to run on gpus", WAIT, || async {
        let p = pods.get("two").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")
            && p.spec?.node_name.as_deref() == Some("gpus"))
        .then_some(())
    })
    .await;
    if let Err(e) = ran {
        let status = pods.get("two").await.ok().and_then(|p| p.status);
        panic!("{e}: {status:?}");
    }
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
    let two = claims.get("two").await.expect("claim two");
    let results = two
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .expect("claim two allocated");
    let devices: std::collections::BTreeSet<(&str, &str)> = results
        .iter()
        .map(|r| (r.pool.as_str(), r.device.as_str()))
        .collect();
    assert_eq!(devices, [("gpus", "gpu-0"), ("gpus", "gpu-1")].into());
    let three = pods.get("three").await.expect("pod three");
    assert_eq!(
        three.spec.and_then(|s| s.node_name),
        None,
        "no node has 3 GPUs"
    );

    // Deleting the TestMachine deletes its Node and the slice.
    let machines = test_machines(&client, &cluster.namespace);
    machines
        .delete("gpus", &DeleteParams::default())
        .await
        .expect("delete TestMachine");
    wait_for("slice of gpus gone", WAIT, || async {
        slices
            .get_opt(&slice_name("gpus", DRIVER))
            .await
            .ok()
            .and_then(|s| s.is_none().then_some(()))
    })
    .await
    .expect("slice deleted with its Node");
    // The control: the other Node's slice stays.
    assert!(
        slices
            .get_opt(&slice_name("copied", DRIVER))
            .await
            .expect("get")
            .is_some()
    );
}

async fn wait_slice(slices: &Api<ResourceSlice>, node: &str) -> ResourceSlice {
    let name = slice_name(node, DRIVER);
    wait_for(&format!("slice {name}"), WAIT, || async {
        slices.get_opt(&name).await.ok().flatten()
    })
    .await
    .expect("slice published")
}

fn test_machines(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta2", "TestMachine");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// A claim of `count` devices of the class, and a pod using it.
fn claim_and_pod(name: &str, count: u32) -> String {
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}}}
spec: {{devices: {{requests: [{{name: gpus, exactly: {{deviceClassName: {DRIVER}, count: {count}}}}}]}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  resourceClaims: [{{name: gpus, resourceClaimName: {name}}}]
  tolerations: [{{operator: Exists}}]
  containers: [{{name: c, image: busybox, resources: {{claims: [{{name: gpus}}]}}}}]
---
"#
    )
}

/// A template `name` with `annotations` (one flow-map body) and its Machine, in zone-a.
fn machine(cluster: &str, name: &str, annotations: &str) -> String {
    let spec = r#"{instanceType: test.gpu, capacity: {cpu: "4", memory: 16Gi, pods: "110"}}"#;
    provider::orphan_machine_yaml(cluster, (name, name), annotations, spec, "zone-a")
}
