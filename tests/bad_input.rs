//! Bad-input matrix: malformed and hostile NodePools, NodeClasses, templates, hand-made
//! NodeClaims, pods, and objects edited or deleted behind the operator's back, all on one
//! testbed at once with the operator running as a process. Each row asserts what a user sees
//! (the API server's rejection naming the field path, a condition with its reason, an event);
//! meanwhile a healthy NodePool keeps provisioning, and the operator neither panics nor exits.
//!
//! The rows are data ([`rejected_rows`], [`pool_rows`], [`class_rows`], [`claim_and_pod_rows`],
//! [`template_rows`]) run by one runner. Rejected rows name their objects `bi-NN`, so the
//! field path the API server reports can only come from the field, not from an echoed name.
//! Every bad template has a valid twin selected by the same NodeClass: the twin is used and
//! only the bad one is excluded, for its field.

mod common;

use std::time::Duration;

use common::process::Operator;
use common::{condition, from_json, nodeclaims, nodeclasses, nodepools};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::provider::{self, NO_NODE_ANNOTATION, TestProvider};
use testbed::{Options, Testbed, wait_for};

const NC_GROUP: &str = "karpenter.cluster.x-k8s.io";
const PRICE: &str = "karpenter.cluster.x-k8s.io/price";

/// What a row expects.
#[derive(Clone, Debug)]
enum Expect {
    /// The API server rejects the object with an error on this field path (the message
    /// holds `<path>: `, e.g. `spec.limits.cpu: Invalid value: ...`) that says `says` (a
    /// rule's own words, for a path with several rules; empty: any).
    Rejected {
        path: &'static str,
        says: &'static str,
    },
    /// A condition on the NodePool, NodeClass or NodeClaim (by kind) named `object`.
    Condition {
        kind: &'static str,
        object: String,
        type_: &'static str,
        status: &'static str,
        reason: &'static str,
    },
    /// The NodeClass `class` selects the bad template `bad` and its valid twin `twin`: it is
    /// `TemplatesReady=True/TemplatesExcluded`, its message excludes `bad` for `field` (the
    /// reason starts with it), and its instance types come from `twin` and never from `bad`.
    TwinUsed {
        class: String,
        bad: String,
        twin: String,
        field: String,
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

fn event(object: &str, reason: &'static str) -> Expect {
    Expect::Event {
        object: object.into(),
        reason,
    }
}

fn gone(object: &str, reason: &'static str) -> Expect {
    Expect::EventAndGone {
        object: object.into(),
        reason,
    }
}

fn provisions(object: &str, onto: &'static str) -> Expect {
    Expect::Provisions {
        object: object.into(),
        onto,
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

/// A TestMachineTemplate `name` labelled `badinput=<group>` (selected only by NodeClass
/// `<group>`) with annotations and `spec.template.spec` (the test provider copies its
/// capacity and nodeInfo to status).
fn template(name: &str, group: &str, ns: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"node.cluster.x-k8s.io/karpenter-member": "", "badinput": group},
            "annotations": annotations},
        "spec": {"template": {"spec": spec}}
    })
}

/// The NodeClass `group` that selects only the templates labelled `badinput=<group>`.
fn class_for_templates(group: &str, ns: &str) -> Value {
    class(
        group,
        ns,
        json!({"machineTemplateSelector": {"matchLabels": {"badinput": group}}}),
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

/// Events about `name` written by the operator: (reason, note); None when the list fails.
async fn operator_events(client: &Client, name: &str) -> Option<Vec<(String, String)>> {
    let api: Api<Event> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.reporting_controller.as_deref() == Some("karpenter")
            })
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect(),
    )
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

