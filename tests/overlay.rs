//! NodeOverlays end to end on the testbed: an overlay pricing the `large` template below
//! `small` flips the template a pending pod's NodeClaim launches from; an overlay adding an
//! extended resource lets a pod requesting it get a NodeClaim; equal-weight overlays on the
//! same offerings conflict as Karpenter decides it; the status messages, the gauge and the
//! NodeClaim annotations say what was applied.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::wait_for;

const TEMPLATE: &str = "karpenter.cluster.x-k8s.io/instance-template";

fn overlays(c: &Client) -> Api<DynamicObject> {
    Api::all_with(
        c.clone(),
        &ar("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays"),
    )
}

async fn create_overlay(client: &Client, name: &str, spec: Value) {
    overlays(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                "metadata": {"name": name}, "spec": spec,
            })),
        )
        .await
        .expect("overlay");
}

/// Waits for `name`'s ValidationSucceeded to be `status`; its (reason, message).
async fn validation(client: &Client, name: &str, status: &str) -> (String, String) {
    wait_for(
        &format!("{name} ValidationSucceeded={status}"),
        Duration::from_secs(30),
        || async {
            let o = overlays(client).get(name).await.ok()?;
            let conditions = o.data["status"]["conditions"].as_array()?.clone();
            let c = conditions
                .iter()
                .find(|c| c["type"] == "ValidationSucceeded")?;
            (c["status"] == status).then(|| {
                (
                    c["reason"].as_str().unwrap_or_default().to_string(),
                    c["message"].as_str().unwrap_or_default().to_string(),
                )
            })
        },
    )
    .await
    .expect("overlay condition")
}

/// The first NodeClaim launched (its template label set) that is not in `seen` (the tests
/// create one pending pod at a time, each waiting for the previous one's claim); added to
/// `seen`.
async fn next_launched_claim(client: &Client, seen: &mut Vec<String>) -> DynamicObject {
    let known = seen.clone();
    let claim = wait_for("a new NodeClaim launched", Duration::from_secs(120), || {
        let known = known.clone();
        async move {
            nodeclaims(client)
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|c| c.labels().contains_key(TEMPLATE) && !known.contains(&c.name_any()))
        }
    })
    .await
    .expect("a launched NodeClaim");
    seen.push(claim.name_any());
    claim
}

async fn deploy(client: &Client, ns: &str, d: Deployment) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .expect("deployment");
}

/// One pod of 500m that may not share a node with the pods of `apart`.
fn one_pod(name: &str, apart: &[&str], extra_requests: Value) -> Deployment {
    let mut d = deployment(
        name,
        1,
        "500m",
        "256Mi",
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": apart}]}}]}}}),
    );
    let mut v = serde_json::to_value(&d).expect("json");
    let resources = &mut v["spec"]["template"]["spec"]["containers"][0]["resources"];
    if let (Some(r), Some(e)) = (
        resources["requests"].as_object_mut(),
        extra_requests.as_object(),
    ) && !e.is_empty()
    {
        r.extend(e.clone());
        // Extended resources are not overcommitted: their limit equals the request.
        resources["limits"] = extra_requests.clone();
    }
    d = from_json(v);
    d
}

