//! NodeClaim → orphan Machine lifecycle on the testbed, with the real Cluster API manager
//! doing the Machine side, the test infrastructure provider, kwok and the operator itself
//! (`karpenter-capi run`'s loops, in process).

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::provider::{self, ProviderConfig, TestProvider};
use testbed::{Options, Testbed, wait_for};

#[tokio::test]
async fn nodeclaim_launches_registers_initializes_and_terminates() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    nodeclaims(&client)
        .create(
            &PostParams::default(),
            &nodeclaim(
                "default-abc12",
                json!([
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}
                ]),
            ),
        )
        .await
        .expect("nodeclaim");

    let ready = wait_for("NodeClaim Ready", Duration::from_secs(90), || async {
        let nc = nodeclaims(&client).get("default-abc12").await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(nc)
    })
    .await
    .expect("NodeClaim becomes Ready");
    for t in ["Launched", "Registered", "Initialized"] {
        assert_eq!(condition(&ready, t).as_deref(), Some("True"), "{t}");
    }
    let labels = ready.labels();
    assert_eq!(
        labels["node.kubernetes.io/instance-type"], "small",
        "cheapest type that fits"
    );
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-b");
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(
        ready.annotations()["cluster.x-k8s.io/machine"],
        format!("{ns}/{}", machine_name("default-abc12"))
    );
    let pid = ready.data["status"]["providerID"]
        .as_str()
        .expect("providerID")
        .to_string();
    assert_eq!(
        pid,
        provider::provider_id(&ns, &machine_name("default-abc12"))
    );
    assert_eq!(ready.data["status"]["capacity"]["cpu"], "2");

    // The Machine: an orphan with our labels, the zone as failure domain.
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    let m = machines
        .get(&machine_name("default-abc12"))
        .await
        .expect("machine");
    let ml = m.labels();
    assert_eq!(ml["karpenter.sh/nodepool"], "default");
    assert_eq!(ml["karpenter.cluster.x-k8s.io/nodeclaim"], "default-abc12");
    assert_eq!(ml["karpenter.cluster.x-k8s.io/cluster-id"], CLUSTER_ID);
    assert_eq!(
        m.annotations()["karpenter.cluster.x-k8s.io/nodeclaim-uid"],
        ready.metadata.uid.clone().unwrap_or_default()
    );
    assert!(ml.contains_key("node.cluster.x-k8s.io/karpenter-member"));
    assert_eq!(ml["cluster.x-k8s.io/cluster-name"], "c1");
    assert!(!ml.contains_key("cluster.x-k8s.io/set-name"));
    assert!(
        m.owner_references()
            .iter()
            .all(|o| o.controller != Some(true)),
        "no controller owner"
    );
    assert_eq!(m.data["spec"]["failureDomain"], "zone-b");
    assert_eq!(m.data["spec"]["infrastructureRef"]["kind"], "TestMachine");
    assert_eq!(m.data["spec"]["providerID"], pid.as_str());

    // The Node: registered, synced, unregistered taint gone.
    let nodes: Api<Node> = Api::all(client.clone());
    let node_name = ready.data["status"]["nodeName"]
        .as_str()
        .expect("nodeName")
        .to_string();
    let node = nodes.get(&node_name).await.expect("node");
    let nl = node.labels();
    assert_eq!(nl["karpenter.sh/registered"], "true");
    assert_eq!(nl["karpenter.sh/initialized"], "true");
    assert_eq!(nl["karpenter.sh/nodepool"], "default");
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints.iter().any(|t| t.key == "team"),
        "NodeClaim taints synced: {taints:?}"
    );
    assert!(
        taints.iter().all(|t| t.key != "karpenter.sh/unregistered"),
        "{taints:?}"
    );
    assert!(
        node.finalizers()
            .iter()
            .any(|f| f == "karpenter.sh/termination")
    );
    assert!(
        node.owner_references()
            .iter()
            .any(|o| o.kind == "NodeClaim" && o.name == "default-abc12")
    );

    // Termination: the Machine, the TestMachine and the Node go away, then the NodeClaim.
    nodeclaims(&client)
        .delete("default-abc12", &Default::default())
        .await
        .expect("delete");
    let infra: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::test_machine_resource());
    wait_for("everything to be gone", Duration::from_secs(90), || async {
        let gone = nodeclaims(&client)
            .get_opt("default-abc12")
            .await
            .ok()?
            .is_none()
            && machines
                .get_opt(&machine_name("default-abc12"))
                .await
                .ok()?
                .is_none()
            && infra
                .get_opt(&machine_name("default-abc12"))
                .await
                .ok()?
                .is_none()
            && nodes.get_opt(&node_name).await.ok()?.is_none();
        gone.then_some(())
    })
    .await
    .expect("NodeClaim, Machine, TestMachine and Node deleted");
}

