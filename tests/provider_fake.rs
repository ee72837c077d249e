//! The NodeClaim lifecycle over the provider seam, with the in-memory fake provider (as
//! Karpenter's lifecycle suite runs over `cloudprovider/fake`) on a real kube-apiserver:
//! launch (success, transient, permanent and insufficient-capacity errors), registration and
//! initialization, liveness (a failed instance, an instance gone behind our back), repair,
//! drift and termination; and a disconnected workload cluster (as hub mode marks one whose
//! API server stops answering): no termination delete, no liveness give-up, no repair until
//! it answers again. The instance goes through the trait only: the NodeClaim loops' context
//! holds no Cluster API cache or client.

use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::consts::conditions as types;
use cloudprovider::fake::FakeCloudProvider;
use cloudprovider::{CloudProvider as _, Drift, Error as ProviderError, RepairPolicy, Retry};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::cache::Caches;
use karpenter_core::events::{Recorder, Reporter};
use karpenter_core::metrics::Metrics;
use karpenter_core::nodeclaim::context::{Ctx, Settings, Shared};
use karpenter_core::nodeclaim::error::Error as LoopError;
use karpenter_core::nodeclaim::lifecycle;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use testbed::{Options, Testbed, wait_for};

const WAIT: Duration = Duration::from_secs(20);

struct Env {
    _tb: Testbed,
    _tasks: karpenter_core::tasks::Tasks,
    client: Client,
    caches: Caches,
    ctx: Arc<Ctx>,
    fake: FakeCloudProvider,
    /// Flips the workload cluster's connection (as hub mode's probes do).
    connected: tokio::sync::watch::Sender<bool>,
}

async fn env() -> Env {
    let tb = Testbed::start(Options::default().without_cluster_api())
        .await
        .expect("kube-apiserver");
    let client = tb.client();
    let mut tasks = karpenter_core::tasks::Tasks::default();
    let caches = Caches::start(&mut tasks, &client);
    caches.ready().await;
    let (connected, connection) = karpenter_core::health::Connection::new();
    let shared = Shared {
        workload: client.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "fake-test".into(),
                instance: None,
            },
        ),
        metrics: Metrics::register(&mut prometheus_client::registry::Registry::default()),
        nodes: caches.nodes.clone(),
        pods: caches.pods.store(),
        nodeclaims: caches.nodeclaims.store(),
        nodepools: caches.nodepools.store(),
        slices: caches.dra.slices.store(),
        settings: Settings {
            // The provider's own health signal is tolerated this long.
            node_repair_after: Duration::from_secs(20),
            ..Settings::default()
        },
        expectations: Arc::default(),
        backoff: Arc::default(),
        registration_failures: Arc::default(),
        repairs: Arc::default(),
        repair_policies: Arc::default(),
        reboots: Arc::default(),
        connection,
    };
    let fake = FakeCloudProvider::default();
    // The fake's repair policy, tolerated for 20 s: the "not yet" and "due" cases below
    // tell it from the 600 s the fake has by default.
    fake.state(|s| s.repair_policies = Some(vec![ready_false(Duration::from_secs(20))]));
    let ctx = Arc::new(Ctx {
        shared,
        provider: Arc::new(fake.clone()),
    });
    Env {
        _tb: tb,
        _tasks: tasks,
        client,
        caches,
        ctx,
        fake,
        connected,
    }
}

