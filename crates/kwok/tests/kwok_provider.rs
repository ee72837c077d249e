//! The kwok provider on a real control plane without Cluster API (kube-apiserver and kwok
//! only, the Cluster API CRDs not installed; the testbed installs this project's CRDs, among
//! them KWOKNodeClass): create makes the Node
//! and kwok makes it Ready, get finds it, list lists only this provider's Nodes, delete
//! removes only those; NodeClass and name problems are the typed errors the lifecycle acts on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::karpenter::{
    NodeClaimSpec, NodeClassReference, NodeSelectorRequirementWithMinValues, Operator,
    ResourceRequirements,
};
use cloudprovider::{CloudProvider, Created, Deletion, Error};
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{Timestamp, ToSpan};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use kwok::nodeclass::{KWOKNodeClass, KWOKNodeClassSpec};
use kwok::{KwokCloudProvider, instance_types};
use testbed::{Component, Options, Testbed, wait_for};

const BENCH_TYPES: &str = "../../hack/bench/e2e/kwok-instance-types.json";
const WAIT: Duration = Duration::from_secs(60);

/// The shared testbed: kube-apiserver and kwok, no Cluster API.
async fn bare() -> &'static Testbed {
    let options = Options::default()
        .without_cluster_api()
        .with(Component::Kwok);
    testbed::shared(options).await.expect("the testbed starts")
}

/// A client of the shared testbed, its Nodes, and a provider of the bench's instance types.
async fn setup() -> (Client, Api<Node>, KwokCloudProvider) {
    let client = bare().await.client();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(BENCH_TYPES);
    let types = instance_types::read_file(&path).expect("the bench's instance types read");
    let provider = KwokCloudProvider::new(client.clone(), types);
    (client.clone(), Api::all(client), provider)
}

/// Deletes what a test left (best effort: the shared testbed outlives it).
async fn clean(nodes: &Api<Node>, names: &[&str]) {
    for n in names {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
}

/// A NodeClaim as the provisioner makes it (not stored: the provider reads only the object
/// it is given), asking for one of the bench's types.
fn claim(name: &str, nodeclass: &str, uid: &str) -> Arc<NodeClaim> {
    let mut c = NodeClaim::new(
        name,
        NodeClaimSpec {
            requirements: vec![NodeSelectorRequirementWithMinValues {
                key: "node.kubernetes.io/instance-type".into(),
                operator: Operator::In,
                values: vec!["small".into(), "medium".into()],
                min_values: None,
            }],
            resources: Some(ResourceRequirements {
                requests: BTreeMap::from([("cpu".into(), Quantity("1".into()))]),
            }),
            node_class_ref: NodeClassReference {
                group: kwok::nodeclass::GROUP.into(),
                kind: kwok::nodeclass::KIND.into(),
                name: nodeclass.into(),
            },
            ..NodeClaimSpec::default()
        },
    );
    c.metadata.uid = Some(uid.into());
    c.metadata.labels = Some(BTreeMap::from([(
        "karpenter.sh/nodepool".into(),
        "default".into(),
    )]));
    Arc::new(c)
}

async fn make_nodeclass(client: &Client, name: &str, spec: KWOKNodeClassSpec) -> KWOKNodeClass {
    let api: Api<KWOKNodeClass> = Api::all(client.clone());
    api.create(&PostParams::default(), &KWOKNodeClass::new(name, spec))
        .await
        .expect("KWOKNodeClass created")
}

/// A Node this provider did not make (kwok runs it too: it carries kwok's annotation).
async fn foreign_node(client: &Client, name: &str, provider_id: &str) {
    let mut node = Node {
        spec: Some(NodeSpec {
            provider_id: Some(provider_id.into()),
            ..NodeSpec::default()
        }),
        ..Node::default()
    };
    node.metadata.name = Some(name.into());
    node.metadata.annotations = Some(BTreeMap::from([(
        "kwok.x-k8s.io/node".into(),
        "fake".into(),
    )]));
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .expect("foreign Node created");
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether the API server serves Cluster API's Machines: the CRD exists and a list of them
/// answers (a 404 is "not served"; any other error fails the test, never read as either).
async fn serves_machines(client: &Client) -> bool {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get_opt("machines.cluster.x-k8s.io")
        .await
        .expect("get the CRD");
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine");
    let machines: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "machines"),
    );
    let listed = match machines.list(&ListParams::default().limit(1)).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => panic!("listing Machines: {e}"),
    };
    assert_eq!(crd.is_some(), listed, "the CRD and the list agree");
    listed
}

