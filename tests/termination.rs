//! Termination drains the Node before the Machine is deleted, on the testbed with the real
//! Cluster API Machine controller, kwok and the operator (in process): pods leave through the
//! Eviction API (a PodDisruptionBudget that allows nothing holds the NodeClaim and its
//! Machine), DaemonSet pods after the others, and the NodeClaim's terminationGracePeriod
//! bounds the drain (pods deleted, PDBs and do-not-disrupt bypassed, then the Machine goes).
//! The Machine is deleted with Cluster API's own drain excluded, and the MachineDrainRules
//! selecting it (and the `cluster.x-k8s.io/drain` pod label) are honoured by our drain.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider;
use testbed::wait_for;

const WAIT: Duration = Duration::from_secs(90);

/// Creates the NodeClaim `name` (`spec` merged into its spec) and waits until it is Ready:
/// its Node's name.
async fn ready_claim(client: &Client, name: &str, spec: Value) -> String {
    let mut nc = nodeclaim(name, json!([]));
    if let (Some(s), Some(extra)) = (nc.data["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    nodeclaims(client)
        .create(&PostParams::default(), &nc)
        .await
        .expect("nodeclaim");
    let ready = wait_for("NodeClaim Ready", WAIT, || async {
        let nc = nodeclaims(client).get(name).await.ok()?;
        (condition(&nc, "Ready").as_deref() == Some("True")).then_some(nc)
    })
    .await
    .expect("NodeClaim Ready");
    ready.data["status"]["nodeName"]
        .as_str()
        .expect("nodeName")
        .to_string()
}

/// A pod bound to `node` (labels `app: <name>`), `extra` merged into its JSON.
fn pod(name: &str, node: &str, extra: Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "tolerations": [{"key": "team", "operator": "Exists"}],
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]
        }
    });
    merge(&mut v, extra);
    from_json(v)
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// A PDB over `app: <name>` that allows no disruption.
fn pdb(name: &str) -> PodDisruptionBudget {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}
    }))
}

fn deleting(p: &Option<Pod>) -> bool {
    p.as_ref()
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
}

/// Whether the API server marked the pod as evicted through the Eviction API.
fn evicted_by_api(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.reason.as_deref() == Some("EvictionByEvictionAPI")
            })
        })
}

/// The operator's `karpenter_pods_eviction_requests_total{code}` (0 before the first).
async fn eviction_requests(env: &Env, code: &str) -> f64 {
    let page = scrape(env.metrics_addr).await;
    let series = format!("karpenter_pods_eviction_requests_total{{code=\"{code}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until the operator has asked for an eviction answered `code` more than `than`
/// times (proves the drain loop ran again).
async fn more_eviction_requests(env: &Env, code: &str, than: f64) {
    wait_for("another eviction request", WAIT, || async {
        (eviction_requests(env, code).await > than).then_some(())
    })
    .await
    .expect("the drain asked again");
}

async fn machine(client: &Client, ns: &str, claim: &str) -> Option<DynamicObject> {
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &provider::machine_resource());
    machines
        .get_opt(&machine_name(claim))
        .await
        .expect("get machine")
}

fn machine_deleting(m: &Option<DynamicObject>) -> bool {
    m.as_ref()
        .is_none_or(|m| m.metadata.deletion_timestamp.is_some())
}

/// Waits until the NodeClaim, its Machine and its Node are gone.
async fn all_gone(client: &Client, ns: &str, claim: &str, node: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for("NodeClaim, Machine and Node gone", WAIT, || async {
        let gone = nodeclaims(client).get_opt(claim).await.ok()?.is_none()
            && machine(client, ns, claim).await.is_none()
            && nodes.get_opt(node).await.ok()?.is_none();
        gone.then_some(())
    })
    .await
    .expect("terminated");
}

/// What a watch saw happen to the test's pods, in order: `(pod, what)` with `what` one of
/// `evicted` (the API server's `DisruptionTarget` condition, reason `EvictionByEvictionAPI`:
/// the pod went through the Eviction API), `deleting` (a deletionTimestamp) and `deleted`.
type Seen = Arc<Mutex<Vec<(String, &'static str)>>>;

/// Creates `list` and waits until kwok runs them all; then watches the pods of `pods`.
async fn run_pods(pods: &Api<Pod>, list: Vec<Pod>) -> (Seen, tokio::task::JoinHandle<()>) {
    let n = list.len();
    for p in list {
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    wait_for("pods running", WAIT, || async {
        let all = pods
            .list(&Default::default())
            .await
            .expect("list pods")
            .items;
        (all.iter().filter(|p| running(p)).count() == n).then_some(())
    })
    .await
    .expect("kwok runs the pods");
    watch_pods(pods.clone())
}

fn watch_pods(pods: Api<Pod>) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()));
        while let Some(e) = events.next().await {
            let (p, deleted) = match e {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                Ok(watcher::Event::Delete(p)) => (p, true),
                _ => continue,
            };
            let name = p.name_any();
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            let mut note = |what: &'static str| {
                if !log.iter().any(|(n, w)| *n == name && *w == what) {
                    log.push((name.clone(), what));
                }
            };
            if evicted_by_api(&p) {
                note("evicted");
            }
            if p.metadata.deletion_timestamp.is_some() {
                note("deleting");
            }
            if deleted {
                note("deleted");
            }
        }
    });
    (seen, task)
}

