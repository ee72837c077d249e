//! `karpenter-capi simulate`: offline, the plan the provisioner would make for a snapshot
//! of the cluster read from YAML (no API server).
//!
//! [`load`] reads the objects (workloads are expanded into the pods their controllers would
//! create), [`plan`] builds each NodeClass's catalog the way `instance-types` does, feeds the
//! provisioner's own [`snapshot::build`] and [`scheduling::solve`], and returns a [`Plan`];
//! [`render_table`] prints it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde_json::{Value, json};
use templates::model::Catalog;
use templates::offline::{Document, Inputs, LoadError, columns, selector_matches};

use crate::provisioning::{convert, snapshot};

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{path}: document {index}: {object}: {message}")]
    Invalid {
        path: PathBuf,
        index: usize,
        /// `Kind namespace/name` (or what is known of it).
        object: String,
        message: String,
    },
}

/// Workload kinds whose replicas become pending pods: (API group, kind).
const WORKLOADS: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
];

/// The most pods one workload is expanded into: a slip such as `replicas: 4000000000` is an
/// error, not minutes of work and gigabytes of pods.
pub const MAX_WORKLOAD_PODS: u64 = 100_000;

/// The snapshot read from files.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Templates, Clusters and NodeClasses (the catalog's inputs).
    pub inputs: Inputs,
    /// Nodes, NodeClaims, NodePools, DaemonSets and all pods (bound and pending).
    pub state: snapshot::State,
    /// Pods to place: pending Pods and the replicas of workloads.
    pub pending: Vec<Value>,
    /// `Kind namespace/name` of the objects the simulation does not read.
    pub ignored: Vec<String>,
    /// Problems with the snapshot that do not stop the simulation.
    pub warnings: Vec<String>,
}

/// Reads files, directories (`*.yaml`, `*.yml`, `*.json`, sorted) and `-` (stdin).
pub fn load(paths: &[PathBuf]) -> Result<Loaded, Error> {
    from_inputs(Inputs::load(paths)?)
}

/// Reads one YAML text; `path` names it in errors.
pub fn load_yaml(path: &Path, text: &str) -> Result<Loaded, Error> {
    let mut inputs = Inputs::default();
    inputs.add_yaml(path, text)?;
    from_inputs(inputs)
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// One document being read, for error messages.
struct Doc<'a> {
    d: &'a Document,
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
}

impl<'a> Doc<'a> {
    fn new(d: &'a Document) -> Self {
        Self {
            d,
            kind: str_at(&d.object, "/kind").unwrap_or_default(),
            namespace: str_at(&d.object, "/metadata/namespace"),
            name: str_at(&d.object, "/metadata/name").unwrap_or_default(),
        }
    }

    fn what(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    fn err(&self, message: impl Into<String>) -> Error {
        Error::Invalid {
            path: self.d.path.clone(),
            index: self.d.index,
            object: self.what(),
            message: message.into(),
        }
    }

    /// The namespace of a namespaced object (`default` when not set).
    fn ns(&self) -> &'a str {
        self.namespace.unwrap_or("default")
    }
}

/// Checks a quantity map (`{cpu: 500m, ...}`) at `field`.
fn check_quantities(v: &Value, field: &str) -> Result<(), String> {
    let m = match v {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "{field}: expected a map of quantities, got {other}"
            ));
        }
    };
    for (k, q) in m {
        let text = match q {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(format!("{field}.{k}: expected a quantity, got {other}")),
        };
        let parsed = if k == "cpu" {
            templates::quantity::parse_milli(&text)
        } else {
            templates::quantity::parse_value(&text)
        };
        parsed.map_err(|e| format!("{field}.{k}: {text:?} is not a quantity: {e}"))?;
    }
    Ok(())
}

/// An optional non-negative integer at `field` (`spec.replicas`, ...).
fn count(v: &Value, pointer: &str, field: &str) -> Result<Option<u64>, String> {
    match v.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{field}: expected a non-negative integer, got {n}")),
    }
}

/// Checks the parts of a pod spec the scheduler reads, and defaults container requests from
/// limits as the API server does.
fn normalize_pod_spec(spec: &mut Value, field: &str) -> Result<(), String> {
    if !spec.is_object() {
        return Err(format!("{field}: expected an object"));
    }
    if !spec["containers"].is_array() {
        return Err(format!("{field}.containers: expected a list of containers"));
    }
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for (i, c) in cs.iter_mut().enumerate() {
            let at = format!("{field}.{list}[{i}].resources");
            check_quantities(&c["resources"]["requests"], &format!("{at}.requests"))?;
            check_quantities(&c["resources"]["limits"], &format!("{at}.limits"))?;
            let Some(limits) = c["resources"]["limits"].as_object().cloned() else {
                continue;
            };
            let requests = &mut c["resources"]["requests"];
            if requests.is_null() {
                *requests = json!({});
            }
            if let Some(r) = requests.as_object_mut() {
                for (k, q) in limits {
                    r.entry(k).or_insert(q);
                }
            }
        }
    }
    check_quantities(&spec["overhead"], &format!("{field}.overhead"))?;
    if !spec["nodeSelector"].is_null()
        && !spec["nodeSelector"]
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string))
    {
        return Err(format!("{field}.nodeSelector: expected a map of strings"));
    }
    Ok(())
}

