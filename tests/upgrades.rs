//! Upgrades end to end on the testbed (the real Cluster API manager, the test provider whose
//! TestControlPlane reports `status.version` per the control-plane contract): (a) while the
//! control plane upgrades (`spec.version` ahead of `status.version`) a scale-out launches no
//! Machine — the hold (`ControlPlaneIsStable`) shows on the NodeClaim, as an event and a
//! metric — and launches the moment the control plane catches up; with the check skipped the
//! Machine gets the version the control plane runs, never the one it is going to; (b) a
//! version bump drifts no node until the control plane has the new version, then the nodes
//! roll, the waiting ones tainted `node.cluster.x-k8s.io/outdated-revision:PreferNoSchedule`.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::mirror::Mirror;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider::{self, CONTROL_PLANE_VERSION_ANNOTATION};
use testbed::wait_for;

const OUTDATED: &str = "node.cluster.x-k8s.io/outdated-revision";
const SKIP: &str = "machineset.cluster.x-k8s.io/skip-preflight-checks";

fn control_planes(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &provider::test_control_plane_resource())
}

fn machines(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &provider::machine_resource())
}

async fn patch(api: &Api<DynamicObject>, name: &str, body: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

/// Sets the control plane's `spec.version` and the version it runs (`None`: it follows
/// `spec.version` at once), and waits until its `status.version` says so.
async fn control_plane(client: &Client, ns: &str, desired: &str, running: Option<&str>) {
    let cps = control_planes(client, ns);
    patch(
        &cps,
        "c1",
        json!({"metadata": {"annotations": {CONTROL_PLANE_VERSION_ANNOTATION: running}},
               "spec": {"version": desired}}),
    )
    .await;
    let want = running.unwrap_or(desired).to_string();
    wait_for(
        &format!("control plane running {want}"),
        Duration::from_secs(30),
        || async {
            let cp = cps.get("c1").await.ok()?;
            (cp.data["status"]["version"].as_str() == Some(want.as_str())).then_some(())
        },
    )
    .await
    .expect("control plane status");
}

/// The `(reason, status)` of a NodeClaim's `Launched` condition.
fn launched(c: &DynamicObject) -> Option<(String, String)> {
    c.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == "Launched")
        .map(|x| {
            (
                x["reason"].as_str().unwrap_or_default().to_string(),
                x["status"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// The Kubernetes versions of the NodePool's Machines, sorted.
/// Each NodeClaim's conditions and disruption annotations, for a failure's message.
fn claim_states(mirror: &Mirror) -> String {
    let mut out = String::new();
    for c in mirror.claims() {
        let conditions: Vec<String> = c.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| {
                format!(
                    "{}={}({}: {})",
                    k["type"].as_str().unwrap_or_default(),
                    k["status"].as_str().unwrap_or_default(),
                    k["reason"].as_str().unwrap_or_default(),
                    k["message"].as_str().unwrap_or_default()
                )
            })
            .collect();
        let annotations: Vec<&String> = c.annotations().keys().collect();
        let command = c
            .labels()
            .get("karpenter.cluster.x-k8s.io/disruption-command")
            .cloned();
        out.push_str(&format!(
            "  {} created={:?} deleting={} command={command:?} annotations={annotations:?} {}\n",
            c.name_any(),
            c.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            c.metadata.deletion_timestamp.is_some(),
            conditions.join(" ")
        ));
    }
    out
}

async fn machine_versions(client: &Client, ns: &str) -> Option<Vec<String>> {
    let list = machines(client, ns)
        .list(&ListParams::default().labels("karpenter.sh/nodepool=default"))
        .await
        .ok()?;
    let mut v: Vec<String> = list
        .items
        .iter()
        .map(|m| m.data["spec"]["version"].as_str().unwrap_or("").to_string())
        .collect();
    v.sort();
    Some(v)
}

fn one_per_node(app: &str) -> Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]}}})
}

async fn running_count(pods: &Api<Pod>, app: &str) -> usize {
    pods_of(pods, app)
        .await
        .iter()
        .filter(|p| running(p))
        .count()
}

