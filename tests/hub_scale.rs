//! Hub mode at scale, on one management testbed with two workload clusters beside it (on its
//! etcd, each with its scheduler and its API server's audit log):
//! - cheap idle clusters: an engaged cluster without a NodePool watches no pods (the audit
//!   log of its API server shows no list or watch of pods by the operator) and starts to
//!   once it has one;
//! - fairness: a backlog of pending pods in one cluster does not delay another cluster's
//!   first NodeClaim by more than 2 s over its idle figure, measured first in the same run
//!   (medians of three samples a side; each loaded sample ends with the backlog still
//!   pending; 500 pods here; 3000 in the long form: `cargo test --test hub_scale -- --ignored`).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::hub::{create_nodeclass, nodeclass_ready, opt_in, pending_pods, tenant};
use common::{create_nodepool, free_addr, nodeclaims};
use kube::api::ListParams;
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::provider::{ProviderConfig, TestProvider};
use testbed::{Component, Options, Testbed, wait_for};

/// How much later than idle another cluster's backlog may make a cluster's first NodeClaim.
const SLACK: Duration = Duration::from_secs(2);

#[tokio::test]
async fn an_idle_cluster_watches_no_pods_and_a_backlog_of_500_does_not_delay_another() {
    fairness(500).await;
}

#[tokio::test]
#[ignore = "long form (3000 pods, about 3 minutes): cargo test --test hub_scale -- --ignored"]
async fn a_backlog_of_3000_pods_does_not_delay_another_cluster() {
    fairness(3000).await;
}

/// The NodeClaim names of a workload cluster.
async fn claim_names(client: &Client) -> BTreeSet<String> {
    common::list(&nodeclaims(client), &ListParams::default())
        .await
        .iter()
        .map(|c| c.name_any())
        .collect()
}

/// Samples of the first-NodeClaim time on each side.
const SAMPLES: usize = 3;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Pods of a workload cluster's default namespace not bound to a Node yet.
async fn pending_in(client: &Client) -> usize {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), "default");
    common::list(&pods, &ListParams::default())
        .await
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .count()
}

/// Creates pod `name` (1500m: a node of its own) and returns the time until a new
/// NodeClaim appears in that cluster (seen every 100 ms).
async fn first_claim_for(client: &Client, name: &str) -> Duration {
    let before = claim_names(client).await;
    let started = Instant::now();
    pending_pods(client, name, 1, "1500m").await;
    wait_for(
        &format!("a NodeClaim for pod {name}"),
        Duration::from_secs(60),
        || async { (claim_names(client).await.difference(&before).count() > 0).then_some(()) },
    )
    .await
    .expect("a new NodeClaim");
    started.elapsed()
}

/// Lists and watches of pods by the operator in a workload cluster's audit log.
fn pod_reads(tb: &Testbed) -> usize {
    tb.audit_events()
        .expect("audit log")
        .iter()
        .filter(|e| {
            e.user_agent.starts_with("karpenter-capi/")
                && e.resource() == "pods"
                && matches!(e.verb.as_str(), "list" | "watch")
        })
        .count()
}

async fn fairness(backlog: usize) {
    let mgmt = Testbed::start(Options::default().with(Component::ClusterApi))
        .await
        .expect("management testbed starts");
    let workloads = mgmt
        .start_workloads(2, Options::default().with(Component::Scheduler).audit_log())
        .await
        .expect("workload clusters start");
    let (busy, quiet) = (&workloads[0], &workloads[1]);
    let m = mgmt.client();
    let (wb, wq) = (busy.client(), quiet.client());
    let _provider = TestProvider::start(
        m.clone(),
        ProviderConfig {
            provision_delay: Duration::from_millis(300),
            workloads_from_secrets: true,
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("provider");
    for (name, tb, client) in [("busy", busy, &wb), ("quiet", quiet, &wq)] {
        let ns = tenant(&mgmt, name, tb).await;
        opt_in(&m, &ns, name).await;
        create_nodeclass(client, "default", &ns, name).await;
    }
    let config = common::hub::hub_run_config(&mgmt, free_addr());
    let operator = common::spawn_operator(config);

    // Engaged (the NodeClasses are served), yet no NodePool: no pod is listed or watched.
    nodeclass_ready(&wq, "default").await;
    nodeclass_ready(&wb, "default").await;
    assert_eq!(
        pod_reads(quiet),
        0,
        "an idle cluster's pods are not watched"
    );
    create_nodepool(&wq, json!({})).await;
    create_nodepool(&wb, json!({})).await;
    wait_for(
        "the pods of quiet listed",
        Duration::from_secs(60),
        || async { (pod_reads(quiet) > 0).then_some(()) },
    )
    .await
    .expect("a cluster with a NodePool watches its pods");

    // Idle figures (after a warm-up launch), then the same with the other cluster's
    // backlog: three samples a side, compared by their medians; each loaded sample ends
    // while busy still has pods pending (it was busy throughout).
    first_claim_for(&wq, "warm-up").await;
    let mut idle = Vec::new();
    for i in 0..SAMPLES {
        idle.push(first_claim_for(&wq, &format!("idle-{i}")).await);
    }
    pending_pods(&wb, "backlog", backlog, "100m").await;
    let mut loaded = Vec::new();
    for i in 0..SAMPLES {
        loaded.push(first_claim_for(&wq, &format!("loaded-{i}")).await);
        let waiting = pending_in(&wb).await;
        assert!(
            waiting > 0,
            "busy's backlog was served before loaded sample {i} ended: nothing competed"
        );
        eprintln!(
            "loaded sample {i}: {:?}, busy still has {waiting} pods pending",
            loaded[i]
        );
    }
    // ... and it was a backlog the operator serves (not pods it ignores): NodeClaims for it
    // follow (its batch window may still be open when the samples end).
    let served = wait_for(
        "NodeClaims for busy's backlog",
        Duration::from_secs(60),
        || async {
            let n = claim_names(&wb).await.len();
            (n > 0).then_some(n)
        },
    )
    .await
    .expect("busy's backlog is served: it competed with quiet");
    eprintln!("busy had {served} NodeClaims after the loaded samples");
    let (idle_median, loaded_median) = (median(&mut idle), median(&mut loaded));
    eprintln!(
        "first NodeClaim: idle {idle:?} (median {idle_median:?}), with {backlog} pods pending \
         elsewhere {loaded:?} (median {loaded_median:?})"
    );
    assert!(
        loaded_median <= idle_median + SLACK,
        "{backlog} pending pods in busy delayed quiet's first NodeClaim: {loaded:?} vs {idle:?} idle"
    );
    operator.abort();
}
