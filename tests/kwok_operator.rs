//! The core over the kwok provider (issue 36): the operator as `karpenter-capi run --provider
//! kwok` runs it, on a control plane with kwok and without Cluster API (no CRD of it),
//! provisions Nodes for pending pods, consolidates them when the pods go, and terminates the
//! replaced Node after draining it through the Eviction API, and applies a NodeOverlay to
//! the kwok provider's instance types (the core's decorator, for any provider). The NodePool,
//! KWOKNodeClass and instance types are the benchmark's (hack/bench/e2e/).

mod common;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::{Component, Options, Testbed, wait_for};

use common::{list, nodeclaims, operator_config, scrape, spawn_operator};

/// Sum of a counter family on `/metrics` (0 when absent).
async fn counter(addr: std::net::SocketAddr, name: &str) -> u64 {
    scrape(addr)
        .await
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn scale(client: &Client, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .patch(
            "inflate",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale inflate");
}

/// The instance types of the claims, sorted; `None` while any has none yet.
async fn claim_types(client: &Client) -> Option<Vec<String>> {
    let claims = list(&nodeclaims(client), &ListParams::default()).await;
    let mut types: Vec<String> = claims
        .iter()
        .map(|c| c.labels().get("node.kubernetes.io/instance-type").cloned())
        .collect::<Option<_>>()?;
    types.sort();
    Some(types)
}

/// Every pod of inflate Running on a Node the kwok provider made, `n` of them.
async fn running_on_kwok_nodes(client: &Client, n: usize) -> Option<()> {
    let pods: Vec<Pod> = list(
        &Api::namespaced(client.clone(), "default"),
        &ListParams::default().labels("app=inflate"),
    )
    .await;
    let nodes: Vec<Node> = list(&Api::all(client.clone()), &ListParams::default()).await;
    let kwok_node = |name: &str| {
        nodes.iter().any(|n| {
            n.name_any() == name
                && n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|p| p.starts_with("kwok://"))
        })
    };
    let running = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(kwok_node)
        })
        .count();
    (running == n && pods.len() == n).then_some(())
}

#[tokio::test(flavor = "multi_thread")]
async fn kwok_provisions_consolidates_and_terminates_drained() {
    let tb = Testbed::start(
        Options::default()
            .without_cluster_api()
            .with(Component::ControllerManager)
            .with(Component::Scheduler)
            .with(Component::Kwok),
    )
    .await
    .expect("testbed starts");
    let client = tb.client();
    let root = testbed::repo_root();
    let bench = root.join("hack/bench/e2e");
    let manifests = std::fs::read_to_string(bench.join("karpenter.yaml")).expect("NodePool");
    tb.apply_yaml(&manifests, "default")
        .await
        .expect("NodePool and KWOKNodeClass");
    let workload = std::fs::read_to_string(root.join("examples/demo/workload.yaml"))
        .expect("the demo's Deployment");
    tb.apply_yaml(&workload, "default").await.expect("inflate");
    let types = kwok::instance_types::read_file(&bench.join("kwok-instance-types.json"))
        .expect("the bench's instance types");
    let mut config = operator_config(&tb);
    config.provider = Some(kwok::wiring::factory(types));
    let metrics = config.metrics_addr;
    let _operator = spawn_operator(config);

    // Provisioning: ten pods of 500m need Nodes; kwok runs them once they exist.
    scale(&client, 10).await;
    wait_for(
        "10 pods Running on kwok Nodes",
        Duration::from_secs(90),
        || running_on_kwok_nodes(&client, 10),
    )
    .await
    .expect("provisioned");
    let before = claim_types(&client)
        .await
        .expect("claims record their type");
    // Ten pods do not fit one small Node: consolidation has something to do below.
    assert!(!before.is_empty() && before != ["small"], "{before:?}");
    assert_eq!(counter(metrics, "karpenter_pods_drained_total").await, 0);

    // Consolidation: one pod left fits the smallest type; the bigger Nodes are replaced or
    // removed, each drained first (the pod moves by eviction).
    scale(&client, 1).await;
    wait_for(
        "one small NodeClaim, the pod Running on it",
        Duration::from_secs(120),
        || async {
            let types = claim_types(&client).await?;
            running_on_kwok_nodes(&client, 1).await?;
            (types == ["small"]).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("consolidated from {before:?}: {e}"));
    assert!(
        counter(metrics, "karpenter_pods_eviction_requests_total").await > 0,
        "the replaced Node's pod was evicted, not deleted"
    );
    assert!(counter(metrics, "karpenter_pods_drained_total").await > 0);
    let nodes: Vec<Node> = list(&Api::all(client.clone()), &ListParams::default()).await;
    assert_eq!(nodes.len(), 1, "the replaced Nodes are gone");

    // A NodeOverlay on the kwok provider's instance types: `large` priced below `small`. The
    // one pod, on `small` without overlays (above), is moved to a cheaper `large`; the
    // overlay's status says where it applies.
    tb.apply_yaml(
        r#"
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata:
  name: cheap-large
spec:
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [large]}
  price: "0.01"
  weight: 10
"#,
        "default",
    )
    .await
    .expect("NodeOverlay");
    let overlays: Api<api::NodeOverlay> = Api::all(client.clone());
    wait_for("the overlay's status", Duration::from_secs(30), || async {
        let o = overlays.get("cheap-large").await.ok()?;
        let c = o.status?.conditions;
        let v = c.iter().find(|c| c.type_ == "ValidationSucceeded")?;
        (v.status == "True").then(|| v.message.clone())
    })
    .await
    .map(|m| assert_eq!(m, "Applied to 2 offerings", "large in two zones"))
    .expect("ValidationSucceeded=True");
    wait_for(
        "one large NodeClaim, the pod Running on it",
        Duration::from_secs(120),
        || async {
            let types = claim_types(&client).await?;
            running_on_kwok_nodes(&client, 1).await?;
            (types == ["large"]).then_some(())
        },
    )
    .await
    .expect("the overlay's price chose large");
    let claims = list(&nodeclaims(&client), &ListParams::default()).await;
    assert!(
        claims.iter().all(
            |c| c.annotations().get("karpenter.sh/price-overlay-applied")
                == Some(&"true".to_string())
        ),
        "the NodeClaim was planned on an overlaid price"
    );
}
