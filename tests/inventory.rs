//! Host inventory on the real testbed: a NodeClass with `spec.inventory` (the Metal3 preset)
//! counts the BareMetalHosts a template's `hostSelector` matches, and the test provider
//! claims one per TestMachine (failing the TestMachine when none is free), as Metal3 does; a
//! node's host is rebooted through the Cluster API provider and the test provider plays the
//! baremetal-operator's power cycle.

mod common;

use std::time::Duration;

use common::passes::{counter, provisioning_passes};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider;
use testbed::wait_for;

const TEMPLATE_LABEL: &str = "karpenter.cluster.x-k8s.io/instance-template";

fn hosts(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &provider::bare_metal_host_resource())
}

/// `large` hosts the `metal` template selects, plus one `small` host it does not; the
/// template gets the selector and the NodeClass the Metal3 inventory. Returns once the
/// NodeClass status shows `metal`'s count (the operator has listed the hosts).
async fn metal_hosts(env: &Env, large: usize) {
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let api = hosts(&client, &ns);
    let sizes = std::iter::repeat_n("large", large).chain(["small"]);
    for (i, size) in sizes.enumerate() {
        let name = format!("host-{i}");
        api.create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                "metadata": {"name": name, "labels": {"size": size}},
                "spec": {"online": true}
            })),
        )
        .await
        .expect("host");
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"provisioning": {"state": "available"}}})),
        )
        .await
        .expect("host state");
    }
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &provider::test_machine_template_resource(),
    );
    templates
        .patch(
            "metal",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"hostSelector": {
                "matchExpressions": [{"key": "size", "operator": "in", "values": ["large"]}]}}}}})),
        )
        .await
        .expect("hostSelector");
    nodeclasses(&client)
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"inventory": {"preset": "Metal3"}}})),
        )
        .await
        .expect("inventory");
    let want = i64::try_from(large).expect("small");
    metal_offering(&client, |o| {
        o["available"] == want && o["limit"] == want && o["source"] == "inventory"
    })
    .await
    .expect("the NodeClass status counts the free large hosts");
    // The control of bad_input's InventoryReady=False rows: a readable inventory is True.
    let nc = nodeclasses(&client)
        .get("default")
        .await
        .expect("nodeclass");
    let ready = nc.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "InventoryReady"))
        .map(|c| (c["status"].clone(), c["reason"].clone()));
    assert_eq!(
        ready,
        Some((json!("True"), json!("HostsCounted"))),
        "{:?}",
        nc.data["status"]["conditions"]
    );
}

/// Waits until the NodeClass status shows an offering of `metal` for which `ok` holds.
async fn metal_offering(client: &Client, ok: impl Fn(&Value) -> bool) -> Result<Value, String> {
    let last = std::sync::Mutex::new(Value::Null);
    wait_for(
        "metal's offering status",
        Duration::from_secs(60),
        || async {
            let nc = nodeclasses(client).get("default").await.ok()?;
            let offerings = nc.data["status"]["offerings"].clone();
            *last.lock().unwrap_or_else(|p| p.into_inner()) = offerings.clone();
            offerings
                .as_array()?
                .iter()
                .find(|o| o["template"] == "metal" && ok(o))
                .cloned()
        },
    )
    .await
    .map_err(|e| {
        format!(
            "{e}: last status.offerings {}",
            last.lock().unwrap_or_else(|p| p.into_inner())
        )
    })
}

/// The Machines launched from template `name`.
async fn machines_from(client: &Client, ns: &str, name: &str) -> usize {
    let machines: Api<clusterapi_api::Machine> = Api::namespaced(client.clone(), ns);
    machines
        .list(&ListParams::default().labels(&format!("{TEMPLATE_LABEL}={name}")))
        .await
        .expect("machines")
        .items
        .len()
}

