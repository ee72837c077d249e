//! Hub mode (`run --mode hub`) on real control planes: one management testbed with the
//! Cluster API manager, three workload clusters beside it (each its own kube-apiserver and
//! scheduler, on the management etcd), three Clusters of which two opt in. One operator in
//! the management cluster serves the two opted-in ones — each from its own kubeconfig Secret, into its own namespace — and not the
//! third; a NodeClass naming another tenant's Cluster is refused; a rotated kubeconfig Secret
//! re-engages; a workload API server that stops answering is marked disconnected and nothing
//! is garbage-collected for it until it answers again.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::hub::create_nodeclass;
use common::{
    condition, create_nodepool, events_for, free_addr, from_json, nodeclaims, nodeclasses,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::provider::{self, ProviderConfig, TestProvider};
use testbed::{Component, Options, Testbed, wait_for};

const CLUSTER_ID_LABEL: &str = "karpenter.cluster.x-k8s.io/cluster-id";
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Workload clusters beside `mgmt` (on its etcd): API server and scheduler (pending pods
/// are marked Unschedulable).
async fn workloads<const N: usize>(mgmt: &Testbed) -> [Testbed; N] {
    mgmt.start_workloads(N, Options::default().with(Component::Scheduler))
        .await
        .expect("workload testbeds start")
        .try_into()
        .unwrap_or_else(|_| unreachable!("N started"))
}

/// Pods `web-0`..`web-<n-1>` of 1 CPU in the workload cluster's default namespace.
async fn pending_pods(client: &Client, n: usize) {
    common::hub::pending_pods(client, "web", n, "1").await;
}

/// The Machines in `ns`, as (name, cluster-name label, cluster-id label, uid, being
/// deleted).
async fn machines(m: &Client, ns: &str) -> Vec<(String, String, String, String, bool)> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(m.clone(), ns, &provider::machine_resource());
    common::list(&api, &ListParams::default())
        .await
        .into_iter()
        .map(|o| {
            let label = |k: &str| o.labels().get(k).cloned().unwrap_or_default();
            (
                o.name_any(),
                label(CLUSTER_NAME_LABEL),
                label(CLUSTER_ID_LABEL),
                o.uid().unwrap_or_default(),
                o.metadata.deletion_timestamp.is_some(),
            )
        })
        .collect()
}

/// The value of the series `name{cluster="<cluster>"}` on the operator's metrics page.
async fn metric(addr: std::net::SocketAddr, name: &str, cluster: &str) -> Option<f64> {
    let page = common::scrape(addr).await;
    let prefix = format!("{name}{{cluster=\"{cluster}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

async fn wait_metric(addr: std::net::SocketAddr, name: &str, cluster: &str, want: f64) {
    let found = wait_for(
        &format!("{name}{{cluster={cluster}}} = {want}"),
        Duration::from_secs(90),
        || async { (metric(addr, name, cluster).await == Some(want)).then_some(()) },
    )
    .await;
    if let Err(e) = found {
        panic!("{e}; page:\n{}", common::scrape(addr).await);
    }
}

async fn kube_system_uid(client: &Client) -> String {
    Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .expect("kube-system")
        .uid()
        .expect("uid")
}

/// Machine `name` (`orphan-…`) fenced to `cluster_id` for a NodeClaim that does not exist.
fn orphan_machine(name: &str, ns: &str, cluster: &str, cluster_id: &str) -> DynamicObject {
    from_json(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"karpenter.cluster.x-k8s.io/nodeclaim": "gone",
                       "karpenter.sh/nodepool": "default",
                       CLUSTER_ID_LABEL: cluster_id,
                       CLUSTER_NAME_LABEL: cluster},
            "annotations": {"karpenter.cluster.x-k8s.io/nodeclaim-uid":
                            "00000000-0000-0000-0000-00000000dead"}},
        "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": "bootstrap-data"},
                 "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "TestMachine", "name": name}}
    }))
}

/// Creates the orphan Machine `name` in `ns` (young: inside its 5 s grace).
async fn create_orphan(m: &Client, name: &str, ns: &str, cluster: &str, cluster_id: &str) {
    Api::<DynamicObject>::namespaced_with(m.clone(), ns, &provider::machine_resource())
        .create(
            &PostParams::default(),
            &orphan_machine(name, ns, cluster, cluster_id),
        )
        .await
        .expect("orphan Machine");
}