/// Launches `claim` as the core does: the first `create` answers the labels to record, the
/// core writes them (here: onto the in-memory claim), the next `create` makes the Node.
/// Returns the claim as recorded.
async fn launch(p: &KwokCloudProvider, claim: Arc<NodeClaim>) -> Result<Arc<NodeClaim>, Error> {
    let mut claim = (*claim).clone();
    for _ in 0..2 {
        match p.create(&claim).await? {
            Created::Launched => return Ok(Arc::new(claim)),
            Created::Record(intent) => {
                claim
                    .metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .extend(intent.labels);
                claim
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(intent.annotations);
            }
        }
    }
    panic!("create asked to record twice");
}

#[tokio::test]
async fn the_testbed_has_no_cluster_api_and_the_kwok_crds() {
    let client = bare().await.client();
    assert!(!serves_machines(&client).await, "no Cluster API here");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [
        "kwoknodeclasses.karpenter.kwok.sh",
        "nodeclaims.karpenter.sh",
    ] {
        assert!(crds.get_opt(name).await.expect("get").is_some(), "{name}");
    }
    // Positive control: a default testbed (apiserver only) serves them.
    let default = Testbed::start(Options::default())
        .await
        .expect("a default testbed starts");
    assert!(serves_machines(&default.client()).await);
}

