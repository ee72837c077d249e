//! The hub benchmark (`hack/bench/hub.sh`): N workload clusters × P pods served by one
//! `karpenter-capi run --mode hub`, then N fresh workload clusters × P pods served by N
//! single-cluster operators, on one management testbed (Cluster API manager, audit log, the
//! test infrastructure provider reaching each workload cluster through its Cluster's
//! kubeconfig Secret); the workload clusters are API servers on the management etcd
//! (`Testbed::start_workloads`) with a controller-manager, a scheduler and kwok each.
//!
//!   bench-hub --operator PATH [--clusters N] [--pods P] [--out DIR]
//!
//! Each cluster's P pods are one Deployment's (500m, 512Mi each).
//! Hub: RSS with 1 engaged idle cluster, with N idle, with one of them at P pods; then the
//! other N-1 clusters get P pods at once (time until all Running, per cluster). Singles: N
//! operators, all N clusters get P pods at once. For both: the summed RSS, and the API writes
//! per NodeClaim (requests by User-Agent `karpenter-capi/` in the workload clusters' and the
//! management cluster's audit logs). RSS is read from `/proc` after 10 s of quiet.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testbed::procstat::rss_mib;
use testbed::provider::{self, ClusterSetup, ProviderConfig, TestProvider};
use testbed::{Component, Options, Testbed};

struct Args {
    operator: PathBuf,
    clusters: usize,
    pods: usize,
    out: PathBuf,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        operator: PathBuf::new(),
        clusters: 10,
        pods: 200,
        out: PathBuf::from(".cache/bench/hub"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let value = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--operator" => args.operator = PathBuf::from(&value),
            "--clusters" => args.clusters = number()?,
            "--pods" => args.pods = number()?,
            "--out" => args.out = PathBuf::from(&value),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.operator.as_os_str().is_empty() {
        return Err("--operator is required".into());
    }
    Ok(args)
}

/// One workload cluster and its Cluster in the management cluster.
struct Tenant {
    name: String,
    ns: String,
    tb: Testbed,
}

fn err(what: &str) -> impl Fn(testbed::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn kube_err(what: &str) -> impl Fn(kube::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// `n` workload clusters `<prefix>0..` with their Clusters, a large template, a NodeClass
/// and a NodePool each.
async fn tenants(mgmt: &Testbed, prefix: &str, n: usize) -> Result<Vec<Tenant>, String> {
    // The controller-manager lifts the Nodes' not-ready taint once kwok reports them Ready.
    let options = Options::default()
        .with(Component::ControllerManager)
        .with(Component::Scheduler)
        .with(Component::Kwok)
        .audit_log();
    let tbs = mgmt
        .start_workloads(n, options)
        .await
        .map_err(err("workload clusters"))?;
    let mut out = Vec::new();
    for (i, tb) in tbs.into_iter().enumerate() {
        let name = format!("{prefix}{i}");
        let ns = mgmt.temp_namespace().await.map_err(err("namespace"))?;
        provider::create_cluster(
            &mgmt.client(),
            &ClusterSetup::new(&ns, &name, tb.kubeconfig()),
        )
        .await
        .map_err(|e| format!("Cluster {name}: {e}"))?;
        fixtures(mgmt, &tb, &ns, &name).await?;
        out.push(Tenant { name, ns, tb });
    }
    Ok(out)
}

async fn fixtures(mgmt: &Testbed, tb: &Testbed, ns: &str, cluster: &str) -> Result<(), String> {
    let management = json!([
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bootstrap-data"},
         "stringData": {"value": "nodeTaints:\n- {key: karpenter.sh/unregistered, effect: NoExecute}\n"}},
        {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "TestMachineTemplate",
         "metadata": {"name": "large", "labels": {"node.cluster.x-k8s.io/karpenter-member": ""}},
         "spec": {"template": {"spec": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}}}
    ]);
    for doc in management.as_array().into_iter().flatten() {
        mgmt.apply_yaml(&doc.to_string(), ns)
            .await
            .map_err(err("management fixtures"))?;
    }
    let templates: Api<DynamicObject> = Api::namespaced_with(
        mgmt.client(),
        ns,
        &provider::test_machine_template_resource(),
    );
    templates
        .patch_status(
            "large",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}),
            ),
        )
        .await
        .map_err(kube_err("template status"))?;
    let workload = json!([
        {"apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
         "metadata": {"name": "default"},
         "spec": {"clusterRef": {"namespace": ns, "name": cluster},
                  "bootstrap": {"dataSecretName": "bootstrap-data"}}},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
         "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.cluster.x-k8s.io",
                     "kind": "ClusterAPINodeClass", "name": "default"}, "requirements": []}},
                  "disruption": {"consolidateAfter": "Never"}}}
    ]);
    for doc in workload.as_array().into_iter().flatten() {
        tb.apply_yaml(&doc.to_string(), "default")
            .await
            .map_err(err("workload fixtures"))?;
    }
    Ok(())
}