/// RFC 3339 of `secs` seconds ago (whole seconds, as the API server keeps them).
fn ago(secs: i64) -> String {
    let t =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(secs);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Env {
    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    async fn create_claim(&self, name: &str) {
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io", "kind": "ClusterAPINodeClass", "name": "default"},
                "requirements": [],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
            }
        }))
        .expect("nodeclaim");
        self.claims()
            .create(&PostParams::default(), &claim)
            .await
            .expect("create nodeclaim");
    }

    /// The claim as the API server has it now (`None`: gone).
    async fn claim(&self, name: &str) -> Option<NodeClaim> {
        self.claims().get_opt(name).await.expect("get nodeclaim")
    }

    /// One reconcile of the fresh object.
    async fn reconcile(&self, name: &str) -> Result<(), LoopError> {
        let claim = self.claim(name).await.expect("nodeclaim exists");
        lifecycle::reconcile(Arc::new(claim), self.ctx.clone())
            .await
            .map(|_| ())
    }

    /// Reconciles until `done` holds for the stored claim (`None`: gone).
    async fn reconcile_until(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(Option<&NodeClaim>) -> bool,
    ) {
        let found = wait_for(what, WAIT, || async {
            if self.claim(name).await.is_some() {
                self.reconcile(name).await.expect("reconcile");
            }
            done(self.claim(name).await.as_ref()).then_some(())
        })
        .await;
        if let Err(e) = found {
            let status = self.claim(name).await.and_then(|c| c.status);
            panic!("{name}: {e}; status {status:?}");
        }
    }

    /// A Ready Node with the fake providerID of `claim`, seen by the Node cache.
    async fn join(&self, claim: &str) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = format!("node-{claim}");
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name},
            "spec": {"providerID": FakeCloudProvider::provider_id(claim)}
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        // What the node lifecycle controller does once the Node is Ready (no
        // controller-manager runs here): the admission-time not-ready taint goes.
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .expect("untaint node");
        self.node_ready(&name, "True", "2026-01-01T00:00:00Z").await;
    }

    async fn node_ready(&self, name: &str, status: &str, since: &str) {
        self.node_status(
            name,
            json!({
                "capacity": {"cpu": "1", "memory": "1Gi", "pods": "110"},
                "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": status, "reason": "Test",
                    "lastHeartbeatTime": since, "lastTransitionTime": since}]
            }),
        )
        .await;
    }

    /// Merges `status` into the Node's status, once the Node cache has the write.
    async fn node_status(&self, name: &str, status: serde_json::Value) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let written = nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .expect("node status");
        let version = written.resource_version();
        let store = self.caches.nodes.store();
        wait_for("node cached", WAIT, || async {
            store
                .get(&kube::runtime::reflector::ObjectRef::new(name))
                .filter(|n| n.resource_version() == version)
                .map(|_| ())
        })
        .await
        .expect("node in cache");
    }

    async fn events(&self, name: &str) -> Vec<String> {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.client.clone());
        api.list(&Default::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| e.reason.unwrap_or_default())
            .collect()
    }
}

