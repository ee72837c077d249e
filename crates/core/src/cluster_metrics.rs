//! The gauges Karpenter's dashboards read, computed from the shared caches when `/metrics`
//! is scraped: no API call and nothing kept between scrapes, so the series of a deleted pod
//! or Node is gone at the next scrape. In single-cluster mode they are attached on the leader
//! only (Karpenter's metric controllers run on the leader too), so a dashboard summing over
//! replicas counts each pod and Node once; a standby replica serves the descriptions without
//! samples. In hub mode every engagement attaches its cluster's, each series labelled
//! `cluster="<namespace>/<name>"` first (with `--metrics-cluster-label=false`, the clusters'
//! samples of one label set are summed, `karpenter_cluster_state_synced` takes the lowest),
//! and a disengaged cluster's are gone at the next scrape.
//!
//! - `karpenter_pods_state`: one series per pod (value 1), with its node's labels, its phase
//!   and whether it claims devices (`dynamic_resources`);
//! - `karpenter_nodes_allocatable`, `karpenter_nodes_total_pod_requests`,
//!   `_total_pod_limits`, `_total_daemon_requests`, `_total_daemon_limits`: per Node and
//!   resource (cpu in cores, the rest in bytes or counts);
//! - `karpenter_cluster_state_node_count` (Nodes and launched NodeClaims, one per
//!   providerID) and `karpenter_cluster_state_synced` (every cache holds a complete list);
//! - `karpenter_scheduler_queue_depth`: the provisionable pods waiting for the provisioner;
//! - a provider's own gauges ([`Gauges`]; Cluster API: its Machines by phase).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use api::NodeClaim;
use api::consts::labels;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use scheduling::Resources;

use crate::metrics::gauges::{Family, Gauges, Labels, declared};
use crate::model::convert::resources;
use crate::state::{self as cluster_state, Cluster};

/// What the gauges are computed from.
pub(crate) struct View<'a> {
    pub cluster: &'a Cluster,
    /// A NodeClass's instance types (the provider's).
    pub catalog: &'a Catalogs<'a>,
    pub synced: bool,
}

/// A NodeClass's instance types, by NodeClass name.
pub(crate) type Catalogs<'a> = dyn Fn(&str) -> Option<Arc<cloudprovider::InstanceTypes>> + 'a;

/// Node labels Karpenter copies into its node metrics, by their metric label name.
const NODE_LABELS: [(&str, &str); 8] = [
    ("nodepool", labels::NODEPOOL),
    ("zone", labels::ZONE),
    ("region", labels::REGION),
    ("instance_type", labels::INSTANCE_TYPE),
    ("arch", labels::ARCH),
    ("os", labels::OS),
    ("capacity_type", labels::CAPACITY_TYPE),
    ("windows_build", labels::WINDOWS_BUILD),
];

/// Every family with its samples (`None`: the descriptions only).
pub(crate) fn families(view: Option<&View>) -> Vec<Family> {
    let mut out = declared();
    if let Some(v) = view {
        let [
            pods_state,
            node_families @ ..,
            node_count,
            synced,
            queue,
            cost,
        ] = &mut out[..]
        else {
            return out;
        };
        let c = v.cluster;
        pods_state.samples = c
            .pods
            .iter()
            .map(|p| (pod_labels(p, c.node(node_name(p)).map(|n| n.as_ref())), 1.0))
            .collect();
        for node in &c.nodes {
            let node_name = node.metadata.name.as_deref().unwrap_or_default();
            // Managed: a NodeClaim of ours has this Node's providerID.
            let is_managed = crate::cache::node_provider_id(node).is_some_and(|pid| {
                c.claim_of(node_name)
                    .is_some_and(|claim| provider_id(claim) == Some(pid.as_str()))
            });
            let base = node_labels(node, is_managed);
            let allocatable = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .map(resources)
                .unwrap_or_default();
            let sums = c.bound(node_name);
            // The model counts the pod itself (`pods: 1`); Karpenter's node sums do not.
            let pod_sums = |pick: fn(&crate::state::NodePods) -> &Resources| -> Resources {
                sums.map(pick)
                    .into_iter()
                    .flatten()
                    .filter(|(r, _)| r.as_str() != scheduling::PODS)
                    .map(|(r, n)| (r.clone(), *n))
                    .collect()
            };
            let amounts = [
                allocatable,
                pod_sums(|b| &b.requests),
                pod_sums(|b| &b.limits),
                pod_sums(|b| &b.daemon_requests),
                pod_sums(|b| &b.daemon_limits),
            ];
            for (f, amounts) in node_families.iter_mut().zip(&amounts) {
                for (resource, amount) in amounts {
                    let mut labels = base.clone();
                    labels.push(("resource_type", resource_type(resource)));
                    f.samples.push((labels, value(resource, *amount)));
                }
            }
        }
        node_count.samples = vec![(Vec::new(), state_node_count(v) as f64)];
        synced.samples = vec![(Vec::new(), if v.synced { 1.0 } else { 0.0 })];
        let waiting = c.pending().len();
        queue.samples = vec![(
            vec![("controller", "provisioner".to_string())],
            waiting as f64,
        )];
        cost.samples = pool_costs(c, v.catalog);
    }
    out
}

