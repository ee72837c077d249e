//! Leader election between two operator replicas on the testbed: exactly one holds the
//! Lease and only that one writes; the standby warms its caches (it reads) and, once the
//! Lease is held, writes nothing, not even the Lease (proved with the API server's audit
//! log, each replica sending its own User-Agent). When the leader dies the other takes over
//! and writes, and the dead one sends no request of any kind after its death. When its Lease
//! is taken away while it runs, it writes nothing more, exits (as the process does), and
//! sends nothing after that.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::free_addr;
use common::replica::Replica;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use testbed::audit::AuditEvent;
use testbed::{Options, Testbed, wait_for};

/// A request the API server receives this long after a replica's end may still have been
/// sent before it (in the socket); later ones cannot.
const IN_FLIGHT: SignedDuration = SignedDuration::from_secs(1);

fn replica(tb: &Testbed, identity: &str) -> Replica {
    let config = operator::RunConfig {
        kubeconfig: Some(tb.kubeconfig().to_path_buf()),
        metrics_addr: free_addr(),
        health_addr: free_addr(),
        leader_election: Some(karpenter_core::leader::LeaderConfig {
            namespace: "karpenter".into(),
            name: "karpenter-capi-leader-election".into(),
            identity: identity.into(),
            duration: Duration::from_secs(4),
            grace: Duration::from_secs(1),
        }),
        ..Default::default()
    };
    Replica::start(config)
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("karpenter-capi-leader-election")
        .await
        .ok()??
        .spec?
        .holder_identity
}

fn nodeclasses(tb: &Testbed) -> Api<DynamicObject> {
    Api::all_with(
        tb.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "karpenter.cluster.x-k8s.io",
                "v1alpha1",
                "ClusterAPINodeClass",
            ),
            "clusterapinodeclasses",
        ),
    )
}

/// A NodeClass whose Cluster does not exist: the leader's status controller writes
/// `ClusterReady=False` into its status.
async fn create_nodeclass(tb: &Testbed, name: &str) {
    let nc: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
        "metadata": {"name": name},
        "spec": {"clusterRef": {"namespace": "nowhere", "name": "missing"},
                 "bootstrap": {"dataSecretName": "bootstrap-data"}}
    }))
    .expect("nodeclass fixture");
    nodeclasses(tb)
        .create(&PostParams::default(), &nc)
        .await
        .expect("nodeclass");
}

async fn wait_for_status(tb: &Testbed, name: &str) {
    wait_for(
        &format!("status of NodeClass {name}"),
        Duration::from_secs(60),
        || async {
            let nc = nodeclasses(tb).get(name).await.ok()?;
            nc.data["status"]["conditions"].as_array().map(|_| ())
        },
    )
    .await
    .expect("the leader writes the NodeClass status");
}

fn agent(identity: &str) -> String {
    operator::user_agent(Some(identity))
}

/// When the API server received a request.
fn received(e: &AuditEvent) -> Option<Timestamp> {
    e.request_received_timestamp.as_deref()?.parse().ok()
}

/// Requests of any verb from `identity` that the API server received after `end` (plus the
/// in-flight margin): what a replica that ended at `end` sent after its end.
fn sent_after(events: &[AuditEvent], identity: &str, end: Timestamp) -> Vec<String> {
    let agent = agent(identity);
    let since = end + IN_FLIGHT;
    events
        .iter()
        .filter(|e| e.user_agent == agent && received(e).is_some_and(|t| t > since))
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect()
}