/// (a) A control plane upgrading holds launches (`ControlPlaneIsStable`): the NodeClaim says
/// so, an event and the metric count it, and no Machine exists; once the control plane runs
/// its new version the Machine launches (at that version) at once and the pod runs. With the
/// check skipped on the NodeClass, a launch during the next upgrade gets the version the
/// control plane runs, not the one it is going to.
#[tokio::test]
async fn launches_wait_for_an_upgrading_control_plane() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let cns = env.cluster.namespace.clone();
    create_nodepool(&client, json!({})).await;
    // Upgrading: wants v1.36.0, runs v1.35.2.
    control_plane(&client, &cns, "v1.36.0", Some("v1.35.2")).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 1, "1", "1Gi", one_per_node("web")),
        )
        .await
        .expect("deployment");

    // The hold: on the NodeClaim, as an event, in the metric; no Machine.
    let held = wait_for(
        "a NodeClaim held by ControlPlaneIsStable",
        Duration::from_secs(60),
        || async {
            let list = nodeclaims(&client)
                .list(&ListParams::default())
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|c| launched(c) == Some(("ControlPlaneIsStable".into(), "Unknown".into())))
        },
    )
    .await
    .expect("held");
    let name = held.name_any();
    let message = held.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Launched"))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("upgrading to v1.36.0"),
        "the hold says why: {message}"
    );
    wait_for("the hold's event", Duration::from_secs(30), || async {
        events_for(&client, &name)
            .await
            .iter()
            .any(|(reason, _)| reason == "ControlPlaneIsStable")
            .then_some(())
    })
    .await
    .expect("a ControlPlaneIsStable event on the NodeClaim");
    let metrics = scrape(env.metrics_addr).await;
    let holds: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                r#"karpenter_capi_preflight_holds_total{check="ControlPlaneIsStable",nodepool="default"} "#,
            )
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(holds >= 1.0, "the hold is counted: {holds}");
    assert_eq!(
        machine_versions(&client, &cns).await,
        Some(vec![]),
        "no Machine while the control plane upgrades"
    );
    assert_eq!(running_count(&pods, "web").await, 0);

    // The control plane catches up: the Machine launches at once, at the new version.
    let released = Instant::now();
    control_plane(&client, &cns, "v1.36.0", None).await;
    wait_for("the Machine", Duration::from_secs(30), || async {
        (machine_versions(&client, &cns).await? == vec!["v1.36.0".to_string()]).then_some(())
    })
    .await
    .expect("a Machine at v1.36.0");
    let launched_after = released.elapsed();
    assert!(
        launched_after < Duration::from_secs(15),
        "the launch follows the control plane's change, not a poll: {launched_after:?}"
    );
    wait_for("the pod Running", Duration::from_secs(60), || async {
        (running_count(&pods, "web").await == 1).then_some(())
    })
    .await
    .expect("pod Running");
    eprintln!("launched {launched_after:?} after the control plane caught up");

    // Opt-out: ControlPlaneIsStable skipped during the next upgrade; the new Machine gets
    // what the control plane runs (v1.36.0), never what it is going to (v1.37.0).
    control_plane(&client, &cns, "v1.37.0", Some("v1.36.0")).await;
    patch(
        &nodeclasses(&client),
        "default",
        json!({"metadata": {"annotations": {SKIP: "ControlPlaneIsStable"}}}),
    )
    .await;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale out");
    wait_for("two pods Running", Duration::from_secs(90), || async {
        (running_count(&pods, "web").await == 2).then_some(())
    })
    .await
    .expect("the second pod Running, its launch not held");
    assert_eq!(
        machine_versions(&client, &cns).await,
        Some(vec!["v1.36.0".to_string(), "v1.36.0".to_string()]),
        "launched at the running version"
    );
    // Leave the shared Cluster's control plane as it was (no version).
    patch(
        &control_planes(&client, &cns),
        "c1",
        json!({"metadata": {"annotations": {CONTROL_PLANE_VERSION_ANNOTATION: null}},
               "spec": {"version": null}}),
    )
    .await;
}

