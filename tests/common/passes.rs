//! Counting what the operator did from its metrics: the provisioner's batches, a positive
//! sentinel that it ran more of them, and any counter's total.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use testbed::wait_for;

use super::{Env, from_json, scrape};

/// The provisioner's count of scheduling simulations (one per batch), from its metrics.
pub async fn provisioning_batches(env: &Env) -> u64 {
    let page = scrape(env.metrics_addr).await;
    page.lines()
        .find_map(|l| {
            l.strip_prefix(
                r#"karpenter_scheduler_scheduling_duration_seconds_count{controller="provisioner"} "#,
            )
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The positive sentinel for "the provisioner launched nothing more": makes it run `n`
/// more batches and returns once they have run (its scheduling count went up by `n`; the
/// loop runs one batch at a time, so every batch before the last has finished its
/// launches). Each batch is opened by a new pod in `ns` that no NodePool can take (a
/// nodeSelector on a label none offers) and considers every pending pod.
pub async fn provisioning_passes(env: &Env, ns: &str, n: u64) {
    let pods: Api<Pod> = Api::namespaced(env.tb.client(), ns);
    let start = provisioning_batches(env).await;
    for i in 1..=n {
        let canary: Pod = from_json(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("canary-{start}-{i}")},
            "spec": {"nodeSelector": {"example.com/no-pool-offers": "this"},
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        }));
        pods.create(&PostParams::default(), &canary)
            .await
            .expect("canary pod");
        wait_for(
            &format!("provisioning batch {i} of {n}"),
            Duration::from_secs(30),
            || async { (provisioning_batches(env).await >= start + i).then_some(()) },
        )
        .await
        .expect("the provisioner runs a batch for a new pending pod");
    }
}

/// Sum of a counter family on the operator's `/metrics` (0 when absent).
pub async fn counter(env: &Env, name: &str) -> u64 {
    scrape(env.metrics_addr)
        .await
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum::<f64>() as u64
}
