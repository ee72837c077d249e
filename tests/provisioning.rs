//! Provisioning end to end on the testbed: Deployments go Pending → the provisioner creates
//! NodeClaims → orphan Machines (the real Cluster API manager + the test provider) → kwok
//! Nodes → kube-scheduler binds → pods Running. Also NodePool status, events and limits.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::passes::{counter, provisioning_passes};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::wait_for;

#[tokio::test]
async fn thirty_mixed_pods_get_nodes_of_the_right_shapes_and_run() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_nodepool(&client, json!({"cpu": "200"})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}}});
    // 20 × 500m spread over both zones, 4 × 1 cpu one per node, 6 × 3 cpu (only `large`, 8
    // cpu, holds one: `small` has 2 cpu).
    for d in [
        deployment("web", 20, "500m", "512Mi", spread),
        deployment("db", 4, "1", "1Gi", anti),
        deployment("batch", 6, "3", "2Gi", json!({})),
    ] {
        deployments
            .create(&PostParams::default(), &d)
            .await
            .expect("deployment");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let all = all_running(&client, &ns, 30, 180).await;

    // Pods may run once the Node is registered; initialization follows.
    wait_for("NodeClaims Ready", Duration::from_secs(30), || async {
        let l = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        l.iter()
            .all(|c| condition(c, "Ready").as_deref() == Some("True"))
            .then_some(())
    })
    .await
    .expect("every NodeClaim Ready");
    let nodes: BTreeMap<String, Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("karpenter.sh/nodepool=default"))
        .await
        .expect("nodes")
        .items
        .into_iter()
        .map(|n| (n.name_any(), n))
        .collect();
    let label = |node: &str, key: &str| -> String {
        nodes
            .get(node)
            .and_then(|n| n.labels().get(key).cloned())
            .unwrap_or_default()
    };
    for p in &all {
        let n = node_of(p);
        assert!(
            nodes.contains_key(&n),
            "{} on {n}, not one of ours",
            p.name_any()
        );
        assert_eq!(label(&n, "karpenter.sh/initialized"), "true");
        assert_eq!(
            label(&n, "team"),
            "web",
            "NodePool template labels on the Node"
        );
    }
    // Shapes: every 3-cpu pod is on a `large`.
    for p in pods_of(&pods, "batch").await {
        assert_eq!(
            label(&node_of(&p), "node.kubernetes.io/instance-type"),
            "large"
        );
    }
    // One db per node.
    let db_nodes: BTreeSet<String> = pods_of(&pods, "db").await.iter().map(node_of).collect();
    assert_eq!(db_nodes.len(), 4, "{db_nodes:?}");
    // web spread over both zones within skew 1.
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods_of(&pods, "web").await {
        *per_zone
            .entry(label(&node_of(&p), "topology.kubernetes.io/zone"))
            .or_default() += 1;
    }
    let counts: Vec<usize> = per_zone.values().copied().collect();
    assert_eq!(
        per_zone.keys().cloned().collect::<Vec<_>>(),
        vec!["zone-a", "zone-b"]
    );
    assert!(
        counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1,
        "{per_zone:?}"
    );

    // NodeClaims: one per Node, written as Karpenter writes them.
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    assert_eq!(claims.len(), nodes.len(), "one NodeClaim per Node");
    // 32 cpu requested: at least 5 nodes (large ≈ 7.8 cpu allocatable), and packing must
    // not degrade to a node per pod or so. Price-aware packing may take a few more `small`
    // nodes than first-fit's fewest when they cost less in all (docs/concepts.md#price-aware-packing):
    // 11 of them (7 small, 4 large) on this catalog.
    let shapes: BTreeMap<String, usize> = nodes.keys().fold(BTreeMap::new(), |mut m, n| {
        *m.entry(label(n, "node.kubernetes.io/instance-type"))
            .or_default() += 1;
        m
    });
    eprintln!("nodes: {} {shapes:?}", nodes.len());
    assert!(
        (5..=12).contains(&nodes.len()),
        "{} nodes {shapes:?}",
        nodes.len()
    );
    assert!(shapes.get("large").copied().unwrap_or(0) >= 3, "{shapes:?}");
    let mut total_cpu = 0i64;
    for c in &claims {
        assert!(c.name_any().starts_with("default-"));
        assert_eq!(condition(c, "Ready").as_deref(), Some("True"));
        let owner = &c.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("NodePool", "default")
        );
        assert!(c.annotations().contains_key("karpenter.sh/nodepool-hash"));
        let reqs = c.data["spec"]["requirements"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            reqs.iter()
                .any(|r| r["key"] == "node.kubernetes.io/instance-type" && r["operator"] == "In"),
            "{reqs:?}"
        );
        total_cpu += c.data["status"]["capacity"]["cpu"]
            .as_str()
            .and_then(|q| q.parse::<i64>().ok())
            .expect("integer cpu capacity");
    }
    // NodePool status follows.
    let np = wait_for("NodePool status", Duration::from_secs(10), || async {
        let np = nodepools(&client).get("default").await.ok()?;
        (np.data["status"]["nodes"] == json!(claims.len())).then_some(np)
    })
    .await
    .expect("NodePool status.nodes");
    assert_eq!(
        np.data["status"]["resources"]["cpu"],
        json!(total_cpu.to_string())
    );
    assert_eq!(
        condition(&np, "NodeRegistrationHealthy").as_deref(),
        Some("True")
    );
    // Events: pods were nominated to NodeClaims.
    let nominated = events_for_reason(&client, "Nominated").await;
    assert!(nominated >= 30, "{nominated} Nominated events");
    // Nothing more is launched once everything runs: two provisioning batches run with the
    // 30 pods in the cluster state and create nothing.
    provisioning_passes(&env, &ns, 2).await;
    let after = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
        .len();
    assert_eq!(after, claims.len());
}

