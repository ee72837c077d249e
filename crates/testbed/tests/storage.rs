//! The test provider plays a zonal CSI driver on the testbed: kube-scheduler places a pod
//! with a WaitForFirstConsumer claim on a Node of the provider, the provisioner makes the PV
//! in that Node's zone, kube-controller-manager's PV binder binds the claim, kwok runs the
//! pod; an Immediate class provisions at once; the Node's CSINode carries the template's
//! `csi-driver` limits; a released PV is deleted. A claim of a provisioner nobody plays
//! stays unbound (the control).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use testbed::provider::{
    self, ProviderConfig, SELECTED_NODE_ANNOTATION, TestProvider, ZONAL_DRIVER, volume_name,
    zonal_storage_class,
};
use testbed::{Options, Testbed, wait_for};

const TEMPLATE: &str = "disks";
const WAIT: Duration = Duration::from_secs(40);

#[tokio::test]
async fn zonal_volumes_follow_the_node() {
    let started = std::time::Instant::now();
    let tb = Testbed::start(Options::all())
        .await
        .expect("testbed starts");
    let client = tb.client();
    let _provider = TestProvider::start(
        client.clone(),
        ProviderConfig {
            provision_delay: Duration::from_millis(200),
            storage: true,
            ..ProviderConfig::default()
        },
    )
    .await
    .expect("test provider starts");
    let cluster = provider::setup_cluster(&tb, "c1", &["zone-a", "zone-b"])
        .await
        .expect("Cluster ready");
    let ns = tb.temp_namespace().await.expect("namespace");

    // Classes: ours (WaitForFirstConsumer, and Immediate in zone-a), and one nobody plays.
    let classes: Api<StorageClass> = Api::all(client.clone());
    for class in [
        zonal_storage_class("zonal", true, &[]),
        zonal_storage_class("zonal-now", false, &["zone-a"]),
    ] {
        classes
            .create(&PostParams::default(), &class)
            .await
            .expect("class");
    }
    let claim = |name: &str, class: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec: {{storageClassName: {class}, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 3Gi}}}}}}\n---\n"
        )
    };
    let pod = |name: &str, claim: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, image: busybox, volumeMounts: [{{name: v, mountPath: /data}}]}}]\n  volumes: [{{name: v, persistentVolumeClaim: {{claimName: {claim}}}}}]\n---\n"
        )
    };
    let workload = [
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: elsewhere}\nprovisioner: other.example.com\nvolumeBindingMode: WaitForFirstConsumer\n---\n".to_string(),
        claim("data", "zonal"),
        claim("now", "zonal-now"),
        claim("foreign", "elsewhere"),
        pod("app", "data"),
        pod("control", "foreign"),
    ]
    .concat();
    tb.apply_yaml(&workload, &ns).await.expect("workload");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // An Immediate claim needs no pod: its PV is made at once, in the class's zone.
    let now = wait_bound(&claims, "now").await;
    assert_eq!(zone_of(&pv(&client, &now).await), ["zone-a"]);

    // The Node, in zone-b, from a template declaring attach limits.
    tb.apply_yaml(&machine(&cluster.name), &cluster.namespace)
        .await
        .expect("template, TestMachine and Machine");
    let data = wait_bound(&claims, "data").await;
    let node = data
        .annotations()
        .get(SELECTED_NODE_ANNOTATION)
        .cloned()
        .expect("kube-scheduler selected the node");
    let volume = pv(&client, &data).await;
    assert_eq!(volume.name_any(), volume_name(&data.uid().expect("uid")));
    let spec = volume.spec.clone().expect("spec");
    assert_eq!(spec.csi.expect("csi").driver, ZONAL_DRIVER);
    assert_eq!(spec.claim_ref.expect("claimRef").uid, data.uid());
    assert_eq!(zone_of(&volume), ["zone-b"]);
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.get(&node).await.expect("node");
    assert_eq!(
        n.labels()
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("zone-b")
    );
    wait_for("pod app to run on the node", WAIT, || async {
        let p = pods.get("app").await.ok()?;
        let status = p.status?;
        (status.phase.as_deref() == Some("Running")
            && p.spec?.node_name.as_deref() == Some(node.as_str()))
        .then_some(())
    })
    .await
    .expect("app runs");

    // The CSINode: the template's drivers and limits, ours without a limit, owned by the Node.
    let csinode = Api::<CSINode>::all(client.clone())
        .get(&node)
        .await
        .expect("CSINode");
    let drivers: Vec<(String, Option<i32>, String)> = csinode
        .spec
        .drivers
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                d.allocatable.as_ref().and_then(|a| a.count),
                d.node_id.clone(),
            )
        })
        .collect();
    assert_eq!(
        drivers,
        [
            ("ebs.csi.aws.com".into(), Some(25), node.clone()),
            ("efs.csi.aws.com".into(), None, node.clone()),
            (ZONAL_DRIVER.into(), None, node.clone()),
        ]
    );
    assert_eq!(csinode.owner_references()[0].uid, n.uid().expect("uid"));
    assert!(
        Api::<CSIDriver>::all(client.clone())
            .get_opt(ZONAL_DRIVER)
            .await
            .expect("get")
            .is_some()
    );

    // The control: the other provisioner's claim was placed too, but nobody makes its PV
    // (checked again at the end, when a wrong provisioner would long have made one).
    let foreign = wait_for("kube-scheduler to place the control", WAIT, || async {
        let c = claims.get("foreign").await.ok()?;
        (c.annotations().get(SELECTED_NODE_ANNOTATION) == Some(&node)).then_some(c)
    })
    .await
    .expect("control placed");

    // Reclaim: the claim's PV goes with the claim.
    pods.delete("app", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    claims
        .delete("data", &DeleteParams::default())
        .await
        .expect("delete claim");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    wait_for("the released PV to be deleted", WAIT, || async {
        volumes
            .get_opt(&volume.name_any())
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .expect("PV deleted");
    let foreign_pv = volume_name(&foreign.uid().expect("uid"));
    assert!(volumes.get_opt(&foreign_pv).await.expect("get").is_none());
    let foreign = claims.get("foreign").await.expect("claim");
    assert!(foreign.spec.and_then(|s| s.volume_name).is_none());
    let control = pods.get("control").await.expect("pod");
    assert_ne!(
        control.status.and_then(|s| s.phase).as_deref(),
        Some("Running")
    );
    eprintln!("storage test took {:?}", started.elapsed());
}

/// Waits until the claim is bound (volumeName and the binder's bind-completed annotation).
async fn wait_bound(claims: &Api<PersistentVolumeClaim>, name: &str) -> PersistentVolumeClaim {
    wait_for(&format!("claim {name} to bind"), WAIT, || async {
        let c = claims.get(name).await.ok()?;
        let bound = c.spec.as_ref()?.volume_name.is_some()
            && c.annotations()
                .contains_key("pv.kubernetes.io/bind-completed")
            && c.status.as_ref()?.phase.as_deref() == Some("Bound");
        bound.then_some(c)
    })
    .await
    .expect("claim bound")
}

async fn pv(client: &Client, claim: &PersistentVolumeClaim) -> PersistentVolume {
    let name = claim
        .spec
        .clone()
        .and_then(|s| s.volume_name)
        .expect("bound");
    Api::<PersistentVolume>::all(client.clone())
        .get(&name)
        .await
        .expect("PV")
}

/// The zones a PV's node affinity allows.
fn zone_of(pv: &PersistentVolume) -> Vec<String> {
    let affinity = pv.spec.clone().and_then(|s| s.node_affinity);
    let terms = affinity
        .and_then(|a| a.required)
        .map(|r| r.node_selector_terms);
    terms
        .into_iter()
        .flatten()
        .flat_map(|t| t.match_expressions.unwrap_or_default())
        .filter(|e| e.key == "topology.kubernetes.io/zone" && e.operator == "In")
        .flat_map(|e| e.values.unwrap_or_default())
        .collect()
}

/// A template declaring attach limits, cloned by hand into a TestMachine, and an orphan
/// Machine `m1` in zone-b referencing it (as in tests/provider.rs).
fn machine(cluster: &str) -> String {
    let spec = r#"{instanceType: test.disks, capacity: {cpu: "4", memory: 16Gi, pods: "110"}}"#;
    let annotations = r#"capacity.cluster-autoscaler.kubernetes.io/csi-driver: "ebs.csi.aws.com=25, efs.csi.aws.com=0""#;
    provider::orphan_machine_yaml(cluster, (TEMPLATE, "m1"), annotations, spec, "zone-b")
}