async fn opt_in(mgmt: &Testbed, t: &Tenant) -> Result<(), String> {
    Api::<DynamicObject>::namespaced_with(mgmt.client(), &t.ns, &provider::cluster_resource())
        .patch(
            &t.name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"karpenter.cluster.x-k8s.io/enabled": "true"}}}),
            ),
        )
        .await
        .map(|_| ())
        .map_err(kube_err("opt in"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// `karpenter-capi run ARGS` logging to `out/<name>.log`; killed when dropped.
fn operator(a: &Args, name: &str, args: &[&str]) -> Result<tokio::process::Child, String> {
    let log =
        std::fs::File::create(a.out.join(format!("{name}.log"))).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    tokio::process::Command::new(&a.operator)
        .arg("run")
        .args(args)
        .args(["--disable-leader-election", "--metrics-addr"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--health-addr")
        .arg(format!("127.0.0.1:{}", free_port()))
        .stdout(log)
        .stderr(log2)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", a.operator.display()))
}

/// Waits until the NodePool of every tenant is Ready (its cluster is served).
async fn served(tenants: &[&Tenant]) -> Result<(), String> {
    for t in tenants {
        let pools: Api<DynamicObject> = Api::all_with(
            t.tb.client(),
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
                "nodepools",
            ),
        );
        testbed::wait_for(
            &format!("NodePool of {} Ready", t.name),
            Duration::from_secs(300),
            || async {
                let np = pools.get("default").await.ok()?;
                np.data["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    .then_some(())
            },
        )
        .await
        .map_err(err("served"))?;
    }
    Ok(())
}

/// Summed RSS (MiB) of `pids` after 10 s.
async fn settled_rss(pids: &[u32]) -> f64 {
    tokio::time::sleep(Duration::from_secs(10)).await;
    pids.iter().map(|p| rss_mib(*p)).sum()
}

/// A Deployment of `n` pods (500m, 512Mi) in a tenant's cluster. Its ReplicaSet, not bare
/// pods: kube-controller-manager's taint eviction can delete a pod bound in the instant the
/// Node's `karpenter.sh/unregistered` NoExecute taint is lifted (its node cache still has the
/// taint), and a bare pod deleted so is never replaced.
async fn create_pods(client: &Client, n: usize) -> Result<(), String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "inflate"},
        "spec": {"replicas": n, "selector": {"matchLabels": {"app": "inflate"}},
            "template": {"metadata": {"labels": {"app": "inflate"}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}],
                    "terminationGracePeriodSeconds": 0}}}
    }))
    .map_err(|e| format!("deployment: {e}"))?;
    // A loaded API server may refuse a connection: a few more tries.
    let mut tries = 0;
    loop {
        match deployments
            .create(&PostParams::default(), &deployment)
            .await
        {
            Err(kube::Error::Service(_)) if tries < 5 => tries += 1,
            other => return other.map(|_| ()).map_err(kube_err("deployment")),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Seconds until all `n` pods of the tenant run, counted from `start`.
async fn all_running(t: &Tenant, n: usize, start: Instant) -> Result<f64, String> {
    let pods: Api<Pod> = Api::namespaced(t.tb.client(), "default");
    testbed::wait_for(
        &format!("{n} pods Running in {}", t.name),
        Duration::from_secs(900),
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            let running = list
                .items
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .count();
            (running >= n).then_some(())
        },
    )
    .await
    .map_err(err("running"))?;
    Ok(start.elapsed().as_secs_f64())
}

/// P pods in each tenant at once; seconds until all Running, per tenant.
async fn scale(tenants: &[&Tenant], pods: usize) -> Result<Vec<f64>, String> {
    let start = Instant::now();
    let runs = tenants.iter().map(|t| async move {
        create_pods(&t.tb.client(), pods).await?;
        all_running(t, pods, start).await
    });
    futures::future::join_all(runs).await.into_iter().collect()
}

/// API writes by karpenter-capi in the tenants' clusters and their management namespaces,
/// and the NodeClaims in their clusters.
async fn writes(mgmt: &Testbed, tenants: &[Tenant]) -> Result<(usize, usize), String> {
    let ours = |e: &testbed::audit::AuditEvent| {
        e.is_complete() && e.is_write() && e.user_agent.starts_with("karpenter-capi/")
    };
    let mut writes = 0;
    let mut claims = 0;
    let namespaces: Vec<&str> = tenants.iter().map(|t| t.ns.as_str()).collect();
    for t in tenants {
        writes +=
            t.tb.audit_events()
                .map_err(err("audit"))?
                .iter()
                .filter(|e| ours(e))
                .count();
        let api: Api<DynamicObject> = Api::all_with(
            t.tb.client(),
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"),
                "nodeclaims",
            ),
        );
        claims += api
            .list(&ListParams::default())
            .await
            .map_err(kube_err("claims"))?
            .items
            .len();
    }
    writes += mgmt
        .audit_events()
        .map_err(err("audit"))?
        .iter()
        .filter(|e| {
            ours(e)
                && e.object_ref
                    .as_ref()
                    .and_then(|o| o.namespace.as_deref())
                    .is_some_and(|ns| namespaces.contains(&ns))
        })
        .count();
    Ok((writes, claims))
}

