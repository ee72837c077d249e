//! The kwok provider: [`CloudProvider`] over Nodes. `create` makes the NodeClaim's Node
//! itself (kwok has no kubelet to register one) and kwok makes it Ready; `get`, `list` and
//! `delete` read and delete Nodes, only those this provider made (the
//! `karpenter.kwok.sh/nodeclaim` label and a `kwok://` providerID); the instance types come
//! from Karpenter kwok's instance-type file.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::NodeClaim;
use cloudprovider::InstanceTypes;
use cloudprovider::{
    CloudProvider, Created, Deletion, Drift, Error, Instance, Intent, NodeClassKind, RepairAction,
    RepairPolicy, Retry,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use karpenter_core::write::{Created as Written, Outcome, Writer, manager};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use crate::instance_types::InstanceType;
use crate::nodeclass::{self, KWOKNodeClass};
use crate::{labels, node};

/// Karpenter kwok's repair policies: the kubelet's Ready condition False or Unknown for 10
/// minutes, and two conditions a test sets on a Node: `KWOKUnhealthy` (replaced after 30 s,
/// 45 s to drain) and `KWOKRebootRequired` (rebooted after 30 s, 1 min to drain).
pub(crate) fn repair_policies() -> Vec<RepairPolicy> {
    let mut policies = RepairPolicy::node_not_ready(Duration::from_secs(600));
    policies.push(RepairPolicy {
        termination_grace_period: Some(Duration::from_secs(45)),
        ..RepairPolicy::replace("KWOKUnhealthy", "True", Duration::from_secs(30))
    });
    policies.push(RepairPolicy {
        termination_grace_period: Some(Duration::from_secs(60)),
        action: RepairAction::RebootNode,
        ..RepairPolicy::replace("KWOKRebootRequired", "True", Duration::from_secs(30))
    });
    policies
}

/// The kwok provider of one cluster.
pub struct KwokCloudProvider {
    client: Client,
    types: Arc<Vec<InstanceType>>,
    /// The catalog of each NodeClass asked for (the same instance types for every one).
    catalogs: Mutex<BTreeMap<String, Arc<InstanceTypes>>>,
    /// The engagement's caches of Nodes and KWOKNodeClasses, read first (`None`: the API
    /// server only).
    stores: Option<(Store<Node>, Store<KWOKNodeClass>)>,
}

fn api_error(e: kube::Error) -> Error {
    Error::retryable(Retry::Api, e)
}

impl KwokCloudProvider {
    /// A provider making Nodes through `client` of `types` (see
    /// [`crate::instance_types::read_file`]).
    pub fn new(client: Client, types: Vec<InstanceType>) -> Self {
        KwokCloudProvider {
            client,
            types: Arc::new(types),
            catalogs: Mutex::new(BTreeMap::new()),
            stores: None,
        }
    }

    /// Reads Nodes and KWOKNodeClasses from these caches first; what a cache does not hold
    /// (yet) is read from the API server, so a Node just made is never taken for gone.
    pub fn reading(self, nodes: Store<Node>, nodeclasses: Store<KWOKNodeClass>) -> Self {
        KwokCloudProvider {
            stores: Some((nodes, nodeclasses)),
            ..self
        }
    }

    /// Node `name`: from the cache, else from the API server.
    async fn node(&self, name: &str) -> Result<Option<Node>, Error> {
        if let Some(n) = self
            .stores
            .as_ref()
            .and_then(|(nodes, _)| nodes.get(&ObjectRef::new(name)))
        {
            return Ok(Some(n.as_ref().clone()));
        }
        self.nodes().get_opt(name).await.map_err(api_error)
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// The Node of `claim` if this provider made it for that claim (`None`: no such Node, or
    /// another's).
    async fn node_of(&self, claim: &NodeClaim) -> Result<Option<Node>, Error> {
        let found = self.node(&node::node_name(claim)).await?;
        Ok(found.filter(|n| node::ours_for(n, claim)))
    }

    /// The claim's KWOKNodeClass, Ready (missing: InsufficientCapacity, as in Karpenter kwok).
    async fn nodeclass(&self, claim: &NodeClaim) -> Result<KWOKNodeClass, Error> {
        let r = &claim.spec.node_class_ref;
        if r.group != nodeclass::GROUP || r.kind != nodeclass::KIND {
            return Err(Error::NodeClassNotReady(format!(
                "nodeClassRef {}/{} {} is not a {}/{}",
                r.group,
                r.kind,
                r.name,
                nodeclass::GROUP,
                nodeclass::KIND
            )));
        }
        let cached = self
            .stores
            .as_ref()
            .and_then(|(_, ncs)| ncs.get(&ObjectRef::new(&r.name)))
            .map(|nc| nc.as_ref().clone());
        let found = match cached {
            Some(nc) => Some(nc),
            None => {
                let api: Api<KWOKNodeClass> = Api::all(self.client.clone());
                api.get_opt(&r.name).await.map_err(api_error)?
            }
        };
        let Some(nc) = found else {
            return Err(Error::InsufficientCapacity(format!(
                "KWOKNodeClass {} not found",
                r.name
            )));
        };
        if let Some(why) = nc.not_ready() {
            return Err(Error::NodeClassNotReady(why));
        }
        Ok(nc)
    }

    /// Launches in two steps, as the core persists what `create` returns: the first call
    /// chooses the offering and answers the labels to record on the claim; the next one
    /// (on the written claim, whose labels pin that offering) makes the Node.
    async fn launch(&self, claim: &NodeClaim) -> Result<Created, Error> {
        let name = node::node_name(claim);
        // Idempotent: an earlier call (or a restart's) already made it.
        if let Some(existing) = self.node(&name).await? {
            return adopt(claim, &existing);
        }
        let nc = self.nodeclass(claim).await?;
        let delay = nc
            .registration_delay()
            .map_err(|e| Error::NodeClassNotReady(e.to_string()))?;
        let choice = node::choose(&self.types, claim)
            .map_err(|e| Error::InsufficientCapacity(e.to_string()))?;
        let intent = node::labels_of(&choice);
        if !node::labelled(claim, &intent) {
            return Ok(Created::Record(Intent {
                labels: intent,
                annotations: BTreeMap::new(),
            }));
        }
        let age = claim
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Duration::MAX, |t| {
                Timestamp::now()
                    .duration_since(t.0)
                    .try_into()
                    .unwrap_or(Duration::ZERO)
            });
        if age < delay {
            // The instance "boots": its Node is made by the first call after the delay.
            return Err(Error::retryable(
                Retry::Waiting,
                format!("registration delay: {}s left", (delay - age).as_secs()),
            ));
        }
        let made = node::build(claim, &choice);
        let writer = Writer::new(self.nodes(), manager::LIFECYCLE);
        match writer.create(&made).await.map_err(api_error)? {
            Written::Created(_) => Ok(Created::Launched),
            Written::Exists => match self.nodes().get_opt(&name).await.map_err(api_error)? {
                Some(existing) => adopt(claim, &existing),
                // Made and deleted meanwhile: the next reconcile makes it again.
                None => Err(Error::retryable(
                    Retry::Launch,
                    format!("Node {name} went away while made"),
                )),
            },
        }
    }

    async fn remove(&self, claim: &NodeClaim) -> Result<Deletion, Error> {
        let Some(found) = self.node_of(claim).await? else {
            return Ok(Deletion::Gone);
        };
        if found.metadata.deletion_timestamp.is_none() {
            let writer = Writer::new(self.nodes(), manager::TERMINATION);
            if writer.delete(&found).await.map_err(api_error)? == Outcome::Conflict {
                // The name holds another Node now: ours is gone.
                tracing::debug!(node = %found.name_any(), "kwok: Node replaced before deletion");
            }
        }
        // As in Karpenter kwok, the instance is gone once its deletion is issued: the Node
        // object itself goes when the core releases its finalizer.
        Ok(Deletion::Gone)
    }

    async fn instances(&self) -> Result<Vec<Instance>, Error> {
        let listed = self
            .nodes()
            .list(&ListParams::default().labels(labels::NODECLAIM))
            .await
            .map_err(api_error)?;
        Ok(listed
            .items
            .iter()
            .filter(|n| node::is_ours(n))
            .map(node::instance)
            .collect())
    }
}

/// The claim's own Node made earlier is adopted; a Node of that name made for another
/// NodeClaim (or by anyone else) is a permanent conflict.
fn adopt(claim: &NodeClaim, existing: &Node) -> Result<Created, Error> {
    if node::ours_for(existing, claim) {
        let labels = node::claim_labels(existing);
        if node::labelled(claim, &labels) {
            return Ok(Created::Launched);
        }
        return Ok(Created::Record(Intent {
            labels,
            annotations: BTreeMap::new(),
        }));
    }
    Err(Error::Create {
        reason: "NameConflict",
        message: format!(
            "Node {} exists and is not this NodeClaim's",
            existing.name_any()
        ),
    })
}

impl CloudProvider for KwokCloudProvider {
    fn create<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Created, Error>> {
        self.launch(claim).boxed()
    }

    fn delete<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Deletion, Error>> {
        self.remove(claim).boxed()
    }

    fn get<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Instance, Error>> {
        async move {
            match self.node_of(claim).await? {
                // A Node being deleted is an instance terminated (Karpenter kwok).
                Some(n) if n.metadata.deletion_timestamp.is_none() => Ok(node::instance(&n)),
                _ => Err(Error::NodeClaimNotFound(claim.name_any())),
            }
        }
        .boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, Error>> {
        self.instances().boxed()
    }

    fn instance_types(&self, nodeclass: &str) -> Option<Arc<InstanceTypes>> {
        let mut catalogs = self.catalogs.lock().unwrap_or_else(|p| p.into_inner());
        let catalog = catalogs
            .entry(nodeclass.to_string())
            .or_insert_with(|| Arc::new(crate::catalog::to_catalog(&self.types, nodeclass)));
        Some(catalog.clone())
    }

    fn is_drifted<'a>(
        &'a self,
        _claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<Option<Drift>, Error>> {
        // No provider drift (Karpenter kwok's `IsDrifted` returns "").
        futures::future::ready(Ok(None)).boxed()
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        repair_policies()
    }

    fn reboot<'a>(
        &'a self,
        claim: &'a NodeClaim,
        operation: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        async move {
            // As Karpenter kwok: the Node "boots again" with a boot ID naming the operation
            // (so a second call of the same operation changes nothing).
            let Some(node) = claim.status.as_ref().and_then(|s| s.node_name.clone()) else {
                return Err(Error::RebootFailed(format!(
                    "NodeClaim {} has no Node",
                    claim.name_any()
                )));
            };
            let nodes: Api<Node> = Api::all(self.client.clone());
            let body = serde_json::json!({"status": {"nodeInfo": {"bootID": format!("kwok-{operation}")}}});
            nodes
                .patch_status(
                    &node,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(body),
                )
                .await
                .map_err(api_error)?;
            Ok(())
        }
        .boxed()
    }

    fn name(&self) -> &'static str {
        "kwok"
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind {
            group: nodeclass::GROUP,
            kind: nodeclass::KIND,
        }]
    }

    fn launch_failed(&self, _claim: &NodeClaim, _why: &str) {
        // Every kwok offering is always available (Karpenter kwok forces it): nothing to
        // avoid.
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn karpenter_kwoks_repair_policies_are_a_valid_set_with_a_reboot() {
        let policies = super::repair_policies();
        assert_eq!(cloudprovider::repair::validate(&policies), Ok(()));
        assert!(
            policies
                .iter()
                .any(|p| p.action == cloudprovider::RepairAction::RebootNode)
        );
    }
}
