//! `karpenter-capi inspect`: one view of NodePool → NodeClaim → Machine → Node, with what is
//! stuck and why. The view is computed from listed objects by a pure function.

use std::collections::BTreeMap;

use api::NodeClaim;
use clusterapi_api::Machine;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use clusterapi::machine;
use templates::offline::column_lines;

/// One NodeClaim and what hangs off it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub nodepool: String,
    pub nodeclaim: String,
    pub instance_type: String,
    pub zone: String,
    pub machine: String,
    pub machine_phase: String,
    pub provider_id: String,
    pub node: String,
    pub ready: String,
    pub age_seconds: i64,
    /// Why it is not Ready yet, when it has been waiting long enough to look stuck.
    pub stuck: Option<String>,
    /// `Drifted=True`: the reason (`NodeClassDrifted`, …).
    pub drifted: Option<String>,
    /// What drifted (the condition's message).
    pub drift_message: Option<String>,
    /// `DisruptionReason=True`: being replaced or removed for this reason.
    pub disruption: Option<String>,
    /// With `--why`: its disruption verdict (the move it is part of, or what keeps it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// With `--why`: who owns its remediation when not the operator's repair (a
    /// MachineHealthCheck selecting its Machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
}

fn cond<'a>(nc: &'a NodeClaim, type_: &str) -> Option<&'a Condition> {
    api::conditions::get(&nc.status.as_ref()?.conditions, type_)
}

fn age(nc: &NodeClaim, now: Timestamp) -> i64 {
    nc.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| now.duration_since(t.0).as_secs())
        .unwrap_or(0)
}

/// Formats seconds as Kubernetes does in `AGE` (`45s`, `12m`, `3h`, `2d`).
pub(crate) fn human(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A NodeClaim not Ready after this long is reported as stuck.
pub(crate) const STUCK_AFTER_SECS: i64 = 120;

/// Builds the rows, sorted by NodePool then NodeClaim.
pub fn rows(
    nodeclaims: &[NodeClaim],
    machines: &[Machine],
    nodes: &[Node],
    now: Timestamp,
) -> Vec<Row> {
    let machines: BTreeMap<String, &Machine> = machines
        .iter()
        .map(|m| {
            (
                format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any()),
                m,
            )
        })
        .collect();
    let mut out: Vec<Row> = nodeclaims
        .iter()
        .map(|nc| {
            let status = nc.status.clone().unwrap_or_default();
            let labels = nc.labels();
            let machine_key = nc
                .annotations()
                .get(api::consts::annotations::MACHINE)
                .cloned()
                .unwrap_or_default();
            let m = machines.get(&machine_key);
            let node_name = status.node_name.clone().unwrap_or_default();
            let node = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(node_name.as_str()));
            let ready = cond(nc, "Ready")
                .map(|c| c.status.clone())
                .unwrap_or_default();
            let age_seconds = age(nc, now);
            let stuck = stuck(nc, m.copied(), &machine_key, age_seconds);
            let drift = cond(nc, "Drifted").filter(|c| c.status == "True");
            Row {
                drifted: drift.map(|c| c.reason.clone()),
                drift_message: drift.map(|c| c.message.clone()),
                disruption: cond(nc, "DisruptionReason")
                    .filter(|c| c.status == "True")
                    .map(
                        |c| match cond(nc, "Rebooting").filter(|r| r.status == "True") {
                            Some(r) => {
                                format!("{}; rebooting: {}, {}", c.reason, r.reason, r.message)
                            }
                            None => c.reason.clone(),
                        },
                    ),
                nodepool: labels
                    .get(api::consts::labels::NODEPOOL)
                    .cloned()
                    .unwrap_or_default(),
                nodeclaim: nc.name_any(),
                instance_type: labels
                    .get("node.kubernetes.io/instance-type")
                    .cloned()
                    .unwrap_or_default(),
                zone: labels
                    .get("topology.kubernetes.io/zone")
                    .cloned()
                    .unwrap_or_default(),
                machine: machine_key.clone(),
                machine_phase: m
                    .and_then(|m| machine::phase(m))
                    .unwrap_or_default()
                    .to_string(),
                provider_id: status.provider_id.clone().unwrap_or_default(),
                node: node.map(|_| node_name.clone()).unwrap_or_default(),
                ready: if ready.is_empty() {
                    "Unknown".into()
                } else {
                    ready
                },
                age_seconds,
                stuck,
                why: None,
                remediation: None,
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.nodepool, &a.nodeclaim).cmp(&(&b.nodepool, &b.nodeclaim)));
    out
}