/// One row of the report.
struct Row {
    label: String,
    rss: f64,
    times: Vec<f64>,
    writes: Option<(usize, usize)>,
}

fn seconds(times: &[f64]) -> String {
    if times.is_empty() {
        return "-".into();
    }
    let max = times.iter().cloned().fold(0.0, f64::max);
    let min = times.iter().cloned().fold(f64::MAX, f64::min);
    format!("{min:.0}–{max:.0} s")
}

fn report(a: &Args, rows: &[Row]) -> String {
    let mut s = format!(
        "Hub benchmark: {} workload clusters × {} pods (500m/512Mi; template 16 CPU / 64Gi / 110 pods)\n\n\
         | run | RSS (MiB, total) | all pods Running, per cluster (min–max) | writes / NodeClaim |\n\
         | --- | ---: | --- | ---: |\n",
        a.clusters, a.pods
    );
    for r in rows {
        let per_claim = match r.writes {
            Some((w, c)) if c > 0 => format!("{:.1} ({w} / {c})", w as f64 / c as f64),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "| {} | {:.0} | {} | {} |\n",
            r.label,
            r.rss,
            seconds(&r.times),
            per_claim
        ));
    }
    s
}

async fn hub_phase(a: &Args, mgmt: &Testbed, rows: &mut Rows) -> Result<(), String> {
    let tenants = tenants(mgmt, "hub", a.clusters).await?;
    let kubeconfig = mgmt.kubeconfig().display().to_string();
    let hub = operator(a, "hub", &["--mode", "hub", "--kubeconfig", &kubeconfig])?;
    let pid = [hub.id().unwrap_or(0)];
    let row = |label: String, rss, times| Row {
        label,
        rss,
        times,
        writes: None,
    };
    let Some((first, rest)) = tenants.split_first() else {
        return Err("--clusters 0".into());
    };
    opt_in(mgmt, first).await?;
    served(&[first]).await?;
    rows.push(row(
        "hub, 1 engaged idle cluster".into(),
        settled_rss(&pid).await,
        vec![],
    ));
    for t in rest {
        opt_in(mgmt, t).await?;
    }
    served(&tenants.iter().collect::<Vec<_>>()).await?;
    let label = format!("hub, {} engaged idle clusters", a.clusters);
    rows.push(row(label, settled_rss(&pid).await, vec![]));
    let first_time = scale(&[first], a.pods).await?;
    let label = format!("hub, {} engaged, one with {} pods", a.clusters, a.pods);
    rows.push(row(label, settled_rss(&pid).await, first_time));
    let rest_times = scale(&rest.iter().collect::<Vec<_>>(), a.pods).await?;
    rows.push(Row {
        label: format!(
            "hub, {} × {} pods (the other {} at once)",
            a.clusters,
            a.pods,
            rest.len()
        ),
        rss: settled_rss(&pid).await,
        times: rest_times,
        writes: Some(writes(mgmt, &tenants).await?),
    });
    drop(hub);
    Ok(())
}