/// The templates behind the instance types of NodeClass `class`'s status.
async fn instance_type_templates(client: &Client, class: &str) -> Option<Vec<String>> {
    let nc = nodeclasses(client).get(class).await.ok()?;
    Some(
        nc.data["status"]["instanceTypes"]
            .as_array()?
            .iter()
            .flat_map(|it| it["templates"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
    )
}

/// The part of a `TemplatesReady` message about template `name` (`<Kind> <ns>/<name>: ...`).
fn exclusion_of<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    let marker = format!("/{name}: ");
    let at = message.find(&marker)?;
    let rest = &message[at + marker.len()..];
    Some(rest.split("; ").next().unwrap_or(rest))
}

/// Waits for a row's expectation; Err describes what was seen instead.
async fn check(client: &Client, expect: &Expect, deadline: Duration) -> Result<String, String> {
    let result = match expect {
        Expect::Rejected { .. } => unreachable!("checked at apply time"),
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
        Expect::TwinUsed {
            class,
            bad,
            twin,
            field,
        } => wait_for("twin used", deadline, || async {
            let (s, r, m) = condition_of(client, "NodeClass", class, "TemplatesReady").await?;
            let why = exclusion_of(&m, bad)?;
            let used = instance_type_templates(client, class).await?;
            (s == "True"
                && r == "TemplatesExcluded"
                && why.starts_with(field.as_str())
                && used.iter().any(|t| t == twin)
                && !used.iter().any(|t| t == bad))
            .then(|| format!("{bad} excluded ({why}); {twin} used"))
        })
        .await
        .map_err(|_| {
            format!("NodeClass {class}: never {bad} excluded for {field:?} with {twin} used")
        }),
        Expect::Event { object, reason } | Expect::EventAndGone { object, reason } => {
            let gone = matches!(expect, Expect::EventAndGone { .. });
            wait_for("event", deadline, || async {
                let events = operator_events(client, object).await?;
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
            operator_events(client, object)
                .await?
                .into_iter()
                .find(|(r, n)| r == "Nominated" && n.contains(&format!("nodeclaim/{onto}")))
                .map(|(_, n)| n)
        })
        .await
        .map_err(|_| format!("pod {object} never nominated")),
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
        Expect::TwinUsed { class, .. } => format!(
            "{:?}; instance types from {:?}",
            condition_of(client, "NodeClass", class, "TemplatesReady").await,
            instance_type_templates(client, class).await
        ),
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
        Expect::Rejected { .. } => String::new(),
    }
}

/// Objects the API server must refuse, each with the field path it must name. Every object
/// is named `bi-NN`: no path segment can be an echo of the name.
fn rejected_rows(ns: &str) -> Vec<Row> {
    let req = |key: &str, op: &str, values: Value| json!({"template": {"spec": {"requirements": [{"key": key, "operator": op, "values": values}]}}});
    let budget = |b: Value| json!({"disruption": {"consolidateAfter": "Never", "budgets": [b]}});
    let taint = |t: Value| json!({"template": {"spec": {"taints": [t]}}});
    let reqs = "spec.template.spec.requirements";
    // (row, object, field path, the rule's words when the path has several rules)
    let table: Vec<(&'static str, Value, &'static str, &'static str)> = vec![
        (
            "pool: unknown requirement operator",
            pool("bi-01", "healthy", req("team", "Foo", json!(["a"]))),
            "spec.template.spec.requirements[0].operator",
            "",
        ),
        (
            "pool: requirement on kubernetes.io/hostname",
            pool(
                "bi-02",
                "healthy",
                req("kubernetes.io/hostname", "In", json!(["x"])),
            ),
            "spec.template.spec.requirements[0].key",
            "",
        ),
        (
            "pool: In without values",
            pool("bi-03", "healthy", req("team", "In", json!([]))),
            reqs,
            "requirements with operator 'In' must have a value defined",
        ),
        (
            "pool: Gt with a non-integer",
            pool(
                "bi-04",
                "healthy",
                req(
                    "karpenter.cluster.x-k8s.io/instance-cpu",
                    "Gt",
                    json!(["abc"]),
                ),
            ),
            reqs,
            "must have a single positive integer value",
        ),
        (
            "pool: budget with a bad duration",
            pool(
                "bi-05",
                "healthy",
                budget(json!({"nodes": "1", "schedule": "@daily", "duration": "1x"})),
            ),
            "spec.disruption.budgets[0].duration",
            "",
        ),
        (
            "pool: budget of 150%",
            pool("bi-06", "healthy", budget(json!({"nodes": "150%"}))),
            "spec.disruption.budgets[0].nodes",
            "",
        ),
        (
            "pool: taint with an unknown effect",
            pool(
                "bi-07",
                "healthy",
                taint(json!({"key": "a", "effect": "Bogus"})),
            ),
            "spec.template.spec.taints[0].effect",
            "",
        ),
        (
            "pool: taint with a malformed key",
            pool(
                "bi-08",
                "healthy",
                taint(json!({"key": "bad key!", "effect": "NoSchedule"})),
            ),
            "spec.template.spec.taints[0].key",
            "",
        ),
        (
            "pool: consolidateAfter 'soon'",
            pool(
                "bi-09",
                "healthy",
                json!({"disruption": {"consolidateAfter": "soon"}}),
            ),
            "spec.disruption.consolidateAfter",
            "",
        ),
        (
            "pool: limits 'lots'",
            pool("bi-10", "healthy", json!({"limits": {"cpu": "lots"}})),
            "spec.limits.cpu",
            "",
        ),
        (
            "class: no bootstrap source",
            class("bi-11", ns, json!({"bootstrap": {"dataSecretName": null}})),
            "spec.bootstrap",
            "",
        ),
        (
            "class: version 'banana'",
            class("bi-12", ns, json!({"version": "banana"})),
            "spec.version",
            "",
        ),
        (
            "class: launchTimeout '10 minutes'",
            class("bi-13", ns, json!({"launchTimeout": "10 minutes"})),
            "spec.launchTimeout",
            "",
        ),
        (
            "class: evictionHard of 200%",
            class(
                "bi-14",
                ns,
                json!({"kubelet": {"evictionHard": {"memory.available": "200%"}}}),
            ),
            "spec.kubelet.evictionHard.memory.available",
            "",
        ),
        (
            "claim: no nodeClassRef",
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "bi-15"},
                   "spec": {"requirements": []}}),
            "spec.nodeClassRef",
            "",
        ),
    ];
    let mut rows: Vec<Row> = table
        .into_iter()
        .map(|(name, object, path, says)| row(name, vec![object], Expect::Rejected { path, says }))
        .collect();
    rows.extend(static_pool_and_overlay_rows());
    rows
}

