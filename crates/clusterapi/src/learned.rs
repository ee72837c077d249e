//! Learned devices (Dynamic Resource Allocation): once a Node launched from a template has
//! published complete ResourceSlice pools, what it published is kept in the NodeClass status
//! (`status.learnedDevices`, the resource-slices annotation's form) and the catalog expects
//! it of the template's later Nodes, over what the template's annotations declare
//! (`templates::devices`). Pure; the NodeClass status loop calls it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use api::NodeClaim;
use clusterapi_api::nodeclass::LearnedDevices;
use k8s_openapi::api::resource::v1::ResourceSlice;

use super::plan::Plan;

/// The learned devices of NodeClass `nodeclass`: the `stored` ones, each template whose
/// NodeClaims' Nodes published complete pools learned again — from the Node it was learned
/// from while that one still publishes, else from the first by name — sorted by template.
pub(crate) fn learned_devices(
    nodeclass: &str,
    nodeclaims: &[Arc<NodeClaim>],
    slices: &[Arc<ResourceSlice>],
    stored: &[LearnedDevices],
) -> Vec<LearnedDevices> {
    let mut by_node: HashMap<&str, Vec<&ResourceSlice>> = HashMap::new();
    for s in slices {
        let owner = s
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Node")
            .map(|o| o.name.as_str());
        if let Some(node) = s.spec.node_name.as_deref().or(owner) {
            by_node.entry(node).or_default().push(s.as_ref());
        }
    }
    // Template → node → what it published.
    let mut observed: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for c in nodeclaims
        .iter()
        .filter(|c| c.spec.node_class_ref.name == nodeclass)
    {
        let Some(node) = c.status.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let (Some(plan), Some(published)) = (
            Plan::of(c),
            by_node.get(node).and_then(|s| api::dra::learned_slices(s)),
        ) else {
            continue;
        };
        observed
            .entry(plan.infrastructure_template.name.clone())
            .or_default()
            .insert(node.to_string(), published);
    }
    let mut out: BTreeMap<String, LearnedDevices> = stored
        .iter()
        .map(|l| (l.template.clone(), l.clone()))
        .collect();
    for (template, nodes) in observed {
        let kept = out
            .get(&template)
            .and_then(|l| nodes.get_key_value(&l.node));
        let Some((node, published)) = kept.or_else(|| nodes.iter().next()) else {
            continue;
        };
        let entry = LearnedDevices {
            template: template.clone(),
            node: node.clone(),
            resource_slices: published.clone(),
        };
        out.insert(template, entry);
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, template: &str, node: &str) -> Arc<NodeClaim> {
        let plan = Plan {
            infrastructure_template: crate::plan::TypedRef {
                name: template.into(),
                ..Default::default()
            },
            ..Plan::default()
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "annotations": {
                    api::consts::annotations::LAUNCH_PLAN: serde_json::to_string(&plan).expect("plan")}},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "default"},
                         "requirements": []},
                "status": {"nodeName": node}
            }))
            .expect("claim"),
        )
    }

    fn slice(node: &str, devices: &[&str], count: i64) -> Arc<ResourceSlice> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("{node}-gpu")},
                "spec": {"driver": "gpu.example.com", "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                         "devices": devices.iter().map(|d| json!({"name": d,
                            "attributes": {"model": {"string": "a100"}}})).collect::<Vec<_>>()}
            }))
            .expect("slice"),
        )
    }

    #[test]
    fn a_template_learns_what_its_nodes_publish_and_keeps_its_source_node() {
        let claims = [
            claim("a", "gpu", "n2"),
            claim("b", "gpu", "n1"),
            claim("c", "cpu", "n3"),
        ];
        // Nothing published: nothing learned (the control).
        assert!(learned_devices("default", &claims, &[], &[]).is_empty());
        // An incomplete pool (1 of 2 slices) teaches nothing either.
        let half = [slice("n1", &["gpu-0"], 2)];
        assert!(learned_devices("default", &claims, &half, &[]).is_empty());
        let slices = [
            slice("n1", &["gpu-1", "gpu-0"], 1),
            slice("n2", &["gpu-0"], 1),
        ];
        let got = learned_devices("default", &claims, &slices, &[]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].template.as_str(), got[0].node.as_str()),
            ("gpu", "n1")
        );
        let back = api::dra::parse_resource_slices(&got[0].resource_slices).expect("reads");
        let names: Vec<&str> = back[0].devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu-0", "gpu-1"]);
        // Learned from n2 before: n2 still publishes, so it stays the source.
        let from_n2 = LearnedDevices {
            node: "n2".into(),
            ..got[0].clone()
        };
        let again = learned_devices("default", &claims, &slices, &[from_n2]);
        assert_eq!(again[0].node, "n2");
        // The Nodes gone: what was learned stays.
        let kept = learned_devices("default", &[], &[], &got);
        assert_eq!(kept, got);
        // Another NodeClass's claims teach this one nothing.
        assert!(learned_devices("other", &claims, &slices, &[]).is_empty());
    }
}