/// Checks what every object read needs: a name, and maps (or nothing) where the reader
/// writes defaults (`metadata`, `spec`, `spec.template`, `status`).
fn require_object(doc: &Doc) -> Result<(), Error> {
    if doc.name.is_empty() {
        return Err(doc.err("metadata.name is required"));
    }
    for field in ["metadata", "spec", "spec.template", "status"] {
        let at = format!("/{}", field.replace('.', "/"));
        match doc.d.object.pointer(&at) {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(other) => return Err(doc.err(format!("{field}: expected a map, got {other}"))),
        }
    }
    Ok(())
}

fn terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"))
}

fn bound(pod: &Value) -> bool {
    str_at(pod, "/spec/nodeName").is_some_and(|n| !n.is_empty())
}

/// Sorts the snapshot's objects by role, validates what the scheduler reads and expands
/// workloads.
pub fn from_inputs(mut inputs: Inputs) -> Result<Loaded, Error> {
    let others = std::mem::take(&mut inputs.others);
    inputs.ignored.clear();
    let mut out = Loaded {
        inputs,
        ..Loaded::default()
    };
    let mut workloads: Vec<(Doc, Value)> = Vec::new();
    for d in &others {
        let doc = Doc::new(d);
        if doc.kind.is_empty() {
            return Err(doc.err("kind is required"));
        }
        let group = group_of(str_at(&d.object, "/apiVersion").unwrap_or_default());
        let mut obj = d.object.clone();
        match (group, doc.kind) {
            ("", "Pod") => {
                require_object(&doc)?;
                normalize_pod_spec(&mut obj["spec"], "spec").map_err(|e| doc.err(e))?;
                obj["metadata"]["namespace"] = json!(doc.ns());
                if obj["metadata"]["uid"].as_str().is_none_or(str::is_empty) {
                    obj["metadata"]["uid"] = json!(format!("sim-{}-{}", doc.ns(), doc.name));
                }
                out.state.pods.push(obj);
            }
            ("", "Node") => {
                require_object(&doc)?;
                for f in ["capacity", "allocatable"] {
                    check_quantities(&obj["status"][f], &format!("status.{f}"))
                        .map_err(|e| doc.err(e))?;
                }
                if obj["status"]["allocatable"].is_null() {
                    out.warnings.push(format!(
                        "Node {}: no status.allocatable, using status.capacity",
                        doc.name
                    ));
                    obj["status"]["allocatable"] = obj["status"]["capacity"].clone();
                }
                let ready = obj["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                if !ready {
                    out.warnings.push(format!(
                        "Node {}: not Ready (status.conditions), not used",
                        doc.name
                    ));
                }
                out.state.nodes.push(obj);
            }
            ("karpenter.sh", "NodePool") => {
                require_object(&doc)?;
                check_node_pool(&obj).map_err(|e| doc.err(e))?;
                out.state.nodepools.push(obj);
            }
            ("karpenter.sh", "NodeClaim") => {
                require_object(&doc)?;
                for (v, f) in [
                    (
                        &obj["spec"]["resources"]["requests"],
                        "spec.resources.requests",
                    ),
                    (&obj["status"]["capacity"], "status.capacity"),
                    (&obj["status"]["allocatable"], "status.allocatable"),
                ] {
                    check_quantities(v, f).map_err(|e| doc.err(e))?;
                }
                out.state.nodeclaims.push(obj);
            }
            ("apps", "DaemonSet") => {
                require_object(&doc)?;
                normalize_pod_spec(&mut obj["spec"]["template"]["spec"], "spec.template.spec")
                    .map_err(|e| doc.err(e))?;
                obj["metadata"]["namespace"] = json!(doc.ns());
                out.state.daemonsets.push(obj);
            }
            (g, k) if WORKLOADS.contains(&(g, k)) => {
                require_object(&doc)?;
                workloads.push((doc, obj));
            }
            _ => out.ignored.push(doc.what()),
        }
    }
    // Pending Pods given as such.
    for p in &out.state.pods {
        if bound(p) || terminal(p) || !p["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let by_daemonset = p["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|os| os.iter().any(|o| o["kind"] == "DaemonSet"));
        if by_daemonset {
            continue; // counted as DaemonSet overhead
        }
        out.pending.push(p.clone());
    }
    // Workloads: a ReplicaSet owned by a Deployment of the snapshot (or a Job by a CronJob
    // of it) is its owner's business.
    let present: HashSet<(&str, &str, &str)> = workloads
        .iter()
        .map(|(d, _)| (d.kind, d.ns(), d.name))
        .collect();
    for (doc, obj) in &workloads {
        let owner = obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| {
                o["controller"] == true
                    && present.contains(&(
                        o["kind"].as_str().unwrap_or_default(),
                        doc.ns(),
                        o["name"].as_str().unwrap_or_default(),
                    ))
            });
        if let Some(o) = owner {
            out.warnings.push(format!(
                "{}: owned by {} {} of the snapshot, expanded once from its owner",
                doc.what(),
                o["kind"].as_str().unwrap_or_default(),
                o["name"].as_str().unwrap_or_default()
            ));
            continue;
        }
        let pods = expand(doc, obj, &out.state.pods)?;
        out.pending.extend(pods);
    }
    Ok(out)
}