/// Karpenter v1.15.0's rules on static NodePools and NodeOverlays: each rejection names the
/// field. A switch between static and dynamic is an update of an accepted pool.
fn static_pool_and_overlay_rows() -> Vec<Row> {
    let rejected = |path, says| Expect::Rejected { path, says };
    let overlay = |name: &str, spec: Value| {
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
               "metadata": {"name": name}, "spec": spec})
    };
    let any_instance = json!([{"key": "node.kubernetes.io/instance-type", "operator": "Exists"}]);
    vec![
        row(
            "pool: replicas with a weight",
            vec![pool(
                "bi-16",
                "healthy",
                json!({"replicas": 1, "weight": 10}),
            )],
            rejected(
                "spec.weight",
                "'weight' is not supported on static NodePools",
            ),
        ),
        row(
            "pool: static pool limited by cpu",
            vec![pool(
                "bi-17",
                "healthy",
                json!({"replicas": 1, "limits": {"nodes": "3", "cpu": "10"}}),
            )],
            rejected(
                "spec.limits",
                "only 'limits.nodes' is supported on static NodePools",
            ),
        ),
        row(
            "pool: static made dynamic",
            vec![
                pool("bi-18", "healthy", json!({"replicas": 0})),
                pool("bi-18", "healthy", json!({})),
            ],
            rejected(
                "spec.replicas",
                "Cannot transition NodePool between static (replicas set) and dynamic",
            ),
        ),
        row(
            "pool: dynamic made static",
            vec![
                pool("bi-19", "healthy", json!({})),
                pool("bi-19", "healthy", json!({"replicas": 2})),
            ],
            rejected(
                "spec.replicas",
                "Cannot transition NodePool between static (replicas set) and dynamic",
            ),
        ),
        row(
            "pool: replicas -1",
            vec![pool("bi-23", "healthy", json!({"replicas": -1}))],
            rejected("spec.replicas", "should be greater than or equal to 0"),
        ),
        row(
            "overlay: weight 10001",
            vec![overlay(
                "bi-20",
                json!({"requirements": any_instance, "weight": 10001, "price": "1"}),
            )],
            rejected("spec.weight", ""),
        ),
        row(
            "overlay: price and priceAdjustment",
            vec![overlay(
                "bi-21",
                json!({"requirements": any_instance, "price": "1", "priceAdjustment": "+1"}),
            )],
            rejected("spec", "cannot set both 'price' and 'priceAdjustment'"),
        ),
        row(
            "overlay: capacity of cpu",
            vec![overlay(
                "bi-22",
                json!({"requirements": any_instance, "capacity": {"cpu": "4"}}),
            )],
            rejected("spec.capacity", "invalid resource restricted"),
        ),
    ]
}

