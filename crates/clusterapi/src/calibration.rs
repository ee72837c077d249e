//! Calibration of resizable templates: a Node that registers with less cpu or memory than
//! the size its NodeClaim asked for (firmware, hypervisor or kernel reservations) shows a
//! shortfall; the largest seen per template is kept in the NodeClass status
//! (`status.resizeCorrections`), and the catalog subtracts it from every size of the
//! template (`templates::settings`), so later solves pick the next size when it matters.
//! Pure; the NodeClass status loop calls it.

use std::collections::BTreeMap;

use api::NodeClaim;
use clusterapi_api::nodeclass::ResizeCorrection;
use k8s_openapi::api::core::v1::Node;
use templates::quantity::{format_bytes, format_milli, parse_milli, parse_value};

use super::plan::Plan;

/// What one Node lacks against the size asked: (template, millicores, bytes); `None` when
/// the claim is not sized or the Node has what was asked.
pub(crate) fn shortfall(claim: &NodeClaim, node: &Node) -> Option<(String, i64, i64)> {
    let plan = Plan::of(claim)?;
    let size = plan.resize.as_ref()?.size;
    let capacity = node.status.as_ref()?.capacity.as_ref()?;
    let cpu = parse_milli(&capacity.get("cpu")?.0).ok()?;
    let memory = parse_value(&capacity.get("memory")?.0).ok()?;
    let (cpu_short, mem_short) = ((size.cpu - cpu).max(0), (size.memory - memory).max(0));
    (cpu_short > 0 || mem_short > 0).then(|| {
        (
            plan.infrastructure_template.name.clone(),
            cpu_short,
            mem_short,
        )
    })
}

/// The corrections after `observed` shortfalls: per template the largest of the stored one
/// and those observed (a correction only grows: sizes already account for it), sorted by
/// template.
pub(crate) fn corrections(
    stored: &[ResizeCorrection],
    observed: impl IntoIterator<Item = (String, i64, i64)>,
) -> Vec<ResizeCorrection> {
    let mut by_template: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let parsed = stored.iter().map(|c| {
        (
            c.template.clone(),
            parse_milli(&c.cpu).unwrap_or(0),
            parse_value(&c.memory).unwrap_or(0),
        )
    });
    for (template, cpu, memory) in parsed.chain(observed) {
        let e = by_template.entry(template).or_default();
        *e = (e.0.max(cpu), e.1.max(memory));
    }
    by_template
        .into_iter()
        .map(|(template, (cpu, memory))| ResizeCorrection {
            template,
            cpu: format_milli(cpu),
            memory: format_bytes(memory),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(size: Option<(i64, i64)>) -> NodeClaim {
        let plan = Plan {
            infrastructure_template: crate::plan::TypedRef {
                name: "flex".into(),
                ..Default::default()
            },
            resize: size.map(|(cpu, memory)| crate::plan::PlanSize {
                size: templates::resize::Size { cpu, memory },
                fields: vec![],
            }),
            ..Plan::default()
        };
        serde_json::from_value(json!({
            "metadata": {"name": "c", "annotations": {
                api::consts::annotations::LAUNCH_PLAN: serde_json::to_string(&plan).expect("plan")}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"}, "requirements": []}
        }))
        .expect("claim")
    }

    fn node(cpu: &str, memory: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"},
            "status": {"capacity": {"cpu": cpu, "memory": memory}}}))
        .expect("node")
    }

    #[test]
    fn a_shortfall_is_what_the_node_lacks() {
        let c = claim(Some((6000, 20 << 30)));
        assert_eq!(shortfall(&c, &node("6", "20Gi")), None);
        assert_eq!(
            shortfall(&c, &node("6", "19968Mi")),
            Some(("flex".into(), 0, 512 << 20))
        );
        assert_eq!(
            shortfall(&claim(None), &node("1", "1Gi")),
            None,
            "not sized"
        );
    }

    #[test]
    fn corrections_keep_the_largest_per_template() {
        let stored = vec![ResizeCorrection {
            template: "flex".into(),
            cpu: "0".into(),
            memory: "256Mi".into(),
        }];
        let got = corrections(
            &stored,
            [
                ("flex".to_string(), 0, 512 << 20),
                ("flex".to_string(), 100, 128 << 20),
                ("other".to_string(), 0, 1 << 30),
            ],
        );
        assert_eq!(
            got,
            vec![
                ResizeCorrection {
                    template: "flex".into(),
                    cpu: "100m".into(),
                    memory: "512Mi".into()
                },
                ResizeCorrection {
                    template: "other".into(),
                    cpu: "0".into(),
                    memory: "1Gi".into()
                },
            ]
        );
        assert_eq!(corrections(&stored, []), stored, "kept without new Nodes");
    }
}