fn condition(claim: Option<&NodeClaim>, type_: &str) -> Option<(String, String)> {
    let c = api::conditions::get(&claim?.status.as_ref()?.conditions, type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

fn is_true(claim: Option<&NodeClaim>, type_: &str) -> bool {
    condition(claim, type_).is_some_and(|(s, _)| s == "True")
}

#[tokio::test]
async fn the_lifecycle_over_the_fake_provider() {
    let env = env().await;

    // Launch, registration, initialization.
    env.create_claim("fk-launch").await;
    env.reconcile("fk-launch").await.expect("launch");
    let launched = env.claim("fk-launch").await.expect("claim");
    assert!(
        launched
            .finalizers()
            .iter()
            .any(|f| f == "karpenter.sh/termination"),
        "the lifecycle adds the finalizer when the provider did not"
    );
    assert_eq!(env.fake.state(|s| s.create_calls.clone()), ["fk-launch"]);
    env.join("fk-launch").await;
    env.reconcile_until("fk-launch", "initialized", |c| {
        is_true(c, types::INITIALIZED)
    })
    .await;
    let claim = env.claim("fk-launch").await;
    let status = claim
        .as_ref()
        .and_then(|c| c.status.clone())
        .expect("status");
    assert_eq!(status.provider_id.as_deref(), Some("fake://fk-launch"));
    assert_eq!(status.node_name.as_deref(), Some("node-fk-launch"));
    for t in [
        types::LAUNCHED,
        types::REGISTERED,
        types::INITIALIZED,
        types::READY,
    ] {
        assert!(is_true(claim.as_ref(), t), "{t}: {status:?}");
    }
    let calls = env.fake.state(|s| s.create_calls.len());
    env.reconcile("fk-launch").await.expect("settled");
    assert_eq!(
        env.fake.state(|s| s.create_calls.len()),
        calls,
        "a launched claim is not launched again"
    );
    assert_eq!(
        env.fake.list().await.expect("list").len(),
        1,
        "one instance for the claim"
    );

    // A transient launch error is retried; the instance is launched on the next try.
    env.fake.state(|s| {
        s.create_errors
            .push_back(ProviderError::retryable(Retry::Waiting, "api hiccup"))
    });
    env.create_claim("fk-transient").await;
    let err = env.reconcile("fk-transient").await.expect_err("transient");
    assert!(err.to_string().contains("api hiccup"), "{err}");
    assert!(
        env.claim("fk-transient").await.is_some(),
        "kept for a retry"
    );
    env.reconcile("fk-transient").await.expect("retried");
    assert!(env.fake.state(|s| s.instances.contains_key("fk-transient")));

    // A held launch (a preflight check): Launched=Unknown with the hold's reason, an event,
    // the claim kept; it launches once the hold is gone.
    env.fake.state(|s| {
        s.create_errors.push_back(ProviderError::Held {
            reason: "ControlPlaneIsStable",
            message: "launch on hold: the control plane is upgrading".into(),
        })
    });
    env.create_claim("fk-held").await;
    let err = env.reconcile("fk-held").await.expect_err("held");
    assert!(err.to_string().contains("upgrading"), "{err}");
    let held = env.claim("fk-held").await;
    assert_eq!(
        condition(held.as_ref(), types::LAUNCHED),
        Some(("Unknown".into(), "ControlPlaneIsStable".into()))
    );
    assert!(
        env.events("fk-held")
            .await
            .iter()
            .any(|r| r == "ControlPlaneIsStable"),
        "an event names the check"
    );
    assert!(!env.fake.state(|s| s.instances.contains_key("fk-held")));
    env.reconcile("fk-held").await.expect("released");
    assert!(env.fake.state(|s| s.instances.contains_key("fk-held")));

    // Permanent errors give the claim up: an event with the reason, the claim deleted.
    for (name, error, reason) in [
        (
            "fk-permanent",
            ProviderError::Create {
                reason: "LaunchFailed",
                message: "bad template".into(),
            },
            "LaunchFailed",
        ),
        (
            "fk-capacity",
            ProviderError::InsufficientCapacity("no offering fits".into()),
            "InsufficientCapacityError",
        ),
        (
            "fk-nodeclass",
            ProviderError::NodeClassNotReady("ClusterAPINodeClass default is not ready".into()),
            "NodeClassNotReady",
        ),
    ] {
        env.fake.state(|s| s.create_errors.push_back(error));
        env.create_claim(name).await;
        let before_refusal = env.claim(name).await.expect("claim");
        env.reconcile(name).await.expect("refused, not failed");
        assert!(env.claim(name).await.is_none(), "{name} deleted");
        // A requeue of the claim as the cache had it before the refusal launches nothing:
        // the error queue is empty now, so a second create would make an instance (as the
        // transient case above shows).
        lifecycle::reconcile(Arc::new(before_refusal), env.ctx.clone())
            .await
            .expect("requeue");
        assert_eq!(
            env.fake
                .state(|s| s.create_calls.iter().filter(|c| *c == name).count()),
            1,
            "{name}: one create, not relaunched"
        );
        assert!(
            env.events(name).await.iter().any(|r| r == reason),
            "{name}: event {reason}: {:?}",
            env.events(name).await
        );
        assert!(!env.fake.state(|s| s.instances.contains_key(name)));
    }

    // Liveness: an instance that fails before its Node registers is given up, and the
    // provider is told (its offering is avoided); termination then removes it.
    env.create_claim("fk-failed").await;
    env.reconcile("fk-failed").await.expect("launch");
    env.fake.fail("fk-failed", "quota exceeded");
    env.reconcile_until("fk-failed", "gone", |c| c.is_none())
        .await;
    assert_eq!(
        env.fake.state(|s| s.launch_failures.clone()),
        [("fk-failed".to_string(), "quota exceeded".to_string())]
    );
    assert!(!env.fake.state(|s| s.instances.contains_key("fk-failed")));

    // Drift: the provider's reason becomes the Drifted condition.
    env.fake.state(|s| {
        s.drifted.insert(
            "fk-launch".into(),
            Drift {
                reason: "NodeClassDrifted",
                message: "bootstrap source changed".into(),
            },
        )
    });
    let outdated = k8s_openapi::api::core::v1::Taint {
        key: "example.com/outdated".into(),
        effect: "PreferNoSchedule".into(),
        ..Default::default()
    };
    env.fake.state(|s| s.drifted_taint = Some(outdated.clone()));
    env.reconcile_until("fk-launch", "drifted", |c| {
        condition(c, types::DRIFTED) == Some(("True".into(), "NodeClassDrifted".into()))
    })
    .await;
    // ... and its Node gets the provider's drifted taint, removed once it is not drifted.
    let nodes: Api<Node> = Api::all(env.client.clone());
    let tainted = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == outdated.key))
    };
    for (want, drifted) in [(true, true), (false, false)] {
        if !drifted {
            env.fake.state(|s| s.drifted.remove("fk-launch"));
        }
        wait_for("the drifted taint", WAIT, || async {
            let _ = env.reconcile("fk-launch").await;
            let n = nodes.get("node-fk-launch").await.ok()?;
            (tainted(&n) == want).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("taint {want}: {e}"));
    }
    env.fake.state(|s| {
        s.drifted.insert(
            "fk-launch".into(),
            Drift {
                reason: "NodeClassDrifted",
                message: "bootstrap source changed".into(),
            },
        )
    });
    env.reconcile_until("fk-launch", "drifted again", |c| {
        condition(c, types::DRIFTED) == Some(("True".into(), "NodeClassDrifted".into()))
    })
    .await;

    // Repair: a Node NotReady for less than the repair period (20 s) is not replaced yet...
    env.node_ready("node-fk-launch", "False", &ago(5)).await;
    env.reconcile("fk-launch").await.expect("not yet");
    assert!(
        !env.events("fk-launch")
            .await
            .iter()
            .any(|r| r == "NodeRepair"),
        "repaired 5 s into a 20 s period"
    );
    let not_yet = env.claim("fk-launch").await.expect("claim");
    assert!(not_yet.metadata.deletion_timestamp.is_none(), "not yet");
    // ... and is once it has been for longer (40 s: past the policy's 20 s; as Karpenter, a
    // condition counts from no earlier than its Node's creation, so a Node younger than 20 s
    // waits for its age).
    env.node_ready("node-fk-launch", "False", &ago(40)).await;
    env.reconcile_until("fk-launch", "repaired", |c| {
        c.is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    })
    .await;
    assert!(
        env.events("fk-launch")
            .await
            .iter()
            .any(|r| r == "NodeRepair"),
        "{:?}",
        env.events("fk-launch").await
    );
    let deleting = env.claim("fk-launch").await.expect("held by the finalizer");
    assert!(deleting.metadata.deletion_timestamp.is_some());

    // Termination: deleted through the provider until it says gone, then the finalizer goes.
    env.fake.state(|s| s.delete_rounds = 2);
    env.reconcile("fk-launch").await.expect("terminating");
    assert!(is_true(
        env.claim("fk-launch").await.as_ref(),
        types::INSTANCE_TERMINATING
    ));
    assert!(env.fake.state(|s| s.instances["fk-launch"].terminating));
    env.reconcile_until("fk-launch", "terminated", |c| c.is_none())
        .await;
    assert_eq!(
        env.fake
            .state(|s| s.delete_calls.iter().filter(|n| *n == "fk-launch").count()),
        3,
        "asked until the instance was gone"
    );
    assert!(
        env.fake
            .list()
            .await
            .expect("list")
            .iter()
            .all(|i| i.nodeclaim != "fk-launch")
    );

    // An instance gone behind the lifecycle's back: the claim is deleted.
    env.fake.state(|s| s.delete_rounds = 0);
    env.create_claim("fk-vanish").await;
    env.reconcile("fk-vanish").await.expect("launch");
    env.join("fk-vanish").await;
    env.reconcile_until("fk-vanish", "launched", |c| is_true(c, types::LAUNCHED))
        .await;
    env.fake.remove("fk-vanish");
    env.reconcile_until("fk-vanish", "gone", |c| c.is_none())
        .await;
    assert!(
        env.events("fk-vanish")
            .await
            .iter()
            .any(|r| r == "MachineDeleted"),
        "{:?}",
        env.events("fk-vanish").await
    );
    disconnected(&env).await;
    no_repair_policies(&env).await;
    reboot_repairs_in_place(&env).await;
    let claims = env.claims();
    claims
        .delete("fk-transient", &DeleteParams::default())
        .await
        .expect("delete");
}

