//! Hub mode across replicas (issue 24, item 6), on real control planes: one management
//! testbed (Cluster API manager, audit log) and two workload testbeds (scheduler, audit log).
//! Six Clusters opt in: `alpha` and `beta` are real workload clusters, four more point at an
//! address where nothing answers (they are owned and fenced all the same, and stay
//! connecting). Two replicas split them by rendezvous hashing over their peer Leases, each
//! Cluster fenced by one Lease held by its owner. The owner of `alpha` is killed: its Clusters
//! are taken over within 30 s, every NodeClaim has exactly one Machine and no Machine is left
//! without its NodeClaim, and the audit logs show the killed replica sent nothing after its
//! death. `beta`'s fence Lease is then taken from the survivor while it runs: it writes
//! nothing more for `beta` (management namespace and workload API server) while it keeps
//! serving `alpha`, and serves `beta` again once the Lease is free. Last, two replicas with
//! `--shard-count 2` split the Clusters as the hash says, without peer Leases.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use clusterapi::hub::ClusterKey;
use clusterapi::hub::shard::{StaticShard, fence_name, owner, peer_lease_name, static_shard};
use common::replica::Replica;
use common::{create_nodepool, free_addr, from_json, nodeclaims, nodeclasses};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::audit::AuditEvent;
use testbed::provider::{self, ClusterSetup, ProviderConfig, TestProvider};
use testbed::{Component, Options, Testbed, wait_for};

const OPERATOR_NS: &str = "karpenter";
/// A request the API server receives this long after a replica's end may still have been
/// sent before it (in the socket); later ones cannot.
const IN_FLIGHT: SignedDuration = SignedDuration::from_secs(1);

fn key(name: &str) -> ClusterKey {
    ClusterKey {
        namespace: format!("tenant-{name}"),
        name: name.into(),
    }
}

fn agent(identity: &str) -> String {
    operator::user_agent(Some(identity))
}

/// A hub replica: Leases of 4 s renewed every 3 s, probes and resyncs every second.
fn hub_replica(
    mgmt: &Testbed,
    identity: &str,
    shard: Option<StaticShard>,
) -> (Replica, std::net::SocketAddr) {
    let metrics_addr = free_addr();
    let config = operator::RunConfig {
        management_kubeconfig: Some(mgmt.kubeconfig().to_path_buf()),
        metrics_addr,
        health_addr: free_addr(),
        gc_interval: Duration::from_secs(2),
        gc_grace: Duration::from_secs(5),
        leader_election: Some(karpenter_core::leader::LeaderConfig {
            namespace: OPERATOR_NS.into(),
            name: "unused-in-hub-mode".into(),
            identity: identity.into(),
            duration: Duration::from_secs(4),
            grace: Duration::from_secs(1),
        }),
        hub: Some(clusterapi::hub::HubConfig {
            probe_interval: Duration::from_secs(1),
            resync: Duration::from_secs(1),
            shard,
            ..Default::default()
        }),
        ..Default::default()
    };
    (Replica::start(config), metrics_addr)
}

/// The live holder of each fence Lease.
async fn fence_holders(m: &Client, keys: &[ClusterKey]) -> BTreeMap<ClusterKey, String> {
    let leases: Api<Lease> = Api::namespaced(m.clone(), OPERATOR_NS);
    let mut out = BTreeMap::new();
    for k in keys {
        let Ok(Some(lease)) = leases.get_opt(&fence_name(k)).await else {
            continue;
        };
        let Some(spec) = lease.spec else { continue };
        let (Some(holder), Some(renewed), Some(secs)) = (
            spec.holder_identity,
            spec.renew_time,
            spec.lease_duration_seconds,
        ) else {
            continue;
        };
        if !holder.is_empty()
            && renewed.0 + SignedDuration::from_secs(i64::from(secs)) > Timestamp::now()
        {
            out.insert(k.clone(), holder);
        }
    }
    out
}

/// Waits until every fence Lease is held as `want` says.
async fn wait_holders(
    m: &Client,
    keys: &[ClusterKey],
    want: &BTreeMap<ClusterKey, String>,
    within: Duration,
) {
    let found = wait_for("fence Leases held by their owners", within, || async {
        let h = fence_holders(m, keys).await;
        (h == *want).then_some(())
    })
    .await;
    if let Err(e) = found {
        panic!(
            "{e}: want {want:?}, have {:?}",
            fence_holders(m, keys).await
        );
    }
}