/// NodePools the API server accepts that the operator must report on or still serve.
fn pool_rows(apps: &str) -> Vec<Row> {
    let ec2 = json!({"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "healthy"}}}});
    let cron = json!({"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "0", "schedule": "x y z w v", "duration": "1h"}]}});
    let mut spread_typo = pool("spread-typo", "healthy", json!({"replicas": 0}));
    spread_typo["metadata"]["annotations"] =
        json!({"karpenter.cluster.x-k8s.io/static-zone-spread": "yes"});
    vec![
        row(
            "pool: unknown nodeClassRef kind",
            vec![pool("bad-kind", "healthy", ec2)],
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
                pool("neg-lim", "healthy", json!({"limits": {"cpu": "-5"}})),
                pod("for-neg-lim", apps, "neg-lim", "100m", json!(null)),
            ],
            event("for-neg-lim", "FailedScheduling"),
        ),
        row(
            "pool: huge limits",
            vec![
                pool(
                    "huge-lim",
                    "healthy",
                    json!({"limits": {"cpu": "1e30", "memory": "9999999Ei"}}),
                ),
                pod("for-huge-lim", apps, "huge-lim", "100m", json!(null)),
            ],
            provisions("for-huge-lim", "huge-lim-"),
        ),
        row(
            // Accepted, no condition or event says the schedule is unparsable (the budget is
            // treated as always active: fail closed); the pool still provisions.
            "pool: budget with an unparsable cron",
            vec![
                pool("bad-cron", "healthy", cron),
                pod("for-bad-cron", apps, "bad-cron", "100m", json!(null)),
            ],
            provisions("for-bad-cron", "bad-cron-"),
        ),
        row(
            // Read as off (only "true" spreads), and said so on the pool.
            "pool: static-zone-spread 'yes'",
            vec![spread_typo],
            event("spread-typo", "UnknownAnnotationValue"),
        ),
        row(
            // Disruption fails closed on it, and says so on the pool.
            "pool: budget with an unparsable cron is reported",
            vec![],
            event("bad-cron", "InvalidDisruptionBudget"),
        ),
    ]
}

/// NodeClasses the API server accepts that the operator must report as not ready.
fn class_rows(ns: &str) -> Vec<Row> {
    let kct = |group: &str, kind: &str, name: &str| json!({"bootstrap": {"dataSecretName": null, "configTemplateRef": {"apiGroup": group, "kind": kind, "name": name}}});
    let table: Vec<(
        &'static str,
        &'static str,
        Value,
        &'static str,
        &'static str,
    )> = vec![
        (
            "class: selector matching nothing",
            "selects-nothing",
            json!({"machineTemplateSelector": {"matchLabels": {"no": "such"}}}),
            "TemplatesReady",
            "NoTemplates",
        ),
        (
            "class: missing Cluster",
            "no-cluster",
            json!({"clusterRef": {"name": "absent"}}),
            "ClusterReady",
            "ClusterNotFound",
        ),
        (
            "class: missing bootstrap template",
            "no-kct",
            kct(
                "bootstrap.cluster.x-k8s.io",
                "KubeadmConfigTemplate",
                "absent",
            ),
            "BootstrapReady",
            "BootstrapTemplateNotFound",
        ),
        (
            "class: bootstrap template of an unserved kind",
            "widget-kct",
            kct("example.com", "WidgetTemplate", "w"),
            "BootstrapReady",
            "BootstrapTemplateNotFound",
        ),
        (
            "class: missing bootstrap Secret",
            "no-secret",
            json!({"bootstrap": {"dataSecretName": "absent"}}),
            "BootstrapReady",
            "BootstrapSecretNotFound",
        ),
        (
            "class: kubeReserved cpu -1",
            "negative-reserved",
            json!({"kubelet": {"kubeReserved": {"cpu": "-1"}}}),
            "TemplatesReady",
            "InvalidKubeletConfiguration",
        ),
    ];
    table
        .into_iter()
        .map(|(name, object, spec, type_, reason)| {
            row(
                name,
                vec![class(object, ns, spec)],
                cond("ClusterAPINodeClass", object, type_, reason),
            )
        })
        .collect()
}

/// NodeClasses whose `spec.inventory` cannot be read: an `InventoryReady=False` condition
/// with the cause as its reason, and a Warning Event with the same reason (the healthy pool,
/// another NodeClass, keeps provisioning meanwhile).
fn inventory_rows(ns: &str) -> Vec<Row> {
    let hosts = |api_version: &str, kind: &str| {
        json!({"inventory": {"hosts": {"apiVersion": api_version, "kind": kind,
            "selectorPath": "spec.template.spec.hostSelector"}}})
    };
    // Selects only its own templates: a template counted by an inventory is counted so
    // for every NodeClass.
    let own = |name: &str, mut spec: Value| {
        spec["machineTemplateSelector"] = json!({"matchLabels": {"badinput": name}});
        class(name, ns, spec)
    };
    let unreadable = template(
        "inv-selector-t",
        "inv-selector",
        ns,
        ann(PRICE, "0.1"),
        json!({"hostSelector": {"matchLabels": ["not", "a", "map"]}}),
    );
    let mut rows = Vec::new();
    for (what, said, objects, name, reason) in [
        (
            "class: inventory of an unserved host kind",
            "class: inventory of an unserved host kind: event",
            vec![own("inv-unserved", hosts("example.com/v1", "Widget"))],
            "inv-unserved",
            "HostKindNotServed",
        ),
        (
            "class: inventory with an unreadable host selector",
            "class: inventory with an unreadable host selector: event",
            vec![unreadable, own("inv-selector", hosts("v1", "ConfigMap"))],
            "inv-selector",
            "HostSelectorInvalid",
        ),
    ] {
        rows.push(row(
            what,
            objects,
            cond("ClusterAPINodeClass", name, "InventoryReady", reason),
        ));
        rows.push(row(said, vec![], event(name, reason)));
    }
    rows
}

/// Hand-made NodeClaims and pods no template can serve.
fn claim_and_pod_rows(apps: &str) -> Vec<Row> {
    let no_type = json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no-such-type"]}]);
    let mars = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["mars"]}]}]}}});
    vec![
        row(
            "claim: impossible requirements",
            vec![claim("impossible", "healthy", "healthy", no_type, "100m")],
            gone("impossible", "InsufficientCapacityError"),
        ),
        row(
            "claim: requests more than any template",
            vec![claim("too-big", "healthy", "healthy", json!([]), "100000")],
            gone("too-big", "InsufficientCapacityError"),
        ),
        row(
            "claim: missing NodeClass",
            vec![claim("classless", "healthy", "absent", json!([]), "100m")],
            gone("classless", "NodeClassNotReady"),
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
            gone("unready-class", "NodeClassNotReady"),
        ),
        row(
            "pod: requests 1000 CPUs",
            vec![pod("huge-pod", apps, "healthy", "1000", json!(null))],
            event("huge-pod", "FailedScheduling"),
        ),
        row(
            "pod: affinity to a zone that does not exist",
            vec![pod("mars-pod", apps, "healthy", "100m", mars)],
            event("mars-pod", "FailedScheduling"),
        ),
    ]
}