async fn single_phase(a: &Args, mgmt: &Testbed, rows: &mut Rows) -> Result<(), String> {
    let tenants = tenants(mgmt, "single", a.clusters).await?;
    let management = mgmt.kubeconfig().display().to_string();
    let mut operators = Vec::new();
    for t in &tenants {
        let kubeconfig = t.tb.kubeconfig().display().to_string();
        let args = [
            "--kubeconfig",
            &kubeconfig,
            "--management-kubeconfig",
            &management,
        ];
        operators.push(operator(a, &t.name, &args)?);
    }
    let pids: Vec<u32> = operators.iter().filter_map(|o| o.id()).collect();
    served(&tenants.iter().collect::<Vec<_>>()).await?;
    rows.push(Row {
        label: format!("{} single-cluster operators, idle", a.clusters),
        rss: settled_rss(&pids).await,
        times: vec![],
        writes: None,
    });
    let times = scale(&tenants.iter().collect::<Vec<_>>(), a.pods).await?;
    rows.push(Row {
        label: format!(
            "{} single-cluster operators, {} × {} pods at once",
            a.clusters, a.clusters, a.pods
        ),
        rss: settled_rss(&pids).await,
        times,
        writes: Some(writes(mgmt, &tenants).await?),
    });
    Ok(())
}

async fn run(a: &Args) -> Result<String, String> {
    std::fs::create_dir_all(&a.out).map_err(|e| e.to_string())?;
    let mgmt = Testbed::start(Options::default().with(Component::ClusterApi).audit_log())
        .await
        .map_err(err("management testbed"))?;
    let config = ProviderConfig {
        workloads_from_secrets: true,
        ..ProviderConfig::default()
    };
    let _provider = TestProvider::start(mgmt.client(), config)
        .await
        .map_err(|e| format!("provider: {e}"))?;
    let mut rows = Rows::default();
    let t0 = Instant::now();
    hub_phase(a, &mgmt, &mut rows).await?;
    eprintln!(
        "bench-hub: hub phase done in {:.0}s",
        t0.elapsed().as_secs_f64()
    );
    single_phase(a, &mgmt, &mut rows).await?;
    eprintln!("bench-hub: done in {:.0}s", t0.elapsed().as_secs_f64());
    Ok(report(a, &rows.0))
}

/// The rows so far; each is printed (stderr) as it is measured.
#[derive(Default)]
struct Rows(Vec<Row>);

impl Rows {
    fn push(&mut self, row: Row) {
        eprintln!(
            "bench-hub: {}: RSS {:.0} MiB, Running {}, writes/claims {:?}",
            row.label,
            row.rss,
            seconds(&row.times),
            row.writes
        );
        self.0.push(row);
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench-hub: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args).await {
        Ok(report) => {
            print!("{report}");
            let _ = std::fs::write(args.out.join("report.md"), report);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-hub: {e}");
            ExitCode::FAILURE
        }
    }
}
