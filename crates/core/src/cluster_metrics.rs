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
//! - `karpenter_pods_state`: one series per pod (value 1), with its node's labels and phase;
//! - `karpenter_nodes_allocatable`, `karpenter_nodes_total_pod_requests`,
//!   `_total_pod_limits`, `_total_daemon_requests`, `_total_daemon_limits`: per Node and
//!   resource (cpu in cores, the rest in bytes or counts);
//! - `karpenter_cluster_state_node_count` (Nodes and launched NodeClaims, one per
//!   providerID) and `karpenter_cluster_state_synced` (every cache holds a complete list);
//! - `karpenter_scheduler_queue_depth`: the provisionable pods waiting for the provisioner;
//! - a provider's own gauges ([`ProviderGauges`]; Cluster API: its Machines by phase).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use api::NodeClaim;
use api::consts::labels;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use scheduling::Resources;

use crate::provisioning::convert::resources;
use crate::state::{self as cluster_state, Cluster};

/// What the gauges are computed from: the cluster state, and the provider's own gauges.
pub struct Sources {
    pub state: cluster_state::ClusterState,
    /// The provider: its instance types price the NodeClaims.
    pub provider: Arc<dyn cloudprovider::CloudProvider>,
    /// The provider's own gauges of the cluster, if any.
    pub gauges: Option<Arc<dyn ProviderGauges>>,
}

/// A provider's own scrape-time gauges of one cluster (Cluster API: its Machines by phase),
/// served beside the core's, under the cluster's label in a hub.
pub trait ProviderGauges: Send + Sync {
    /// The families with their samples now (the same names on every call).
    fn families(&self) -> Vec<Family>;
}

/// One attached cluster: its sources, and the `cluster` label of its series (`None`:
/// unlabelled).
struct Attached {
    cluster: Option<Arc<str>>,
    sources: Sources,
}

/// The scrape-time collector; samples the clusters [`ClusterState::attach`]ed (by key: `""`
/// in single-cluster mode, the Cluster's `<namespace>/<name>` in hub mode).
#[derive(Clone, Default)]
pub struct ClusterState(Arc<Mutex<BTreeMap<String, Attached>>>);

impl ClusterState {
    /// Serves the gauges of the cluster `key` from `sources` from now on (replacing what
    /// `key` had), its series labelled `cluster` when given.
    pub fn attach(&self, key: &str, cluster: Option<Arc<str>>, sources: Sources) {
        self.attached()
            .insert(key.to_owned(), Attached { cluster, sources });
    }

    /// Stops serving the gauges of the cluster `key` (disengaged).
    pub fn detach(&self, key: &str) {
        self.attached().remove(key);
    }

    fn attached(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Attached>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("attached", &self.attached().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Collector for ClusterState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut out = families(None);
        for (i, a) in self.attached().values().enumerate() {
            let cluster = a.sources.state.current();
            let provider = &a.sources.provider;
            let view = View {
                cluster: &cluster,
                catalog: &|nodeclass| provider.instance_types(nodeclass),
                synced: a.sources.state.synced(),
            };
            // Unlabelled series of a second cluster may repeat a label set: merged.
            let merge = i > 0 && a.cluster.is_none();
            for (into, from) in out.iter_mut().zip(families(Some(&view))) {
                add(into, from.samples, a.cluster.as_deref(), merge);
            }
            for from in a.sources.gauges.iter().flat_map(|g| g.families()) {
                let at = match out.iter().position(|f| f.name == from.name) {
                    Some(at) => at,
                    None => {
                        out.push(Family {
                            samples: Vec::new(),
                            ..from
                        });
                        out.len() - 1
                    }
                };
                add(&mut out[at], from.samples, a.cluster.as_deref(), merge);
            }
        }
        for f in &out {
            let mut metric = encoder.encode_descriptor(f.name, f.help, None, MetricType::Gauge)?;
            for (labels, value) in &f.samples {
                metric.encode_family(labels)?.encode_gauge(value)?;
            }
        }
        Ok(())
    }
}

/// Adds one cluster's `samples` to `into`, labelled `cluster` first when given; with
/// `merge`, a label set already there takes the sum (the lowest for `synced`).
fn add(into: &mut Family, samples: Vec<(Labels, f64)>, cluster: Option<&str>, merge: bool) {
    let mut at: HashMap<Labels, usize> = if merge {
        into.samples
            .iter()
            .enumerate()
            .map(|(i, (l, _))| (l.clone(), i))
            .collect()
    } else {
        HashMap::new()
    };
    for (mut labels, v) in samples {
        if let Some(c) = cluster {
            labels.insert(0, ("cluster", c.to_owned()));
        }
        match at.get(&labels) {
            Some(&i) => {
                let have = &mut into.samples[i].1;
                *have = if into.name == SYNCED {
                    have.min(v)
                } else {
                    *have + v
                };
            }
            None => {
                if merge {
                    at.insert(labels.clone(), into.samples.len());
                }
                into.samples.push((labels, v));
            }
        }
    }
}

/// What the gauges are computed from.
pub(crate) struct View<'a> {
    pub cluster: &'a Cluster,
    /// A NodeClass's instance types (the provider's).
    pub catalog: &'a Catalogs<'a>,
    pub synced: bool,
}

