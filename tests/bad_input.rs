//! Bad-input matrix: malformed and hostile NodePools, NodeClasses, templates, hand-made
//! NodeClaims, pods, and objects edited or deleted behind the operator's back, all on one
//! testbed at once with the operator running as a process. Each row asserts what a user sees
//! (the API server's rejection, a condition with its reason, an event); meanwhile a healthy
//! NodePool keeps provisioning, and the operator neither panics nor exits.

mod common;

use std::time::Duration;

use common::process::Operator;
use common::{condition, from_json, nodeclaims, nodeclasses, nodepools};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider::{self, NO_NODE_ANNOTATION};
use testbed::{Options, Testbed, wait_for};

const NC_GROUP: &str = "karpenter.cluster.x-k8s.io";

/// What a row expects.
#[derive(Clone, Debug)]
enum Expect {
    /// The API server rejects the object; its message contains this.
    Rejected(&'static str),
    /// A condition on the NodePool, NodeClass or NodeClaim (by kind) named `object`.
    Condition {
        kind: &'static str,
        object: String,
        type_: &'static str,
        status: &'static str,
        reason: &'static str,
    },
    /// An event with this reason (or one of `A|B`) about `object`, from the operator
    /// (reporting controller `karpenter`).
    Event {
        object: String,
        reason: &'static str,
    },
    /// As `Event`, and the NodeClaim `object` is deleted.
    EventAndGone {
        object: String,
        reason: &'static str,
    },
    /// The pod `object` is nominated to a new NodeClaim named `onto*` anyway.
    Provisions { object: String, onto: &'static str },
}

struct Row {
    name: &'static str,
    objects: Vec<Value>,
    expect: Expect,
}

fn row(name: &'static str, objects: Vec<Value>, expect: Expect) -> Row {
    Row {
        name,
        objects,
        expect,
    }
}

fn cond(kind: &'static str, object: &str, type_: &'static str, reason: &'static str) -> Expect {
    Expect::Condition {
        kind,
        object: object.into(),
        type_,
        status: "False",
        reason,
    }
}

/// A NodePool `name` using NodeClass `class`, with `patch` merged into its spec.
fn pool(name: &str, class: &str, patch: Value) -> Value {
    let mut p = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": NC_GROUP, "kind": "ClusterAPINodeClass", "name": class},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In",
                                  "values": ["on-demand"]}]}},
            "disruption": {"consolidateAfter": "Never"}
        }
    });
    merge(&mut p["spec"], patch);
    p
}

/// A NodeClass `name` for Cluster `ns/c1`, with `spec` merged over the defaults.
fn class(name: &str, ns: &str, spec: Value) -> Value {
    let mut c = json!({
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
        "metadata": {"name": name},
        "spec": {"clusterRef": {"namespace": ns, "name": "c1"},
                 "bootstrap": {"dataSecretName": "bootstrap-data"},
                 "launchTimeout": "60s", "registrationTimeout": "60s"}
    });
    merge(&mut c["spec"], spec);
    c
}

/// A TestMachineTemplate `name` (selected only by NodeClass `tpl-<name>`) with annotations
/// and `spec.template.spec` (the test provider copies its capacity and nodeInfo to status).
fn template(name: &str, ns: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"node.cluster.x-k8s.io/karpenter-member": "", "badinput": name},
            "annotations": annotations},
        "spec": {"template": {"spec": spec}}
    })
}

/// The NodeClass that selects only template `name`.
fn class_for_template(name: &str, ns: &str) -> Value {
    class(
        &format!("tpl-{name}"),
        ns,
        json!({"machineTemplateSelector": {"matchLabels": {"badinput": name}}}),
    )
}

/// A hand-made NodeClaim of `pool` on NodeClass `class` with `requirements` and `cpu`.
fn claim(name: &str, pool: &str, class: &str, requirements: Value, cpu: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "spec": {"nodeClassRef": {"group": NC_GROUP, "kind": "ClusterAPINodeClass", "name": class},
                 "requirements": requirements,
                 "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}
    })
}

