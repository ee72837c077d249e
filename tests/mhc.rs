//! MachineHealthCheck coexistence on the testbed (the real Cluster API manager, its
//! MachineHealthCheck controller included). With the operator's repair at 3 s: a NodeClaim
//! whose Machine no MHC selects is repaired by us (the positive control); a NodeClaim whose
//! Machine an MHC selects is not — our repair says it defers to that MHC (naming it) — until
//! the MHC judges the Node unhealthy (its own 8 s timeout) and asks the Machine's owner to
//! remediate (`OwnerRemediated=False`): the operator, as that owner, replaces the node exactly
//! once and the pod runs again. Then a Machine deleted behind our back (as an external
//! remediator does) gets its NodeClaim cleaned up and its pod re-provisioned promptly.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::{Options, wait_for};

fn health_checks(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachineHealthCheck"),
            "machinehealthchecks",
        ),
    )
}

fn machines(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &testbed::provider::machine_resource())
}

/// The NodeClaims of NodePool `default`, listed (a failed list fails the test).
async fn pool_claims(client: &Client) -> Vec<DynamicObject> {
    nodeclaims(client)
        .list(&ListParams::default().labels("karpenter.sh/nodepool=default"))
        .await
        .expect("list NodeClaims")
        .items
}

/// The one live NodeClaim of the pool once it is initialized, with its Node.
async fn initialized_claim(client: &Client, not: &[String]) -> (String, String) {
    wait_for(
        "an initialized NodeClaim",
        Duration::from_secs(60),
        || async {
            pool_claims(client).await.into_iter().find_map(|c| {
                let fresh = !not.contains(&c.name_any()) && c.metadata.deletion_timestamp.is_none();
                let node = c.data["status"]["nodeName"].as_str()?.to_string();
                (fresh && condition(&c, "Initialized").as_deref() == Some("True"))
                    .then(|| (c.name_any(), node))
            })
        },
    )
    .await
    .expect("initialized NodeClaim")
}

async fn web_running_on(pods: &Api<Pod>, node: &str) -> bool {
    pods_of(pods, "web")
        .await
        .iter()
        .any(|p| running(p) && node_of(p) == node)
}

fn said(events: &[(String, String)], reason: &str, text: &str) -> usize {
    events
        .iter()
        .filter(|(r, n)| r == reason && n.contains(text))
        .count()
}

