//! The core over both providers of the seam (issue 36), the operator as `karpenter-capi run`
//! runs it, each on its own control plane with kwok and without Cluster API (no CRD of it):
//! - the fake provider (`cloudprovider::fake`, as Karpenter's suites run over its fake); a
//!   test kubelet makes the Node of each fake instance (kwok then runs it) and removes the
//!   Node of an instance that is gone, as a cloud's node lifecycle would;
//! - kwok (`run --provider kwok`), whose `create` makes the Node itself; its NodePool,
//!   KWOKNodeClass and instance types are the benchmark's (hack/bench/e2e/).
//!
//! The same scenario over each: provisioning (pending pods get NodeClaims, launched,
//! registered and initialized, the pods Running on the provider's Nodes), garbage collection
//! (an instance of no NodeClaim is deleted through the provider; the NodeClaims' own are
//! kept), liveness (an instance gone behind our back takes its NodeClaim, and the pods get a
//! new one), termination (a deleted NodeClaim's Node is drained through the Eviction API
//! before its instance goes). Over kwok, consolidation too (the bigger Nodes of four pods are
//! replaced by the smallest type once one pod is left, each drained first), and a NodeOverlay
//! applied to its instance types by the core's decorator.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use cloudprovider::fake::FakeCloudProvider;
use cloudprovider::{Instance, InstanceType, InstanceTypes, Offering, PriceSource, Resources};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::engagement::{ProviderFactory, ProviderParts};
use karpenter_core::nodepool_status::NodeClassReadiness;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::{Component, Options, Testbed, wait_for};

use common::{list, operator_config, scrape, spawn_operator};

const WAIT: Duration = Duration::from_secs(90);
const INFLATE: &str = "examples/demo/workload.yaml";

/// What differs between the providers, for the scenario.
trait Side {
    /// The providerID prefix of its Nodes.
    const PREFIX: &'static str;
    /// The NodeClaims that have an instance now (not being deleted), by name.
    async fn instances(&self, client: &Client) -> BTreeSet<String>;
    /// Takes the instance of `claim` away behind the core's back.
    async fn vanish(&self, client: &Client, claim: &str);
    /// Makes an instance of this provider for no NodeClaim (`ORPHAN`).
    async fn plant_orphan(&self, client: &Client);
    /// Whether its catalog has the instance type `name`.
    fn offers(&self, name: &str) -> bool;
}

const ORPHAN: &str = "orphan";

async fn testbed() -> Testbed {
    Testbed::start(
        Options::default()
            .without_cluster_api()
            .with(Component::ControllerManager)
            .with(Component::Scheduler)
            .with(Component::Kwok),
    )
    .await
    .expect("testbed starts")
}

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

fn claims(client: &Client) -> Api<NodeClaim> {
    Api::all(client.clone())
}

/// The NodeClaims not being deleted.
async fn live_claims(client: &Client) -> Vec<NodeClaim> {
    list(&claims(client), &ListParams::default())
        .await
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .collect()
}

fn is_true(claim: &NodeClaim, type_: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| api::conditions::get(&s.conditions, type_))
        .is_some_and(|c| c.status == "True")
}

/// The Nodes the inflate pods run on, once exactly `n` of them are Running, each on a Node of
/// the provider (`prefix`).
async fn running_on(client: &Client, prefix: &str, n: usize) -> Option<BTreeSet<String>> {
    let pods: Vec<Pod> = list(
        &Api::namespaced(client.clone(), "default"),
        &ListParams::default().labels("app=inflate"),
    )
    .await;
    let nodes: Vec<Node> = list(&Api::all(client.clone()), &ListParams::default()).await;
    let ours = |name: &str| {
        nodes.iter().any(|n| {
            n.name_any() == name
                && n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|p| p.starts_with(prefix))
        })
    };
    let on: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .filter(|node| ours(node))
        .collect();
    (on.len() == n && pods.len() == n).then(|| on.into_iter().collect())
}

/// The NodeClaim whose Node is `node`.
async fn claim_of_node(client: &Client, node: &str) -> String {
    live_claims(client)
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .map(|c| c.name_any())
        .unwrap_or_else(|| panic!("no NodeClaim has Node {node}"))
}

