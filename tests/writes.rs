//! The control layer's write discipline, measured on the testbed: what the operator writes
//! to each launched NodeClaim's objects (itself, its Machine, TestMachine and Node; from the
//! kube-apiserver's audit log, each write attributed to its NodeClaim: at most 6 each), that
//! it never writes from a stale read (no 409), that every patch and create names one of our
//! field managers, and that a launch happens once per NodeClaim UID even when the NodeClaim
//! cache lags behind the operator's own writes.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use clusterapi::ClusterApi;
use clusterapi::catalogs::Catalogs;
use clusterapi::catalogs::IndexCatalogs;
use clusterapi::context::{Context, Settings as ProviderSettings};
use clusterapi_api::Machine;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use karpenter_core::cache::Caches;
use karpenter_core::events::{Recorder, Reporter};
use karpenter_core::metrics::{Metrics, NodePoolLabels};
use karpenter_core::nodeclaim::context::{Ctx, Settings, Shared};
use karpenter_core::nodeclaim::lifecycle;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::reflector::store::Writer;
use serde_json::json;
use testbed::{Options, wait_for};

const OPERATOR: &str = "karpenter-capi/";
const NODECLAIM_LABEL: &str = "karpenter.cluster.x-k8s.io/nodeclaim";

/// A Deployment of `replicas` pods that each need a node of their own.
fn spread(replicas: i32) -> Deployment {
    common::from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "spread", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "spread"}},
            "template": {
                "metadata": {"labels": {"app": "spread"}},
                "spec": {
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "spread"}},
                         "topologyKey": "kubernetes.io/hostname"}]}}
                }
            }
        }
    }))
}

#[tokio::test]
async fn a_scale_out_costs_at_most_six_writes_to_each_nodeclaim_and_no_conflict() {
    let env = common::env_with(
        common::default_templates(json!({})),
        common::Identity::Admin,
        Options::all().audit_log(),
    )
    .await;
    let client = env.tb.client();
    common::create_nodepool(&client, json!({})).await;
    const PODS: i32 = 20;
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &spread(PODS))
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_for("all pods Running", Duration::from_secs(240), || async {
        let list = pods
            .list(&ListParams::default().labels("app=spread"))
            .await
            .ok()?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == PODS as usize).then_some(())
    })
    .await
    .expect("pods Running");
    let claims = common::nodeclaims(&client);
    wait_for("every NodeClaim Ready", Duration::from_secs(60), || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        (list.items.len() == PODS as usize
            && list
                .items
                .iter()
                .all(|c| common::condition(c, "Ready").as_deref() == Some("True")))
        .then_some(())
    })
    .await
    .expect("claims Ready");

    let owners = owners(&client, &env.cluster.namespace).await;
    let events = env.tb.audit_events().expect("audit log");
    let ours: Vec<_> = events
        .iter()
        .filter(|e| e.is_complete() && e.user_agent.starts_with(OPERATOR))
        .collect();
    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    // Each NodeClaim's writes: "verb resource[/subresource]" in order.
    let mut per_claim: BTreeMap<String, Vec<String>> = owners
        .values()
        .map(|claim| (claim.clone(), Vec::new()))
        .collect();
    let mut shared = 0;
    let mut nameless_creates = 0;
    let mut unattributed = Vec::new();
    let mut conflicts = Vec::new();
    // Patches and creates that name no field manager of ours (`karpenter_core::write::manager`).
    let mut unmanaged = Vec::new();
    for e in ours.iter().filter(|e| e.is_write()) {
        let code = e.response_status.as_ref().and_then(|s| s.code);
        if code == Some(409) {
            conflicts.push(e.request_uri.clone());
        }
        let resource = e.resource();
        if matches!(resource, "events" | "leases") {
            continue;
        }
        if e.verb != "delete" && !e.request_uri.contains("fieldManager=karpenter-capi-") {
            unmanaged.push(format!("{} {}", e.verb, e.request_uri));
        }
        let object = e.object_ref.as_ref();
        let sub = object
            .and_then(|r| r.subresource.clone())
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let write = format!("{} {resource}{sub}", e.verb);
        *writes.entry(write.clone()).or_default() += 1;
        // The per-pool and per-class status does not grow with the number of claims.
        if resource == "nodepools" || resource == "clusterapinodeclasses" {
            shared += 1;
            continue;
        }
        let name = object.and_then(|r| r.name.clone()).unwrap_or_default();
        // NodeClaims are created with generateName: the audit event has no name yet.
        if write == "create nodeclaims" && name.is_empty() {
            nameless_creates += 1;
            continue;
        }
        match owners.get(&(resource.to_string(), name)) {
            Some(claim) => per_claim.entry(claim.clone()).or_default().push(write),
            None => unattributed.push(format!("{write} {}", e.request_uri)),
        }
    }
    let created = writes.get("create nodeclaims").copied().unwrap_or_default();
    // Each NodeClaim was created once (as many creates as NodeClaims, none deleted): its
    // create counts for it.
    assert_eq!(
        nameless_creates,
        per_claim.len(),
        "one create per NodeClaim: {writes:?}"
    );
    for sequence in per_claim.values_mut() {
        sequence.insert(0, "create nodeclaims".to_string());
    }
    let machines = writes.get("create machines").copied().unwrap_or_default();
    println!("operator writes (events and leases excluded) for {created} NodeClaims: {writes:?}");
    let most = per_claim.values().map(Vec::len).max().unwrap_or_default();
    if let Some((claim, sequence)) = per_claim.iter().max_by_key(|(_, w)| w.len()) {
        println!("the most written NodeClaim, {claim}: {sequence:?}");
    }
    println!(
        "per NodeClaim: at most {most} writes to its own objects; {shared} NodePool/NodeClass \
         status writes in all"
    );
    assert_eq!(created, PODS as usize, "one NodeClaim per pod: {writes:?}");
    assert_eq!(per_claim.len(), created, "every NodeClaim is accounted for");
    assert_eq!(
        machines, created,
        "exactly one Machine create per NodeClaim: {writes:?}"
    );
    assert!(conflicts.is_empty(), "409 conflicts: {conflicts:?}");
    assert!(
        unmanaged.is_empty(),
        "writes without a field manager of ours: {unmanaged:?}"
    );
    assert!(
        unattributed.is_empty(),
        "writes to objects of no NodeClaim: {unattributed:?}"
    );
    let over: BTreeMap<&String, &Vec<String>> =
        per_claim.iter().filter(|(_, w)| w.len() > 6).collect();
    assert!(
        over.is_empty(),
        "NodeClaims written more than 6 times: {over:#?}"
    );
    assert!(
        shared <= created,
        "NodePool/NodeClass status written {shared} times for {created} NodeClaims: {writes:?}"
    );
}