/// Why a NodeClaim that is not Ready after [`STUCK_AFTER_SECS`] is waiting: not launched, its
/// Machine's first unmet condition, a missing Machine, or its own conditions.
fn stuck(
    nc: &NodeClaim,
    m: Option<&Machine>,
    machine_key: &str,
    age_seconds: i64,
) -> Option<String> {
    let ready = cond(nc, "Ready").is_some_and(|c| c.status == "True");
    if ready || age_seconds < STUCK_AFTER_SECS {
        return None;
    }
    let wait = human(age_seconds);
    Some(
        if let Some(c) = cond(nc, "Launched").filter(|c| c.status != "True") {
            format!("not launched for {wait}: {} {}", c.reason, c.message)
        } else if let Some(m) = m {
            let phase = machine::phase(m).unwrap_or("Unknown");
            let why = ["InfrastructureReady", "BootstrapConfigReady", "NodeReady"]
                .iter()
                .find_map(|t| match machine::condition(m, t) {
                    Some((status, reason, message)) if status != "True" => Some(format!(
                        "{t}={status} ({reason}{}{message})",
                        if message.is_empty() { "" } else { ": " }
                    )),
                    _ => None,
                })
                .unwrap_or_else(|| "waiting for the Node to register".into());
            format!("Machine {phase} for {wait}: {why}")
        } else if !machine_key.is_empty() {
            format!("Machine {machine_key} not found")
        } else {
            let c = cond(nc, "Initialized").or_else(|| cond(nc, "Registered"));
            format!(
                "not ready for {wait}: {}",
                c.map(|c| c.message.as_str()).unwrap_or_default()
            )
        },
    )
}

/// A fixed-width table, one line per NodeClaim, stuck reasons under it.
pub fn render_table(rows: &[Row]) -> String {
    let header = [
        "NODEPOOL",
        "NODECLAIM",
        "TYPE",
        "ZONE",
        "MACHINE",
        "PHASE",
        "NODE",
        "READY",
        "DRIFTED",
        "AGE",
        "PROVIDERID",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    table.extend(rows.iter().map(|r| {
        let age = human(r.age_seconds);
        [
            r.nodepool.as_str(),
            &r.nodeclaim,
            &r.instance_type,
            &r.zone,
            &r.machine,
            &r.machine_phase,
            &r.node,
            &r.ready,
            r.drifted.as_deref().unwrap_or_default(),
            &age,
            &r.provider_id,
        ]
        .iter()
        .map(|c| if c.is_empty() { "-" } else { c }.to_string())
        .collect()
    }));
    let mut out = String::new();
    let mut lines = column_lines(&table).into_iter();
    if let Some(h) = lines.next() {
        out += &h;
        out.push('\n');
    }
    for (line, r) in lines.zip(rows) {
        out += &line;
        out.push('\n');
        if let Some(why) = &r.stuck {
            out += &format!("  ! {}: {why}\n", r.nodeclaim);
        }
        if let Some(reason) = &r.drifted {
            out += &format!(
                "  ~ {}: drifted ({reason}): {}\n",
                r.nodeclaim,
                r.drift_message.as_deref().unwrap_or_default()
            );
        }
        if let Some(reason) = &r.disruption {
            out += &format!("  * {}: being disrupted ({reason})\n", r.nodeclaim);
        }
        if let Some(why) = &r.why {
            out += &format!("  > {}: {why}\n", r.nodeclaim);
        }
        if let Some(by) = &r.remediation {
            out += &format!("  > {}: repair: {by}\n", r.nodeclaim);
        }
    }
    if rows.is_empty() {
        out += "(no NodeClaims)\n";
    }
    out
}

/// Fills each row's disruption verdict: the operator's (the `Consolidatable` condition's
/// message, computed with the live catalog's prices) when it wrote one, else the same
/// verdict function run here on the listed objects (with the catalogs built here from the
/// live templates).
pub(crate) fn add_why(
    rows: &mut [Row],
    claims: &[NodeClaim],
    view: &karpenter_core::disruption::View,
    now: Timestamp,
) {
    let local = karpenter_core::disruption::verdicts(view, now);
    for r in rows {
        let written = claims
            .iter()
            .find(|c| c.name_any() == r.nodeclaim)
            .and_then(|c| cond(c, api::consts::conditions::CONSOLIDATABLE))
            .map(|c| c.message.clone());
        r.why = written.or_else(|| local.get(&r.nodeclaim).map(ToString::to_string));
    }
}

/// Fills each row's remediation owner: the MachineHealthCheck that selects its Machine (the
/// operator's repair then leaves the node to it), and whether it asks for a replacement now.
pub(crate) fn add_remediation(
    rows: &mut [Row],
    machines: &[Machine],
    checks: &[std::sync::Arc<clusterapi_api::MachineHealthCheck>],
) {
    for r in rows {
        let Some(m) = machines.iter().find(|m| {
            format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any()) == r.machine
        }) else {
            continue;
        };
        r.remediation =
            clusterapi::health_checks::remediated_elsewhere(m, checks).map(|e| match e.replace {
                Some(u) => format!(
                    "left to {}, which asks for a replacement ({})",
                    e.by, u.detail
                ),
                None => format!("left to {} (the operator's repair does not act)", e.by),
            });
    }
}

