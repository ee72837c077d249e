//! End-to-end scale-out benchmark of a node autoscaler on a testbed (`hack/bench/e2e.sh`).
//!
//!   bench-e2e run --kubeconfig PATH --pods N --label NAME --agent UA_PREFIX --pid PID
//!                 --audit-log PATH [--machines] [--deployment NS/NAME] [--metrics-url URL]
//!                 [--metric NAME]... [--timeout SECS] [--cycles N] [--settle SECS] [--out FILE]
//!   bench-e2e compare A.json [B.json] REFERENCE.json
//!   bench-e2e recount --audit-log PATH --agent UA_PREFIX SUMMARY.json   # API requests again
//!
//! `run` watches Pods (of the Deployment, label app=<name>), Nominated events, NodeClaims
//! (karpenter.sh/v1), Nodes and, with `--machines`, Cluster API Machines; scales the Deployment
//! to N, waits until N pods run, scales it to 0 and waits until every NodeClaim, Machine and
//! Node it saw is gone. It then reports the times (from the scale-up, or the scale-down), the
//! per-pod breakdown, the autoscaler's (`--pid`) peak RSS and CPU, and its API requests from the
//! audit log (clients whose User-Agent starts with `--agent`), and writes them as JSON (`--out`).
//! It also samples the autoscaler's RSS before the scale-up and `--settle` seconds (30) after the
//! scale to 0 was complete; `--cycles N` repeats the scale-out and scale-in N times (the figures
//! above are the first cycle's; the RSS after each cycle is reported), to show whether memory
//! returns after a burst. `compare` prints two or three such files side by side, the last the
//! reference (Karpenter's), with its ratio to each of the others: `compare karpenter-capi.json
//! karpenter-capi-kwok.json karpenter.json` shows ours over Cluster API and ours over kwok
//! beside Karpenter's kwok. Figures are reported, never asserted.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testbed::bench::{
    self, ObjectTimes, PodTimes, Process, Summary, Timeline, breakdown, first, last,
};
use testbed::procstat::{http_get, proc_stats, rss_mib};