#[tokio::test]
async fn overlays_reprice_templates_add_resources_and_report_conflicts() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_nodepool(&client, json!({"cpu": "100"})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");

    // Without overlays a 500m pod launches on `small` (0.10 < 0.40), unmarked.
    deploy(&client, &ns, one_pod("before", &["after"], json!({}))).await;
    let mut seen = Vec::new();
    let before = next_launched_claim(&client, &mut seen).await;
    assert_eq!(before.labels()[TEMPLATE], "small");
    assert!(
        !before
            .annotations()
            .contains_key("karpenter.sh/price-overlay-applied")
    );

    // `large` priced below `small`: the next pod's NodeClaim launches on `large`.
    create_overlay(
        &client,
        "cheap-large",
        json!({"requirements": [{"key": TEMPLATE, "operator": "In", "values": ["large"]}],
               "price": "0.01", "weight": 10}),
    )
    .await;
    let (reason, message) = validation(&client, "cheap-large", "True").await;
    assert_eq!(reason, "ValidationSucceeded");
    assert_eq!(message, "Applied to 2 offerings", "large in two zones");
    // The NodeClass's summary shows the price in effect, at once (not at its next minute).
    wait_for(
        "large at 0.0100 in the NodeClass status",
        Duration::from_secs(15),
        || async {
            let nc = nodeclasses(&client).get("default").await.ok()?;
            nc.data["status"]["instanceTypes"]
                .as_array()?
                .iter()
                .any(|it| it["name"] == "large" && it["price"] == "0.0100")
                .then_some(())
        },
    )
    .await
    .expect("the NodeClass status shows the overlay's price");
    deploy(&client, &ns, one_pod("after", &["before"], json!({}))).await;
    let after = next_launched_claim(&client, &mut seen).await;
    assert_eq!(
        after.labels()[TEMPLATE],
        "large",
        "the overlay flipped the choice"
    );
    assert_eq!(
        after.annotations()["karpenter.sh/price-overlay-applied"],
        "true"
    );
    assert!(
        !after
            .annotations()
            .contains_key("karpenter.sh/capacity-overlay-applied")
    );

    // A pod requesting an extended resource no template has: unschedulable until an
    // overlay adds it to `large`.
    deploy(
        &client,
        &ns,
        one_pod(
            "fuse",
            &["before", "after"],
            json!({"example.com/fuse": "1"}),
        ),
    )
    .await;
    let pods = Api::namespaced(client.clone(), &ns);
    wait_for(
        "fuse pod unschedulable",
        Duration::from_secs(60),
        || async {
            let p = pods_of(&pods, "fuse").await.into_iter().next()?;
            events_for(&client, &p.name_any())
                .await
                .iter()
                .any(|(r, m)| r == "FailedScheduling" && m.starts_with("Failed to schedule pod"))
                .then_some(())
        },
    )
    .await
    .expect("our FailedScheduling event for the fuse pod");
    create_overlay(
        &client,
        "fuse",
        json!({"requirements": [{"key": TEMPLATE, "operator": "In", "values": ["large"]}],
               "capacity": {"example.com/fuse": "4"}, "weight": 10}),
    )
    .await;
    validation(&client, "fuse", "True").await;
    let fuse = next_launched_claim(&client, &mut seen).await;
    assert_eq!(fuse.labels()[TEMPLATE], "large");
    assert_eq!(
        fuse.annotations()["karpenter.sh/capacity-overlay-applied"],
        "true"
    );
    // Its capacity (launched from the overlaid catalog) carries the overlay's resource.
    wait_for(
        "fuse in the NodeClaim's capacity",
        Duration::from_secs(60),
        || async {
            let c = nodeclaims(&client).get(&fuse.name_any()).await.ok()?;
            (c.data["status"]["capacity"]["example.com/fuse"] == "4").then_some(())
        },
    )
    .await
    .expect("status.capacity example.com/fuse: 4");

    // Equal weights on the same offerings: the later name is walked first and applies;
    // the other conflicts, naming it (Karpenter marks only the one walked second).
    for (name, price) in [("conflict-a", "0.02"), ("conflict-b", "0.03")] {
        create_overlay(
            &client,
            name,
            json!({"requirements": [{"key": TEMPLATE, "operator": "In", "values": ["small"]}],
                   "price": price, "weight": 5}),
        )
        .await;
    }
    let (reason, message) = validation(&client, "conflict-a", "False").await;
    assert_eq!(reason, "Conflict");
    assert!(
        message.contains("conflict-b") && message.contains("price of small"),
        "{message}"
    );
    validation(&client, "conflict-b", "True").await;
    let ready = overlays(&client).get("conflict-a").await.expect("overlay");
    assert_eq!(condition(&ready, "Ready").as_deref(), Some("False"));

    // The gauge: offerings each overlay selects.
    let page = scrape(env.metrics_addr).await;
    for (name, n) in [("cheap-large", 2), ("fuse", 2), ("conflict-a", 2)] {
        let series =
            format!("karpenter_capi_nodeoverlay_matched_offerings{{nodeoverlay=\"{name}\"}} {n}");
        assert!(page.contains(&series), "{series} in\n{page}");
    }
}