/// Where `(pod, what)` is in `seen`.
fn at(seen: &Seen, pod: &str, what: &str) -> Option<usize> {
    seen.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .position(|(n, w)| n == pod && *w == what)
}

async fn seen(seen: &Seen, pod: &str, what: &str) -> usize {
    wait_for(&format!("{pod} {what}"), WAIT, || async {
        at(seen, pod, what)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", seen.lock().map(|l| l.clone())))
}

#[tokio::test]
async fn drain_evicts_through_the_eviction_api_in_groups_and_waits_for_a_pdb() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let node = ready_claim(&client, "drain-a1", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // A DaemonSet that runs nowhere, as the owner of the DaemonSet pod below.
    let dsets: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let ds = dsets
        .create(
            &PostParams::default(),
            &from_json(json!({
                "metadata": {"name": "agent"},
                "spec": {
                    "selector": {"matchLabels": {"ds": "agent"}},
                    "template": {
                        "metadata": {"labels": {"ds": "agent"}},
                        "spec": {"nodeSelector": {"no-such": "node"},
                                 "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10"}]}
                    }
                }
            })),
        )
        .await
        .expect("daemonset");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    pdbs.create(&PostParams::default(), &pdb("guarded"))
        .await
        .expect("pdb");
    let daemon = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
        "uid": ds.metadata.uid.clone().unwrap_or_default()}]}});
    let tolerant = json!({"spec": {"tolerations": [
        {"key": "team", "operator": "Exists"},
        {"key": "karpenter.sh/disrupted", "operator": "Exists"}]}});
    let (log, _watch) = run_pods(
        &pods,
        vec![
            pod("app", &node, json!({})),
            pod("guarded", &node, json!({})),
            pod("agent-x", &node, daemon),
            pod("tolerant", &node, tolerant),
        ],
    )
    .await;

    nodeclaims(&client)
        .delete("drain-a1", &DeleteParams::default())
        .await
        .expect("delete nodeclaim");

    // The plain pod goes through the Eviction API; the PDB refuses the guarded one; the
    // DaemonSet pod waits for both; the Machine stays while the drain keeps asking.
    seen(&log, "app", "evicted").await;
    let refused = wait_for("a PDB refusal", WAIT, || async {
        let n = eviction_requests(&env, "429").await;
        (n > 0.0).then_some(n)
    })
    .await
    .expect("the eviction of guarded is refused (429)");
    seen(&log, "app", "deleted").await;
    more_eviction_requests(&env, "429", refused).await;
    more_eviction_requests(&env, "429", refused + 1.0).await;
    for p in ["guarded", "agent-x"] {
        assert_eq!(at(&log, p, "deleting"), None, "{p}: {log:?}");
    }
    assert!(!machine_deleting(&machine(&client, &ns, "drain-a1").await));
    let n: Node = Api::all(client.clone()).get(&node).await.expect("node");
    assert!(
        n.spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule"),
        "the Node is tainted"
    );
    let claim = nodeclaims(&client).get("drain-a1").await.expect("claim");
    assert_eq!(condition(&claim, "Drained").as_deref(), Some("Unknown"));
    let events = events_for(&client, &node).await;
    assert!(
        events
            .iter()
            .any(|(r, note)| r == "FailedDraining" && note.contains("guarded")),
        "{events:?}"
    );

    // Positive control: once the PDB allows (deleted), guarded is evicted, and only after it
    // has gone the DaemonSet pod; then the Machine is deleted, with Cluster API's own drain
    // excluded.
    pdbs.delete("guarded", &DeleteParams::default())
        .await
        .expect("pdb deleted");
    seen(&log, "guarded", "evicted").await;
    let guarded_gone = seen(&log, "guarded", "deleted").await;
    let agent = seen(&log, "agent-x", "evicted").await;
    assert!(agent > guarded_gone, "{log:?}");
    let m = wait_for("Machine deleting", WAIT, || async {
        let m = machine(&client, &ns, "drain-a1").await?;
        m.metadata.deletion_timestamp.is_some().then_some(m)
    })
    .await
    .expect("Machine deleted after the drain");
    assert!(at(&log, "agent-x", "deleted").is_some(), "{log:?}");
    assert!(
        m.annotations()
            .contains_key("machine.cluster.x-k8s.io/exclude-node-draining"),
        "{:?}",
        m.annotations()
    );
    // The pod tolerating the disrupted taint was never evicted.
    assert_eq!(at(&log, "tolerant", "evicted"), None, "{log:?}");
    all_gone(&client, &ns, "drain-a1", &node).await;
}