/// Every object of a kind, shared.
async fn list_all<K>(client: &kube::Client) -> Result<Vec<std::sync::Arc<K>>, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: kube::api::Api<K> = kube::api::Api::all(client.clone());
    let list = api.list(&kube::api::ListParams::default()).await?;
    Ok(list.items.into_iter().map(std::sync::Arc::new).collect())
}

/// The workload cluster's DRA objects; a kind it does not serve (or the user may not list) is
/// left out, as an empty list.
async fn dra_objects(client: &kube::Client) -> karpenter_core::state::DraObjects {
    karpenter_core::state::DraObjects {
        classes: list_all(client).await.unwrap_or_default(),
        claims: list_all(client).await.unwrap_or_default(),
        templates: list_all(client).await.unwrap_or_default(),
        slices: list_all(client).await.unwrap_or_default(),
    }
}

/// Each NodeClass's catalog as the operator builds it, from the opted-in templates of the
/// management cluster (the replacement options and prices of the verdicts). A kind or a list
/// the user may not read is left out (fewer options, never an error).
async fn live_catalogs(
    management: &kube::Client,
    nodeclasses: &[std::sync::Arc<clusterapi_api::ClusterAPINodeClass>],
) -> std::collections::HashMap<String, std::sync::Arc<templates::model::Catalog>> {
    use api::consts::labels::KARPENTER_MEMBER as LABEL_KARPENTER_MEMBER;
    use kube::api::{Api, DynamicObject, ListParams, TypeMeta};
    use templates::selection::Selection;
    use templates::settings::CatalogSettings;
    let crds = Api::<templates::crd::CrdSummary>::all(management.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut all = Vec::new();
    for kind in crds
        .iter()
        .filter_map(templates::watch::template_kind_from_crd)
    {
        let ar = kind.api_resource();
        let api = Api::<DynamicObject>::all_with(management.clone(), &ar);
        let Ok(list) = api
            .list(&ListParams::default().labels(LABEL_KARPENTER_MEMBER))
            .await
        else {
            continue;
        };
        all.extend(list.items.into_iter().map(|mut o| {
            o.types.get_or_insert_with(|| TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            });
            o
        }));
    }
    let clusters = list_all::<clusterapi_api::Cluster>(management)
        .await
        .unwrap_or_default();
    let mut out = std::collections::HashMap::new();
    for nc in nodeclasses {
        let r = &nc.spec.cluster_ref;
        let cluster = clusters
            .iter()
            .find(|c| c.name_any() == r.name && c.namespace().as_deref() == Some(&r.namespace));
        let selection = Selection::from_node_class(nc);
        let selected: Vec<DynamicObject> = all
            .iter()
            .filter(|t| selection.matches(t))
            .cloned()
            .collect();
        let settings = CatalogSettings::from_node_class(nc, cluster.map(|c| c.as_ref()));
        if let Ok(c) = templates::build_catalog(&selected, &settings) {
            out.insert(nc.name_any(), std::sync::Arc::new(c));
        }
    }
    out
}

/// Lists what the view needs (a one-shot CLI; the operator itself reads watch caches);
/// with `why`, also what the disruption verdicts read.
pub async fn collect(
    workload: &kube::Client,
    management: &kube::Client,
    nodepool: Option<&str>,
    why: bool,
) -> Result<Vec<Row>, kube::Error> {
    Ok(collect_all(workload, management, nodepool, why).await?.0)
}