/// Waits until `ns` has exactly `n` pods, all Running; panics with the cluster's state.
async fn all_running(client: &Client, ns: &str, n: usize, timeout_secs: u64) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let l = wait_for(
        &format!("{n} pods Running"),
        Duration::from_secs(timeout_secs),
        || async {
            let l = pods.list(&ListParams::default()).await.ok()?.items;
            (l.len() == n && l.iter().all(running)).then_some(l)
        },
    )
    .await;
    match l {
        Ok(l) => l,
        Err(_) => panic!("{n} pods not Running: {}", diagnose(client, ns).await),
    }
}

/// What the cluster looks like, for a failure message.
async fn diagnose(client: &Client, ns: &str) -> String {
    let mut out = String::new();
    if let Ok(np) = nodepools(client).get("default").await {
        out += &format!("\nNodePool status: {}", np.data["status"]);
    }
    for c in nodeclaims(client)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        out += &format!(
            "\nNodeClaim {} {:?} conditions {}",
            c.name_any(),
            c.labels().get("node.kubernetes.io/instance-type"),
            c.data["status"]["conditions"]
        );
    }
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    for e in events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let Some(r) = e
            .regarding
            .as_ref()
            .filter(|r| r.kind.as_deref() != Some("Pod"))
        else {
            continue;
        };
        out += &format!(
            "\nEvent {:?}/{:?}: {:?} {:?}",
            r.kind, r.name, e.reason, e.note
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for p in pods
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        out += &format!(
            "\nPod {} node={} phase={:?} events={:?}",
            p.name_any(),
            node_of(&p),
            p.status.as_ref().and_then(|s| s.phase.clone()),
            events_for(client, &p.name_any()).await
        );
    }
    out
}

