//! Failure paths that always make progress: a launch that can never succeed is given up
//! (Launched=False with a precise reason, an event, the NodeClaim deleted so the provisioner
//! plans its pods again) instead of being retried until `expireAfter`; a NodeClaim re-applied
//! under another name never destroys its neighbour; node repair stops at 20 % of a pool and
//! is paced by the pool's `Unhealthy` budget. Three tests, each on a shared control plane
//! (the binary's two lanes run them side by side).

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testbed::wait_for;

/// A hand-made NodeClaim carrying a launch plan (as one restored from a backup would).
fn planned_claim(
    name: &str,
    ns: &str,
    cluster: &str,
    template: &str,
    failure_domain: &str,
) -> kube::api::DynamicObject {
    let plan = json!({
        "namespace": ns, "machine": name, "cluster": cluster,
        "instanceType": "small", "zone": "zone-a", "capacityType": "on-demand", "price": 0.1,
        "infrastructureTemplate": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                                   "kind": "TestMachineTemplate", "name": template},
        "infrastructure": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                           "kind": "TestMachine", "name": name},
        "bootstrapTemplate": null, "bootstrap": null, "dataSecretName": "bootstrap-data",
        "failureDomain": failure_domain, "labels": {}, "capacity": {}, "allocatable": {}
    });
    let mut claim = common::nodeclaim(name, json!([]));
    claim.metadata.annotations = Some(
        [(
            "karpenter.cluster.x-k8s.io/launch".to_string(),
            plan.to_string(),
        )]
        .into(),
    );
    claim
}

#[tokio::test]
async fn launches_that_cannot_succeed_are_given_up_with_a_reason() {
    // A launch timeout of 30 s instead of the fixture's 60 s (the wait for `no-cluster`);
    // the other two are given up at their first launch, seconds after they are created.
    let env = common::env_nodeclass(
        common::default_templates(json!({})),
        common::Identity::Admin,
        testbed::Options::all(),
        json!({"launchTimeout": "30s"}),
        |_| {},
    )
    .await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let claims = common::nodeclaims(&client);
    // The template of the plan is gone.
    claims
        .create(
            &PostParams::default(),
            &planned_claim("template-gone", &ns, "c1", "deleted-template", "zone-a"),
        )
        .await
        .expect("claim");
    // The Machine is rejected by the API server (failureDomain longer than it allows).
    claims
        .create(
            &PostParams::default(),
            &planned_claim("machine-rejected", &ns, "c1", "small", &"z".repeat(300)),
        )
        .await
        .expect("claim");
    // The Cluster is not there: retried (it may appear), until the launch timeout (30 s).
    claims
        .create(
            &PostParams::default(),
            &planned_claim("no-cluster", &ns, "absent", "small", "zone-a"),
        )
        .await
        .expect("claim");
    for (name, reason) in [
        ("template-gone", "TemplateNotFound"),
        ("machine-rejected", "MachineRejected"),
        ("no-cluster", "LaunchTimeout"),
    ] {
        let given_up = wait_for(
            &format!("{name} given up with {reason}"),
            Duration::from_secs(90),
            || async {
                let gone = claims.get_opt(name).await.ok()?.is_none();
                let said = common::events_for(&client, name)
                    .await
                    .iter()
                    .any(|(r, _)| r == reason);
                (gone && said).then_some(())
            },
        )
        .await;
        if let Err(e) = given_up {
            let events = common::events_for(&client, name).await;
            let claim = claims.get_opt(name).await.ok().flatten();
            panic!(
                "{e}: events {events:?}; claim {:?}",
                claim.map(|c| c.data["status"].clone())
            );
        }
    }
    // Nothing of the rejected launch is left behind (its InfraMachine clone rolled back).
    let machines: Api<clusterapi_api::Machine> = Api::namespaced(client.clone(), &ns);
    let left = machines
        .list(&ListParams::default())
        .await
        .expect("machines")
        .items;
    assert!(left.is_empty(), "{} Machines left", left.len());
    let infra: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &testbed::provider::test_machine_resource(),
    );
    wait_for("clones rolled back", Duration::from_secs(30), || async {
        infra
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await
    .expect("no TestMachine left");
}

/// A NodeClaim re-applied under another name (its launch plan copied, a new UID): the plan's
/// Machine is another's, so the copy is refused, and its termination deletes nothing of the
/// original's.
#[tokio::test]
async fn a_nodeclaim_reapplied_under_another_name_leaves_the_original_alone() {
    let env = common::env(common::default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let claims = common::nodeclaims(&client);
    let infra: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &testbed::provider::test_machine_resource(),
    );
    claims
        .create(
            &PostParams::default(),
            &common::nodeclaim("original", json!([])),
        )
        .await
        .expect("claim");
    let original = wait_for("original launched", Duration::from_secs(60), || async {
        let c = claims.get_opt("original").await.ok()??;
        (common::condition(&c, "Launched").as_deref() == Some("True")).then_some(c)
    })
    .await
    .expect("original launched");
    let mut copy = common::nodeclaim("duplicate", json!([]));
    copy.metadata.annotations = Some(original.annotations().clone());
    claims
        .create(&PostParams::default(), &copy)
        .await
        .expect("duplicate");
    wait_for("duplicate refused", Duration::from_secs(60), || async {
        let gone = claims.get_opt("duplicate").await.ok()?.is_none();
        let said = common::events_for(&client, "duplicate")
            .await
            .iter()
            .any(|(r, _)| r == "NameConflict");
        (gone && said).then_some(())
    })
    .await
    .expect("the duplicate is refused with NameConflict and removed");
    let machines: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &testbed::provider::machine_resource());
    let name = common::machine_name("original");
    for (what, api) in [("Machine", &machines), ("TestMachine", &infra)] {
        let o = api.get_opt(&name).await.expect("get");
        assert!(
            o.is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
            "the original's {what} survives the duplicate's termination"
        );
    }
    let still = claims.get("original").await.expect("original");
    assert!(still.metadata.deletion_timestamp.is_none());
}

