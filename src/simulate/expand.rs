//! Workloads into the pods their controllers would create.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use karpenter_core::objects::terminal;
use serde_json::{Value, json};
use templates::offline::selector_matches;

use super::doc::{Doc, count, normalize_pod_spec};
use super::{Error, MAX_WORKLOAD_PODS};

/// The pods a workload's controller would create: replicas (Job: parallelism, at most
/// completions) minus the pods of the snapshot its selector already matches. A
/// StatefulSet's pods mount the claims of its `volumeClaimTemplates` (`<template>-<pod>`),
/// which [`claims`] gives.
pub(super) fn expand(doc: &Doc, obj: &Value, pods: &[Arc<Pod>]) -> Result<Vec<Value>, Error> {
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
    let in_ns: Vec<&Pod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .collect();
    let existing = in_ns
        .iter()
        .filter(|p| {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            selects_something && !terminal(p) && selector_matches(&selector, &labels)
        })
        .count() as u64;
    let taken: HashSet<&str> = in_ns
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
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
        let mut spec = spec.clone();
        for t in claim_templates(doc, obj) {
            let volume = json!({"name": t["metadata"]["name"],
                "persistentVolumeClaim": {"claimName": claim_name(t, &name)}});
            match spec["volumes"].as_array_mut() {
                Some(vs) => vs.push(volume),
                None => spec["volumes"] = json!([volume]),
            }
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

/// A StatefulSet's `volumeClaimTemplates` (none for other kinds).
fn claim_templates<'a>(doc: &Doc, obj: &'a Value) -> Vec<&'a Value> {
    if doc.kind != "StatefulSet" {
        return Vec::new();
    }
    obj["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["metadata"]["name"].is_string())
        .collect()
}

/// The claim a StatefulSet's pod `pod` mounts for `template`: `<template>-<pod>`.
fn claim_name(template: &Value, pod: &str) -> String {
    format!(
        "{}-{pod}",
        template["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The claims the StatefulSet controller creates for the pods `pods` of `obj` (not yet
/// bound; the class is the template's, else `default_class`, as the admission plugin sets).
pub(super) fn claims(
    doc: &Doc,
    obj: &Value,
    pods: &[Value],
    default_class: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for t in claim_templates(doc, obj) {
        for p in pods {
            let pod = p["metadata"]["name"].as_str().unwrap_or_default();
            let mut spec = t["spec"].clone();
            if spec["storageClassName"].is_null()
                && let Some(c) = default_class
            {
                spec["storageClassName"] = json!(c);
            }
            out.push(json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim_name(t, pod), "namespace": doc.ns(),
                             "labels": t["metadata"]["labels"]},
                "spec": spec,
                "status": {"phase": "Pending"},
            }));
        }
    }
    out
}
