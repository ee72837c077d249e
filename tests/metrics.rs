//! The metrics Karpenter's dashboards read, scraped from a running operator: the gauges
//! follow a pod from Pending to bound to deleted and describe the Node it landed on and the
//! cluster state (and the disruption loop sets its budget gauges); and every metric the
//! Grafana dashboard (deploy/grafana) queries is in `/metrics` (histograms as
//! `_bucket`/`_sum`/`_count`, summaries with their quantiles).

mod common;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use testbed::wait_for;

/// One sample of the exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed `/metrics`: the samples, and every name a query may use (families described
/// without samples yet included).
struct Scrape {
    samples: Vec<Sample>,
    names: BTreeSet<String>,
}

impl Scrape {
    /// The samples of `name` whose labels include `labels`.
    fn series(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample of `name` with `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        match self.series(name, labels)[..] {
            [s] => Some(s.value),
            _ => None,
        }
    }
}

/// `"..."` at the start of `s` (OpenMetrics escapes): the value and the rest.
fn quoted(s: &str) -> (String, &str) {
    let mut out = String::new();
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, c)) => out.push(c),
                None => break,
            },
            '"' => return (out, &s[i + 1..]),
            c => out.push(c),
        }
    }
    panic!("unterminated label value in {s}")
}

fn parse_exposition(text: &str) -> Scrape {
    let mut samples = Vec::new();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let end = line.find(['{', ' ']).expect("sample name");
        let name = line[..end].to_string();
        let mut rest = &line[end..];
        let mut labels = BTreeMap::new();
        if let Some(mut l) = rest.strip_prefix('{') {
            while !l.starts_with('}') {
                let (key, after) = l.split_once('=').expect("label key");
                let (value, after) = quoted(after);
                labels.insert(key.to_string(), value);
                l = after.strip_prefix(',').unwrap_or(after);
            }
            rest = &l[1..];
        }
        let value = rest.split_whitespace().next().expect("value");
        let value = match value {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|e| panic!("{line}: {e}")),
        };
        names.insert(name.clone());
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    Scrape { samples, names }
}

async fn scrape(addr: SocketAddr) -> Option<Scrape> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| parse_exposition(body))
}

/// The metric names a PromQL expression reads: identifiers outside label matchers, ranges
/// and strings that are not functions, aggregations, keywords or grouping labels.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 10] = [
        "and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on",
    ];
    const GROUPING: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let b = expr.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    // Skips from an opening byte to its closer (strings inside respected).
    let skip = |mut i: usize, close: u8| {
        while i < b.len() && b[i] != close {
            if b[i] == b'"' || b[i] == b'\'' {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            i += 1;
        }
        i + 1
    };
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            i = skip(i + 1, c);
        } else if c == b'{' {
            i = skip(i + 1, b'}');
        } else if c == b'[' {
            i = skip(i + 1, b']');
        } else if c.is_ascii_digit() || c == b'$' {
            i += 1;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let ident = &expr[start..i];
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            // `sum by (x) (...)`: an aggregation whose grouping comes first.
            let grouped_aggregation = ["by", "without"].iter().any(|g| {
                expr[j..].starts_with(g) && expr[j + g.len()..].trim_start().starts_with('(')
            });
            let call = (j < b.len() && b[j] == b'(') || grouped_aggregation;
            if GROUPING.contains(&ident) && call {
                i = skip(j + 1, b')');
            } else if !call && !KEYWORDS.contains(&ident.to_lowercase().as_str()) {
                out.insert(ident.to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Every metric the dashboard reads: its panels' `expr`s and its variables' `label_values`.
fn dashboard_metrics() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/karpenter-capi.json"),
    )
    .expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("JSON");
    fn walk(v: &Value, exprs: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v.as_str()) {
                        ("expr", Some(e)) => exprs.push(e.to_string()),
                        ("definition", Some(d)) => {
                            let inner = d
                                .strip_prefix("label_values(")
                                .and_then(|d| d.split_once(','))
                                .map(|(metric, _)| metric.trim().to_string());
                            exprs.push(inner.unwrap_or_else(|| panic!("variable query {d}")));
                        }
                        _ => walk(v, exprs),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, exprs)),
            _ => {}
        }
    }
    let mut exprs = Vec::new();
    walk(&dashboard, &mut exprs);
    let mut by_metric: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in exprs {
        let names = metric_names(&e);
        assert!(!names.is_empty(), "no metric in {e}");
        for n in names {
            by_metric.entry(n).or_default().push(e.clone());
        }
    }
    by_metric
}

#[test]
fn promql_metric_names_skip_functions_labels_ranges_and_grouping() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.9, sum by (le, step) (rate(a_bucket{nodepool=~"$nodepool", x="b{c}"}[$__rate_interval])))"#
        ),
        ["a_bucket"]
    );
    assert_eq!(
        names(r#"sum(x{phase="Pending"}) / on (node) group_left (zone) y offset 5m > bool 1"#),
        ["x", "y"]
    );
    assert_eq!(
        names("-sum(increase(c_total[5m])) by (reason) or vector(0)"),
        ["c_total"]
    );
    assert_eq!(names("max(s{quantile=\"0.99\"}) * 1e3"), ["s"]);
}

#[test]
fn the_dashboard_reads_karpenters_metrics() {
    let metrics = dashboard_metrics();
    for name in metrics.keys() {
        assert!(name.starts_with("karpenter_"), "{name}: not ours");
    }
    for wanted in [
        "karpenter_pods_state",
        "karpenter_pods_startup_duration_seconds",
        "karpenter_nodes_allocatable",
        "karpenter_nodes_total_pod_requests",
        "karpenter_cluster_state_node_count",
        "karpenter_cluster_state_synced",
        "karpenter_scheduler_queue_depth",
        "karpenter_voluntary_disruption_decisions_total",
        "karpenter_voluntary_disruption_eligible_nodes",
        "karpenter_nodepools_allowed_disruptions",
        "karpenter_nodeclaims_drifted_total",
        "karpenter_capi_machines",
        "karpenter_capi_launch_step_duration_seconds_bucket",
    ] {
        assert!(
            metrics.contains_key(wanted),
            "the dashboard has no {wanted}"
        );
    }
}

fn quantity(node: &Node, resource: &str) -> f64 {
    let q = &node
        .status
        .as_ref()
        .expect("status")
        .allocatable
        .as_ref()
        .expect("allocatable")[resource];
    let resources = karpenter_core::model::convert::resources(
        &[(resource.to_string(), q.clone())].into_iter().collect(),
    );
    let v = resources[resource] as f64;
    if resource == "cpu" { v / 1000.0 } else { v }
}

#[tokio::test]
async fn dashboard_metrics_follow_a_pod_and_its_node_and_are_all_exported() {
    let env = env(default_templates(json!({}))).await;
    let client = env.tb.client();
    let addr = env.metrics_addr;
    create_nodepool(&client, json!({"cpu": "100"})).await;
    let ns = env.tb.temp_namespace().await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deployment: Deployment = from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "terminationGracePeriodSeconds": 0}}}
    }));
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = wait_for("the pod", Duration::from_secs(30), || async {
        pods.list(&ListParams::default().labels("app=web"))
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await
    .expect("the Deployment makes a pod");
    let name = pod.name_any();
    let owner = format!(
        "/apis/apps/v1/namespaces/{ns}/replicasets/{}",
        pod.owner_references()[0].name
    );

    // Pending: its series says so, and the provisioner's queue holds it.
    let (pending_seen, queued_seen) = (Cell::new(false), Cell::new(false));
    wait_for(
        "the pod Pending and queued",
        Duration::from_secs(60),
        || async {
            let s = scrape(addr).await?;
            let mine = s.series(
                "karpenter_pods_state",
                &[("name", &name), ("namespace", &ns)],
            );
            if let [one] = mine[..]
                && one.labels["phase"] == "Pending"
                && one.labels["node"].is_empty()
                && one.labels["owner"] == owner
                && one.value == 1.0
            {
                pending_seen.set(true);
                let queued = s.value(
                    "karpenter_scheduler_queue_depth",
                    &[("controller", "provisioner")],
                );
                queued_seen.set(queued_seen.get() || queued.is_some_and(|q| q >= 1.0));
            }
            (pending_seen.get() && queued_seen.get()).then_some(())
        },
    )
    .await
    .expect("a Pending pod is in karpenter_pods_state and karpenter_scheduler_queue_depth");

    let pod = wait_for("the pod Running", Duration::from_secs(120), || async {
        let p = pods.get(&name).await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await
    .expect("the pod runs on a new node");
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("bound");
    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .expect("its node");
    let label = |k: &str| node.labels().get(k).cloned().unwrap_or_default();
    let expected_requests: f64 = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .expect("pods")
        .items
        .iter()
        .map(|p| {
            karpenter_core::model::convert::spec_requests(p.spec.as_ref())["cpu"] as f64 / 1000.0
        })
        .sum();
    assert_eq!(expected_requests, 1.0, "only our pod runs on the new node");

    let s = wait_for("the gauges of the bound pod and its node", Duration::from_secs(60), || async {
        let s = scrape(addr).await?;
        let mine = s.series("karpenter_pods_state", &[("name", &name), ("namespace", &ns)]);
        let bound = matches!(mine[..], [one] if one.labels["phase"] == "Running" && one.labels["node"] == node_name);
        let machines = s.value("karpenter_capi_machines", &[("nodepool", "default"), ("phase", "Running")]);
        let registered = s.value(
            "karpenter_capi_launch_step_duration_seconds_count",
            &[("nodepool", "default"), ("step", "registered")],
        );
        let started = s.value("karpenter_pods_startup_duration_seconds_count", &[]);
        // The disruption loop's pass over the pool (it sets the budget gauges).
        let budgets = s.series("karpenter_nodepools_allowed_disruptions", &[("nodepool", "default")]);
        (bound
            && machines == Some(1.0)
            && registered == Some(1.0)
            && started.is_some_and(|n| n >= 1.0)
            && !budgets.is_empty())
        .then_some(s)
    })
    .await
    .expect("the pod's series moves to its node (one series), the Machine runs, launch and startup are timed, the budgets are set");

    // The seam's calls carry the loop that made them: the launch is the lifecycle's, the
    // catalog reads are the provisioner's (and no call of a loop goes unlabelled).
    let created = s.value(
        "karpenter_cloudprovider_duration_seconds_count",
        &[("controller", "nodeclaim.lifecycle"), ("method", "Create")],
    );
    let calls: Vec<_> = s
        .samples
        .iter()
        .filter(|x| x.name == "karpenter_cloudprovider_duration_seconds_count")
        .map(|x| (&x.labels, x.value))
        .collect();
    assert!(
        created.is_some_and(|n| n >= 1.0),
        "Create by the lifecycle: {created:?} in {calls:?}"
    );
    let catalog = s.series(
        "karpenter_cloudprovider_duration_seconds_count",
        &[
            ("controller", "provisioner"),
            ("method", "GetInstanceTypes"),
        ],
    );
    assert!(!catalog.is_empty(), "GetInstanceTypes by the provisioner");
    assert!(
        s.series(
            "karpenter_cloudprovider_duration_seconds_count",
            &[("controller", ""), ("method", "Create")]
        )
        .is_empty(),
        "no unlabelled Create"
    );

    let mine = &s.series("karpenter_pods_state", &[("name", &name)])[0].labels;
    assert_eq!(mine["owner"], owner);
    assert_eq!(mine["nodepool"], "default");
    assert_eq!(mine["zone"], label("topology.kubernetes.io/zone"));
    assert_eq!(
        mine["instance_type"],
        label("node.kubernetes.io/instance-type")
    );
    assert_eq!(mine["capacity_type"], "on-demand");
    assert_eq!(
        mine["dynamic_resources"], "false",
        "the pod claims no devices"
    );
    assert!(!mine["zone"].is_empty() && !mine["instance_type"].is_empty());

    let on_node = |metric: &str, resource: &str| {
        s.value(
            metric,
            &[("node_name", &node_name), ("resource_type", resource)],
        )
    };
    for resource in ["cpu", "memory", "pods"] {
        assert_eq!(
            on_node("karpenter_nodes_allocatable", resource),
            Some(quantity(&node, resource)),
            "allocatable {resource}"
        );
    }
    assert_eq!(
        on_node("karpenter_nodes_total_pod_requests", "cpu"),
        Some(expected_requests)
    );
    assert_eq!(
        on_node("karpenter_nodes_total_pod_requests", "memory"),
        Some(1024.0 * 1024.0 * 1024.0)
    );
    assert_eq!(
        on_node("karpenter_nodes_total_daemon_requests", "cpu"),
        None
    );
    let node_series =
        &s.series("karpenter_nodes_allocatable", &[("node_name", &node_name)])[0].labels;
    assert_eq!(node_series["managed"], "true");
    assert_eq!(node_series["nodepool"], "default");
    assert_eq!(
        node_series["instance_type"],
        label("node.kubernetes.io/instance-type")
    );

    // The cluster state: every Node and launched NodeClaim, one per providerID.
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items;
    let claims = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("nodeclaims")
        .items;
    let mut ids: BTreeSet<String> = claims
        .iter()
        .filter_map(|c| c.data["status"]["providerID"].as_str().map(str::to_string))
        .collect();
    let mut without = 0;
    for n in &nodes {
        match n.spec.as_ref().and_then(|s| s.provider_id.clone()) {
            Some(p) if !p.is_empty() => {
                ids.insert(p);
            }
            _ => without += 1,
        }
    }
    assert_eq!(
        s.value("karpenter_cluster_state_node_count", &[]),
        Some((ids.len() + without) as f64)
    );
    assert_eq!(s.value("karpenter_cluster_state_synced", &[]), Some(1.0));
    assert_eq!(
        s.value(
            "karpenter_scheduler_queue_depth",
            &[("controller", "provisioner")]
        ),
        Some(0.0)
    );
    for step in ["machine_created", "launched", "registered"] {
        assert_eq!(
            s.value(
                "karpenter_capi_launch_step_duration_seconds_count",
                &[("nodepool", "default"), ("step", step)]
            ),
            Some(1.0),
            "{step}"
        );
    }

    // The disruption family the dashboard reads, as the disruption loop and repair set it: a
    // budget per reason (`unhealthy` paces repair, as in Karpenter v1.15), and nothing
    // eligible (consolidateAfter: Never, nothing drifted).
    let reasons: BTreeSet<&str> = s
        .series(
            "karpenter_nodepools_allowed_disruptions",
            &[("nodepool", "default")],
        )
        .iter()
        .map(|x| x.labels["reason"].as_str())
        .collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["drifted", "empty", "underutilized", "unhealthy"])
    );
    for reason in ["drifted", "empty", "underutilized"] {
        assert_eq!(
            s.value(
                "karpenter_voluntary_disruption_eligible_nodes",
                &[("reason", reason)]
            ),
            Some(0.0),
            "{reason}"
        );
        assert_eq!(
            s.value(
                "karpenter_nodepools_nodes_consuming_budgets",
                &[("nodepool", "default"), ("reason", reason)]
            ),
            Some(0.0),
            "nothing is being disrupted: {reason}"
        );
    }
    // Karpenter v1.15's lifecycle series carry the zone; the pool's cost is the price its
    // one NodeClaim was launched at; no pod is ignored.
    assert_eq!(
        s.value(
            "karpenter_nodes_created_total",
            &[
                ("nodepool", "default"),
                ("zone", &label("topology.kubernetes.io/zone"))
            ]
        ),
        Some(1.0)
    );
    let claim = nodeclaims(&client)
        .list(&ListParams::default())
        .await
        .expect("nodeclaims")
        .items
        .into_iter()
        .find(|c| c.data["status"]["nodeName"] == node_name.as_str())
        .expect("the node's NodeClaim");
    let plan: Value =
        serde_json::from_str(claim.annotations()[api::consts::annotations::LAUNCH_PLAN].as_str())
            .expect("launch plan");
    let price = plan["price"].as_f64().expect("planned price");
    assert!(price > 0.0, "{plan}");
    assert_eq!(
        s.value("karpenter_nodepools_cost_total", &[("nodepool", "default")]),
        Some(price)
    );
    assert_eq!(
        s.value("karpenter_scheduler_ignored_pods_count", &[]),
        Some(0.0)
    );

    // Every metric the dashboard queries is exported.
    let dashboard = dashboard_metrics();
    let missing: Vec<(&String, &Vec<String>)> = dashboard
        .iter()
        .filter(|(name, _)| !s.names.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics does not export: {missing:#?}"
    );
    println!(
        "{} metrics of the dashboard, all exported: {:?}",
        dashboard.len(),
        dashboard.keys().collect::<Vec<_>>()
    );

    // A deleted pod's series goes.
    deployments
        .delete("web", &DeleteParams::foreground())
        .await
        .expect("delete");
    wait_for(
        "the pod's series removed",
        Duration::from_secs(60),
        || async {
            let s = scrape(addr).await?;
            s.series(
                "karpenter_pods_state",
                &[("name", &name), ("namespace", &ns)],
            )
            .is_empty()
            .then_some(())
        },
    )
    .await
    .expect("a deleted pod has no karpenter_pods_state series");
}