#[tokio::test]
async fn launch_timeout_deletes_nodeclaim_and_machine() {
    // The fixture's 60 s launch timeout, shortened: what is tested is that a Machine without
    // a providerID is cleaned up once it runs out, not how long it is.
    let env = env_nodeclass(
        default_templates(json!({"testbed.cluster.x-k8s.io/no-provider-id": ""})),
        Identity::Admin,
        testbed::Options::all(),
        json!({"launchTimeout": "20s"}),
        |_| {},
    )
    .await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    nodeclaims(&client)
        .create(
            &PostParams::default(),
            &nodeclaim("default-slow1", json!([])),
        )
        .await
        .expect("nodeclaim");
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    wait_for("Machine created", Duration::from_secs(30), || async {
        machines
            .get_opt(&machine_name("default-slow1"))
            .await
            .ok()?
    })
    .await
    .expect("machine created");
    // launchTimeout is 20s in this NodeClass.
    wait_for(
        "launch timeout cleans up",
        Duration::from_secs(120),
        || async {
            let gone = nodeclaims(&client)
                .get_opt("default-slow1")
                .await
                .ok()?
                .is_none()
                && machines
                    .get_opt(&machine_name("default-slow1"))
                    .await
                    .ok()?
                    .is_none();
            gone.then_some(())
        },
    )
    .await
    .expect("NodeClaim and Machine deleted after the launch timeout");
}

#[tokio::test]
async fn registration_timeout_deletes_nodeclaim_and_machine() {
    // The fixture's 60 s registration timeout, shortened (as the launch timeout above).
    let env = env_nodeclass(
        default_templates(json!({"testbed.cluster.x-k8s.io/no-node": ""})),
        Identity::Admin,
        testbed::Options::all(),
        json!({"registrationTimeout": "20s"}),
        |_| {},
    )
    .await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    nodeclaims(&client)
        .create(
            &PostParams::default(),
            &nodeclaim("default-nonode", json!([])),
        )
        .await
        .expect("nodeclaim");
    create_nodepool(&client, json!({})).await;
    wait_for(
        "providerID without a Node",
        Duration::from_secs(60),
        || async {
            let nc = nodeclaims(&client).get("default-nonode").await.ok()?;
            nc.data["status"]["providerID"].as_str().map(|_| ())
        },
    )
    .await
    .expect("providerID set");
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    wait_for(
        "registration timeout cleans up",
        Duration::from_secs(120),
        || async {
            let gone = nodeclaims(&client)
                .get_opt("default-nonode")
                .await
                .ok()?
                .is_none()
                && machines
                    .get_opt(&machine_name("default-nonode"))
                    .await
                    .ok()?
                    .is_none();
            gone.then_some(())
        },
    )
    .await
    .expect("NodeClaim and Machine deleted after the registration timeout");
    let events = events_for(&client, "default-nonode").await;
    assert!(
        events.iter().any(|(r, _)| r == "RegistrationTimeout"),
        "{events:?}"
    );
    // The NodePool reports it.
    wait_for(
        "NodeRegistrationHealthy=False",
        Duration::from_secs(10),
        || async {
            let np = nodepools(&client).get("default").await.ok()?;
            let c = np.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "NodeRegistrationHealthy")?
                .clone();
            (c["status"] == "False" && c["reason"] == "RegistrationFailed").then_some(())
        },
    )
    .await
    .expect("NodePool NodeRegistrationHealthy=False after a registration timeout");
}