/// Provisioning, garbage collection, liveness and termination over `side` with `n` pods.
async fn scenario<S: Side>(tb: &Testbed, side: &S, metrics: std::net::SocketAddr, n: i32) {
    let client = tb.client();
    let pods = usize::try_from(n).expect("pods");

    // Provisioning: the pods get NodeClaims, each launched, registered and initialized, and
    // run on the provider's Nodes.
    scale(&client, n).await;
    let nodes = wait_for("pods Running on the provider's Nodes", WAIT, || {
        running_on(&client, S::PREFIX, pods)
    })
    .await
    .expect("provisioned");
    let launched = live_claims(&client).await;
    assert!(!launched.is_empty());
    for c in &launched {
        for t in ["Launched", "Registered", "Initialized", "Ready"] {
            assert!(is_true(c, t), "{}: {t}: {:?}", c.name_any(), c.status);
        }
        // The offering it launched on is on its labels (the provider's record, or the core's
        // from what the provider says of the instance), so nothing reads it as drifted.
        let labels = c.labels();
        assert_eq!(
            labels.get("karpenter.sh/capacity-type").map(String::as_str),
            Some("on-demand"),
            "{}: {labels:?}",
            c.name_any()
        );
        assert!(
            labels
                .get("node.kubernetes.io/instance-type")
                .is_some_and(|t| side.offers(t)),
            "{}: {labels:?}",
            c.name_any()
        );
        assert!(!is_true(c, "Drifted"), "{}: {:?}", c.name_any(), c.status);
    }
    let names: BTreeSet<String> = launched.iter().map(|c| c.name_any()).collect();
    assert_eq!(side.instances(&client).await, names, "one instance a claim");
    assert!(
        nodes.len() <= names.len(),
        "pods on {nodes:?}, claims {names:?}"
    );

    // Garbage collection: the instance of no NodeClaim goes; the claims' own stay.
    side.plant_orphan(&client).await;
    assert!(side.instances(&client).await.contains(ORPHAN), "planted");
    wait_for("the orphan collected", WAIT, || async {
        (!side.instances(&client).await.contains(ORPHAN)).then_some(())
    })
    .await
    .expect("an instance of no NodeClaim is deleted");
    let live: BTreeSet<String> = live_claims(&client)
        .await
        .iter()
        .filter(|c| is_true(c, "Launched"))
        .map(|c| c.name_any())
        .collect();
    assert!(
        live.is_subset(&side.instances(&client).await),
        "the claims' instances are kept: {live:?}"
    );

    // Liveness: an instance gone behind our back takes its NodeClaim; the pods get a new one.
    let node = nodes.iter().next().expect("a Node");
    let victim = claim_of_node(&client, node).await;
    side.vanish(&client, &victim).await;
    wait_for("the vanished instance's claim gone", WAIT, || async {
        claims(&client)
            .get_opt(&victim)
            .await
            .expect("get NodeClaim")
            .is_none()
            .then_some(())
    })
    .await
    .expect("liveness deletes the claim of a vanished instance");
    let nodes = wait_for("pods Running again", WAIT, || {
        running_on(&client, S::PREFIX, pods)
    })
    .await
    .expect("re-provisioned");
    assert!(!nodes.contains(node), "{node} is gone: {nodes:?}");

    // Termination: a deleted claim's pods are evicted before its instance and Node go.
    let evictions = counter(metrics, "karpenter_pods_eviction_requests_total").await;
    let node = nodes.iter().next().expect("a Node").clone();
    let victim = claim_of_node(&client, &node).await;
    claims(&client)
        .delete(&victim, &DeleteParams::default())
        .await
        .expect("delete the NodeClaim");
    wait_for(
        "the deleted claim, its instance and Node gone",
        WAIT,
        || async {
            let claim = claims(&client)
                .get_opt(&victim)
                .await
                .expect("get NodeClaim");
            let node = Api::<Node>::all(client.clone())
                .get_opt(&node)
                .await
                .expect("get Node");
            let instance = side.instances(&client).await.contains(&victim);
            (claim.is_none() && node.is_none() && !instance).then_some(())
        },
    )
    .await
    .expect("terminated");
    assert!(
        counter(metrics, "karpenter_pods_eviction_requests_total").await > evictions,
        "its pods were evicted through the Eviction API"
    );
    wait_for("pods Running again", WAIT, || {
        running_on(&client, S::PREFIX, pods)
    })
    .await
    .expect("re-provisioned after termination");
}

// ---- the fake ------------------------------------------------------------------------------

struct Fake(FakeCloudProvider);

impl Side for Fake {
    const PREFIX: &'static str = "fake://";

    async fn instances(&self, _: &Client) -> BTreeSet<String> {
        self.0.state(|s| {
            s.instances
                .values()
                .filter(|i| !i.terminating)
                .map(|i| i.nodeclaim.clone())
                .collect()
        })
    }

