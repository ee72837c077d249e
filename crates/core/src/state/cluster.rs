//! Pure: the objects of one workload cluster and their joins — each NodeClaim with its Node
//! (by providerID, else by `status.nodeName`), the unfinished pods bound to each Node with
//! what they request and limit, the Nodes leaving (being deleted, or their NodeClaim is),
//! the NodeClaims in flight and the provisionable pods. Built once per change of the caches
//! by [`super::ClusterState`], or from any set of objects (`simulate`, the disruption
//! simulations, tests). Objects are shared (`Arc`), never copied.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Deref;
use std::sync::Arc;

use api::{NodeClaim, NodePool};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use scheduling::Resources;

use crate::model::convert::{spec_limits, spec_requests};
pub use crate::model::devices::DraObjects;
use crate::objects::{
    claim_node_name, deleting, name, node_ready, nodepool_of, owned_by, pod_node_name,
    pool_condition, provisionable, terminal,
};

/// The objects a decision reads, as the caches (or files) hold them.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    /// All pods, bound and pending.
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    pub nodeclaims: Vec<Arc<NodeClaim>>,
    pub nodepools: Vec<Arc<NodePool>>,
    pub daemonsets: Vec<Arc<DaemonSet>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    pub pvcs: Vec<Arc<PersistentVolumeClaim>>,
    pub pvs: Vec<Arc<PersistentVolume>>,
    pub storageclasses: Vec<Arc<StorageClass>>,
    pub csinodes: Vec<Arc<CSINode>>,
    /// What pods' ResourceClaims allocate from.
    pub dra: DraObjects,
}

/// The unfinished pods bound to one Node, and their sums (`pods: 1` per pod included in
/// `requests` and `limits`, as the scheduling model counts it).
#[derive(Debug, Default, Clone)]
pub struct NodePods {
    pub pods: Vec<Arc<Pod>>,
    pub requests: Resources,
    pub limits: Resources,
    /// The DaemonSet pods' share.
    pub daemon_requests: Resources,
    pub daemon_limits: Resources,
}

/// The objects and their joins. Reads as its [`Objects`] (`cluster.pods`, ...).
#[derive(Debug, Default)]
pub struct Cluster {
    objects: Objects,
    /// Node name → index in `nodes`.
    node_at: HashMap<String, usize>,
    /// NodeClaim name → index in `nodeclaims`.
    claim_at: HashMap<String, usize>,
    /// Per NodeClaim (by index), the index of its Node.
    node_of_claim: Vec<Option<usize>>,
    /// Node name → index of its NodeClaim.
    claim_of_node: HashMap<String, usize>,
    /// NodePool name → its NodeClaims' indices, in name order.
    claims_of_pool: BTreeMap<String, Vec<usize>>,
    /// Node name → what is bound to it.
    bound: HashMap<String, NodePods>,
    /// Names of the Nodes being deleted or whose NodeClaim is.
    leaving: HashSet<String>,
    /// The provisionable pods (see [`crate::objects::provisionable`]).
    pending: Vec<Arc<Pod>>,
    /// The claims, volumes and classes pods' volumes resolve against.
    volumes: scheduling::volumes::Objects,
    /// Node name → what its CSINode publishes per driver.
    published: HashMap<String, BTreeMap<String, Option<u32>>>,
}

impl Deref for Cluster {
    type Target = Objects;

    fn deref(&self) -> &Objects {
        &self.objects
    }
}

/// Cordoned: `spec.unschedulable`.
fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