#[tokio::test]
async fn infrastructure_failure_marks_offering_unavailable_and_replacement_uses_another() {
    let env = env(vec![
        (
            "small",
            "2",
            "4Gi",
            "0.10",
            json!({"testbed.cluster.x-k8s.io/fail": "no capacity for small"}),
        ),
        ("large", "8", "32Gi", "0.40", json!({})),
    ])
    .await;
    let client = env.tb.client();
    // Offerings are per zone: pin both claims to one zone so the failed offering is the
    // only "small" one.
    let zone_a =
        json!([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]);
    nodeclaims(&client)
        .create(
            &PostParams::default(),
            &nodeclaim("default-fail1", zone_a.clone()),
        )
        .await
        .expect("nodeclaim");
    let replaced = wait_for(
        "failed launch to be replaced",
        Duration::from_secs(90),
        || async {
            nodeclaims(&client)
                .get_opt("default-fail1")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    if replaced.is_err() {
        let machines: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &env.cluster.namespace,
            &provider::machine_resource(),
        );
        eprintln!(
            "NODECLAIM {:#?}",
            nodeclaims(&client)
                .get_opt("default-fail1")
                .await
                .ok()
                .flatten()
                .map(|o| o.data)
        );
        eprintln!(
            "MACHINE {:#?}",
            machines
                .get_opt(&machine_name("default-fail1"))
                .await
                .ok()
                .flatten()
                .map(|o| (o.metadata, o.data))
        );
        panic!("failed NodeClaim not deleted");
    }
    let events = events_for(&client, "default-fail1").await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "InsufficientCapacityError" && n.contains("small")),
        "{events:?}"
    );
    // The replacement (what the provisioner creates next) avoids the failed offering.
    nodeclaims(&client)
        .create(&PostParams::default(), &nodeclaim("default-fail2", zone_a))
        .await
        .expect("nodeclaim");
    let nc = wait_for("replacement Ready", Duration::from_secs(90), || async {
        let nc = nodeclaims(&client).get("default-fail2").await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(nc)
    })
    .await
    .expect("replacement Ready");
    assert_eq!(nc.labels()["node.kubernetes.io/instance-type"], "large");
    assert_eq!(nc.labels()["topology.kubernetes.io/zone"], "zone-a");
}

#[tokio::test]
async fn nodeclass_not_ready_refuses_launch() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let mut claim = nodeclaim("default-nonc", json!([]));
    claim.data["spec"]["nodeClassRef"]["name"] = json!("missing");
    nodeclaims(&client)
        .create(&PostParams::default(), &claim)
        .await
        .expect("nodeclaim");
    wait_for(
        "refused NodeClaim deleted",
        Duration::from_secs(30),
        || async {
            nodeclaims(&client)
                .get_opt("default-nonc")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await
    .expect("deleted");
    let events = events_for(&client, "default-nonc").await;
    assert!(
        events.iter().any(|(r, _)| r == "NodeClassNotReady"),
        "{events:?}"
    );
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &env.cluster.namespace,
        &provider::machine_resource(),
    );
    assert!(
        machines
            .get_opt(&machine_name("default-nonc"))
            .await
            .expect("get")
            .is_none(),
        "nothing launched"
    );
}

/// Garbage collection is fenced: it deletes our Machines and clones whose NodeClaim UID no
/// longer exists, and nothing of another workload cluster (another cluster id), of a
/// Cluster none of our NodeClasses references, from before fencing (no cluster id), or not
/// ours at all.
#[tokio::test]
async fn garbage_collection_takes_only_our_orphans() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    let infra: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::test_machine_resource());
    let machine = |name: &str, cluster: &str, cluster_id: Option<&str>, ours: bool| {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
        if ours {
            labels["karpenter.cluster.x-k8s.io/nodeclaim"] = json!("default-gone1");
        }
        if let Some(id) = cluster_id {
            labels["karpenter.cluster.x-k8s.io/cluster-id"] = json!(id);
        }
        from_json::<DynamicObject>(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "labels": labels,
                "annotations": {"karpenter.cluster.x-k8s.io/nodeclaim-uid": "uid-of-a-deleted-claim"}},
            "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": "bootstrap-data"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "TestMachine", "name": format!("{name}-infra")}}
        }))
    };
    let kept = [
        machine("other-workload-cluster", "c1", Some("someone-else"), true),
        machine("unreferenced-cluster", "c9", Some(CLUSTER_ID), true),
        machine("before-fencing", "c1", None, true),
        machine("not-ours", "c1", None, false),
    ];
    for m in kept
        .iter()
        .chain([&machine("ghost", "c1", Some(CLUSTER_ID), true)])
    {
        machines
            .create(&PostParams::default(), m)
            .await
            .expect("machine");
    }
    // An InfraMachine clone left by a launch that never got its Machine.
    infra
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachine",
                "metadata": {"name": "leaked-clone", "labels": {
                    "karpenter.cluster.x-k8s.io/nodeclaim": "default-gone1",
                    "karpenter.cluster.x-k8s.io/cluster-id": CLUSTER_ID,
                    "cluster.x-k8s.io/cluster-name": "c1"},
                    "annotations": {"karpenter.cluster.x-k8s.io/nodeclaim-uid": "uid-of-a-deleted-claim"}},
                "spec": {}
            })),
        )
        .await
        .expect("clone");
    wait_for(
        "our orphaned Machine and clone collected",
        Duration::from_secs(60),
        || async {
            let ghost = machines.get_opt("ghost").await.ok()?;
            let clone = infra.get_opt("leaked-clone").await.ok()?;
            let gone = |o: &Option<DynamicObject>| {
                o.as_ref()
                    .is_none_or(|o| o.metadata.deletion_timestamp.is_some())
            };
            (gone(&ghost) && gone(&clone)).then_some(())
        },
    )
    .await
    .expect("collected");
    // The pass that collected them saw the others too.
    for m in &kept {
        let name = m.metadata.name.clone().unwrap_or_default();
        let found = machines.get_opt(&name).await.expect("get");
        assert!(
            found.is_some_and(|f| f.metadata.deletion_timestamp.is_none()),
            "{name} untouched"
        );
    }
}

