//! Reading a snapshot: objects sorted by role, checked where the scheduler reads them,
//! defaulted where the API server would, workloads expanded, then read into the typed objects
//! the provisioner decides on (an error names the file, the document and the field).

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use karpenter_core::objects::{deleting, owned_by, pod_node_name, terminal};
use serde_json::{Value, json};
use templates::offline::Inputs;

use super::doc::{
    Doc, check_quantities, count, default_fields, normalize_pod_spec, require_object, typed,
};
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

/// Sorts the snapshot's objects by role, validates what the scheduler reads and expands
/// workloads.
pub(crate) fn from_inputs(mut inputs: Inputs) -> Result<Loaded, Error> {
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
        if WORKLOADS.contains(&(group, doc.kind)) {
            require_object(&doc)?;
            workloads.push((doc, d.object.clone()));
        } else if !read_object(&mut out, &doc, group, d.object.clone())? {
            out.ignored.push(doc.what());
            if let Ok(o) = serde_json::from_value(d.object.clone()) {
                out.others.push(o);
            }
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
    expand_workloads(&mut out, &workloads)?;
    Ok(out)
}

/// Reads one object of a kind the simulation uses into `out`; `false` for any other kind.
fn read_object(out: &mut Loaded, doc: &Doc, group: &str, mut obj: Value) -> Result<bool, Error> {
    match (group, doc.kind) {
        ("", "Pod") => {
            require_object(doc)?;
            normalize_pod_spec(&mut obj["spec"], "spec").map_err(|e| doc.err(e))?;
            obj["metadata"]["namespace"] = json!(doc.ns());
            if obj["metadata"]["uid"].as_str().is_none_or(str::is_empty) {
                obj["metadata"]["uid"] = json!(format!("sim-{}-{}", doc.ns(), doc.name));
            }
            default_fields(&mut obj, doc.kind);
            out.state.pods.push(Arc::new(typed(doc, obj)?));
        }
        ("", "Node") => {
            require_object(doc)?;
            check_node(out, doc, &mut obj)?;
            out.state.nodes.push(Arc::new(typed(doc, obj)?));
        }
        ("karpenter.sh", "NodePool") => {
            require_object(doc)?;
            check_node_pool(&obj).map_err(|e| doc.err(e))?;
            default_fields(&mut obj, doc.kind);
            out.state.nodepools.push(Arc::new(typed(doc, obj)?));
        }
        ("karpenter.sh", "NodeOverlay") => {
            require_object(doc)?;
            out.overlays.push(typed(doc, obj)?);
        }
        ("karpenter.sh", "NodeClaim") => {
            require_object(doc)?;
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
            out.state.nodeclaims.push(Arc::new(typed(doc, obj)?));
        }
        ("apps", "DaemonSet") => {
            require_object(doc)?;
            normalize_pod_spec(&mut obj["spec"]["template"]["spec"], "spec.template.spec")
                .map_err(|e| doc.err(e))?;
            obj["metadata"]["namespace"] = json!(doc.ns());
            default_fields(&mut obj, doc.kind);
            out.state.daemonsets.push(Arc::new(typed(doc, obj)?));
        }
        ("policy", "PodDisruptionBudget") => {
            require_object(doc)?;
            obj["metadata"]["namespace"] = json!(doc.ns());
            out.state.pdbs.push(Arc::new(typed(doc, obj)?));
        }
        ("", "PersistentVolumeClaim") => {
            require_object(doc)?;
            obj["metadata"]["namespace"] = json!(doc.ns());
            out.state.pvcs.push(Arc::new(typed(doc, obj)?));
        }
        ("", "PersistentVolume") => {
            require_object(doc)?;
            out.state.pvs.push(Arc::new(typed(doc, obj)?));
        }
        ("storage.k8s.io", "StorageClass") => {
            require_object(doc)?;
            out.state.storageclasses.push(Arc::new(typed(doc, obj)?));
        }
        ("storage.k8s.io", "CSINode") => {
            require_object(doc)?;
            out.state.csinodes.push(Arc::new(typed(doc, obj)?));
        }
        ("resource.k8s.io", "DeviceClass") => {
            require_object(doc)?;
            out.dra.classes.push(typed(doc, obj)?);
        }
        ("resource.k8s.io", "ResourceClaim") => {
            require_object(doc)?;
            obj["metadata"]["namespace"] = json!(doc.ns());
            out.dra.claims.push(typed(doc, obj)?);
        }
        ("resource.k8s.io", "ResourceClaimTemplate") => {
            require_object(doc)?;
            obj["metadata"]["namespace"] = json!(doc.ns());
            out.dra.templates.push(typed(doc, obj)?);
        }
        ("resource.k8s.io", "ResourceSlice") => {
            require_object(doc)?;
            out.dra.slices.push(typed(doc, obj)?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Checks a Node's quantities; defaults its allocatable to its capacity and warns about that
/// and about a Node that is not Ready.
fn check_node(out: &mut Loaded, doc: &Doc, obj: &mut Value) -> Result<(), Error> {
    for f in ["capacity", "allocatable"] {
        check_quantities(&obj["status"][f], &format!("status.{f}")).map_err(|e| doc.err(e))?;
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
    Ok(())
}

/// Workloads: a ReplicaSet owned by a Deployment of the snapshot (or a Job by a CronJob of
/// it) is its owner's business; the others become pending pods.
fn expand_workloads(out: &mut Loaded, workloads: &[(Doc, Value)]) -> Result<(), Error> {
    let present: HashSet<(&str, &str, &str)> = workloads
        .iter()
        .map(|(d, _)| (d.kind, d.ns(), d.name))
        .collect();
    for (doc, obj) in workloads {
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
        for claim in super::expand::claims(doc, obj, &pods, default_class(out).as_deref()) {
            let (ns, name) = (
                claim["metadata"]["namespace"].as_str(),
                claim["metadata"]["name"].as_str(),
            );
            let known = out.state.pvcs.iter().any(|c| {
                c.metadata.namespace.as_deref() == ns && c.metadata.name.as_deref() == name
            });
            if !known {
                out.state.pvcs.push(Arc::new(typed(doc, claim)?));
            }
        }
        for mut pod in pods {
            default_fields(&mut pod, "Pod");
            out.pending.push(Arc::new(typed::<Pod>(doc, pod)?));
        }
    }
    Ok(())
}

/// The StorageClass annotated as the default (the admission plugin's choice for a claim
/// without a class).
fn default_class(out: &Loaded) -> Option<String> {
    out.state
        .storageclasses
        .iter()
        .find(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
                .is_some_and(|v| v == "true")
        })
        .and_then(|c| c.metadata.name.clone())
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
    // The CRD's `minimum: 0`: a snapshot is not read more leniently than the API server.
    count(v, "/spec/replicas", "spec.replicas")?;
    match count(v, "/spec/weight", "spec.weight")? {
        Some(w) if !(1..=100).contains(&w) => Err(format!("spec.weight: {w} is not in 1..100")),
        _ => Ok(()),
    }
}