fn check_node_pool(v: &Value) -> Result<(), String> {
    let spec = &v["spec"]["template"]["spec"];
    if str_at(spec, "/nodeClassRef/name").is_none_or(str::is_empty) {
        return Err("spec.template.spec.nodeClassRef.name is required".into());
    }
    for (i, r) in spec["requirements"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let op = r["operator"].as_str().unwrap_or_default();
        if convert::operator(op).is_none() {
            return Err(format!(
                "spec.template.spec.requirements[{i}].operator: {op:?} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"
            ));
        }
    }
    check_quantities(&v["spec"]["limits"], "spec.limits")?;
    match count(v, "/spec/weight", "spec.weight")? {
        Some(w) if !(1..=100).contains(&w) => Err(format!("spec.weight: {w} is not in 1..100")),
        _ => Ok(()),
    }
}

/// The pods a workload's controller would create: replicas (Job: parallelism, at most
/// completions) minus the pods of the snapshot its selector already matches.
fn expand(doc: &Doc, obj: &Value, pods: &[Value]) -> Result<Vec<Value>, Error> {
    let field_err = |e: String| doc.err(e);
    let wanted = if doc.kind == "Job" {
        let parallelism = count(obj, "/spec/parallelism", "spec.parallelism")
            .map_err(field_err)?
            .unwrap_or(1);
        let completions = count(obj, "/spec/completions", "spec.completions").map_err(field_err)?;
        completions.map_or(parallelism, |c| c.min(parallelism))
    } else {
        count(obj, "/spec/replicas", "spec.replicas")
            .map_err(field_err)?
            .unwrap_or(1)
    };
    if wanted > MAX_WORKLOAD_PODS {
        return Err(doc.err(format!(
            "{wanted} pods (replicas, or a Job's parallelism) is more than a simulation expands ({MAX_WORKLOAD_PODS})"
        )));
    }
    let template = &obj["spec"]["template"];
    if !template.is_object() {
        return Err(doc.err("spec.template: expected a pod template"));
    }
    let mut spec = template["spec"].clone();
    normalize_pod_spec(&mut spec, "spec.template.spec").map_err(field_err)?;
    let selector: LabelSelector = match &obj["spec"]["selector"] {
        Value::Null => LabelSelector {
            match_labels: serde_json::from_value(template["metadata"]["labels"].clone()).ok(),
            ..LabelSelector::default()
        },
        s => serde_json::from_value(s.clone())
            .map_err(|e| doc.err(format!("spec.selector: not a label selector: {e}")))?,
    };
    let selects_something = selector
        .match_labels
        .as_ref()
        .is_some_and(|m| !m.is_empty())
        || selector
            .match_expressions
            .as_ref()
            .is_some_and(|m| !m.is_empty());
    let ns = doc.ns();
    let in_ns: Vec<&Value> = pods
        .iter()
        .filter(|p| p["metadata"]["namespace"] == ns)
        .collect();
    let existing = in_ns
        .iter()
        .filter(|p| {
            let labels: BTreeMap<String, String> =
                serde_json::from_value(p["metadata"]["labels"].clone()).unwrap_or_default();
            selects_something && !terminal(p) && selector_matches(&selector, &labels)
        })
        .count() as u64;
    let taken: HashSet<&str> = in_ns
        .iter()
        .filter_map(|p| str_at(p, "/metadata/name"))
        .collect();
    let api_version = obj["apiVersion"].clone();
    let mut out = Vec::new();
    let mut i = 0u64;
    while (out.len() as u64) < wanted.saturating_sub(existing) {
        let name = format!("{}-{i}", doc.name);
        i += 1;
        if taken.contains(name.as_str()) {
            continue;
        }
        out.push(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": format!("sim-{ns}-{name}"),
                "labels": template["metadata"]["labels"],
                "annotations": template["metadata"]["annotations"],
                "ownerReferences": [{"apiVersion": api_version, "kind": doc.kind,
                                     "name": doc.name, "controller": true}],
            },
            "spec": spec,
        }));
    }
    Ok(out)
}

