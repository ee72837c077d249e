//! Drift end to end on the testbed (the real Cluster API manager, the test provider, kwok):
//! a NodeClass version change rolls every node surge-first, one at a time, within the PDB;
//! a template edit drifts only its nodes, and a replacement that never initializes is rolled
//! back; NodePool changes drift what they should and nothing else; budgets and the `Manual`
//! policy keep drifted nodes, and `inspect --why` says so; a template renamed (a copy of the
//! same instance type selected instead) drifts the old template's nodes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::gate::Gate;
use common::mirror::Mirror;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider;
use testbed::wait_for;

const COMMAND: &str = "karpenter.cluster.x-k8s.io/disruption-command";

/// Every NodeClaim; None when the list fails (a wait retries, it never counts a failed list
/// as "no NodeClaims").
async fn claims(client: &Client) -> Option<Vec<DynamicObject>> {
    nodeclaims(client)
        .list(&ListParams::default())
        .await
        .ok()
        .map(|l| l.items)
}

/// Every NodeClaim, outside a wait: a failed list fails the test.
async fn claims_now(client: &Client) -> Vec<DynamicObject> {
    nodeclaims(client)
        .list(&ListParams::default())
        .await
        .expect("list NodeClaims")
        .items
}

/// `(status, reason)` of condition `type_`.
fn cond(obj: &DynamicObject, type_: &str) -> Option<(String, String)> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

fn drift_reason(obj: &DynamicObject) -> Option<String> {
    cond(obj, "Drifted")
        .filter(|(s, _)| s == "True")
        .map(|(_, r)| r)
}

fn deleting(obj: &DynamicObject) -> bool {
    obj.metadata.deletion_timestamp.is_some()
}

fn label(obj: &DynamicObject, key: &str) -> String {
    obj.labels().get(key).cloned().unwrap_or_default()
}

async fn patch(api: &Api<DynamicObject>, name: &str, body: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

/// `n` pods of `app` Running, each on its own node: their NodeClaims, once all Ready.
async fn running_apart(client: &Client, pods: &Api<Pod>, app: &str, n: usize) -> Vec<String> {
    if let Err(e) = wait_for(
        &format!("{n} {app} pods Running"),
        Duration::from_secs(120),
        || async {
            let p = pods_of(pods, app).await;
            (p.iter().filter(|p| running(p)).count() == n).then_some(())
        },
    )
    .await
    {
        panic!("pods Running: {e}\n{}", state_of(client, pods, app).await);
    }
    let nodes: BTreeSet<String> = pods_of(pods, app).await.iter().map(node_of).collect();
    wait_for(
        "their NodeClaims Ready",
        Duration::from_secs(60),
        || async {
            let mine: Vec<DynamicObject> = claims(client)
                .await?
                .into_iter()
                .filter(|c| nodes.contains(c.data["status"]["nodeName"].as_str().unwrap_or("")))
                .collect();
            (mine.len() == n
                && mine
                    .iter()
                    .all(|c| condition(c, "Ready").as_deref() == Some("True")))
            .then(|| mine.iter().map(|c| c.name_any()).collect())
        },
    )
    .await
    .expect("NodeClaims Ready")
}

fn one_per_node(app: &str) -> Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]}}})
}