#[tokio::test]
async fn termination_grace_period_bounds_the_drain() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let node = ready_claim(
        &client,
        "drain-b1",
        json!({"terminationGracePeriod": "20s"}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    pdbs.create(&PostParams::default(), &pdb("guarded"))
        .await
        .expect("pdb");
    let keep = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}});
    for p in [pod("guarded", &node, json!({})), pod("keep", &node, keep)] {
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    wait_for("pods running", WAIT, || async {
        let all = pods.list(&Default::default()).await.ok()?.items;
        (all.iter().filter(|p| running(p)).count() == 2).then_some(())
    })
    .await
    .expect("kwok runs the pods");

    nodeclaims(&client)
        .delete("drain-b1", &DeleteParams::default())
        .await
        .expect("delete nodeclaim");
    let started = Instant::now();
    let claim = wait_for("termination time recorded", WAIT, || async {
        let c = nodeclaims(&client).get("drain-b1").await.ok()?;
        c.annotations()
            .contains_key("karpenter.sh/nodeclaim-termination-timestamp")
            .then_some(c)
    })
    .await
    .expect("annotated");
    let deleted = claim
        .metadata
        .deletion_timestamp
        .clone()
        .expect("deleting")
        .0;
    let at: k8s_openapi::jiff::Timestamp =
        claim.annotations()["karpenter.sh/nodeclaim-termination-timestamp"]
            .parse()
            .expect("RFC 3339");
    assert_eq!(at.as_second(), deleted.as_second() + 20);

    // Before the deadline (less its pods' 5 s grace): the PDB refuses, do-not-disrupt is
    // waited for, the Machine stays (while the drain keeps asking).
    let refused = wait_for("a PDB refusal", WAIT, || async {
        let n = eviction_requests(&env, "429").await;
        (n > 0.0).then_some(n)
    })
    .await
    .expect("refused");
    more_eviction_requests(&env, "429", refused).await;
    if started.elapsed() < Duration::from_secs(12) {
        assert!(!deleting(&pods.get_opt("guarded").await.expect("get")));
        assert!(!deleting(&pods.get_opt("keep").await.expect("get")));
        assert!(!machine_deleting(&machine(&client, &ns, "drain-b1").await));
    }

    // Past it: both pods deleted (not evicted), then the Machine.
    wait_for("pods deleted past the deadline", WAIT, || async {
        let g = pods.get_opt("guarded").await.ok()?;
        let k = pods.get_opt("keep").await.ok()?;
        ((g.is_none() || deleting(&g)) && (k.is_none() || deleting(&k))).then_some(())
    })
    .await
    .expect("deleted at the termination time");
    assert!(
        started.elapsed() >= Duration::from_secs(13),
        "not before deadline - grace: {:?}",
        started.elapsed()
    );
    // The event follows the deletion (written after it): waited for.
    for name in ["guarded", "keep"] {
        let disrupted = wait_for("a Disrupted event", WAIT, || async {
            events_for(&client, name)
                .await
                .iter()
                .any(|(r, _)| r == "Disrupted")
                .then_some(())
        })
        .await;
        assert!(
            disrupted.is_ok(),
            "{name}: {:?}",
            events_for(&client, name).await
        );
    }
    all_gone(&client, &ns, "drain-b1", &node).await;
}

