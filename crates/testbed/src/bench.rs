//! Figures of an end-to-end scale-out (`hack/bench/e2e.sh`, `bench-e2e`): what was seen when
//! (times in seconds since the Deployment was scaled), where the time of each pod went, and
//! which API writes a client made, from the audit log, told apart by User-Agent prefix. Pure
//! values and functions; the binary watches the cluster and fills them in.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::audit::AuditEvent;

/// First times (seconds since the scale-up) at which the watches saw a pod reach each stage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodTimes {
    pub created: Option<f64>,
    /// `PodScheduled=False`, reason `Unschedulable` (kube-scheduler gave up on it).
    pub unschedulable: Option<f64>,
    /// A `Nominated` event about the pod (the autoscaler placed it on a NodeClaim).
    pub nominated: Option<f64>,
    /// The NodeClaim its first `Nominated` event names ("Pod should schedule on:
    /// nodeclaim/NAME", Karpenter's wording and ours), if any.
    pub nominated_claim: String,
    pub bound: Option<f64>,
    pub node: String,
    pub running: Option<f64>,
}

/// First times at which an object (NodeClaim, Machine, Node) was seen, became ready (Nodes)
/// and was seen deleted, with the provider ID that links the three.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectTimes {
    pub created: Option<f64>,
    pub ready: Option<f64>,
    pub gone: Option<f64>,
    pub provider_id: String,
}

/// Everything the watches saw.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub pods: HashMap<String, PodTimes>,
    pub nodeclaims: HashMap<String, ObjectTimes>,
    pub machines: HashMap<String, ObjectTimes>,
    pub nodes: HashMap<String, ObjectTimes>,
}

/// Percentiles of a sample (seconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(mut xs: Vec<f64>) -> Option<Self> {
        if xs.is_empty() {
            return None;
        }
        xs.sort_by(f64::total_cmp);
        let at = |q: f64| xs[((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1];
        Some(Percentiles {
            n: xs.len(),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: xs[xs.len() - 1],
        })
    }
}

/// The stages of a pod, in order, with the time the pod reached each (its node's NodeClaim,
/// Machine and Node found by provider ID). `None` where not seen or not applicable.
pub(crate) fn pod_stages(t: &Timeline, pod: &PodTimes) -> Vec<(&'static str, Option<f64>)> {
    let node = t.nodes.get(&pod.node);
    let pid = node.map(|n| n.provider_id.as_str()).unwrap_or_default();
    let by_pid = |m: &HashMap<String, ObjectTimes>| {
        m.values()
            .find(|o| !pid.is_empty() && o.provider_id == pid)
            .and_then(|o| o.created)
    };
    vec![
        ("created", pod.created),
        ("unschedulable", pod.unschedulable),
        ("NodeClaim", by_pid(&t.nodeclaims)),
        ("nominated", pod.nominated),
        ("Machine", by_pid(&t.machines)),
        ("Node", node.and_then(|n| n.created)),
        ("Node Ready", node.and_then(|n| n.ready)),
        ("bound", pod.bound),
        ("Running", pod.running),
    ]
}

/// One row of the per-pod breakdown: time since the scale-up at which pods reached `stage`,
/// and time from the previous stage the pod reached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageRow {
    pub stage: String,
    pub since_scale: Option<Percentiles>,
    pub from_previous: Option<Percentiles>,
}

pub fn breakdown(t: &Timeline) -> Vec<StageRow> {
    let mut abs: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut delta: Vec<Vec<f64>> = Vec::new();
    for pod in t.pods.values() {
        let stages = pod_stages(t, pod);
        if abs.is_empty() {
            abs = stages.iter().map(|(s, _)| (*s, Vec::new())).collect();
            delta = vec![Vec::new(); stages.len()];
        }
        let mut prev: Option<f64> = None;
        for (i, (_, at)) in stages.iter().enumerate() {
            if let Some(at) = at {
                abs[i].1.push(*at);
                if let Some(p) = prev {
                    delta[i].push(at - p);
                }
                prev = Some(*at);
            }
        }
    }
    abs.into_iter()
        .zip(delta)
        .map(|((stage, xs), ds)| StageRow {
            stage: stage.to_string(),
            since_scale: Percentiles::of(xs),
            from_previous: Percentiles::of(ds),
        })
        .collect()
}