/// One NodeClass's catalog, as `instance-types` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSummary {
    pub name: String,
    pub cluster: Option<String>,
    pub instance_types: usize,
    pub zones: Vec<String>,
    /// Templates left out of the catalog (`kind ns/name: reason`).
    pub excluded: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSummary {
    pub name: String,
    pub node_class: String,
    pub weight: i64,
    /// Instance types of its NodeClass with an offering the pool's requirements allow.
    pub instance_types: usize,
    pub taints: Vec<String>,
}

/// A NodeClaim the provisioner would create.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNodeClaim {
    pub node_pool: String,
    /// The cheapest compatible offering: what the operator launches.
    pub instance_type: String,
    /// `kubernetes.io/arch` of the instance type.
    pub arch: String,
    pub zone: String,
    pub capacity_type: String,
    pub price_per_hour: f64,
    /// All candidate instance types, cheapest first (the NodeClaim's requirement).
    pub instance_types: Vec<String>,
    /// Pods' requests plus DaemonSet overhead.
    pub requests: BTreeMap<String, String>,
    /// `namespace/name`.
    pub pods: Vec<String>,
}

/// Pods the solver put on a Node or an in-flight NodeClaim of the snapshot.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingPlacement {
    pub node: String,
    /// `node` (Ready, initialized) or `in-flight` (a NodeClaim or its uninitialized Node).
    pub state: String,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnplaceablePod {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    pub node_claims: usize,
    pub price_per_hour: f64,
    pub pods_placed: usize,
    pub pods_on_new_node_claims: usize,
    pub pods_on_existing: usize,
    pub pods_unplaceable: usize,
}

/// The provisioner's plan for a snapshot.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub pods_pending: usize,
    pub pods_bound: usize,
    pub nodes: usize,
    pub in_flight_node_claims: usize,
    pub daemon_sets: usize,
    pub node_classes: Vec<NodeClassSummary>,
    pub node_pools: Vec<NodePoolSummary>,
    pub warnings: Vec<String>,
    /// Objects of kinds the simulation does not read.
    pub ignored: Vec<String>,
    pub node_claims: Vec<PlannedNodeClaim>,
    pub existing: Vec<ExistingPlacement>,
    pub unplaceable: Vec<UnplaceablePod>,
    pub total: Total,
}