/// The value of `karpenter_capi_clusters{state="<state>"}` on a replica's metrics page.
async fn clusters_in(addr: std::net::SocketAddr, state: &str) -> Option<f64> {
    let prefix = format!("karpenter_capi_clusters{{state=\"{state}\"}} ");
    common::scrape(addr)
        .await
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok()))
}

/// A kubeconfig for a server where nothing answers.
fn dead_kubeconfig() -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("hub-shard-dead-{}.kubeconfig", std::process::id()));
    let yaml = "apiVersion: v1\nkind: Config\nclusters: [{name: dead, cluster: {server: 'https://127.0.0.1:9'}}]\n\
                users: [{name: u, user: {token: x}}]\ncontexts: [{name: dead, context: {cluster: dead, user: u}}]\n\
                current-context: dead\n";
    std::fs::write(&path, yaml).expect("dead kubeconfig");
    path
}

/// The bootstrap data Secret and an opted-in template in `ns` (management side).
async fn tenant_fixtures(mgmt: &Testbed, ns: &str) {
    mgmt.apply_yaml(
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap-data"},
                "stringData": {"value": "nodeTaints: []\n"}})
        .to_string(),
        ns,
    )
    .await
    .expect("bootstrap secret");
    mgmt.apply_yaml(
        &json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
                "metadata": {"name": "small", "labels": {"node.cluster.x-k8s.io/karpenter-member": ""}},
                "spec": {"template": {"spec": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}}})
        .to_string(),
        ns,
    )
    .await
    .expect("template");
    let templates: Api<DynamicObject> = Api::namespaced_with(
        mgmt.client(),
        ns,
        &provider::test_machine_template_resource(),
    );
    templates
        .patch_status(
            "small",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"cpu": "2", "memory": "4Gi"}}})),
        )
        .await
        .expect("template status");
}

/// Pods `<prefix>-0..n` of 1 CPU in the workload cluster's default namespace.
async fn pending_pods(client: &Client, prefix: &str, n: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in 0..n {
        let pod: Pod = from_json(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{prefix}-{i}")},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                     "terminationGracePeriodSeconds": 0}
        }));
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("pod");
    }
}

/// Machine name -> the NodeClaim it was made for, in `ns`.
async fn machines(m: &Client, ns: &str) -> BTreeMap<String, String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(m.clone(), ns, &provider::machine_resource());
    common::list(&api, &ListParams::default())
        .await
        .into_iter()
        .map(|o| {
            let claim = o
                .labels()
                .get("karpenter.cluster.x-k8s.io/nodeclaim")
                .cloned()
                .unwrap_or_default();
            (o.name_any(), claim)
        })
        .collect()
}

async fn claim_names(w: &Client) -> BTreeSet<String> {
    common::list(&nodeclaims(w), &ListParams::default())
        .await
        .iter()
        .map(|c| c.name_any())
        .collect()
}

/// Waits until the workload cluster has at least `min` NodeClaims, each with exactly one
/// Machine in `ns`, and no Machine in `ns` without its NodeClaim.
async fn one_machine_per_claim(m: &Client, w: &Client, ns: &str, min: usize) -> usize {
    let found = wait_for(
        &format!("one Machine per NodeClaim in {ns} (at least {min})"),
        Duration::from_secs(90),
        || async {
            let claims = claim_names(w).await;
            let ms = machines(m, ns).await;
            let mut per: BTreeMap<&str, usize> = BTreeMap::new();
            for c in ms.values() {
                *per.entry(c.as_str()).or_default() += 1;
            }
            let ok = claims.len() >= min
                && claims.iter().all(|c| per.get(c.as_str()) == Some(&1))
                && per.keys().all(|c| claims.contains(*c));
            ok.then_some(claims.len())
        },
    )
    .await;
    match found {
        Ok(n) => n,
        Err(e) => panic!(
            "{e}: claims {:?}, machines {:?}",
            claim_names(w).await,
            machines(m, ns).await
        ),
    }
}

