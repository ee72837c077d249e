//! Static NodePools (`spec.replicas`) end to end on the testbed: the scale subresource
//! (`kubectl scale nodepool`) drives the pool, a restart of the operator in the middle of a
//! scale from 0 never leaves more than `replicas` NodeClaims (Karpenter #2534), claims are
//! spread over the zones when asked, `limits.nodes` caps the pool, a scale down takes the
//! empty nodes before the one running a pod; a drifted static claim is replaced one for one
//! without going over `limits.nodes`, and an empty static node is never consolidated while a
//! dynamic pool's is. The cases take turns on the binary's shared control plane.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::gate::Gate;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::wait_for;

const POOL: &str = "fixed";

/// Static NodePool `fixed` (on-demand, `replicas`, `limits`, annotations), once Ready.
async fn create_static(client: &Client, replicas: i64, limits: Value, annotations: Value) {
    nodepools(client)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": POOL, "annotations": annotations},
                "spec": {
                    "replicas": replicas,
                    "limits": limits,
                    "template": {"spec": {
                        "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                                         "kind": "ClusterAPINodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type",
                                          "operator": "In", "values": ["on-demand"]}]}},
                    "disruption": {"consolidateAfter": "0s",
                                   "consolidationPolicy": "WhenEmptyOrUnderutilized",
                                   "budgets": [{"nodes": "100%"}]}
                }
            })),
        )
        .await
        .expect("static nodepool");
    wait_for("static NodePool Ready", Duration::from_secs(30), || async {
        let np = nodepools(client).get(POOL).await.ok()?;
        (condition(&np, "Ready").as_deref() == Some("True")).then_some(())
    })
    .await
    .expect("static NodePool Ready");
}

/// The NodeClaims of pool `pool`.
async fn claims_of(client: &Client, pool: &str) -> Vec<DynamicObject> {
    list(
        &nodeclaims(client),
        &ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")),
    )
    .await
}

fn deleting(c: &DynamicObject) -> bool {
    c.metadata.deletion_timestamp.is_some()
}

fn ready(c: &DynamicObject) -> bool {
    condition(c, "Ready").as_deref() == Some("True")
}

/// `kubectl scale nodepool fixed --replicas=n`: through the scale subresource.
async fn scale(client: &Client, n: i64) {
    nodepools(client)
        .patch_scale(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": n}})),
        )
        .await
        .expect("scale subresource");
}

/// Watches the pool's NodeClaims and keeps the most that existed at once (every create and
/// delete the API server reports, not a sample).
fn count_max(
    client: &Client,
    pool: &'static str,
) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let most = Arc::new(AtomicUsize::new(0));
    let (m, c) = (most.clone(), client.clone());
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().labels(&format!("karpenter.sh/nodepool={pool}"));
        let mut live: BTreeSet<String> = BTreeSet::new();
        let mut events = std::pin::pin!(watcher::watcher(nodeclaims(&c), config));
        while let Some(e) = events.next().await {
            match e {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    live.insert(o.name_any());
                }
                Ok(Event::Delete(o)) => {
                    live.remove(&o.name_any());
                }
                Ok(Event::Init) => live.clear(),
                Ok(Event::InitDone) | Err(_) => {}
            }
            m.fetch_max(live.len(), Ordering::SeqCst);
        }
    });
    (most, task)
}

/// Waits until the pool has exactly `n` NodeClaims, all Ready and none being deleted.
async fn settled(client: &Client, n: usize, within: Duration) -> Vec<DynamicObject> {
    wait_for(&format!("{n} static NodeClaims Ready"), within, || async {
        let all = claims_of(client, POOL).await;
        (all.len() == n && all.iter().all(|c| ready(c) && !deleting(c))).then_some(all)
    })
    .await
    .expect("static pool settles")
}