/// Karpenter's Node `Ready=False` policy with `toleration`.
fn ready_false(toleration: Duration) -> RepairPolicy {
    RepairPolicy::replace("Ready", "False", toleration).fallback()
}

/// A provider without repair policies gets nothing repaired, however long its Node has been
/// NotReady; with the policy the same Node is repaired (the positive control).
async fn no_repair_policies(env: &Env) {
    let name = "fk-no-policies";
    env.create_claim(name).await;
    env.reconcile(name).await.expect("launch");
    env.join(name).await;
    env.reconcile_until(name, "initialized", |c| is_true(c, types::INITIALIZED))
        .await;
    env.fake.state(|s| s.repair_policies = Some(Vec::new()));
    env.node_ready(&format!("node-{name}"), "False", &ago(3600))
        .await;
    for _ in 0..3 {
        env.reconcile(name).await.expect("a pass without policies");
    }
    assert!(
        !env.events(name).await.iter().any(|r| r == "NodeRepair"),
        "not repaired without policies"
    );
    let held = env.claim(name).await.expect("claim");
    assert!(held.metadata.deletion_timestamp.is_none(), "not repaired");

    env.fake
        .state(|s| s.repair_policies = Some(vec![ready_false(Duration::from_secs(20))]));
    env.reconcile(name).await.expect("repair");
    assert!(
        env.events(name).await.iter().any(|r| r == "NodeRepair"),
        "{:?}",
        env.events(name).await
    );
    env.reconcile_until(name, "repaired", |c| c.is_none()).await;
}