/// The testbed's audit log, read again when caught mid-write (a line the server is still
/// writing).
async fn audit(tb: &Testbed) -> Vec<AuditEvent> {
    wait_for("a readable audit log", Duration::from_secs(5), || async {
        tb.audit_events().ok()
    })
    .await
    .unwrap_or_else(|e| panic!("audit log unreadable: {e}"))
}

/// When the API server received a request.
fn received(e: &AuditEvent) -> Option<Timestamp> {
    e.request_received_timestamp.as_deref()?.parse().ok()
}

/// Writes from `identity` received after `since`, limited to namespace `ns` when given.
fn writes_after(
    events: &[AuditEvent],
    identity: &str,
    since: Timestamp,
    ns: Option<&str>,
) -> Vec<String> {
    let agent = agent(identity);
    events
        .iter()
        .filter(|e| e.user_agent == agent && e.is_write() && received(e).is_some_and(|t| t > since))
        .filter(|e| {
            ns.is_none_or(|ns| {
                e.object_ref.as_ref().and_then(|o| o.namespace.as_deref()) == Some(ns)
            })
        })
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect()
}

/// Requests of any verb from `identity` received after `since`.
fn requests_after(events: &[AuditEvent], identity: &str, since: Timestamp) -> usize {
    let agent = agent(identity);
    events
        .iter()
        .filter(|e| e.user_agent == agent && received(e).is_some_and(|t| t > since))
        .count()
}

/// Makes `thief` the holder of `lease` for `seconds`.
async fn steal(leases: &Api<Lease>, lease: &str, thief: &str, seconds: i32) {
    wait_for("the Lease stolen", Duration::from_secs(10), || async {
        let current = leases.get(lease).await.ok()?;
        let now = MicroTime(Timestamp::now());
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"holderIdentity": thief, "leaseDurationSeconds": seconds,
                     "acquireTime": now, "renewTime": now}
        });
        leases
            .patch(lease, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .ok()
            .map(|_| ())
    })
    .await
    .expect("steal the Lease");
}

struct Bed {
    mgmt: Testbed,
    workloads: BTreeMap<&'static str, Testbed>,
    keys: Vec<ClusterKey>,
    _provider: TestProvider,
}

/// The testbeds, the six Clusters, the tenants' NodeClasses and NodePools.
async fn setup() -> Bed {
    let workload = || Testbed::start(Options::default().with(Component::Scheduler).audit_log());
    let (mgmt, a, b) = tokio::join!(
        Testbed::start(Options::default().with(Component::ClusterApi).audit_log()),
        workload(),
        workload(),
    );
    let mgmt = mgmt.expect("management testbed starts");
    let (a, b) = (a.expect("alpha starts"), b.expect("beta starts"));
    let m = mgmt.client();
    Api::<Namespace>::all(m.clone())
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": OPERATOR_NS}})),
        )
        .await
        .expect("operator namespace");
    let provider = TestProvider::start(
        m.clone(),
        ProviderConfig {
            provision_delay: Duration::from_millis(300),
            workloads: [
                ("alpha".to_string(), a.client()),
                ("beta".to_string(), b.client()),
            ]
            .into(),
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("provider");
    let dead = dead_kubeconfig();
    let names = ["alpha", "beta", "c2", "c3", "c4", "c5"];
    let keys: Vec<ClusterKey> = names.iter().map(|n| key(n)).collect();
    let created = keys.iter().map(|k| {
        let kubeconfig = match k.name.as_str() {
            "alpha" => a.kubeconfig().to_path_buf(),
            "beta" => b.kubeconfig().to_path_buf(),
            _ => dead.clone(),
        };
        let m = m.clone();
        async move {
            provider::create_cluster(&m, &ClusterSetup::new(&k.namespace, &k.name, kubeconfig))
                .await
                .expect("cluster");
            let clusters: Api<DynamicObject> =
                Api::namespaced_with(m.clone(), &k.namespace, &provider::cluster_resource());
            clusters
                .patch(
                    &k.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"karpenter.cluster.x-k8s.io/enabled": "true"}}})),
                )
                .await
                .expect("opt in");
        }
    });
    futures::future::join_all(created).await;
    for (name, tb) in [("alpha", &a), ("beta", &b)] {
        let k = key(name);
        tenant_fixtures(&mgmt, &k.namespace).await;
        nodeclasses(&tb.client())
            .create(
                &PostParams::default(),
                &from_json(json!({
                    "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
                    "metadata": {"name": "default"},
                    "spec": {"clusterRef": {"namespace": k.namespace, "name": name},
                             "bootstrap": {"dataSecretName": "bootstrap-data"}}
                })),
            )
            .await
            .expect("nodeclass");
    }
    Bed {
        mgmt,
        workloads: [("alpha", a), ("beta", b)].into(),
        keys,
        _provider: provider,
    }
}

