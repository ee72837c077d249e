//! An in-memory provider, like Karpenter's `cloudprovider/fake`: instances are entries in a
//! map, launched at once with a `fake://` providerID; tests queue the errors the next calls
//! return, flip an instance's failure or health, and read back what was asked of it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::NodeClaim;
use futures::FutureExt;
use futures::future::BoxFuture;
use kube::ResourceExt;

use crate::instance_types::InstanceTypes;
use crate::provider::{CloudProvider, Created, Deletion, Drift, Error, Instance, NodeClassKind};
use crate::repair::RepairPolicy;

/// What the fake holds; every field is readable by tests through [`FakeCloudProvider::state`].
#[derive(Debug, Default)]
pub struct FakeState {
    /// Instances by NodeClaim name.
    pub instances: BTreeMap<String, Instance>,
    /// Errors the next `create` calls return, in order (then they succeed).
    pub create_errors: VecDeque<Error>,
    /// Errors the next `delete` calls return.
    pub delete_errors: VecDeque<Error>,
    /// Drift reported by `is_drifted`, by NodeClaim name.
    pub drifted: BTreeMap<String, Drift>,
    /// How many `delete` calls an instance takes to go away (0: at once).
    pub delete_rounds: usize,
    /// NodeClaim names passed to each method, in call order.
    pub create_calls: Vec<String>,
    pub delete_calls: Vec<String>,
    /// `launch_failed` calls: (NodeClaim, why).
    pub launch_failures: Vec<(String, String)>,
    /// Instance types by NodeClass name.
    pub catalogs: BTreeMap<String, Arc<InstanceTypes>>,
    /// Whether launched instances get their providerID at once (else a test sets it).
    pub hold_provider_id: bool,
    /// What `repair_policies` answers (`None`: [`FakeCloudProvider::DEFAULT_REPAIR`]).
    pub repair_policies: Option<Vec<RepairPolicy>>,
    /// What `supported_node_classes` answers (`None`: [`FakeCloudProvider::NODE_CLASS`]).
    pub node_classes: Option<Vec<NodeClassKind>>,
    /// `reboot` calls: (NodeClaim, operation), in call order.
    pub reboot_calls: Vec<(String, String)>,
    /// Errors the next `reboot` calls return (then they are accepted).
    pub reboot_errors: VecDeque<Error>,
    /// Whether `reboot` answers [`Error::RebootNotImplemented`] (as a provider without it).
    pub no_reboot: bool,
    /// What `drifted_taint` answers.
    pub drifted_taint: Option<k8s_openapi::api::core::v1::Taint>,
    /// What `drain_rules` answers, by NodeClaim name (absent: the default, drain all).
    pub drain_rules: BTreeMap<String, crate::drain::DrainRules>,
}

impl FakeState {
    /// The offering the fake launches `claim` on, as Karpenter's fake picks it: the first of
    /// the claim's instance types its NodeClass's catalog has, on that type's preferred
    /// offering (reserved, else the cheapest); `fake-it`, on-demand, no zone when the catalog has none of them.
    fn offering_for(&self, claim: &NodeClaim) -> (String, Option<String>, String) {
        let catalog = self.catalogs.get(&claim.spec.node_class_ref.name);
        let chosen = claim
            .spec
            .requirements
            .iter()
            .filter(|r| {
                r.key == api::consts::labels::INSTANCE_TYPE
                    && r.operator == api::karpenter::Operator::In
            })
            .flat_map(|r| r.values.iter())
            .find_map(|name| {
                let it = catalog?.lookup(name)?;
                let o = it.cheapest()?;
                Some((it.name.clone(), o.zone.clone(), o.capacity_type.clone()))
            });
        chosen.unwrap_or_else(|| ("fake-it".into(), None, "on-demand".into()))
    }
}

/// The fake provider; cheap to clone (one shared state).
#[derive(Clone, Default)]
pub struct FakeCloudProvider {
    state: Arc<Mutex<FakeState>>,
}

impl FakeCloudProvider {
    /// The NodeClass kind a fake left alone serves (Karpenter's fake: `TestNodeClass`).
    pub const NODE_CLASS: NodeClassKind = NodeClassKind {
        group: "karpenter.test.sh",
        kind: "TestNodeClass",
    };

    /// The repair policy of a fake left alone: its Node `Ready=False` for 10 minutes.
    pub(crate) const DEFAULT_REPAIR: Duration = Duration::from_secs(600);

    /// Runs `f` on the state (tests arrange and inspect through it).
    pub fn state<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The providerID the fake gives the instance of `nodeclaim`.
    pub fn provider_id(nodeclaim: &str) -> String {
        format!("fake://{nodeclaim}")
    }