/// Sets the Node's `Ready` condition with `reason` and its `bootID`.
async fn node_boot(env: &Env, node: &str, ready: &str, reason: &str, boot_id: &str) {
    let now = ago(0);
    env.node_status(
        node,
        json!({
            "nodeInfo": {"bootID": boot_id},
            "conditions": [{"type": "Ready", "status": ready, "reason": reason,
                "lastHeartbeatTime": now, "lastTransitionTime": now}]
        }),
    )
    .await;
}

fn rebooting_reason(claim: Option<&NodeClaim>) -> Option<String> {
    condition(claim, types::REBOOTING).map(|(_, r)| r)
}

fn reboots(env: &Env, result: &str) -> u64 {
    env.ctx
        .metrics
        .reboots
        .get_or_create(&karpenter_core::metrics::ResultLabels {
            result: result.into(),
        })
        .get()
}

/// A repair policy with action `RebootNode` matching the Node's reason reboots it in place:
/// `Rebooting` requested then issued (the taint on, `Initialized` Unknown, the provider asked
/// once), and once the Node boots again (a new `bootID`) and is Ready, `RebootSucceeded`, the
/// taint off and the NodeClaim initialized again, with no new instance. The control: a
/// provider that cannot reboot gets the same Node replaced (`RebootFailed`).
async fn reboot_repairs_in_place(env: &Env) {
    let name = "fk-reboot";
    let node = format!("node-{name}");
    env.fake.state(|s| {
        s.repair_policies = Some(vec![
            ready_false(Duration::from_secs(600)),
            RepairPolicy {
                reason_regex: "^KernelDeadlock$".into(),
                termination_grace_period: Some(Duration::from_secs(30)),
                action: cloudprovider::RepairAction::RebootNode,
                ..RepairPolicy::replace("Ready", "False", Duration::from_secs(1))
            },
        ])
    });
    env.create_claim(name).await;
    env.reconcile(name).await.expect("launch");
    env.join(name).await;
    env.reconcile_until(name, "initialized", |c| is_true(c, types::INITIALIZED))
        .await;
    let launches = env.fake.state(|s| s.create_calls.len());
    node_boot(env, &node, "False", "KernelDeadlock", "boot-1").await;
    env.reconcile_until(name, "reboot issued", |c| {
        rebooting_reason(c).as_deref() == Some("RebootIssued")
    })
    .await;
    let claim = env.claim(name).await.expect("claim");
    assert!(claim.metadata.deletion_timestamp.is_none(), "not replaced");
    assert_eq!(
        condition(Some(&claim), types::INITIALIZED),
        Some(("Unknown".into(), "Rebooting".into()))
    );
    assert_eq!(
        claim
            .annotations()
            .get("karpenter.sh/reboot-pre-boot-id")
            .map(String::as_str),
        Some("boot-1")
    );
    let nodes: Api<Node> = Api::all(env.client.clone());
    let tainted = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == "karpenter.sh/rebooting"))
    };
    assert!(tainted(&nodes.get(&node).await.expect("node")));
    for _ in 0..3 {
        env.reconcile(name).await.expect("waiting for the boot");
    }
    let calls = env.fake.state(|s| s.reboot_calls.clone());
    assert_eq!(calls.len(), 1, "asked once: {calls:?}");
    assert!(calls[0].1.ends_with("-boot-1"), "{calls:?}");
    assert!(
        env.events(name)
            .await
            .iter()
            .any(|r| r == "RebootRequested")
    );

    // The host boots again, healthy.
    node_boot(env, &node, "True", "KubeletReady", "boot-2").await;
    env.reconcile_until(name, "rebooted and initialized", |c| {
        rebooting_reason(c).as_deref() == Some("RebootSucceeded") && is_true(c, types::INITIALIZED)
    })
    .await;
    assert!(!tainted(&nodes.get(&node).await.expect("node")));
    assert!(env.events(name).await.iter().any(|r| r == "RebootObserved"));
    assert_eq!(
        env.fake.state(|s| s.create_calls.len()),
        launches,
        "no new instance"
    );
    assert_eq!(reboots(env, "succeeded"), 1);

    // The control: a provider that cannot reboot gets the Node replaced.
    // Its drain is bounded by the reboot policy's 30 s from the failure (the claim has no
    // terminationGracePeriod of its own: without the reboot's, none).
    env.fake.state(|s| s.no_reboot = true);
    node_boot(env, &node, "False", "KernelDeadlock", "boot-2").await;
    let before = k8s_openapi::jiff::Timestamp::now();
    let termination = std::sync::Mutex::new(None::<String>);
    env.reconcile_until(name, "replaced", |c| {
        if let Some(t) = c.and_then(|c| {
            c.annotations()
                .get("karpenter.sh/nodeclaim-termination-timestamp")
        }) {
            *termination.lock().expect("lock") = Some(t.clone());
        }
        c.is_none_or(|c| c.metadata.deletion_timestamp.is_some())
    })
    .await;
    let after = k8s_openapi::jiff::Timestamp::now();
    let termination = termination.into_inner().expect("lock");
    let at: k8s_openapi::jiff::Timestamp = termination
        .as_deref()
        .expect("the replaced claim has a termination time")
        .parse()
        .expect("RFC 3339");
    // The failure fell between `before` and `after`; the time is it plus 30 s, to the second.
    assert!(
        at.duration_since(before).as_secs() >= 29 && after.duration_since(at).as_secs() >= -31,
        "termination time {at}: the reboot's 30 s after a failure between {before} and {after}"
    );
    assert!(env.events(name).await.iter().any(|r| r == "RebootFailed"));
    assert_eq!(reboots(env, "provider_error"), 1);
    assert_eq!(env.fake.state(|s| s.reboot_calls.len()), 1);
    env.reconcile_until(name, "gone", |c| c.is_none()).await;
    env.fake.state(|s| s.no_reboot = false);
}