/// (b) The control plane's version bump drifts nothing until it runs that version (a
/// scale-out meanwhile is held, which shows the operator saw the upgrade); then every node
/// rolls, one at a time, the waiting ones tainted outdated-revision:PreferNoSchedule.
#[tokio::test]
async fn a_version_bump_drifts_nodes_after_the_control_plane() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let cns = env.cluster.namespace.clone();
    create_nodepool_with(
        &client,
        json!({}),
        json!({"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}),
    )
    .await;
    control_plane(&client, &cns, "v1.35.0", None).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 3, "1500m", "1Gi", one_per_node("web")),
        )
        .await
        .expect("deployment");
    wait_for("3 pods Running", Duration::from_secs(120), || async {
        (running_count(&pods, "web").await == 3).then_some(())
    })
    .await
    .expect("pods Running");
    let originals: BTreeSet<String> = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(originals.len(), 3);
    assert_eq!(
        machine_versions(&client, &cns).await,
        Some(vec!["v1.35.0".to_string(); 3])
    );

    // The control plane starts upgrading; a scale-out is held, proving the operator saw it.
    let mut mirror = Mirror::start(&client, &ns).await;
    control_plane(&client, &cns, "v1.36.0", Some("v1.35.0")).await;
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale out");
    let drifted = |c: &DynamicObject| condition(c, "Drifted").as_deref() == Some("True");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for c in mirror
            .claims()
            .filter(|c| originals.contains(&c.name_any()))
        {
            assert!(
                !drifted(c),
                "{} drifted while the control plane upgrades",
                c.name_any()
            );
        }
        let held = mirror.claims().any(|c| {
            !originals.contains(&c.name_any())
                && launched(c) == Some(("ControlPlaneIsStable".into(), "Unknown".into()))
        });
        if held {
            break;
        }
        mirror.next(deadline).await.expect("the scale-out held");
    }
    // The control plane runs v1.36.0: the originals drift and roll; a node waiting for its
    // replacement carries the outdated-revision taint.
    control_plane(&client, &cns, "v1.36.0", None).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut tainted_waiting: BTreeSet<String> = BTreeSet::new();
    loop {
        for c in mirror
            .claims()
            .filter(|c| originals.contains(&c.name_any()))
        {
            let node = c.data["status"]["nodeName"].as_str().unwrap_or_default();
            if drifted(c)
                && c.metadata.deletion_timestamp.is_none()
                && !node.is_empty()
                && let Ok(n) = nodes.get(node).await
                && n.spec
                    .and_then(|s| s.taints)
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == OUTDATED && t.effect == "PreferNoSchedule")
            {
                tainted_waiting.insert(c.name_any());
            }
        }
        let done = mirror.claims().all(|c| !originals.contains(&c.name_any()))
            && mirror.pods_of("web").filter(|p| running(p)).count() == 4;
        if done {
            break;
        }
        if let Err(e) = mirror.next(deadline).await {
            let mut events = Vec::new();
            for c in mirror.claims() {
                events.push((c.name_any(), events_for(&client, &c.name_any()).await));
            }
            panic!(
                "not rolled in time ({e}); versions {:?}; claims:\n{}events: {events:?}",
                machine_versions(&client, &cns).await,
                claim_states(&mirror)
            );
        }
    }
    assert!(
        !tainted_waiting.is_empty(),
        "a drifted node waiting for its replacement was tainted {OUTDATED}"
    );
    wait_for(
        "every Machine at v1.36.0",
        Duration::from_secs(30),
        || async {
            (machine_versions(&client, &cns).await? == vec!["v1.36.0".to_string(); 4]).then_some(())
        },
    )
    .await
    .expect("every Machine at the new version");
    eprintln!("tainted while waiting: {tainted_waiting:?}");
    patch(
        &control_planes(&client, &cns),
        "c1",
        json!({"metadata": {"annotations": {CONTROL_PLANE_VERSION_ANNOTATION: null}},
               "spec": {"version": null}}),
    )
    .await;
}