async fn events_for_reason(client: &Client, reason: &str) -> usize {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .count()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn limits_stop_provisioning_and_pending_pods_say_why() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    // One `large` (8 cpu) fits under 10 cpu; a second does not.
    create_nodepool(&client, json!({"cpu": "10"})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("batch", 4, "3", "1Gi", json!({})),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let all = wait_for("2 pods Running", Duration::from_secs(120), || async {
        let l = pods.list(&ListParams::default()).await.ok()?.items;
        (l.len() == 4 && l.iter().filter(|p| running(p)).count() == 2).then_some(l)
    })
    .await;
    let Ok(all) = all else {
        panic!("2 of 4 pods not Running: {}", diagnose(&client, &ns).await);
    };
    let pending: Vec<String> = all
        .iter()
        .filter(|p| !running(p))
        .map(ResourceExt::name_any)
        .collect();
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    assert_eq!(claims.len(), 1);
    for name in &pending {
        let reasons = wait_for("FailedScheduling", Duration::from_secs(30), || async {
            let ev = events_for(&client, name).await;
            ev.iter()
                .any(|(r, note)| r == "FailedScheduling" && note.contains("limit"))
                .then_some(ev)
        })
        .await
        .expect("pending pod has a FailedScheduling event naming the limit");
        assert!(
            reasons
                .iter()
                .any(|(_, note)| note.contains("nodepool limit on cpu")),
            "{reasons:?}"
        );
    }
    // Still one claim after further batches (which reconsider the two pending pods).
    provisioning_passes(&env, &ns, 2).await;
    let after = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims");
    assert_eq!(after.items.len(), 1);
    let np = nodepools(&client).get("default").await.expect("nodepool");
    assert_eq!(np.data["status"]["resources"]["cpu"], "8");
    assert_eq!(np.data["status"]["resources"]["nodes"], "1");
    // A settled status is not rewritten: the status loop recomputes every NodePool in each
    // pass, and the pass that writes the new pool's first status recomputed `default` too.
    create_burst_pool(&client).await;
    wait_for(
        "status of a new NodePool",
        Duration::from_secs(30),
        || async {
            let burst = nodepools(&client).get("burst").await.ok()?;
            condition(&burst, "Ready").map(|_| ())
        },
    )
    .await
    .expect("the status loop writes the new NodePool's status");
    let again = nodepools(&client).get("default").await.expect("nodepool");
    assert_eq!(again.resource_version(), np.resource_version());

    limits_hold_under_a_burst(&client).await;
}

/// The cpu a NodePool's NodeClaims take: their capacity (from the status, else the launch
/// plan), in millicores.
async fn pool_cpu_millis(client: &Client, pool: &str) -> (i64, usize) {
    let claims = nodeclaims(client)
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .expect("claims")
        .items;
    let cpu = |c: &DynamicObject| -> i64 {
        let from_status = c.data["status"]["capacity"]["cpu"]
            .as_str()
            .map(str::to_string);
        let from_plan = c
            .annotations()
            .get("karpenter.cluster.x-k8s.io/launch")
            .and_then(|p| serde_json::from_str::<Value>(p).ok())
            .and_then(|p| p["capacity"]["cpu"].as_str().map(str::to_string));
        from_status
            .or(from_plan)
            .and_then(|q| q.parse::<i64>().ok())
            .map_or(0, |c| c * 1000)
    };
    (claims.iter().map(cpu).sum(), claims.len())
}

/// NodePool `burst`: any instance type, cpu limit 10, no consolidation.
async fn create_burst_pool(client: &Client) {
    nodepools(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "burst"},
                "spec": {
                    "template": {"spec": {
                        "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                                         "kind": "ClusterAPINodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type",
                                          "operator": "In", "values": ["on-demand"]}]}},
                    "limits": {"cpu": "10"},
                    "disruption": {"consolidateAfter": "Never"}
                }
            })),
        )
        .await
        .expect("nodepool");
}

/// 300 pods of 100m arrive at once for NodePool `burst` (see [`create_burst_pool`]), whose cpu limit (10) fits about a third
/// of them: the NodePool's NodeClaims never exceed the limit (the bound README.md
/// documents), and the pods left over say why.
async fn limits_hold_under_a_burst(client: &Client) {
    const LIMIT_MILLIS: i64 = 10_000;
    let ns = "default";
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &deployment(
                "burst",
                300,
                "100m",
                "64Mi",
                json!({"nodeSelector": {"karpenter.sh/nodepool": "burst"}}),
            ),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let started = std::time::Instant::now();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    // Until the pods that fit run and the rest are refused for the limit.
    let settled = wait_for("burst settles", Duration::from_secs(180), || {
        let pods = pods.clone();
        let peak = peak.clone();
        async move {
            let (cpu, _) = pool_cpu_millis(client, "burst").await;
            peak.fetch_max(cpu, std::sync::atomic::Ordering::SeqCst);
            let l = pods_of(&pods, "burst").await;
            let up = l.iter().filter(|p| running(p)).count();
            let pending: Vec<&Pod> = l.iter().filter(|p| !running(p)).collect();
            if l.len() != 300 || pending.is_empty() {
                return None;
            }
            let refused = events_for(client, &pending[0].name_any())
                .await
                .iter()
                .any(|(r, n)| r == "FailedScheduling" && n.contains("limit"));
            let claims_done = nodeclaims(client)
                .list(&ListParams::default().labels("karpenter.sh/nodepool=burst"))
                .await
                .ok()?
                .items
                .iter()
                .all(|c| condition(c, "Initialized").as_deref() == Some("True"));
            (refused && claims_done && up > 0).then_some(up)
        }
    })
    .await;
    let Ok(running_pods) = settled else {
        panic!("burst did not settle: {}", diagnose(client, ns).await);
    };
    let (cpu, claims) = pool_cpu_millis(client, "burst").await;
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "burst of 300 pods (100m) under a 10-cpu limit: {claims} NodeClaims, {cpu}m cpu \
         (peak {peak}m), {running_pods} pods running, settled after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        peak.max(cpu) <= LIMIT_MILLIS,
        "limit overrun: {}m over",
        peak.max(cpu) - LIMIT_MILLIS
    );
}