/// The hosts holding a consumer.
async fn taken_hosts(client: &Client, ns: &str) -> usize {
    hosts(client, ns)
        .list(&ListParams::default())
        .await
        .expect("hosts")
        .items
        .iter()
        .filter(|h| !h.data["spec"]["consumerRef"].is_null())
        .count()
}

#[tokio::test]
async fn three_hosts_take_three_of_five_pods_and_the_fallback_the_rest() {
    let env = env(vec![
        ("metal", "2", "4Gi", "0.05", json!({})),
        ("fallback", "2", "4Gi", "0.50", json!({})),
    ])
    .await;
    let client = env.tb.client();
    let cluster_ns = env.cluster.namespace.clone();
    metal_hosts(&env, 3).await;
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    // One pod per 2-cpu node: `metal` is cheaper, but has 3 hosts.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &deployment("web", 5, "1500m", "256Mi", json!({})),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let all = wait_for("5 pods Running", Duration::from_secs(120), || async {
        let l = pods.list(&ListParams::default()).await.ok()?.items;
        (l.len() == 5 && l.iter().all(running)).then_some(l)
    })
    .await
    .expect("every pod runs: 3 on metal, the rest on the fallback");
    let nodes: Api<Node> = Api::all(client.clone());
    let mut by_template = std::collections::BTreeMap::<String, usize>::new();
    for p in &all {
        let node = nodes.get(&node_of(p)).await.expect("node");
        *by_template
            .entry(
                node.labels()
                    .get(TEMPLATE_LABEL)
                    .cloned()
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    assert_eq!(
        by_template,
        [("fallback".to_string(), 2), ("metal".to_string(), 3)].into()
    );
    // Exactly 3 Machines from metal, each holding a host; no launch failed.
    assert_eq!(machines_from(&client, &cluster_ns, "metal").await, 3);
    assert_eq!(taken_hosts(&client, &cluster_ns).await, 3);
    assert_eq!(
        counter(&env, "karpenter_capi_machines_launched_total").await,
        5
    );
    // Visible: none left, in the status and in the gauges.
    let o = metal_offering(&client, |o| o["available"] == 0)
        .await
        .expect("metal shows no host left");
    assert_eq!(
        o["unavailableReason"], "template metal: 0 of 3 hosts available",
        "{o}"
    );
    let page = scrape(env.metrics_addr).await;
    assert!(
        page.lines()
            .any(|l| l.starts_with("karpenter_capi_offering_available{")
                && l.contains(r#"template="metal""#)
                && l.ends_with(" 0")),
        "{page}"
    );
    assert!(
        page.lines()
            .any(|l| l.starts_with("karpenter_capi_offering_unavailable{")
                && l.contains(r#"template="metal""#)
                && l.ends_with(" 1")),
        "{page}"
    );
}

/// NodePool `name` (like `default`) on the NodeClass `default`.
async fn second_nodepool(client: &Client, name: &str) {
    nodepools(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": name},
                "spec": {"template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                                     "kind": "ClusterAPINodeClass", "name": "default"},
                    "requirements": []}},
                    "disruption": {"consolidateAfter": "Never"}}
            })),
        )
        .await
        .expect("nodepool");
}