fn add(into: &mut Resources, r: &Resources) {
    for (k, v) in r {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

impl Cluster {
    /// Joins `objects`.
    pub fn new(objects: Objects) -> Cluster {
        let node_at: HashMap<String, usize> = objects
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (name(n.as_ref()).to_string(), i))
            .collect();
        let by_provider_id: HashMap<String, usize> = objects
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((crate::cache::node_provider_id(n)?, i)))
            .collect();
        let mut claim_at = HashMap::with_capacity(objects.nodeclaims.len());
        let mut node_of_claim = Vec::with_capacity(objects.nodeclaims.len());
        let mut claim_of_node = HashMap::new();
        let mut claims_of_pool: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut leaving = HashSet::new();
        for (i, c) in objects.nodeclaims.iter().enumerate() {
            claim_at.insert(name(c.as_ref()).to_string(), i);
            let node = crate::cache::claim_provider_id(c)
                .and_then(|p| by_provider_id.get(&p).copied())
                .or_else(|| claim_node_name(c).and_then(|n| node_at.get(n).copied()));
            node_of_claim.push(node);
            // The Node a NodeClaim names is leaving with it, cached or not.
            let node_name = node
                .map(|n| name(objects.nodes[n].as_ref()))
                .or_else(|| claim_node_name(c));
            if let Some(n) = node_name {
                claim_of_node.insert(n.to_string(), i);
                if deleting(c.as_ref()) {
                    leaving.insert(n.to_string());
                }
            }
            if let Some(p) = nodepool_of(c) {
                claims_of_pool.entry(p.to_string()).or_default().push(i);
            }
        }
        for claims in claims_of_pool.values_mut() {
            claims.sort_by_key(|i| name(objects.nodeclaims[*i].as_ref()));
        }
        leaving.extend(
            objects
                .nodes
                .iter()
                .filter(|n| deleting(n.as_ref()))
                .map(|n| name(n.as_ref()).to_string()),
        );
        let volumes = crate::model::volumes::objects(
            objects.pvcs.iter().map(AsRef::as_ref),
            objects.pvs.iter().map(AsRef::as_ref),
            objects.storageclasses.iter().map(AsRef::as_ref),
            objects.nodes.iter().map(AsRef::as_ref),
        );
        let published = objects
            .csinodes
            .iter()
            .map(|c| {
                let drivers = crate::model::volumes::published(c);
                (name(c.as_ref()).to_string(), drivers)
            })
            .collect();
        Cluster {
            volumes,
            published,
            bound: bound_pods(&objects.pods),
            pending: objects
                .pods
                .iter()
                .filter(|p| provisionable(p))
                .cloned()
                .collect(),
            objects,
            node_at,
            claim_at,
            node_of_claim,
            claim_of_node,
            claims_of_pool,
            leaving,
        }
    }

    /// The objects (shared), to build a changed cluster from.
    pub fn objects(&self) -> &Objects {
        &self.objects
    }

    /// The claims, volumes, classes and node hostnames pods' volumes resolve against.
    pub fn volumes(&self) -> &scheduling::volumes::Objects {
        &self.volumes
    }

    /// What the CSINode of `node` publishes per driver (`None`: no CSINode yet).
    pub fn published_limits(&self, node: &str) -> Option<&BTreeMap<String, Option<u32>>> {
        self.published.get(node)
    }

    pub fn node(&self, name: &str) -> Option<&Arc<Node>> {
        self.node_at.get(name).map(|i| &self.objects.nodes[*i])
    }

    pub fn nodeclaim(&self, name: &str) -> Option<&Arc<NodeClaim>> {
        self.claim_at
            .get(name)
            .map(|i| &self.objects.nodeclaims[*i])
    }

    /// The Node a NodeClaim registered as (by providerID, else by `status.nodeName`), if
    /// cached.
    pub fn node_of(&self, claim: &str) -> Option<&Arc<Node>> {
        let i = self.claim_at.get(claim)?;
        self.node_of_claim[*i].map(|n| &self.objects.nodes[n])
    }

    /// The NodeClaim of a Node (by name).
    pub fn claim_of(&self, node: &str) -> Option<&Arc<NodeClaim>> {
        self.claim_of_node
            .get(node)
            .map(|i| &self.objects.nodeclaims[*i])
    }

    /// A NodePool's NodeClaims (those being deleted included), in name order, each with
    /// its Node.
    pub(crate) fn claims_of_pool<'a>(
        &'a self,
        pool: &str,
    ) -> impl Iterator<Item = (&'a Arc<NodeClaim>, Option<&'a Arc<Node>>)> + 'a {
        self.claims_of_pool
            .get(pool)
            .into_iter()
            .flatten()
            .map(|i| {
                let node = self.node_of_claim[*i].map(|n| &self.objects.nodes[n]);
                (&self.objects.nodeclaims[*i], node)
            })
    }

    /// What is bound to a Node (by name); `None` when nothing is.
    pub fn bound(&self, node: &str) -> Option<&NodePods> {
        self.bound.get(node)
    }

    /// Whether a Node (by name) is being deleted, or its NodeClaim is: its pods are
    /// leaving, nothing new may land there.
    pub fn leaving(&self, node: &str) -> bool {
        self.leaving.contains(node)
    }

    /// Whether new pods may land on `node`: Ready, not cordoned, not leaving.
    pub(crate) fn has_room(&self, node: &Node) -> bool {
        node_ready(node) && !cordoned(node) && !self.leaving(name(node))
    }

    /// The NodeClaims in flight: not being deleted, and without a Node that has room yet
    /// (launching, registering, or their Node is not Ready). A cordoned Node is no capacity
    /// coming (someone is taking it away, e.g. Cluster API draining a Machine deleted behind
    /// our back): its pending pods are planned elsewhere at once.
    pub fn in_flight(&self) -> impl Iterator<Item = &Arc<NodeClaim>> {
        self.objects
            .nodeclaims
            .iter()
            .zip(&self.node_of_claim)
            .filter(|(c, node)| {
                !deleting(c.as_ref())
                    && !node.is_some_and(|n| {
                        let n = &self.objects.nodes[n];
                        self.has_room(n) || cordoned(n)
                    })
            })
            .map(|(c, _)| c)
    }

    /// The NodeClaims being deleted.
    pub(crate) fn deleting_claims(&self) -> impl Iterator<Item = &Arc<NodeClaim>> {
        self.objects
            .nodeclaims
            .iter()
            .filter(|c| deleting(c.as_ref()))
    }

    /// The provisionable pods.
    pub fn pending(&self) -> &[Arc<Pod>] {
        &self.pending
    }

    /// The NodePools the provisioner launches from: Ready (valid, NodeClass Ready).
    pub fn ready_nodepools(&self) -> Vec<Arc<NodePool>> {
        self.objects
            .nodepools
            .iter()
            .filter(|p| pool_condition(p, api::consts::conditions::READY))
            .cloned()
            .collect()
    }
}

/// What the unfinished pods bound to each Node add up to.
fn bound_pods(pods: &[Arc<Pod>]) -> HashMap<String, NodePods> {
    let mut out: HashMap<String, NodePods> = HashMap::new();
    for p in pods {
        let Some(node) = pod_node_name(p) else {
            continue;
        };
        if terminal(p) {
            continue;
        }
        let requests = spec_requests(p.spec.as_ref());
        let limits = spec_limits(p.spec.as_ref());
        let sums = out.entry(node.to_string()).or_default();
        add(&mut sums.requests, &requests);
        add(&mut sums.limits, &limits);
        if owned_by(p.as_ref(), &["DaemonSet"]) {
            add(&mut sums.daemon_requests, &requests);
            add(&mut sums.daemon_limits, &limits);
        }
        sums.pods.push(Arc::clone(p));
    }
    out
}