#[tokio::test]
async fn the_operator_needs_nothing_beyond_the_deploy_base_rbac() {
    lifecycle_as(Identity::DeployBase).await;
}

#[tokio::test]
async fn the_operator_needs_nothing_beyond_the_helm_chart_rbac() {
    lifecycle_as(Identity::HelmChart).await;
}

/// The whole lifecycle with the operator running as `identity`, so that every cache, launch,
/// status write, event, disruption, drain, termination and collection goes through its
/// ServiceAccount: pending pods get nodes launched through a KubeadmConfigTemplate bootstrap
/// (the kubeadm clone path), the NodePool's status is written, an orphaned Machine of ours is
/// collected, and once the pods go the empty nodes are disrupted, drained and terminated
/// down to nothing (no NodeClaim, Machine, KubeadmConfig or Node left).
async fn lifecycle_as(identity: Identity) {
    let env = env_as(default_templates(json!({})), identity).await;
    let client = env.tb.client();
    let cluster_ns = env.cluster.namespace.clone();
    create_kubeadm_nodeclass(&client, &cluster_ns, "kubeadm", "rbac").await;
    create_pool_on(&client, "kubeadm").await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 3, "500m", "256Mi", json!({})),
        )
        .await
        .expect("deployment");
    let running_pods = all_running(&client, &ns, 3, 120).await;
    let nominated = events_for(&client, &running_pods[0].name_any()).await;
    assert!(
        nominated.iter().any(|(r, _)| r == "Nominated"),
        "{nominated:?}"
    );
    wait_for("NodePool status.nodes", Duration::from_secs(10), || async {
        let np = nodepools(&client).get("default").await.ok()?;
        (np.data["status"]["nodes"] == json!(1)).then_some(())
    })
    .await
    .expect("NodePool status written by the ServiceAccount");
    // Launched through the kubeadm path: the Node joined with the template's label, and the
    // Machine's KubeadmConfig is a clone labelled ours.
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("example.com/pool=rbac"))
        .await
        .expect("nodes");
    assert_eq!(
        nodes.items.len(),
        1,
        "one Node joined from the kubeadm template"
    );
    let kubeadm_configs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &cluster_ns,
        &ar(
            "bootstrap.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmConfig",
            "kubeadmconfigs",
        ),
    );
    let ours = ListParams::default().labels("karpenter.cluster.x-k8s.io/nodeclaim");
    assert_eq!(
        kubeadm_configs
            .list(&ours)
            .await
            .expect("configs")
            .items
            .len(),
        1,
        "one KubeadmConfig cloned for the one NodeClaim"
    );

    // Garbage collection as the ServiceAccount: an orphaned Machine of ours (this workload
    // cluster's id: the kube-system namespace's UID, the operator's default) is collected.
    let cluster_id = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .expect("kube-system")
        .uid()
        .expect("uid");
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &cluster_ns,
        &testbed::provider::machine_resource(),
    );
    machines
        .create(&PostParams::default(), &from_json(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "ghost", "labels": {
                "cluster.x-k8s.io/cluster-name": "c1",
                "karpenter.cluster.x-k8s.io/nodeclaim": "default-gone1",
                "karpenter.cluster.x-k8s.io/cluster-id": cluster_id},
                "annotations": {"karpenter.cluster.x-k8s.io/nodeclaim-uid": "uid-of-a-deleted-claim"}},
            "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "bootstrap-data"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                           "kind": "TestMachine", "name": "ghost-infra"}}
        })))
        .await
        .expect("orphan Machine");

    // Disruption, drain and termination as the ServiceAccount: the pods go, the empty node
    // is disrupted (an event says so) and everything we made is gone.
    let claim = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
        .remove(0)
        .name_any();
    deployments
        .delete("web", &Default::default())
        .await
        .expect("delete deployment");
    wait_for("all collected", Duration::from_secs(120), || async {
        let claims = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .ok()?;
        // Ours are gone once their claims are (termination waits for them); the ghost has
        // no Node, so the Cluster API manager may still be finishing its deletion.
        let machines = machines.list(&ListParams::default()).await.ok()?;
        let machines_going = machines
            .items
            .iter()
            .all(|m| m.metadata.deletion_timestamp.is_some());
        let configs = kubeadm_configs.list(&ours).await.ok()?;
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels("example.com/pool=rbac"))
            .await
            .ok()?;
        (claims.items.is_empty()
            && machines_going
            && configs.items.is_empty()
            && nodes.items.is_empty())
        .then_some(())
    })
    .await
    .expect("no NodeClaim, Machine, KubeadmConfig or Node left");
    let events = events_for(&client, &claim).await;
    assert!(
        events
            .iter()
            .any(|(r, note)| r == "DisruptionTerminating" && note.contains("mpty")),
        "the empty node was disrupted: {events:?}"
    );
}