#[tokio::test]
async fn two_nodepools_never_over_commit_the_hosts_and_a_freed_host_is_used_at_once() {
    let env = env(vec![("metal", "2", "4Gi", "0.05", json!({}))]).await;
    let client = env.tb.client();
    let cluster_ns = env.cluster.namespace.clone();
    metal_hosts(&env, 3).await;
    create_nodepool(&client, json!({})).await;
    second_nodepool(&client, "second").await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    for pool in ["default", "second"] {
        let pinned = json!({"nodeSelector": {"karpenter.sh/nodepool": pool}});
        deployments
            .create(
                &PostParams::default(),
                &deployment(pool, 3, "1500m", "256Mi", pinned),
            )
            .await
            .expect("deployment");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pending = wait_for("3 of 6 pods Running", Duration::from_secs(120), || async {
        let l = pods.list(&ListParams::default()).await.ok()?.items;
        let up = l.iter().filter(|p| running(p)).count();
        (l.len() == 6 && up == 3).then(|| l.into_iter().filter(|p| !running(p)).collect::<Vec<_>>())
    })
    .await
    .expect("the three hosts run three pods, whichever pool");
    for p in &pending {
        let name = p.name_any();
        wait_for("the count event", Duration::from_secs(30), || async {
            events_for(&client, &name)
                .await
                .iter()
                .any(|(r, note)| {
                    r == "CountExhausted" && note == "template metal: 0 of 3 hosts available"
                })
                .then_some(())
        })
        .await
        .unwrap_or_else(|_| panic!("{name}: no CountExhausted event naming the hosts"));
    }
    // No launch loop: two more batches reconsider the pending pods and launch nothing.
    provisioning_passes(&env, &ns, 2).await;
    assert_eq!(
        counter(&env, "karpenter_capi_machines_launched_total").await,
        3
    );
    assert_eq!(machines_from(&client, &cluster_ns, "metal").await, 3);
    // A host freed (its NodeClaim deleted: the Machine goes, the provider releases the
    // host) is used by the next launch at once, long before any 3-minute backoff.
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    let freed = claims.first().expect("a NodeClaim").name_any();
    nodeclaims(&client)
        .delete(&freed, &Default::default())
        .await
        .expect("delete");
    wait_for(
        "a 4th Machine from metal",
        Duration::from_secs(90),
        || async {
            (counter(&env, "karpenter_capi_machines_launched_total").await == 4).then_some(())
        },
    )
    .await
    .expect("the freed host is launched on within 90 s");
    wait_for("3 pods Running again", Duration::from_secs(90), || async {
        let l = pods.list(&ListParams::default()).await.ok()?.items;
        (l.iter().filter(|p| running(p)).count() == 3).then_some(())
    })
    .await
    .expect("three pods run again");
    assert_eq!(taken_hosts(&client, &cluster_ns).await, 3);
    provisioning_passes(&env, &ns, 1).await;
    assert_eq!(
        counter(&env, "karpenter_capi_machines_launched_total").await,
        4,
        "never more Machines than hosts"
    );
}

/// Terminate-first drift on finite hardware: every host is used, so no replacement can
/// launch before its drifted node goes. Each drifted node is deleted first (within the
/// budget of one), its pod waits, and the host it frees takes the replacement: the roll
/// completes and no moment has more Machines than hosts.
#[tokio::test]
async fn drifted_nodes_on_full_hosts_are_replaced_terminate_first() {
    let env = env(vec![("metal", "2", "4Gi", "0.05", json!({}))]).await;
    let client = env.tb.client();
    let cluster_ns = env.cluster.namespace.clone();
    metal_hosts(&env, 2).await;
    create_nodepool_with(
        &client,
        json!({}),
        json!({"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}),
    )
    .await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &deployment("web", 2, "1500m", "256Mi", json!({})),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let running_pods = || async {
        let l = pods.list(&ListParams::default()).await.expect("pods").items;
        (l.len() == 2 && l.iter().all(running)).then_some(l)
    };
    wait_for("2 pods Running", Duration::from_secs(120), running_pods)
        .await
        .expect("both hosts run a pod");
    assert_eq!(taken_hosts(&client, &cluster_ns).await, 2);
    let originals: Vec<String> = list(&nodeclaims(&client), &ListParams::default())
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(originals.len(), 2);
    assert_eq!(
        counter(
            &env,
            "karpenter_voluntary_disruption_terminate_first_decisions_total"
        )
        .await,
        0
    );

    // Drift every node (a new Kubernetes version).
    drift_nodeclass_version(&client, "v1.36.0").await;
    let most_machines = std::sync::atomic::AtomicUsize::new(0);
    let rolled = wait_for("every node replaced", Duration::from_secs(240), || async {
        let machines = machines_from(&client, &cluster_ns, "metal").await;
        most_machines.fetch_max(machines, std::sync::atomic::Ordering::Relaxed);
        let claims = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .expect("claims")
            .items;
        let replaced =
            claims.len() == 2 && claims.iter().all(|c| !originals.contains(&c.name_any()));
        if replaced { running_pods().await } else { None }
    })
    .await;
    let claims = list(&nodeclaims(&client), &ListParams::default()).await;
    // With each claim's disruption annotations: a rolled-back command leaves
    // `disruption-failed`, and the claim waits out a cooldown before it is tried again.
    assert!(
        rolled.is_ok(),
        "drift did not roll: claims {:?}",
        claims
            .iter()
            .map(|c| {
                let disruption: Vec<(&String, &String)> = (c.annotations().iter())
                    .filter(|(k, _)| k.contains("disruption"))
                    .collect();
                let conditions = c.data["status"]["conditions"].clone();
                (c.name_any(), conditions, format!("{disruption:?}"))
            })
            .collect::<Vec<_>>()
    );
    assert!(
        most_machines.load(std::sync::atomic::Ordering::Relaxed) <= 2,
        "never more Machines than hosts"
    );
    assert_eq!(taken_hosts(&client, &cluster_ns).await, 2);
    // The first drifted node had no free host: terminate-first. So does the second: the
    // first one's pod, pending or leaving, is placed before its own and keeps the host (or
    // the in-flight NodeClaim) it waits for. Only in the moment between the first pod's
    // deletion and its replica's creation may the second find that host free and go
    // surge-first onto it, as it should wherever a replacement can launch.
    let terminate_first = counter(
        &env,
        "karpenter_voluntary_disruption_terminate_first_decisions_total",
    )
    .await;
    assert!(
        (1..=2).contains(&terminate_first),
        "the first drifted node went terminate-first: {terminate_first}"
    );
    let page = scrape(env.metrics_addr).await;
    assert!(
        page.contains(&format!(r#"karpenter_voluntary_disruption_decisions_total{{decision="terminate-first",reason="drifted",consolidation_type=""}} {terminate_first}"#)),
        "{page}"
    );
}

/// The power state and reboot annotation of host `name`, read (an error fails the test).
async fn power_of(api: &Api<DynamicObject>, name: &str) -> (Value, bool) {
    let h = api.get(name).await.expect("host");
    (
        h.data["status"]["poweredOn"].clone(),
        h.annotations().contains_key(provider::REBOOT_ANNOTATION),
    )
}

/// The Node's bootID and whether it is Ready (an error fails the test).
async fn boot_of(nodes: &Api<Node>, name: &str) -> (String, bool) {
    let n = nodes.get(name).await.expect("node");
    let status = n.status.unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (
        status.node_info.map(|i| i.boot_id).unwrap_or_default(),
        ready,
    )
}

/// The Cluster API provider of this test's workload cluster, on caches of its own (the
/// operator's is not reachable from the test); keep the tasks while it is used.
async fn capi_provider(client: &Client) -> (karpenter_core::tasks::Tasks, clusterapi::ClusterApi) {
    use clusterapi::catalogs::IndexCatalogs;
    use clusterapi::context::Context;
    let mut tasks = karpenter_core::tasks::Tasks::default();
    let capi =
        clusterapi::caches::ClusterApiCaches::start_single(&mut tasks, client, client, CLUSTER_ID);
    capi.ready().await;
    let catalogs = IndexCatalogs {
        index: templates::watch::TemplateIndex::new(),
        nodeclasses: capi.nodeclasses.store(),
        clusters: capi.clusters.store(),
        overlays: Default::default(),
        engaged: None,
    };
    let recorder = karpenter_core::events::Recorder::new(
        client.clone(),
        karpenter_core::events::Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    let ctx = Context {
        management: client.clone(),
        recorder,
        metrics: karpenter_core::metrics::Metrics::register(
            &mut prometheus_client::registry::Registry::default(),
        ),
        machines: capi.machines.store(),
        nodeclasses: capi.nodeclasses.store(),
        clusters: capi.clusters.store(),
        health_checks: capi.health_checks.store(),
        drain_rules: capi.drain_rules.store(),
        nodeclaims: kube::runtime::reflector::store::Writer::default().as_reader(),
        catalogs: std::sync::Arc::new(catalogs),
        unavailable: Default::default(),
        inventory: Default::default(),
        settings: Default::default(),
        kinds: Default::default(),
        lookups: Default::default(),
        control_planes: Default::default(),
        launched: Default::default(),
        cluster_id: CLUSTER_ID.into(),
    };
    (tasks, clusterapi::ClusterApi::new(ctx, None))
}

/// `hosts` free BareMetalHosts, NodePool `default`, and a Deployment of one pod, once that
/// pod runs on a node of a host.
async fn one_pod_on_a_host(env: &Env, hosts: usize) {
    let client = env.tb.client();
    metal_hosts(env, hosts).await;
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &deployment("web", 1, "1500m", "256Mi", json!({})),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_for("the pod Running", Duration::from_secs(60), || async {
        let l = pods.list(&ListParams::default()).await.expect("pods").items;
        (l.len() == 1 && l.iter().all(running)).then_some(())
    })
    .await
    .expect("a node on a host runs the pod");
}

/// Metal3's reboot, the provider half. The Cluster API provider finds the node's host (the
/// TestMachine's `metal3.io/BareMetalHost` annotation, else the host whose consumerRef names
/// it) and asks for a hard reboot; the test provider plays the baremetal-operator: the host
/// powers off, the annotation goes, it powers on, and the Node boots again (a new bootID;
/// broken before, Ready again). The same operation again writes nothing; the free hosts are
/// never touched; a Machine without a host cannot be rebooted (the core replaces it).
#[tokio::test]
async fn a_rebooted_host_boots_its_broken_node_again() {
    use cloudprovider::CloudProvider;
    use clusterapi::reboot::{self, HostKey, Requested};
    let env = env(vec![("metal", "2", "4Gi", "0.05", json!({}))]).await;
    let client = env.tb.client();
    let cluster_ns = env.cluster.namespace.clone();
    one_pod_on_a_host(&env, 2).await;
    let machines: Api<clusterapi_api::Machine> = Api::namespaced(client.clone(), &cluster_ns);
    let launched = list(
        &machines,
        &ListParams::default().labels(&format!("{TEMPLATE_LABEL}=metal")),
    )
    .await;
    let [machine] = launched.as_slice() else {
        panic!("one Machine from metal: {launched:?}");
    };
    let infra = provider::test_machine_resource();
    let test_machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &cluster_ns, &infra);
    let tm_name = machine.spec.infrastructure_ref.name.clone();
    let tm = test_machines.get(&tm_name).await.expect("TestMachine");
    let api = hosts(&client, &cluster_ns);
    let all = list(&api, &ListParams::default()).await;
    let held = all
        .iter()
        .find(|h| h.data["spec"]["consumerRef"]["name"] == tm_name.as_str())
        .expect("the TestMachine's host")
        .name_any();
    let free: Vec<DynamicObject> = all
        .iter()
        .filter(|h| h.name_any() != held)
        .cloned()
        .collect();
    assert_eq!(free.len(), 2, "one large and one small host stay free");
    // CAPM3's annotation names the host on the infrastructure machine.
    assert_eq!(
        tm.annotations().get(provider::HOST_ANNOTATION),
        Some(&format!("{cluster_ns}/{held}"))
    );
    assert_eq!(power_of(&api, &held).await, (json!(true), false));
    let node = tm.data["status"]["nodeName"]
        .as_str()
        .expect("the TestMachine's Node")
        .to_string();
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(
        boot_of(&nodes, &node).await,
        (format!("boot-1-{node}"), true),
        "a first bootID, kept by kwok"
    );
    break_node(&client, &node).await;

    let key = HostKey {
        namespace: cluster_ns.clone(),
        name: held.clone(),
    };
    // Through the seam: the NodeClaim's Machine (ours), its TestMachine, the host.
    let (_tasks, capi) = capi_provider(&client).await;
    let claim: api::NodeClaim = {
        let name = machine
            .labels()
            .get("karpenter.cluster.x-k8s.io/nodeclaim")
            .expect("the Machine's NodeClaim")
            .clone();
        Api::all(client.clone())
            .get(&name)
            .await
            .expect("NodeClaim")
    };
    capi.reboot(&claim, "op-1").await.expect("reboot accepted");
    let h = api.get(&held).await.expect("host");
    assert_eq!(
        h.annotations()
            .get(reboot::OPERATION_ANNOTATION)
            .map(String::as_str),
        Some("op-1")
    );
    wait_for("the host powered off", Duration::from_secs(10), || async {
        (power_of(&api, &held).await.0 == false).then_some(())
    })
    .await
    .expect("the host powers off");
    wait_for(
        "the host on again, annotation gone",
        Duration::from_secs(20),
        || async { (power_of(&api, &held).await == (json!(true), false)).then_some(()) },
    )
    .await
    .expect("the suffix-less annotation is removed and the host powers on");
    let booted = wait_for(
        "the Node booted and Ready",
        Duration::from_secs(30),
        || async {
            let (boot, ready) = boot_of(&nodes, &node).await;
            (boot != format!("boot-1-{node}") && ready).then_some(boot)
        },
    )
    .await
    .expect("a broken Node comes back Ready with a new bootID");
    assert_eq!(booted, format!("boot-2-{node}"));

    // The same operation again (a restart of the core): nothing written, no second reboot.
    let before = api.get(&held).await.expect("host").resource_version();
    capi.reboot(&claim, "op-1").await.expect("idempotent");
    let again = reboot::request(&client, machine, &infra, None, "op-1").await;
    assert_eq!(
        again.expect("idempotent"),
        Requested::AlreadyRequested(key.clone())
    );
    assert_eq!(
        api.get(&held).await.expect("host").resource_version(),
        before
    );
    assert_eq!(boot_of(&nodes, &node).await.0, booted);

    // Without the annotation the host is found by its consumerRef: a new operation reboots.
    test_machines
        .patch(
            &tm_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {provider::HOST_ANNOTATION: null}}})),
        )
        .await
        .expect("annotation removed");
    // From a host cache that lacks it, it is not found (the cache is what is read) ...
    let empty = reboot::request(&client, machine, &infra, Some(&[]), "op-2").await;
    assert!(
        matches!(empty, Err(cloudprovider::Error::RebootNotImplemented(_))),
        "{empty:?}"
    );
    // ... and by listing the namespace's hosts, it is.
    let by_consumer = reboot::request(&client, machine, &infra, None, "op-2").await;
    assert_eq!(
        by_consumer.expect("reboot accepted"),
        Requested::Annotated(key)
    );
    wait_for("a second boot", Duration::from_secs(30), || async {
        (boot_of(&nodes, &node).await == (format!("boot-3-{node}"), true)).then_some(())
    })
    .await
    .expect("the second reboot boots the Node again");

    // The free hosts were never written.
    for h in &free {
        let now = api.get(&h.name_any()).await.expect("free host");
        assert_eq!(
            now.resource_version(),
            h.resource_version(),
            "{}",
            h.name_any()
        );
        assert!(!now.annotations().contains_key(provider::REBOOT_ANNOTATION));
    }
    // A Machine whose infrastructure machine is gone has no host: not implemented (the core
    // replaces the node), the error naming the Machine.
    let mut hostless = machine.clone();
    hostless.spec.infrastructure_ref.name = "gone".into();
    let err = reboot::request(&client, &hostless, &infra, None, "op-3")
        .await
        .expect_err("no host");
    let cloudprovider::Error::RebootNotImplemented(why) = &err else {
        panic!("not RebootNotImplemented: {err}");
    };
    assert!(
        why.contains(&format!("Machine {cluster_ns}/{}", machine.name_any())),
        "{why}"
    );
}

/// The whole chain on a host: a `RebootNode` repair policy matching the broken Node's reason
/// makes the core ask the Cluster API provider for a reboot; the provider annotates the
/// host, the test provider power-cycles it, and the Node boots again and is Ready:
/// `RebootSucceeded`, the same NodeClaim, Machine and host, no second launch.
#[tokio::test]
async fn a_reboot_policy_reboots_a_broken_node_on_its_host() {
    use cloudprovider::{RepairAction, RepairPolicy};
    let env = env_tuned(
        vec![("metal", "2", "4Gi", "0.05", json!({}))],
        Identity::Admin,
        testbed::Options::all(),
        |c| {
            c.repair_policies = Some(vec![
                RepairPolicy::replace("Ready", "False", Duration::from_secs(600)).fallback(),
                RepairPolicy {
                    reason_regex: "^TestBroken$".into(),
                    termination_grace_period: Some(Duration::ZERO),
                    action: RepairAction::RebootNode,
                    ..RepairPolicy::replace("Ready", "False", Duration::from_secs(1))
                },
            ]);
        },
    )
    .await;
    let client = env.tb.client();
    let cluster_ns = env.cluster.namespace.clone();
    one_pod_on_a_host(&env, 1).await;
    let claims = list(&nodeclaims(&client), &ListParams::default()).await;
    let [claim] = claims.as_slice() else {
        panic!("one NodeClaim: {claims:?}");
    };
    let claim_name = claim.name_any();
    let node = claim.data["status"]["nodeName"]
        .as_str()
        .expect("registered")
        .to_string();
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(
        boot_of(&nodes, &node).await,
        (format!("boot-1-{node}"), true)
    );
    break_node(&client, &node).await;

    let rebooting = |c: &DynamicObject| {
        c.data["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Rebooting"))
            .map(|c| (c["status"].clone(), c["reason"].clone()))
    };
    let last = std::sync::Mutex::new(None);
    let done = wait_for("RebootSucceeded", Duration::from_secs(90), || async {
        let c = nodeclaims(&client)
            .get(&claim_name)
            .await
            .expect("NodeClaim");
        let now = rebooting(&c);
        *last.lock().unwrap_or_else(|p| p.into_inner()) = now.clone();
        (now == Some((json!("False"), json!("RebootSucceeded")))).then_some(())
    })
    .await;
    assert!(
        done.is_ok(),
        "the NodeClaim's Rebooting condition: {:?}",
        last.lock().unwrap_or_else(|p| p.into_inner())
    );
    // Rebooted in place: a new bootID, Ready, the same host and Machine, no second launch.
    assert_eq!(
        boot_of(&nodes, &node).await,
        (format!("boot-2-{node}"), true)
    );
    let host = hosts(&client, &cluster_ns)
        .get("host-0")
        .await
        .expect("host");
    assert!(
        host.annotations()
            .contains_key(clusterapi::reboot::OPERATION_ANNOTATION),
        "{:?}",
        host.annotations()
    );
    assert_eq!(
        (
            host.data["status"]["poweredOn"].clone(),
            host.annotations().contains_key(provider::REBOOT_ANNOTATION)
        ),
        (json!(true), false)
    );
    assert_eq!(machines_from(&client, &cluster_ns, "metal").await, 1);
    assert_eq!(
        counter(&env, "karpenter_capi_machines_launched_total").await,
        1
    );
    let page = scrape(env.metrics_addr).await;
    assert!(
        page.lines()
            .any(|l| l.starts_with("karpenter_nodes_reboots_total{")
                && l.contains(r#"result="succeeded""#)
                && l.ends_with(" 1")),
        "{page}"
    );
}