/// Which NodeClaim each object belongs to, by (resource, name): the NodeClaim itself, its
/// Node (`status.nodeName`), and the Machine and TestMachine carrying our NodeClaim label.
async fn owners(client: &kube::Client, ns: &str) -> BTreeMap<(String, String), String> {
    let mut owners = BTreeMap::new();
    let claims = common::nodeclaims(client)
        .list(&ListParams::default())
        .await
        .expect("NodeClaims");
    for c in claims.items {
        let name = c.name_any();
        if let Some(node) = c.data["status"]["nodeName"].as_str() {
            owners.insert(("nodes".to_string(), node.to_string()), name.clone());
        }
        owners.insert(("nodeclaims".to_string(), name.clone()), name);
    }
    for (resource, api) in [
        ("machines", testbed::provider::machine_resource()),
        ("testmachines", testbed::provider::test_machine_resource()),
    ] {
        let list = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &api)
            .list(&ListParams::default().labels(NODECLAIM_LABEL))
            .await
            .expect("our objects");
        for o in list.items {
            if let Some(claim) = o.labels().get(NODECLAIM_LABEL) {
                owners.insert((resource.to_string(), o.name_any()), claim.clone());
            }
        }
    }
    owners
}

#[tokio::test]
async fn a_launch_happens_once_per_uid_when_the_cache_lags() {
    let env = common::env(common::default_templates(json!({}))).await;
    let client = env.tb.client();
    // The NodeClass is Ready (the operator said so); from here on this test is the only
    // controller, and its NodeClaim cache is never fed: every reconcile sees the NodeClaim
    // as it was created, before any of the operator's own writes.
    env.operator.abort();
    wait_for("operator stopped", Duration::from_secs(10), || async {
        env.operator.is_finished().then_some(())
    })
    .await
    .expect("operator stops");
    let mut tasks = karpenter_core::tasks::Tasks::default();
    const CLUSTER_ID: &str = "writes-test";
    let caches = Caches::start(&mut tasks, &client);
    let capi = clusterapi::caches::ClusterApiCaches::start_single(
        &mut tasks, &client, &client, CLUSTER_ID,
    );
    caches.ready().await;
    capi.ready().await;
    let index = templates::watch::TemplateIndex::new();
    tasks.spawn(templates::watch::run(
        client.clone(),
        index.clone(),
        templates::watch::WatchConfig::default(),
    ));
    let catalogs = IndexCatalogs {
        index,
        nodeclasses: capi.nodeclasses.store(),
        clusters: capi.clusters.store(),
        overlays: Default::default(),
        engaged: None,
    };
    wait_for("catalog", Duration::from_secs(30), || async {
        catalogs.catalog("default").map(|_| ())
    })
    .await
    .expect("catalog of the NodeClass");
    let delayed: Writer<NodeClaim> = Writer::default();
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    let shared = Shared {
        workload: client.clone(),
        recorder: recorder.clone(),
        metrics: metrics.clone(),
        nodes: caches.nodes.clone(),
        pods: caches.pods.store(),
        nodeclaims: delayed.as_reader(),
        nodepools: caches.nodepools.store(),
        slices: caches.dra.slices.store(),
        settings: Settings::default(),
        expectations: Arc::default(),
        backoff: Arc::default(),
        registration_failures: Arc::default(),
        repairs: Arc::default(),
        repair_policies: Arc::default(),
        reboots: Arc::default(),
        connection: Default::default(),
    };
    let provider = Context {
        management: client.clone(),
        recorder,
        metrics: metrics.clone(),
        machines: capi.machines.store(),
        nodeclasses: capi.nodeclasses.store(),
        clusters: capi.clusters.store(),
        health_checks: capi.health_checks.store(),
        drain_rules: capi.drain_rules.store(),
        nodeclaims: delayed.as_reader(),
        catalogs: Arc::new(catalogs),
        unavailable: Arc::default(),
        inventory: Default::default(),
        settings: ProviderSettings::default(),
        kinds: Arc::default(),
        lookups: Arc::default(),
        control_planes: Arc::default(),
        launched: Arc::default(),
        cluster_id: CLUSTER_ID.into(),
    };
    let ctx = Ctx {
        shared: shared.clone(),
        provider: Arc::new(ClusterApi::new(provider.clone(), None)),
    };
    let api: Api<NodeClaim> = Api::all(client.clone());
    let stale: Arc<NodeClaim> = Arc::new(
        api.create(
            &PostParams::default(),
            &common::from_json(
                serde_json::to_value(common::nodeclaim("delayed", json!([]))).expect("json"),
            ),
        )
        .await
        .expect("nodeclaim"),
    );
    let launched = || {
        metrics
            .machines_launched
            .get_or_create(&NodePoolLabels {
                nodepool: "default".into(),
            })
            .get()
    };
    let machines: Api<Machine> = Api::namespaced(client.clone(), &env.cluster.namespace);
    let count_machines = || async {
        machines
            .list(&ListParams::default().labels("karpenter.cluster.x-k8s.io/nodeclaim=delayed"))
            .await
            .expect("machines")
            .items
            .len()
    };

    // First reconcile: plans (one write) and creates the Machine.
    let ctx = Arc::new(ctx);
    lifecycle::reconcile(stale.clone(), ctx.clone())
        .await
        .expect("first reconcile launches");
    assert_eq!(launched(), 1);
    assert_eq!(count_machines().await, 1);

    // The same stale object again: the operator knows it has not seen its own write yet.
    let action = lifecycle::reconcile(stale.clone(), ctx.clone())
        .await
        .expect("second reconcile waits");
    println!("second reconcile on the stale object: {action:?}");
    assert_eq!(launched(), 1, "no second launch from a stale cache");

    // A process that lost its memory (a restart) with the same stale object: the plan write
    // is conditional on the resourceVersion it was computed from, so it is refused (409)
    // instead of planning and launching again.
    let restarted = Arc::new(Ctx {
        shared: Shared {
            expectations: Arc::default(),
            ..shared
        },
        provider: Arc::new(ClusterApi::new(
            Context {
                launched: Arc::default(),
                ..provider
            },
            None,
        )),
    });
    let err = lifecycle::reconcile(stale.clone(), restarted.clone())
        .await
        .expect_err("a decision from the stale object is refused");
    assert!(err.is_conflict(), "{err}");
    // With the fresh object it resumes the recorded plan and adopts the Machine.
    let fresh = Arc::new(api.get("delayed").await.expect("fresh"));
    wait_for("Machine cached", Duration::from_secs(10), || async {
        (capi.machines.store().state().len() == 1).then_some(())
    })
    .await
    .expect("machine in cache");
    lifecycle::reconcile(fresh, restarted)
        .await
        .expect("resumes the plan");
    assert_eq!(launched(), 1, "adopting is not launching");
    assert_eq!(count_machines().await, 1, "exactly one Machine for the UID");
}
