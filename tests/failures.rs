//! Failure paths that always make progress: a launch that can never succeed is given up
//! (Launched=False with a precise reason, an event, the NodeClaim deleted so the provisioner
//! plans its pods again) instead of being retried until `expireAfter`.

mod common;

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
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
    let env = common::env(common::default_templates(json!({}))).await;
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
    // The Cluster is not there: retried (it may appear), until the launch timeout (60 s).
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
    let machines: Api<api::Machine> = Api::namespaced(client.clone(), &ns);
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

    // A NodeClaim re-applied under another name (its launch plan copied, a new UID): the
    // plan's Machine is another's, so the copy is refused, and its termination deletes
    // nothing of the original's.
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