#[tokio::test]
async fn kubectl_scale_restarts_zone_spread_limits_and_scale_down_order() {
    let mut env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_static(
        &client,
        0,
        json!({"nodes": "3"}),
        json!({"karpenter.cluster.x-k8s.io/static-zone-spread": "true"}),
    )
    .await;
    let (most, watcher) = count_max(&client, POOL);

    // 0 → 3 through the scale subresource; the operator is killed and restarted in the
    // middle: an admission policy lets only the pool's first slot be created, so the scale
    // stops at 1 of 3 (a pass stops at its first refused create); the operator dies there
    // and the policy goes before its successor starts.
    let gate = MidScaleGate::close(&client).await;
    scale(&client, 3).await;
    wait_for(
        "a first static NodeClaim",
        Duration::from_secs(30),
        || async { (!claims_of(&client, POOL).await.is_empty()).then_some(()) },
    )
    .await
    .expect("the scale starts");
    env.operator.abort();
    let _ = (&mut env.operator).await;
    let at_restart = claims_of(&client, POOL).await.len();
    assert_eq!(
        at_restart, 1,
        "the restart lands mid-scale: some but not all of the 3 NodeClaims exist"
    );
    gate.open(&client).await;
    env.operator = start_operator(&env.tb);
    let claims = settled(&client, 3, Duration::from_secs(180)).await;
    assert_eq!(most.load(Ordering::SeqCst), 3, "never more than replicas");
    // The scale subresource reads status.nodes.
    wait_for("scale status 3", Duration::from_secs(30), || async {
        let s = nodepools(&client).get_scale(POOL).await.ok()?;
        (s.status?.replicas == 3).then_some(())
    })
    .await
    .expect("status.nodes counts the pool's nodes");
    // Spread over both zones (2 + 1).
    let nodes: Api<Node> = Api::all(client.clone());
    let mut zones: BTreeMap<String, usize> = BTreeMap::new();
    for n in nodes
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={POOL}")))
        .await
        .expect("nodes")
        .items
    {
        *zones
            .entry(
                n.labels()
                    .get("topology.kubernetes.io/zone")
                    .cloned()
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    assert_eq!(
        zones.values().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([1, 2]),
        "{zones:?}"
    );

    // 5 replicas, limits.nodes 3: the pool stays at 3 and says why.
    scale(&client, 5).await;
    wait_for("NodeLimitReached", Duration::from_secs(30), || async {
        events_for(&client, POOL)
            .await
            .iter()
            .any(|(reason, _)| reason == "NodeLimitReached")
            .then_some(())
    })
    .await
    .expect("the limit is reported");
    assert_eq!(claims_of(&client, POOL).await.len(), 3);
    assert_eq!(most.load(Ordering::SeqCst), 3, "limits.nodes holds");

    // A pod on one static node; 3 → 1 keeps that node (the empty ones go first).
    let ns = env.tb.temp_namespace().await.expect("namespace");
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &deployment(
                "pinned",
                1,
                "100m",
                "64Mi",
                json!({"nodeSelector": {"karpenter.sh/nodepool": POOL}}),
            ),
        )
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let busy_node = wait_for("the pod runs", Duration::from_secs(60), || async {
        pods_of(&pods, "pinned")
            .await
            .into_iter()
            .find(running)
            .map(|p| node_of(&p))
    })
    .await
    .expect("pod running on a static node");
    let busy_claim = claims
        .iter()
        .find(|c| c.data["status"]["nodeName"] == busy_node.as_str())
        .map(|c| c.name_any())
        .expect("the pod's node is a static NodeClaim's");
    scale(&client, 1).await;
    let left = settled(&client, 1, Duration::from_secs(120)).await;
    assert_eq!(left[0].name_any(), busy_claim, "the empty nodes went first");
    assert_eq!(most.load(Ordering::SeqCst), 3);
    watcher.abort();
}

#[tokio::test]
async fn drifted_static_claims_are_replaced_within_limits_and_never_consolidated() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    create_consolidating_nodepool(&client).await;
    create_static(&client, 2, json!({"nodes": "3"}), json!({})).await;
    let originals: BTreeSet<String> = settled(&client, 2, Duration::from_secs(120))
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    // Slot names may come back: a claim is told from its predecessor by its UID.
    let original_uids: BTreeSet<String> = claims_of(&client, POOL)
        .await
        .iter()
        .filter_map(|c| c.uid())
        .collect();

    // Sentinel: an empty node of the dynamic pool is consolidated...
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "web",
                1,
                "500m",
                "256Mi",
                json!({"nodeSelector": {"team": "web"}}),
            ),
        )
        .await
        .expect("deployment");
    let dynamic = wait_for(
        "a dynamic NodeClaim Ready",
        Duration::from_secs(120),
        || async { claims_of(&client, "default").await.into_iter().find(ready) },
    )
    .await
    .expect("dynamic claim");
    deployments
        .delete("web", &Default::default())
        .await
        .expect("delete deployment");
    wait_for(
        "the empty dynamic node consolidated",
        Duration::from_secs(120),
        || async {
            claims_of(&client, "default")
                .await
                .iter()
                .all(|c| c.name_any() != dynamic.name_any())
                .then_some(())
        },
    )
    .await
    .expect("dynamic empty node consolidated");
    // ... while the empty static ones, as old and as empty, are all still there.
    let now: Vec<DynamicObject> = claims_of(&client, POOL).await;
    assert_eq!(
        now.iter().map(|c| c.name_any()).collect::<BTreeSet<_>>(),
        originals,
        "static nodes are never consolidated"
    );
    assert!(
        now.iter()
            .all(|c| !deleting(c) && condition(c, "Consolidatable").is_none())
    );

    // The template changes: both drift and are replaced one for one, never above
    // limits.nodes (3: one replacement at a time).
    let (most, watcher) = count_max(&client, POOL);
    nodepools(&client)
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})),
        )
        .await
        .expect("patch template");
    let replaced = wait_for(
        "both static claims replaced",
        Duration::from_secs(240),
        || async {
            let all = claims_of(&client, POOL).await;
            let done = all.len() == 2
                && all.iter().all(|c| {
                    ready(c) && !deleting(c) && !c.uid().is_some_and(|u| original_uids.contains(&u))
                });
            done.then_some(all)
        },
    )
    .await;
    let Ok(replaced) = replaced else {
        let state: Vec<String> = claims_of(&client, POOL)
            .await
            .iter()
            .map(|c| {
                format!(
                    "{} deleting={} conditions={}",
                    c.name_any(),
                    deleting(c),
                    c.data["status"]["conditions"]
                )
            })
            .collect();
        panic!("drift not replaced in time: {state:#?}");
    };
    watcher.abort();
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "limits.nodes 3 held during the roll"
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "surge-first: a replacement before each delete"
    );
    for c in &replaced {
        assert_eq!(c.labels().get("rev").map(String::as_str), Some("2"));
        // limits.nodes 3 leaves room for one replacement at a time: both surge-first.
        assert!(
            c.labels()
                .contains_key("karpenter.cluster.x-k8s.io/disruption-command"),
            "{} is a surge-first replacement",
            c.name_any()
        );
    }
}

