//! Stateful pods on the testbed (issue 35), with the test provider playing a zonal CSI driver
//! (its external-provisioner pins each volume to the zone of the Node kube-scheduler picked;
//! a CSINode per Node carries the template's attach limit):
//! (a) a StatefulSet of 6 with a claim per pod, spread over both zones, scaled to 0 and back,
//!     then every node drifted: every pod comes back Running in its volume's zone, and no
//!     NodeClaim is launched that no pod uses;
//! (b) pods whose claims exceed the template's attach limit (2) get enough NodeClaims in one
//!     provisioning round;
//! (c) a pod whose claim's class provisions only in zone-b runs in zone-b; a pod whose local
//!     volume is on a host that is gone: no launch, a `FailedScheduling` event naming the
//!     volume, and `inspect --why` lists it (a pod without volumes beside it gets its node:
//!     the loop ran).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider::{ZONAL_DRIVER, zonal_storage_class};
use testbed::wait_for;

const ZONE: &str = "topology.kubernetes.io/zone";

/// The default templates, their CSI driver attaching at most `limit` volumes a node.
fn templates(limit: u32) -> Vec<Tpl> {
    default_templates(json!({
        "capacity.cluster-autoscaler.kubernetes.io/csi-driver": format!("{ZONAL_DRIVER}={limit}")
    }))
}

async fn create_class(client: &Client, name: &str) {
    Api::<StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &zonal_storage_class(name, true, &[]),
        )
        .await
        .expect("StorageClass");
}

/// A StatefulSet `name` of `replicas` pods of `cpu`, each with a claim `data` of `class`,
/// spread over the zones when `spread`.
fn stateful_set(name: &str, replicas: i32, cpu: &str, class: &str, spread: bool) -> StatefulSet {
    let mut spec = json!({
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}],
        "terminationGracePeriodSeconds": 0
    });
    if spread {
        spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": name}}}]);
    }
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                         "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    }))
}

async fn running_pods(client: &Client, ns: &str, n: usize, secs: u64) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let got = wait_for(
        &format!("{n} pods Running"),
        Duration::from_secs(secs),
        || async {
            let l = pods.list(&ListParams::default()).await.ok()?.items;
            (l.len() == n && l.iter().all(running)).then_some(l)
        },
    )
    .await;
    match got {
        Ok(l) => l,
        Err(_) => panic!("{n} pods not Running: {}", state(client, ns).await),
    }
}

/// What the cluster looks like, for a failure message.
async fn state(client: &Client, ns: &str) -> String {
    let claims = list(&nodeclaims(client), &ListParams::default()).await;
    let pvcs = list(
        &Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
        &ListParams::default(),
    )
    .await;
    format!(
        "pods {:?}; nodeclaims {:?}; claims {:?}",
        pod_places(client, ns).await,
        claims
            .iter()
            .map(|c| (c.name_any(), c.data["status"]["nodeName"].clone()))
            .collect::<Vec<_>>(),
        pvcs.iter()
            .map(|c| (
                c.name_any(),
                c.spec.as_ref().and_then(|s| s.volume_name.clone())
            ))
            .collect::<Vec<_>>(),
    )
}

/// Node name → zone.
async fn node_zones(client: &Client) -> BTreeMap<String, String> {
    list(&Api::<Node>::all(client.clone()), &ListParams::default())
        .await
        .iter()
        .filter_map(|n| Some((n.name_any(), n.labels().get(ZONE)?.clone())))
        .collect()
}

/// The zone a bound claim's volume is pinned to (a failed read fails the test).
async fn volume_zone(client: &Client, ns: &str, claim: &str) -> Option<String> {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(claim)
        .await
        .unwrap_or_else(|e| panic!("claim {ns}/{claim}: {e}"));
    let pv_name = pvc.spec?.volume_name?;
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&pv_name)
        .await
        .unwrap_or_else(|e| panic!("volume {pv_name}: {e}"));
    let terms = pv.spec?.node_affinity?.required?.node_selector_terms;
    let e = terms.first()?.match_expressions.as_ref()?.first()?.clone();
    (e.key == ZONE).then(|| e.values?.first().cloned())?
}

/// Every pod of `pods` runs in the zone of its claim `data-<pod>`'s volume.
async fn in_volume_zones(client: &Client, ns: &str, pods: &[Pod]) -> BTreeMap<String, String> {
    let zones = node_zones(client).await;
    let mut out = BTreeMap::new();
    for p in pods {
        let node_zone = zones.get(&node_of(p)).cloned();
        let claim = format!("data-{}", p.name_any());
        let vol_zone = volume_zone(client, ns, &claim).await;
        assert!(
            node_zone.is_some() && node_zone == vol_zone,
            "{} runs in {node_zone:?}, its volume is in {vol_zone:?}",
            p.name_any()
        );
        out.insert(p.name_any(), node_zone.unwrap_or_default());
    }
    out
}