/// Per NodeClaim, the time from its creation to its Machine's (linked by provider ID): the
/// launch alone. The per-pod `Machine` stage is timed from the pod's previous stage, its
/// nomination, which may name another NodeClaim than the one whose Node the pod lands on.
pub fn machine_after_nodeclaim(t: &Timeline) -> Option<Percentiles> {
    let machines: HashMap<&str, f64> = t
        .machines
        .values()
        .filter(|m| !m.provider_id.is_empty())
        .filter_map(|m| Some((m.provider_id.as_str(), m.created?)))
        .collect();
    Percentiles::of(
        t.nodeclaims
            .values()
            .filter(|c| !c.provider_id.is_empty())
            .filter_map(|c| Some(machines.get(c.provider_id.as_str())? - c.created?))
            .collect(),
    )
}

/// Per pod, from `PodScheduled=False/Unschedulable` to the moment the autoscaler gave it a
/// place: the creation of the NodeClaim its first `Nominated` event names, or, for a
/// NodeClaim that already existed (a place on one in flight), the nomination itself. Unlike
/// the breakdown's `NodeClaim` stage (the NodeClaim of the Node the pod lands on, which
/// kube-scheduler picks) this is the autoscaler's own response. Only pods with a
/// `Nominated` event count (both autoscalers rate limit those events); `n` says how many.
pub fn placed_after_unschedulable(t: &Timeline) -> Option<Percentiles> {
    Percentiles::of(
        t.pods
            .values()
            .filter_map(|p| {
                let unschedulable = p.unschedulable?;
                let claim = t.nodeclaims.get(&p.nominated_claim)?.created?;
                let placed = if claim >= unschedulable {
                    claim
                } else {
                    p.nominated?
                };
                Some((placed - unschedulable).max(0.0))
            })
            .collect(),
    )
}

/// The NodeClaim a `Nominated` event's message names.
pub fn nominated_claim(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("nodeclaim/")?;
    let name = rest.split(|c: char| c.is_whitespace() || c == ',').next()?;
    (!name.is_empty()).then_some(name)
}

/// The timeline with every time moved `by` seconds earlier (times since another origin).
pub fn shifted(t: &Timeline, by: f64) -> Timeline {
    let s = |x: Option<f64>| x.map(|x| x - by);
    let objects = |m: &HashMap<String, ObjectTimes>| {
        m.iter()
            .map(|(k, o)| {
                let o = ObjectTimes {
                    created: s(o.created),
                    ready: s(o.ready),
                    gone: s(o.gone),
                    provider_id: o.provider_id.clone(),
                };
                (k.clone(), o)
            })
            .collect()
    };
    Timeline {
        pods: t
            .pods
            .iter()
            .map(|(k, p)| {
                let p = PodTimes {
                    created: s(p.created),
                    unschedulable: s(p.unschedulable),
                    nominated: s(p.nominated),
                    nominated_claim: p.nominated_claim.clone(),
                    bound: s(p.bound),
                    node: p.node.clone(),
                    running: s(p.running),
                };
                (k.clone(), p)
            })
            .collect(),
        nodeclaims: objects(&t.nodeclaims),
        machines: objects(&t.machines),
        nodes: objects(&t.nodes),
    }
}

/// Latest time over objects created after the scale-up (`None` if none).
pub fn last<'a>(it: impl Iterator<Item = Option<f64>> + 'a) -> Option<f64> {
    it.flatten().filter(|x| *x >= 0.0).reduce(f64::max)
}

pub fn first<'a>(it: impl Iterator<Item = Option<f64>> + 'a) -> Option<f64> {
    it.flatten().filter(|x| *x >= 0.0).reduce(f64::min)
}