#[tokio::test]
async fn replicas_split_clusters_fence_them_and_take_over() {
    let bed = setup().await;
    let m = bed.mgmt.client();
    let (wa, wb) = (
        bed.workloads["alpha"].client(),
        bed.workloads["beta"].client(),
    );
    let keys = &bed.keys;

    // Two replicas split the six Clusters as rendezvous hashing says; each fence Lease held
    // by exactly its owner, and both own some.
    let peers = vec!["hub-a".to_string(), "hub-b".to_string()];
    let want: BTreeMap<ClusterKey, String> = keys
        .iter()
        .map(|k| (k.clone(), owner(k, &peers).expect("an owner").to_string()))
        .collect();
    let owned = |id: &str| want.values().filter(|h| *h == id).count();
    assert!(
        owned("hub-a") >= 1 && owned("hub-b") >= 1,
        "both own some: {want:?}"
    );
    let (ra, addr_a) = hub_replica(&bed.mgmt, "hub-a", None);
    let (rb, addr_b) = hub_replica(&bed.mgmt, "hub-b", None);
    let mut replicas: BTreeMap<&str, (Replica, std::net::SocketAddr)> =
        [("hub-a", (ra, addr_a)), ("hub-b", (rb, addr_b))].into();
    wait_holders(&m, keys, &want, Duration::from_secs(90)).await;
    for (id, (_, addr)) in &replicas {
        // Each replica counts its own Clusters as engaged or connecting, the others' as
        // not owned.
        let mine = owned(id) as f64;
        wait_for(
            &format!("{id}'s cluster states"),
            Duration::from_secs(60),
            || async {
                let engaged =
                    clusters_in(*addr, "engaged").await? + clusters_in(*addr, "connecting").await?;
                let others = clusters_in(*addr, "not-owned").await?;
                (engaged == mine && others == 6.0 - mine).then_some(())
            },
        )
        .await
        .expect("the replica's cluster states");
    }
    eprintln!("split: {want:?}");
    // `inspect --mode hub` shows each Cluster's owner.
    let rows = wait_for(
        "inspect shows the owners",
        Duration::from_secs(30),
        || async {
            let rows = karpenter_capi::inspect_hub::clusters(&m, OPERATOR_NS)
                .await
                .ok()?;
            let owners: BTreeMap<String, String> = rows
                .iter()
                .filter_map(|r| Some((r.cluster.clone(), r.owner.clone()?)))
                .collect();
            let expected: BTreeMap<String, String> = want
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            let alpha_engaged = rows
                .iter()
                .any(|r| r.cluster == key("alpha").to_string() && r.state == "engaged");
            (owners == expected && alpha_engaged).then_some(rows)
        },
    )
    .await
    .expect("inspect lists every Cluster with its owner");
    eprint!("{}", karpenter_capi::inspect_hub::render_table(&rows));

    // Both real clusters provision: one Machine per NodeClaim.
    create_nodepool(&wa, json!({})).await;
    create_nodepool(&wb, json!({})).await;
    pending_pods(&wa, "first", 2).await;
    pending_pods(&wb, "first", 2).await;
    let alpha_claims = one_machine_per_claim(&m, &wa, &key("alpha").namespace, 1).await;
    one_machine_per_claim(&m, &wb, &key("beta").namespace, 1).await;

    // The owner of alpha is killed: the survivor takes all its Clusters within 30 s.
    let victim = want[&key("alpha")].clone();
    let survivor = if victim == "hub-a" { "hub-b" } else { "hub-a" };
    let killed = Instant::now();
    let killed_at = replicas.get_mut(victim.as_str()).expect("victim").0.kill();
    pending_pods(&wa, "second", 2).await;
    let all_survivor: BTreeMap<ClusterKey, String> = keys
        .iter()
        .map(|k| (k.clone(), survivor.to_string()))
        .collect();
    wait_holders(&m, keys, &all_survivor, Duration::from_secs(30)).await;
    let took_over = killed.elapsed();
    assert!(
        took_over <= Duration::from_secs(30),
        "takeover took {took_over:?}"
    );
    let after_kill =
        one_machine_per_claim(&m, &wa, &key("alpha").namespace, alpha_claims + 1).await;
    eprintln!(
        "{victim} killed; {survivor} held all its fence Leases after {:.1}s; alpha: {alpha_claims} -> {after_kill} NodeClaims, one Machine each",
        took_over.as_secs_f64()
    );
    // The survivor's per-cluster series carry the cluster label.
    let page = common::scrape(replicas[survivor].1).await;
    let launched = format!(
        "karpenter_capi_machines_launched_total{{cluster=\"{}\",nodepool=\"default\"}} ",
        key("alpha")
    );
    assert!(
        page.lines().any(|l| l.starts_with(&launched)),
        "no {launched} on {survivor}'s page:\n{page}"
    );
    let since = killed_at + IN_FLIGHT;
    for (name, events) in [
        ("management", audit(&bed.mgmt).await),
        ("alpha", audit(&bed.workloads["alpha"]).await),
    ] {
        assert_eq!(
            requests_after(&events, &victim, since),
            0,
            "{victim} sent requests to {name} after its death"
        );
        assert!(
            requests_after(&events, survivor, since) > 0,
            "the {name} audit log covers the time after"
        );
    }

    demote(&bed, survivor, replicas[survivor].1).await;

    // Static shards: the dynamic replicas gone, two replicas with --shard-count 2 split the
    // Clusters as the hash says, with no peer Lease.
    let dead_at = Timestamp::now();
    replicas.clear();
    let shard = |index| Some(StaticShard { count: 2, index });
    let _s0 = hub_replica(&bed.mgmt, "hub-s0", shard(0));
    let _s1 = hub_replica(&bed.mgmt, "hub-s1", shard(1));
    let want_static: BTreeMap<ClusterKey, String> = keys
        .iter()
        .map(|k| {
            let s0 = static_shard(k, StaticShard { count: 2, index: 0 });
            (k.clone(), if s0 { "hub-s0" } else { "hub-s1" }.to_string())
        })
        .collect();
    assert!(
        want_static.values().any(|h| h == "hub-s0") && want_static.values().any(|h| h == "hub-s1")
    );
    wait_holders(&m, keys, &want_static, Duration::from_secs(60)).await;
    let leases: Api<Lease> = Api::namespaced(m.clone(), OPERATOR_NS);
    for id in ["hub-s0", "hub-s1"] {
        assert!(
            leases
                .get_opt(&peer_lease_name(id))
                .await
                .expect("get")
                .is_none(),
            "no peer Lease for {id}"
        );
    }
    eprintln!("static shards: {want_static:?} (dynamic replicas stopped at {dead_at})");
    one_server_at_a_time(&bed, &["hub-a", "hub-b", "hub-s0", "hub-s1"]).await;
}