/// [`collect`], and with `why` the pending pods no plan places and the price of the plan
/// for the others ([`crate::inspect_pending`]).
pub async fn collect_all(
    workload: &kube::Client,
    management: &kube::Client,
    nodepool: Option<&str>,
    why: bool,
) -> Result<(Vec<Row>, crate::inspect_pending::Pending), kube::Error> {
    use kube::api::{Api, ListParams};
    let claims_api: Api<NodeClaim> = Api::all(workload.clone());
    let lp = match nodepool {
        Some(p) => ListParams::default().labels(&format!("{}={p}", api::consts::labels::NODEPOOL)),
        None => ListParams::default(),
    };
    let claims = claims_api.list(&lp).await?.items;
    let machines: Api<Machine> = Api::all(management.clone());
    let machines = machines
        .list(&ListParams::default().labels(api::consts::labels::NODECLAIM))
        .await?
        .items;
    let nodes = Api::<Node>::all(workload.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let now = Timestamp::now();
    let mut out = rows(&claims, &machines, &nodes, now);
    let mut pending = crate::inspect_pending::Pending::default();
    if why {
        use std::sync::Arc;
        let all = |v: Vec<NodeClaim>| v.into_iter().map(Arc::new).collect::<Vec<_>>();
        let every_claim = all(claims_api.list(&ListParams::default()).await?.items);
        let pools = list_all::<api::NodePool>(workload).await?;
        let pods = list_all::<k8s_openapi::api::core::v1::Pod>(workload).await?;
        let pdbs = list_all::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(workload).await?;
        let daemonsets = list_all::<k8s_openapi::api::apps::v1::DaemonSet>(workload).await?;
        // A NodeClass's drift policy `Manual` keeps its drifted nodes.
        let nodeclasses = list_all::<clusterapi_api::ClusterAPINodeClass>(workload).await?;
        let node_arcs: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
        let catalogs = live_catalogs(management, &nodeclasses).await;
        let catalog = |nc: &str| catalogs.get(nc).map(|c| c.types.clone());
        let cluster = karpenter_core::state::Cluster::new(karpenter_core::state::Objects {
            dra: dra_objects(workload).await,
            storageclasses: list_all(workload).await?,
            csinodes: list_all(workload).await?,
            pvcs: list_all(workload).await?,
            pvs: list_all(workload).await?,
            nodepools: pools,
            nodeclaims: every_claim,
            nodes: node_arcs,
            pods,
            daemonsets,
            pdbs,
        });
        let manual_drift = |name: &str| {
            nodeclasses
                .iter()
                .any(|nc| nc.metadata.name.as_deref() == Some(name) && nc.manual_drift())
        };
        let view = karpenter_core::disruption::View {
            cluster: &cluster,
            catalog: &catalog,
            manual_drift: &manual_drift,
        };
        add_why(&mut out, &claims, &view, now);
        let checks = list_all::<clusterapi_api::MachineHealthCheck>(management).await?;
        add_remediation(&mut out, &machines, &checks);
        pending = crate::inspect_pending::pending(&cluster, &catalog);
    }
    Ok((out, pending))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn obj(mut v: Value) -> NodeClaim {
        v["spec"] = json!({"requirements": [],
            "nodeClassRef": {"group": "karpenter.cluster.x-k8s.io", "kind": "ClusterAPINodeClass", "name": "default"}});
        serde_json::from_value(v).expect("fixture")
    }

    #[test]
    fn table_aligns_columns_dashes_empty_cells_and_puts_notes_under_their_row() {
        let row = |nodeclaim: &str, machine: &str| Row {
            nodepool: "default".into(),
            nodeclaim: nodeclaim.into(),
            instance_type: "small".into(),
            zone: String::new(),
            machine: machine.into(),
            machine_phase: String::new(),
            provider_id: String::new(),
            node: String::new(),
            ready: "Unknown".into(),
            age_seconds: 30,
            stuck: None,
            drifted: None,
            drift_message: None,
            disruption: None,
            why: None,
            remediation: None,
        };
        let mut long = row("default-long-name", "capi/m-1");
        long.stuck = Some("Machine Pending for 3m: NodeReady=False".into());
        let table = render_table(&[row("default-a", ""), long]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(
            lines[0],
            "NODEPOOL  NODECLAIM          TYPE   ZONE  MACHINE   PHASE  NODE  READY    DRIFTED  AGE  PROVIDERID"
        );
        assert_eq!(
            lines[1],
            "default   default-a          small  -     -         -      -     Unknown  -        30s  -"
        );
        assert!(lines[2].starts_with("default   default-long-name  small  -     capi/m-1  -"));
        assert_eq!(
            lines[3],
            "  ! default-long-name: Machine Pending for 3m: NodeReady=False"
        );
        assert_eq!(render_table(&[]).lines().last(), Some("(no NodeClaims)"));
    }

    #[test]
    fn names_the_machine_health_check_that_owns_remediation() {
        let now: Timestamp = "2026-11-22T10:12:00Z".parse().expect("t");
        let ncs = [obj(
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-a", "creationTimestamp": "2026-11-22T10:00:00Z",
                "labels": {"karpenter.sh/nodepool": "default"},
                "annotations": {"cluster.x-k8s.io/machine": "prod/default-a"}}}),
        )];
        let machine = |labels: serde_json::Value| -> Machine {
            serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": "default-a", "namespace": "prod", "labels": labels},
                "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "default-a"}}}))
            .expect("machine")
        };
        let checks = [std::sync::Arc::new(
            serde_json::from_value(json!({"apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "MachineHealthCheck", "metadata": {"name": "workers", "namespace": "prod"},
                "spec": {"clusterName": "c", "selector": {"matchLabels": {"karpenter.sh/nodepool": "default"}}}}))
            .expect("mhc"),
        )];
        let selected = [machine(
            json!({"cluster.x-k8s.io/cluster-name": "c", "karpenter.sh/nodepool": "default"}),
        )];
        let mut r = rows(&ncs, &selected, &[], now);
        add_remediation(&mut r, &selected, &checks);
        let table = render_table(&r);
        assert!(
            table.contains("> default-a: repair: left to MachineHealthCheck prod/workers"),
            "{table}"
        );
        // Not selected (another pool): the operator's repair, nothing said.
        let other = [machine(
            json!({"cluster.x-k8s.io/cluster-name": "c", "karpenter.sh/nodepool": "batch"}),
        )];
        let mut r = rows(&ncs, &other, &[], now);
        add_remediation(&mut r, &other, &checks);
        assert_eq!(r[0].remediation, None);
    }

    #[test]
    fn a_reboot_in_progress_is_shown() {
        let now: Timestamp = "2026-11-22T10:12:00Z".parse().expect("t");
        let claim = |rebooting: &str| {
            obj(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "default-r", "creationTimestamp": "2026-11-22T10:00:00Z"},
                "status": {"nodeName": "n1", "conditions": [
                    {"type": "DisruptionReason", "status": "True", "reason": "Unhealthy", "message": "",
                     "lastTransitionTime": "2026-11-22T10:10:00Z"},
                    {"type": "Rebooting", "status": rebooting, "reason": "RebootIssued",
                     "message": "waiting for the Node to boot again", "lastTransitionTime": "2026-11-22T10:11:00Z"}]}}))
        };
        let table = render_table(&rows(&[claim("True")], &[], &[], now));
        assert!(
            table.contains("* default-r: being disrupted (Unhealthy; rebooting: RebootIssued, waiting for the Node to boot again)"),
            "{table}"
        );
        // The control: a reboot that ended is not shown.
        let table = render_table(&rows(&[claim("False")], &[], &[], now));
        assert!(
            table.contains("* default-r: being disrupted (Unhealthy)\n"),
            "{table}"
        );
    }

    #[test]
    fn flags_a_machine_stuck_provisioning() {
        let now: Timestamp = "2026-11-22T10:12:00Z".parse().expect("t");
        let ncs = [
            obj(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "default-a", "creationTimestamp": "2026-11-22T10:00:00Z",
                    "labels": {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
                               "topology.kubernetes.io/zone": "a"},
                    "annotations": {"cluster.x-k8s.io/machine": "prod/default-a"}},
                "status": {"conditions": [
                    {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-11-22T10:00:01Z"},
                    {"type": "Ready", "status": "False", "reason": "NotReady", "message": "", "lastTransitionTime": "2026-11-22T10:00:01Z"}]}})),
            obj(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "default-b", "creationTimestamp": "2026-11-22T10:11:30Z",
                    "labels": {"karpenter.sh/nodepool": "default"}},
                "status": {"providerID": "test://x", "nodeName": "n1", "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-11-22T10:11:40Z"},
                    {"type": "Drifted", "status": "True", "reason": "NodeClassDrifted",
                     "message": "Kubernetes version v1.35.0 -> v1.36.0", "lastTransitionTime": "2026-11-22T10:11:50Z"},
                    {"type": "DisruptionReason", "status": "True", "reason": "Drifted", "message": "",
                     "lastTransitionTime": "2026-11-22T10:11:55Z"}]}})),
        ];
        let machines: [Machine; 1] = [serde_json::from_value(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "default-a", "namespace": "prod"},
            "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "default-a"}},
            "status": {"phase": "Provisioning", "conditions": [
                {"type": "InfrastructureReady", "status": "False", "reason": "WaitingForCapacity", "message": "no m5.large in a",
                 "lastTransitionTime": "2026-11-22T10:00:01Z"}]}}),
        )
        .expect("fixture")];
        let nodes: Vec<Node> =
            vec![serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("node")];
        let r = rows(&ncs, &machines, &nodes, now);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].nodeclaim, "default-a");
        assert_eq!(r[0].machine_phase, "Provisioning");
        assert_eq!(
            r[0].stuck.as_deref(),
            Some(
                "Machine Provisioning for 12m: InfrastructureReady=False (WaitingForCapacity: no m5.large in a)"
            )
        );
        assert_eq!(
            (r[1].node.as_str(), r[1].ready.as_str(), r[1].stuck.as_ref()),
            ("n1", "True", None)
        );
        let table = render_table(&r);
        assert!(table.starts_with("NODEPOOL"), "{table}");
        assert!(
            table.contains("! default-a: Machine Provisioning for 12m"),
            "{table}"
        );
        assert!(table.contains("m5.large"), "{table}");
        assert_eq!(r[1].drifted.as_deref(), Some("NodeClassDrifted"));
        assert!(
            table.contains(
                "~ default-b: drifted (NodeClassDrifted): Kubernetes version v1.35.0 -> v1.36.0"
            ),
            "{table}"
        );
        assert!(
            table.contains("* default-b: being disrupted (Drifted)"),
            "{table}"
        );
    }

    #[test]
    fn why_names_the_blocker_or_the_operators_verdict() {
        use std::sync::Arc;
        let now: Timestamp = "2026-11-22T11:00:00Z".parse().expect("t");
        let claim = |name: &str, consolidatable: Option<&str>| {
            let mut conditions = vec![
                json!({"type": "Initialized", "status": "True", "reason": "r", "message": "",
                "lastTransitionTime": "2026-11-22T10:00:00Z"}),
            ];
            if let Some(m) = consolidatable {
                conditions.push(
                    json!({"type": "Consolidatable", "status": "True", "reason": "Candidate",
                    "message": m, "lastTransitionTime": "2026-11-22T10:00:00Z"}),
                );
            }
            obj(
                json!({"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
                "status": {"nodeName": format!("n-{name}"), "conditions": conditions}}),
            )
        };
        let claims = vec![
            claim("a", None),
            claim("b", Some("candidate: replace with small (saves 0.26/h)")),
        ];
        let pool: api::NodePool = serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}},
            "disruption": {"consolidateAfter": "30s"}}})).expect("pool");
        let node = |n: &str| {
            Arc::new(
                serde_json::from_value::<Node>(json!({"metadata": {"name": n}})).expect("node"),
            )
        };
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "db-0", "namespace": "default", "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u", "controller": true}]},
            "spec": {"nodeName": "n-a", "containers": []}, "status": {"phase": "Running"}})).expect("pod");
        let (pools, arcs, nodes, pods) = (
            vec![Arc::new(pool)],
            claims.iter().cloned().map(Arc::new).collect::<Vec<_>>(),
            vec![node("n-a"), node("n-b")],
            vec![Arc::new(pod)],
        );
        let cluster = karpenter_core::state::Cluster::new(karpenter_core::state::Objects {
            nodepools: pools,
            nodeclaims: arcs,
            nodes,
            pods,
            ..Default::default()
        });
        let view = karpenter_core::disruption::View {
            cluster: &cluster,
            catalog: &karpenter_core::disruption::no_catalog,
            manual_drift: &karpenter_core::disruption::no_manual_drift,
        };
        let mut r = rows(&claims, &[], &[], now);
        add_why(&mut r, &claims, &view, now);
        assert_eq!(
            r[0].why.as_deref(),
            Some("pod default/db-0 has do-not-disrupt")
        );
        assert_eq!(
            r[1].why.as_deref(),
            Some("candidate: replace with small (saves 0.26/h)")
        );
        assert!(render_table(&r).contains("> a: pod default/db-0 has do-not-disrupt"));
    }
}