#[tokio::test]
async fn create_get_list_delete_on_nodes_kwok_runs() {
    let (client, nodes, p) = setup().await;
    make_nodeclass(&client, "lifecycle", KWOKNodeClassSpec::default()).await;
    let a = claim("kwok-lifecycle-a", "lifecycle", "uid-a");

    let created = launch(&p, a.clone()).await.expect("create");
    assert_eq!(
        created.labels()["node.kubernetes.io/instance-type"],
        "small",
        "the cheapest fitting type is returned on the claim"
    );
    let node = nodes
        .get("kwok-lifecycle-a")
        .await
        .expect("the Node exists");
    assert_eq!(
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some("kwok://kwok-lifecycle-a")
    );
    let l = node.labels();
    assert_eq!(l["node.kubernetes.io/instance-type"], "small");
    assert_eq!(l["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(l["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(l["karpenter.sh/nodepool"], "default");
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    assert_eq!(allocatable.expect("allocatable")["cpu"].0, "1900m");
    wait_for("kwok to make the Node Ready", WAIT, || {
        let nodes = nodes.clone();
        async move { nodes.get("kwok-lifecycle-a").await.ok().filter(ready) }
    })
    .await
    .expect("kwok makes the Node Ready");

    // Idempotent: a second create adopts the same Node.
    launch(&p, a.clone()).await.expect("create again");
    let again = nodes.get("kwok-lifecycle-a").await.expect("still there");
    assert_eq!(again.metadata.uid, node.metadata.uid, "not made twice");

    let instance = p.get(&a).await.expect("get finds it");
    assert_eq!(
        instance.provider_id.as_deref(),
        Some("kwok://kwok-lifecycle-a")
    );
    assert_eq!(instance.instance_type, "small");
    assert_eq!(instance.nodeclaim_uid.as_deref(), Some("uid-a"));

    // list: ours (two of them: the positive control that it lists more than one), never a
    // Node it did not make, even one with a kwok:// providerID.
    let b = claim("kwok-lifecycle-b", "lifecycle", "uid-b");
    launch(&p, b.clone()).await.expect("create b");
    foreign_node(
        &client,
        "kwok-lifecycle-foreign",
        "kwok://kwok-lifecycle-foreign",
    )
    .await;
    let listed: Vec<String> = p
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.nodeclaim)
        .filter(|n| n.starts_with("kwok-lifecycle-"))
        .collect();
    assert_eq!(listed, ["kwok-lifecycle-a", "kwok-lifecycle-b"]);

    // delete: ours goes; a claim named like the foreign Node deletes nothing.
    assert_eq!(p.delete(&a).await.expect("delete"), Deletion::Gone);
    wait_for("the Node to go", WAIT, || {
        let nodes = nodes.clone();
        async move {
            nodes
                .get_opt("kwok-lifecycle-a")
                .await
                .ok()
                .and_then(|n| n.is_none().then_some(()))
        }
    })
    .await
    .expect("the Node is deleted");
    assert!(matches!(p.get(&a).await, Err(Error::NodeClaimNotFound(_))));
    let impostor = claim("kwok-lifecycle-foreign", "lifecycle", "uid-f");
    assert_eq!(p.delete(&impostor).await.expect("delete"), Deletion::Gone);
    assert!(
        nodes
            .get_opt("kwok-lifecycle-foreign")
            .await
            .expect("get")
            .is_some(),
        "a Node this provider did not make is never deleted"
    );
    assert!(matches!(
        p.get(&impostor).await,
        Err(Error::NodeClaimNotFound(_))
    ));
    // Garbage collection's path: the instance as a claim finds and deletes its Node.
    let b_instance = p.get(&b).await.expect("b");
    assert_eq!(
        p.delete(&b_instance.as_claim()).await.expect("delete b"),
        Deletion::Gone
    );
    assert!(
        nodes
            .get_opt("kwok-lifecycle-b")
            .await
            .expect("get")
            .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
    );
    clean(&nodes, &["kwok-lifecycle-foreign", "kwok-lifecycle-b"]).await;
}

#[tokio::test]
async fn nodeclass_and_name_problems_are_typed() {
    let (client, nodes, p) = setup().await;

    // Missing NodeClass: InsufficientCapacity (Karpenter kwok), nothing made.
    let missing = claim("kwok-typed-missing", "kwok-typed-none", "uid-m");
    assert!(matches!(
        launch(&p, missing).await,
        Err(Error::InsufficientCapacity(m)) if m.contains("kwok-typed-none")
    ));
    assert!(
        nodes
            .get_opt("kwok-typed-missing")
            .await
            .expect("get")
            .is_none()
    );

    // Ready=False: NodeClassNotReady with its message. Positive control: the same claim on
    // the defaulted (Ready) class launches.
    make_nodeclass(&client, "kwok-typed-ready", KWOKNodeClassSpec::default()).await;
    let broken = make_nodeclass(&client, "kwok-typed-broken", KWOKNodeClassSpec::default()).await;
    let defaulted = broken.status.as_ref().map(|s| s.conditions.len());
    assert_eq!(defaulted, Some(1), "the API server defaults Ready=True");
    let api: Api<KWOKNodeClass> = Api::all(client.clone());
    let status = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "Broken", "message": "broken on purpose",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    api.patch_status(
        "kwok-typed-broken",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("status patched");
    let c = claim("kwok-typed-c", "kwok-typed-broken", "uid-c");
    assert!(matches!(
        launch(&p, c).await,
        Err(Error::NodeClassNotReady(m)) if m == "broken on purpose"
    ));
    let ok = claim("kwok-typed-ok", "kwok-typed-ready", "uid-ok");
    launch(&p, ok).await.expect("a Ready class launches");
    assert!(nodes.get_opt("kwok-typed-ok").await.expect("get").is_some());

    // A Node of the claim's name that is not ours: a permanent conflict, the Node untouched.
    foreign_node(&client, "kwok-typed-taken", "kwok://kwok-typed-taken").await;
    let taken = claim("kwok-typed-taken", "kwok-typed-ready", "uid-t");
    let err = launch(&p, taken).await.expect_err("conflict");
    assert_eq!(
        err.permanent().map(|(r, _)| r),
        Some("NameConflict"),
        "{err}"
    );
    // So is our own Node of an earlier NodeClaim of the same name (another UID).
    let successor = claim("kwok-typed-ok", "kwok-typed-ready", "uid-other");
    assert!(
        launch(&p, successor).await.is_err(),
        "another UID's Node is not adopted"
    );

    clean(&nodes, &["kwok-typed-ok", "kwok-typed-taken"]).await;
}

#[tokio::test]
async fn registration_delay_holds_the_node_back() {
    let (client, nodes, p) = setup().await;
    let spec = KWOKNodeClassSpec {
        node_registration_delay: Some("1h".into()),
    };
    make_nodeclass(&client, "kwok-delay", spec).await;
    let mut young = (*claim("kwok-delay-young", "kwok-delay", "uid-y")).clone();
    young.metadata.creation_timestamp = Some(Time(Timestamp::now()));
    let held = launch(&p, Arc::new(young.clone()))
        .await
        .expect_err("held back");
    assert!(
        held.permanent().is_none(),
        "a passing wait, retried: {held}"
    );
    assert!(
        nodes
            .get_opt("kwok-delay-young")
            .await
            .expect("get")
            .is_none(),
        "still booting"
    );
    assert!(matches!(
        p.get(&young).await,
        Err(Error::NodeClaimNotFound(_))
    ));
    // Positive control: a claim older than the delay gets its Node.
    let mut old = (*claim("kwok-delay-old", "kwok-delay", "uid-o")).clone();
    let two_hours_ago = Timestamp::now() - 2.hours();
    old.metadata.creation_timestamp = Some(Time(two_hours_ago));
    launch(&p, Arc::new(old)).await.expect("create");
    assert!(
        nodes
            .get_opt("kwok-delay-old")
            .await
            .expect("get")
            .is_some()
    );
    let _ = nodes
        .delete("kwok-delay-old", &DeleteParams::default())
        .await;
}

#[test]
fn a_bad_instance_type_file_names_the_file_and_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("instance-types.json");
    let bad = r#"[{"name": "small", "resources": {"cpu": "2", "memory": "4Gi"},
        "offerings": [{"Price": 0.1, "Requirements": []}]},
      {"name": "medium", "resources": {"cpu": "four"}}]"#;
    std::fs::write(&path, bad).expect("written");
    let err = instance_types::read_file(&path).expect_err("refused");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("field [1].resources.cpu"), "{message}");
    // Positive control: the same file with the quantity fixed reads.
    std::fs::write(&path, bad.replace("four", "4")).expect("written");
    assert_eq!(instance_types::read_file(&path).expect("reads").len(), 2);
}