/// NodePool `default` on NodeClass `nodeclass`, removing empty nodes at once, once Ready.
async fn create_pool_on(client: &Client, nodeclass: &str) {
    nodepools(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "default"},
                "spec": {
                    "template": {"spec": {
                        "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                                         "kind": "ClusterAPINodeClass", "name": nodeclass},
                        "requirements": [{"key": "karpenter.sh/capacity-type",
                                          "operator": "In", "values": ["on-demand"]}]}},
                    "disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmpty",
                                   "budgets": [{"nodes": "100%"}]}
                }
            })),
        )
        .await
        .expect("nodepool");
    wait_for("NodePool Ready", Duration::from_secs(60), || async {
        let np = nodepools(client).get("default").await.ok()?;
        (condition(&np, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await
    .expect("NodePool on the kubeadm NodeClass becomes Ready");
}

#[tokio::test]
async fn empty_nodes_are_removed_within_the_budget_and_do_not_disrupt_is_kept() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_nodepool_with(
        &client,
        json!({}),
        json!({"consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}),
    )
    .await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}}});
    deployments
        .create(
            &PostParams::default(),
            &deployment("db", 3, "500m", "256Mi", anti),
        )
        .await
        .expect("deployment");
    all_running(&client, &ns, 3, 120).await;
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    assert_eq!(claims.len(), 3);
    // Nodes with pods are not empty: nothing is disrupted while the pods run. The sentinel:
    // a disruption pass judged every node with its pod (it writes its verdict as each
    // claim's Consolidatable condition) and still all three stand. (A pass that disrupted one
    // later would show below: its event would not say `empty`, or `keep` would be gone.)
    let judged = wait_for(
        "every NodeClaim judged by a disruption pass",
        Duration::from_secs(60),
        || async {
            let l = nodeclaims(&client)
                .list(&ListParams::default())
                .await
                .ok()?
                .items;
            l.iter()
                .all(|c| condition(c, "Consolidatable").is_some())
                .then_some(l)
        },
    )
    .await
    .expect("the disruption loop writes its verdict on each NodeClaim");
    assert_eq!(judged.len(), 3);
    assert!(
        judged
            .iter()
            .all(|c| c.metadata.deletion_timestamp.is_none()),
        "a node with a pod was disrupted"
    );
    let keep = claims[0].name_any();
    nodeclaims(&client)
        .patch(
            &keep,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
        )
        .await
        .expect("annotate");
    let scale = json!({"spec": {"replicas": 0}});
    deployments
        .patch(
            "db",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&scale),
        )
        .await
        .expect("scale to 0");
    // The two others go, one at a time (budget 1); the annotated one stays.
    let most_deleting = std::sync::atomic::AtomicUsize::new(0);
    let (most, c) = (&most_deleting, &client);
    let left = wait_for(
        "empty NodeClaims removed",
        Duration::from_secs(150),
        || async move {
            let l = nodeclaims(c).list(&ListParams::default()).await.ok()?.items;
            let deleting = l
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_some())
                .count();
            most.fetch_max(deleting, std::sync::atomic::Ordering::Relaxed);
            (l.len() == 1).then_some(l)
        },
    )
    .await;
    let Ok(left) = left else {
        panic!(
            "empty NodeClaims not removed: {}",
            diagnose(&client, &ns).await
        );
    };
    assert_eq!(left[0].name_any(), keep);
    let most = most_deleting.into_inner();
    assert!(most <= 1, "{most} disrupted at once with a budget of 1");
    let events = events_for(&client, &claims[1].name_any()).await;
    let events2 = events_for(&client, &claims[2].name_any()).await;
    let disrupted = events
        .iter()
        .chain(&events2)
        .filter(|(r, note)| {
            r == "DisruptionTerminating" && note.starts_with("Disrupting NodeClaim: empty")
        })
        .count();
    assert_eq!(disrupted, 2, "{events:?} {events2:?}");
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &env.cluster.namespace,
        &testbed::provider::machine_resource(),
    );
    wait_for(
        "Machines of the removed claims gone",
        Duration::from_secs(60),
        || async {
            (machines
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .len()
                == 1)
                .then_some(())
        },
    )
    .await
    .expect("one Machine left");
}

