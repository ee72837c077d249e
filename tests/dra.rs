//! Devices through Dynamic Resource Allocation on the testbed (issue 37), with the test
//! provider playing a DRA driver (a Node of a template that declares devices publishes their
//! ResourceSlice) and kube-scheduler allocating the claims: a `gpu` template declaring 2
//! devices with Cluster Autoscaler's annotations, and a cheaper CPU-only `cpu` template.
//! - the control: 2 pods without claims go to the `cpu` template;
//! - a Deployment of 2 pods each claiming 2 GPUs through a ResourceClaimTemplate: two
//!   NodeClaims on `gpu` (one pod each: a node has 2), the pods Running with their claims
//!   allocated, nothing more launched on `cpu` (and nothing placed on the control's `cpu`
//!   node, which has room for them but no devices); both NodeClaims wait for the driver
//!   (`karpenter.sh/requested-dra-drivers`), the control's for none;
//! - a driver that never publishes (the `gpu-late` template, whose Nodes' driver publishes no
//!   ResourceSlice): its NodeClaims register but stay `Initialized=Unknown` with reason
//!   `DRADriverPoolsNotPublished` and a Warning Event, their pods Pending and nothing more
//!   launched; once the test publishes the slices as the driver would, they initialize and
//!   the pods run.
//!
//! And consolidation: a pod with claims moves only to a node where its claims can be
//! allocated (its own test, with a 4-GPU template).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::wait_for;

const DRIVER: &str = "gpu.testbed.example.com";
const REQUESTED: &str = "karpenter.sh/requested-dra-drivers";
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
                testbed::provider::REAL_SLICES_ANNOTATION: real_gpus(),
            }),
        ),
        (
            "gpu-late",
            "4",
            "16Gi",
            "0.95",
            json!({
                "capacity.cluster-autoscaler.kubernetes.io/dra-driver": DRIVER,
                "capacity.cluster-autoscaler.kubernetes.io/gpu-count": "2",
                testbed::provider::NO_SLICES_ANNOTATION: "true",
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
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: two-a100s}}
spec: {{spec: {{devices: {{requests: [{{name: gpus, exactly: {{deviceClassName: {DRIVER}, count: 2,
  selectors: [{{cel: {{expression: 'device.attributes["{DRIVER}"].model == "a100"'}}}}]}}}}]}}}}}}
---
"#
    )
}

/// What the `gpu` template's Nodes really publish: its 2 declared GPUs, each with a model.
fn real_gpus() -> String {
    json!([{"driver": DRIVER, "devices": [
        {"name": "gpu-0", "attributes": {"model": {"string": "a100"}}},
        {"name": "gpu-1", "attributes": {"model": {"string": "a100"}}}
    ]}])
    .to_string()
}

/// A Deployment `name` of 2 pods of 500m, each claiming devices from ResourceClaimTemplate
/// `claims` when given, on nodes of template `on` when given.
fn deployment(name: &str, claims: Option<&str>, on: Option<&str>) -> String {
    deployment_of(name, 2, claims, on)
}

/// [`deployment`] of `replicas` pods.
fn deployment_of(name: &str, replicas: usize, claims: Option<&str>, on: Option<&str>) -> String {
    let (pod_claims, container_claims) = match claims {
        Some(t) => (
            format!("\n      resourceClaims: [{{name: gpus, resourceClaimTemplateName: {t}}}]"),
            ", claims: [{name: gpus}]",
        ),
        None => (String::new(), ""),
    };
    let selector = on
        .map(|t| format!("\n      nodeSelector: {{node.kubernetes.io/instance-type: {t}}}"))
        .unwrap_or_default();
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:{pod_claims}{selector}
      terminationGracePeriodSeconds: 0
      containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 500m, memory: 128Mi}}{container_claims}}}}}]
---
"#
    )
}

/// The pods of `app` in `ns`, once there are 2 and both run.
async fn running_app(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    running_n(client, ns, app, 2).await
}