/// The core's gauges of one cluster: from its cluster state, priced by its provider.
pub(crate) struct CoreGauges {
    pub state: cluster_state::ClusterState,
    /// The provider: its instance types price the NodeClaims.
    pub provider: Arc<dyn cloudprovider::CloudProvider>,
}

impl Gauges for CoreGauges {
    fn families(&self) -> Vec<Family> {
        let cluster = self.state.current();
        let provider = &self.provider;
        families(Some(&View {
            cluster: &cluster,
            catalog: &|nodeclass| provider.instance_types(nodeclass),
            synced: self.state.synced(),
        }))
    }
}

/// Per NodePool, the summed hourly price of its NodeClaims not being deleted (the price of
/// the offering their labels name in the provider's instance types; a claim whose offering
/// is not chosen yet, or no longer offered, costs nothing), every NodePool listed (0
/// without claims).
fn pool_costs(c: &Cluster, catalog: &Catalogs<'_>) -> Vec<(Labels, f64)> {
    let mut costs: BTreeMap<String, f64> =
        c.nodepools.iter().map(|p| (p.name_any(), 0.0)).collect();
    for claim in c
        .nodeclaims
        .iter()
        .filter(|x| x.metadata.deletion_timestamp.is_none())
    {
        let labels = claim.labels();
        let label = |k: &str| labels.get(k).map(String::as_str);
        let price = (|| {
            let (it, ct) = (
                label(scheduling::LABEL_INSTANCE_TYPE)?,
                label(scheduling::LABEL_CAPACITY_TYPE)?,
            );
            catalog(&claim.spec.node_class_ref.name)?.price_of(
                it,
                ct,
                label(scheduling::LABEL_ZONE),
            )
        })();
        let Some(price) = price else {
            continue;
        };
        *costs
            .entry(crate::nodeclaim::labels::nodepool_of(claim))
            .or_default() += price;
    }
    costs
        .into_iter()
        .map(|(pool, price)| (vec![("nodepool", pool)], price))
        .collect()
}