#[tokio::test]
async fn an_underutilized_node_is_consolidated_onto_free_room_elsewhere() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_consolidating_nodepool(&client).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // First a small pod (→ a `small` node), then a 3-cpu one (→ a `large` node, which has
    // room for the small pod as well).
    for (name, cpu, count) in [("little", "500m", 1), ("big", "3", 2)] {
        deployments
            .create(
                &PostParams::default(),
                &deployment(name, 1, cpu, "256Mi", json!({})),
            )
            .await
            .expect("deployment");
        all_running(&client, &ns, count, 120).await;
    }
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    assert_eq!(claims.len(), 2, "one node per deployment");
    let small = claims
        .iter()
        .find(|c| {
            c.labels()
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str)
                == Some("small")
        })
        .expect("a small NodeClaim")
        .name_any();
    // The small node goes; its pod runs on the large one.
    let done = wait_for("consolidated", Duration::from_secs(150), || async {
        let l = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        let p = pods.list(&ListParams::default()).await.ok()?.items;
        let one_node: BTreeSet<String> = p.iter().map(node_of).collect();
        (l.len() == 1 && p.len() == 2 && p.iter().all(running) && one_node.len() == 1).then_some(l)
    })
    .await;
    let Ok(left) = done else {
        panic!("not consolidated: {}", diagnose(&client, &ns).await);
    };
    assert_ne!(left[0].name_any(), small);
    let events = events_for(&client, &small).await;
    assert!(
        events
            .iter()
            .any(|(r, note)| r == "DisruptionTerminating" && note.contains("underutilized")),
        "{events:?}"
    );
}

#[tokio::test]
async fn pods_arriving_while_a_nodeclaim_launches_are_packed_onto_it() {
    // Machines take 25 s to provision, so the first NodeClaim is still in flight when the
    // second pod comes, and both pods wait through several provisioning batches (a pod is
    // reconsidered every 10 s): each batch nominates them to the same NodeClaim again.
    let env = env(default_templates(
        json!({"testbed.cluster.x-k8s.io/provision-delay": "25s"}),
    ))
    .await;
    let client = env.tb.client();
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 1, "500m", "256Mi", json!({})),
        )
        .await
        .expect("deployment");
    let first = wait_for("a NodeClaim", Duration::from_secs(30), || async {
        let l = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        l.first().map(ResourceExt::name_any)
    })
    .await
    .expect("first NodeClaim");
    let scale = json!({"spec": {"replicas": 2}});
    deployments
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&scale),
        )
        .await
        .expect("scale to 2");
    let l = all_running(&client, &ns, 2, 90).await;
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    assert_eq!(claims.len(), 1, "the second pod did not need a second node");
    let mut nominated = Vec::new();
    for p in &l {
        nominated.extend(
            events_for(&client, &p.name_any())
                .await
                .into_iter()
                .filter(|(r, _)| r == "Nominated")
                .map(|(_, note)| note),
        );
    }
    let expected = format!("Pod should schedule on: nodeclaim/{first}");
    assert!(
        nominated.iter().filter(|n| **n == expected).count() >= 2,
        "{nominated:?}"
    );
    // Re-nominations to the same NodeClaim are one Event object per pod, a series.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let all = events.list(&ListParams::default()).await.expect("events");
    let mut counts = Vec::new();
    for p in &l {
        let of_pod: Vec<_> = all
            .items
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some("Nominated")
                    && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == p.uid().as_deref()
            })
            .collect();
        assert_eq!(of_pod.len(), 1, "{}: {of_pod:#?}", p.name_any());
        counts.push(of_pod[0].series.as_ref().map_or(1, |s| s.count));
    }
    assert!(
        counts.iter().any(|c| *c >= 2),
        "no pod was nominated twice (the batches did not run again?): {counts:?}"
    );
}