/// Two replicas never serve one Cluster at once: every write a replica sent for alpha or
/// beta (to its workload API server, or into its management namespace) was received while
/// that replica was the last replica to have written the Cluster's fence Lease (a write to
/// the Lease succeeds only for its holder or a taker of an expired Lease, and the next
/// holder's write ends the tenure). Windows where a non-replica (the thief) holds it are
/// `demote`'s to check.
async fn one_server_at_a_time(bed: &Bed, replicas: &[&str]) {
    let identity = |e: &AuditEvent| {
        replicas
            .iter()
            .find(|id| e.user_agent == agent(id))
            .copied()
    };
    let mgmt = audit(&bed.mgmt).await;
    let mut writers = std::collections::BTreeSet::new();
    for name in ["alpha", "beta"] {
        let k = key(name);
        let fence = fence_name(&k);
        // (received, Some(replica) | None: someone else), successful writes, in order.
        let mut tenures: Vec<(Timestamp, Option<&str>)> = mgmt
            .iter()
            .filter(|e| {
                e.is_write()
                    && e.is_complete()
                    && e.resource() == "leases"
                    && e.object_ref.as_ref().and_then(|o| o.name.as_deref()) == Some(fence.as_str())
                    && e.response_status
                        .as_ref()
                        .and_then(|s| s.code)
                        .is_some_and(|c| (200..300).contains(&c))
            })
            .filter_map(|e| Some((received(e)?, identity(e))))
            .collect();
        tenures.sort_by_key(|(t, _)| *t);
        let workload = audit(&bed.workloads[name]).await;
        let for_cluster = mgmt
            .iter()
            .filter(|e| {
                e.object_ref.as_ref().and_then(|o| o.namespace.as_deref())
                    == Some(k.namespace.as_str())
            })
            .chain(workload.iter());
        // (writer, received, what) of every replica write for the cluster.
        let writes: Vec<(&str, Timestamp, String)> = for_cluster
            .filter(|e| e.is_write())
            .filter_map(|e| {
                Some((
                    identity(e)?,
                    received(e)?,
                    format!("{} {}", e.verb, e.request_uri),
                ))
            })
            .collect();
        let (violations, checked) = outside_tenure(&tenures, &writes);
        assert!(
            violations.is_empty(),
            "{name} served by a replica not holding its fence: {violations:?}; tenures {tenures:?}"
        );
        // The positive sentinel: the writes were there (from more than one replica over
        // both clusters, below: a cluster whose owner survives may only ever see that one).
        assert!(
            !checked.is_empty(),
            "{name}: writes checked per replica {checked:?}"
        );
        writers.extend(checked.keys().copied());
        // The positive control: the same writes with one replica's first write credited to
        // another replica are caught.
        let mut forged = writes.clone();
        let inside = forged.iter_mut().find(|w| {
            !outside_tenure(&tenures, std::slice::from_ref(w))
                .1
                .is_empty()
        });
        if let Some(w) = inside {
            w.0 = replicas.iter().copied().find(|r| *r != w.0).unwrap_or(w.0);
        }
        assert!(
            !outside_tenure(&tenures, &forged).0.is_empty(),
            "{name}: a write forged onto another replica is not caught"
        );
        eprintln!("{name}: every replica write inside its fence tenure: {checked:?}");
    }
    assert!(
        writers.len() >= 2,
        "writes checked from more than one replica: {writers:?}"
    );
}

