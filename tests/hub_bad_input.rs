//! Hub mode's bad input on real control planes: four Clusters the hub cannot or may not serve
//! as their owner meant, each shown with why. `alpha` is labelled
//! `karpenter.cluster.x-k8s.io/enabled: "yes"` (ineligible, the value named); `beta`'s
//! kubeconfig Secret keeps it under `kubeconfig` instead of `value` (as a Secret made with
//! `kubectl create secret generic --from-file=kubeconfig=...` does): it is engaged — the
//! positive control that the hub reads this far; `gamma` names a Secret that does not exist
//! and `delta` one whose key is neither (both `waiting-credentials`, each with its reason).
//! Seen on `karpenter_capi_clusters{state}` and in `inspect --mode hub`.

mod common;

use std::time::Duration;

use common::free_addr;
use karpenter_capi::inspect_hub::{self, ClusterRow};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use testbed::provider::{self, ProviderConfig, TestProvider};
use testbed::{Component, Options, Testbed, wait_for};

/// `karpenter_capi_clusters{state="<state>"}` on the operator's metrics page (`None` also
/// while the page is not served yet).
async fn clusters_in(addr: std::net::SocketAddr, state: &str) -> Option<f64> {
    let prefix = format!("karpenter_capi_clusters{{state=\"{state}\"}} ");
    tokio::net::TcpStream::connect(addr).await.ok()?;
    common::scrape(addr)
        .await
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Labels Cluster `ns/name` with the opt-in `value` and points it at kubeconfig Secret
/// `secret`.
async fn label(m: &Client, ns: &str, name: &str, value: &str, secret: &str) {
    Api::<DynamicObject>::namespaced_with(m.clone(), ns, &provider::cluster_resource())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "labels": {"karpenter.cluster.x-k8s.io/enabled": value},
                "annotations": {"karpenter.cluster.x-k8s.io/kubeconfig-secret": secret}}})),
        )
        .await
        .expect("label the Cluster");
}

#[tokio::test]
async fn clusters_the_hub_cannot_serve_are_counted_and_say_why() {
    let mgmt = Testbed::start(Options::default().with(Component::ClusterApi))
        .await
        .expect("management testbed starts");
    let [workload]: [Testbed; 1] = mgmt
        .start_workloads(1, Options::default())
        .await
        .expect("workload testbed starts")
        .try_into()
        .unwrap_or_else(|_| unreachable!("one started"));
    let m = mgmt.client();
    let _provider = TestProvider::start(m.clone(), ProviderConfig::default())
        .await
        .expect("provider");
    let kubeconfig = std::fs::read_to_string(workload.kubeconfig()).expect("kubeconfig");
    let mut ns = std::collections::BTreeMap::new();
    for (name, value, secret, data) in [
        ("alpha", "yes", "alpha-kubeconfig", None),
        ("beta", "true", "beta-own", Some("kubeconfig")),
        ("gamma", "true", "gamma-absent", None),
        ("delta", "true", "delta-own", Some("config")),
    ] {
        let n = common::hub::tenant(&mgmt, name, &workload).await;
        if let Some(key) = data {
            mgmt.apply_yaml(
                &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret},
                        "stringData": {key: kubeconfig}})
                .to_string(),
                &n,
            )
            .await
            .expect("kubeconfig Secret");
        }
        label(&m, &n, name, value, secret).await;
        ns.insert(name, n);
    }

    let metrics_addr = free_addr();
    let config = common::hub::hub_run_config(&mgmt, metrics_addr);
    let operator = common::spawn_operator(config);

    // The positive control: beta, its kubeconfig under `kubeconfig`, is engaged.
    let beta = format!("{}/beta", ns["beta"]);
    let want = [
        ("engaged", 1.0),
        ("ineligible", 1.0),
        ("waiting-credentials", 2.0),
    ];
    let counted = wait_for(
        "one engaged, one ineligible, two waiting for credentials",
        Duration::from_secs(90),
        || async {
            for (state, n) in want {
                if clusters_in(metrics_addr, state).await != Some(n) {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    if let Err(e) = counted {
        panic!("{e}; page:\n{}", common::scrape(metrics_addr).await);
    }
    let connected = format!("karpenter_capi_cluster_connected{{cluster=\"{beta}\"}} 1");
    assert!(
        common::scrape(metrics_addr)
            .await
            .lines()
            .any(|l| l == connected),
        "beta is engaged from its `kubeconfig` key"
    );

    // inspect --mode hub: one line per Cluster, each saying why.
    let rows: Vec<ClusterRow> = inspect_hub::clusters(&m, "karpenter")
        .await
        .expect("inspect --mode hub");
    let of = |name: &str| {
        let key = format!("{}/{name}", ns[name]);
        rows.iter()
            .find(|r| r.cluster == key)
            .map(|r| (r.state.clone(), r.reason.clone()))
            .unwrap_or_else(|| panic!("no row for {key}: {rows:?}"))
    };
    assert_eq!(
        of("alpha"),
        (
            "ineligible".into(),
            "label karpenter.cluster.x-k8s.io/enabled is \"yes\": only \"true\" opts in".into()
        )
    );
    let (state, reason) = of("beta");
    assert_eq!(state, "engaged", "{reason}");
    let (state, reason) = of("gamma");
    assert_eq!(state, "waiting-credentials");
    assert!(
        reason.starts_with(&format!(
            "missing Secret: no kubeconfig Secret {}/gamma-absent",
            ns["gamma"]
        )),
        "{reason}"
    );
    assert_eq!(
        of("delta"),
        (
            "waiting-credentials".into(),
            format!(
                "wrong key: Secret {}/delta-own has no key `value` or `kubeconfig` (its keys: config)",
                ns["delta"]
            )
        )
    );
    operator.abort();
}