/// The audit log once it shows a request of the running `witness` received after `end` plus
/// the in-flight margin (its Lease renewals come every second or two): a log that covers the
/// time after a replica's end, for [`assert_silent_after`].
async fn audit_covering(tb: &Testbed, witness: &str, end: Timestamp) -> Vec<AuditEvent> {
    wait_for(
        "the audit log covers the time after the end",
        Duration::from_secs(30),
        || async {
            let events = tb.audit_events().ok()?;
            (!sent_after(&events, witness, end).is_empty()).then_some(events)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("no request of {witness} after the end: {e}"))
}

/// Asserts that `identity`, ended at `end`, sent nothing afterwards, while `witness` (a
/// running replica) did: the audit log covers the time after the end.
fn assert_silent_after(events: &[AuditEvent], identity: &str, end: Timestamp, witness: &str) {
    let after = sent_after(events, identity, end);
    assert!(
        after.is_empty(),
        "{identity} sent {} requests after its end: {after:?}",
        after.len()
    );
    let witnessed = sent_after(events, witness, end).len();
    assert!(
        witnessed > 0,
        "the audit log shows no request of {witness} after {identity}'s end either"
    );
    eprintln!(
        "{identity}: no request of any verb received more than {IN_FLIGHT:?} after its end; \
         {witness} sent {witnessed} meanwhile"
    );
}

/// What one replica's client did, by kind of request.
#[derive(Debug, Default)]
struct Requests {
    all: usize,
    lease_reads: usize,
    lease_writes: usize,
    /// Writes other than to the Lease, as "verb resource[/subresource]" -> count.
    other_writes: BTreeMap<String, usize>,
}

impl Requests {
    fn of(events: &[AuditEvent], identity: &str) -> Self {
        let agent = agent(identity);
        let mut r = Requests::default();
        for e in events
            .iter()
            .filter(|e| e.user_agent == agent && e.is_complete())
        {
            r.all += 1;
            if !e.is_write() {
                if e.resource() == "leases" {
                    r.lease_reads += 1;
                }
                continue;
            }
            if e.resource() == "leases" {
                r.lease_writes += 1;
            } else {
                let sub = e
                    .object_ref
                    .as_ref()
                    .and_then(|o| o.subresource.as_deref())
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default();
                *r.other_writes
                    .entry(format!("{} {}{sub}", e.verb, e.resource()))
                    .or_default() += 1;
            }
        }
        r
    }

    fn other_write_count(&self) -> usize {
        self.other_writes.values().sum()
    }
}

#[tokio::test]
async fn one_leader_writes_and_fails_over() {
    let tb = Testbed::start(Options::default().audit_log())
        .await
        .expect("testbed");
    let client = tb.client();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "karpenter"}}))
                .expect("ns"),
        )
        .await
        .expect("namespace");
    create_nodeclass(&tb, "first").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "karpenter");
    a_taken_lease_refuses_a_second_taker(&leases).await;
    let mut a = replica(&tb, "replica-a");
    let mut b = replica(&tb, "replica-b");
    let first = wait_for("a leader", Duration::from_secs(60), || async {
        holder(&leases).await
    })
    .await
    .expect("one replica holds the Lease");
    assert!(first == "replica-a" || first == "replica-b", "{first}");
    let standby = if first == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    wait_for_status(&tb, "first").await;
    // Both replicas keep running: the leader renews the Lease, the standby looks at it and
    // leaves it (seen in the audit log: two renewals, two looks by the standby, from here).
    let from = tb.audit_events().expect("audit log").len();
    let looks = wait_for(
        "the leader renews twice and the standby looks twice",
        Duration::from_secs(30),
        || async {
            let events = tb.audit_events().ok()?;
            let since = events.get(from..)?;
            let leader = Requests::of(since, &first);
            let standby = Requests::of(since, standby);
            (leader.lease_writes >= 2 && standby.lease_reads >= 2).then_some((leader, standby))
        },
    )
    .await
    .expect("renewals and looks at the Lease");
    eprintln!("while {first} leads: {looks:?}");
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(first.as_str()),
        "no flapping"
    );

    // Before the leader dies: only it wrote; the standby read (its caches, the Lease) and
    // wrote nothing (but, at the start, its try for the Lease).
    let before = tb.audit_events().expect("audit log");
    let leader_before = Requests::of(&before, &first);
    let standby_before = Requests::of(&before, standby);
    eprintln!("while {first} led: {first}: {leader_before:?}; {standby}: {standby_before:?}");
    assert!(
        leader_before
            .other_writes
            .contains_key("patch clusterapinodeclasses/status"),
        "the leader wrote the NodeClass status: {leader_before:?}"
    );
    assert!(
        leader_before.lease_writes > 0,
        "the leader took and renewed the Lease: {leader_before:?}"
    );
    assert!(
        standby_before.all > 0,
        "the standby's requests are in the log (it watches): {standby_before:?}"
    );
    assert_eq!(
        standby_before.other_write_count(),
        0,
        "the standby wrote nothing but (at the start, when both tried) the Lease: \
         {standby_before:?}"
    );
    assert_eq!(
        looks.1.lease_writes, 0,
        "while the Lease is held the standby only reads it: {:?}",
        looks.1
    );

    // Kill the leader (a crash: no release): the other replica takes over once the Lease
    // expires, and its loops write again.
    let killed = Instant::now();
    let killed_at = if first == "replica-a" {
        a.kill()
    } else {
        b.kill()
    };
    create_nodeclass(&tb, "second").await;
    let second = wait_for("failover", Duration::from_secs(60), || async {
        holder(&leases).await.filter(|h| *h != first)
    })
    .await
    .expect("the other replica takes over");
    let took_over = killed.elapsed();
    assert_eq!(second, standby);
    wait_for_status(&tb, "second").await;
    let writing = killed.elapsed();
    eprintln!(
        "leader {first} killed; {second} took over after {:.1}s and wrote the new NodeClass's \
         status {:.1}s after the kill (lease duration 4s)",
        took_over.as_secs_f64(),
        writing.as_secs_f64()
    );

    let after = audit_covering(&tb, &second, killed_at).await;
    let new_leader = Requests::of(&after[before.len()..], &second);
    let old_leader = Requests::of(&after[before.len()..], &first);
    eprintln!("after the kill: {second}: {new_leader:?}; {first}: {old_leader:?}");
    assert!(
        new_leader
            .other_writes
            .contains_key("patch clusterapinodeclasses/status"),
        "the new leader writes: {new_leader:?}"
    );
    assert!(new_leader.lease_writes > 0, "{new_leader:?}");
    assert_eq!(
        old_leader.other_write_count(),
        0,
        "the killed leader writes no more: {old_leader:?}"
    );
    assert_silent_after(&after, &first, killed_at, &second);

    // The Lease is taken away from the running leader (another holder, valid for 5 s): once
    // it has looked at the Lease again it writes nothing more, although work keeps coming.
    let stolen_at = tb.audit_events().expect("audit log").len();
    steal(&leases, "thief", 5).await;
    let noticed = wait_for(
        "the leader looks at the Lease",
        Duration::from_secs(30),
        || async {
            let events = tb.audit_events().ok()?;
            events[stolen_at..]
                .iter()
                .any(|e| {
                    e.user_agent == agent(&second) && e.is_complete() && e.resource() == "leases"
                })
                .then_some(events.len())
        },
    )
    .await
    .expect("the leader renews (and finds the thief)");
    create_nodeclass(&tb, "third").await;
    let mut c = replica(&tb, "replica-c");
    let third = wait_for("a new leader", Duration::from_secs(60), || async {
        holder(&leases)
            .await
            .filter(|h| h != "thief" && h != second.as_str())
    })
    .await
    .expect("a replica takes the Lease once the thief's expires");
    assert_eq!(third, "replica-c", "the deposed leader does not come back");
    wait_for_status(&tb, "third").await;
    let after_theft = tb.audit_events().expect("audit log");
    let deposed = Requests::of(&after_theft[noticed..], &second);
    let successor = Requests::of(&after_theft[noticed..], "replica-c");
    eprintln!("after the theft: {second}: {deposed:?}; replica-c: {successor:?}");
    assert!(
        successor
            .other_writes
            .contains_key("patch clusterapinodeclasses/status"),
        "the work was there to be done: {successor:?}"
    );
    assert_eq!(
        deposed.other_write_count(),
        0,
        "the deposed leader writes nothing once it saw the Lease taken: {deposed:?}"
    );
    assert_eq!(
        deposed.lease_writes, 0,
        "nor takes the Lease back: {deposed:?}"
    );
    // It exits (as the process does on lost leadership) and sends nothing after that.
    let deposed_replica = if second == "replica-a" { &a } else { &b };
    let exit = wait_for(
        "the deposed leader exits",
        Duration::from_secs(30),
        || async { deposed_replica.exit() },
    )
    .await
    .expect("the deposed leader's run_operator returns");
    assert!(
        exit.result
            .as_ref()
            .is_err_and(|e| e.contains("lost leadership")),
        "it exits because it lost the Lease: {exit:?}"
    );
    // The successor keeps working after the exit (positive sentinel for the window).
    create_nodeclass(&tb, "fourth").await;
    wait_for_status(&tb, "fourth").await;
    let last = audit_covering(&tb, "replica-c", exit.at).await;
    assert_silent_after(&last, &second, exit.at, "replica-c");
    c.kill();
    a.kill();
    b.kill();
}