/// The writes (writer, received, what) sent outside their writer's fence tenure (`tenures`:
/// successful fence writes in order, `None` for a non-replica), and the writes checked per
/// replica; writes during a non-replica's tenure are `demote`'s to check.
fn outside_tenure<'a>(
    tenures: &[(Timestamp, Option<&str>)],
    writes: &[(&'a str, Timestamp, String)],
) -> (Vec<String>, BTreeMap<&'a str, usize>) {
    let mut checked: BTreeMap<&str, usize> = BTreeMap::new();
    let mut violations = Vec::new();
    for (writer, at, what) in writes {
        let holder = tenures.iter().rev().find(|(t, _)| t < at).map(|(_, h)| *h);
        match holder {
            Some(None) => continue,
            Some(Some(h)) if h == *writer => *checked.entry(*writer).or_default() += 1,
            other => violations.push(format!("{writer} {what} at {at} (fence held by {other:?})")),
        }
    }
    (violations, checked)
}

/// Beta's fence Lease is taken from `survivor` while it runs: it writes nothing more for
/// beta while it keeps serving alpha, and serves beta again once the Lease is free.
async fn demote(bed: &Bed, survivor: &str, addr: std::net::SocketAddr) {
    let m = bed.mgmt.client();
    let (wa, wb) = (
        bed.workloads["alpha"].client(),
        bed.workloads["beta"].client(),
    );
    let beta = key("beta");
    let leases: Api<Lease> = Api::namespaced(m.clone(), OPERATOR_NS);
    let beta_claims = one_machine_per_claim(&m, &wb, &beta.namespace, 1).await;
    steal(&leases, &fence_name(&beta), "thief", 3600).await;
    let stolen = Timestamp::now();
    // Seen taken: the API server received the survivor's next request for beta's fence
    // Lease (its renewal, answered with the thief's Lease). The window starts there.
    let seen = wait_for(
        "the survivor reads beta's stolen Lease",
        Duration::from_secs(30),
        || async {
            audit(&bed.mgmt)
                .await
                .iter()
                .filter(|e| {
                    e.user_agent == agent(survivor)
                        && e.is_complete()
                        && e.resource() == "leases"
                        && e.object_ref.as_ref().and_then(|o| o.name.as_deref())
                            == Some(fence_name(&beta).as_str())
                })
                .filter_map(received)
                .find(|t| *t > stolen)
        },
    )
    .await
    .expect("the survivor looks at beta's fence Lease again");
    // Noticed: the survivor counts beta as waiting for its Lease (its engagement dropped).
    wait_for(
        "beta waiting for its Lease",
        Duration::from_secs(30),
        || async { (clusters_in(addr, "waiting-lease").await? >= 1.0).then_some(()) },
    )
    .await
    .expect("the survivor notices the stolen Lease");
    let dropped = seen;
    // Work for both: alpha's is done (the survivor keeps writing), beta's waits. The window
    // holds a provisioning pass of the survivor for pods created after beta's (alpha's new
    // Machine), the pass that would have written for beta had it kept serving it.
    let alpha_before = claim_names(&wa).await.len();
    pending_pods(&wb, "third", 2).await;
    pending_pods(&wa, "third", 2).await;
    one_machine_per_claim(&m, &wa, &key("alpha").namespace, alpha_before + 1).await;
    let mgmt_events = audit(&bed.mgmt).await;
    let beta_events = audit(&bed.workloads["beta"]).await;
    let for_beta = beta_writes(&mgmt_events, &beta_events, survivor, dropped);
    assert!(
        for_beta.iter().all(Vec::is_empty),
        "{survivor} wrote for beta after losing its fence: {for_beta:?}"
    );
    let for_alpha = writes_after(
        &mgmt_events,
        survivor,
        dropped,
        Some(&key("alpha").namespace),
    );
    assert!(
        !for_alpha.is_empty(),
        "the survivor kept writing for alpha meanwhile"
    );
    assert_eq!(
        claim_names(&wb).await.len(),
        beta_claims,
        "no NodeClaim for beta's new pods while fenced out"
    );
    eprintln!(
        "beta's Lease taken: {survivor} wrote nothing for beta since, {} writes for alpha meanwhile",
        for_alpha.len()
    );
    // The Lease expires (as the thief's would): the survivor takes it back and provisions
    // beta's waiting pods.
    let released = Timestamp::now();
    steal(&leases, &fence_name(&beta), "thief", 1).await;
    one_machine_per_claim(&m, &wb, &beta.namespace, beta_claims + 1).await;
    // The positive control: the same filter, from the same start, now finds the survivor's
    // writes for beta in both logs, and all of them after the release (which extends the
    // check above over the whole time the thief held the Lease).
    let (mgmt_events, beta_events) = (audit(&bed.mgmt).await, audit(&bed.workloads["beta"]).await);
    let since_seen = beta_writes(&mgmt_events, &beta_events, survivor, dropped);
    let since_released = beta_writes(&mgmt_events, &beta_events, survivor, released);
    assert!(
        since_seen.iter().all(|w| !w.is_empty()),
        "{survivor}'s writes for beta once it holds the Lease again are found (management, beta): {since_seen:?}"
    );
    assert_eq!(
        since_seen, since_released,
        "{survivor} wrote for beta only after the thief let the Lease go"
    );
    eprintln!(
        "beta's Lease free again: {survivor} wrote for beta since (management, beta): {:?}",
        since_seen.each_ref().map(Vec::len)
    );
}

/// Writes from `identity` received after `since` for beta: into its management namespace
/// (from the management audit log `mgmt`), and to its workload API server (from its audit
/// log `workload`); each empty when there are none.
fn beta_writes(
    mgmt: &[AuditEvent],
    workload: &[AuditEvent],
    identity: &str,
    since: Timestamp,
) -> [Vec<String>; 2] {
    [
        writes_after(mgmt, identity, since, Some(&key("beta").namespace)),
        writes_after(workload, identity, since, None),
    ]
}