fn node_name(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

fn provider_id(c: &NodeClaim) -> Option<&str> {
    c.status
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
}

fn label(obj: Option<&Node>, key: &str) -> String {
    obj.and_then(|n| n.labels().get(key).cloned())
        .unwrap_or_default()
}

/// Karpenter's `karpenter_pods_state` labels: the pod, its first owner (as a self link),
/// its node and that node's nodepool, zone, arch, capacity type and instance type, its
/// phase, and `dynamic_resources`: `"true"` when it references ResourceClaims
/// (`spec.resourceClaims`, named or from a template), as Karpenter's pod metrics say.
fn pod_labels(p: &Pod, node: Option<&Node>) -> Labels {
    let namespace = p.namespace().unwrap_or_default();
    let owner = p
        .owner_references()
        .first()
        .map(|o| {
            format!(
                "/apis/{}/namespaces/{namespace}/{}s/{}",
                o.api_version,
                o.kind.to_lowercase(),
                o.name
            )
        })
        .unwrap_or_default();
    vec![
        ("name", p.name_any()),
        ("namespace", namespace.clone()),
        ("owner", owner),
        ("node", node_name(p).to_string()),
        ("nodepool", label(node, labels::NODEPOOL)),
        ("zone", label(node, labels::ZONE)),
        ("arch", label(node, labels::ARCH)),
        ("capacity_type", label(node, labels::CAPACITY_TYPE)),
        ("instance_type", label(node, labels::INSTANCE_TYPE)),
        (
            "phase",
            p.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
        ),
        (
            "dynamic_resources",
            crate::model::devices::claims_devices(p).to_string(),
        ),
    ]
}

/// Karpenter's node metric labels (without `resource_type`).
fn node_labels(node: &Node, managed: bool) -> Labels {
    let mut out: Labels = vec![("node_name", node.name_any())];
    out.extend(
        NODE_LABELS
            .iter()
            .map(|(name, key)| (*name, label(Some(node), key))),
    );
    out.push((
        "phase",
        node.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
    ));
    out.push(("managed", managed.to_string()));
    out
}

/// Karpenter's `resource_type`: the resource name, lower case, `-` as `_`.
fn resource_type(resource: &str) -> String {
    resource.to_lowercase().replace('-', "_")
}

/// cpu in cores (the model counts millicores), everything else as counted.
fn value(resource: &str, amount: i64) -> f64 {
    if resource == scheduling::CPU {
        amount as f64 / 1000.0
    } else {
        amount as f64
    }
}

/// Nodes in the cluster state as Karpenter counts them: one per providerID among the Nodes
/// and the launched NodeClaims, plus the Nodes without a providerID.
fn state_node_count(v: &View) -> usize {
    let mut ids: HashSet<String> = HashSet::new();
    let mut without = 0;
    for n in &v.cluster.nodes {
        match crate::cache::node_provider_id(n) {
            Some(p) => {
                ids.insert(p);
            }
            None => without += 1,
        }
    }
    ids.extend(
        v.cluster
            .nodeclaims
            .iter()
            .filter_map(|c| provider_id(c).map(str::to_string)),
    );
    ids.len() + without
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("fixture"))
    }

    fn samples<'a>(fs: &'a [Family], name: &str) -> &'a [(Labels, f64)] {
        &fs.iter().find(|f| f.name == name).expect(name).samples
    }

    fn get(labels: &Labels, key: &str) -> String {
        labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no label {key} in {labels:?}"))
    }

    #[test]
    fn gauges_follow_the_caches() {
        let node = obj::<Node>(json!({
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default",
                "topology.kubernetes.io/zone": "zone-a", "kubernetes.io/arch": "amd64",
                "karpenter.sh/capacity-type": "on-demand", "node.kubernetes.io/instance-type": "small"}},
            "spec": {"providerID": "test://n1"},
            "status": {"allocatable": {"cpu": "1900m", "memory": "3Gi", "pods": "110"}}
        }));
        let other = obj::<Node>(json!({"metadata": {"name": "static"}}));
        let web = obj::<Pod>(json!({
            "metadata": {"name": "web-1", "namespace": "d", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
            "status": {"phase": "Running"}
        }));
        let daemon = obj::<Pod>(json!({
            "metadata": {"name": "ds-1", "namespace": "kube-system", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running"}
        }));
        let done = obj::<Pod>(json!({
            "metadata": {"name": "job-1", "namespace": "d"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "4"}}}]},
            "status": {"phase": "Succeeded"}
        }));
        let pending = obj::<Pod>(json!({
            "metadata": {"name": "web-2", "namespace": "d"},
            "spec": {"containers": [{"name": "c"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }));
        let launched = obj::<NodeClaim>(json!({
            "metadata": {"name": "default-a"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": []},
            "status": {"providerID": "test://n1"}
        }));
        let in_flight = obj::<NodeClaim>(json!({
            "metadata": {"name": "default-b"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": []},
            "status": {"providerID": "test://n2"}
        }));
        let pods = [web, daemon, done, pending];
        let nodes = [node, other];
        let claims = [launched, in_flight];
        let cluster = Cluster::new(cluster_state::Objects {
            pods: pods.to_vec(),
            nodes: nodes.to_vec(),
            nodeclaims: claims.to_vec(),
            ..Default::default()
        });
        let fs = families(Some(&View {
            cluster: &cluster,
            catalog: &|_| None,
            synced: true,
        }));

        let state = samples(&fs, crate::metrics::gauges::PODS_STATE);
        assert_eq!(state.len(), 4, "one series per pod");
        let web = &state[0].0;
        assert_eq!(
            get(web, "owner"),
            "/apis/apps/v1/namespaces/d/replicasets/web"
        );
        assert_eq!(get(web, "nodepool"), "default");
        assert_eq!(get(web, "zone"), "zone-a");
        assert_eq!(get(web, "instance_type"), "small");
        assert_eq!(get(web, "phase"), "Running");
        assert_eq!(get(web, "dynamic_resources"), "false");
        let pending = &state[3].0;
        assert_eq!(get(pending, "node"), "");
        assert_eq!(get(pending, "phase"), "Pending");
        assert_eq!(
            get(pending, "dynamic_resources"),
            "true",
            "it claims devices"
        );

        let on_n1 = |name: &str, resource: &str| -> Option<f64> {
            samples(&fs, name)
                .iter()
                .find(|(l, _)| get(l, "node_name") == "n1" && get(l, "resource_type") == resource)
                .map(|(_, v)| *v)
        };
        assert_eq!(on_n1("karpenter_nodes_allocatable", "cpu"), Some(1.9));
        assert_eq!(
            on_n1("karpenter_nodes_allocatable", "memory"),
            Some(3.0 * 1024.0 * 1024.0 * 1024.0)
        );
        assert_eq!(on_n1("karpenter_nodes_allocatable", "pods"), Some(110.0));
        // web + daemon; the finished job does not count, nor the pods themselves.
        assert_eq!(
            on_n1("karpenter_nodes_total_pod_requests", "cpu"),
            Some(0.6)
        );
        assert_eq!(on_n1("karpenter_nodes_total_pod_requests", "pods"), None);
        assert_eq!(
            on_n1("karpenter_nodes_total_daemon_requests", "cpu"),
            Some(0.1)
        );
        assert_eq!(
            on_n1("karpenter_nodes_total_pod_limits", "memory"),
            Some(2.0 * 1024.0 * 1024.0 * 1024.0)
        );
        let n1 = &samples(&fs, "karpenter_nodes_allocatable")[0].0;
        assert_eq!(get(n1, "managed"), "true");
        assert_eq!(get(n1, "capacity_type"), "on-demand");
        assert!(
            samples(&fs, "karpenter_nodes_allocatable")
                .iter()
                .all(|(l, _)| get(l, "node_name") == "n1"),
            "a Node without allocatable has no allocatable series"
        );

        // n1 (node and claim share the providerID), the in-flight claim, the static node.
        assert_eq!(samples(&fs, "karpenter_cluster_state_node_count")[0].1, 3.0);
        assert_eq!(samples(&fs, "karpenter_cluster_state_synced")[0].1, 1.0);
        assert_eq!(samples(&fs, "karpenter_scheduler_queue_depth")[0].1, 1.0);
    }

    #[test]
    fn a_pool_costs_the_price_of_the_offerings_its_claims_are_labelled_with() {
        let offering = |zone: &str, price: f64| {
            cloudprovider::Offering::new(
                "t",
                Some(zone),
                "on-demand",
                price,
                cloudprovider::PriceSource::Annotation,
            )
        };
        let catalog = Arc::new(cloudprovider::InstanceTypes {
            instance_types: vec![cloudprovider::InstanceType {
                devices: None,
                volume_limits: Default::default(),
                name: "small".into(),
                capacity: Default::default(),
                allocatable: Default::default(),
                labels: Default::default(),
                taints: Vec::new(),
                offerings: vec![offering("z1", 0.25), offering("z2", 0.5)],
                capacity_overlaid: false,
            }],
            ..Default::default()
        });
        let claim = |name: &str, labels: serde_json::Value| {
            obj::<NodeClaim>(json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": []}
            }))
        };
        let on = |zone: &str| {
            json!({"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "small",
                   "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": zone})
        };
        let cluster = Cluster::new(cluster_state::Objects {
            nodeclaims: vec![
                claim("a", on("z2")),
                // Not launched yet: no offering chosen, costs nothing.
                claim("b", json!({"karpenter.sh/nodepool": "default"})),
            ],
            nodepools: vec![obj(json!({"metadata": {"name": "default"},
                "spec": {"template": {"spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"},
                         "requirements": []}}}}))],
            ..Default::default()
        });
        let fs = families(Some(&View {
            cluster: &cluster,
            catalog: &|nc| (nc == "n").then(|| Arc::clone(&catalog)),
            synced: true,
        }));
        let cost = samples(&fs, "karpenter_nodepools_cost_total");
        assert_eq!(cost, [(vec![("nodepool", "default".to_string())], 0.5)]);
    }

    #[test]
    fn unattached_serves_descriptions_only() {
        let fs = families(None);
        assert!(fs.iter().all(|f| f.samples.is_empty()));
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(crate::metrics::ClusterGauges::default()));
        let text = crate::metrics::encode(&registry).expect("encodes");
        assert!(text.contains("# TYPE karpenter_pods_state gauge"), "{text}");
        assert!(
            text.contains("# TYPE karpenter_cluster_state_synced gauge"),
            "{text}"
        );
    }
}
