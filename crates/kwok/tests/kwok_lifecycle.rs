//! The NodeClaim lifecycle loop of crates/controller over the kwok provider, on a control
//! plane with kwok and kube-controller-manager and no Cluster API (neither its manager nor its
//! CRDs): a NodeClaim is
//! launched (its Node made by `create`), registered and initialized once kwok makes the Node
//! Ready, and on deletion terminated through `delete`, its Node gone. The context is built
//! as `tests/provider_fake.rs` builds it (the loops still start their Machine and Cluster
//! caches: their watches fail here, the caches stay empty and are not waited for).

use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use controller::cache::Caches;
use controller::catalogs::IndexCatalogs;
use controller::events::{Recorder, Reporter};
use controller::metrics::Metrics;
use controller::nodeclaim::context::{Ctx, Settings, Shared};
use controller::nodeclaim::lifecycle;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::{Component, Options, Testbed, wait_for};

const WAIT: Duration = Duration::from_secs(60);

/// The lifecycle's context over `provider`, on `client` for both clusters.
async fn ctx(
    client: &Client,
    tasks: &mut controller::tasks::Tasks,
    provider: kwok::KwokCloudProvider,
) -> Arc<Ctx> {
    let caches = Caches::start(tasks, client, client, "kwok-test");
    // Every cache but Machines and Clusters, which never list without their CRDs.
    caches.nodes.ready().await;
    caches.pods.ready().await;
    caches.daemonsets.ready().await;
    caches.pdbs.ready().await;
    caches.nodeclaims.ready().await;
    caches.nodepools.ready().await;
    caches.nodeclasses.ready().await;
    let catalogs = IndexCatalogs {
        index: templates::watch::TemplateIndex::new(),
        nodeclasses: caches.nodeclasses.store(),
        clusters: caches.clusters.store(),
        overlays: Default::default(),
        engaged: None,
    };
    let (_, connection) = controller::health::Connection::new();
    let reporter = Reporter {
        controller: "kwok-test".into(),
        instance: None,
    };
    let shared = Shared {
        workload: client.clone(),
        management: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        metrics: Metrics::register(&mut prometheus_client::registry::Registry::default()),
        nodes: caches.nodes.clone(),
        pods: caches.pods.store(),
        machines: caches.machines.store(),
        nodeclasses: caches.nodeclasses.store(),
        nodeclaims: caches.nodeclaims.store(),
        nodepools: caches.nodepools.store(),
        clusters: caches.clusters.store(),
        catalogs: Arc::new(catalogs),
        unavailable: Arc::default(),
        inventory: Default::default(),
        settings: Settings::default(),
        kinds: Arc::default(),
        expectations: Arc::default(),
        backoff: Arc::default(),
        registration_failures: Arc::default(),
        lookups: Arc::default(),
        cluster_id: "kwok-test".into(),
        repairs: Arc::default(),
        connection,
    };
    Arc::new(Ctx {
        shared,
        provider: Arc::new(provider),
    })
}

/// Reconciles the stored claim until `done` holds for it (`None`: gone).
async fn reconcile_until(
    claims: &Api<NodeClaim>,
    ctx: &Arc<Ctx>,
    what: &str,
    done: impl Fn(Option<&NodeClaim>) -> bool,
) {
    wait_for(what, WAIT, || async {
        let claim = claims.get_opt("kwok-lc").await.expect("get nodeclaim");
        if let Some(c) = &claim {
            lifecycle::reconcile(Arc::new(c.clone()), ctx.clone())
                .await
                .expect("reconcile");
        }
        let claim = claims.get_opt("kwok-lc").await.expect("get nodeclaim");
        done(claim.as_ref()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

fn is_true(claim: Option<&NodeClaim>, type_: &str) -> bool {
    claim
        .and_then(|c| c.status.as_ref())
        .is_some_and(|s| api::conditions::is_true(&s.conditions, type_))
}

#[tokio::test]
async fn a_nodeclaim_launches_initializes_and_terminates_over_kwok() {
    let options = Options::default()
        .without_cluster_api()
        .with(Component::Kwok)
        .with(Component::ControllerManager);
    let tb = Testbed::start(options).await.expect("the testbed starts");
    let client = tb.client();
    let mut tasks = controller::tasks::Tasks::default();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../hack/bench/e2e/kwok-instance-types.json");
    let types = kwok::instance_types::read_file(&path).expect("instance types");
    let provider = kwok::KwokCloudProvider::new(client.clone(), types);
    let ctx = ctx(&client, &mut tasks, provider).await;
    let nodeclasses: Api<kwok::KWOKNodeClass> = Api::all(client.clone());
    let nodeclass = kwok::KWOKNodeClass::new("default", Default::default());
    nodeclasses
        .create(&PostParams::default(), &nodeclass)
        .await
        .expect("KWOKNodeClass");
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "kwok-lc", "labels": {"karpenter.sh/nodepool": "default"},
            "finalizers": ["karpenter.sh/termination"]},
        "spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                "values": ["small", "medium"]}],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
        }
    }))
    .expect("nodeclaim");
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("create nodeclaim");

    reconcile_until(&claims, &ctx, "the claim Initialized", |c| {
        is_true(c, "Initialized")
    })
    .await;
    let claim = claims.get("kwok-lc").await.expect("claim");
    let status = claim.status.as_ref().expect("status");
    assert_eq!(status.provider_id.as_deref(), Some("kwok://kwok-lc"));
    assert_eq!(status.node_name.as_deref(), Some("kwok-lc"));
    assert_eq!(status.allocatable["cpu"].0, "1900m");
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get("kwok-lc").await.expect("the Node");
    assert_eq!(node.labels()["karpenter.sh/registered"], "true");
    assert_eq!(node.labels()["node.kubernetes.io/instance-type"], "small");
    assert!(
        node.finalizers()
            .iter()
            .any(|f| f == "karpenter.sh/termination"),
        "registration put the core's finalizer on the Node"
    );

    claims
        .delete("kwok-lc", &DeleteParams::default())
        .await
        .expect("delete nodeclaim");
    reconcile_until(&claims, &ctx, "the claim gone", |c| c.is_none()).await;
    assert!(
        nodes.get_opt("kwok-lc").await.expect("get node").is_none(),
        "the Node is gone after termination"
    );
}