/// Makes `thief` the holder of the Lease for `seconds` (as another replica would).
/// Takes a free Lease the way kube-lease-manager does (a server-side apply of the holder,
/// not forced) as "first", then as "second" from a stale view: the second apply must
/// conflict, or two replicas each see themselves as the holder. The positive control: the
/// same second apply under the first's field manager goes through (as it did when every
/// replica shared one manager).
async fn a_taken_lease_refuses_a_second_taker(leases: &Api<Lease>) {
    use kube::api::{Patch, PatchParams};
    let take = |who: &str, manager: String| {
        let patch = Patch::Apply(serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "fence-probe"},
            "spec": {"holderIdentity": who, "leaseDurationSeconds": 15},
        }));
        async move {
            leases
                .patch("fence-probe", &PatchParams::apply(&manager), &patch)
                .await
        }
    };
    let manager = karpenter_core::leader::field_manager;
    take("first", manager("first"))
        .await
        .expect("a free Lease is taken");
    match take("second", manager("second")).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        other => panic!("a second taker replaced the holder: {other:?}"),
    }
    assert_eq!(
        holder_of(leases, "fence-probe").await.as_deref(),
        Some("first")
    );
    take("second", manager("first"))
        .await
        .expect("one shared manager does not fence");
    assert_eq!(
        holder_of(leases, "fence-probe").await.as_deref(),
        Some("second")
    );
    leases
        .delete("fence-probe", &Default::default())
        .await
        .expect("delete the probe Lease");
}

async fn holder_of(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get(name)
        .await
        .expect("get the probe Lease")
        .spec
        .and_then(|s| s.holder_identity)
}

async fn steal(leases: &Api<Lease>, thief: &str, seconds: i32) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    wait_for("the Lease stolen", Duration::from_secs(10), || async {
        let lease = leases.get("karpenter-capi-leader-election").await.ok()?;
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": {"holderIdentity": thief, "leaseDurationSeconds": seconds,
                     "acquireTime": now, "renewTime": now}
        });
        leases
            .patch(
                "karpenter-capi-leader-election",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(patch),
            )
            .await
            .ok()
            .map(|_| ())
    })
    .await
    .expect("steal the Lease");
}