/// A burst of pods is not an Event per pod: new `Nominated` Events are rate limited as
/// Karpenter's are (a burst, then a few per second), nothing else is written per pod, and
/// every pod still runs.
#[tokio::test]
async fn a_burst_of_pods_is_nominated_within_the_event_rate() {
    use karpenter_core::events::{NOMINATION_BURST, NOMINATION_QPS};
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_nodepool(&client, json!({"cpu": "200"})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // Created at once (no ReplicaSet pacing), so the provisioner sees them together.
    let n = 4 * NOMINATION_BURST.get() as usize;
    let spec = deployment("burst", 1, "50m", "64Mi", json!({}))
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod spec");
    let creates = (0..n).map(|i| {
        let pod = Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("burst-{i}")),
                labels: Some([("app".to_string(), "burst".to_string())].into()),
                ..Default::default()
            },
            spec: Some(spec.clone()),
            ..Default::default()
        };
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &pod).await }
    });
    for created in futures::future::join_all(creates).await {
        created.expect("pod");
    }
    all_running(&client, &ns, n, 180).await;

    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let ours: Vec<_> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("karpenter"))
        .collect();
    let mut nominated: Vec<_> = ours
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Nominated"))
        .filter_map(|e| e.event_time.as_ref().map(|t| t.0))
        .collect();
    nominated.sort();
    let reasons: BTreeSet<_> = ours.iter().filter_map(|e| e.reason.clone()).collect();
    eprintln!(
        "{n} pods: {} Events of ours {reasons:?}, {} Nominated",
        ours.len(),
        nominated.len()
    );
    let burst = NOMINATION_BURST.get() as usize;
    assert!(
        nominated.len() >= burst,
        "the first {burst} nominations are written: {}",
        nominated.len()
    );
    let span = match (nominated.first(), nominated.last()) {
        (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
        _ => 0.0,
    };
    let allowed = burst + (NOMINATION_QPS.get() as f64 * (span + 1.0)).ceil() as usize;
    assert!(
        nominated.len() <= allowed,
        "{} Nominated Events over {span:.1} s: more than the rate allows ({allowed})",
        nominated.len()
    );
    assert!(
        ours.len() < n,
        "{} Events of ours for {n} pods: {reasons:?}",
        ours.len()
    );
}