/// (a) a NodeClass version change rolls 3 nodes surge-first, one at a time, never below the
/// PDB; (b) a template edit drifts only that template's nodes; (e) a replacement that never
/// initializes is rolled back after the timeout (by an operator restarted meanwhile) and the
/// old node keeps serving.
#[tokio::test]
async fn drift_rolls_nodes_surge_first_and_rolls_back_a_failed_replacement() {
    // The operator's default disruption timeout while it rolls (a): a replacement that is slow
    // to initialize on a starved machine is waited for, not rolled back (a rollback holds the
    // node for the 5-minute cooldown). (e) restarts it with a 20 s timeout.
    let mut env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_nodepool_with(
        &client,
        json!({}),
        json!({"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}),
    )
    .await;
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
    Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &from_json(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
            ),
        )
        .await
        .expect("pdb");
    let originals: BTreeSet<String> = running_apart(&client, &pods, "web", 3)
        .await
        .into_iter()
        .collect();

    // (a) The Kubernetes version of the NodeClass changes: every node is rolled. Followed
    // change by change through the pod and NodeClaim watches.
    let mut mirror = Mirror::start(&client, &ns).await;
    let started = Instant::now();
    patch(
        &nodeclasses(&client),
        "default",
        json!({"spec": {"version": "v1.36.0"}}),
    )
    .await;
    let mut checked: BTreeSet<String> = BTreeSet::new();
    let mut min_running = usize::MAX;
    let mut most_busy = 0;
    let mut changes = 0;
    let deadline = started + Duration::from_secs(300);
    loop {
        let all: Vec<&DynamicObject> = mirror.claims().collect();
        let by_name: BTreeMap<String, &DynamicObject> =
            all.iter().map(|c| (c.name_any(), *c)).collect();
        let old: Vec<&DynamicObject> = all
            .iter()
            .filter(|c| originals.contains(&c.name_any()))
            .copied()
            .collect();
        let busy = old
            .iter()
            .filter(|c| deleting(c) || c.annotations().contains_key(COMMAND))
            .count();
        most_busy = most_busy.max(busy);
        assert!(busy <= 1, "budget nodes=1: {busy} disrupted at once");
        for c in old.iter().filter(|c| deleting(c)) {
            if !checked.insert(c.name_any()) {
                continue;
            }
            let record: Value =
                serde_json::from_str(c.annotations().get(COMMAND).expect("command record"))
                    .expect("record JSON");
            let id = record["id"].as_str().expect("id");
            let replacements: Vec<&&DynamicObject> = by_name
                .values()
                .filter(|r| label(r, COMMAND) == id)
                .collect();
            assert_eq!(
                replacements.len(),
                1,
                "{} replaced by one node",
                c.name_any()
            );
            for r in replacements {
                assert_eq!(
                    cond(r, "Initialized").map(|(s, _)| s).as_deref(),
                    Some("True"),
                    "{} deleted before its replacement {} initialized",
                    c.name_any(),
                    r.name_any()
                );
            }
        }
        let running_now = mirror
            .pods_of("web")
            .filter(|p| running(p) && p.metadata.deletion_timestamp.is_none())
            .count();
        min_running = min_running.min(running_now);
        assert!(
            running_now >= 2,
            "PDB maxUnavailable 1: {running_now} of 3 running"
        );
        let done = old.is_empty()
            && all.len() == 3
            && all.iter().all(|c| {
                condition(c, "Ready").as_deref() == Some("True") && drift_reason(c).is_none()
            })
            && running_now == 3;
        if done {
            break;
        }
        if let Err(e) = mirror.next(deadline).await {
            panic!("not rolled in time ({e}); checked {checked:?}");
        }
        changes += 1;
    }
    drop(mirror);
    eprintln!(
        "rolled 3 nodes in {:?} ({changes} changes followed); at most {most_busy} disrupted at once; at least {min_running} of 3 pods running",
        started.elapsed()
    );
    assert_eq!(checked.len(), 3, "every original was replaced first");
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &env.cluster.namespace,
        &provider::machine_resource(),
    );
    wait_for(
        "every Machine on the new version",
        Duration::from_secs(30),
        || async {
            let versions: Vec<String> = machines
                .list(&ListParams::default().labels("karpenter.sh/nodepool=default"))
                .await
                .ok()?
                .items
                .iter()
                .map(|m| m.data["spec"]["version"].as_str().unwrap_or("").to_string())
                .collect();
            (versions == vec!["v1.36.0"; 3]).then_some(())
        },
    )
    .await
    .expect("3 Machines, all v1.36.0");
    let first = checked.iter().next().expect("one").clone();
    let reasons: BTreeSet<String> = events_for(&client, &first)
        .await
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    for want in [
        "DisruptionLaunching",
        "DisruptionWaitingReadiness",
        "DisruptionTerminating",
    ] {
        assert!(reasons.contains(want), "{want} missing: {reasons:?}");
    }

    let metrics = scrape(env.metrics_addr).await;
    for want in [
        r#"karpenter_nodeclaims_drifted_total{type="NodeClassDrifted",nodepool="default"} 3"#,
        r#"karpenter_voluntary_disruption_decisions_total{decision="replace",reason="drifted",consolidation_type=""} 3"#,
        r#"karpenter_nodeclaims_disrupted_total{reason="drifted",nodepool="default"} 3"#,
        r#"karpenter_voluntary_disruption_decisions_by_nodepool_total{nodepool="default",decision="replace",reason="drifted",consolidation_type=""} 3"#,
    ] {
        assert!(metrics.contains(want), "{want} missing:\n{metrics}");
    }
    // The pods on the three drifted nodes when each was disrupted (drift reports no policy).
    let initiated: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with(
                r#"karpenter_pods_disruption_initiated_total{reason="drifted",nodepool="default","#,
            ) && l.contains(r#"consolidation_policy="",termination_mode="graceful"}"#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        initiated >= 1.0,
        "pod disruptions of the drifted nodes counted:\n{metrics}"
    );

    // (b) A node of another template (full: no web pod fits there, so every small node
    // needs a replacement), then an edit of `small`'s spec: only `small` nodes drift. (e) The edit makes replacements that never get a Node: rolled back.
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "solo",
                1,
                "7",
                "1Gi",
                json!({"nodeSelector": {"node.kubernetes.io/instance-type": "large"}}),
            ),
        )
        .await
        .expect("deployment");
    let solo = running_apart(&client, &pods, "solo", 1).await;
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &env.cluster.namespace,
        &provider::test_machine_template_resource(),
    );
    let small: Vec<String> = claims_now(&client)
        .await
        .iter()
        .filter(|c| label(c, "node.kubernetes.io/instance-type") == "small")
        .map(|c| c.name_any())
        .collect();
    assert_eq!(small.len(), 3, "web runs on 3 small nodes");
    patch(
        &templates,
        "small",
        json!({"spec": {"template": {"metadata": {"annotations": {"testbed.cluster.x-k8s.io/no-node": ""}}}}}),
    )
    .await;
    wait_for(
        "small nodes TemplateDrifted",
        Duration::from_secs(30),
        || async {
            let all = claims(&client).await?;
            let drifted = all
                .iter()
                .filter(|c| small.contains(&c.name_any()))
                .filter(|c| drift_reason(c).as_deref() == Some("TemplateDrifted"))
                .count();
            (drifted == small.len()).then_some(())
        },
    )
    .await
    .expect("the 3 small nodes drift");
    let all = claims_now(&client).await;
    let large = all
        .iter()
        .find(|c| c.name_any() == solo[0])
        .expect("solo's claim");
    assert_eq!(drift_reason(large), None, "the large node did not drift");
    // The command is on the objects: an operator restarted while it waits for a replacement
    // that never initializes finds it and rolls it back at the timeout.
    let rolled_back = wait_for("a command in flight", Duration::from_secs(60), || async {
        claims(&client)
            .await?
            .iter()
            .find(|c| small.contains(&c.name_any()) && c.annotations().contains_key(COMMAND))
            .map(|c| c.name_any())
    })
    .await
    .expect("a small node's replacement starts");
    let old = std::mem::replace(&mut env.operator, tokio::spawn(async {}));
    old.abort();
    let _ = old.await;
    env.operator = spawn_operator(operator::RunConfig {
        disruption_timeout: Duration::from_secs(20),
        ..operator_config(&env.tb)
    });
    wait_for(
        "the restarted operator rolls the command back",
        Duration::from_secs(90),
        || async {
            events_for(&client, &rolled_back)
                .await
                .iter()
                .any(|(r, _)| r == "DisruptionRolledBack")
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| {
        panic!("rollback after the 20 s timeout: {e}");
    });
    // Restored: no record, no reason, the Node untainted and still running its pod, the
    // failure noted (no new try for 5 minutes).
    let claim = nodeclaims(&client).get(&rolled_back).await.expect("kept");
    assert!(!deleting(&claim), "the old node is not deleted");
    let node = claim.data["status"]["nodeName"]
        .as_str()
        .expect("node")
        .to_string();
    wait_for("restored", Duration::from_secs(10), || async {
        let c = nodeclaims(&client).get(&rolled_back).await.ok()?;
        let n = Api::<Node>::all(client.clone()).get(&node).await.ok()?;
        let tainted = n
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "karpenter.sh/disrupted");
        (!tainted
            && !c.annotations().contains_key(COMMAND)
            && c.annotations()
                .contains_key("karpenter.cluster.x-k8s.io/disruption-failed")
            && cond(&c, "DisruptionReason").is_none())
        .then_some(())
    })
    .await
    .expect("taint, record and DisruptionReason removed");
    assert!(
        pods_of(&pods, "web")
            .await
            .iter()
            .any(|p| node_of(p) == node && running(p)),
        "the old node keeps serving"
    );
}