#[derive(Default)]
struct Args {
    kubeconfig: PathBuf,
    pods: usize,
    label: String,
    agent: String,
    pid: u32,
    audit_log: PathBuf,
    machines: bool,
    deployment: (String, String),
    metrics_url: Option<String>,
    metrics: Vec<String>,
    timeout: u64,
    cycles: usize,
    settle: u64,
    out: Option<PathBuf>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        deployment: ("default".into(), "inflate".into()),
        timeout: 1800,
        cycles: 1,
        settle: 30,
        ..Args::default()
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--kubeconfig" => a.kubeconfig = value()?.into(),
            "--pods" => a.pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--label" => a.label = value()?,
            "--agent" => a.agent = value()?,
            "--pid" => a.pid = value()?.parse().map_err(|e| format!("--pid: {e}"))?,
            "--audit-log" => a.audit_log = value()?.into(),
            "--machines" => a.machines = true,
            "--deployment" => {
                let v = value()?;
                let (ns, name) = v.split_once('/').ok_or("--deployment NS/NAME")?;
                a.deployment = (ns.into(), name.into());
            }
            "--metrics-url" => a.metrics_url = Some(value()?),
            "--metric" => a.metrics.push(value()?),
            "--timeout" => a.timeout = value()?.parse().map_err(|e| format!("--timeout: {e}"))?,
            "--cycles" => a.cycles = value()?.parse().map_err(|e| format!("--cycles: {e}"))?,
            "--settle" => a.settle = value()?.parse().map_err(|e| format!("--settle: {e}"))?,
            "--out" => a.out = Some(value()?.into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.pods == 0 || a.pid == 0 || a.agent.is_empty() {
        return Err("--pods, --pid and --agent are required".into());
    }
    Ok(a)
}

#[derive(Clone, Copy)]
enum Kind {
    Pod,
    Nominated,
    NodeClaim,
    Machine,
    Node,
}

/// Shared by the watch tasks: what was seen, in seconds since `base`.
struct Watched {
    base: Instant,
    timeline: Mutex<Timeline>,
    synced: AtomicUsize,
}

fn conditions(o: &Value) -> &[Value] {
    o["status"]["conditions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn has_condition(o: &Value, kind: &str, status: &str, reason: Option<&str>) -> bool {
    conditions(o).iter().any(|c| {
        c["type"] == kind && c["status"] == status && reason.is_none_or(|r| c["reason"] == r)
    })
}

fn set(slot: &mut Option<f64>, now: f64, cond: bool) {
    if cond && slot.is_none() {
        *slot = Some(now);
    }
}

impl Watched {
    fn seen(&self, kind: Kind, o: &DynamicObject, deleted: bool) {
        let now = self.base.elapsed().as_secs_f64();
        let v = &o.data;
        let name = o.name_any();
        let Ok(mut t) = self.timeline.lock() else {
            return;
        };
        let object = |m: &mut HashMap<String, ObjectTimes>, pid: &Value, ready: bool| {
            let e = m.entry(name.clone()).or_default();
            set(&mut e.created, now, true);
            set(&mut e.gone, now, deleted);
            set(&mut e.ready, now, ready);
            if let Some(p) = pid.as_str().filter(|p| !p.is_empty()) {
                e.provider_id = p.to_string();
            }
        };
        match kind {
            Kind::Pod => {
                let p = t.pods.entry(name.clone()).or_insert_with(PodTimes::default);
                set(&mut p.created, now, true);
                let unsched = has_condition(v, "PodScheduled", "False", Some("Unschedulable"));
                set(&mut p.unschedulable, now, unsched);
                if let Some(node) = v["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
                    set(&mut p.bound, now, true);
                    p.node = node.to_string();
                }
                set(&mut p.running, now, v["status"]["phase"] == "Running");
            }
            Kind::Nominated => {
                if v["involvedObject"]["kind"] == "Pod"
                    && let Some(pod) = v["involvedObject"]["name"].as_str()
                {
                    let p = t.pods.entry(pod.to_string()).or_default();
                    if p.nominated.is_none()
                        && let Some(claim) = v["message"].as_str().and_then(bench::nominated_claim)
                    {
                        p.nominated_claim = claim.to_string();
                    }
                    set(&mut p.nominated, now, true);
                }
            }
            Kind::NodeClaim => {
                object(&mut t.nodeclaims, &v["status"]["providerID"], false);
            }
            Kind::Machine => {
                object(&mut t.machines, &v["spec"]["providerID"], false);
            }
            Kind::Node => {
                let ready = has_condition(v, "Ready", "True", None);
                object(&mut t.nodes, &v["spec"]["providerID"], ready);
            }
        }
    }
}

fn watch(w: Arc<Watched>, api: Api<DynamicObject>, config: watcher::Config, kind: Kind) {
    tokio::spawn(async move {
        let mut synced = false;
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => w.seen(kind, &o, false),
                Ok(Event::Delete(o)) => w.seen(kind, &o, true),
                Ok(Event::InitDone) if !synced => {
                    synced = true;
                    w.synced.fetch_add(1, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(e) => eprintln!("bench-e2e: watch: {e}"),
            }
        }
    });
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Waits until `done` holds, polling every 250 ms; false on timeout.
async fn until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    true
}

/// The RSS `--settle` seconds after a scale to 0 completed (the measurement's definition
/// of "after": the operator's loops keep running meanwhile).
async fn settled_rss(a: &Args) -> f64 {
    tokio::time::sleep(Duration::from_secs(a.settle)).await;
    rss_mib(a.pid)
}

async fn scale(client: &Client, a: &Args, replicas: usize) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &a.deployment.0,
        &resource("apps", "v1", "Deployment", "deployments"),
    );
    let patch = json!({"spec": {"replicas": replicas}});
    api.patch(
        &a.deployment.1,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

/// Watches the Deployment's pods, the Nominated events, NodeClaims, Nodes (and Machines),
/// once they have all listed.
async fn start_watches(client: &Client, a: &Args) -> Result<Arc<Watched>, String> {
    let w = Arc::new(Watched {
        base: Instant::now(),
        timeline: Mutex::new(Timeline::default()),
        synced: AtomicUsize::new(0),
    });
    let (ns, name) = &a.deployment;
    let pods = Api::namespaced_with(client.clone(), ns, &resource("", "v1", "Pod", "pods"));
    let events = Api::namespaced_with(client.clone(), ns, &resource("", "v1", "Event", "events"));
    let all = |r: ApiResource| Api::<DynamicObject>::all_with(client.clone(), &r);
    let cfg = watcher::Config::default;
    watch(
        w.clone(),
        pods,
        cfg().labels(&format!("app={name}")),
        Kind::Pod,
    );
    watch(
        w.clone(),
        events,
        cfg().fields("reason=Nominated"),
        Kind::Nominated,
    );
    let nc = resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims");
    watch(w.clone(), all(nc), cfg(), Kind::NodeClaim);
    watch(
        w.clone(),
        all(resource("", "v1", "Node", "nodes")),
        cfg(),
        Kind::Node,
    );
    let mut watches = 4;
    if a.machines {
        let m = resource("cluster.x-k8s.io", "v1beta2", "Machine", "machines");
        watch(w.clone(), all(m), cfg(), Kind::Machine);
        watches += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    if !until(deadline, || w.synced.load(Ordering::SeqCst) == watches).await {
        return Err("watches did not sync within 60 s".into());
    }
    Ok(w)
}

/// Waits until every NodeClaim, Machine and Node created since `t_up` is gone (or the
/// timeout passes, said on stderr).
async fn wait_gone(a: &Args, w: &Watched, t_up: f64) {
    let alive = || {
        w.timeline
            .lock()
            .map(|t| {
                let live = |m: &HashMap<String, ObjectTimes>| {
                    m.values()
                        .filter(|o| o.created.is_some_and(|c| c >= t_up) && o.gone.is_none())
                        .count()
                };
                live(&t.nodeclaims) + live(&t.machines) + live(&t.nodes)
            })
            .unwrap_or(usize::MAX)
    };
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    if !until(deadline, || alive() == 0).await {
        eprintln!(
            "bench-e2e: {}: {} objects still there after {} s",
            a.label,
            alive(),
            a.timeout
        );
    }
}

/// How many of the watched pods are running.
fn pods_running(w: &Watched) -> usize {
    w.timeline
        .lock()
        .map(|t| t.pods.values().filter(|p| p.running.is_some()).count())
        .unwrap_or(0)
}

/// Cycles 2..=N of `--cycles`: scale out and in again; the RSS settled after each.
async fn more_cycles(client: &Client, a: &Args, w: &Watched) -> Result<Vec<f64>, String> {
    let mut after_rss = Vec::new();
    for cycle in 2..=a.cycles {
        let t_c = w.base.elapsed().as_secs_f64();
        let since = |m: &HashMap<String, ObjectTimes>| {
            m.values()
                .filter(|o| o.created.is_some_and(|c| c >= t_c) && o.gone.is_none())
                .count()
        };
        scale(client, a, a.pods).await.map_err(|e| e.to_string())?;
        let running = || {
            w.timeline
                .lock()
                .map(|t| {
                    t.pods
                        .values()
                        .filter(|p| p.created.is_some_and(|c| c >= t_c) && p.running.is_some())
                        .count()
                })
                .unwrap_or(0)
        };
        let deadline = Instant::now() + Duration::from_secs(a.timeout);
        let ok = until(deadline, || running() >= a.pods).await;
        scale(client, a, 0).await.map_err(|e| e.to_string())?;
        let alive = || {
            w.timeline
                .lock()
                .map(|t| since(&t.nodeclaims) + since(&t.machines) + since(&t.nodes))
                .unwrap_or(usize::MAX)
        };
        let gone = until(deadline, || alive() == 0).await;
        after_rss.push(settled_rss(a).await);
        eprintln!(
            "bench-e2e: {}: cycle {cycle}: {} pods running {ok}, all gone {gone}, RSS {:.1} MiB",
            a.label,
            a.pods,
            after_rss.last().copied().unwrap_or(0.0)
        );
    }
    Ok(after_rss)
}

/// The operator metrics `--metric` names, summed over label sets (none without `--metrics-url`).
fn read_metrics(a: &Args) -> std::collections::BTreeMap<String, f64> {
    let Some(url) = &a.metrics_url else {
        return Default::default();
    };
    let names: Vec<&str> = a.metrics.iter().map(String::as_str).collect();
    bench::metric_sums(&http_get(url).unwrap_or_default(), &names)
}

async fn run(a: Args) -> Result<Summary, String> {
    let client = testbed::client_for(&a.kubeconfig)
        .await
        .map_err(|e| e.to_string())?;
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs_f64();
    let w = start_watches(&client, &a).await?;
    let at = |w: &Watched| w.base.elapsed().as_secs_f64();
    let (ns, name) = &a.deployment;

    let (_, cpu0) = proc_stats(a.pid);
    let idle_rss = rss_mib(a.pid);
    let t_up = at(&w);
    scale(&client, &a, a.pods)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("bench-e2e: {}: scaled {ns}/{name} to {}", a.label, a.pods);
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let running = || pods_running(&w);
    let ok = until(deadline, || running() >= a.pods).await;
    let t_running = at(&w);
    let (_, cpu1) = proc_stats(a.pid);
    if !ok {
        eprintln!(
            "bench-e2e: {}: timed out with {} of {} pods running",
            a.label,
            running(),
            a.pods
        );
    }
    let out_timeline = w.timeline.lock().map(|t| t.clone()).unwrap_or_default();

    scale(&client, &a, 0).await.map_err(|e| e.to_string())?;
    let t_down = at(&w);
    eprintln!(
        "bench-e2e: {}: scaled to 0, waiting for NodeClaims, Machines, Nodes to go",
        a.label
    );
    wait_gone(&a, &w, t_up).await;
    let t_gone = at(&w);
    let (_, cpu2) = proc_stats(a.pid);
    let end = w.timeline.lock().map(|t| t.clone()).unwrap_or_default();
    let mut after_rss = vec![settled_rss(&a).await];
    after_rss.extend(more_cycles(&client, &a, &w).await?);
    let (hwm, _) = proc_stats(a.pid);

    let t = bench::shifted(&out_timeline, t_up);
    let gone = |m: &HashMap<String, ObjectTimes>| {
        let mut any = false;
        let x = last(
            m.values()
                .filter(|o| o.created.is_some_and(|c| c >= t_up))
                .map(|o| {
                    any = true;
                    o.gone.map(|g| g - t_down)
                }),
        );
        if any { x } else { None }
    };
    let fresh = |m: &HashMap<String, ObjectTimes>| {
        m.values()
            .filter(|o| o.created.is_some_and(|c| c >= 0.0))
            .count()
    };
    let audit = read_audit(&a.audit_log)?;
    let metrics = read_metrics(&a);
    Ok(Summary {
        label: a.label.clone(),
        pods: a.pods,
        first_nodeclaim: first(t.nodeclaims.values().map(|o| o.created)),
        all_nodeclaims: last(t.nodeclaims.values().map(|o| o.created)),
        all_machines: last(t.machines.values().map(|o| o.created)),
        all_nodes_ready: last(t.nodes.values().map(|o| o.ready)),
        all_running: last(t.pods.values().map(|p| p.running)),
        nodeclaims: fresh(&t.nodeclaims),
        machines: fresh(&t.machines),
        nodes: fresh(&t.nodes),
        breakdown: breakdown(&t),
        machine_after_nodeclaim: bench::machine_after_nodeclaim(&t),
        placed_after_unschedulable: bench::placed_after_unschedulable(&t),
        nodeclaims_gone: gone(&end.nodeclaims),
        machines_gone: gone(&end.machines),
        nodes_gone: gone(&end.nodes),
        process: Process {
            peak_rss_mib: hwm,
            idle_rss_mib: idle_rss,
            after_rss_mib: after_rss,
            cpu_scale_out: cpu1 - cpu0,
            cpu_scale_in: cpu2 - cpu1,
        },
        writes_scale_out: bench::writes(&audit, &a.agent, wall + t_up, wall + t_running),
        writes_scale_in: bench::writes(&audit, &a.agent, wall + t_down, wall + t_gone + 1.0),
        metrics,
    })
}

/// The audit log and the files kube-apiserver rotated it into (`audit-<time>.log`, 100 MB each).
fn read_audit(path: &std::path::Path) -> Result<Vec<testbed::audit::AuditEvent>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(path.parent().unwrap_or(".".as_ref()))
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
        })
        .collect();
    files.sort();
    files.push(path.to_path_buf());
    let mut events = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        events.extend(testbed::audit::parse(&text).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    Ok(events)
}

/// Recounts a summary's API requests from the audit log, the windows bounded by the
/// Deployment's scale patches (for runs whose log rotated before the count read it).
fn recount(mut it: impl Iterator<Item = String>) -> Result<(), String> {
    let (mut audit, mut agent, mut file) = (None, None, None);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--audit-log" => audit = it.next().map(PathBuf::from),
            "--agent" => agent = it.next(),
            _ => file = Some(flag),
        }
    }
    let (Some(audit), Some(agent), Some(file)) = (audit, agent, file) else {
        return Err("recount --audit-log PATH --agent PREFIX SUMMARY.json".into());
    };
    let mut s = read_summary(&file)?;
    let events = read_audit(&audit)?;
    let [up, down] = bench::scale_patches(&events, "inflate")[..] else {
        return Err("expected two patches of deployment inflate in the audit log".into());
    };
    s.writes_scale_out = bench::writes(&events, &agent, up, down);
    s.writes_scale_in = bench::writes(&events, &agent, down, f64::MAX);
    println!("{}", bench::report(&s));
    let json = serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?;
    std::fs::write(&file, json).map_err(|e| format!("{file}: {e}"))
}

fn read_summary(path: &str) -> Result<Summary, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let result = match args.next().as_deref() {
        Some("run") => match parse(args) {
            Ok(a) => {
                let out = a.out.clone();
                run(a).await.and_then(|s| {
                    println!("{}", bench::report(&s));
                    let json = serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?;
                    match out {
                        Some(p) => {
                            std::fs::write(&p, json).map_err(|e| format!("{}: {e}", p.display()))
                        }
                        None => Ok(()),
                    }
                })
            }
            Err(e) => Err(e),
        },
        Some("recount") => recount(args),
        Some("compare") => {
            let files: Vec<String> = args.collect();
            if (2..=3).contains(&files.len()) {
                files
                    .iter()
                    .map(|f| read_summary(f))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|s| print!("{}", bench::compare(&s.iter().collect::<Vec<_>>())))
            } else {
                Err("compare needs two or three summary files".into())
            }
        }
        _ => Err(
            "usage: bench-e2e run ... | bench-e2e compare A.json [B.json] REFERENCE.json (see the source)"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-e2e: {e}");
            ExitCode::FAILURE
        }
    }
}