fn drain_rules(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ar(
            "cluster.x-k8s.io",
            "v1beta2",
            "MachineDrainRule",
            "machinedrainrules",
        ),
    )
}

#[tokio::test]
async fn machine_drain_rules_selecting_our_machines_are_honoured() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let ns = env.cluster.namespace.clone();
    let node = ready_claim(&client, "drain-r1", json!({})).await;
    let ours = json!([{"selector": {"matchExpressions": [
        {"key": "karpenter.cluster.x-k8s.io/nodeclaim", "operator": "Exists"}]}}]);
    let rules = drain_rules(&client, &ns);
    for (name, drain, machines, pods) in [
        // Skips `skipped` pods of this namespace (the namespaceSelector is read).
        (
            "a-skip",
            json!({"behavior": "Skip"}),
            ours.clone(),
            json!([{"selector": {"matchLabels": {"app": "skipped"}},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}]),
        ),
        // Drains `late` after the others.
        (
            "b-order",
            json!({"behavior": "Drain", "order": 10}),
            ours.clone(),
            json!([{"selector": {"matchLabels": {"app": "late"}}}]),
        ),
        // Negative control: a rule for Machines that are not ours skips everything.
        (
            "0-not-ours",
            json!({"behavior": "Skip"}),
            json!([{"selector": {"matchLabels": {"pool": "not-ours"}}}]),
            json!([{"selector": {}}]),
        ),
    ] {
        let rule: DynamicObject = from_json(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDrainRule",
            "metadata": {"name": name},
            "spec": {"drain": drain, "machines": machines, "pods": pods},
        }));
        rules
            .create(&PostParams::default(), &rule)
            .await
            .expect("MachineDrainRule");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    pdbs.create(&PostParams::default(), &pdb("guarded"))
        .await
        .expect("pdb");
    let labelled = json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "Skip"}}});
    let (log, _watch) = run_pods(
        &pods,
        vec![
            pod("app", &node, json!({})),
            pod("guarded", &node, json!({})),
            pod("late", &node, json!({})),
            pod("skipped", &node, json!({})),
            pod("labelled", &node, labelled),
        ],
    )
    .await;

    nodeclaims(&client)
        .delete("drain-r1", &DeleteParams::default())
        .await
        .expect("delete nodeclaim");

    // The control pod (no rule: order 0) is evicted; the order-10 one waits while an order-0
    // pod is left (guarded: its PDB refuses, pass after pass).
    seen(&log, "app", "evicted").await;
    let refused = wait_for("a PDB refusal", WAIT, || async {
        let n = eviction_requests(&env, "429").await;
        (n > 0.0).then_some(n)
    })
    .await
    .expect("the eviction of guarded is refused (429)");
    more_eviction_requests(&env, "429", refused).await;
    more_eviction_requests(&env, "429", refused + 1.0).await;
    assert_eq!(at(&log, "late", "evicted"), None, "{log:?}");
    // Once the order-0 pods have left, the order-10 one goes; the skipped ones are neither
    // evicted nor waited for: the Machine is deleted with them still on the Node.
    pdbs.delete("guarded", &DeleteParams::default())
        .await
        .expect("pdb deleted");
    let guarded_gone = seen(&log, "guarded", "deleted").await;
    let late = seen(&log, "late", "evicted").await;
    assert!(late > guarded_gone, "{log:?}");
    wait_for("Machine deleting", WAIT, || async {
        machine_deleting(&machine(&client, &ns, "drain-r1").await).then_some(())
    })
    .await
    .expect("Machine deleted after the drain");
    for p in ["skipped", "labelled"] {
        assert_eq!(at(&log, p, "evicted"), None, "{p}: {log:?}");
        assert_eq!(at(&log, p, "deleting"), None, "{p}: {log:?}");
        let events = events_for(&client, p).await;
        assert!(
            !events.iter().any(|(r, _)| r == "Evicted"),
            "{p}: {events:?}"
        );
    }
    let events = events_for(&client, "late").await;
    assert!(events.iter().any(|(r, _)| r == "Evicted"), "{events:?}");
    all_gone(&client, &ns, "drain-r1", &node).await;
}