    async fn vanish(&self, _: &Client, claim: &str) {
        self.0.remove(claim).expect("the instance was there");
    }

    fn offers(&self, name: &str) -> bool {
        fake_catalog().get(name).is_some()
    }

    async fn plant_orphan(&self, _: &Client) {
        let created = k8s_openapi::jiff::Timestamp::now()
            .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(60))
            .expect("a minute ago");
        self.0.state(|s| {
            s.instances.insert(
                ORPHAN.into(),
                Instance {
                    nodeclaim: ORPHAN.into(),
                    provider_id: Some(FakeCloudProvider::provider_id(ORPHAN)),
                    description: "an instance of no NodeClaim".into(),
                    nodeclaim_uid: Some("uid-of-no-nodeclaim".into()),
                    created: Some(created),
                    ..Instance::default()
                },
            )
        });
    }
}

/// The fake's instance types: `small` (2 cpu) and `large` (8 cpu), on-demand in one zone.
fn fake_catalog() -> InstanceTypes {
    let types = [("small", 2, 0.1), ("large", 8, 0.4)]
        .into_iter()
        .map(|(name, cpu, price)| {
            let r = Resources(BTreeMap::from([
                ("cpu".to_string(), cpu * 1000),
                ("memory".to_string(), cpu << 32),
                ("pods".to_string(), 110),
            ]));
            InstanceType {
                name: name.into(),
                capacity: r.clone(),
                allocatable: r,
                labels: BTreeMap::from([
                    ("kubernetes.io/arch".into(), "amd64".into()),
                    ("kubernetes.io/os".into(), "linux".into()),
                ]),
                taints: Vec::new(),
                offerings: vec![Offering::new(
                    name,
                    Some("zone-a"),
                    "on-demand",
                    price,
                    PriceSource::Annotation,
                )],
                capacity_overlaid: false,
                volume_limits: BTreeMap::new(),
                devices: None,
            }
        })
        .collect();
    InstanceTypes::of(types)
}

/// The operator's provider: the fake, its NodeClass kind always Ready.
fn fake_factory(fake: FakeCloudProvider) -> ProviderFactory {
    ProviderFactory {
        name: "fake",
        build: Arc::new(move |_, _, _, _| ProviderParts {
            provider: Arc::new(fake.clone()),
            nodeclasses: Arc::new(|group: &str, kind: &str, _: &str| {
                let k = FakeCloudProvider::NODE_CLASS;
                (group == k.group && kind == k.kind).then(|| NodeClassReadiness {
                    generation: None,
                    conditions: vec![
                        serde_json::from_value(json!({
                            "type": "Ready", "status": "True", "reason": "Ready",
                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"
                        }))
                        .expect("condition"),
                    ],
                })
            }),
            offering_changes: Default::default(),
            loops: Vec::new(),
            gauges: None,
        }),
    }
}

/// The Node a kubelet of the fake instance of `claim` registers: the claim's labels, kwok's
/// annotation (kwok makes it Ready and runs its pods), the unregistered taint, the
/// instance's capacity.
fn fake_node(claim: &NodeClaim, instance: &Instance) -> Node {
    let name = claim.name_any();
    let mut labels = claim.labels().clone();
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels.insert("kwok.x-k8s.io/node".into(), "fake".into());
    let mut capacity: BTreeMap<String, String> = instance.capacity.clone();
    capacity
        .entry("pods".into())
        .or_insert_with(|| "110".into());
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"providerID": instance.provider_id,
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
        "status": {"capacity": capacity, "allocatable": capacity}
    }))
    .expect("node")
}