#[tokio::test]
async fn nodeclaim_deletion_drains_the_node() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    nodeclaims(&client)
        .create(
            &PostParams::default(),
            &nodeclaim("default-drain", json!([])),
        )
        .await
        .expect("nodeclaim");
    let nc = wait_for("Ready", Duration::from_secs(90), || async {
        let nc = nodeclaims(&client).get("default-drain").await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(nc)
    })
    .await
    .expect("Ready");
    let node = nc.data["status"]["nodeName"]
        .as_str()
        .expect("node")
        .to_string();
    let ns = env.tb.temp_namespace().await.expect("ns");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &from_json(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "work"},
            // No toleration of the disrupted taint: a pod tolerating it is not waited for
            // nor evicted (Karpenter's drain), and would only go when the pod garbage
            // collector finds its Node gone (40 s later).
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/x"}]}
        })),
    )
    .await
    .expect("pod");
    wait_for("pod Running", Duration::from_secs(60), || async {
        let p = pods.get("work").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await
    .expect("pod Running");
    nodeclaims(&client)
        .delete("default-drain", &Default::default())
        .await
        .expect("delete");
    wait_for(
        "pod evicted by the drain",
        Duration::from_secs(90),
        || async { pods.get_opt("work").await.ok()?.is_none().then_some(()) },
    )
    .await
    .expect("pod evicted");
    // By the drain's eviction (its event on the pod), not by anything else.
    wait_for(
        "the drain's Evicted event",
        Duration::from_secs(30),
        || async {
            let events = events_for(&client, "work").await;
            events
                .iter()
                .any(|(r, note)| r == "Evicted" && note.starts_with("Evicted pod"))
                .then_some(())
        },
    )
    .await
    .expect("the pod evicted by the drain");
    wait_for("NodeClaim gone", Duration::from_secs(90), || async {
        nodeclaims(&client)
            .get_opt("default-drain")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .expect("NodeClaim gone");
}

#[tokio::test]
async fn fifty_launches_with_operator_restarts_make_exactly_one_machine_each() {
    let mut env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    let infra: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::test_machine_resource());
    // This test is about exactly one Machine per NodeClaim across restarts, not about
    // timeouts: under a loaded machine 50 launches with 6 kills can take longer than the
    // fixture's 60 s launch timeout, which (rightly) deletes the claims it catches.
    nodeclasses(&client)
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"launchTimeout": "10m", "registrationTimeout": "10m"}})),
        )
        .await
        .expect("nodeclass timeouts raised");
    let names: Vec<String> = (0..50).map(|i| format!("default-r{i:02}")).collect();
    let created_at = std::time::Instant::now();
    let creates = names.iter().map(|n| {
        let api = nodeclaims(&client);
        let claim = nodeclaim(n, json!([]));
        async move { api.create(&PostParams::default(), &claim).await }
    });
    for r in futures::future::join_all(creates).await {
        r.expect("nodeclaim created");
    }
    // Kill the operator at pseudo-random points (fixed seed) while the launches run.
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..6 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let after = Duration::from_millis(200 + seed % 1500);
        tokio::time::sleep(after).await;
        env.operator.abort();
        let _ = (&mut env.operator).await;
        env.operator = start_operator(&env.tb);
    }
    let ready = wait_for("50 NodeClaims Ready", Duration::from_secs(240), || async {
        let list = nodeclaims(&client).list(&Default::default()).await.ok()?;
        let ready = list
            .items
            .iter()
            .filter(|nc| names.contains(&nc.name_any()))
            .filter(|nc| condition(nc, "Ready").as_deref() == Some("True"))
            .count();
        (ready == 50).then_some(ready)
    })
    .await;
    let Ok(ready) = ready else {
        // Where each claim stands (its conditions), to tell a stall from a slow machine.
        let items = nodeclaims(&client)
            .list(&Default::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !items.iter().any(|nc| nc.name_any() == **n))
            .collect();
        let states: Vec<String> = items
            .iter()
            .filter(|nc| {
                !names.contains(&nc.name_any()) || condition(nc, "Ready").as_deref() != Some("True")
            })
            .map(|nc| {
                let conditions = nc.data["status"]["conditions"]
                    .as_array()
                    .map(|cs| {
                        cs.iter()
                            .map(|c| format!("{}={}({})", c["type"], c["status"], c["reason"]))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                format!("{}: {conditions}", nc.name_any())
            })
            .collect();
        // A gone claim's events say who deleted it and why.
        let mut gone_events = Vec::new();
        for n in &missing {
            gone_events.push(format!("{n}: {:?}", events_for(&client, n).await));
        }
        panic!(
            "not all 50 NodeClaims Ready 240 s after the restarts; gone: {missing:?}; their events:\n{}\nnot Ready, or not this test's:\n{}",
            gone_events.join("\n"),
            states.join("\n")
        );
    };
    assert_eq!(ready, 50);
    eprintln!(
        "50 NodeClaims Ready {:.1}s after creation (with 6 operator kills)",
        created_at.elapsed().as_secs_f64()
    );
    let ms = machines
        .list(&Default::default())
        .await
        .expect("machines")
        .items;
    let mut machine_names: Vec<String> = ms
        .iter()
        .filter(|m| {
            m.labels()
                .contains_key("karpenter.cluster.x-k8s.io/nodeclaim")
        })
        .map(|m| m.name_any())
        .collect();
    machine_names.sort();
    let expected: Vec<String> = names.iter().map(|n| machine_name(n)).collect();
    assert_eq!(
        machine_names, expected,
        "exactly one Machine per NodeClaim, no orphans"
    );
    let tms = infra.list(&Default::default()).await.expect("infra").items;
    assert_eq!(tms.len(), 50, "exactly one InfraMachine per NodeClaim");
    let nodes: Api<Node> = Api::all(client.clone());
    let registered = nodes
        .list(&Default::default())
        .await
        .expect("nodes")
        .items
        .into_iter()
        .filter(|n| {
            n.labels()
                .get("karpenter.sh/registered")
                .map(String::as_str)
                == Some("true")
        })
        .count();
    assert_eq!(registered, 50);
}

#[tokio::test]
async fn launch_latency_median_over_fifty() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    // Watch Machines appear, recording when each is first seen.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
        String,
        std::time::Instant,
    >::new()));
    let watch = {
        let seen = seen.clone();
        let machines = machines.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            let stream = kube::runtime::watcher(machines, Default::default());
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(ev)) = stream.next().await {
                if let kube::runtime::watcher::Event::Apply(m)
                | kube::runtime::watcher::Event::InitApply(m) = ev
                {
                    seen.lock()
                        .expect("lock")
                        .entry(m.name_any())
                        .or_insert_with(std::time::Instant::now);
                }
            }
        })
    };
    let mut created = Vec::new();
    for i in 0..50 {
        let name = format!("default-l{i:02}");
        let t = std::time::Instant::now();
        nodeclaims(&client)
            .create(&PostParams::default(), &nodeclaim(&name, json!([])))
            .await
            .expect("nodeclaim");
        created.push((name, t));
    }
    wait_for("50 Machines", Duration::from_secs(120), || async {
        (seen.lock().ok()?.len() >= 50).then_some(())
    })
    .await
    .expect("50 Machines created");
    watch.abort();
    let seen = seen.lock().expect("lock");
    // Each Machine was first seen after its NodeClaim was created (not one that was there
    // before: the watch lists existing Machines first).
    let mut latencies: Vec<f64> = created
        .iter()
        .map(|(n, t)| {
            seen[&machine_name(n)]
                .checked_duration_since(*t)
                .unwrap_or_else(|| panic!("the Machine of {n} existed before {n}"))
                .as_secs_f64()
                * 1000.0
        })
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let median = latencies[25];
    eprintln!(
        "NodeClaim creation -> Machine created: median {median:.0} ms, p90 {:.0} ms, max {:.0} ms (n=50)",
        latencies[45], latencies[49]
    );
    // A Machine follows its NodeClaim's creation event, not a periodic requeue (the bound
    // is loose: the machine running the tests may be busy).
    assert!(median < 10_000.0, "median {median:.0} ms");
}