/// Every NodeClaim's Node runs one of `pods` (none was launched for nothing).
async fn every_claim_used(client: &Client, pods: &[Pod]) {
    let used: BTreeSet<String> = pods.iter().map(node_of).collect();
    for c in list(&nodeclaims(client), &ListParams::default()).await {
        let node = c.data["status"]["nodeName"]
            .as_str()
            .unwrap_or_else(|| panic!("NodeClaim {} has no node", c.name_any()));
        assert!(
            used.contains(node),
            "NodeClaim {} (node {node:?}) runs none of the pods: {used:?}",
            c.name_any()
        );
    }
}

async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) {
    Api::<StatefulSet>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

#[tokio::test]
async fn a_statefulset_comes_back_in_its_volumes_zones() {
    let env = env(templates(16)).await;
    let client = env.tb.client();
    create_consolidating_nodepool(&client).await;
    create_class(&client, "zonal").await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    sets.create(
        &PostParams::default(),
        &stateful_set("db", 6, "500m", "zonal", true),
    )
    .await
    .expect("StatefulSet");
    let first = running_pods(&client, &ns, 6, 240).await;
    let zones = in_volume_zones(&client, &ns, &first).await;
    let per_zone: BTreeSet<&String> = zones.values().collect();
    assert_eq!(per_zone.len(), 2, "spread over both zones: {zones:?}");
    every_claim_used(&client, &first).await;

    // Scaled to 0: the empty nodes are consolidated away; the claims and volumes stay.
    scale(&client, &ns, "db", 0).await;
    wait_for("no NodeClaim left", Duration::from_secs(180), || async {
        let pods = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        let claims = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .ok()?;
        (pods.items.is_empty() && claims.items.is_empty()).then_some(())
    })
    .await
    .unwrap_or_else(|_| panic!("scale to 0 left nodes"));

    // Back to 6: each pod must go where its volume is; a node in the other zone would run
    // none of them (kube-scheduler refuses it), which `every_claim_used` catches.
    scale(&client, &ns, "db", 6).await;
    let second = running_pods(&client, &ns, 6, 240).await;
    let again = in_volume_zones(&client, &ns, &second).await;
    assert_eq!(again, zones, "every pod back in its volume's zone");
    every_claim_used(&client, &second).await;

    // Drift (a new Kubernetes version): every node is replaced, each replacement planned for
    // the pods it takes over, so in their volumes' zones.
    let before: BTreeSet<String> = list(&nodeclaims(&client), &ListParams::default())
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    drift_nodeclass_version(&client, "v1.36.0").await;
    let rolled = wait_for("every node replaced", Duration::from_secs(240), || async {
        let claims = nodeclaims(&client)
            .list(&ListParams::default())
            .await
            .ok()?;
        let names: BTreeSet<String> = claims.items.iter().map(ResourceExt::name_any).collect();
        let pods = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        let done = names.is_disjoint(&before)
            && pods.len() == 6
            && pods.iter().all(running)
            && pods
                .iter()
                .all(|p| names.iter().any(|n| node_of(p).starts_with(n.as_str())));
        done.then_some(pods)
    })
    .await;
    let third = match rolled {
        Ok(p) => p,
        Err(_) => panic!("drift did not roll: {}", state(&client, &ns).await),
    };
    let after_drift = in_volume_zones(&client, &ns, &third).await;
    assert_eq!(after_drift, zones, "replacements in the volumes' zones");
    every_claim_used(&client, &third).await;
    eprintln!("db pods by zone, three times: {after_drift:?}");
}

#[tokio::test]
async fn claims_over_the_attach_limit_get_enough_nodes_in_one_round() {
    // At most 2 volumes a node; 6 pods of 100m with a claim each fit one `small` node by cpu.
    let env = env(templates(2)).await;
    let client = env.tb.client();
    create_nodepool(&client, json!({})).await;
    create_class(&client, "zonal").await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    Api::<StatefulSet>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &stateful_set("logs", 6, "100m", "zonal", false),
        )
        .await
        .expect("StatefulSet");
    let pods = running_pods(&client, &ns, 6, 240).await;
    every_claim_used(&client, &pods).await;
    let claims = list(&nodeclaims(&client), &ListParams::default()).await;
    assert_eq!(
        claims.len(),
        3,
        "6 claims, 2 a node: {}",
        state(&client, &ns).await
    );
    // One round: every NodeClaim was created before the first of them had a Node.
    let created: BTreeSet<String> = claims
        .iter()
        .filter_map(|c| {
            c.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
        .collect();
    let first_registered = claims
        .iter()
        .filter_map(registered_at)
        .min()
        .expect("a registered NodeClaim");
    if !created.iter().all(|t| *t <= first_registered) {
        let mut events = Vec::new();
        for p in &pods {
            events.push((p.name_any(), events_for(&client, &p.name_any()).await));
        }
        panic!("created {created:?}, first registered {first_registered}: {events:#?}");
    }
    // The positive control: cpu alone would have put them on one node, and each node's
    // CSINode carries the limit kube-scheduler enforces.
    let nodes: BTreeSet<String> = pods.iter().map(node_of).collect();
    for n in &nodes {
        let node = Api::<Node>::all(client.clone()).get(n).await.expect("node");
        let alloc = node
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("cpu").cloned())
            .expect("cpu");
        assert!(
            scheduling_millis(&alloc.0) >= 600,
            "one node holds all 6 by cpu ({n}: {alloc:?})"
        );
        let csinode = Api::<CSINode>::all(client.clone())
            .get(n)
            .await
            .expect("CSINode");
        let count = csinode
            .spec
            .drivers
            .iter()
            .find(|d| d.name == ZONAL_DRIVER)
            .and_then(|d| d.allocatable.as_ref()?.count);
        assert_eq!(count, Some(2), "{n}");
    }
}

/// A NodeClaim's `Registered` transition time.
fn registered_at(c: &DynamicObject) -> Option<String> {
    c.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == "Registered" && x["status"] == "True")?["lastTransitionTime"]
        .as_str()
        .map(str::to_string)
}