/// One bad template: the annotation or nodeInfo that breaks it, the one its valid twin has
/// instead, and the text of the field the exclusion must name.
struct BadTemplate {
    row: &'static str,
    annotations: Value,
    twin_annotations: Value,
    spec: Value,
    twin_spec: Value,
    field: String,
}

/// Capacity annotations of a valid 2-CPU template with `key` set to `value`.
fn ann(key: &str, value: &str) -> Value {
    let mut a = json!({PRICE: "0.1",
        "capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
        "capacity.cluster-autoscaler.kubernetes.io/memory": "4Gi"});
    a[key] = json!(value);
    a
}

fn bad_templates() -> Vec<BadTemplate> {
    let ca = |k: &str| format!("capacity.cluster-autoscaler.kubernetes.io/{k}");
    let info =
        |arch: &str, os: &str| json!({"nodeInfo": {"architecture": arch, "operatingSystem": os}});
    // (row, annotation, bad value, good value); the field named is the annotation.
    let annotated: Vec<(&'static str, String, &str, &str)> = vec![
        ("template: cpu 'lots'", ca("cpu"), "lots", "2"),
        (
            "template: memory 9999999999999Ei",
            ca("memory"),
            "9999999999999Ei",
            "4Gi",
        ),
        ("template: maxPods -3", ca("maxPods"), "-3", "20"),
        ("template: price 'free'", PRICE.into(), "free", "0.2"),
        ("template: price -1", PRICE.into(), "-1", "0.2"),
        (
            "template: taints annotation 'novalue'",
            ca("taints"),
            "novalue",
            "a=b:NoSchedule",
        ),
        (
            "template: labels annotation 'bad key!=x'",
            ca("labels"),
            "bad key!=x",
            "tier=x",
        ),
        ("template: gpu-count 'many'", ca("gpu-count"), "many", "0"),
    ];
    let mut out: Vec<BadTemplate> = annotated
        .into_iter()
        .map(|(row, key, bad, good)| BadTemplate {
            row,
            annotations: ann(&key, bad),
            twin_annotations: ann(&key, good),
            spec: json!({}),
            twin_spec: json!({}),
            field: format!("metadata.annotations[{key}]: "),
        })
        .collect();
    out.push(BadTemplate {
        row: "template: no status, no capacity annotations",
        annotations: json!({PRICE: "0.1"}),
        twin_annotations: ann(PRICE, "0.1"),
        spec: json!({}),
        twin_spec: json!({}),
        field: "no cpu: ".into(),
    });
    for (row, bad, field) in [
        (
            "template: architecture sparc",
            info("sparc", "linux"),
            "status.nodeInfo.architecture: ",
        ),
        (
            "template: operating system plan9",
            info("amd64", "plan9"),
            "status.nodeInfo.operatingSystem: ",
        ),
    ] {
        out.push(BadTemplate {
            row,
            annotations: ann(PRICE, "0.1"),
            twin_annotations: ann(PRICE, "0.1"),
            spec: bad,
            twin_spec: info("amd64", "linux"),
            field: field.into(),
        });
    }
    out
}