/// Waits until garbage collection took Machine `name` of `ns` (gone or being deleted):
/// the positive sentinel that the collector of `cluster` ran a pass past its grace.
async fn collected(m: &Client, name: &str, ns: &str, cluster: &str) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(m.clone(), ns, &provider::machine_resource());
    wait_for(
        &format!("{ns}/{name} collected"),
        Duration::from_secs(60),
        || async {
            match api.get_opt(name).await {
                Ok(None) => Some(()),
                Ok(Some(o)) => o.metadata.deletion_timestamp.is_some().then_some(()),
                Err(_) => None,
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{cluster}'s garbage collection takes {name}: {e}"));
}

/// The Machines of `ns` not being deleted (orphans included), name -> uid.
async fn alive(m: &Client, ns: &str) -> BTreeMap<String, String> {
    machines(m, ns)
        .await
        .into_iter()
        .filter(|(_, _, _, _, deleting)| !deleting)
        .map(|(name, _, _, uid, _)| (name, uid))
        .collect()
}

/// The names of the Machines of `before` no longer alive in `ns`: deleted, being deleted,
/// or replaced by a new Machine of the same name (another uid; the operator names a
/// NodeClaim's Machine the same each time).
async fn deleted_since(
    m: &Client,
    ns: &str,
    before: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let now = alive(m, ns).await;
    before
        .iter()
        .filter(|(name, uid)| now.get(*name) != Some(*uid))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The names given.
fn names<const N: usize>(names: [&str; N]) -> BTreeSet<String> {
    names.into_iter().map(str::to_string).collect()
}

/// A Machine past its grace (5 s) for at least one more collection interval (2 s), with
/// slack: a collector still running would have taken it by then.
const PAST_GRACE: Duration = Duration::from_secs(8);

/// A counter's series `name{cluster="<cluster>"}` (0 when absent).
async fn counter(addr: std::net::SocketAddr, name: &str, cluster: &str) -> f64 {
    metric(addr, name, cluster).await.unwrap_or(0.0)
}

#[tokio::test]
async fn a_hub_serves_each_opted_in_cluster_apart_and_only_those() {
    let mgmt = Testbed::start(Options::default().with(Component::ClusterApi))
        .await
        .expect("management testbed starts");
    let [a, b, c] = workloads::<3>(&mgmt).await;
    let m = mgmt.client();
    let (wa, wb, wc) = (a.client(), b.client(), c.client());
    let _provider = TestProvider::start(
        m.clone(),
        ProviderConfig {
            provision_delay: Duration::from_millis(300),
            // Each Cluster's Nodes in its workload cluster, reached through its kubeconfig
            // Secret as Cluster API does.
            workloads_from_secrets: true,
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("provider");
    let mut namespaces = Vec::new();
    for (name, tb) in [("alpha", &a), ("beta", &b), ("gamma", &c)] {
        namespaces.push(common::hub::tenant(&mgmt, name, tb).await);
    }
    let (ns_a, ns_b, ns_c) = (&namespaces[0], &namespaces[1], &namespaces[2]);
    for (ns, name) in [(ns_a, "alpha"), (ns_b, "beta")] {
        common::hub::opt_in(&m, ns, name).await;
    }
    for (client, ns, name) in [
        (&wa, ns_a, "alpha"),
        (&wb, ns_b, "beta"),
        (&wc, ns_c, "gamma"),
    ] {
        create_nodeclass(client, "default", ns, name).await;
    }

    let metrics_addr = free_addr();
    let config = operator::RunConfig {
        gc_interval: Duration::from_secs(2),
        gc_grace: Duration::from_secs(5),
        ..common::hub::hub_run_config(&mgmt, metrics_addr)
    };
    let operator = common::spawn_operator(config);

    // Engaged: each opted-in cluster's NodePool turns Ready (its NodeClass is served).
    create_nodepool(&wa, json!({})).await;
    create_nodepool(&wb, json!({})).await;
    // The third cluster's NodePool, never waited for.
    common::nodepools(&wc)
        .create(
            &PostParams::default(),
            &common::nodepools(&wa)
                .get("default")
                .await
                .map(|mut np| {
                    np.metadata = kube::api::ObjectMeta {
                        name: Some("default".into()),
                        ..Default::default()
                    };
                    np.data.as_object_mut().map(|o| o.remove("status"));
                    np
                })
                .expect("nodepool to copy"),
        )
        .await
        .expect("gamma nodepool");
    for client in [&wa, &wb, &wc] {
        pending_pods(client, 2).await;
    }

    // Isolation: each opted-in cluster's pods get Machines in its own namespace, fenced by
    // its own cluster id.
    let ids = [kube_system_uid(&wa).await, kube_system_uid(&wb).await];
    for ((ns, name), id) in [(ns_a, "alpha"), (ns_b, "beta")].into_iter().zip(&ids) {
        let found = wait_for(
            &format!("Machines of {name}"),
            Duration::from_secs(120),
            || async {
                let ms = machines(&m, ns).await;
                (!ms.is_empty()).then_some(ms)
            },
        )
        .await;
        let Ok(found) = found else {
            let client = if name == "alpha" { &wa } else { &wb };
            let claims = nodeclaims(client)
                .list(&ListParams::default())
                .await
                .map(|l| l.items.len());
            let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
            let status: Vec<_> = pods
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .map(|p| p.status.and_then(|s| s.conditions))
                        .collect()
                })
                .unwrap_or_default();
            panic!("no Machines for {name}: claims {claims:?}, pods {status:?}");
        };
        for (machine, cluster, cid, _, _) in &found {
            assert_eq!(
                (cluster.as_str(), cid.as_str()),
                (name, id.as_str()),
                "Machine {ns}/{machine} belongs to {name}"
            );
        }
    }
    // The positive sentinel above (both launched meanwhile): the third has nothing.
    assert!(machines(&m, ns_c).await.is_empty(), "no Machine for gamma");
    let gamma_claims = nodeclaims(&wc)
        .list(&ListParams::default())
        .await
        .expect("claims");
    assert!(gamma_claims.items.is_empty(), "no NodeClaim in gamma");
    let gamma_class = nodeclasses(&wc)
        .get("default")
        .await
        .expect("gamma nodeclass");
    assert!(
        gamma_class.data.get("status").is_none_or(|s| s.is_null()),
        "nobody serves gamma's NodeClass: {:?}",
        gamma_class.data.get("status")
    );

    scrape_gauges(metrics_addr, [ns_a, ns_b]).await;
    tenant_guard(&m, &wa, ns_b, &ids[0]).await;
    rotation(&m, &b, ns_b, metrics_addr).await;
    disconnect(&m, &a, [ns_a, ns_b], &ids, metrics_addr).await;
    disengage(&m, [ns_a, ns_b], &ids, metrics_addr).await;

    operator.abort();
}

/// Alpha's tenant points a NodeClass at beta's Cluster: ClusterRefMismatch, nothing
/// launched into beta's namespace for alpha.
async fn tenant_guard(m: &Client, wa: &Client, ns_b: &str, alpha_id: &str) {
    create_nodeclass(wa, "intruder", ns_b, "beta").await;
    let class = wait_for(
        "intruder ClusterRefMismatch",
        Duration::from_secs(60),
        || async {
            let nc = nodeclasses(wa).get("intruder").await.ok()?;
            let cond = nc.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "ClusterReady")?
                .clone();
            (cond["reason"] == "ClusterRefMismatch").then_some(nc)
        },
    )
    .await
    .expect("a NodeClass naming another tenant's Cluster is refused");
    assert_eq!(condition(&class, "Ready").as_deref(), Some("False"));
    let mut claim = common::nodeclaim("intruder-claim", json!([]));
    claim.data["spec"]["nodeClassRef"]["name"] = "intruder".into();
    nodeclaims(wa)
        .create(&PostParams::default(), &claim)
        .await
        .expect("nodeclaim");
    wait_for(
        "intruder claim refused",
        Duration::from_secs(60),
        || async {
            let events = events_for(wa, "intruder-claim").await;
            events
                .iter()
                .any(|(reason, _)| reason == "ClusterRefMismatch")
                .then_some(())
        },
    )
    .await
    .expect("the launch is refused with ClusterRefMismatch");
    let foreign: Vec<_> = machines(m, ns_b)
        .await
        .into_iter()
        .filter(|(_, _, id, _, _)| id == alpha_id)
        .collect();
    assert!(foreign.is_empty(), "alpha launched into beta: {foreign:?}");
}

/// Each engaged cluster's scrape-time gauges are served under its `cluster` label: its
/// cluster state synced, and its Nodes' allocatable.
async fn scrape_gauges(addr: std::net::SocketAddr, [ns_a, ns_b]: [&String; 2]) {
    for cluster in [format!("{ns_a}/alpha"), format!("{ns_b}/beta")] {
        wait_metric(addr, "karpenter_cluster_state_synced", &cluster, 1.0).await;
        let node_series = format!("karpenter_nodes_allocatable{{cluster=\"{cluster}\",");
        let served = wait_for(&node_series, Duration::from_secs(90), || async {
            let page = common::scrape(addr).await;
            page.lines()
                .any(|l| l.starts_with(&node_series))
                .then_some(())
        })
        .await;
        if let Err(e) = served {
            panic!("{e}; page:\n{}", common::scrape(addr).await);
        }
    }
}

/// Beta's kubeconfig Secret rotated to new credentials (a ServiceAccount token of beta's
/// API server instead of the admin client certificate): beta re-engages and provisions with
/// them; they are the ones in use, since revoking them (the ServiceAccount deleted; the old
/// certificate stays valid) disconnects beta; rotated back, it reconnects.
async fn rotation(m: &Client, b: &Testbed, ns_b: &str, addr: std::net::SocketAddr) {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    const SA: &str = "hub-rotated";
    let (cluster, wb) = (format!("{ns_b}/beta"), b.client());
    let engagements = "karpenter_capi_cluster_engagements_total";
    let connected = "karpenter_capi_cluster_connected";
    wait_metric(addr, engagements, &cluster, 1.0).await;
    let secrets: Api<Secret> = Api::namespaced(m.clone(), ns_b);
    let original = secrets.get("beta-kubeconfig").await.expect("secret");
    let original = original
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .expect("the Secret's kubeconfig");
    // New credentials: a ServiceAccount of beta bound to cluster-admin, and its token.
    let sas: Api<ServiceAccount> = Api::namespaced(wb.clone(), "default");
    sas.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": SA}})),
    )
    .await
    .expect("service account");
    Api::<ClusterRoleBinding>::all(wb.clone())
        .create(
            &PostParams::default(),
            &from_json(json!({
                "metadata": {"name": SA},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": "default"}]
            })),
        )
        .await
        .expect("binding");
    let request: TokenRequest = from_json(json!({"spec": {"expirationSeconds": 3600}}));
    let token: TokenRequest = sas
        .create_subresource("token", SA, &PostParams::default(), &request)
        .await
        .expect("token");
    let token = token.status.expect("token status").token;
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(b.kubeconfig()).expect("beta's kubeconfig");
    for user in &mut kubeconfig.auth_infos {
        user.auth_info = Some(from_json(json!({"token": token})));
    }
    let rotated = serde_json::to_string(&kubeconfig).expect("kubeconfig");
    assert!(!rotated.contains("client-certificate"), "{rotated}");
    let write = |kubeconfig: String| {
        let secrets = secrets.clone();
        async move {
            secrets
                .patch(
                    "beta-kubeconfig",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"stringData": {"value": kubeconfig}})),
                )
                .await
                .expect("rotate")
        }
    };
    write(rotated).await;
    wait_metric(addr, engagements, &cluster, 2.0).await;
    wait_metric(addr, connected, &cluster, 1.0).await;
    let before = alive(m, ns_b).await;
    pending_pods(&wb, 6).await;
    wait_for(
        "re-engaged beta launches again",
        Duration::from_secs(120),
        || async { (alive(m, ns_b).await.keys().any(|n| !before.contains_key(n))).then_some(()) },
    )
    .await
    .expect("the re-engaged cluster provisions");
    // Revoked: only the new credentials stop working, and beta disconnects.
    sas.delete(SA, &Default::default())
        .await
        .expect("revoke the token");
    wait_metric(addr, connected, &cluster, 0.0).await;
    assert_eq!(
        metric(addr, engagements, &cluster).await,
        Some(2.0),
        "disconnected, not re-engaged"
    );
    // Rotated back: re-engaged with the admin certificate, connected again.
    write(original).await;
    wait_metric(addr, engagements, &cluster, 3.0).await;
    wait_metric(addr, connected, &cluster, 1.0).await;
}

