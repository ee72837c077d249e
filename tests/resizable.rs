//! Resizable templates end to end on the testbed: a TestMachineTemplate with resizable
//! ranges and no capacity → the catalog's synthetic sizes → a pending pod gets a NodeClaim
//! shrunk to the smallest size that holds it → the TestMachine clone carries that size (the
//! template is not edited) → the Node registers with that capacity. A pod above the largest
//! size is refused with an event.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider;
use testbed::wait_for;

/// The resizable TestMachineTemplate `flex` (2-32 vCPU by 2, 4-128Gi by 4Gi, cheaper than
/// the fixed `small`/`large`), once the NodeClass offers its sizes.
async fn create_flex(client: &Client, ns: &str) {
    create_resizable(
        client,
        ns,
        "flex",
        "2-32/2",
        json!({}),
        json!({"pods": "110"}),
    )
    .await;
}

/// A resizable TestMachineTemplate `name` (memory 4-128Gi by 4Gi, cheap) with `extra`
/// annotations and the clone's `capacity`, once the NodeClass offers its sizes.
async fn create_resizable(
    client: &Client,
    ns: &str,
    name: &str,
    cpu: &str,
    extra: Value,
    capacity: Value,
) {
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &provider::test_machine_template_resource(),
    );
    let mut annotations = json!({
        "karpenter.cluster.x-k8s.io/resizable-cpu": cpu,
        "karpenter.cluster.x-k8s.io/resizable-memory": "4Gi-128Gi/4Gi",
        "karpenter.cluster.x-k8s.io/price-per-cpu": "0.01",
        "karpenter.cluster.x-k8s.io/price-per-gib": "0.001"});
    if let (Some(a), Some(e)) = (annotations.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    let t: DynamicObject = from_json(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
        "metadata": {"name": name,
            "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
            "annotations": annotations},
        "spec": {"template": {"spec": {"capacity": capacity}}}
    }));
    templates
        .create(&PostParams::default(), &t)
        .await
        .expect("template");
    let prefix = format!("{name}-");
    wait_for("the sizes offered", Duration::from_secs(60), || async {
        let nc = nodeclasses(client).get("default").await.ok()?;
        let types = nc.data["status"]["instanceTypes"].as_array()?.clone();
        types
            .iter()
            .any(|t| t["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .then_some(())
    })
    .await
    .expect("the NodeClass offers the template's sizes");
}

/// The sizes of the NodeClaims not being deleted, sorted.
async fn claim_sizes(client: &Client) -> Option<Vec<String>> {
    let l = nodeclaims(client).list(&ListParams::default()).await.ok()?;
    let mut sizes: Vec<String> = l
        .items
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| {
            c.annotations()
                .get("karpenter.cluster.x-k8s.io/size")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    sizes.sort();
    Some(sizes)
}

/// A template whose Nodes always get 3Gi of memory (its explicit field map writes the
/// size's memory elsewhere): the first Node, asked 4Gi, registers 1Gi short; the NodeClass
/// records the correction and the next claim, which 4Gi would have held, gets 8Gi.
#[tokio::test]
async fn calibration_bumps_the_next_size() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let fields = "cpu=spec.template.spec.capacity.cpu:quantity,memory=spec.template.spec.memoryAsked:quantity";
    create_resizable(
        &client,
        &env.cluster.namespace,
        "shy",
        "2-8/2",
        json!({"karpenter.cluster.x-k8s.io/resizable-fields": fields}),
        json!({"pods": "110", "memory": "3Gi"}),
    )
    .await;
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    create_deployment(&client, &ns, deployment("a", 1, "1", "1Gi", json!({}))).await;
    all_running(&client, &ns, 1, 120).await;
    assert_eq!(
        claim_sizes(&client).await,
        Some(vec!["cpu=2,memory=4Gi".to_string()])
    );
    wait_for(
        "the correction recorded",
        Duration::from_secs(120),
        || async {
            let nc = nodeclasses(&client).get("default").await.ok()?;
            (nc.data["status"]["resizeCorrections"]
                == json!([{"template": "shy", "cpu": "0", "memory": "1Gi"}]))
            .then_some(())
        },
    )
    .await
    .expect("status.resizeCorrections of shy");
    // 1.5 cpu / 2200Mi: 4Gi (2.43Gi allocatable) would hold it, 3Gi (1.43Gi) does not; the
    // first Node has 1 cpu left.
    create_deployment(
        &client,
        &ns,
        deployment("b", 1, "1500m", "2200Mi", json!({})),
    )
    .await;
    all_running(&client, &ns, 2, 120).await;
    assert_eq!(
        claim_sizes(&client).await,
        Some(vec![
            "cpu=2,memory=4Gi".to_string(),
            "cpu=2,memory=8Gi".to_string()
        ])
    );
}

async fn create_deployment(client: &Client, ns: &str, d: Deployment) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .expect("deployment");
}

