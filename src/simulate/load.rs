//! Reading a snapshot: objects sorted by role, checked where the scheduler reads them,
//! defaulted where the API server would, workloads expanded, then read into the typed objects
//! the provisioner decides on (an error names the file, the document and the field).

use std::collections::HashSet;
use std::sync::Arc;

use controller::objects::{deleting, owned_by, pod_node_name, terminal};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use templates::offline::{Document, Inputs};

use super::expand::expand;
use super::{Error, Loaded, str_at};

/// Workload kinds whose replicas become pending pods: (API group, kind).
pub(super) const WORKLOADS: &[(&str, &str)] = &[
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
];

pub(super) fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// One document being read, for error messages.
pub(super) struct Doc<'a> {
    pub(super) d: &'a Document,
    pub(super) kind: &'a str,
    pub(super) namespace: Option<&'a str>,
    pub(super) name: &'a str,
}

impl<'a> Doc<'a> {
    pub(super) fn new(d: &'a Document) -> Self {
        Self {
            d,
            kind: str_at(&d.object, "/kind").unwrap_or_default(),
            namespace: str_at(&d.object, "/metadata/namespace"),
            name: str_at(&d.object, "/metadata/name").unwrap_or_default(),
        }
    }

    pub(super) fn what(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    pub(super) fn err(&self, message: impl Into<String>) -> Error {
        Error::Invalid {
            path: self.d.path.clone(),
            index: self.d.index,
            object: self.what(),
            message: message.into(),
        }
    }

    /// The namespace of a namespaced object (`default` when not set).
    pub(super) fn ns(&self) -> &'a str {
        self.namespace.unwrap_or("default")
    }
}

/// Checks a quantity map (`{cpu: 500m, ...}`) at `field`.
pub(super) fn check_quantities(v: &Value, field: &str) -> Result<(), String> {
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
pub(super) fn count(v: &Value, pointer: &str, field: &str) -> Result<Option<u64>, String> {
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
pub(super) fn normalize_pod_spec(spec: &mut Value, field: &str) -> Result<(), String> {
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

/// `doc`'s object (checked and defaulted) as the typed object `K`; an error names the field.
pub(super) fn typed<K: serde::de::DeserializeOwned>(doc: &Doc, v: Value) -> Result<K, Error> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            doc.err(e.inner().to_string())
        } else {
            doc.err(format!("{path}: {}", e.inner()))
        }
    })
}

/// What the API server would have defaulted or a snapshot may leave out: requirements
/// (NodePool template, NodeClaim) are an empty list, owner references without a uid have an
/// empty one.
fn default_fields(obj: &mut Value, kind: &str) {
    let spec = match kind {
        "NodePool" => obj.pointer_mut("/spec/template/spec"),
        "NodeClaim" => obj.pointer_mut("/spec"),
        _ => None,
    };
    if let Some(Value::Object(spec)) = spec {
        spec.entry("requirements").or_insert_with(|| json!([]));
    }
    if let Some(Value::Array(owners)) = obj.pointer_mut("/metadata/ownerReferences") {
        for o in owners.iter_mut().filter_map(Value::as_object_mut) {
            o.entry("uid").or_insert_with(|| json!(""));
        }
    }
}

/// Checks what every object read needs: a name, and maps (or nothing) where the reader
/// writes defaults (`metadata`, `spec`, `spec.template`, `status`).
pub(super) fn require_object(doc: &Doc) -> Result<(), Error> {
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
                default_fields(&mut obj, doc.kind);
                out.state.pods.push(Arc::new(typed(&doc, obj)?));
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
                out.state.nodes.push(Arc::new(typed(&doc, obj)?));
            }
            ("karpenter.sh", "NodePool") => {
                require_object(&doc)?;
                check_node_pool(&obj).map_err(|e| doc.err(e))?;
                default_fields(&mut obj, doc.kind);
                out.state.nodepools.push(Arc::new(typed(&doc, obj)?));
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
                default_fields(&mut obj, doc.kind);
                out.state.nodeclaims.push(Arc::new(typed(&doc, obj)?));
            }
            ("apps", "DaemonSet") => {
                require_object(&doc)?;
                normalize_pod_spec(&mut obj["spec"]["template"]["spec"], "spec.template.spec")
                    .map_err(|e| doc.err(e))?;
                obj["metadata"]["namespace"] = json!(doc.ns());
                default_fields(&mut obj, doc.kind);
                out.state.daemonsets.push(Arc::new(typed(&doc, obj)?));
            }
            ("policy", "PodDisruptionBudget") => {
                require_object(&doc)?;
                obj["metadata"]["namespace"] = json!(doc.ns());
                out.pdbs.push(Arc::new(typed(&doc, obj)?));
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
        if pod_node_name(p).is_some() || terminal(p) || deleting(p.as_ref()) {
            continue;
        }
        if owned_by(p.as_ref(), &["DaemonSet"]) {
            continue; // counted as DaemonSet overhead
        }
        out.pending.push(Arc::clone(p));
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
        for mut pod in expand(doc, obj, &out.state.pods)? {
            default_fields(&mut pod, "Pod");
            out.pending.push(Arc::new(typed::<Pod>(doc, pod)?));
        }
    }
    Ok(out)
}

pub(super) fn check_node_pool(v: &Value) -> Result<(), String> {
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
        if scheduling::Operator::parse(op).is_none() {
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