/// The fake's kubelets: a Node for each instance of a NodeClaim, gone with its instance.
async fn kubelets(client: Client, fake: FakeCloudProvider) {
    let nodes: Api<Node> = Api::all(client.clone());
    loop {
        let instances: Vec<Instance> = fake.state(|s| s.instances.values().cloned().collect());
        let have: Vec<Node> = list(&nodes, &ListParams::default()).await;
        let pid = |n: &Node| n.spec.as_ref().and_then(|s| s.provider_id.clone());
        for i in instances.iter().filter(|i| i.provider_id.is_some()) {
            if have.iter().any(|n| pid(n) == i.provider_id) {
                continue;
            }
            let Some(claim) = claims(&client)
                .get_opt(&i.nodeclaim)
                .await
                .expect("get NodeClaim")
            else {
                continue;
            };
            match nodes
                .create(&PostParams::default(), &fake_node(&claim, i))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => panic!("create the Node of {}: {e}", i.nodeclaim),
            }
        }
        for n in have.iter().filter(|n| {
            pid(n).is_some_and(|p| {
                p.starts_with(Fake::PREFIX)
                    && !instances.iter().any(|i| i.provider_id == Some(p.clone()))
            }) && n.metadata.deletion_timestamp.is_none()
        }) {
            match nodes.delete(&n.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => panic!("delete Node {}: {e}", n.name_any()),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_core_over_the_fake_provider() {
    let tb = testbed().await;
    let client = tb.client();
    tb.apply_yaml(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.test.sh, kind: TestNodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
  disruption:
    consolidateAfter: Never
"#,
        "default",
    )
    .await
    .expect("NodePool");
    let workload =
        std::fs::read_to_string(testbed::repo_root().join(INFLATE)).expect("the demo's Deployment");
    tb.apply_yaml(&workload, "default").await.expect("inflate");
    let fake = FakeCloudProvider::default();
    fake.state(|s| {
        s.catalogs
            .insert("default".into(), Arc::new(fake_catalog()))
    });
    let kubelets = tokio::spawn(kubelets(client.clone(), fake.clone()));
    let mut config = operator_config(&tb);
    config.provider = Some(fake_factory(fake.clone()));
    let metrics = config.metrics_addr;
    let _operator = spawn_operator(config);

    scenario(&tb, &Fake(fake.clone()), metrics, 3).await;
    let deleted = fake.state(|s| s.delete_calls.clone());
    assert!(
        deleted.iter().any(|d| d == ORPHAN),
        "the orphan went through the provider's delete: {deleted:?}"
    );
    kubelets.abort();
}

// ---- kwok ----------------------------------------------------------------------------------

struct Kwok;

/// The kwok provider's fence label: the NodeClaim a Node was made for.
const KWOK_CLAIM: &str = "karpenter.kwok.sh/nodeclaim";

impl Side for Kwok {
    const PREFIX: &'static str = "kwok://";

    async fn instances(&self, client: &Client) -> BTreeSet<String> {
        let nodes: Vec<Node> = list(
            &Api::all(client.clone()),
            &ListParams::default().labels(KWOK_CLAIM),
        )
        .await;
        nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter_map(|n| n.labels().get(KWOK_CLAIM).cloned())
            .collect()
    }

    async fn vanish(&self, client: &Client, claim: &str) {
        // The instance is the Node: gone for good (our finalizer on it released too).
        let nodes: Api<Node> = Api::all(client.clone());
        nodes
            .patch(
                claim,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .expect("release the Node's finalizers");
        nodes
            .delete(claim, &DeleteParams::default())
            .await
            .expect("delete the Node");
        // Its pods are bound to a Node that is gone: kube-controller-manager's pod GC deletes
        // them, but only after its fixed 40 s quarantine. Do it now, as the pod GC would.
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let on = ListParams::default().fields(&format!("spec.nodeName={claim}"));
        for p in list(&pods, &on).await {
            match pods
                .delete(&p.name_any(), &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => panic!("delete pod {}: {e}", p.name_any()),
            }
        }
    }

    fn offers(&self, name: &str) -> bool {
        kwok_types().iter().any(|t| t.name == name)
    }

    async fn plant_orphan(&self, client: &Client) {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": ORPHAN,
                "labels": {KWOK_CLAIM: ORPHAN, "kwok.x-k8s.io/node": "fake"},
                "annotations": {"kwok.x-k8s.io/node": "fake",
                    "karpenter.kwok.sh/nodeclaim-uid": "uid-of-no-nodeclaim"}},
            "spec": {"providerID": format!("kwok://{ORPHAN}"),
                "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]}
        }))
        .expect("node");
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .expect("create the orphan Node");
    }
}

/// The benchmark's kwok instance types.
fn kwok_types() -> Vec<kwok::instance_types::InstanceType> {
    let file = testbed::repo_root().join("hack/bench/e2e/kwok-instance-types.json");
    kwok::instance_types::read_file(&file).expect("the bench's instance types")
}

/// The instance types of the claims, sorted; `None` while any has none yet.
async fn claim_types(client: &Client) -> Option<Vec<String>> {
    let mut types: Vec<String> = live_claims(client)
        .await
        .iter()
        .map(|c| c.labels().get("node.kubernetes.io/instance-type").cloned())
        .collect::<Option<_>>()?;
    types.sort();
    Some(types)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_core_over_kwok_and_its_consolidation() {
    let tb = testbed().await;
    let client = tb.client();
    let root = testbed::repo_root();
    let bench = root.join("hack/bench/e2e");
    let manifests = std::fs::read_to_string(bench.join("karpenter.yaml")).expect("NodePool");
    tb.apply_yaml(&manifests, "default")
        .await
        .expect("NodePool and KWOKNodeClass");
    // No consolidation until its step below: the scenario's Nodes stay as provisioned.
    let pools: Api<api::NodePool> = Api::all(client.clone());
    let consolidate_after =
        |after: &str| Patch::Merge(json!({"spec": {"disruption": {"consolidateAfter": after}}}));
    pools
        .patch(
            "default",
            &PatchParams::default(),
            &consolidate_after("Never"),
        )
        .await
        .expect("consolidateAfter: Never");
    let workload = std::fs::read_to_string(root.join(INFLATE)).expect("the demo's Deployment");
    tb.apply_yaml(&workload, "default").await.expect("inflate");
    let types = kwok_types();
    let mut config = operator_config(&tb);
    config.provider = Some(kwok::wiring::factory(types));
    let metrics = config.metrics_addr;
    let _operator = spawn_operator(config);

    // Four pods of 500m do not fit one small Node: consolidation has something to do below.
    scenario(&tb, &Kwok, metrics, 4).await;
    let before = claim_types(&client)
        .await
        .expect("claims record their type");
    assert!(!before.is_empty() && before != ["small"], "{before:?}");

    // Consolidation: one pod left fits the smallest type; the bigger Nodes are replaced or
    // removed, each drained first (the pod moves by eviction).
    let drained = counter(metrics, "karpenter_pods_drained_total").await;
    pools
        .patch("default", &PatchParams::default(), &consolidate_after("2s"))
        .await
        .expect("consolidateAfter: 2s");
    scale(&client, 1).await;
    wait_for(
        "one small NodeClaim, the pod Running on it, the replaced Nodes gone",
        Duration::from_secs(120),
        || async {
            let types = claim_types(&client).await?;
            running_on(&client, Kwok::PREFIX, 1).await?;
            let all = list(&claims(&client), &ListParams::default()).await;
            let nodes: Vec<Node> = list(&Api::all(client.clone()), &ListParams::default()).await;
            (types == ["small"] && all.len() == 1 && nodes.len() == 1).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("consolidated from {before:?}: {e}"));
    assert!(counter(metrics, "karpenter_pods_drained_total").await > drained);

    // A NodeOverlay on the kwok provider's instance types (the core's decorator, for any
    // provider): `large` priced below `small`. The one pod, on `small` without overlays
    // (above: the control), is moved to a cheaper `large`; the overlay's status says where it
    // applies.
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
    let applied = wait_for("the overlay's status", Duration::from_secs(30), || async {
        let o = overlays
            .get_opt("cheap-large")
            .await
            .expect("get NodeOverlay")?;
        let c = o.status?.conditions;
        let v = c.iter().find(|c| c.type_ == "ValidationSucceeded")?;
        (v.status == "True").then(|| v.message.clone())
    })
    .await
    .expect("ValidationSucceeded=True");
    assert_eq!(applied, "Applied to 2 offerings", "large in two zones");
    if let Err(e) = wait_for(
        "one large NodeClaim, the pod Running on it",
        Duration::from_secs(120),
        || async {
            let types = claim_types(&client).await?;
            running_on(&client, Kwok::PREFIX, 1).await?;
            (types == ["large"]).then_some(())
        },
    )
    .await
    {
        // What the claims said of themselves (Consolidatable's message names the verdict).
        let seen: Vec<String> = live_claims(&client)
            .await
            .iter()
            .map(|c| {
                let conditions = c.status.as_ref().map(|s| {
                    s.conditions
                        .iter()
                        .map(|c| format!("{}={} {} {}", c.type_, c.status, c.reason, c.message))
                        .collect::<Vec<_>>()
                });
                format!("{} {:?} {conditions:?}", c.name_any(), c.labels())
            })
            .collect();
        panic!("the overlay's price chose large: {e}\n{}", seen.join("\n"));
    }
    assert!(
        live_claims(&client).await.iter().all(|c| c
            .annotations()
            .get("karpenter.sh/price-overlay-applied")
            == Some(&"true".to_string())),
        "the NodeClaim was planned on an overlaid price"
    );
}
