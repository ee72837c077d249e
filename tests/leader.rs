//! Leader election between two operator replicas on the testbed: exactly one holds the
//! Lease; when it dies the other takes over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use testbed::{Options, Testbed, wait_for};

fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

fn replica(tb: &Testbed, identity: &str) -> tokio::task::JoinHandle<()> {
    let config = controller::runtime::RunConfig {
        kubeconfig: Some(tb.kubeconfig().to_path_buf()),
        metrics_addr: free_addr(),
        health_addr: free_addr(),
        leader_election: Some(controller::leader::LeaderConfig {
            namespace: "karpenter".into(),
            name: "karpenter-capi-leader-election".into(),
            identity: identity.into(),
            duration: Duration::from_secs(4),
            grace: Duration::from_secs(1),
        }),
        ..Default::default()
    };
    tokio::spawn(async move {
        let _ = controller::runtime::run_operator(config).await;
    })
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("karpenter-capi-leader-election")
        .await
        .ok()??
        .spec?
        .holder_identity
}

#[tokio::test]
async fn one_leader_and_failover() {
    let tb = Testbed::start(Options::default()).await.expect("testbed");
    let client = tb.client();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "karpenter"}}))
                .expect("ns"),
        )
        .await
        .expect("namespace");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "karpenter");
    let mut a = replica(&tb, "replica-a");
    let mut b = replica(&tb, "replica-b");
    let first = wait_for("a leader", Duration::from_secs(60), || async {
        holder(&leases).await
    })
    .await
    .expect("one replica holds the Lease");
    assert!(first == "replica-a" || first == "replica-b", "{first}");
    // It stays with that one while both run.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(first.as_str()),
        "no flapping"
    );
    // Kill the leader (no release): the other replica takes over once the Lease expires.
    let killed = Instant::now();
    if first == "replica-a" {
        a.abort();
        let _ = (&mut a).await;
    } else {
        b.abort();
        let _ = (&mut b).await;
    }
    let second = wait_for("failover", Duration::from_secs(60), || async {
        holder(&leases).await.filter(|h| *h != first)
    })
    .await
    .expect("the other replica takes over");
    eprintln!(
        "leader {first} killed; {second} took over after {:.1}s (lease duration 4s)",
        killed.elapsed().as_secs_f64()
    );
    a.abort();
    b.abort();
}
