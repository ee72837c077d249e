//! Hub mode set-up shared by `tests/hub.rs` and `tests/hub_scale.rs`: a tenant's fixtures
//! in the management cluster, its NodeClass, opting a Cluster in, pending pods, the hub
//! operator's configuration.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use testbed::Testbed;
use testbed::provider::{self, ClusterSetup};

use super::{from_json, nodeclasses};

/// The bootstrap data Secret and an opted-in template in `ns` (management side).
pub async fn tenant_fixtures(mgmt: &Testbed, ns: &str) {
    mgmt.apply_yaml(
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap-data"},
                "stringData": {"value": "nodeTaints:\n- {key: karpenter.sh/unregistered, effect: NoExecute}\n"}})
        .to_string(),
        ns,
    )
    .await
    .expect("bootstrap secret");
    mgmt.apply_yaml(
        &json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
                "metadata": {"name": "small", "labels": {"node.cluster.x-k8s.io/karpenter-member": ""}},
                "spec": {"template": {"spec": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}}})
        .to_string(),
        ns,
    )
    .await
    .expect("template");
    let templates: Api<DynamicObject> = Api::namespaced_with(
        mgmt.client(),
        ns,
        &provider::test_machine_template_resource(),
    );
    templates
        .patch_status(
            "small",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"cpu": "2", "memory": "4Gi"}}})),
        )
        .await
        .expect("template status");
}

/// A Cluster `name` for the workload testbed `tb` in a fresh namespace of `mgmt`, with the
/// tenant's fixtures; returns the namespace.
pub async fn tenant(mgmt: &Testbed, name: &str, tb: &Testbed) -> String {
    let ns = mgmt.temp_namespace().await.expect("namespace");
    provider::create_cluster(
        &mgmt.client(),
        &ClusterSetup::new(&ns, name, tb.kubeconfig()),
    )
    .await
    .expect("cluster");
    tenant_fixtures(mgmt, &ns).await;
    ns
}

/// Labels Cluster `ns/name` `karpenter.cluster.x-k8s.io/enabled: "true"`.
pub async fn opt_in(m: &Client, ns: &str, name: &str) {
    Api::<DynamicObject>::namespaced_with(m.clone(), ns, &provider::cluster_resource())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"karpenter.cluster.x-k8s.io/enabled": "true"}}}),
            ),
        )
        .await
        .expect("opt in");
}

/// ClusterAPINodeClass `name` in a workload cluster, for Cluster `ns/cluster`.
pub async fn create_nodeclass(client: &Client, name: &str, ns: &str, cluster: &str) {
    nodeclasses(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
                "metadata": {"name": name},
                "spec": {"clusterRef": {"namespace": ns, "name": cluster},
                         "bootstrap": {"dataSecretName": "bootstrap-data"}}
            })),
        )
        .await
        .expect("nodeclass");
}

/// Pods `<prefix>-0`..`<prefix>-<n-1>` requesting `cpu` in the workload cluster's default
/// namespace (bare pods: the workload testbeds run no controller-manager), applied 32 at a
/// time.
pub async fn pending_pods(client: &Client, prefix: &str, n: usize, cpu: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            let name = format!("{prefix}-{i}");
            let pod: Pod = from_json(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": prefix}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
                         "terminationGracePeriodSeconds": 0}
            }));
            async move {
                pods.patch(
                    &name,
                    &PatchParams::apply("hub-test").force(),
                    &Patch::Apply(&pod),
                )
                .await
                .expect("pod");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Waits until NodeClass `name` of a workload cluster is Ready (its engagement runs).
pub async fn nodeclass_ready(client: &Client, name: &str) {
    testbed::wait_for(
        &format!("NodeClass {name} Ready"),
        Duration::from_secs(120),
        || async {
            let nc = nodeclasses(client).get(name).await.ok()?;
            (super::condition(&nc, "Ready").as_deref() == Some("True")).then_some(())
        },
    )
    .await
    .expect("the engaged cluster's NodeClass turns Ready");
}

/// The hub-mode operator's configuration against `mgmt`, metrics on `metrics_addr`: every
/// engaged cluster probed and the Clusters resynced each second.
pub fn hub_run_config(mgmt: &Testbed, metrics_addr: std::net::SocketAddr) -> operator::RunConfig {
    operator::RunConfig {
        management_kubeconfig: Some(mgmt.kubeconfig().to_path_buf()),
        metrics_addr,
        health_addr: super::free_addr(),
        hub: Some(clusterapi::hub::HubConfig {
            probe_interval: Duration::from_secs(1),
            resync: Duration::from_secs(1),
            ..Default::default()
        }),
        ..Default::default()
    }
}