/// Two control planes of its own (not the binary's shared one): the operator reads
/// Karpenter objects and Nodes from one and writes Cluster API objects to the other, which is
/// what the test proves.
#[tokio::test]
async fn split_management_and_workload_clusters() {
    use testbed::Component;
    use testbed::provider::ClusterSetup;
    let (mgmt, work) = tokio::join!(
        Testbed::start(Options::default().with(Component::ClusterApi)),
        // The controller-manager lifts the not-ready taint that admission puts on new Nodes.
        Testbed::start(
            Options::default()
                .with(Component::Kwok)
                .with(Component::ControllerManager)
        ),
    );
    let mgmt = mgmt.expect("management testbed starts");
    let work = work.expect("workload testbed starts");
    let _provider = TestProvider::start(
        mgmt.client(),
        ProviderConfig {
            provision_delay: Duration::from_millis(300),
            workload: Some(work.client()),
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("provider");
    let ns = mgmt.temp_namespace().await.expect("namespace");
    provider::create_cluster(
        &mgmt.client(),
        &ClusterSetup::new(&ns, "work", work.kubeconfig()),
    )
    .await
    .expect("cluster");
    let m = mgmt.client();
    let secrets: Api<Secret> = Api::namespaced(m.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &from_json(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap-data"},
                "stringData": {"value": "nodeTaints:\n- {key: karpenter.sh/unregistered, effect: NoExecute}\n"}})),
        )
        .await
        .expect("secret");
    let templates: Api<DynamicObject> =
        Api::namespaced_with(m.clone(), &ns, &provider::test_machine_template_resource());
    templates
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
                "metadata": {"name": "medium", "labels": {"node.cluster.x-k8s.io/karpenter-member": ""}},
                "spec": {"template": {"spec": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}}
            })),
        )
        .await
        .expect("template");
    templates
        .patch_status(
            "medium",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"cpu": "4", "memory": "8Gi"}}})),
        )
        .await
        .expect("status");
    // Karpenter objects live in the workload cluster.
    let w = work.client();
    nodeclasses(&w)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
                "metadata": {"name": "default"},
                "spec": {"clusterRef": {"namespace": ns, "name": "work"},
                         "bootstrap": {"dataSecretName": "bootstrap-data"}}
            })),
        )
        .await
        .expect("nodeclass");
    let mut config = operator_config(&work);
    config.management_kubeconfig = Some(mgmt.kubeconfig().to_path_buf());
    let operator = tokio::spawn(async move {
        if let Err(e) = operator::run_operator(config).await {
            panic!("operator failed: {e}");
        }
    });
    nodeclaims(&w)
        .create(
            &PostParams::default(),
            &nodeclaim("default-split", json!([])),
        )
        .await
        .expect("nodeclaim");
    let nc = wait_for(
        "NodeClaim Ready across clusters",
        Duration::from_secs(90),
        || async {
            let nc = nodeclaims(&w).get("default-split").await.ok()?;
            (condition(&nc, "Ready").as_deref() == Some("True")).then_some(nc)
        },
    )
    .await;
    let Ok(nc) = nc else {
        let claim = nodeclaims(&w)
            .get_opt("default-split")
            .await
            .ok()
            .flatten()
            .map(|o| o.data);
        let class = nodeclasses(&w)
            .get_opt("default")
            .await
            .ok()
            .flatten()
            .map(|o| o.data["status"].clone());
        let events = events_for(&w, "default-split").await;
        panic!("not Ready: claim {claim:#?}\nnodeclass {class:#?}\nevents {events:?}");
    };
    let node = nc.data["status"]["nodeName"]
        .as_str()
        .expect("node")
        .to_string();
    assert!(
        Api::<Node>::all(w.clone())
            .get_opt(&node)
            .await
            .expect("get")
            .is_some(),
        "Node in the workload cluster"
    );
    assert!(
        Api::<Node>::all(m.clone())
            .get_opt(&node)
            .await
            .expect("get")
            .is_none(),
        "not in management"
    );
    let machines: Api<DynamicObject> =
        Api::namespaced_with(m.clone(), &ns, &provider::machine_resource());
    assert!(
        machines
            .get_opt(&machine_name("default-split"))
            .await
            .expect("get")
            .is_some(),
        "Machine in management"
    );
    nodeclaims(&w)
        .delete("default-split", &Default::default())
        .await
        .expect("delete");
    wait_for("all gone", Duration::from_secs(90), || async {
        let gone = nodeclaims(&w)
            .get_opt("default-split")
            .await
            .ok()?
            .is_none()
            && machines
                .get_opt(&machine_name("default-split"))
                .await
                .ok()?
                .is_none()
            && Api::<Node>::all(w.clone())
                .get_opt(&node)
                .await
                .ok()?
                .is_none();
        gone.then_some(())
    })
    .await
    .expect("NodeClaim, Machine and workload Node deleted");
    operator.abort();
}