#[tokio::test]
async fn max_machines_caps_a_template_without_a_launch_loop() {
    let env = env(vec![("metal", "2", "4Gi", "0.10", json!({}))]).await;
    let client = env.tb.client();
    let cluster_ns = env.cluster.namespace.clone();
    // At most 3 Machines from `metal`. The price changes in the same write, so the NodeClass
    // status showing the new price proves the operator's template cache has the count.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &cluster_ns,
        &testbed::provider::test_machine_template_resource(),
    );
    templates
        .patch(
            "metal",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "karpenter.cluster.x-k8s.io/max-machines": "3",
                "karpenter.cluster.x-k8s.io/price": "0.11"}}})),
        )
        .await
        .expect("annotate template");
    wait_for(
        "catalog with the count",
        Duration::from_secs(30),
        || async {
            let nc = nodeclasses(&client).get("default").await.ok()?;
            (nc.data["status"]["instanceTypes"][0]["price"] == "0.1100").then_some(())
        },
    )
    .await
    .expect("the NodeClass status shows the annotated template");
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    // 5 pods of 1.5 cpu: one per 2-cpu node, no fallback template.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("metal", 5, "1500m", "256Mi", json!({})),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let all = wait_for("3 pods Running", Duration::from_secs(120), || async {
        let l = pods.list(&ListParams::default()).await.ok()?.items;
        (l.len() == 5 && l.iter().filter(|p| running(p)).count() == 3).then_some(l)
    })
    .await;
    let Ok(all) = all else {
        panic!("3 of 5 pods not Running: {}", diagnose(&client, &ns).await);
    };
    for p in all.iter().filter(|p| !running(p)) {
        let name = p.name_any();
        wait_for(
            "FailedScheduling naming the count",
            Duration::from_secs(30),
            || async {
                events_for(&client, &name)
                    .await
                    .iter()
                    .any(|(r, note)| {
                        r == "FailedScheduling"
                            && note.contains(&format!("TestMachineTemplate {cluster_ns}/metal"))
                            && note.contains("karpenter.cluster.x-k8s.io/max-machines 3")
                    })
                    .then_some(())
            },
        )
        .await
        .unwrap_or_else(|_| {
            panic!("{name}: no FailedScheduling event naming the template and its count")
        });
    }
    let launched = counter(&env, "karpenter_capi_machines_launched_total").await;
    let created = counter(&env, "karpenter_nodeclaims_created_total").await;
    assert_eq!(launched, 3, "{}", diagnose(&client, &ns).await);
    assert_eq!(created, 3);
    // No launch loop: after two more batches that reconsider the two pending pods (the
    // positive sentinel), still exactly 3 NodeClaims and 3 Machines ever created.
    provisioning_passes(&env, &ns, 2).await;
    assert_eq!(
        counter(&env, "karpenter_capi_machines_launched_total").await,
        3
    );
    assert_eq!(counter(&env, "karpenter_nodeclaims_created_total").await, 3);
    let machines: Api<clusterapi_api::Machine> = Api::namespaced(client.clone(), &cluster_ns);
    let from_metal = machines
        .list(&ListParams::default().labels("karpenter.cluster.x-k8s.io/instance-template=metal"))
        .await
        .expect("machines")
        .items;
    assert_eq!(from_metal.len(), 3);
}

/// `--min-values-policy=BestEffort`: a NodePool asking for 3 instance types
/// (`minValues: 3`) when the catalog has 2 still provisions — Strict would leave the pod
/// pending — and the NodeClaim says so: `karpenter.sh/nodeclaim-min-values-relaxed: "true"`,
/// its instance-type requirement lowered to `minValues: 2`.
#[tokio::test]
async fn best_effort_relaxes_min_values_and_the_nodeclaim_says_so() {
    let env = env_tuned(
        default_templates(json!({})),
        Identity::Admin,
        testbed::Options::all(),
        |c| c.min_values_policy = scheduling::MinValuesPolicy::BestEffort,
    )
    .await;
    let client = env.tb.client();
    nodepools(&client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "default"},
                "spec": {
                    "template": {"spec": {
                        "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                                         "kind": "ClusterAPINodeClass", "name": "default"},
                        "requirements": [{"key": "node.kubernetes.io/instance-type",
                                          "operator": "Exists", "minValues": 3}]}},
                    "disruption": {"consolidateAfter": "Never"}
                }
            })),
        )
        .await
        .expect("nodepool");
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("relaxed", 1, "1", "1Gi", json!({})),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let ran = wait_for("the pod Running", Duration::from_secs(120), || async {
        let l = pods.list(&ListParams::default()).await.ok()?.items;
        l.iter().any(running).then_some(())
    })
    .await;
    if ran.is_err() {
        panic!("not Running: {}", diagnose(&client, &ns).await);
    }
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    let [claim] = &claims[..] else {
        panic!("one NodeClaim: {claims:?}");
    };
    assert_eq!(
        claim
            .annotations()
            .get("karpenter.sh/nodeclaim-min-values-relaxed"),
        Some(&"true".to_string())
    );
    let it = claim.data["spec"]["requirements"]
        .as_array()
        .and_then(|rs| {
            rs.iter()
                .find(|r| r["key"] == "node.kubernetes.io/instance-type")
        })
        .cloned()
        .unwrap_or_default();
    assert_eq!(it["minValues"], 2, "{it}");
}
