//! The scrape-time gauges of engaged clusters ([`ClusterGauges`]): each engagement attaches
//! its sources ([`Gauges`]: the core's cluster state, a provider's own), computed when
//! `/metrics` is scraped. In single-cluster mode they are attached on the leader only; a
//! standby replica serves the core's descriptions without samples. In hub mode every
//! engagement attaches its cluster's, each series labelled `cluster="<namespace>/<name>"`
//! first (unlabelled, the clusters' samples of one label set are summed,
//! `karpenter_cluster_state_synced` takes the lowest).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

/// A sample's labels, in order.
pub type Labels = Vec<(&'static str, String)>;

/// One gauge family of a scrape.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub samples: Vec<(Labels, f64)>,
}

impl Family {
    /// The family `name` without samples.
    pub fn declared(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }
}

/// Scrape-time gauges of one cluster.
pub trait Gauges: Send + Sync {
    /// The families with their samples now (the same names on every call).
    fn families(&self) -> Vec<Family>;
}

pub(crate) const PODS_STATE: &str = "karpenter_pods_state";
pub(crate) const SYNCED: &str = "karpenter_cluster_state_synced";
pub(crate) const NODE_FAMILIES: [(&str, &str); 5] = [
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

pub(crate) const NODE_COUNT: &str = "karpenter_cluster_state_node_count";
pub(crate) const QUEUE_DEPTH: &str = "karpenter_scheduler_queue_depth";
pub(crate) const NODEPOOLS_COST: &str = "karpenter_nodepools_cost_total";

/// The core's cluster gauges, described, in the order they are served.
pub fn declared() -> Vec<Family> {
    let mut out = vec![Family::declared(
        PODS_STATE,
        "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type, pod phase and whether it claims devices (dynamic_resources).",
    )];
    out.extend(
        NODE_FAMILIES
            .iter()
            .map(|(name, help)| Family::declared(name, help)),
    );
    out.extend([
        Family::declared(NODE_COUNT, "Current count of nodes in cluster state"),
        Family::declared(
            SYNCED,
            "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
        ),
        Family::declared(
            QUEUE_DEPTH,
            "The number of pods currently waiting to be scheduled.",
        ),
        Family::declared(
            NODEPOOLS_COST,
            "Total cost of the nodepool from Karpenter's perspective: the hourly price of the offering each of its NodeClaims was launched on (NodeOverlay prices included). Not an authoritative source for billing.",
        ),
    ]);
    out
}

/// One attached cluster: its sources, and the `cluster` label of its series (`None`:
/// unlabelled).
struct Attached {
    cluster: Option<Arc<str>>,
    sources: Vec<Arc<dyn Gauges>>,
}

/// The scrape-time collector; samples the clusters [`ClusterGauges::attach`]ed (by key:
/// `""` in single-cluster mode, the Cluster's `<namespace>/<name>` in hub mode).
#[derive(Clone, Default)]
pub struct ClusterGauges(Arc<Mutex<BTreeMap<String, Attached>>>);

impl ClusterGauges {
    /// Serves the gauges of the cluster `key` from `sources` from now on (replacing what
    /// `key` had), its series labelled `cluster` when given.
    pub fn attach(&self, key: &str, cluster: Option<Arc<str>>, sources: Vec<Arc<dyn Gauges>>) {
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

impl std::fmt::Debug for ClusterGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterGauges")
            .field("attached", &self.attached().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Collector for ClusterGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let mut out = declared();
        for (i, a) in self.attached().values().enumerate() {
            // Unlabelled series of a second cluster may repeat a label set: merged.
            let merge = i > 0 && a.cluster.is_none();
            for from in a.sources.iter().flat_map(|g| g.families()) {
                let at = match out.iter().position(|f| f.name == from.name) {
                    Some(at) => at,
                    None => {
                        out.push(Family::declared(from.name, from.help));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_are_labelled_or_merged() {
        let sample = |pool: &str, v: f64| (vec![("nodepool", pool.to_string())], v);
        let of = |name: &str| declared().into_iter().find(|f| f.name == name).expect(name);
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