/// A client's API writes in a time window, from the audit log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Writes {
    /// `verb resource[/subresource]` → count (events and leases included).
    pub by_verb_resource: BTreeMap<String, u64>,
    pub total: u64,
    pub events: u64,
    pub leases: u64,
    /// Writes answered 409 Conflict.
    pub conflicts: u64,
    /// Writes answered 422 Unprocessable: a JSON patch whose `test` failed (a write computed
    /// from a stale read, like a 409) or an invalid object.
    #[serde(default)]
    pub refused: u64,
    /// The 409s and 422s by `code verb resource[/subresource] fieldManager`, to tell whose
    /// they are.
    #[serde(default)]
    pub refused_by: BTreeMap<String, u64>,
    /// Reads (get, list, watch) for comparison.
    pub reads: u64,
}

impl Writes {
    /// Writes other than events and leases.
    pub fn objects(&self) -> u64 {
        self.total - self.events - self.leases
    }
}

/// Unix seconds of an audit event's `requestReceivedTimestamp`.
pub fn received(e: &AuditEvent) -> Option<f64> {
    let ts = e.request_received_timestamp.as_deref()?;
    let t: k8s_openapi::jiff::Timestamp = ts.parse().ok()?;
    Some(t.as_microsecond() as f64 / 1e6)
}

/// Completed requests by clients whose User-Agent starts with `agent`, received within
/// `[from, to)` (Unix seconds).
pub fn writes(events: &[AuditEvent], agent: &str, from: f64, to: f64) -> Writes {
    let mut w = Writes::default();
    for e in events {
        if !e.is_complete() || !e.user_agent.starts_with(agent) {
            continue;
        }
        if !received(e).is_some_and(|t| t >= from && t < to) {
            continue;
        }
        if !e.is_write() {
            w.reads += 1;
            continue;
        }
        let resource = e.resource();
        let sub = e
            .object_ref
            .as_ref()
            .and_then(|r| r.subresource.as_deref())
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let what = format!("{} {resource}{sub}", e.verb);
        w.total += 1;
        match resource {
            "events" => w.events += 1,
            "leases" => w.leases += 1,
            _ => {}
        }
        if let Some(code @ (409 | 422)) = e.response_status.as_ref().and_then(|s| s.code) {
            *(if code == 409 {
                &mut w.conflicts
            } else {
                &mut w.refused
            }) += 1;
            let by = format!("{code} {what} {}", field_manager(&e.request_uri));
            *w.refused_by.entry(by).or_default() += 1;
        }
        *w.by_verb_resource.entry(what).or_default() += 1;
    }
    w
}

/// The `fieldManager` query parameter of a request URI (`-` without one).
fn field_manager(uri: &str) -> &str {
    let query = uri.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldManager="))
        .unwrap_or("-")
}

/// Unix times of the patches of Deployment `name` in the audit log (the bench's scale-up and
/// scale-down), in order: they bound the scale-out and scale-in windows.
pub fn scale_patches(events: &[AuditEvent], name: &str) -> Vec<f64> {
    let mut out: Vec<f64> = events
        .iter()
        .filter(|e| e.is_complete() && e.verb == "patch" && e.resource() == "deployments")
        .filter(|e| {
            e.object_ref
                .as_ref()
                .is_some_and(|r| r.name.as_deref() == Some(name))
        })
        .filter_map(received)
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// Peak memory and CPU of the autoscaler process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// VmHWM, MiB.
    pub peak_rss_mib: f64,
    /// user + system CPU seconds from the scale-up until all pods ran.
    pub cpu_scale_out: f64,
    /// ... from the scale-down until everything was gone.
    pub cpu_scale_in: f64,
    /// VmRSS, MiB, just before the (first) scale-up.
    #[serde(default)]
    pub idle_rss_mib: f64,
    /// VmRSS, MiB, a settle time after each cycle's scale to 0 was complete.
    #[serde(default)]
    pub after_rss_mib: Vec<f64>,
}