#[tokio::test]
async fn nodeclass_status_follows_templates() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let types = |nc: &DynamicObject| -> Vec<(String, String, Vec<String>)> {
        nc.data["status"]["instanceTypes"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|t| {
                        let zones = t["zones"]
                            .as_array()
                            .map(|z| {
                                z.iter()
                                    .filter_map(|v| v.as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (
                            t["name"].as_str().unwrap_or_default().to_string(),
                            t["price"].as_str().unwrap_or_default().to_string(),
                            zones,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let nc = nodeclasses(&client)
        .get("default")
        .await
        .expect("nodeclass");
    let mut listed = types(&nc);
    listed.sort();
    let zones = vec!["zone-a".to_string(), "zone-b".to_string()];
    assert_eq!(
        listed,
        vec![
            ("large".to_string(), "0.4000".to_string(), zones.clone()),
            ("small".to_string(), "0.1000".to_string(), zones.clone()),
        ],
        "both templates, one offering per Cluster failure domain"
    );
    // Each instance type carries its node facts: arch, os (the test provider's templates
    // report status.nodeInfo or get the amd64/linux defaults) and the pods the kubelet allows.
    for t in nc.data["status"]["instanceTypes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert!(
            t["arch"].as_str().is_some_and(|a| !a.is_empty())
                && t["os"].as_str().is_some_and(|o| !o.is_empty())
                && t["pods"].as_i64().is_some_and(|p| p > 0),
            "instance type without arch/os/pods: {t}"
        );
    }
    // Editing a template's price annotation shows up in the status.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &provider::test_machine_template_resource(),
    );
    templates
        .patch(
            "small",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"karpenter.cluster.x-k8s.io/price": "0.05"}}}),
            ),
        )
        .await
        .expect("edit");
    wait_for(
        "status follows the price edit",
        Duration::from_secs(30),
        || async {
            let nc = nodeclasses(&client).get("default").await.ok()?;
            types(&nc)
                .iter()
                .any(|(n, p, _)| n == "small" && p == "0.0500")
                .then_some(())
        },
    )
    .await
    .expect("price updated");
    // A broken template is named; the good ones stay listed and the NodeClass stays Ready.
    templates
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
                "metadata": {"name": "broken", "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
                    "annotations": {"capacity.cluster-autoscaler.kubernetes.io/cpu": "lots",
                                    "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"}},
                "spec": {"template": {"spec": {}}}
            })),
        )
        .await
        .expect("broken template");
    let nc = wait_for("broken template named", Duration::from_secs(30), || async {
        let nc = nodeclasses(&client).get("default").await.ok()?;
        let c = nc.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "TemplatesReady")?
            .clone();
        c["message"].as_str()?.contains("broken").then_some(nc)
    })
    .await
    .expect("TemplatesReady names the broken template");
    assert_eq!(condition(&nc, "Ready").as_deref(), Some("True"));
    assert_eq!(types(&nc).len(), 2, "good templates keep serving");

    // A bootstrap Secret created after its NodeClass is noticed within seconds (not at the
    // next 60 s resync).
    nodeclasses(&client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
                "metadata": {"name": "late"},
                "spec": {"clusterRef": {"namespace": ns, "name": "c1"},
                         "bootstrap": {"dataSecretName": "late-data"}}
            })),
        )
        .await
        .expect("nodeclass");
    wait_for("BootstrapReady=False", Duration::from_secs(30), || async {
        let nc = nodeclasses(&client).get("late").await.ok()?;
        (condition(&nc, "BootstrapReady").as_deref() == Some("False")).then_some(())
    })
    .await
    .expect("the missing Secret is reported");
    let created = std::time::Instant::now();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &from_json(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "late-data"}, "stringData": {"value": ""}})),
        )
        .await
        .expect("secret");
    wait_for("NodeClass Ready", Duration::from_secs(15), || async {
        let nc = nodeclasses(&client).get("late").await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await
    .expect("the Secret is noticed within 15 s");
    println!("bootstrap Secret noticed after {:?}", created.elapsed());

    // A deleted NodeClass waits for its NodeClaims (its finalizer), then goes.
    let mut claim = nodeclaim("late-claim", json!([]));
    claim.data["spec"]["nodeClassRef"]["name"] = json!("late");
    nodeclaims(&client)
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim");
    wait_for(
        "finalizer on the NodeClass",
        Duration::from_secs(15),
        || async {
            let nc = nodeclasses(&client).get("late").await.ok()?;
            nc.finalizers()
                .iter()
                .any(|f| f == "karpenter.cluster.x-k8s.io/termination")
                .then_some(())
        },
    )
    .await
    .expect("finalizer added");
    nodeclasses(&client)
        .delete("late", &Default::default())
        .await
        .expect("delete nodeclass");
    wait_for("NodeClass waits", Duration::from_secs(30), || async {
        events_for(&client, "late")
            .await
            .iter()
            .any(|(r, m)| r == "WaitingOnNodeClaimTermination" && m.contains("late-claim"))
            .then_some(())
    })
    .await
    .expect("WaitingOnNodeClaimTermination");
    let waiting = nodeclasses(&client).get_opt("late").await.expect("get");
    assert!(
        waiting.is_some_and(|nc| nc.metadata.deletion_timestamp.is_some()),
        "the NodeClass stays while its NodeClaim exists"
    );
    nodeclaims(&client)
        .delete("late-claim", &Default::default())
        .await
        .expect("delete claim");
    wait_for("NodeClass gone", Duration::from_secs(90), || async {
        nodeclasses(&client)
            .get_opt("late")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .expect("the NodeClass goes once its NodeClaims are gone");
}

async fn ready_claim(client: &Client, name: &str) -> DynamicObject {
    nodeclaims(client)
        .create(&PostParams::default(), &nodeclaim(name, json!([])))
        .await
        .expect("nodeclaim");
    wait_for("NodeClaim Ready", Duration::from_secs(90), || async {
        let nc = nodeclaims(client).get(name).await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(nc)
    })
    .await
    .expect("Ready")
}

#[tokio::test]
async fn deleting_the_node_or_the_machine_deletes_the_nodeclaim() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    // A user deletes the Node.
    let nc = ready_claim(&client, "default-usr01").await;
    let node = nc.data["status"]["nodeName"]
        .as_str()
        .expect("node")
        .to_string();
    Api::<Node>::all(client.clone())
        .delete(&node, &Default::default())
        .await
        .expect("delete node");
    wait_for(
        "NodeClaim follows its Node",
        Duration::from_secs(90),
        || async {
            let gone = nodeclaims(&client)
                .get_opt("default-usr01")
                .await
                .ok()?
                .is_none()
                && Api::<Node>::all(client.clone())
                    .get_opt(&node)
                    .await
                    .ok()?
                    .is_none();
            gone.then_some(())
        },
    )
    .await
    .expect("NodeClaim and Node gone");
    // Someone deletes the Machine behind our back.
    ready_claim(&client, "default-usr02").await;
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    machines
        .delete(&machine_name("default-usr02"), &Default::default())
        .await
        .expect("delete machine");
    wait_for(
        "NodeClaim follows its Machine",
        Duration::from_secs(90),
        || async {
            nodeclaims(&client)
                .get_opt("default-usr02")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await
    .expect("NodeClaim gone");
}

#[tokio::test]
async fn kubeadm_config_template_is_cloned_with_the_unregistered_taint() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    create_kubeadm_nodeclass(&client, &ns, "kubeadm", "workers").await;
    let mut claim = nodeclaim("kubeadm-abc01", json!([]));
    claim.data["spec"]["nodeClassRef"]["name"] = json!("kubeadm");
    nodeclaims(&client)
        .create(&PostParams::default(), &claim)
        .await
        .expect("nodeclaim");
    let nc = wait_for(
        "NodeClaim Ready with kubeadm bootstrap",
        Duration::from_secs(90),
        || async {
            let nc = nodeclaims(&client).get("kubeadm-abc01").await.ok()?;
            (condition(&nc, "Ready").as_deref() == Some("True")).then_some(nc)
        },
    )
    .await
    .expect("Ready");
    // The clone: a KubeadmConfig named like the Machine, with the join taint injected.
    let kc = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bootstrap.cluster.x-k8s.io", "v1beta2", "KubeadmConfig"),
        "kubeadmconfigs",
    );
    let config = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &kc)
        .get(&machine_name("kubeadm-abc01"))
        .await
        .expect("cloned KubeadmConfig");
    let taints = &config.data["spec"]["joinConfiguration"]["nodeRegistration"]["taints"];
    assert_eq!(taints[0]["key"], "karpenter.sh/unregistered", "{taints}");
    assert_eq!(taints[0]["effect"], "NoExecute");
    assert_eq!(
        config.annotations()["cluster.x-k8s.io/cloned-from-name"],
        "workers"
    );
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    let m = machines
        .get(&machine_name("kubeadm-abc01"))
        .await
        .expect("machine");
    assert_eq!(
        m.data["spec"]["bootstrap"]["configRef"]["kind"],
        "KubeadmConfig"
    );
    // The Node joined with the bootstrap's labels; registration removed the taint.
    let node = Api::<Node>::all(client.clone())
        .get(nc.data["status"]["nodeName"].as_str().expect("node"))
        .await
        .expect("node");
    assert_eq!(
        node.labels().get("example.com/pool").map(String::as_str),
        Some("workers")
    );
    let node_taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        node_taints
            .iter()
            .all(|t| t.key != "karpenter.sh/unregistered"),
        "{node_taints:?}"
    );
    let events = events_for(&client, &node.metadata.name.clone().unwrap_or_default()).await;
    assert!(
        events.iter().all(|(r, _)| r != "UnregisteredTaintMissing"),
        "the node registered with the taint: {events:?}"
    );
}