/// The pods of `app` in `ns`, once there are `n` and all run.
async fn running_n(client: &Client, ns: &str, app: &str, n: usize) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = ListParams::default().labels(&format!("app={app}"));
    let got = wait_for(&format!("{n} pods of {app} Running"), WAIT, || async {
        let l = list(&pods, &params).await;
        (l.len() == n && l.iter().all(running)).then_some(l)
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
        .map(|c: &DynamicObject| (c.name_any(), instance_type(c)))
        .collect()
}

/// A NodeClaim's instance type (template).
fn instance_type(c: &DynamicObject) -> String {
    c.labels()
        .get("node.kubernetes.io/instance-type")
        .cloned()
        .unwrap_or_default()
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
        .apply_yaml(&deployment("plain", None, None), &ns)
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
            &[
                class_and_claim_template(),
                deployment("gpus", Some("two-gpus"), None),
            ]
            .concat(),
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

    // Each GPU NodeClaim waits for the driver its devices come from; the control's for none.
    for c in list(&nodeclaims(&client), &ListParams::default()).await {
        let want = new
            .iter()
            .any(|(n, _)| *n == c.name_any())
            .then_some(DRIVER);
        assert_eq!(
            c.annotations().get(REQUESTED).map(String::as_str),
            want,
            "{}",
            c.name_any()
        );
    }

    // Learning: the `gpu` template declares GPUs without attributes (Cluster Autoscaler's
    // form); its Nodes published each GPU's model, which the NodeClass status keeps and later
    // solves use: pods selecting `model == "a100"` get new `gpu` nodes (the declared devices
    // have no model, so without learning no template could take them).
    let learned = wait_for("the gpu template's devices learned", WAIT, || async {
        let nc = match nodeclasses(&client).get("default").await {
            Ok(nc) => nc,
            Err(e) => panic!("NodeClass default: {e}"),
        };
        let status = &nc.data["status"];
        let entry = status["learnedDevices"]
            .as_array()?
            .iter()
            .find(|l| l["template"] == "gpu")?
            .clone();
        let gpu_type = status["instanceTypes"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == "gpu")?
            .clone();
        (gpu_type["deviceSource"] == "Learned").then_some((entry, status.clone()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        learned.0["resourceSlices"]
            .as_str()
            .is_some_and(|s| s.contains("a100")),
        "{:?}",
        learned.0
    );
    let declared = learned.1["instanceTypes"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "gpu-late"))
        .map(|t| t["deviceSource"].clone());
    assert_eq!(
        declared,
        Some(json!("Declared")),
        "gpu-late launched nothing yet"
    );
    let before = claims_by_type(&client).await;
    env.tb
        .apply_yaml(&deployment("a100", Some("two-a100s"), None), &ns)
        .await
        .expect("Deployment selecting a100s");
    running_app(&client, &ns, "a100").await;
    let after_a100 = claims_by_type(&client).await;
    let new: Vec<&(String, String)> = after_a100.difference(&before).collect();
    assert!(
        new.len() == 2 && new.iter().all(|(_, t)| t == "gpu"),
        "two more NodeClaims on the learned gpu template: {new:?}"
    );

    // A driver that never publishes: the NodeClaims register and wait, the pods with them.
    env.tb
        .apply_yaml(&deployment("late", Some("two-gpus"), Some("gpu-late")), &ns)
        .await
        .expect("Deployment on gpu-late");
    let late = wait_for(
        "2 gpu-late NodeClaims waiting for the driver",
        WAIT,
        || async {
            let late: Vec<DynamicObject> = list(&nodeclaims(&client), &ListParams::default())
                .await
                .into_iter()
                .filter(|c| instance_type(c) == "gpu-late")
                .collect();
            let waiting = |c: &DynamicObject| {
                condition(c, "Registered").as_deref() == Some("True")
                    && condition_field(c, "Initialized", "reason").as_deref()
                        == Some("DRADriverPoolsNotPublished")
            };
            (late.len() == 2 && late.iter().all(waiting)).then_some(late)
        },
    )
    .await;
    let late = match late {
        Ok(l) => l,
        Err(e) => panic!("{e}: {}", state(&client, &ns).await),
    };
    let pods = pods_of(&Api::namespaced(client.clone(), &ns), "late").await;
    assert!(
        pods.len() == 2 && pods.iter().all(|p| !running(p)),
        "no pod runs before its devices are published: {}",
        state(&client, &ns).await
    );
    for c in &late {
        let name = c.name_any();
        let warned = wait_for(&format!("{name}'s Event"), WAIT, || async {
            events_for(&client, &name)
                .await
                .iter()
                .any(|(r, note)| r == "DRADriverPoolsNotPublished" && note.contains(DRIVER))
                .then_some(())
        })
        .await;
        if let Err(e) = warned {
            panic!("{e}: {:?}", events_for(&client, &name).await);
        }
    }
    // The driver comes up late: it publishes each Node's slice, as the provider does.
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    for c in &late {
        let node = c.data["status"]["nodeName"]
            .as_str()
            .expect("registered")
            .to_string();
        let slice: ResourceSlice = from_json(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": testbed::provider::slice_name(&node, DRIVER)},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}
        }));
        slices
            .create(&PostParams::default(), &slice)
            .await
            .expect("publish the slice");
    }
    running_app(&client, &ns, "late").await;
    // The pods may run a moment before the lifecycle's write of `Initialized` lands.
    let initialized = wait_for("initialized once published", WAIT, || async {
        let now: Vec<DynamicObject> = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .expect("nodeclaims")
            .items
            .into_iter()
            .filter(|c| instance_type(c) == "gpu-late")
            .collect();
        assert_eq!(now.len(), 2, "nothing more launched while waiting");
        now.iter()
            .all(|c| condition(c, "Initialized").as_deref() == Some("True"))
            .then_some(())
    })
    .await;
    if let Err(e) = initialized {
        panic!("{e}: {}", state(&client, &ns).await);
    }
}

/// Consolidation moves a pod with claims only where its claims can be allocated: two `gpu4`
/// nodes (4 GPUs each) each run one pod claiming 2 GPUs (the second launched while the first
/// node was cordoned); once both are schedulable, consolidation deletes one and its pod moves
/// to the other's 2 free GPUs — not to the cheaper CPU-only node that has room for it but no
/// devices. Before consolidation planned devices, such nodes were never candidates and both
/// stayed.
#[tokio::test]
async fn consolidation_keeps_claiming_pods_on_nodes_with_their_devices() {
    let env = env(vec![
        ("cpu", "4", "16Gi", "0.10", json!({})),
        (
            "gpu4",
            "4",
            "16Gi",
            "0.90",
            json!({
                "capacity.cluster-autoscaler.kubernetes.io/dra-driver": DRIVER,
                "capacity.cluster-autoscaler.kubernetes.io/gpu-count": "4",
            }),
        ),
    ])
    .await;
    let client = env.tb.client();
    create_consolidating_nodepool(&client).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    // A CPU-only node with room (for the pods' cpu, not their devices). Its pod may not be
    // disrupted: deleting this node (its pod fits the GPU node left) would be a consolidation
    // of its own, racing the check below that it still runs here.
    let plain_yaml = deployment_of("plain", 1, None, None).replace(
        "metadata: {labels: {app: plain}}",
        "metadata: {labels: {app: plain}, annotations: {karpenter.sh/do-not-disrupt: \"true\"}}",
    );
    assert!(plain_yaml.contains("do-not-disrupt"), "{plain_yaml}");
    env.tb
        .apply_yaml(&plain_yaml, &ns)
        .await
        .expect("plain Deployment");
    let plain = running_n(&client, &ns, "plain", 1).await;
    let cpu_node = node_of(&plain[0]);
    env.tb
        .apply_yaml(
            &[
                class_and_claim_template(),
                deployment_of("gpu-a", 1, Some("two-gpus"), None),
            ]
            .concat(),
            &ns,
        )
        .await
        .expect("gpu-a");
    let a = node_of(&running_n(&client, &ns, "gpu-a", 1).await[0]);
    // The second pod gets a node of its own while the first is cordoned.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let cordon = |on: bool| {
        let nodes = nodes.clone();
        let a = a.clone();
        async move {
            nodes
                .patch(
                    &a,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"unschedulable": on}})),
                )
                .await
                .expect("cordon");
        }
    };
    cordon(true).await;
    env.tb
        .apply_yaml(&deployment_of("gpu-b", 1, Some("two-gpus"), None), &ns)
        .await
        .expect("gpu-b");
    let b = node_of(&running_n(&client, &ns, "gpu-b", 1).await[0]);
    assert_ne!(a, b, "the second pod on a node of its own");
    let gpu4 = |all: &BTreeSet<(String, String)>| all.iter().filter(|(_, t)| t == "gpu4").count();
    assert_eq!(gpu4(&claims_by_type(&client).await), 2);
    cordon(false).await;

    // Consolidation: one gpu4 node goes, its pod joins the other.
    let one = wait_for("one gpu4 node left", Duration::from_secs(120), || async {
        let all = claims_by_type(&client).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let claiming: Vec<Pod> = list(&pods, &ListParams::default())
            .await
            .into_iter()
            .filter(|p| p.labels().get("app").is_some_and(|a| a.starts_with("gpu-")))
            .collect();
        let placed: BTreeSet<String> = claiming.iter().map(node_of).collect();
        (gpu4(&all) == 1
            && claiming.len() == 2
            && claiming.iter().all(running)
            && placed.len() == 1)
            .then_some(claiming)
    })
    .await;
    let claiming = match one {
        Ok(p) => p,
        Err(e) => panic!("{e}: {}", state(&client, &ns).await),
    };
    let node = node_of(&claiming[0]);
    assert_ne!(node, cpu_node, "not on the CPU-only node");
    let mut devices = BTreeSet::new();
    for p in &claiming {
        let got = allocated(&client, &ns, p).await;
        assert_eq!(got.len(), 2, "{}: {got:?}", p.name_any());
        assert!(
            got.iter().all(|(pool, _)| *pool == node),
            "{got:?} on {node}"
        );
        devices.extend(got);
    }
    assert_eq!(devices.len(), 4, "four distinct GPUs: {devices:?}");
    assert!(
        running_n(&client, &ns, "plain", 1).await[0]
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            == Some(cpu_node.as_str()),
        "the CPU-only node keeps its pod"
    );
}