/// A pending pod for `pool` asking for `cpu`, with `affinity`.
fn pod(name: &str, ns: &str, pool: &str, cpu: &str, affinity: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeSelector": {"karpenter.sh/nodepool": pool},
                 "affinity": affinity,
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.invalid/pause",
                                 "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]}
    })
}

/// JSON merge patch: objects merge, null removes.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

/// Server-side applies one object; a 422/400 is returned as its message.
async fn apply(tb: &Testbed, obj: &Value, ns: &str) -> Result<(), String> {
    match tb.apply_yaml(&obj.to_string(), ns).await {
        Ok(_) => Ok(()),
        Err(testbed::Error::Kube(kube::Error::Api(s))) if s.code == 422 || s.code == 400 => {
            Err(s.message)
        }
        Err(e) => panic!("applying {}: {e}", obj["metadata"]["name"]),
    }
}

/// Events about `name` written by the operator: (reason, note).
async fn operator_events(client: &Client, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reporting_controller.as_deref() == Some("karpenter")
                })
                .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// The condition (status, reason, message) of `type_` on a cluster-scoped object.
async fn condition_of(
    client: &Client,
    kind: &str,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let api = match kind {
        "NodePool" => nodepools(client),
        "NodeClaim" => nodeclaims(client),
        _ => nodeclasses(client),
    };
    let obj = api.get(name).await.ok()?;
    let c = obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// Waits for a row's expectation; Err describes what was seen instead.
async fn check(client: &Client, ns: &str, expect: &Expect) -> Result<String, String> {
    check_within(client, ns, expect, Duration::from_secs(90)).await
}

async fn check_within(
    client: &Client,
    ns: &str,
    expect: &Expect,
    deadline: Duration,
) -> Result<String, String> {
    let result = match expect {
        Expect::Rejected(_) => unreachable!("checked at apply time"),
        Expect::Condition {
            kind,
            object,
            type_,
            status,
            reason,
        } => wait_for("condition", deadline, || async {
            let (s, r, m) = condition_of(client, kind, object, type_).await?;
            (s == *status && r == *reason).then_some(m)
        })
        .await
        .map_err(|_| format!("{kind} {object}: {type_} never {status}/{reason}")),
        Expect::Event { object, reason } | Expect::EventAndGone { object, reason } => {
            let gone = matches!(expect, Expect::EventAndGone { .. });
            wait_for("event", deadline, || async {
                let events = operator_events(client, object).await;
                let note = events
                    .iter()
                    .find(|(r, _)| reason.split('|').any(|want| want == r))?
                    .1
                    .clone();
                if gone && nodeclaims(client).get_opt(object).await.ok()?.is_some() {
                    return None;
                }
                Some(note)
            })
            .await
            .map_err(|_| format!("{object}: no {reason} event (gone: {gone})"))
        }
        Expect::Provisions { object, onto } => wait_for("nominated", deadline, || async {
            let events = operator_events(client, object).await;
            events
                .into_iter()
                .find(|(r, n)| r == "Nominated" && n.contains(&format!("nodeclaim/{onto}")))
                .map(|(_, n)| n)
        })
        .await
        .map_err(|_| format!("pod {ns}/{object} never nominated")),
    };
    match result {
        Ok(m) => Ok(m),
        Err(e) => Err(format!("{e}; seen: {}", observed(client, expect).await)),
    }
}

/// What there is to see for a row that did not meet its expectation.
async fn observed(client: &Client, expect: &Expect) -> String {
    match expect {
        Expect::Condition {
            kind,
            object,
            type_,
            ..
        } => format!("{:?}", condition_of(client, kind, object, type_).await),
        Expect::Event { object, .. }
        | Expect::EventAndGone { object, .. }
        | Expect::Provisions { object, .. } => {
            let claim = nodeclaims(client).get_opt(object).await.ok().flatten();
            format!(
                "events {:?}; claim status {:?}",
                operator_events(client, object).await,
                claim.map(|c| c.data["status"].clone())
            )
        }
        Expect::Rejected(_) => String::new(),
    }
}

fn fail(failures: &mut Vec<String>, message: String) {
    eprintln!("FAIL {message}");
    failures.push(message);
}

#[tokio::test]
async fn bad_inputs_get_precise_reasons_and_never_stall_a_healthy_pool() {
    let (tb, _provider, cluster) =
        common::prepare(common::default_templates(json!({})), Options::all()).await;
    let client = tb.client();
    let ns = cluster.namespace.clone();
    let apps = tb.temp_namespace().await.expect("namespace");
    // The healthy NodePool only sees template `small`.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &provider::test_machine_template_resource(),
    );
    templates
        .patch(
            "small",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "healthy"}}})),
        )
        .await
        .expect("label small");
    let healthy_class = class(
        "healthy",
        &ns,
        json!({"machineTemplateSelector": {"matchLabels": {"tier": "healthy"}}}),
    );
    apply(&tb, &healthy_class, &ns)
        .await
        .expect("healthy NodeClass");
    apply(&tb, &pool("healthy", "healthy", json!({})), &ns)
        .await
        .expect("healthy NodePool");
    // A template whose TestMachines get a providerID but no Node (for the shared providerID).
    let mut nonode = template(
        "nonode",
        &ns,
        json!({"karpenter.cluster.x-k8s.io/price": "0.1"}),
        json!({"capacity": {"cpu": "2", "memory": "4Gi"}}),
    );
    nonode["spec"]["template"]["metadata"] = json!({"annotations": {NO_NODE_ANNOTATION: ""}});
    apply(&tb, &nonode, &ns).await.expect("template nonode");
    let mut nonode_class = class_for_template("nonode", &ns);
    nonode_class["spec"]["registrationTimeout"] = json!("10m");
    apply(&tb, &nonode_class, &ns)
        .await
        .expect("nonode NodeClass");
    let mut operator = Operator::start(tb.kubeconfig(), tb.dir().join("logs/operator.log"), &[]);
    wait_for(
        "healthy NodePool Ready",
        Duration::from_secs(90),
        || async {
            let np = nodepools(&client).get("healthy").await.ok()?;
            (condition(&np, "Ready").as_deref() == Some("True")).then_some(())
        },
    )
    .await
    .expect("healthy NodePool Ready");
    // Victims of the behind-our-back rows, launched now.
    for name in ["victim-machine", "victim-node", "victim-labels"] {
        apply(
            &tb,
            &claim(name, "ghost", "healthy", json!([]), "100m"),
            &ns,
        )
        .await
        .expect("victim claim");
    }

    let req = |key: &str, op: &str, values: Value| json!({"template": {"spec": {"requirements": [{"key": key, "operator": op, "values": values}]}}});
    let ann = |k: &str, v: &str| {
        let mut a = json!({"karpenter.cluster.x-k8s.io/price": "0.1",
            "capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
            "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"});
        a[k] = json!(v);
        a
    };
    let ca = |k: &str| format!("capacity.cluster-autoscaler.kubernetes.io/{k}");
    let info =
        |arch: &str, os: &str| json!({"nodeInfo": {"architecture": arch, "operatingSystem": os}});
    let tpl_rows: Vec<(&'static str, &'static str, Value, Value)> = vec![
        (
            "template: cpu 'lots'",
            "cpu-garbage",
            ann(&ca("cpu"), "lots"),
            json!({}),
        ),
        (
            "template: memory 9999999999999Ei",
            "huge-memory",
            ann(&ca("memory"), "9999999999999Ei"),
            json!({}),
        ),
        (
            "template: no status, no capacity annotations",
            "no-capacity",
            json!({"karpenter.cluster.x-k8s.io/price": "0.1"}),
            json!({}),
        ),
        (
            "template: maxPods -3",
            "negative-maxpods",
            ann(&ca("maxPods"), "-3"),
            json!({}),
        ),
        (
            "template: price 'free'",
            "bad-price",
            ann("karpenter.cluster.x-k8s.io/price", "free"),
            json!({}),
        ),
        (
            "template: price -1",
            "negative-price",
            ann("karpenter.cluster.x-k8s.io/price", "-1"),
            json!({}),
        ),
        (
            "template: taints annotation 'novalue'",
            "bad-taint",
            ann(&ca("taints"), "novalue"),
            json!({}),
        ),
        (
            "template: labels annotation 'bad key!=x'",
            "bad-labels",
            ann(&ca("labels"), "bad key!=x"),
            json!({}),
        ),
        (
            "template: gpu-count 'many'",
            "bad-gpu-count",
            ann(&ca("gpu-count"), "many"),
            json!({}),
        ),
        (
            "template: architecture sparc",
            "sparc",
            ann(&ca("cpu"), "2"),
            info("sparc", "linux"),
        ),
        (
            "template: operating system plan9",
            "plan9",
            ann(&ca("cpu"), "2"),
            info("amd64", "plan9"),
        ),
    ];
    let mut rows = vec![
        // NodePools.
        row(
            "pool: unknown requirement operator",
            vec![pool(
                "bad-operator",
                "healthy",
                req("team", "Foo", json!(["a"])),
            )],
            Expect::Rejected("Foo"),
        ),
        row(
            "pool: requirement on kubernetes.io/hostname",
            vec![pool(
                "bad-hostname",
                "healthy",
                req("kubernetes.io/hostname", "In", json!(["x"])),
            )],
            Expect::Rejected("hostname"),
        ),
        row(
            "pool: In without values",
            vec![pool("bad-in", "healthy", req("team", "In", json!([])))],
            Expect::Rejected("must have a value"),
        ),
        row(
            "pool: Gt with a non-integer",
            vec![pool(
                "bad-gt",
                "healthy",
                req(
                    "karpenter.cluster.x-k8s.io/instance-cpu",
                    "Gt",
                    json!(["abc"]),
                ),
            )],
            Expect::Rejected("Gt"),
        ),
        row(
            "pool: unknown nodeClassRef kind",
            vec![pool(
                "bad-kind",
                "healthy",
                json!({"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "healthy"}}}}),
            )],
            cond(
                "NodePool",
                "bad-kind",
                "ValidationSucceeded",
                "NodeClassRefInvalid",
            ),
        ),
        // Its name is that of a Ready ClusterAPINodeClass, but the kind is another's.
        row(
            "pool: unknown nodeClassRef kind is not NodeClassReady",
            vec![],
            cond(
                "NodePool",
                "bad-kind",
                "NodeClassReady",
                "NodeClassRefInvalid",
            ),
        ),
        row(
            "pool: nodeClassRef to a missing NodeClass",
            vec![pool("missing-class", "absent", json!({}))],
            cond(
                "NodePool",
                "missing-class",
                "NodeClassReady",
                "NodeClassNotFound",
            ),
        ),
        row(
            "pool: negative limits",
            vec![
                pool(
                    "negative-limits",
                    "healthy",
                    json!({"limits": {"cpu": "-5"}}),
                ),
                pod(
                    "for-negative-limits",
                    &apps,
                    "negative-limits",
                    "100m",
                    json!(null),
                ),
            ],
            Expect::Event {
                object: "for-negative-limits".into(),
                reason: "FailedScheduling",
            },
        ),
        row(
            "pool: huge limits",
            vec![
                pool(
                    "huge-limits",
                    "healthy",
                    json!({"limits": {"cpu": "1e30", "memory": "9999999Ei"}}),
                ),
                pod("for-huge-limits", &apps, "huge-limits", "100m", json!(null)),
            ],
            Expect::Provisions {
                object: "for-huge-limits".into(),
                onto: "huge-limits-",
            },
        ),
        row(
            // Accepted, no condition or event says the schedule is unparsable (the budget is
            // treated as always active: fail closed); the pool still provisions.
            "pool: budget with an unparsable cron",
            vec![
                pool(
                    "bad-cron",
                    "healthy",
                    json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "0", "schedule": "x y z w v", "duration": "1h"}]}}),
                ),
                pod("for-bad-cron", &apps, "bad-cron", "100m", json!(null)),
            ],
            Expect::Provisions {
                object: "for-bad-cron".into(),
                onto: "bad-cron-",
            },
        ),
        row(
            // Disruption fails closed on it, and says so on the pool.
            "pool: budget with an unparsable cron is reported",
            vec![],
            Expect::Event {
                object: "bad-cron".into(),
                reason: "InvalidDisruptionBudget",
            },
        ),
        row(
            "pool: budget with a bad duration",
            vec![pool(
                "bad-duration",
                "healthy",
                json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "1", "schedule": "@daily", "duration": "1x"}]}}),
            )],
            Expect::Rejected("duration"),
        ),
        row(
            "pool: budget of 150%",
            vec![pool(
                "bad-budget",
                "healthy",
                json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "150%"}]}}),
            )],
            Expect::Rejected("nodes"),
        ),
        row(
            "pool: taint with an unknown effect",
            vec![pool(
                "bad-effect",
                "healthy",
                json!({"template": {"spec": {"taints": [{"key": "a", "effect": "Bogus"}]}}}),
            )],
            Expect::Rejected("Bogus"),
        ),
        row(
            "pool: taint with a malformed key",
            vec![pool(
                "bad-taint-key",
                "healthy",
                json!({"template": {"spec": {"taints": [{"key": "bad key!", "effect": "NoSchedule"}]}}}),
            )],
            Expect::Rejected("key"),
        ),
        row(
            "pool: consolidateAfter 'soon'",
            vec![pool(
                "bad-consolidate",
                "healthy",
                json!({"disruption": {"consolidateAfter": "soon"}}),
            )],
            Expect::Rejected("consolidateAfter"),
        ),
        row(
            "pool: limits 'lots'",
            vec![pool(
                "bad-limits",
                "healthy",
                json!({"limits": {"cpu": "lots"}}),
            )],
            Expect::Rejected("limits"),
        ),
        // NodeClasses.
        row(
            "class: selector matching nothing",
            vec![class(
                "selects-nothing",
                &ns,
                json!({"machineTemplateSelector": {"matchLabels": {"no": "such"}}}),
            )],
            cond(
                "ClusterAPINodeClass",
                "selects-nothing",
                "TemplatesReady",
                "NoTemplates",
            ),
        ),
        row(
            "class: missing Cluster",
            vec![class(
                "no-cluster",
                &ns,
                json!({"clusterRef": {"name": "absent"}}),
            )],
            cond(
                "ClusterAPINodeClass",
                "no-cluster",
                "ClusterReady",
                "ClusterNotFound",
            ),
        ),
        row(
            "class: missing bootstrap template",
            vec![class(
                "no-kct",
                &ns,
                json!({"bootstrap": {"dataSecretName": null, "configTemplateRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "absent"}}}),
            )],
            cond(
                "ClusterAPINodeClass",
                "no-kct",
                "BootstrapReady",
                "BootstrapTemplateNotFound",
            ),
        ),
        row(
            "class: bootstrap template of an unserved kind",
            vec![class(
                "widget-kct",
                &ns,
                json!({"bootstrap": {"dataSecretName": null, "configTemplateRef": {"apiGroup": "example.com", "kind": "WidgetTemplate", "name": "w"}}}),
            )],
            cond(
                "ClusterAPINodeClass",
                "widget-kct",
                "BootstrapReady",
                "BootstrapTemplateNotFound",
            ),
        ),
        row(
            "class: missing bootstrap Secret",
            vec![class(
                "no-secret",
                &ns,
                json!({"bootstrap": {"dataSecretName": "absent"}}),
            )],
            cond(
                "ClusterAPINodeClass",
                "no-secret",
                "BootstrapReady",
                "BootstrapSecretNotFound",
            ),
        ),
        row(
            "class: no bootstrap source",
            vec![class(
                "no-bootstrap",
                &ns,
                json!({"bootstrap": {"dataSecretName": null}}),
            )],
            Expect::Rejected("exactly one of configTemplateRef or dataSecretName"),
        ),
        row(
            "class: version 'banana'",
            vec![class("bad-version", &ns, json!({"version": "banana"}))],
            Expect::Rejected("version"),
        ),
        row(
            "class: launchTimeout '10 minutes'",
            vec![class(
                "bad-timeout",
                &ns,
                json!({"launchTimeout": "10 minutes"}),
            )],
            Expect::Rejected("launchTimeout"),
        ),
        row(
            "class: evictionHard of 200%",
            vec![class(
                "bad-eviction",
                &ns,
                json!({"kubelet": {"evictionHard": {"memory.available": "200%"}}}),
            )],
            Expect::Rejected("evictionHard"),
        ),
        row(
            "class: kubeReserved cpu -1",
            vec![class(
                "negative-reserved",
                &ns,
                json!({"kubelet": {"kubeReserved": {"cpu": "-1"}}}),
            )],
            cond(
                "ClusterAPINodeClass",
                "negative-reserved",
                "TemplatesReady",
                "InvalidKubeletConfiguration",
            ),
        ),
        // Hand-made NodeClaims.
        row(
            "claim: no nodeClassRef",
            vec![
                json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "no-class-ref"},
                "spec": {"requirements": []}}),
            ],
            Expect::Rejected("nodeClassRef"),
        ),
        row(
            "claim: impossible requirements",
            vec![claim(
                "impossible",
                "healthy",
                "healthy",
                json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no-such-type"]}]),
                "100m",
            )],
            Expect::EventAndGone {
                object: "impossible".into(),
                reason: "InsufficientCapacityError",
            },
        ),
        row(
            "claim: requests more than any template",
            vec![claim("too-big", "healthy", "healthy", json!([]), "100000")],
            Expect::EventAndGone {
                object: "too-big".into(),
                reason: "InsufficientCapacityError",
            },
        ),
        row(
            "claim: missing NodeClass",
            vec![claim("classless", "healthy", "absent", json!([]), "100m")],
            Expect::EventAndGone {
                object: "classless".into(),
                reason: "NodeClassNotReady",
            },
        ),
        row(
            "claim: NodeClass not ready",
            vec![claim(
                "unready-class",
                "healthy",
                "no-secret",
                json!([]),
                "100m",
            )],
            Expect::EventAndGone {
                object: "unready-class".into(),
                reason: "NodeClassNotReady",
            },
        ),
        // Pods.
        row(
            "pod: requests 1000 CPUs",
            vec![pod("huge-pod", &apps, "healthy", "1000", json!(null))],
            Expect::Event {
                object: "huge-pod".into(),
                reason: "FailedScheduling",
            },
        ),
        row(
            "pod: affinity to a zone that does not exist",
            vec![pod(
                "mars-pod",
                &apps,
                "healthy",
                "100m",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["mars"]}]}]}}}),
            )],
            Expect::Event {
                object: "mars-pod".into(),
                reason: "FailedScheduling",
            },
        ),
    ];
    for (row_name, name, annotations, spec) in tpl_rows {
        rows.push(row(
            row_name,
            vec![
                template(name, &ns, annotations, spec),
                class_for_template(name, &ns),
            ],
            cond(
                "ClusterAPINodeClass",
                &format!("tpl-{name}"),
                "TemplatesReady",
                "NoValidTemplates",
            ),
        ));
    }

    // Apply everything; rejections are checked at once.
    let mut failures: Vec<String> = Vec::new();
    let mut pending: Vec<&Row> = Vec::new();
    let started = std::time::Instant::now();
    let applied = futures::future::join_all(rows.iter().map(|r| {
        let (tb, ns) = (&tb, &ns);
        async move {
            for o in &r.objects {
                let target_ns = o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(ns)
                    .to_string();
                if let Err(message) = apply(tb, o, &target_ns).await {
                    return Some(message);
                }
            }
            None
        }
    }))
    .await;
    for (r, rejected) in rows.iter().zip(applied) {
        match (&r.expect, rejected) {
            (Expect::Rejected(part), Some(m)) if m.contains(part) => {
                eprintln!("ok   {:<48} rejected: {m}", r.name);
            }
            (Expect::Rejected(part), other) => fail(
                &mut failures,
                format!(
                    "{}: expected a rejection mentioning {part:?}, got {other:?}",
                    r.name
                ),
            ),
            (_, Some(m)) => fail(
                &mut failures,
                format!("{}: unexpectedly rejected: {m}", r.name),
            ),
            (_, None) => pending.push(r),
        }
    }
    // Meanwhile the healthy pool provisions for a new pending pod (1200m: one per node, so
    // the second one later needs a new NodeClaim too).
    apply(
        &tb,
        &pod("healthy-pod", &apps, "healthy", "1200m", json!(null)),
        &apps,
    )
    .await
    .expect("healthy pod");
    let healthy_expect = Expect::Provisions {
        object: "healthy-pod".into(),
        onto: "healthy-",
    };
    let healthy = check(&client, &apps, &healthy_expect);
    let checks = futures::future::join_all(pending.iter().map(|r| {
        let client = client.clone();
        let apps = apps.clone();
        async move {
            let result = check_within(&client, &apps, &r.expect, Duration::from_secs(90)).await;
            (r.name, result)
        }
    }));
    let (healthy, results) = tokio::join!(healthy, checks);
    match healthy {
        Ok(note) => eprintln!("ok   healthy pool provisions meanwhile: {note}"),
        Err(e) => fail(&mut failures, format!("healthy pool stalled: {e}")),
    }
    for (name, result) in results {
        match result {
            Ok(m) => eprintln!("ok   {name:<48} {m}"),
            Err(e) => fail(&mut failures, format!("{name}: {e}")),
        }
    }

    // Behind our back: the victims are Ready; their Machine, Node, labels are tampered with.
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &provider::machine_resource());
    let ready = |name: &'static str| {
        let client = client.clone();
        async move {
            wait_for(
                &format!("{name} Ready"),
                Duration::from_secs(90),
                || async {
                    let c = nodeclaims(&client).get(name).await.ok()?;
                    (condition(&c, "Ready").as_deref() == Some("True")).then_some(c)
                },
            )
            .await
            .expect("victim Ready")
        }
    };
    // The Machine's name is the plan's (with fencing it is not the NodeClaim's).
    let machine_of = |c: &DynamicObject| {
        c.annotations()
            .get("cluster.x-k8s.io/machine")
            .and_then(|m| m.rsplit('/').next())
            .unwrap_or_default()
            .to_string()
    };
    let victim = ready("victim-machine").await;
    machines
        .delete(&machine_of(&victim), &Default::default())
        .await
        .expect("delete Machine");
    let node_victim = ready("victim-node").await;
    let node = node_victim.data["status"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Api::<Node>::all(client.clone())
        .delete(&node, &Default::default())
        .await
        .expect("delete Node");
    let relabelled_machine = machine_of(&ready("victim-labels").await);
    machines
        .patch(
            &relabelled_machine,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"karpenter.cluster.x-k8s.io/nodeclaim": null,
                                                         "karpenter.sh/nodepool": "other"}}}),
            ),
        )
        .await
        .expect("edit Machine labels");
    // Two Nodes claim the providerID of a launched claim whose own Node never comes.
    apply(
        &tb,
        &claim("shared-pid", "ghost", "tpl-nonode", json!([]), "100m"),
        &ns,
    )
    .await
    .expect("shared-pid claim");
    let launched = wait_for("shared-pid launched", Duration::from_secs(90), || async {
        let c = nodeclaims(&client).get("shared-pid").await.ok()?;
        c.data["status"]["providerID"].as_str().map(str::to_string)
    })
    .await;
    let pid = match launched {
        Ok(pid) => pid,
        Err(e) => {
            let events = operator_events(&client, "shared-pid").await;
            let c = nodeclaims(&client)
                .get_opt("shared-pid")
                .await
                .ok()
                .flatten();
            panic!(
                "{e}: events {events:?}, claim {:?}",
                c.map(|c| c.data["status"].clone())
            );
        }
    };
    for n in ["shared-a", "shared-b"] {
        Api::<Node>::all(client.clone())
            .create(
                &PostParams::default(),
                &from_json(
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n},
                                  "spec": {"providerID": pid}}),
                ),
            )
            .await
            .expect("node with a shared providerID");
    }
    let behind: Vec<(&str, Expect)> = vec![
        (
            "Machine deleted behind our back",
            Expect::EventAndGone {
                object: "victim-machine".into(),
                // Cluster API deletes the Machine's Node first, or we see the Machine gone.
                reason: "MachineDeleted|NodeDeleted",
            },
        ),
        (
            "Node deleted behind our back",
            Expect::EventAndGone {
                object: "victim-node".into(),
                reason: "NodeDeleted",
            },
        ),
        (
            "providerID shared by two Nodes",
            cond(
                "NodeClaim",
                "shared-pid",
                "Registered",
                "MultipleNodesFound",
            ),
        ),
    ];
    for (name, expect) in &behind {
        match check(&client, &apps, expect).await {
            Ok(m) => eprintln!("ok   {name:<48} {m}"),
            Err(e) => fail(&mut failures, format!("{name}: {e}")),
        }
    }
    // The claim whose Machine lost our labels keeps its Machine (nothing deletes it) and
    // stays Ready; the healthy pool still provisions after all of the above.
    apply(
        &tb,
        &pod("healthy-pod-2", &apps, "healthy", "1200m", json!(null)),
        &apps,
    )
    .await
    .expect("second healthy pod");
    match check(
        &client,
        &apps,
        &Expect::Provisions {
            object: "healthy-pod-2".into(),
            onto: "healthy-",
        },
    )
    .await
    {
        Ok(_) => {}
        Err(e) => fail(
            &mut failures,
            format!("healthy pool stalled after the tampering: {e}"),
        ),
    }
    let relabelled = nodeclaims(&client)
        .get_opt("victim-labels")
        .await
        .ok()
        .flatten();
    let machine_left = machines.get_opt(&relabelled_machine).await.ok().flatten();
    if relabelled
        .as_ref()
        .and_then(|c| condition(c, "Ready"))
        .as_deref()
        != Some("True")
        || machine_left.is_none()
    {
        fail(
            &mut failures,
            format!(
                "Machine labels edited: claim {:?}, Machine present {}",
                relabelled.map(|c| c.data["status"]["conditions"].clone()),
                machine_left.is_some()
            ),
        );
    }
    // Event notes are for people: no Rust debug output (`Some("…")`, `None`) in them.
    let debug_notes: Vec<String> = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("karpenter"))
        .filter_map(|e| e.note)
        .filter(|n| n.contains("Some(") || n.contains("None"))
        .collect();
    if !debug_notes.is_empty() {
        fail(
            &mut failures,
            format!("event notes with Rust debug output: {debug_notes:?}"),
        );
    }
    operator.assert_healthy();
    let total = rows.len() + behind.len() + 2;
    eprintln!(
        "{total} rows checked {:.1}s after the first was applied",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {total} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{total} rows: bad inputs handled; the healthy pool kept provisioning; no panic");
}