/// One run's figures; `bench-e2e compare` puts two or three side by side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub label: String,
    pub pods: usize,
    pub first_nodeclaim: Option<f64>,
    pub all_nodeclaims: Option<f64>,
    pub all_machines: Option<f64>,
    pub all_nodes_ready: Option<f64>,
    pub all_running: Option<f64>,
    pub nodeclaims: usize,
    pub machines: usize,
    pub nodes: usize,
    pub breakdown: Vec<StageRow>,
    /// See [`machine_after_nodeclaim`].
    #[serde(default)]
    pub machine_after_nodeclaim: Option<Percentiles>,
    /// See [`placed_after_unschedulable`].
    #[serde(default)]
    pub placed_after_unschedulable: Option<Percentiles>,
    /// From the scale-down: all NodeClaims, Machines, Nodes deleted.
    pub nodeclaims_gone: Option<f64>,
    pub machines_gone: Option<f64>,
    pub nodes_gone: Option<f64>,
    pub process: Process,
    pub writes_scale_out: Writes,
    pub writes_scale_in: Writes,
    /// Operator metrics read at the end (name → sum over label sets).
    pub metrics: BTreeMap<String, f64>,
}

/// Sums of Prometheus text-format samples whose name is in `names` (over all label sets).
pub fn metric_sums(text: &str, names: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        // A metric name is `[a-zA-Z_:][a-zA-Z0-9_:]*`; labels or the value follow it.
        let end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(line.len());
        let name = &line[..end];
        if !names.contains(&name) {
            continue;
        }
        if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *out.entry(name.to_string()).or_default() += v;
        }
    }
    out
}

fn secs(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.1}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", b / a),
        _ => "-".into(),
    }
}