    /// Marks an instance failed (it will never become a Node).
    pub fn fail(&self, nodeclaim: &str, why: &str) {
        self.state(|s| {
            if let Some(i) = s.instances.get_mut(nodeclaim) {
                i.failure = Some(why.to_string());
            }
        });
    }

    /// Removes an instance behind the lifecycle's back.
    pub fn remove(&self, nodeclaim: &str) -> Option<Instance> {
        self.state(|s| s.instances.remove(nodeclaim))
    }

    fn launch(&self, claim: &NodeClaim) -> Result<(), Error> {
        let name = claim.name_any();
        self.state(|s| {
            s.create_calls.push(name.clone());
            if let Some(e) = s.create_errors.pop_front() {
                return Err(e);
            }
            let hold = s.hold_provider_id;
            let (instance_type, zone, capacity_type) = s.offering_for(claim);
            s.instances.entry(name.clone()).or_insert_with(|| Instance {
                nodeclaim: name.clone(),
                provider_id: (!hold).then(|| Self::provider_id(&name)),
                description: format!("fake instance {name}"),
                instance_type,
                zone,
                capacity_type,
                capacity: crate::provider::claim_requests(claim),
                allocatable: crate::provider::claim_requests(claim),
                nodeclaim_uid: claim.metadata.uid.clone(),
                created: Some(k8s_openapi::jiff::Timestamp::now()),
                ..Instance::default()
            });
            Ok(())
        })
    }

    fn remove_instance(&self, claim: &NodeClaim) -> Result<Deletion, Error> {
        let name = claim.name_any();
        self.state(|s| {
            s.delete_calls.push(name.clone());
            if let Some(e) = s.delete_errors.pop_front() {
                return Err(e);
            }
            let Some(i) = s.instances.get_mut(&name) else {
                return Ok(Deletion::Gone);
            };
            let rounds = s.delete_calls.iter().filter(|n| **n == name).count();
            if rounds > s.delete_rounds {
                s.instances.remove(&name);
                return Ok(Deletion::Gone);
            }
            i.terminating = true;
            Ok(Deletion::Waiting(Duration::from_millis(100)))
        })
    }
}

impl CloudProvider for FakeCloudProvider {
    fn create<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Created, Error>> {
        let result = self.launch(claim).map(|()| Created::Launched);
        futures::future::ready(result).boxed()
    }

    fn delete<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Deletion, Error>> {
        futures::future::ready(self.remove_instance(claim)).boxed()
    }

    fn get<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, Result<Instance, Error>> {
        let name = claim.name_any();
        let found = self.state(|s| s.instances.get(&name).cloned());
        futures::future::ready(found.ok_or(Error::NodeClaimNotFound(name))).boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, Error>> {
        futures::future::ready(Ok(self.state(|s| s.instances.values().cloned().collect()))).boxed()
    }

    fn instance_types(&self, nodeclass: &str) -> Option<Arc<InstanceTypes>> {
        self.state(|s| s.catalogs.get(nodeclass).cloned())
    }

    fn is_drifted<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<Option<Drift>, Error>> {
        let name = claim.name_any();
        futures::future::ready(Ok(self.state(|s| s.drifted.get(&name).cloned()))).boxed()
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.state(|s| s.repair_policies.clone())
            .unwrap_or_else(|| {
                vec![RepairPolicy::replace("Ready", "False", Self::DEFAULT_REPAIR).fallback()]
            })
    }

    fn reboot<'a>(
        &'a self,
        claim: &'a NodeClaim,
        operation: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let name = claim.name_any();
        let result = self.state(|s| {
            if s.no_reboot {
                return Err(Error::RebootNotImplemented(
                    "the fake provider is told not to reboot".into(),
                ));
            }
            s.reboot_calls.push((name, operation.to_string()));
            s.reboot_errors.pop_front().map_or(Ok(()), Err)
        });
        futures::future::ready(result).boxed()
    }

    fn name(&self) -> &'static str {
        "fake"
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.state(|s| s.node_classes.clone())
            .unwrap_or_else(|| vec![Self::NODE_CLASS])
    }

    fn launch_failed(&self, claim: &NodeClaim, why: &str) {
        self.state(|s| s.launch_failures.push((claim.name_any(), why.to_string())));
    }

    fn drifted_taint(&self) -> Option<k8s_openapi::api::core::v1::Taint> {
        self.state(|s| s.drifted_taint.clone())
    }

    fn drain_rules(&self, claim: &NodeClaim) -> Result<crate::drain::DrainRules, Error> {
        let name = claim.name_any();
        Ok(self.state(|s| s.drain_rules.get(&name).cloned().unwrap_or_default()))
    }
}