/// Node repair (a Node NotReady for 5 s is repaired), capped and paced: two scenarios, one
/// after the other, on one operator.
#[tokio::test]
async fn node_repair_is_capped_and_paced_by_the_budget() {
    let env = common::env_tuned(
        common::default_templates(json!({})),
        common::Identity::Admin,
        testbed::Options::all(),
        |c| c.node_repair_after = Duration::from_secs(5),
    )
    .await;
    repair_is_capped(&env).await;
    repair_is_paced_by_the_unhealthy_budget(&env, env.metrics_addr).await;
}

/// Node repair on a pool of 5: one broken Node is repaired; then two broken Nodes of the
/// remaining 4 (more than ceil(20 %) = 1) are a partition: none is repaired, each says
/// `NodeRepairBlocked`.
async fn repair_is_capped(env: &common::Env) {
    let client = env.tb.client();
    let claims = common::nodeclaims(&client);
    let metrics_addr = env.metrics_addr;
    let names: Vec<String> = (0..5).map(|i| format!("repair-{i}")).collect();
    for name in &names {
        let mut c = common::nodeclaim(name, json!([]));
        c.metadata.labels =
            Some([("karpenter.sh/nodepool".to_string(), "repair".to_string())].into());
        claims
            .create(&PostParams::default(), &c)
            .await
            .expect("claim");
    }
    let mut node_of = std::collections::BTreeMap::new();
    for name in &names {
        let c = wait_for(
            &format!("{name} initialized"),
            Duration::from_secs(120),
            || async {
                let c = claims.get_opt(name).await.ok()??;
                (common::condition(&c, "Initialized").as_deref() == Some("True")).then_some(c)
            },
        )
        .await
        .expect("initialized");
        let node = c.data["status"]["nodeName"]
            .as_str()
            .expect("nodeName")
            .to_string();
        node_of.insert(name.clone(), node);
    }

    // One of five: repaired.
    common::break_node(&client, &node_of["repair-0"]).await;
    wait_for("repair-0 repaired", Duration::from_secs(60), || async {
        let c = claims.get_opt("repair-0").await.ok()?;
        let said = common::events_for(&client, "repair-0")
            .await
            .iter()
            .any(|(r, _)| r == "NodeRepair");
        (deleting(&c) && said).then_some(())
    })
    .await
    .expect("repair-0 repaired");
    let metrics = common::scrape(metrics_addr).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("karpenter_nodeclaims_unhealthy_disrupted_total{")
                && l.contains("nodepool=\"repair\"")
                && l.ends_with(" 1")
        ),
        "{metrics}"
    );
    wait_for("repair-0 gone", Duration::from_secs(90), || async {
        claims
            .get_opt("repair-0")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .expect("repair-0 terminated");

    // Two of the remaining four: blocked, both.
    for name in ["repair-1", "repair-2"] {
        common::break_node(&client, &node_of[name]).await;
    }
    for name in ["repair-1", "repair-2"] {
        wait_for(
            &format!("{name} blocked"),
            Duration::from_secs(60),
            || async {
                common::events_for(&client, name)
                    .await
                    .iter()
                    .any(|(r, _)| r == "NodeRepairBlocked")
                    .then_some(())
            },
        )
        .await
        .expect("NodeRepairBlocked");
    }
    for name in &names[1..] {
        let c = claims.get_opt(name).await.expect("get");
        assert!(!deleting(&c), "{name} must not be repaired over the cap");
    }
}

/// Whether a NodeClaim is being deleted (or gone).
fn deleting(c: &Option<kube::api::DynamicObject>) -> bool {
    c.as_ref()
        .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
}

/// Whether `name` has an event `reason` whose note contains `text`.
async fn said(client: &kube::Client, name: &str, reason: &str, text: &str) -> bool {
    common::events_for(client, name)
        .await
        .iter()
        .any(|(r, n)| r == reason && n.contains(text))
}

/// Creates NodeClaims `names` of pool `pool` (held by a test finalizer when `hold`) and
/// returns each one's Node once all are initialized.
async fn initialized_claims(
    client: &kube::Client,
    pool: &str,
    names: &[String],
    hold: &[&str],
) -> std::collections::BTreeMap<String, String> {
    let claims = common::nodeclaims(client);
    for name in names {
        let mut c = common::nodeclaim(name, json!([]));
        c.metadata.labels = Some([("karpenter.sh/nodepool".to_string(), pool.to_string())].into());
        if hold.contains(&name.as_str()) {
            c.metadata.finalizers = Some(vec![HOLD.to_string()]);
        }
        claims
            .create(&PostParams::default(), &c)
            .await
            .expect("claim");
    }
    let mut node_of = std::collections::BTreeMap::new();
    for name in names {
        let c = wait_for(
            &format!("{name} initialized"),
            Duration::from_secs(120),
            || async {
                let c = claims.get_opt(name).await.ok()??;
                (common::condition(&c, "Initialized").as_deref() == Some("True")).then_some(c)
            },
        )
        .await
        .expect("initialized");
        let node = c.data["status"]["nodeName"]
            .as_str()
            .expect("nodeName")
            .to_string();
        node_of.insert(name.clone(), node);
    }
    node_of
}

/// A test finalizer keeping a repaired NodeClaim around until the test lets it go.
const HOLD: &str = "test.karpenter.sh/hold";

/// Lets a NodeClaim held by [`HOLD`] go (its other finalizers kept; retried on conflict).
async fn release(client: &kube::Client, name: &str) {
    let claims = common::nodeclaims(client);
    wait_for(
        &format!("{name} released"),
        Duration::from_secs(30),
        || async {
            let c = claims.get(name).await.ok()?;
            let rest: Vec<String> = c
                .finalizers()
                .iter()
                .filter(|f| *f != HOLD)
                .cloned()
                .collect();
            let patch = json!({"metadata": {"finalizers": rest,
                                        "resourceVersion": c.resource_version()}});
            claims
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await
    .expect("release");
}

/// Karpenter v1.15's repair budget: a NodePool of 11 whose budget for reason `Unhealthy`
/// is 1 (0 for every other reason). Three Nodes break (3 of 11 is within the 20 %
/// threshold); one is vetoed by `karpenter.sh/do-not-repair` on its Node. The first repair
/// takes the budget: while it is being deleted (held by a test finalizer) the other waits
/// with a `DisruptionBlocked` event; once it is gone the other is repaired. The vetoed one
/// says why and is never repaired, while the other two are.
async fn repair_is_paced_by_the_unhealthy_budget(
    env: &common::Env,
    metrics_addr: std::net::SocketAddr,
) {
    let client = env.tb.client();
    let claims = common::nodeclaims(&client);
    common::nodepools(&client)
        .create(
            &PostParams::default(),
            &common::from_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "paced"},
                "spec": {
                    "template": {"spec": {"nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                        "kind": "ClusterAPINodeClass", "name": "default"}, "requirements": []}},
                    "disruption": {"consolidateAfter": "Never", "budgets": [
                        {"nodes": "1", "reasons": ["Unhealthy"]},
                        {"nodes": "0", "reasons": ["Underutilized", "Empty", "Drifted"]}]}
                }
            })),
        )
        .await
        .expect("nodepool");
    let names: Vec<String> = (0..11).map(|i| format!("paced-{i}")).collect();
    let node_of = initialized_claims(&client, "paced", &names, &["paced-1", "paced-2"]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            &node_of["paced-0"],
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-repair": "true"}}}),
            ),
        )
        .await
        .expect("veto");
    for name in ["paced-0", "paced-1", "paced-2"] {
        common::break_node(&client, &node_of[name]).await;
    }
    // One of the two is repaired; the other waits for the budget.
    let (first, second) = wait_for(
        "one repaired, one waiting",
        Duration::from_secs(90),
        || async {
            for (a, b) in [("paced-1", "paced-2"), ("paced-2", "paced-1")] {
                if deleting(&claims.get_opt(a).await.ok()?)
                    && said(&client, a, "NodeRepair", "replacing it").await
                    && said(
                        &client,
                        b,
                        "DisruptionBlocked",
                        "disruption budget of NodePool paced",
                    )
                    .await
                {
                    return Some((a, b));
                }
            }
            None
        },
    )
    .await
    .expect("the budget of 1 lets one repair go and holds the other");
    assert!(
        !deleting(&claims.get_opt(second).await.expect("get")),
        "{second} must wait while {first} takes the Unhealthy budget"
    );
    wait_for("the veto reported", Duration::from_secs(60), || async {
        said(
            &client,
            "paced-0",
            "DisruptionBlocked",
            "karpenter.sh/do-not-repair",
        )
        .await
        .then_some(())
    })
    .await
    .expect("do-not-repair says why");
    // The first is gone: the second takes the budget.
    release(&client, first).await;
    wait_for(
        &format!("{second} repaired"),
        Duration::from_secs(90),
        || async {
            (deleting(&claims.get_opt(second).await.ok()?)
                && said(&client, second, "NodeRepair", "replacing it").await)
                .then_some(())
        },
    )
    .await
    .expect("the second repair once the first is gone");
    release(&client, second).await;
    // The vetoed NodeClaim was never repaired while the other two were.
    assert!(!deleting(&claims.get_opt("paced-0").await.expect("get")));
    let metrics = common::scrape(metrics_addr).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("karpenter_nodeclaims_disrupted_total{")
                && l.contains("reason=\"unhealthy\"")
                && l.contains("nodepool=\"paced\"")
                && l.ends_with(" 2")),
        "{metrics}"
    );
}
