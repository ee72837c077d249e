//! Devices through Dynamic Resource Allocation on the testbed (issue 37), with the test
//! provider playing a DRA driver (a Node of a template that declares devices publishes their
//! ResourceSlice) and kube-scheduler allocating the claims: a `gpu` template declaring 2
//! devices with Cluster Autoscaler's annotations, and a cheaper CPU-only `cpu` template.
//! - the control: 2 pods without claims go to the `cpu` template;
//! - a Deployment of 2 pods each claiming 2 GPUs through a ResourceClaimTemplate: two
//!   NodeClaims on `gpu` (one pod each: a node has 2), the pods Running with their claims
//!   allocated, nothing more launched on `cpu` (and nothing placed on the control's `cpu`
//!   node, which has room for them but no devices).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::wait_for;

const DRIVER: &str = "gpu.testbed.example.com";
const WAIT: Duration = Duration::from_secs(60);

fn templates() -> Vec<Tpl> {
    vec![
        ("cpu", "4", "16Gi", "0.10", json!({})),
        (
            "gpu",
            "4",
            "16Gi",
            "0.90",
            json!({
                "capacity.cluster-autoscaler.kubernetes.io/dra-driver": DRIVER,
                "capacity.cluster-autoscaler.kubernetes.io/gpu-count": "2",
            }),
        ),
    ]
}

/// The DeviceClass of the driver's devices, and a ResourceClaimTemplate of 2 of them.
fn class_and_claim_template() -> String {
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {DRIVER}}}
spec: {{selectors: [{{cel: {{expression: 'device.driver == "{DRIVER}"'}}}}]}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: two-gpus}}
spec: {{spec: {{devices: {{requests: [{{name: gpus, exactly: {{deviceClassName: {DRIVER}, count: 2}}}}]}}}}}}
---
"#
    )
}

/// A Deployment `name` of 2 pods of 500m, each claiming 2 GPUs when `claims`.
fn deployment(name: &str, claims: bool) -> String {
    let (pod_claims, container_claims) = match claims {
        true => (
            "\n      resourceClaims: [{name: gpus, resourceClaimTemplateName: two-gpus}]",
            ", claims: [{name: gpus}]",
        ),
        false => ("", ""),
    };
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:{pod_claims}
      terminationGracePeriodSeconds: 0
      containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 500m, memory: 128Mi}}{container_claims}}}}}]
---
"#
    )
}

/// The pods of `app` in `ns`, once there are 2 and both run.
async fn running_app(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default().labels(&format!("app={app}"));
    let got = wait_for(&format!("2 pods of {app} Running"), WAIT, || async {
        let l = pods.list(&params).await.ok()?.items;
        (l.len() == 2 && l.iter().all(running)).then_some(l)
    })
    .await;
    match got {
        Ok(l) => l,
        Err(e) => panic!("{e}: {}", state(client, ns).await),
    }
}

/// Every NodeClaim's name with its instance type (template).
async fn claims_by_type(client: &Client) -> BTreeSet<(String, String)> {
    list(&nodeclaims(client), &ListParams::default())
        .await
        .iter()
        .map(|c: &DynamicObject| {
            let t = c
                .labels()
                .get("node.kubernetes.io/instance-type")
                .cloned()
                .unwrap_or_default();
            (c.name_any(), t)
        })
        .collect()
}

/// What the cluster looks like, for a failure message.
async fn state(client: &Client, ns: &str) -> String {
    format!(
        "pods {:?}; nodeclaims {:?}",
        pod_places(client, ns).await,
        claims_by_type(client).await,
    )
}

/// The devices allocated to `pod`'s claim `gpus` (pool, device).
async fn allocated(client: &Client, ns: &str, pod: &Pod) -> BTreeSet<(String, String)> {
    let claim = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .and_then(|s| s.iter().find(|s| s.name == "gpus"))
        .and_then(|s| s.resource_claim_name.clone())
        .unwrap_or_else(|| panic!("pod {} has no claim", pod.name_any()));
    let claim = Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .get(&claim)
        .await
        .unwrap_or_else(|e| panic!("claim {claim}: {e}"));
    claim
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.pool, r.device))
        .collect()
}

#[tokio::test]
async fn pods_claiming_gpus_get_nodes_of_the_gpu_template() {
    let env = env(templates()).await;
    let client = env.tb.client();
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");

    // The control: the same pods without claims go to the cheaper CPU-only template.
    env.tb
        .apply_yaml(&deployment("plain", false), &ns)
        .await
        .expect("plain Deployment");
    running_app(&client, &ns, "plain").await;
    let before = claims_by_type(&client).await;
    assert!(
        !before.is_empty() && before.iter().all(|(_, t)| t == "cpu"),
        "pods without claims on the cpu template: {before:?}"
    );

    env.tb
        .apply_yaml(
            &[class_and_claim_template(), deployment("gpus", true)].concat(),
            &ns,
        )
        .await
        .expect("DeviceClass, ResourceClaimTemplate and Deployment");
    let pods = running_app(&client, &ns, "gpus").await;
    let after = claims_by_type(&client).await;
    let new: Vec<&(String, String)> = after.difference(&before).collect();
    assert!(
        new.len() == 2 && new.iter().all(|(_, t)| t == "gpu"),
        "two NodeClaims on the gpu template: {new:?} (before {before:?})"
    );
    assert!(before.is_subset(&after), "the control's claims stay");
    let nodes: BTreeSet<String> = pods.iter().map(node_of).collect();
    assert_eq!(nodes.len(), 2, "one pod a GPU node: {nodes:?}");
    for p in &pods {
        let devices = allocated(&client, &ns, p).await;
        let node = node_of(p);
        let want: BTreeSet<(String, String)> = ["gpu-0", "gpu-1"]
            .iter()
            .map(|d| (node.clone(), d.to_string()))
            .collect();
        assert_eq!(
            devices,
            want,
            "{}'s claim allocated on {node}",
            p.name_any()
        );
    }
}