/// Per bad template `bi-tNN`: its twin `bi-tNN-ok` and the NodeClass `bi-tNN` selecting both.
/// And one NodeClass `bi-t-all` whose every template is bad: `NoValidTemplates`.
fn template_rows(ns: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = bad_templates()
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let group = format!("bi-t{:02}", i + 1);
            let twin = format!("{group}-ok");
            row(
                t.row,
                vec![
                    template(&group, &group, ns, t.annotations, t.spec),
                    template(&twin, &group, ns, t.twin_annotations, t.twin_spec),
                    class_for_templates(&group, ns),
                ],
                Expect::TwinUsed {
                    class: group.clone(),
                    bad: group,
                    twin,
                    field: t.field,
                },
            )
        })
        .collect();
    let all_bad = "bi-t-all";
    rows.push(row(
        "template: every selected template excluded",
        vec![
            template(
                "bi-t-all-1",
                all_bad,
                ns,
                ann("capacity.cluster-autoscaler.kubernetes.io/cpu", "lots"),
                json!({}),
            ),
            template("bi-t-all-2", all_bad, ns, ann(PRICE, "free"), json!({})),
            class_for_templates(all_bad, ns),
        ],
        cond(
            "ClusterAPINodeClass",
            all_bad,
            "TemplatesReady",
            "NoValidTemplates",
        ),
    ));
    rows
}

fn fail(failures: &mut Vec<String>, message: String) {
    eprintln!("FAIL {message}");
    failures.push(message);
}

/// The testbed with the healthy NodePool (template `small` only), the template `nonode`
/// (providerID, never a Node) with its NodeClass, and the operator as a process.
struct Bed {
    tb: Testbed,
    _provider: TestProvider,
    ns: String,
    apps: String,
    operator: Operator,
}

async fn bed() -> Bed {
    let (tb, provider, cluster) =
        common::prepare(common::default_templates(json!({})), Options::all()).await;
    let client = tb.client();
    let ns = cluster.namespace.clone();
    let apps = tb.temp_namespace().await.expect("namespace");
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
    let mut nonode = template(
        "nonode",
        "nonode",
        &ns,
        json!({PRICE: "0.1"}),
        json!({"capacity": {"cpu": "2", "memory": "4Gi"}}),
    );
    nonode["spec"]["template"]["metadata"] = json!({"annotations": {NO_NODE_ANNOTATION: ""}});
    apply(&tb, &nonode, &ns).await.expect("template nonode");
    let mut nonode_class = class_for_templates("nonode", &ns);
    nonode_class["spec"]["registrationTimeout"] = json!("10m");
    apply(&tb, &nonode_class, &ns)
        .await
        .expect("nonode NodeClass");
    let operator = Operator::start(tb.kubeconfig(), tb.dir().join("logs/operator.log"), &[]);
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
    Bed {
        tb,
        _provider: provider,
        ns,
        apps,
        operator,
    }
}