#[tokio::test]
async fn a_provider_reading_caches_finds_what_they_do_not_hold_yet() {
    let (client, nodes, _) = setup().await;
    make_nodeclass(&client, "cached", KWOKNodeClassSpec::default()).await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(BENCH_TYPES);
    let types = instance_types::read_file(&path).expect("types");
    // Caches that never saw anything (as one that has not caught up yet).
    let (node_store, _) = kube::runtime::reflector::store::<Node>();
    let (nodeclass_store, _) = kube::runtime::reflector::store();
    let p = KwokCloudProvider::new(client.clone(), types).reading(node_store, nodeclass_store);
    let a = claim("kwok-cached-a", "cached", "uid-ca");
    // The NodeClass and the Node it made come from the API server: launched, then found.
    let created = launch(&p, a.clone()).await.expect("create");
    assert!(nodes.get_opt("kwok-cached-a").await.expect("get").is_some());
    let instance = p
        .get(&created)
        .await
        .expect("a Node just made is not taken for gone");
    assert_eq!(instance.nodeclaim_uid.as_deref(), Some("uid-ca"));
    // A second create adopts it rather than making another.
    launch(&p, a.clone()).await.expect("create again");
    // Control: a claim whose Node was never made is not found.
    let missing = claim("kwok-cached-missing", "cached", "uid-cm");
    assert!(p.get(&missing).await.is_err());
    clean(&nodes, &["kwok-cached-a"]).await;
}