/// Alpha unlabelled, then beta paused: each disengaged (its series go), and none of its
/// Machines deleted — not even an orphan past its grace — over a window that provably holds
/// garbage-collection passes (of the cluster still engaged: beta while alpha is out, alpha
/// again while beta is paused). The positive control, in the same windows and by the same
/// diff: the engaged cluster's orphan is seen deleted; alpha, opted in again, collects the
/// orphan it left while it was out.
async fn disengage(
    m: &Client,
    [ns_a, ns_b]: [&String; 2],
    ids: &[String; 2],
    addr: std::net::SocketAddr,
) {
    let clusters = |ns: &str| -> Api<DynamicObject> {
        Api::namespaced_with(m.clone(), ns, &provider::cluster_resource())
    };
    let enabled = |on: bool| {
        let value = on.then_some("true");
        Patch::Merge(json!({"metadata": {"labels": {"karpenter.cluster.x-k8s.io/enabled": value}}}))
    };
    let gone = |cluster: String| async move {
        wait_for(
            &format!("{cluster} disengaged"),
            Duration::from_secs(60),
            || async {
                (metric(addr, "karpenter_capi_cluster_connected", &cluster)
                    .await
                    .is_none()
                    && metric(addr, "karpenter_cluster_state_synced", &cluster)
                        .await
                        .is_none())
                .then_some(())
            },
        )
        .await
        .expect("an unlabelled or paused Cluster is disengaged");
    };
    // Alpha unlabelled, with an orphan of its own; beta's collector takes an orphan
    // (younger than alpha's) meanwhile, and the window lasts until alpha's is past its grace
    // by a collection interval.
    clusters(ns_a)
        .patch("alpha", &PatchParams::default(), &enabled(false))
        .await
        .expect("unlabel alpha");
    gone(format!("{ns_a}/alpha")).await;
    let started = std::time::Instant::now();
    create_orphan(m, "orphan-alpha-out", ns_a, "alpha", &ids[0]).await;
    create_orphan(m, "orphan-while-alpha-out", ns_b, "beta", &ids[1]).await;
    let (alpha_before, beta_before) = (alive(m, ns_a).await, alive(m, ns_b).await);
    assert!(
        alpha_before.len() > 1,
        "alpha has Machines: {alpha_before:?}"
    );
    collected(m, "orphan-while-alpha-out", ns_b, "beta").await;
    past(started, PAST_GRACE).await;
    assert_eq!(
        deleted_since(m, ns_a, &alpha_before).await,
        names([]),
        "disengaging alpha deletes none of its Machines, its orphan past the grace included"
    );
    // The positive control: the same diff over the same window sees beta's orphan taken.
    assert_eq!(
        deleted_since(m, ns_b, &beta_before).await,
        names(["orphan-while-alpha-out"]),
        "beta's collector took its orphan meanwhile, and nothing else"
    );
    // Beta paused, with an orphan of its own; alpha, opted in again, collects the orphan it
    // left while it was out and a new one (younger than beta's).
    clusters(ns_b)
        .patch(
            "beta",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}})),
        )
        .await
        .expect("pause beta");
    gone(format!("{ns_b}/beta")).await;
    let started = std::time::Instant::now();
    create_orphan(m, "orphan-beta-paused", ns_b, "beta", &ids[1]).await;
    create_orphan(m, "orphan-while-beta-paused", ns_a, "alpha", &ids[0]).await;
    let (alpha_before, beta_before) = (alive(m, ns_a).await, alive(m, ns_b).await);
    assert!(beta_before.len() > 1, "beta has Machines: {beta_before:?}");
    clusters(ns_a)
        .patch("alpha", &PatchParams::default(), &enabled(true))
        .await
        .expect("opt alpha in again");
    wait_metric(
        addr,
        "karpenter_capi_cluster_connected",
        &format!("{ns_a}/alpha"),
        1.0,
    )
    .await;
    collected(m, "orphan-while-beta-paused", ns_a, "alpha").await;
    past(started, PAST_GRACE).await;
    // (A launch in flight when it was disengaged may have added one: only deletions count.)
    assert_eq!(
        deleted_since(m, ns_b, &beta_before).await,
        names([]),
        "pausing beta deletes none of its Machines, its orphan past the grace included"
    );
    // The positive control: the same diff sees both orphans alpha's collector took.
    assert_eq!(
        deleted_since(m, ns_a, &alpha_before).await,
        names(["orphan-alpha-out", "orphan-while-beta-paused"]),
        "alpha, engaged again, collects its orphans, and nothing else"
    );
}