/// Applies every row at once; checks the rejections; returns the rows left to wait for.
async fn apply_rows<'r>(bed: &Bed, rows: &'r [Row], failures: &mut Vec<String>) -> Vec<&'r Row> {
    let applied = futures::future::join_all(rows.iter().map(|r| async move {
        for o in &r.objects {
            let target_ns = o["metadata"]["namespace"].as_str().unwrap_or(&bed.ns);
            if let Err(message) = apply(&bed.tb, o, target_ns).await {
                return Some(message);
            }
        }
        None
    }))
    .await;
    let mut pending = Vec::new();
    for (r, rejected) in rows.iter().zip(applied) {
        match (&r.expect, rejected) {
            (Expect::Rejected { path, says }, Some(m))
                if m.contains(&format!("{path}: ")) && m.contains(says) =>
            {
                eprintln!("ok   {:<48} rejected: {m}", r.name);
            }
            (Expect::Rejected { path, says }, other) => fail(
                failures,
                format!(
                    "{}: expected a rejection naming {path:?} saying {says:?}, got {other:?}",
                    r.name
                ),
            ),
            (_, Some(m)) => fail(failures, format!("{}: unexpectedly rejected: {m}", r.name)),
            (_, None) => pending.push(r),
        }
    }
    pending
}

/// The table itself cannot pass on an echo: no rejected object's name holds a segment of
/// the path it must be rejected on.
fn assert_names_are_neutral(rows: &[Row]) {
    for r in rows {
        let Expect::Rejected { path, .. } = &r.expect else {
            continue;
        };
        for o in &r.objects {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            let echoed = path
                .split(['.', '[', ']'])
                .filter(|s| s.len() > 2)
                .find(|s| name.to_lowercase().contains(&s.to_lowercase()));
            assert!(
                echoed.is_none(),
                "{}: the name {name:?} holds {echoed:?} of {path:?}",
                r.name
            );
        }
    }
}