fn pod_ref(p: &scheduling::PodRef) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// Builds the catalogs, runs the provisioner's scheduling simulation and collects the plan.
pub fn plan(loaded: &Loaded) -> Plan {
    let mut warnings = loaded.warnings.clone();
    let mut node_classes = Vec::new();
    let mut catalogs: HashMap<String, Arc<Catalog>> = HashMap::new();
    let mut names = HashSet::new();
    for nc in &loaded.inputs.node_classes {
        let name = nc.metadata.name.clone().unwrap_or_default();
        if !names.insert(name.clone()) {
            warnings.push(format!(
                "NodeClass {name}: defined more than once, the last one is used"
            ));
        }
    }
    if !loaded.inputs.node_classes.is_empty() {
        for r in templates::offline::reports(&loaded.inputs) {
            let name = r.node_class.clone().unwrap_or_default();
            for w in &r.warnings {
                warnings.push(format!("NodeClass {name}: {w}"));
            }
            if let Some(e) = &r.error {
                warnings.push(format!(
                    "NodeClass {name}: {e}: its NodePools get no instance types"
                ));
            }
            let Some(c) = r.catalog else {
                continue;
            };
            let excluded: Vec<String> = c
                .excluded
                .iter()
                .map(|e| format!("{}: {}: {}", e.template, e.error.reason(), e.error.detail()))
                .collect();
            for e in &excluded {
                warnings.push(format!("NodeClass {name}: template excluded: {e}"));
            }
            let mut zones: Vec<String> = c
                .instance_types
                .iter()
                .flat_map(|it| it.offerings.iter().filter_map(|o| o.zone.clone()))
                .collect();
            zones.sort();
            zones.dedup();
            node_classes.push(NodeClassSummary {
                name: name.clone(),
                cluster: r.cluster.clone(),
                instance_types: c.instance_types.len(),
                zones,
                excluded,
            });
            catalogs.insert(name, Arc::new(c));
        }
    }
    let mut node_pools = Vec::new();
    for p in &loaded.state.nodepools {
        let pool = str_at(p, "/metadata/name").unwrap_or_default();
        let reference = &p["spec"]["template"]["spec"]["nodeClassRef"];
        let nc = reference["name"].as_str().unwrap_or_default();
        let kind = reference["kind"].as_str().unwrap_or_default();
        if kind != templates::offline::NODE_CLASS_KIND {
            warnings.push(format!(
                "NodePool {pool}: nodeClassRef.kind is {kind:?}, expected {}",
                templates::offline::NODE_CLASS_KIND
            ));
        }
        if !loaded
            .inputs
            .node_classes
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(nc))
        {
            warnings.push(format!(
                "NodePool {pool}: ClusterAPINodeClass {nc:?} (nodeClassRef) is not in the snapshot: no instance types"
            ));
        } else if catalogs
            .get(nc)
            .is_some_and(|c| c.instance_types.is_empty())
        {
            warnings.push(format!(
                "NodePool {pool}: NodeClass {nc} selects no usable template: no instance types"
            ));
        }
        node_pools.push(NodePoolSummary {
            name: pool.to_string(),
            node_class: nc.to_string(),
            weight: p["spec"]["weight"].as_i64().unwrap_or(0),
            instance_types: 0,
            taints: convert::taints(&p["spec"]["template"]["spec"]["taints"])
                .iter()
                .map(taint_text)
                .collect(),
        });
    }
    let snap = snapshot::build(
        &loaded.state,
        &loaded.pending,
        &|nc| catalogs.get(nc).cloned(),
        &|_, _, _| true,
    );
    for summary in &mut node_pools {
        if let Some(p) = snap
            .input
            .node_pools
            .iter()
            .find(|p| p.name == summary.name)
        {
            summary.instance_types = compatible_instance_types(p);
        }
    }
    for p in &loaded.state.pods {
        let Some(node) = str_at(p, "/spec/nodeName").filter(|n| !n.is_empty()) else {
            continue;
        };
        if !snap.input.nodes.iter().any(|n| n.name == node) && !terminal(p) {
            warnings.push(format!(
                "Pod {}/{}: bound to {node}, which is not a Ready Node or NodeClaim of the snapshot",
                str_at(p, "/metadata/namespace").unwrap_or_default(),
                str_at(p, "/metadata/name").unwrap_or_default()
            ));
        }
    }
    let mut seen = HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    let output = scheduling::solve(&snap.input);
    let node_claims: Vec<PlannedNodeClaim> = output
        .new_node_claims
        .iter()
        .map(|c| PlannedNodeClaim {
            node_pool: c.node_pool.clone(),
            instance_type: c.cheapest.instance_type.clone(),
            arch: loaded
                .state
                .nodepools
                .iter()
                .find(|p| str_at(p, "/metadata/name") == Some(c.node_pool.as_str()))
                .and_then(|p| str_at(p, "/spec/template/spec/nodeClassRef/name"))
                .and_then(|nc| catalogs.get(nc))
                .and_then(|cat| cat.get(&c.cheapest.instance_type))
                .and_then(|it| it.labels.get(scheduling::LABEL_ARCH))
                .cloned()
                .unwrap_or_default(),
            zone: c.cheapest.zone.clone(),
            capacity_type: c.cheapest.capacity_type.clone(),
            price_per_hour: c.cheapest.price,
            instance_types: c.instance_types().to_vec(),
            requests: convert::quantities(&c.requests)
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect(),
            pods: c.pods.iter().map(pod_ref).collect(),
        })
        .collect();
    let mut existing: Vec<ExistingPlacement> = Vec::new();
    for p in &output.existing {
        match existing.iter_mut().find(|e| e.node == p.node) {
            Some(e) => e.pods.push(pod_ref(&p.pod)),
            None => {
                let in_flight = snap
                    .input
                    .nodes
                    .iter()
                    .any(|n| n.name == p.node && n.state == scheduling::NodeState::InFlight);
                existing.push(ExistingPlacement {
                    node: p.node.clone(),
                    state: if in_flight { "in-flight" } else { "node" }.into(),
                    pods: vec![pod_ref(&p.pod)],
                });
            }
        }
    }
    let unplaceable: Vec<UnplaceablePod> = output
        .unschedulable
        .iter()
        .map(|u| UnplaceablePod {
            pod: pod_ref(&u.pod),
            reason: u.reason.clone(),
        })
        .collect();
    let on_new: usize = node_claims.iter().map(|c| c.pods.len()).sum();
    let on_existing = output.existing.len();
    let total = Total {
        node_claims: node_claims.len(),
        price_per_hour: node_claims
            .iter()
            .fold(0.0, |sum, c| sum + c.price_per_hour),
        pods_placed: on_new + on_existing,
        pods_on_new_node_claims: on_new,
        pods_on_existing: on_existing,
        pods_unplaceable: unplaceable.len(),
    };
    Plan {
        pods_pending: loaded.pending.len(),
        pods_bound: loaded.state.pods.iter().filter(|p| bound(p)).count(),
        nodes: snap
            .input
            .nodes
            .iter()
            .filter(|n| n.state == scheduling::NodeState::Ready)
            .count(),
        in_flight_node_claims: snap
            .input
            .nodes
            .iter()
            .filter(|n| n.state == scheduling::NodeState::InFlight)
            .count(),
        daemon_sets: loaded.state.daemonsets.len(),
        node_classes,
        node_pools,
        warnings,
        ignored: loaded.ignored.clone(),
        node_claims,
        existing,
        unplaceable,
        total,
    }
}