/// The figures `compare` shows, each read from a summary.
type Figure = (&'static str, fn(&Summary) -> Option<f64>);

const FIGURES: &[Figure] = &[
    ("first NodeClaim (s)", |s| s.first_nodeclaim),
    ("all NodeClaims (s)", |s| s.all_nodeclaims),
    ("all Nodes Ready (s)", |s| s.all_nodes_ready),
    ("all pods Running (s)", |s| s.all_running),
    ("NodeClaims", |s| Some(s.nodeclaims as f64)),
    ("unschedulable → placed on a NodeClaim, p99 (s)", |s| {
        s.placed_after_unschedulable.as_ref().map(|p| p.p99)
    }),
    ("Machine after its NodeClaim, p99 (s)", |s| {
        s.machine_after_nodeclaim.as_ref().map(|p| p.p99)
    }),
    (
        "Machines launched (karpenter_capi_machines_launched_total)",
        |s| {
            s.metrics
                .get("karpenter_capi_machines_launched_total")
                .copied()
        },
    ),
    ("idle RSS before scale-out (MiB)", |s| {
        (s.process.idle_rss_mib > 0.0).then_some(s.process.idle_rss_mib)
    }),
    ("peak RSS (MiB)", |s| Some(s.process.peak_rss_mib)),
    ("RSS after the last scale to 0 (MiB)", |s| {
        s.process.after_rss_mib.last().copied()
    }),
    ("CPU s, scale-out", |s| Some(s.process.cpu_scale_out)),
    ("API writes, scale-out (no events/leases)", |s| {
        Some(s.writes_scale_out.objects() as f64)
    }),
    ("  per NodeClaim", |s| {
        (s.nodeclaims > 0).then(|| s.writes_scale_out.objects() as f64 / s.nodeclaims as f64)
    }),
    ("  events", |s| Some(s.writes_scale_out.events as f64)),
    ("  leases", |s| Some(s.writes_scale_out.leases as f64)),
    ("  409 conflicts", |s| {
        Some(s.writes_scale_out.conflicts as f64)
    }),
    ("  422 refused", |s| Some(s.writes_scale_out.refused as f64)),
    ("API reads, scale-out", |s| {
        Some(s.writes_scale_out.reads as f64)
    }),
    ("scale to 0: NodeClaims gone (s)", |s| s.nodeclaims_gone),
    ("API writes, scale-in (no events/leases)", |s| {
        Some(s.writes_scale_in.objects() as f64)
    }),
    ("  409 conflicts, scale-in", |s| {
        Some(s.writes_scale_in.conflicts as f64)
    }),
    ("  422 refused, scale-in", |s| {
        Some(s.writes_scale_in.refused as f64)
    }),
];

/// Markdown table: the summaries side by side, the last one the reference (Karpenter's), then
/// one ratio column `reference/x` for each of the others. With two (`a`, `b`): `a`, `b`,
/// `b/a`; with three (ours over Cluster API, ours over kwok, Karpenter's kwok): the three and
/// two ratios against Karpenter. `summaries` must not be empty.
pub fn compare(summaries: &[&Summary]) -> String {
    let Some((reference, ours)) = summaries.split_last() else {
        return String::new();
    };
    let mut header = format!("| {} pods |", summaries[0].pods);
    for s in summaries {
        header += &format!(" {} |", s.label);
    }
    for s in ours {
        header += &format!(" {}/{} |", reference.label, s.label);
    }
    let columns = summaries.len() + ours.len();
    let mut out = format!("{header}\n|---|{}\n", "---:|".repeat(columns));
    let fmt = |v: Option<f64>| match v {
        Some(v) if v.fract() == 0.0 && v.abs() < 1e12 => format!("{v:.0}"),
        v => secs(v),
    };
    for (name, figure) in FIGURES {
        let y = figure(reference);
        let mut row = format!("| {name} |");
        for s in summaries {
            row += &format!(" {} |", fmt(figure(s)));
        }
        for s in ours {
            row += &format!(" {} |", ratio(figure(s), y));
        }
        out += &row;
        out.push('\n');
    }
    out
}

/// Human-readable report of one run.
pub fn report(s: &Summary) -> String {
    let mut out = format!(
        "{}: {} pods; first NodeClaim {} s, all {} NodeClaims {} s, all {} Machines {} s, all {} Nodes Ready {} s, all pods Running {} s\n",
        s.label,
        s.pods,
        secs(s.first_nodeclaim),
        s.nodeclaims,
        secs(s.all_nodeclaims),
        s.machines,
        secs(s.all_machines),
        s.nodes,
        secs(s.all_nodes_ready),
        secs(s.all_running)
    );
    out += "\n| stage (per pod) | since scale-up p50 / p90 / p99 / max (s) | from previous stage p50 / p90 / p99 / max (s) |\n|---|---|---|\n";
    let p = |x: &Option<Percentiles>| {
        x.as_ref().map_or("-".into(), |p| {
            format!("{:.1} / {:.1} / {:.1} / {:.1}", p.p50, p.p90, p.p99, p.max)
        })
    };
    for r in &s.breakdown {
        out += &format!(
            "| {} | {} | {} |\n",
            r.stage,
            p(&r.since_scale),
            p(&r.from_previous)
        );
    }
    out += &format!(
        "\nper NodeClaim, its Machine created after it p50 / p90 / p99 / max (s): {}\n",
        p(&s.machine_after_nodeclaim)
    );
    out += &format!(
        "per nominated pod ({}), unschedulable → placed on a NodeClaim p50 / p90 / p99 / max (s): {}\n",
        s.placed_after_unschedulable.as_ref().map_or(0, |p| p.n),
        p(&s.placed_after_unschedulable)
    );
    out += &format!(
        "\nprocess: peak RSS {:.0} MiB, CPU {:.1} s scale-out, {:.1} s scale-in\n",
        s.process.peak_rss_mib, s.process.cpu_scale_out, s.process.cpu_scale_in
    );
    if s.process.idle_rss_mib > 0.0 {
        let after: Vec<String> = s
            .process
            .after_rss_mib
            .iter()
            .map(|r| format!("{r:.1}"))
            .collect();
        out += &format!(
            "RSS: idle {:.1} MiB before scale-out, after each scale to 0: {} MiB\n",
            s.process.idle_rss_mib,
            after.join(", ")
        );
    }
    for (phase, w) in [
        ("scale-out", &s.writes_scale_out),
        ("scale-in", &s.writes_scale_in),
    ] {
        out += &format!(
            "API writes, {phase}: {} ({} objects, {} events, {} leases, {} 409 conflicts, {} 422 refused; {} reads)\n",
            w.total,
            w.objects(),
            w.events,
            w.leases,
            w.conflicts,
            w.refused,
            w.reads
        );
        for (k, v) in &w.by_verb_resource {
            out += &format!("  {v:>6}  {k}\n");
        }
        for (k, v) in &w.refused_by {
            out += &format!("  {v:>6}  {k}\n");
        }
    }
    out += &format!(
        "scale to 0: NodeClaims gone {} s, Machines gone {} s, Nodes gone {} s\n",
        secs(s.nodeclaims_gone),
        secs(s.machines_gone),
        secs(s.nodes_gone)
    );
    for (k, v) in &s.metrics {
        out += &format!("metric {k} = {v}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=100).map(f64::from).collect()).expect("some");
        assert_eq!(
            (p.n, p.p50, p.p90, p.p99, p.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(vec![]), None);
        let one = Percentiles::of(vec![3.0]).expect("one");
        assert_eq!((one.p50, one.max), (3.0, 3.0));
    }

    #[test]
    fn a_pod_is_linked_to_its_nodeclaim_and_machine_by_provider_id() {
        let mut t = Timeline::default();
        let obj = |created, pid: &str| ObjectTimes {
            created: Some(created),
            provider_id: pid.into(),
            ..ObjectTimes::default()
        };
        t.nodeclaims.insert("nc".into(), obj(2.0, "p://1"));
        t.nodeclaims.insert("other".into(), obj(9.0, "p://2"));
        t.machines.insert("m".into(), obj(2.5, "p://1"));
        t.nodes.insert(
            "n".into(),
            ObjectTimes {
                ready: Some(4.0),
                ..obj(3.0, "p://1")
            },
        );
        t.pods.insert(
            "p".into(),
            PodTimes {
                created: Some(0.1),
                unschedulable: Some(0.2),
                bound: Some(4.5),
                node: "n".into(),
                running: Some(5.0),
                ..PodTimes::default()
            },
        );
        let rows = breakdown(&t);
        let at = |stage: &str| {
            rows.iter()
                .find(|r| r.stage == stage)
                .and_then(|r| r.since_scale.clone())
                .map(|p| p.max)
        };
        assert_eq!(at("NodeClaim"), Some(2.0));
        assert_eq!(at("Machine"), Some(2.5));
        assert_eq!(at("nominated"), None);
        let running = rows.iter().find(|r| r.stage == "Running").expect("row");
        assert_eq!(running.from_previous.as_ref().map(|p| p.max), Some(0.5));
        // A stage not reached is skipped: Machine follows NodeClaim directly.
        let machine = rows.iter().find(|r| r.stage == "Machine").expect("row");
        assert_eq!(machine.from_previous.as_ref().map(|p| p.max), Some(0.5));
    }

    #[test]
    fn a_pod_is_placed_when_its_nominated_nodeclaim_appears_or_when_nominated_to_one_in_flight() {
        let mut t = Timeline::default();
        let claim = |created| ObjectTimes {
            created: Some(created),
            ..ObjectTimes::default()
        };
        t.nodeclaims.insert("new".into(), claim(12.0));
        t.nodeclaims.insert("old".into(), claim(1.0));
        let pod = |unschedulable, nominated, claim: &str| PodTimes {
            unschedulable: Some(unschedulable),
            nominated: Some(nominated),
            nominated_claim: claim.into(),
            ..PodTimes::default()
        };
        // Waited for a new NodeClaim: 10 s; placed on one in flight: its nomination, 3 s.
        t.pods.insert("a".into(), pod(2.0, 12.5, "new"));
        t.pods.insert("b".into(), pod(4.0, 7.0, "old"));
        // Not nominated, or nominated to a NodeClaim never seen: not counted.
        t.pods.insert("c".into(), pod(4.0, 7.0, ""));
        t.pods.insert("d".into(), pod(4.0, 7.0, "unknown"));
        let p = placed_after_unschedulable(&t).expect("two placed");
        assert_eq!((p.n, p.p50, p.max), (2, 3.0, 10.0));
        assert_eq!(
            nominated_claim("Pod should schedule on: nodeclaim/default-abc"),
            Some("default-abc")
        );
        assert_eq!(
            nominated_claim("Pod should schedule on: nodeclaim/x, node/y"),
            Some("x")
        );
        assert_eq!(nominated_claim("Pod should schedule on: node/n1"), None);
    }

    #[test]
    fn a_machine_is_timed_from_its_own_nodeclaim() {
        let mut t = Timeline::default();
        let obj = |created, pid: &str| ObjectTimes {
            created: Some(created),
            provider_id: pid.into(),
            ..ObjectTimes::default()
        };
        t.nodeclaims.insert("a".into(), obj(2.0, "p://1"));
        t.nodeclaims.insert("b".into(), obj(5.0, "p://2"));
        t.nodeclaims.insert("launching".into(), obj(9.0, ""));
        t.machines.insert("ma".into(), obj(2.5, "p://1"));
        t.machines.insert("mb".into(), obj(7.0, "p://2"));
        let p = machine_after_nodeclaim(&t).expect("two linked");
        assert_eq!((p.n, p.p50, p.max), (2, 0.5, 2.0));
        assert_eq!(machine_after_nodeclaim(&Timeline::default()), None);
    }

    #[test]
    fn writes_are_counted_per_agent_verb_and_resource_in_the_window() {
        let line = |agent: &str, verb: &str, res: &str, sub: &str, code: u16, at: &str| {
            format!(
                r#"{{"stage":"ResponseComplete","verb":"{verb}","userAgent":"{agent}","requestURI":"/x","requestReceivedTimestamp":"{at}","objectRef":{{"resource":"{res}"{sub}}},"responseStatus":{{"code":{code}}}}}"#
            )
        };
        let sub = r#","subresource":"status""#;
        let text = [
            line(
                "karpenter-capi/0.1.0 (a)",
                "create",
                "nodeclaims",
                "",
                201,
                "2026-01-01T00:00:01.000000Z",
            ),
            line(
                "karpenter-capi/0.1.0 (a)",
                "patch",
                "nodeclaims",
                sub,
                409,
                "2026-01-01T00:00:02.000000Z",
            ),
            line(
                "karpenter-capi/0.1.0 (a)",
                "create",
                "events",
                "",
                201,
                "2026-01-01T00:00:02.500000Z",
            ),
            line(
                "karpenter-capi/0.1.0 (a)",
                "update",
                "leases",
                "",
                200,
                "2026-01-01T00:00:03.000000Z",
            ),
            line(
                "karpenter-capi/0.1.0 (a)",
                "get",
                "nodes",
                "",
                200,
                "2026-01-01T00:00:03.000000Z",
            ),
            line(
                "karpenter-capi/0.1.0 (a)",
                "create",
                "nodeclaims",
                "",
                201,
                "2026-01-01T00:01:00.000000Z",
            ),
            line(
                "kube-scheduler/v1.36.3",
                "create",
                "pods",
                r#","subresource":"binding""#,
                201,
                "2026-01-01T00:00:02.000000Z",
            ),
        ]
        .join("\n")
            + "\n"
            + &line(
                "karpenter-capi/0.1.0 (a)",
                "patch",
                "nodeclaims",
                sub,
                422,
                "2026-01-01T00:00:04.000000Z",
            )
            .replace("/x", "/x?fieldManager=karpenter-capi-disruption")
            + "\n";
        let events = crate::audit::parse(&text).expect("parses");
        let from = received(&events[0]).expect("timestamp");
        let w = writes(&events, "karpenter-capi/", from, from + 10.0);
        assert_eq!(w.total, 5);
        assert_eq!((w.events, w.leases, w.conflicts, w.reads), (1, 1, 1, 1));
        assert_eq!(w.refused, 1);
        assert_eq!(
            w.refused_by["422 patch nodeclaims/status karpenter-capi-disruption"],
            1
        );
        assert_eq!(w.refused_by["409 patch nodeclaims/status -"], 1);
        assert_eq!(w.objects(), 3);
        assert_eq!(w.by_verb_resource["patch nodeclaims/status"], 2);
        assert_eq!(w.by_verb_resource["create nodeclaims"], 1);
    }

    #[test]
    fn metric_sums_add_label_sets() {
        let text = "# HELP x\nkarpenter_capi_machines_launched_total{pool=\"a\"} 3\nkarpenter_capi_machines_launched_total{pool=\"b\"} 4\nother 1\n";
        let m = metric_sums(text, &["karpenter_capi_machines_launched_total", "missing"]);
        assert_eq!(m.len(), 1);
        assert_eq!(m["karpenter_capi_machines_launched_total"], 7.0);
    }

    /// A summary as `bench-e2e run` writes it (JSON), with `figures` over the defaults.
    fn summary_json(figures: serde_json::Value) -> Summary {
        let mut v = serde_json::to_value(Summary::default()).expect("serializes");
        if let (Some(v), Some(f)) = (v.as_object_mut(), figures.as_object()) {
            v.extend(f.clone());
        }
        serde_json::from_value(v).expect("a summary")
    }

    #[test]
    fn compare_puts_each_of_ours_beside_the_reference_with_its_ratio() {
        let capi = summary_json(serde_json::json!({
            "label": "karpenter-capi", "pods": 200, "all_running": 40.0, "nodeclaims": 10,
            "process": {"peak_rss_mib": 50.0, "cpu_scale_out": 2.0, "cpu_scale_in": 1.0}}));
        let kwok = summary_json(serde_json::json!({
            "label": "karpenter-capi-kwok", "pods": 200, "all_running": 20.0, "nodeclaims": 10,
            "process": {"peak_rss_mib": 40.0, "cpu_scale_out": 1.0, "cpu_scale_in": 1.0}}));
        let karpenter = summary_json(serde_json::json!({
            "label": "karpenter", "pods": 200, "all_running": 30.0, "nodeclaims": 12,
            "process": {"peak_rss_mib": 160.0, "cpu_scale_out": 3.0, "cpu_scale_in": 1.0}}));
        // The header, the rule, these rows among the others and one row per figure.
        let check = |table: &str, head: [&str; 2], rows: &[&str]| {
            let lines: Vec<&str> = table.lines().collect();
            assert_eq!(lines[..2], head, "{table}");
            for r in rows {
                assert!(lines.contains(r), "{r} in\n{table}");
            }
            assert_eq!(lines.len(), 2 + FIGURES.len());
        };

        let two = compare(&[&kwok, &karpenter]);
        check(
            &two,
            [
                "| 200 pods | karpenter-capi-kwok | karpenter | karpenter/karpenter-capi-kwok |",
                "|---|---:|---:|---:|",
            ],
            &[
                "| all pods Running (s) | 20 | 30 | 1.50 |",
                "| peak RSS (MiB) | 40 | 160 | 4.00 |",
            ],
        );
        assert!(!two.contains("| karpenter-capi |"), "no third column");

        let three = compare(&[&capi, &kwok, &karpenter]);
        check(
            &three,
            [
                "| 200 pods | karpenter-capi | karpenter-capi-kwok | karpenter | karpenter/karpenter-capi | karpenter/karpenter-capi-kwok |",
                "|---|---:|---:|---:|---:|---:|",
            ],
            &[
                "| all pods Running (s) | 40 | 20 | 30 | 0.75 | 1.50 |",
                "| NodeClaims | 10 | 10 | 12 | 1.20 | 1.20 |",
                "| first NodeClaim (s) | - | - | - | - | - |",
            ],
        );
    }
}