/// A ValidatingAdmissionPolicy that refuses every NodeClaim of pool `fixed` but its first
/// slot's (`scale::slot_name(pool, 0)`): a scale stops after one create.
struct MidScaleGate(Gate);

const GATE: &str = "static-pools-mid-scale-gate";

impl MidScaleGate {
    /// A dry-run create of a NodeClaim of the pool that is not its first slot.
    async fn probe(client: &Client) -> Result<(), kube::Error> {
        let mut probe = nodeclaim("gate-probe", json!([]));
        probe.metadata.labels =
            Some([("karpenter.sh/nodepool".to_string(), POOL.to_string())].into());
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        nodeclaims(client)
            .create(&dry_run, &probe)
            .await
            .map(|_| ())
    }

    /// Installs the policy and returns once the API server enforces it (a dry-run create
    /// of another slot is refused).
    async fn close(client: &Client) -> MidScaleGate {
        let pool: api::NodePool = from_json(
            serde_json::to_value(nodepools(client).get(POOL).await.expect("pool"))
                .expect("pool json"),
        );
        let first = karpenter_core::static_pools::scale::slot_name(&pool, 0);
        let expression = format!(
            "!has(object.metadata.labels) || !('karpenter.sh/nodepool' in object.metadata.labels) \
             || object.metadata.labels['karpenter.sh/nodepool'] != '{POOL}' \
             || object.metadata.name == '{first}'"
        );
        let rules = json!([{"apiGroups": ["karpenter.sh"], "apiVersions": ["v1"],
                            "operations": ["CREATE"], "resources": ["nodeclaims"]}]);
        MidScaleGate(
            Gate::close(
                client,
                GATE,
                rules,
                &expression,
                "mid-scale gate: only the first slot",
                || Self::probe(client),
            )
            .await,
        )
    }

    /// Removes the policy and returns once the API server no longer enforces it.
    async fn open(self, client: &Client) {
        self.0.open(client, || Self::probe(client)).await;
    }
}