/// A pod of 6.5 cpu / 21Gi: the cheapest grid size that holds it is `flex-10c-32gi`; the
/// NodeClaim is shrunk to 8 vCPU / 24Gi (overhead included), and everything downstream has
/// that size.
#[tokio::test]
async fn a_pending_pod_gets_a_machine_of_the_shrunk_size() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let capi_ns = env.cluster.namespace.clone();
    create_flex(&client, &capi_ns).await;
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    create_deployment(
        &client,
        &ns,
        deployment("fit", 1, "6500m", "21Gi", json!({})),
    )
    .await;
    // 40 cpu: above flex's 32 and large's 8.
    create_deployment(&client, &ns, deployment("huge", 1, "40", "1Gi", json!({}))).await;
    let running = all_running(&client, &ns, 1, 120).await;
    let node_name = node_of(&running[0]);

    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    assert_eq!(claims.len(), 1, "one NodeClaim, none for the huge pod");
    let claim = &claims[0];
    assert_eq!(
        claim
            .annotations()
            .get("karpenter.cluster.x-k8s.io/size")
            .map(String::as_str),
        Some("cpu=8,memory=24Gi")
    );
    let it_req = claim.data["spec"]["requirements"]
        .as_array()
        .and_then(|rs| {
            rs.iter()
                .find(|r| r["key"] == "node.kubernetes.io/instance-type")
        })
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(it_req["values"][0], "flex-8c-24gi", "{it_req}");
    assert_eq!(
        claim
            .labels()
            .get("node.kubernetes.io/instance-type")
            .map(String::as_str),
        Some("flex-8c-24gi")
    );
    assert_eq!(claim.data["status"]["capacity"]["cpu"], "8");
    assert_eq!(claim.data["status"]["capacity"]["memory"], "24Gi");

    // The clone has the size; the template is untouched.
    let machine = machine_name(&claim.name_any());
    let infra: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &capi_ns, &provider::test_machine_resource());
    let clone = infra.get(&machine).await.expect("TestMachine");
    assert_eq!(clone.data["spec"]["capacity"]["cpu"], "8");
    assert_eq!(clone.data["spec"]["capacity"]["memory"], "24Gi");
    assert_eq!(clone.data["spec"]["capacity"]["pods"], "110");
    assert_eq!(
        clone
            .annotations()
            .get("karpenter.cluster.x-k8s.io/size")
            .map(String::as_str),
        Some("cpu=8,memory=24Gi")
    );
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &capi_ns, &provider::machine_resource());
    let m = machines.get(&machine).await.expect("Machine");
    assert_eq!(
        m.annotations()
            .get("karpenter.cluster.x-k8s.io/size")
            .map(String::as_str),
        Some("cpu=8,memory=24Gi")
    );
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &capi_ns,
        &provider::test_machine_template_resource(),
    );
    let t = templates.get("flex").await.expect("template");
    assert_eq!(
        t.data["spec"]["template"]["spec"]["capacity"],
        json!({"pods": "110"})
    );

    // The Node has the size.
    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .expect("node");
    let cap = node.status.and_then(|s| s.capacity).unwrap_or_default();
    assert_eq!(cap.get("cpu").map(|q| q.0.as_str()), Some("8"));
    assert_eq!(cap.get("memory").map(|q| q.0.as_str()), Some("24Gi"));

    // The huge pod stays Pending with an event naming its problem.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let huge = pods_of(&pods, "huge").await;
    let huge = huge.first().expect("huge pod").name_any();
    // The operator's own event, naming the one resource no size has enough of (not any
    // note that mentions cpu: the scheduler's "Insufficient cpu" would do for that).
    let want = "Failed to schedule pod, nodepool \"default\": no instance type has enough cpu";
    let found = wait_for("the huge pod's event", Duration::from_secs(30), || async {
        events_for(&client, &huge)
            .await
            .iter()
            .any(|(reason, note)| reason == "FailedScheduling" && note == want)
            .then_some(())
    })
    .await;
    if let Err(e) = found {
        panic!(
            "{e}: want {want:?}, have {:?}",
            events_for(&client, &huge).await
        );
    }
}

/// Waits until `n` pods of `ns` run (at most `secs`) and returns them.
async fn all_running(client: &Client, ns: &str, n: usize, secs: u64) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for("pods running", Duration::from_secs(secs), || async {
        let l = pods.list(&ListParams::default()).await.ok()?.items;
        let r: Vec<Pod> = l.into_iter().filter(running).collect();
        (r.len() >= n).then_some(r)
    })
    .await
    .expect("pods running")
}

/// Three pods of 2 cpu / 6Gi share one node shrunk to 8 vCPU / 20Gi; scaled down to one,
/// consolidation replaces it with a node of the smaller size that holds it: 4 vCPU / 8Gi.
#[tokio::test]
async fn consolidation_shrinks_a_node_after_pods_leave() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_flex(&client, &env.cluster.namespace).await;
    create_consolidating_nodepool(&client).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    create_deployment(&client, &ns, deployment("w", 3, "2", "6Gi", json!({}))).await;
    all_running(&client, &ns, 3, 120).await;
    assert_eq!(
        claim_sizes(&client).await,
        Some(vec!["cpu=8,memory=20Gi".to_string()])
    );
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .patch(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale down");
    wait_for("the node shrunk", Duration::from_secs(180), || async {
        (claim_sizes(&client).await? == vec!["cpu=4,memory=8Gi".to_string()]).then_some(())
    })
    .await
    .expect("one NodeClaim of 4 vCPU / 8Gi");
    // The pod moves to the new node once the old one is drained.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "the pod on the shrunk node",
        Duration::from_secs(120),
        || async {
            let p = pods_of(&pods, "w").await;
            let [p] = p.as_slice() else { return None };
            if !running(p) {
                return None;
            }
            let node = Api::<Node>::all(client.clone())
                .get(&node_of(p))
                .await
                .ok()?;
            (node
                .labels()
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str)
                == Some("flex-4c-8gi"))
            .then_some(())
        },
    )
    .await
    .expect("the remaining pod runs on a flex-4c-8gi node");
}
