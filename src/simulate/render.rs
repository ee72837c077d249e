//! The plan as text.

use std::fmt::Write as _;

use templates::offline::columns;

use super::Plan;

/// `name` for pods of the `default` namespace, `namespace/name` otherwise.
pub(super) fn short_pod(p: &str) -> &str {
    p.strip_prefix("default/").unwrap_or(p)
}

/// `n: a, b, c, … (+k)` within about `budget` characters.
pub(super) fn pod_list(pods: &[String], budget: usize) -> String {
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

pub(super) const POD_LIST_WIDTH: usize = 72;

pub(super) fn cells(row: &[&str]) -> Vec<String> {
    row.iter().map(|c| c.to_string()).collect()
}

/// Renders the plan as text: summary, NodeClaims to create, pods on existing capacity,
/// unplaceable pods, total.
pub fn render_table(plan: &Plan) -> String {
    let mut out = String::new();
    write_summary(&mut out, plan);
    write_node_claims(&mut out, plan);
    write_existing(&mut out, plan);
    write_counted(&mut out, plan);
    write_drifted(&mut out, plan);
    write_disruption(&mut out, plan);
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
    if let Some(ff) = t.first_fit_price_per_hour {
        let _ = writeln!(
            out,
            "Price-aware packing: {:.4}/h; first-fit packing (Karpenter's) would cost {ff:.4}/h",
            t.price_per_hour
        );
    }
    out
}

/// Templates with a count: the source, what is used, what the plan takes.
fn write_counted(out: &mut String, plan: &Plan) {
    if plan.counted_templates.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nCounted templates:");
    for t in &plan.counted_templates {
        let _ = writeln!(
            out,
            "  {}: {} {}, {} live, {} available, {} planned",
            t.template, t.source, t.limit, t.live, t.available, t.planned
        );
    }
}

/// The snapshot, its NodeClasses and NodePools, the warnings.
fn write_summary(out: &mut String, plan: &Plan) {
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
}

/// The NodeClaims to create.
fn write_node_claims(out: &mut String, plan: &Plan) {
    let _ = writeln!(out, "\nNodeClaims to create:");
    if plan.node_claims.is_empty() {
        let _ = writeln!(out, "(none)");
    } else {
        // The SIZE column only when a NodeClaim is of a resizable template.
        let sized = plan.node_claims.iter().any(|c| c.size.is_some());
        let mut header = vec!["NODEPOOL", "INSTANCE-TYPE"];
        if sized {
            header.push("SIZE");
        }
        header.extend([
            "ARCH",
            "ZONE",
            "CAPACITY-TYPE",
            "PRICE/H",
            "CANDIDATES",
            "PODS",
        ]);
        let mut rows = vec![cells(&header)];
        for c in &plan.node_claims {
            let mut row = vec![c.node_pool.clone(), c.instance_type.clone()];
            if sized {
                row.push(
                    c.size
                        .as_ref()
                        .map_or_else(|| "-".into(), |s| format!("{}cpu/{}", s.cpu, s.memory)),
                );
            }
            row.extend([
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
            rows.push(row);
        }
        out.push_str(&columns(&rows));
    }
}

/// Pods on existing capacity, and pods that cannot be placed.
fn write_existing(out: &mut String, plan: &Plan) {
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
}

/// Drifted NodeClaims and their replacements.
fn write_drifted(out: &mut String, plan: &Plan) {
    if !plan.drifted.is_empty() {
        let _ = writeln!(out, "\nDrifted NodeClaims (replaced surge-first):");
        let mut rows = vec![cells(&["NODECLAIM", "DRIFTED", "REPLACEMENTS", "WHY"])];
        for d in &plan.drifted {
            let replacements = match (d.blocked.is_empty(), d.replacements.is_empty()) {
                (false, _) => format!("blocked: {} pod(s) fit nowhere", d.blocked.len()),
                (true, true) => "none (pods fit elsewhere)".to_string(),
                (true, false) => d.replacements.join(","),
            };
            rows.push(vec![
                d.node_claim.clone(),
                d.reason.clone(),
                replacements,
                d.message.clone(),
            ]);
        }
        out.push_str(&columns(&rows));
    }
}

/// Each existing NodeClaim's disruption verdict.
fn write_disruption(out: &mut String, plan: &Plan) {
    if !plan.disruption.is_empty() {
        let _ = writeln!(out, "\nDisruption (existing NodeClaims):");
        let mut rows = vec![cells(&[
            "NODECLAIM",
            "NODEPOOL",
            "INSTANCE-TYPE",
            "ACTION",
            "NODES",
            "REPLACEMENT",
            "SAVES/H",
            "VERDICT",
        ])];
        for d in &plan.disruption {
            rows.push(vec![
                d.node_claim.clone(),
                d.node_pool.clone(),
                d.instance_type.clone(),
                d.action.clone(),
                if d.nodes.is_empty() {
                    "-".into()
                } else {
                    d.nodes.join(",")
                },
                d.replacement.clone().unwrap_or_else(|| "-".into()),
                d.savings_per_hour
                    .map_or_else(|| "-".into(), |s| format!("{s:.4}")),
                d.message.clone(),
            ]);
        }
        out.push_str(&columns(&rows));
    }
}