fn scheduling_millis(q: &str) -> i64 {
    let parsed = match q.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => q.parse::<i64>().ok().map(|c| c * 1000),
    };
    parsed.unwrap_or_else(|| panic!("cpu quantity {q:?}"))
}

/// Creates the object `v` (apiVersion, kind, metadata) as it is.
async fn apply(client: &Client, v: Value) {
    let obj: DynamicObject = from_json(v);
    let types = obj.types.as_ref().expect("apiVersion and kind");
    let gvk = kube::core::GroupVersionKind::try_from(types).expect("gvk");
    let ar = kube::core::ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
        Some(n) => Api::namespaced_with(client.clone(), n, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
}

#[tokio::test]
async fn a_local_volume_on_a_gone_host_launches_nothing() {
    let env = env(templates(16)).await;
    let client = env.tb.client();
    create_nodepool(&client, json!({})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    apply(
        &client,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local-disks"}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
    apply(&client, json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "local-cache"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "local-disks", "local": {"path": "/mnt/ssd0"},
                 "claimRef": {"namespace": ns, "name": "cache"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gone-host"]}]}]}}}}))
    .await;
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "cache", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-disks",
                 "volumeName": "local-cache", "resources": {"requests": {"storage": "10Gi"}}}}),
    )
    .await;
    // The PV controller binds the pre-bound pair (the resolver needs bind-completed).
    wait_for("the claim bound", Duration::from_secs(60), || async {
        let c = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
            .get("cache")
            .await
            .ok()?;
        c.annotations()
            .contains_key("pv.kubernetes.io/bind-completed")
            .then_some(())
    })
    .await
    .expect("kube-controller-manager binds the claim");
    // report-0's claim may only be provisioned in zone-b.
    Api::<StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &zonal_storage_class("zone-b-only", true, &["zone-b"]),
        )
        .await
        .expect("StorageClass");
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "report", "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "zone-b-only",
                 "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    for (name, volumes) in [
        (
            "cache-0",
            json!([{"name": "cache", "persistentVolumeClaim": {"claimName": "cache"}}]),
        ),
        (
            "report-0",
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "report"}}]),
        ),
        ("web-0", json!([])),
    ] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                     "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}}],
                     "terminationGracePeriodSeconds": 0, "volumes": volumes}}),
        )
        .await;
    }
    // The control: the pod without volumes gets its node (the loop ran over both).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let web = wait_for("web-0 Running", Duration::from_secs(180), || async {
        pods.get("web-0").await.ok().filter(running).map(|_| ())
    })
    .await;
    if web.is_err() {
        panic!("web-0 not Running: {}", state(&client, &ns).await);
    }
    let event = wait_for(
        "FailedScheduling naming the volume",
        Duration::from_secs(60),
        || async {
            events_for(&client, "cache-0")
                .await
                .into_iter()
                .find(|(r, note)| r == "FailedScheduling" && note.contains("local-cache"))
        },
    )
    .await
    .expect("a FailedScheduling event from karpenter-capi naming the volume");
    assert!(event.1.contains("gone-host"), "{event:?}");
    // report-0 runs in zone-b, the only zone its class provisions in (elsewhere
    // kube-scheduler would never place it, and its NodeClaim would run nothing).
    let report = wait_for("report-0 Running", Duration::from_secs(180), || async {
        pods.get("report-0").await.ok().filter(running)
    })
    .await;
    let Ok(report) = report else {
        panic!("report-0 not Running: {}", state(&client, &ns).await);
    };
    let zones = node_zones(&client).await;
    assert_eq!(
        zones.get(&node_of(&report)).map(String::as_str),
        Some("zone-b"),
        "{zones:?}"
    );
    let web = pods.get("web-0").await.expect("web-0");
    every_claim_used(&client, &[web, report]).await;
    let cache = pods.get("cache-0").await.expect("cache-0");
    assert!(!running(&cache) && node_of(&cache).is_empty());
    let (_, pending) = karpenter_capi::inspect::collect_all(&client, &client, None, true)
        .await
        .expect("inspect --why");
    let line = pending
        .pods
        .iter()
        .find(|p| p.pod == format!("{ns}/cache-0"))
        .unwrap_or_else(|| panic!("inspect --why lists cache-0: {pending:?}"));
    assert!(line.reason.contains("local-cache"), "{line:?}");
    assert!(
        !pending.pods.iter().any(|p| p.pod.ends_with("/web-0")),
        "{pending:?}"
    );
}