/// A sample's labels, in order.
pub type Labels = Vec<(&'static str, String)>;

/// A NodeClass's instance types, by NodeClass name.
pub(crate) type Catalogs<'a> = dyn Fn(&str) -> Option<Arc<cloudprovider::InstanceTypes>> + 'a;

/// One gauge family and its samples.
/// One gauge family of a scrape.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub samples: Vec<(Labels, f64)>,
}

const PODS_STATE: &str = "karpenter_pods_state";
const SYNCED: &str = "karpenter_cluster_state_synced";
const NODE_FAMILIES: [(&str, &str); 5] = [
    (
        "karpenter_nodes_allocatable",
        "Node allocatable are the resources allocatable by nodes.",
    ),
    (
        "karpenter_nodes_total_pod_requests",
        "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
    ),
    (
        "karpenter_nodes_total_pod_limits",
        "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
    ),
    (
        "karpenter_nodes_total_daemon_requests",
        "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
    ),
    (
        "karpenter_nodes_total_daemon_limits",
        "Node total daemon limits are the resources specified by DaemonSet pod limits.",
    ),
];

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
    let family = |name, help| Family {
        name,
        help,
        samples: Vec::new(),
    };
    let mut pods_state = family(
        PODS_STATE,
        "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type and pod phase.",
    );
    let mut node_families: Vec<Family> = NODE_FAMILIES
        .iter()
        .map(|(name, help)| family(name, help))
        .collect();
    let mut node_count = family(
        "karpenter_cluster_state_node_count",
        "Current count of nodes in cluster state",
    );
    let mut synced = family(
        SYNCED,
        "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
    );
    let mut queue = family(
        "karpenter_scheduler_queue_depth",
        "The number of pods currently waiting to be scheduled.",
    );
    let mut cost = family(
        "karpenter_nodepools_cost_total",
        "Total cost of the nodepool from Karpenter's perspective: the hourly price of the offering each of its NodeClaims was launched on (NodeOverlay prices included). Not an authoritative source for billing.",
    );
    if let Some(v) = view {
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
    let mut out = vec![pods_state];
    out.extend(node_families);
    out.extend([node_count, synced, queue, cost]);
    out
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
/// its node and that node's nodepool, zone, arch, capacity type and instance type, and
/// its phase.
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
            "spec": {"containers": [{"name": "c"}]},
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

        let state = samples(&fs, PODS_STATE);
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
        let pending = &state[3].0;
        assert_eq!(get(pending, "node"), "");
        assert_eq!(get(pending, "phase"), "Pending");

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
        let template = templates::model::TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
            kind: "DockerMachineTemplate".into(),
            namespace: Some("ns".into()),
            name: "small".into(),
        };
        let offering = |zone: &str, price: f64| {
            templates::model::offering(
                &template,
                Some(zone.into()),
                "on-demand",
                price,
                templates::model::PriceSource::Annotation,
            )
        };
        let catalog = Arc::new(cloudprovider::InstanceTypes {
            instance_types: vec![templates::model::InstanceType {
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
        registry.register_collector(Box::new(ClusterState::default()));
        let text = crate::metrics::encode(&registry).expect("encodes");
        assert!(text.contains("# TYPE karpenter_pods_state gauge"), "{text}");
        assert!(
            text.contains("# TYPE karpenter_cluster_state_synced gauge"),
            "{text}"
        );
    }

    #[test]
    fn clusters_are_labelled_or_merged() {
        let sample = |pool: &str, v: f64| (vec![("nodepool", pool.to_string())], v);
        let of = |name: &str| {
            families(None)
                .into_iter()
                .find(|f| f.name == name)
                .expect(name)
        };
        let mut cost = of("karpenter_nodepools_cost_total");
        // Hub with the label: each cluster's series apart, the label first.
        add(&mut cost, vec![sample("a", 1.0)], Some("ns/one"), false);
        add(&mut cost, vec![sample("a", 2.0)], Some("ns/two"), false);
        assert_eq!(
            cost.samples,
            vec![
                (
                    vec![("cluster", "ns/one".into()), ("nodepool", "a".into())],
                    1.0
                ),
                (
                    vec![("cluster", "ns/two".into()), ("nodepool", "a".into())],
                    2.0
                ),
            ]
        );
        // Without it: one series per label set, summed.
        let mut cost = of("karpenter_nodepools_cost_total");
        add(
            &mut cost,
            vec![sample("a", 1.0), sample("b", 4.0)],
            None,
            false,
        );
        add(&mut cost, vec![sample("a", 2.0)], None, true);
        assert_eq!(cost.samples, vec![sample("a", 3.0), sample("b", 4.0)]);
        // `synced` takes the lowest: one cluster not synced is not synced.
        let mut synced = of(SYNCED);
        add(&mut synced, vec![(Vec::new(), 1.0)], None, false);
        add(&mut synced, vec![(Vec::new(), 0.0)], None, true);
        assert_eq!(synced.samples, vec![(Vec::new(), 0.0)]);
    }
}