/// How many of a pool's instance types its requirements allow (labels and an offering).
fn compatible_instance_types(pool: &scheduling::NodePool) -> usize {
    let reqs = scheduling::Requirements::from_list(&pool.requirements);
    let allows = |key: &str, value: &str| {
        reqs.get(&key.to_string())
            .is_none_or(|set| set.has(&value.to_string()))
    };
    pool.instance_types
        .iter()
        .filter(|it| {
            reqs.intersects(&scheduling::Requirements::from_list(&it.requirements))
                .is_ok()
                && it.offerings.iter().any(|o| {
                    allows(scheduling::LABEL_ZONE, &o.zone)
                        && allows(scheduling::LABEL_CAPACITY_TYPE, &o.capacity_type)
                })
        })
        .count()
}

fn taint_text(t: &scheduling::Taint) -> String {
    let effect = convert::taints_json(std::slice::from_ref(t))[0]["effect"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if t.value.is_empty() {
        format!("{}:{effect}", t.key)
    } else {
        format!("{}={}:{effect}", t.key, t.value)
    }
}

/// `name` for pods of the `default` namespace, `namespace/name` otherwise.
fn short_pod(p: &str) -> &str {
    p.strip_prefix("default/").unwrap_or(p)
}

/// `n: a, b, c, … (+k)` within about `budget` characters.
fn pod_list(pods: &[String], budget: usize) -> String {
    let mut out = format!("{}:", pods.len());
    for (i, p) in pods.iter().enumerate() {
        let p = short_pod(p);
        let rest = pods.len() - i - 1;
        let reserve = if rest > 0 { 10 } else { 0 };
        if i > 0 && out.len() + p.len() + 2 + reserve > budget {
            let _ = write!(out, " … (+{})", pods.len() - i);
            return out;
        }
        let _ = write!(out, "{}{p}", if i == 0 { " " } else { ", " });
    }
    out
}

const POD_LIST_WIDTH: usize = 72;

fn cells(row: &[&str]) -> Vec<String> {
    row.iter().map(|c| c.to_string()).collect()
}

/// Renders the plan as text: summary, NodeClaims to create, pods on existing capacity,
/// unplaceable pods, total.
pub fn render_table(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Snapshot: pods pending {}, bound {}; Nodes {}, in-flight NodeClaims {}, DaemonSets {}",
        plan.pods_pending,
        plan.pods_bound,
        plan.nodes,
        plan.in_flight_node_claims,
        plan.daemon_sets
    );
    for c in &plan.node_classes {
        let _ = writeln!(
            out,
            "NodeClass {}: {} instance types, zones {} (Cluster {})",
            c.name,
            c.instance_types,
            if c.zones.is_empty() {
                "-".to_string()
            } else {
                c.zones.join(",")
            },
            c.cluster.as_deref().unwrap_or("-")
        );
    }
    for p in &plan.node_pools {
        let _ = writeln!(
            out,
            "NodePool {}: NodeClass {}, weight {}, {} compatible instance types{}",
            p.name,
            p.node_class,
            p.weight,
            p.instance_types,
            if p.taints.is_empty() {
                String::new()
            } else {
                format!(", taints {}", p.taints.join(","))
            }
        );
    }
    for w in &plan.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    let _ = writeln!(out, "\nNodeClaims to create:");
    if plan.node_claims.is_empty() {
        let _ = writeln!(out, "(none)");
    } else {
        let mut rows = vec![cells(&[
            "NODEPOOL",
            "INSTANCE-TYPE",
            "ARCH",
            "ZONE",
            "CAPACITY-TYPE",
            "PRICE/H",
            "CANDIDATES",
            "PODS",
        ])];
        for c in &plan.node_claims {
            rows.push(vec![
                c.node_pool.clone(),
                c.instance_type.clone(),
                c.arch.clone(),
                if c.zone.is_empty() {
                    "-".into()
                } else {
                    c.zone.clone()
                },
                c.capacity_type.clone(),
                format!("{:.4}", c.price_per_hour),
                c.instance_types.len().to_string(),
                pod_list(&c.pods, POD_LIST_WIDTH),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    if !plan.existing.is_empty() {
        let _ = writeln!(out, "\nPods on existing Nodes / in-flight NodeClaims:");
        let mut rows = vec![cells(&["NODE", "STATE", "PODS"])];
        for e in &plan.existing {
            rows.push(vec![
                e.node.clone(),
                e.state.clone(),
                pod_list(&e.pods, POD_LIST_WIDTH),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    if !plan.unplaceable.is_empty() {
        let _ = writeln!(out, "\nPods that cannot be placed:");
        let mut rows = vec![cells(&["POD", "REASON"])];
        for u in &plan.unplaceable {
            rows.push(vec![short_pod(&u.pod).to_string(), u.reason.clone()]);
        }
        out.push_str(&columns(&rows));
    }
    let t = &plan.total;
    let _ = writeln!(
        out,
        "\nTotal: {} NodeClaims, {:.4}/h; {} pods placed ({} on new NodeClaims, {} on existing capacity), {} cannot be placed",
        t.node_claims,
        t.price_per_hour,
        t.pods_placed,
        t.pods_on_new_node_claims,
        t.pods_on_existing,
        t.pods_unplaceable
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CATALOG: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: c, namespace: capi}
status:
  failureDomains: [{name: z1}, {name: z2}]
---
apiVersion: karpenter.cluster.x-k8s.io/v1alpha1
kind: ClusterAPINodeClass
metadata: {name: default}
spec:
  clusterRef: {name: c, namespace: capi}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata:
  name: small
  namespace: capi
  labels: {node.cluster.x-k8s.io/karpenter-member: ""}
  annotations:
    capacity.cluster-autoscaler.kubernetes.io/cpu: "2"
    capacity.cluster-autoscaler.kubernetes.io/memory: 8Gi
    karpenter.cluster.x-k8s.io/price: "0.1"
"#;

    fn pool(name: &str, nodeclass: &str) -> String {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.cluster.x-k8s.io, kind: ClusterAPINodeClass, name: {nodeclass}}}\n"
        )
    }

    fn load(docs: &[&str]) -> Loaded {
        load_yaml(Path::new("snap.yaml"), &docs.join("\n---\n")).expect("valid snapshot")
    }

    fn names(pods: &[Value]) -> Vec<&str> {
        pods.iter()
            .filter_map(|p| str_at(p, "/metadata/name"))
            .collect()
    }

    #[test]
    fn workloads_expand_into_pending_pods() {
        let loaded = load(&[
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, resources: {requests: {cpu: 250m}, limits: {memory: 1Gi}}}]
"#,
            // No replicas: one.
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  template:\n    spec: {containers: [{name: c}]}\n",
            // Parallelism bounded by completions.
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 5\n  completions: 2\n  template:\n    spec: {containers: [{name: c}]}\n",
            // Two replicas, one already running: one more.
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: c}]}
"#,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: api-0, labels: {app: api}}\nspec: {nodeName: n1, containers: [{name: c}]}\n",
            // A ReplicaSet of a Deployment of the snapshot is not expanded again.
            r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: api-5d8f
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: api, controller: true}]
spec:
  replicas: 2
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: c}]}
"#,
        ]);
        assert_eq!(
            names(&loaded.pending),
            ["web-0", "web-1", "web-2", "db-0", "j-0", "j-1", "api-1"]
        );
        let web = &loaded.pending[0];
        assert_eq!(web["metadata"]["namespace"], "shop");
        assert_eq!(web["metadata"]["uid"], "sim-shop-web-0");
        assert_eq!(web["metadata"]["labels"]["app"], "web");
        assert_eq!(web["metadata"]["ownerReferences"][0]["kind"], "Deployment");
        assert_eq!(loaded.pending[3]["metadata"]["namespace"], "default");
        // Requests defaulted from limits, as the API server does.
        let requests = convert::pod(web).requests;
        assert_eq!(requests["cpu"], 250);
        assert_eq!(requests["memory"], 1 << 30);
        assert!(
            loaded
                .warnings
                .iter()
                .any(|w| w.contains("ReplicaSet api-5d8f: owned by Deployment api")),
            "{:?}",
            loaded.warnings
        );
    }

    #[test]
    fn bound_pods_use_up_existing_nodes() {
        let node = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: z1}}
