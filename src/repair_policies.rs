//! `karpenter-capi run --repair-policies <file>`: the Cluster API provider's repair policies
//! (Karpenter v1.15's reason-aware `RepairPolicy`), read from a YAML list and checked before
//! the operator starts; an error names the file, the policy and the field.
//!
//! ```yaml
//! - conditionType: Ready
//!   conditionStatus: "False"
//!   toleration: 10m              # the fallback: no reasonRegex, action ReplaceNode
//! - conditionType: Ready
//!   conditionStatus: Unknown
//!   reasonRegex: ".*"
//!   toleration: 10m
//! - conditionType: Ready
//!   conditionStatus: "False"
//!   reasonRegex: "^KernelDeadlock$"
//!   toleration: 1m
//!   terminationGracePeriod: 30s  # the pods get 30 s to leave first
//!   priority: 50                 # 0-100, higher is repaired first
//!   action: RebootNode           # or ReplaceNode (the default)
//! ```

use std::path::Path;
use std::time::Duration;

use cloudprovider::{RepairAction, RepairPolicy};
use serde::Deserialize;

/// One policy as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Written {
    condition_type: String,
    condition_status: String,
    #[serde(default)]
    reason_regex: String,
    toleration: String,
    #[serde(default)]
    termination_grace_period: Option<String>,
    #[serde(default)]
    priority: u8,
    #[serde(default)]
    action: Option<String>,
}

fn duration(text: &str, field: &str) -> Result<Duration, String> {
    api::duration::parse_duration(text)
        .ok_or_else(|| format!("{field}: {text:?} is not a duration such as 30s, 10m or 1h"))
}

/// The policies of `text` (a YAML list), checked as the operator requires them.
pub fn parse(text: &str) -> Result<Vec<RepairPolicy>, String> {
    let value: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let written: Vec<Written> = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = path
            .strip_prefix('[')
            .map_or(path.clone(), |p| format!("policies[{p}"));
        format!("{path}: {}", e.inner())
    })?;
    let mut policies = Vec::with_capacity(written.len());
    for (i, w) in written.into_iter().enumerate() {
        let field = |f: &str| format!("policies[{i}].{f}");
        let action = match w.action.as_deref() {
            None => RepairAction::ReplaceNode,
            Some(a) => RepairAction::parse(a).ok_or_else(|| {
                format!(
                    "{}: {a:?} is not RebootNode or ReplaceNode",
                    field("action")
                )
            })?,
        };
        policies.push(RepairPolicy {
            condition_type: w.condition_type,
            condition_status: w.condition_status,
            reason_regex: w.reason_regex,
            toleration: duration(&w.toleration, &field("toleration"))?,
            termination_grace_period: w
                .termination_grace_period
                .map(|g| duration(&g, &field("terminationGracePeriod")))
                .transpose()?,
            priority: w.priority,
            action,
        });
    }
    cloudprovider::repair::validate(&policies).map_err(|e| e.0.join("; "))?;
    Ok(policies)
}

/// The policies of the file at `path`; the error names the file.
pub fn read(path: &Path) -> Result<Vec<RepairPolicy>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
- conditionType: Ready
  conditionStatus: "False"
  toleration: 10m
- conditionType: Ready
  conditionStatus: "False"
  reasonRegex: "^KernelDeadlock$"
  toleration: 1m
  terminationGracePeriod: 30s
  priority: 50
  action: RebootNode
"#;

    #[test]
    fn a_written_set_reads_as_the_seam_policies() {
        let p = parse(GOOD).expect("valid");
        assert_eq!(p.len(), 2);
        assert!(p[0].is_fallback());
        assert_eq!(p[0].action, RepairAction::ReplaceNode);
        assert_eq!(p[0].toleration, Duration::from_secs(600));
        assert_eq!(p[1].action, RepairAction::RebootNode);
        assert_eq!(p[1].termination_grace_period, Some(Duration::from_secs(30)));
        assert_eq!(p[1].priority, 50);
    }

    #[test]
    fn every_mistake_names_its_field() {
        let cases = [
            (
                GOOD.replace("toleration: 1m", "toleration: soon"),
                "policies[1].toleration",
            ),
            (GOOD.replace("RebootNode", "Reboot"), "policies[1].action"),
            (
                GOOD.replace("priority: 50", "priority: 500"),
                "policies[1].priority",
            ),
            (GOOD.replace("priority: 50", "priorty: 50"), "policies[1]"),
            (
                GOOD.replace("^KernelDeadlock$", "(unclosed"),
                "policies[1].reasonRegex",
            ),
            (
                GOOD.replace(
                    "  toleration: 10m\n",
                    "  reasonRegex: x\n  toleration: 10m\n",
                ),
                "no fallback",
            ),
            ("{}".to_string(), "invalid type"),
        ];
        for (text, want) in cases {
            let err = parse(&text).expect_err(want);
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = read(Path::new("/nonexistent/policies.yaml")).expect_err("missing");
        assert!(
            err.starts_with("/nonexistent/policies.yaml: cannot read"),
            "{err}"
        );
    }
}