/// Returns once `started` is `at_least` ago.
async fn past(started: std::time::Instant, at_least: Duration) {
    tokio::time::sleep(at_least.saturating_sub(started.elapsed())).await;
}

/// Alpha's API server goes down: disconnected (0); while it is down, alpha's orphan is not
/// collected (alpha's own skip counter shows its collector's passes), while beta, served
/// by the same operator, keeps its live Machines and has its own orphan collected (its
/// skip counter does not move); alpha's orphan goes once it answers again (1).
async fn disconnect(
    m: &Client,
    a: &Testbed,
    [ns_a, ns_b]: [&String; 2],
    ids: &[String; 2],
    addr: std::net::SocketAddr,
) {
    let (alpha, beta) = (format!("{ns_a}/alpha"), format!("{ns_b}/beta"));
    let skipped = "karpenter_capi_garbage_collection_skipped_total";
    wait_metric(addr, "karpenter_capi_cluster_connected", &alpha, 1.0).await;
    wait_metric(addr, "karpenter_capi_cluster_connected", &beta, 1.0).await;
    let outage = a.restart("kube-apiserver", Duration::from_secs(25));
    let during = async {
        wait_metric(addr, "karpenter_capi_cluster_connected", &alpha, 0.0).await;
        let beta_skipped = counter(addr, skipped, &beta).await;
        // An orphan for each; beta's is younger, so when its collector takes it alpha's is
        // past its grace (5 s) too.
        create_orphan(m, "orphan", ns_a, "alpha", &ids[0]).await;
        create_orphan(m, "orphan-during-alpha-outage", ns_b, "beta", &ids[1]).await;
        let (alpha_before, beta_before) = (alive(m, ns_a).await, alive(m, ns_b).await);
        // Past the grace, through passes of alpha's collector that skipped it (counted under
        // alpha's label: beta's passes would not count).
        let before = counter(addr, skipped, &alpha).await;
        let started = std::time::Instant::now();
        // Beta's collector works meanwhile (the same operator, the other cluster).
        collected(m, "orphan-during-alpha-outage", ns_b, "beta").await;
        wait_for(
            "alpha's garbage collection passes skipped past the grace",
            Duration::from_secs(60),
            || async {
                (started.elapsed() > Duration::from_secs(6)
                    && counter(addr, skipped, &alpha).await >= before + 3.0)
                    .then_some(())
            },
        )
        .await
        .expect("alpha's collector ran (and skipped) while disconnected");
        assert_eq!(
            deleted_since(m, ns_a, &alpha_before).await,
            names([]),
            "garbage collection ran for a disconnected cluster"
        );
        assert_eq!(
            metric(addr, "karpenter_capi_cluster_connected", &alpha).await,
            Some(0.0),
            "still disconnected when checked"
        );
        // The same diff sees beta's orphan taken: beta lost it and none of its live Machines.
        assert_eq!(
            deleted_since(m, ns_b, &beta_before).await,
            names(["orphan-during-alpha-outage"]),
            "beta's live Machines kept during alpha's outage, its orphan collected"
        );
        assert_eq!(
            counter(addr, skipped, &beta).await,
            beta_skipped,
            "beta's collector skipped nothing during alpha's outage"
        );
        assert_eq!(
            metric(addr, "karpenter_capi_cluster_connected", &beta).await,
            Some(1.0),
            "beta stayed connected"
        );
        alpha_before
    };
    let (restarted, alpha_before) = tokio::join!(outage, during);
    restarted.expect("kube-apiserver restarts");
    wait_metric(addr, "karpenter_capi_cluster_connected", &alpha, 1.0).await;
    // Garbage collection resumes once the cluster answers: the same diff sees the orphan go.
    collected(m, "orphan", ns_a, "alpha").await;
    assert_eq!(
        deleted_since(m, ns_a, &alpha_before).await,
        names(["orphan"]),
        "alpha's collector, connected again, takes its orphan and nothing else"
    );
}
