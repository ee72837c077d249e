//! The decorators (`Metered`, `Overlaid`) pass on every call of the seam they do not change
//! (see `forward!`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::NodeClaim;
use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kube::runtime::reflector;

use crate::drain::DrainRules;
use crate::instance_types::InstanceTypes;
use crate::metered::{CallRecorder, Metered};
use crate::overlay::store::NodeClassLister;
use crate::overlay::{Overlaid, OverlayStore};
use crate::provider::{
    CloudProvider, Created, Deletion, Drift, Error, Instance, NodeClassKind, Timeouts,
};
use crate::repair::{RepairAction, RepairPolicy};

/// A provider whose every answer differs from the trait's defaults, and which notes the
/// calls that answer nothing.
#[derive(Default)]
struct Loud {
    calls: Mutex<Vec<String>>,
}

fn loud<T: Send + 'static>(what: &str) -> BoxFuture<'static, Result<T, Error>> {
    let e = Error::InsufficientCapacity(format!("loud {what}"));
    Box::pin(async move { Err(e) })
}

const TIMEOUTS: Timeouts = Timeouts {
    launch: Duration::from_secs(1),
    registration: Duration::from_secs(2),
};

impl CloudProvider for Loud {
    fn create<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, Result<Created, Error>> {
        loud("create")
    }
    fn delete<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, Result<Deletion, Error>> {
        loud("delete")
    }
    fn get<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, Result<Instance, Error>> {
        loud("get")
    }
    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, Error>> {
        loud("list")
    }
    fn instance_types(&self, _: &str) -> Option<Arc<InstanceTypes>> {
        Some(Arc::new(InstanceTypes::of(Vec::new())))
    }
    fn is_drifted<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, Result<Option<Drift>, Error>> {
        loud("is_drifted")
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        vec![RepairPolicy {
            condition_type: "Loud".into(),
            condition_status: "True".into(),
            reason_regex: String::new(),
            toleration: Duration::from_secs(3),
            termination_grace_period: None,
            priority: 7,
            action: RepairAction::ReplaceNode,
        }]
    }
    fn reboot<'a>(&'a self, _: &'a NodeClaim, _: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        loud("reboot")
    }
    fn name(&self) -> &'static str {
        "loud"
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind {
            group: "loud.example.com",
            kind: "LoudNodeClass",
        }]
    }
    fn changes(&self) -> Option<BoxStream<'static, String>> {
        Some(Box::pin(futures::stream::empty()))
    }
    fn private_annotations(&self) -> Vec<&'static str> {
        vec!["loud.example.com/private"]
    }
    fn timeouts(&self, _: &NodeClaim) -> Timeouts {
        TIMEOUTS
    }
    fn launch_failed(&self, claim: &NodeClaim, why: &str) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.push(format!(
            "launch_failed {} {why}",
            claim.metadata.name.as_deref().unwrap_or("")
        ));
    }
    fn launch_succeeded(&self, claim: &NodeClaim) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.push(format!(
            "launch_succeeded {}",
            claim.metadata.name.as_deref().unwrap_or("")
        ));
    }
    fn manual_drift(&self, _: &str) -> bool {
        true
    }
    fn drifted_taint(&self) -> Option<k8s_openapi::api::core::v1::Taint> {
        Some(k8s_openapi::api::core::v1::Taint {
            key: "loud".into(),
            effect: "PreferNoSchedule".into(),
            ..Default::default()
        })
    }
    fn drain_rules(&self, _: &NodeClaim) -> Result<DrainRules, Error> {
        Ok(DrainRules {
            label: Some("loud".into()),
            rules: Vec::new(),
        })
    }
}

/// The error message of a call that must fail with the loud provider's error.
fn failed<T>(r: Result<T, Error>) -> String {
    match r {
        Ok(_) => "no error".into(),
        Err(e) => e.to_string(),
    }
}

/// `p` answers every call as the loud provider it wraps does, and passes on the calls that
/// answer nothing.
fn passes_every_call(p: &dyn CloudProvider, inner: &Loud) {
    let claim = NodeClaim::new("c", Default::default());
    assert!(failed(block_on(p.create(&claim))).contains("loud create"));
    assert!(failed(block_on(p.delete(&claim))).contains("loud delete"));
    assert!(failed(block_on(p.get(&claim))).contains("loud get"));
    assert!(failed(block_on(p.list())).contains("loud list"));
    assert!(failed(block_on(p.is_drifted(&claim))).contains("loud is_drifted"));
    assert!(failed(block_on(p.reboot(&claim, "op"))).contains("loud reboot"));
    assert!(p.instance_types("default").is_some());
    assert_eq!(p.repair_policies(), inner.repair_policies());
    assert_eq!(p.name(), "loud");
    assert_eq!(p.supported_node_classes(), inner.supported_node_classes());
    assert!(p.changes().is_some(), "changes: the trait's default (None)");
    assert_eq!(p.private_annotations(), ["loud.example.com/private"]);
    assert_eq!(p.timeouts(&claim), TIMEOUTS);
    assert!(
        p.manual_drift("any"),
        "manual_drift: the trait's default (false)"
    );
    assert_eq!(p.drifted_taint(), inner.drifted_taint());
    assert_eq!(p.drain_rules(&claim).ok(), inner.drain_rules(&claim).ok());
    p.launch_failed(&claim, "why");
    p.launch_succeeded(&claim);
    let calls = inner
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(calls, ["launch_failed c why", "launch_succeeded c"]);
}

struct Ignore;

impl CallRecorder for Ignore {
    fn record(&self, _: &'static str, _: &'static str, _: Duration, _: Option<&Error>) {}
}

#[test]
fn metered_passes_every_call_on() {
    let inner = Arc::new(Loud::default());
    passes_every_call(&Metered::new(inner.clone(), Ignore), &inner);
}

#[test]
fn overlaid_passes_every_call_on() {
    let inner = Arc::new(Loud::default());
    let (store, _writer) = reflector::store();
    let lister: NodeClassLister = Box::new(|| vec!["default".to_string()]);
    let overlaid = Overlaid::new(inner.clone(), Arc::new(OverlayStore::new(store, lister)));
    passes_every_call(&overlaid, &inner);
}

/// The positive control: a provider that does not forward fails the check.
#[test]
#[should_panic(expected = "changes: the trait's default")]
fn a_provider_that_keeps_a_default_fails_the_check() {
    struct Defaults(Arc<Loud>);
    impl CloudProvider for Defaults {
        crate::forward::forward!(
            0: create,
            delete,
            get,
            list,
            is_drifted,
            reboot,
            repair_policies,
            name,
            supported_node_classes,
        );
        fn instance_types(&self, nodeclass: &str) -> Option<Arc<InstanceTypes>> {
            self.0.instance_types(nodeclass)
        }
        fn launch_failed(&self, claim: &NodeClaim, why: &str) {
            self.0.launch_failed(claim, why)
        }
    }
    let inner = Arc::new(Loud::default());
    passes_every_call(&Defaults(inner.clone()), &inner);
}