/// The workload cluster disconnected: a failed instance is not given up, an unhealthy Node
/// not repaired, a deleted claim's instance not deleted — each for several passes — and
/// each happens once it is connected again (the positive controls).
async fn disconnected(env: &Env) {
    let (repair, failed, deleted) = ("fk-off-repair", "fk-off-failed", "fk-off-deleted");
    for name in [repair, failed, deleted] {
        env.create_claim(name).await;
        env.reconcile(name).await.expect("launch");
    }
    env.join(repair).await;
    env.reconcile_until(repair, "initialized", |c| is_true(c, types::INITIALIZED))
        .await;
    env.connected.send_replace(false);
    env.fake.fail(failed, "quota exceeded");
    env.node_ready(&format!("node-{repair}"), "False", &ago(3600))
        .await;
    env.claims()
        .delete(deleted, &DeleteParams::default())
        .await
        .expect("delete");
    for _ in 0..3 {
        for name in [repair, failed, deleted] {
            env.reconcile(name).await.expect("a disconnected pass");
        }
    }
    assert!(env.claim(failed).await.is_some(), "not given up");
    assert!(
        env.fake
            .state(|s| s.launch_failures.iter().all(|(c, _)| c != failed)),
        "the provider is not told of a launch failure"
    );
    assert!(
        !env.events(repair).await.iter().any(|r| r == "NodeRepair"),
        "not repaired"
    );
    let held = env.claim(repair).await.expect("claim");
    assert!(held.metadata.deletion_timestamp.is_none(), "not repaired");
    let terminating = env.claim(deleted).await.expect("held by its finalizer");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(
        env.fake
            .state(|s| s.delete_calls.iter().filter(|c| *c == deleted).count()),
        0,
        "no termination delete"
    );
    assert!(env.fake.state(|s| s.instances.contains_key(deleted)));

    // Connected again: each happens.
    env.connected.send_replace(true);
    env.reconcile_until(failed, "given up", |c| c.is_none())
        .await;
    assert!(
        env.fake
            .state(|s| s.launch_failures.iter().any(|(c, _)| c == failed)),
        "{:?}",
        env.fake.state(|s| s.launch_failures.clone())
    );
    env.reconcile(repair).await.expect("repair");
    assert!(
        env.events(repair).await.iter().any(|r| r == "NodeRepair"),
        "{:?}",
        env.events(repair).await
    );
    env.reconcile_until(deleted, "terminated", |c| c.is_none())
        .await;
    assert!(
        env.fake
            .state(|s| s.delete_calls.iter().any(|c| c == deleted)),
        "the instance is deleted through the provider"
    );
    env.reconcile_until(repair, "repaired", |c| c.is_none())
        .await;
}