status:
  allocatable: {cpu: "2", memory: 8Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"#;
        let bound = "apiVersion: v1\nkind: Pod\nmetadata: {name: old, namespace: kube-system}\nspec:\n  nodeName: n1\n  containers: [{name: c, resources: {requests: {cpu: 1500m}}}]\n";
        let pending = |name: &str, cpu: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: {cpu}}}}}}}]\n"
            )
        };
        let (small, big) = (pending("small", "400m"), pending("big", "1")); // 500m free
        let plan = plan(&load(&[
            CATALOG,
            &pool("default", "default"),
            node,
            bound,
            &small,
            &big,
        ]));
        assert_eq!(plan.pods_pending, 2);
        assert_eq!(plan.pods_bound, 1);
        assert_eq!(plan.nodes, 1);
        assert_eq!(plan.existing.len(), 1);
        assert_eq!(plan.existing[0].node, "n1");
        assert_eq!(plan.existing[0].state, "node");
        assert_eq!(plan.existing[0].pods, ["default/small"]);
        assert_eq!(plan.node_claims.len(), 1);
        let claim = &plan.node_claims[0];
        assert_eq!(claim.pods, ["default/big"]);
        assert_eq!(claim.instance_type, "small");
        assert_eq!(claim.node_pool, "default");
        assert!((claim.price_per_hour - 0.1).abs() < 1e-9);
        assert_eq!(plan.total.pods_placed, 2);
        assert!(plan.unplaceable.is_empty());
        let table = render_table(&plan);
        assert!(table.contains("n1    node   1: small"), "{table}");
        assert!(
            table.contains("Total: 1 NodeClaims, 0.1000/h; 2 pods placed"),
            "{table}"
        );
    }

    #[test]
    fn pools_of_a_missing_nodeclass_get_no_instance_types_and_say_why() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n";
        let plan = plan(&load(&[CATALOG, &pool("orphan", "gone"), pod]));
        assert!(
            plan.warnings.iter().any(|w| w
                == "NodePool orphan: ClusterAPINodeClass \"gone\" (nodeClassRef) is not in the snapshot: no instance types"),
            "{:?}",
            plan.warnings
        );
        assert_eq!(plan.node_pools[0].instance_types, 0);
        assert!(plan.node_claims.is_empty());
        assert_eq!(plan.unplaceable.len(), 1);
        assert_eq!(plan.unplaceable[0].pod, "default/p");
        assert!(
            plan.unplaceable[0]
                .reason
                .starts_with("nodepool \"orphan\": "),
            "{}",
            plan.unplaceable[0].reason
        );
        assert!(render_table(&plan).contains("warning: NodePool orphan: ClusterAPINodeClass"));
    }

    #[test]
    fn bad_input_names_the_file_document_and_field() {
        let broken = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: [unclosed\n";
        let err = load_yaml(Path::new("snap/broken.yaml"), broken)
            .expect_err("invalid YAML")
            .to_string();
        assert!(
            err.starts_with("snap/broken.yaml: document 2: invalid YAML: "),
            "{err}"
        );
        let replicas = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: three\n  template: {spec: {containers: []}}\n";
        let err = load_yaml(Path::new("w.yaml"), replicas)
            .expect_err("replicas must be a number")
            .to_string();
        assert_eq!(
            err,
            "w.yaml: document 2: Deployment web: spec.replicas: expected a non-negative integer, got \"three\""
        );
        let quantity = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: lots}}}]\n";
        let err = load_yaml(Path::new("p.yaml"), quantity)
            .expect_err("bad quantity")
            .to_string();
        assert!(
            err.starts_with(
                "p.yaml: document 1: Pod x/p: spec.containers[0].resources.requests.cpu: \"lots\" is not a quantity"
            ),
            "{err}"
        );
        let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec: {template: {spec: {}}}\n";
        let err = load_yaml(Path::new("p.yaml"), pool)
            .expect_err("nodeClassRef required")
            .to_string();
        assert!(
            err.contains("spec.template.spec.nodeClassRef.name is required"),
            "{err}"
        );
    }

    /// Found by tests/prop_snapshot.rs: a scalar or list where the reader writes defaults
    /// panicked (serde_json cannot index into it), and a huge replica count ran out of memory.
    #[test]
    fn misshapen_objects_and_huge_workloads_are_errors() {
        for (text, want) in [
            (
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\nspec: [1]\n",
                "DaemonSet ds: spec: expected a map, got [1]",
            ),
            (
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\nspec: {template: 7}\n",
                "DaemonSet ds: spec.template: expected a map, got 7",
            ),
            (
                "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: x\n",
                "Node n1: status: expected a map, got \"x\"",
            ),
            (
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 4000000000\n  template: {spec: {containers: []}}\n",
                "Deployment web: 4000000000 pods (replicas, or a Job's parallelism) is more than a simulation expands (100000)",
            ),
        ] {
            let err = load_yaml(Path::new("s.yaml"), text)
                .expect_err("refused")
                .to_string();
            assert_eq!(err, format!("s.yaml: document 1: {want}"));
        }
    }

    #[test]
    fn namespaces_and_unknown_kinds_are_ignored() {
        let loaded = load(&[
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: shop}\n",
        ]);
        assert_eq!(loaded.ignored, ["Namespace shop", "ConfigMap shop/cfg"]);
        assert!(loaded.pending.is_empty());
    }

    #[test]
    fn long_pod_lists_are_shortened() {
        let pods: Vec<String> = (0..40).map(|i| format!("default/web-{i}")).collect();
        let text = pod_list(&pods, POD_LIST_WIDTH);
        assert!(text.starts_with("40: web-0, web-1, "), "{text}");
        assert!(text.ends_with(")") && text.contains(" … (+"), "{text}");
        assert!(text.chars().count() <= POD_LIST_WIDTH + 12, "{text}");
        assert_eq!(pod_list(&["shop/a".to_string()], 10), "1: shop/a");
    }
}