#[tokio::test]
async fn a_machine_health_check_owns_remediation_of_the_machines_it_selects() {
    let env = env_tuned(
        default_templates(json!({})),
        Identity::Admin,
        Options::all(),
        |c| c.node_repair_after = Duration::from_secs(3),
    )
    .await;
    let client = env.tb.client();
    let cns = env.cluster.namespace.clone();
    let mhc_name = format!("{cns}/workers");
    // Selects the Machines of NodePool `default` (they carry its label), not the control's.
    health_checks(&client, &cns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
                "metadata": {"name": "workers"},
                "spec": {
                    "clusterName": "c1",
                    "selector": {"matchLabels": {"karpenter.sh/nodepool": "default"}},
                    "checks": {"nodeStartupTimeoutSeconds": 0, "unhealthyNodeConditions": [
                        {"type": "Ready", "status": "False", "timeoutSeconds": 8},
                        {"type": "Ready", "status": "Unknown", "timeoutSeconds": 8}]}
                }
            }))
            .expect("mhc"),
        )
        .await
        .expect("create MachineHealthCheck");
    create_nodepool(&client, json!({})).await;
    // The positive control: a NodeClaim of another pool, its Machine not selected.
    let mut control = nodeclaim("control", json!([]));
    control.metadata.labels = Some([("karpenter.sh/nodepool".into(), "unwatched".into())].into());
    nodeclaims(&client)
        .create(&PostParams::default(), &control)
        .await
        .expect("control claim");
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &deployment("web", 1, "1", "1Gi", json!({})),
        )
        .await
        .expect("deployment");
    let (first, first_node) = initialized_claim(&client, &[]).await;
    wait_for("web Running", Duration::from_secs(30), || async {
        web_running_on(&pods, &first_node).await.then_some(())
    })
    .await
    .expect("web runs");
    let control_node = wait_for("control initialized", Duration::from_secs(60), || async {
        let c = nodeclaims(&client)
            .get("control")
            .await
            .expect("read the control");
        (condition(&c, "Initialized").as_deref() == Some("True"))
            .then(|| c.data["status"]["nodeName"].as_str().map(str::to_string))
            .flatten()
    })
    .await
    .expect("control initialized");

    // Both Nodes break.
    let broken = Instant::now();
    tokio::join!(
        break_node(&client, &control_node),
        break_node(&client, &first_node)
    );
    // Ours repairs the control...
    wait_for("the control repaired", Duration::from_secs(30), || async {
        let c = nodeclaims(&client)
            .get_opt("control")
            .await
            .expect("read the control");
        let events = events_for(&client, "control").await;
        (c.is_none_or(|c| c.metadata.deletion_timestamp.is_some())
            && said(&events, "NodeRepair", "replacing it") == 1)
            .then_some(())
    })
    .await
    .expect("our repair acts where no MHC selects the Machine");
    // ...and declines the MHC's node, naming the MHC, while the MHC still waits (8 s).
    wait_for("our repair defers", Duration::from_secs(30), || async {
        let events = events_for(&client, &first).await;
        (said(
            &events,
            "NodeRepairDeferred",
            &format!("MachineHealthCheck {mhc_name}"),
        ) > 0)
            .then_some(())
    })
    .await
    .expect("NodeRepairDeferred naming the MachineHealthCheck");
    // The NodeClaim's status names the remediator too; the control's does not.
    wait_for(
        "ExternalRemediation naming the MHC",
        Duration::from_secs(30),
        || async {
            let c = nodeclaims(&client).get(&first).await.expect("claim");
            (condition(&c, "ExternalRemediation").as_deref() == Some("True")
                && condition_field(&c, "ExternalRemediation", "message")
                    .is_some_and(|m| m.contains(&format!("MachineHealthCheck {mhc_name}"))))
            .then_some(())
        },
    )
    .await
    .expect("the NodeClaim's ExternalRemediation condition");
    if let Some(control) = nodeclaims(&client)
        .get_opt("control")
        .await
        .expect("read the control")
    {
        assert_eq!(condition(&control, "ExternalRemediation"), None);
    }
    let c = nodeclaims(&client).get(&first).await.expect("claim");
    let events = events_for(&client, &first).await;
    assert!(
        c.metadata.deletion_timestamp.is_none()
            || said(&events, "NodeRepair", "HealthCheckSucceeded=False") == 1,
        "only the MHC's verdict replaces its node ({:?} after the break): {events:?}",
        broken.elapsed()
    );

    // The MHC judges it and asks the owner: the operator replaces it, once.
    wait_for("the MHC's remediation", Duration::from_secs(40), || async {
        let events = events_for(&client, &first).await;
        (said(&events, "NodeRepair", "HealthCheckSucceeded=False") == 1).then_some(())
    })
    .await
    .expect("replaced for the MachineHealthCheck");
    let remediated = broken.elapsed();
    assert!(
        remediated >= Duration::from_secs(8),
        "not before the MHC's own timeout: {remediated:?}"
    );
    let (second, second_node) = initialized_claim(&client, std::slice::from_ref(&first)).await;
    wait_for("web Running again", Duration::from_secs(60), || async {
        web_running_on(&pods, &second_node).await.then_some(())
    })
    .await
    .expect("web runs on the replacement");
    let events = events_for(&client, &first).await;
    assert_eq!(said(&events, "NodeRepair", ""), 1, "one repair: {events:?}");
    // (The remediated one may still be terminating: its pod, on a Node no kubelet runs, is
    // waited for a minute past its deletion, as Karpenter's drain does.)
    let live: Vec<String> = pool_claims(&client)
        .await
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| c.name_any())
        .collect();
    assert_eq!(live, vec![second.clone()], "one replacement, nothing else");
    let metrics = scrape(env.metrics_addr).await;
    let repaired = |condition: &str| {
        metrics
            .lines()
            .filter(|l| l.starts_with("karpenter_nodeclaims_unhealthy_disrupted_total{"))
            .filter(|l| l.contains(&format!("condition=\"{condition}\"")))
            .filter(|l| l.contains("nodepool=\"default\""))
            .map(|l| {
                l.rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or_else(|| panic!("unparsable metric line: {l}"))
            })
            .sum::<f64>()
    };
    assert_eq!(repaired("HealthCheckSucceeded"), 1.0, "{metrics}");
    assert_eq!(
        repaired("Ready"),
        0.0,
        "our policy replaced nothing of the pool"
    );

    // A Machine deleted behind our back (an external remediator's way): its NodeClaim is
    // cleaned up and the pod re-provisioned promptly (the Machine watch, not a GC pass).
    let machine = machine_name(&second);
    let deleted = Instant::now();
    machines(&client, &cns)
        .delete(&machine, &DeleteParams::default())
        .await
        .expect("delete Machine");
    let replacement = wait_for("a new NodeClaim", Duration::from_secs(30), || async {
        pool_claims(&client)
            .await
            .into_iter()
            .find(|c| ![&first, &second].contains(&&c.name_any()))
            .map(|_| deleted.elapsed())
    })
    .await
    .expect("a NodeClaim for the evicted pod");
    let (third, third_node) = initialized_claim(&client, &[first.clone(), second.clone()]).await;
    wait_for(
        "web Running a third time",
        Duration::from_secs(60),
        || async { web_running_on(&pods, &third_node).await.then_some(()) },
    )
    .await
    .expect("web runs after the Machine's deletion");
    let machine_gone = wait_for("the Machine gone", Duration::from_secs(30), || async {
        machines(&client, &cns)
            .get_opt(&machine)
            .await
            .expect("read the Machine")
            .is_none()
            .then(|| deleted.elapsed())
    })
    .await
    .expect("Cluster API deletes the Machine");
    wait_for("its NodeClaim gone", Duration::from_secs(30), || async {
        nodeclaims(&client)
            .get_opt(&second)
            .await
            .expect("read the NodeClaim")
            .is_none()
            .then_some(())
    })
    .await
    .expect("the NodeClaim of the deleted Machine is gone");
    let took = deleted.elapsed();
    println!(
        "Machine deleted -> new NodeClaim after {replacement:?}, Machine gone after {machine_gone:?}, {third} running and {second} gone after {took:?}; remediation {remediated:?} after the break"
    );
    // The pod, evicted by Cluster API's drain, is planned in the next batch window (10 s
    // at most); the NodeClaim follows its Machine on the Machine watch.
    assert!(
        replacement < Duration::from_secs(20),
        "re-provisioned promptly: {replacement:?}"
    );
    assert!(
        took.saturating_sub(machine_gone) < Duration::from_secs(10),
        "the NodeClaim follows its Machine: {took:?} vs {machine_gone:?}"
    );
    wait_for(
        "the remediated NodeClaim gone",
        Duration::from_secs(90),
        || async {
            nodeclaims(&client)
                .get_opt(&first)
                .await
                .expect("read the NodeClaim")
                .is_none()
                .then_some(())
        },
    )
    .await
    .expect("the remediated NodeClaim is gone");
    health_checks(&client, &cns)
        .delete("workers", &DeleteParams::default())
        .await
        .expect("delete MachineHealthCheck");
}