#[tokio::test]
async fn bad_inputs_get_precise_reasons_and_never_stall_a_healthy_pool() {
    let mut bed = bed().await;
    let client = bed.tb.client();
    let (ns, apps) = (bed.ns.clone(), bed.apps.clone());
    // Victims of the behind-our-back rows, launched now.
    for name in ["victim-machine", "victim-node", "victim-labels"] {
        apply(
            &bed.tb,
            &claim(name, "ghost", "healthy", json!([]), "100m"),
            &ns,
        )
        .await
        .expect("victim claim");
    }
    let mut rows = rejected_rows(&ns);
    rows.extend(pool_rows(&apps));
    rows.extend(class_rows(&ns));
    rows.extend(inventory_rows(&ns));
    rows.extend(claim_and_pod_rows(&apps));
    rows.extend(template_rows(&ns));
    assert_names_are_neutral(&rows);

    let mut failures: Vec<String> = Vec::new();
    let started = std::time::Instant::now();
    let pending = apply_rows(&bed, &rows, &mut failures).await;
    // Meanwhile the healthy pool provisions for a new pending pod (1200m: one per node, so
    // the second one later needs a new NodeClaim too).
    apply(
        &bed.tb,
        &pod("healthy-pod", &apps, "healthy", "1200m", json!(null)),
        &apps,
    )
    .await
    .expect("healthy pod");
    let deadline = Duration::from_secs(90);
    let healthy_expect = provisions("healthy-pod", "healthy-");
    let healthy = check(&client, &healthy_expect, deadline);
    let checks = futures::future::join_all(pending.iter().map(|r| {
        let client = client.clone();
        async move { (r.name, check(&client, &r.expect, deadline).await) }
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
    let behind = behind_our_back(&bed, &mut failures).await;
    debug_free_notes(&client, &mut failures).await;
    bed.operator.assert_healthy();
    let total = rows.len() + behind + 2;
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

/// Event notes are for people: no Rust debug output (`Some("…")`, `None`) in them.
async fn debug_free_notes(client: &Client, failures: &mut Vec<String>) {
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
            failures,
            format!("event notes with Rust debug output: {debug_notes:?}"),
        );
    }
}

/// Waits until NodeClaim `name` is Ready.
async fn ready(client: &Client, name: &str) -> DynamicObject {
    wait_for(
        &format!("{name} Ready"),
        Duration::from_secs(90),
        || async {
            let c = nodeclaims(client).get(name).await.ok()?;
            (condition(&c, "Ready").as_deref() == Some("True")).then_some(c)
        },
    )
    .await
    .expect("victim Ready")
}

/// The Machine's name is the plan's (with fencing it is not the NodeClaim's).
fn machine_of(c: &DynamicObject) -> String {
    c.annotations()
        .get("cluster.x-k8s.io/machine")
        .and_then(|m| m.rsplit('/').next())
        .unwrap_or_default()
        .to_string()
}

/// Behind our back: the victims are Ready; their Machine, Node, labels are tampered with;
/// two Nodes claim one providerID. Returns how many rows it checked.
async fn behind_our_back(bed: &Bed, failures: &mut Vec<String>) -> usize {
    let client = bed.tb.client();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &bed.ns, &provider::machine_resource());
    let victim = ready(&client, "victim-machine").await;
    machines
        .delete(&machine_of(&victim), &Default::default())
        .await
        .expect("delete Machine");
    let node_victim = ready(&client, "victim-node").await;
    let node = node_victim.data["status"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Api::<Node>::all(client.clone())
        .delete(&node, &Default::default())
        .await
        .expect("delete Node");
    let relabelled_machine = machine_of(&ready(&client, "victim-labels").await);
    let unlabel = json!({"metadata": {"labels": {"karpenter.cluster.x-k8s.io/nodeclaim": null,
                                                 "karpenter.sh/nodepool": "other"}}});
    machines
        .patch(
            &relabelled_machine,
            &PatchParams::default(),
            &Patch::Merge(unlabel),
        )
        .await
        .expect("edit Machine labels");
    share_provider_id(bed).await;
    let behind: Vec<(&str, Expect)> = vec![
        (
            "Machine deleted behind our back",
            // Cluster API deletes the Machine's Node first, or we see the Machine gone.
            gone("victim-machine", "MachineDeleted|NodeDeleted"),
        ),
        (
            "Node deleted behind our back",
            gone("victim-node", "NodeDeleted"),
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
        match check(&client, expect, Duration::from_secs(90)).await {
            Ok(m) => eprintln!("ok   {name:<48} {m}"),
            Err(e) => fail(failures, format!("{name}: {e}")),
        }
    }
    // The claim whose Machine lost our labels keeps its Machine (nothing deletes it) and
    // stays Ready; the healthy pool still provisions after all of the above.
    apply(
        &bed.tb,
        &pod("healthy-pod-2", &bed.apps, "healthy", "1200m", json!(null)),
        &bed.apps,
    )
    .await
    .expect("second healthy pod");
    let again = provisions("healthy-pod-2", "healthy-");
    if let Err(e) = check(&client, &again, Duration::from_secs(90)).await {
        fail(
            failures,
            format!("healthy pool stalled after the tampering: {e}"),
        );
    }
    let relabelled = nodeclaims(&client)
        .get_opt("victim-labels")
        .await
        .ok()
        .flatten();
    let machine_left = machines.get_opt(&relabelled_machine).await.ok().flatten();
    let still_ready = relabelled
        .as_ref()
        .and_then(|c| condition(c, "Ready"))
        .as_deref()
        == Some("True");
    if !still_ready || machine_left.is_none() {
        fail(
            failures,
            format!(
                "Machine labels edited: claim {:?}, Machine present {}",
                relabelled.map(|c| c.data["status"]["conditions"].clone()),
                machine_left.is_some()
            ),
        );
    }
    behind.len()
}

/// Two Nodes claim the providerID of a launched claim whose own Node never comes.
async fn share_provider_id(bed: &Bed) {
    let client = bed.tb.client();
    apply(
        &bed.tb,
        &claim("shared-pid", "ghost", "nonode", json!([]), "100m"),
        &bed.ns,
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
}