/// (c) A NodePool label change drifts every node; a requirement narrowed to zone-a drifts
/// only zone-b nodes; limits, weight and budgets drift nothing. (d) A `Drifted` budget of 0,
/// or the NodeClass policy `Manual`, keeps drifted nodes (condition, events and the verdict
/// only).
#[tokio::test]
async fn nodepool_changes_drift_what_they_change_and_budgets_or_manual_keep_nodes() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_nodepool_with(
        &client,
        json!({}),
        json!({"consolidateAfter": "Never",
               "budgets": [{"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "10"}]}),
    )
    .await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut spec = one_per_node("web");
    spec["topologySpreadConstraints"] = json!([{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]);
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &deployment("web", 4, "1500m", "1Gi", spec),
        )
        .await
        .expect("deployment");
    let names: BTreeSet<String> = running_apart(&client, &pods, "web", 4)
        .await
        .into_iter()
        .collect();
    let zone = |c: &DynamicObject| label(c, "topology.kubernetes.io/zone");
    let pools = nodepools(&client);
    let requirements = |zones: Value| {
        json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}]}}}})
    };
    patch(&pools, "default", requirements(json!(["zone-a", "zone-b"]))).await;

    // Limits, weight and budgets are outside the hash; then the zone requirement narrows.
    patch(
        &pools,
        "default",
        json!({"spec": {"limits": {"cpu": "100"}, "weight": 5, "disruption": {"budgets": [
            {"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "9"}]}}}),
    )
    .await;
    patch(&pools, "default", requirements(json!(["zone-a"]))).await;
    let by_zone = wait_for("zone-b nodes drift", Duration::from_secs(30), || async {
        let all = claims(&client).await?;
        let zone_b: Vec<&DynamicObject> = all.iter().filter(|c| zone(c) == "zone-b").collect();
        (!zone_b.is_empty()
            && zone_b
                .iter()
                .all(|c| drift_reason(c).as_deref() == Some("RequirementsDrifted")))
        .then_some(all)
    })
    .await
    .expect("RequirementsDrifted on zone-b");
    for c in &by_zone {
        if zone(c) == "zone-a" {
            assert_eq!(drift_reason(c), None, "{} in zone-a drifted", c.name_any());
        }
    }
    assert_eq!(by_zone.len(), 4);
    assert_eq!(by_zone.iter().filter(|c| zone(c) == "zone-b").count(), 2);

    // (d) Budget 0 for Drifted: blocked (an event says so), nothing replaced.
    let zone_b: Vec<String> = by_zone
        .iter()
        .filter(|c| zone(c) == "zone-b")
        .map(|c| c.name_any())
        .collect();
    // Each zone-b node: a DisruptionBlocked event, and the same text as its verdict in
    // `inspect --why`.
    let blocked_with = |why: &'static str| {
        let (client, zone_b) = (client.clone(), zone_b.clone());
        let want = format!("drifted (RequirementsDrifted); blocked: {why}");
        async move {
            let said = wait_for(
                why,
                Duration::from_secs(30) + karpenter_core::disruption::status::MESSAGE_REFRESH,
                || async {
                    let rows = karpenter_capi::inspect::collect(&client, &client, None, true)
                        .await
                        .ok()?;
                    for n in &zone_b {
                        let seen = events_for(&client, n)
                            .await
                            .iter()
                            .any(|(r, note)| r == "DisruptionBlocked" && *note == want);
                        let row = rows.iter().find(|r| r.nodeclaim == *n)?;
                        if !seen || row.why.as_deref() != Some(want.as_str()) {
                            return None;
                        }
                    }
                    Some(())
                },
            )
            .await;
            if let Err(e) = said {
                let rows = karpenter_capi::inspect::collect(&client, &client, None, true).await;
                panic!("DisruptionBlocked and inspect --why {want:?}: {e}; {rows:?}");
            }
        }
    };
    blocked_with("budget Drifted: 0 allowed").await;
    let untouched = |all: &[DynamicObject]| {
        all.len() == 4
            && all.iter().all(|c| {
                names.contains(&c.name_any())
                    && !deleting(c)
                    && cond(c, "DisruptionReason").is_none()
            })
    };
    assert!(
        untouched(&claims_now(&client).await),
        "nothing replaced under budget 0"
    );

    // Policy Manual, budget open: still nothing replaced.
    patch(
        &nodeclasses(&client),
        "default",
        json!({"spec": {"drift": {"policy": "Manual"}}}),
    )
    .await;
    patch(
        &pools,
        "default",
        json!({"spec": {"disruption": {"budgets": [{"nodes": "10"}]}}}),
    )
    .await;
    blocked_with("its NodeClass's drift policy is Manual: delete the NodeClaim to replace it")
        .await;
    assert!(
        untouched(&claims_now(&client).await),
        "nothing replaced under Manual"
    );

    // A template label change drifts every node (NodePoolDrifted comes first); undoing both
    // changes clears the condition everywhere.
    patch(
        &pools,
        "default",
        json!({"spec": {"template": {"metadata": {"labels": {"team": "api"}}}}}),
    )
    .await;
    wait_for(
        "every node NodePoolDrifted",
        Duration::from_secs(30),
        || async {
            let all = claims(&client).await?;
            (all.len() == names.len()
                && all
                    .iter()
                    .all(|c| drift_reason(c).as_deref() == Some("NodePoolDrifted")))
            .then_some(())
        },
    )
    .await
    .expect("NodePoolDrifted");
    patch(
        &pools,
        "default",
        json!({"spec": {"template": {"metadata": {"labels": {"team": "web"}}}}}),
    )
    .await;
    patch(&pools, "default", requirements(json!(["zone-a", "zone-b"]))).await;
    wait_for("no drift left", Duration::from_secs(30), || async {
        let all = claims(&client).await?;
        (all.len() == names.len() && all.iter().all(|c| cond(c, "Drifted").is_none())).then_some(())
    })
    .await
    .expect("Drifted removed when nothing holds");
    assert!(untouched(&claims_now(&client).await));

    // (f) A template renamed as Cluster API advises: a copy under a new name publishes the
    // same instance type, and the NodeClass's `machineTemplateSelector` leaves the old one
    // out (it keeps its opt-in label, so it is neither gone nor unindexed). The instance type
    // is still offered (no core reason holds), yet the nodes cloned from the old template are
    // TemplateDrifted, "no longer selected"; Manual keeps them.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &env.cluster.namespace,
        &provider::test_machine_template_resource(),
    );
    let copy: DynamicObject = from_json(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
        "metadata": {"name": "small-v2",
            "labels": {"node.cluster.x-k8s.io/karpenter-member": "",
                       "node.kubernetes.io/instance-type": "small"},
            "annotations": {"karpenter.cluster.x-k8s.io/price": "0.10"}},
        "spec": {"template": {"spec": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}}
    }));
    templates
        .create(&PostParams::default(), &copy)
        .await
        .expect("small-v2");
    templates
        .patch_status(
            "small-v2",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"cpu": "2", "memory": "4Gi"},
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}})),
        )
        .await
        .expect("small-v2 status");
    patch(
        &templates,
        "small",
        json!({"metadata": {"labels": {"generation": "v1"}}}),
    )
    .await;
    patch(
        &nodeclasses(&client),
        "default",
        json!({"spec": {"machineTemplateSelector": {"matchExpressions": [
            {"key": "generation", "operator": "NotIn", "values": ["v1"]}]}}}),
    )
    .await;
    let drifted_message = |c: &DynamicObject| {
        c.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|x| x["type"] == "Drifted"))
            .and_then(|x| x["message"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let renamed = wait_for(
        "the old template's nodes TemplateDrifted",
        Duration::from_secs(30),
        || async {
            let all = claims(&client).await?;
            let small: Vec<&DynamicObject> = all
                .iter()
                .filter(|c| label(c, "node.kubernetes.io/instance-type") == "small")
                .collect();
            (!small.is_empty()
                && small.iter().all(|c| {
                    drift_reason(c).as_deref() == Some("TemplateDrifted")
                        && drifted_message(c).contains("no longer selected")
                }))
            .then_some(all)
        },
    )
    .await
    .expect("TemplateDrifted (no longer selected) after the rename");
    for c in &renamed {
        if label(c, "node.kubernetes.io/instance-type") != "small" {
            assert_eq!(drift_reason(c), None, "{} drifted", c.name_any());
        }
    }
    assert!(untouched(&claims_now(&client).await), "Manual keeps them");

    // (g) A command whose start is refused: a gate refuses the `disrupted` taint on the
    // small nodes' Nodes, then the policy goes back to Replace. The start fails before any
    // replacement is asked for, so the record comes off at once with an event that says so
    // (not 30 s later as "replacement(s) failed or vanished"), marked failed (a refusal is
    // not transient, so the node cools down); no replacement is created and the reason is
    // cleared.
    let small_claims: BTreeMap<String, String> = renamed
        .iter()
        .filter(|c| label(c, "node.kubernetes.io/instance-type") == "small")
        .map(|c| {
            let node = c.data["status"]["nodeName"].as_str().expect("nodeName");
            (c.name_any(), node.to_string())
        })
        .collect();
    let quoted: Vec<String> = small_claims.values().map(|n| format!("'{n}'")).collect();
    let expression = format!(
        "!(object.metadata.name in [{}]) || !has(object.spec.taints) \
         || !object.spec.taints.exists(t, t.key == 'karpenter.sh/disrupted')",
        quoted.join(", ")
    );
    let probe_node = small_claims.values().next().expect("a small node").clone();
    let probe = || {
        let (client, node) = (client.clone(), probe_node.clone());
        async move {
            let api: Api<Node> = Api::all(client);
            let mut taints = api
                .get(&node)
                .await?
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default();
            taints.push(from_json(
                json!({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}),
            ));
            let dry_run = PatchParams {
                dry_run: true,
                ..PatchParams::default()
            };
            api.patch(
                &node,
                &dry_run,
                &Patch::Merge(json!({"spec": {"taints": taints}})),
            )
            .await
            .map(|_| ())
        }
    };
    let gate = Gate::close(
        &client,
        "drift-refuse-disrupted-taint",
        json!([{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["nodes"]}]),
        &expression,
        "drift gate: no disrupted taint here",
        &probe,
    )
    .await;
    let mut mirror = Mirror::start(&client, &ns).await;
    patch(
        &nodeclasses(&client),
        "default",
        json!({"spec": {"drift": {"policy": "Replace"}}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let refused = loop {
        for c in mirror.claims() {
            assert!(
                names.contains(&c.name_any()),
                "{} created although no start got past the taint",
                c.name_any()
            );
        }
        let mut found = None;
        for claim in small_claims.keys() {
            let events = events_for(&client, claim).await;
            if let Some((_, note)) = events.iter().find(|(r, _)| r == "DisruptionRolledBack") {
                found = Some((claim.clone(), note.clone()));
            }
        }
        if let Some(found) = found {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no small node's disruption was rolled back within 90 s"
        );
        // At most a second per look at the events; a watch that ends fails the test.
        let slot = Instant::now() + Duration::from_secs(1);
        if let Err(e) = mirror.next(slot).await {
            assert!(Instant::now() >= slot, "NodeClaim watch: {e}");
        }
    };
    let (claim, note) = refused;
    assert!(
        note.contains("starting it failed") && note.contains("drift gate"),
        "{claim}: rolled back at once, naming the refusal: {note}"
    );
    let cleaned = wait_for("the reason cleared", Duration::from_secs(30), || async {
        let c = nodeclaims(&client).get(&claim).await.ok()?;
        cond(&c, "DisruptionReason").is_none().then_some(c)
    })
    .await
    .expect("DisruptionReason cleared after the refused start");
    assert!(
        !cleaned.annotations().contains_key(COMMAND),
        "record taken off"
    );
    assert!(
        cleaned
            .annotations()
            .contains_key("karpenter.cluster.x-k8s.io/disruption-failed"),
        "a refusal is not transient: the node cools down"
    );
    assert!(!deleting(&cleaned), "the old node is not deleted");
    let node = Api::<Node>::all(client.clone())
        .get(&small_claims[&claim])
        .await
        .expect("node");
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints.iter().all(|t| t.key != "karpenter.sh/disrupted"),
        "the Node never tainted"
    );
    gate.open(&client, &probe).await;
}
