//! Repair policies at the seam (Karpenter v1.15's reason-aware `RepairPolicy`): which Node
//! conditions make a Node unhealthy, for how long each is tolerated, what is done about it
//! (reboot or replace), how urgent it is and how long its pods get to leave. The core
//! validates and compiles a provider's set once, at startup ([`validate`]), and matches Nodes
//! against it.
//!
//! A set has exactly one **fallback** policy (empty `reason_regex`, action
//! [`RepairAction::ReplaceNode`]). A Node condition is *covered* when some policy names its
//! type and status (the fallback's pair included); a covered condition matches every policy
//! of its pair whose `reason_regex` finds a match in the condition's reason (unanchored, as
//! Go's `MatchString`), and the fallback when none does.

use std::time::Duration;

/// What a repair does (Karpenter's `RepairAction`). Ordered by how disruptive it is:
/// replacing is more disruptive than rebooting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RepairAction {
    /// Reboot the instance in place ([`crate::CloudProvider::reboot`]); a provider that
    /// cannot gets the Node replaced instead.
    RebootNode,
    /// Delete the NodeClaim; the provisioner launches a replacement for its pods.
    #[default]
    ReplaceNode,
}

impl RepairAction {
    /// Karpenter's spelling (`RebootNode`, `ReplaceNode`).
    pub fn as_str(self) -> &'static str {
        match self {
            RepairAction::RebootNode => "RebootNode",
            RepairAction::ReplaceNode => "ReplaceNode",
        }
    }

    /// From Karpenter's spelling.
    pub fn parse(s: &str) -> Option<RepairAction> {
        match s {
            "RebootNode" => Some(RepairAction::RebootNode),
            "ReplaceNode" => Some(RepairAction::ReplaceNode),
            _ => None,
        }
    }
}

/// A Node condition that, held for `toleration`, gets the Node repaired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub condition_status: String,
    /// A regular expression searched for in the condition's reason; empty: the fallback.
    pub reason_regex: String,
    pub toleration: Duration,
    /// How long the Node's pods get to leave before the repair goes ahead without them
    /// (`None`: the NodeClaim's own `terminationGracePeriod`; zero: no drain).
    pub termination_grace_period: Option<Duration>,
    /// 0–100; a higher priority is repaired first and wins a tie between policies of one
    /// action.
    pub priority: u8,
    pub action: RepairAction,
}

/// The highest priority a policy may have.
pub const MAX_PRIORITY: u8 = 100;

impl RepairPolicy {
    /// A policy replacing the Node once `type=status` held for `toleration`, for any reason
    /// (`reason_regex` `.*`).
    pub fn replace(condition_type: &str, condition_status: &str, toleration: Duration) -> Self {
        RepairPolicy {
            condition_type: condition_type.into(),
            condition_status: condition_status.into(),
            reason_regex: ".*".into(),
            toleration,
            termination_grace_period: None,
            priority: 0,
            action: RepairAction::ReplaceNode,
        }
    }

    /// This policy as the set's fallback (empty `reason_regex`).
    pub fn fallback(mut self) -> Self {
        self.reason_regex.clear();
        self
    }

    /// The kubelet's `Ready` False (the fallback) or Unknown, each tolerated for
    /// `toleration` (the policies of Karpenter's providers).
    pub fn node_not_ready(toleration: Duration) -> Vec<RepairPolicy> {
        vec![
            RepairPolicy::replace("Ready", "False", toleration).fallback(),
            RepairPolicy::replace("Ready", "Unknown", toleration),
        ]
    }

    /// Whether this is the set's fallback.
    pub fn is_fallback(&self) -> bool {
        self.reason_regex.is_empty()
    }
}

/// What is wrong with a policy set: every finding, each naming the policy by its index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid repair policies: {}", .0.join("; "))]
pub struct InvalidPolicies(pub Vec<String>);

/// Checks a provider's policy set as Karpenter does at startup: an empty set is valid (no
/// repair); otherwise exactly one fallback, and it replaces; every policy with a condition
/// type, a status of `True`/`False`/`Unknown`, a priority within 0–100 and a
/// `reason_regex` that compiles (the `regex` crate's syntax: RE2's, as Go's `regexp`).
pub fn validate(policies: &[RepairPolicy]) -> Result<(), InvalidPolicies> {
    if policies.is_empty() {
        return Ok(());
    }
    let mut errors = Vec::new();
    let fallbacks: Vec<usize> = policies
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_fallback())
        .map(|(i, _)| i)
        .collect();
    match fallbacks.as_slice() {
        [] => errors.push(
            "no fallback policy (exactly one policy must have an empty reasonRegex)".to_string(),
        ),
        [i] if policies[*i].action != RepairAction::ReplaceNode => errors.push(format!(
            "policies[{i}]: the fallback policy (empty reasonRegex) must use action ReplaceNode, not {}",
            policies[*i].action.as_str()
        )),
        [_] => {}
        many => errors.push(format!(
            "{} fallback policies (empty reasonRegex) at {}; exactly one is allowed",
            many.len(),
            many.iter()
                .map(|i| format!("policies[{i}]"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    for (i, p) in policies.iter().enumerate() {
        if p.condition_type.is_empty() {
            errors.push(format!("policies[{i}].conditionType: empty"));
        }
        if !matches!(p.condition_status.as_str(), "True" | "False" | "Unknown") {
            errors.push(format!(
                "policies[{i}].conditionStatus: \"{}\" is not True, False or Unknown",
                p.condition_status
            ));
        }
        if p.priority > MAX_PRIORITY {
            errors.push(format!(
                "policies[{i}].priority: {} is outside 0-{MAX_PRIORITY}",
                p.priority
            ));
        }
        if !p.is_fallback()
            && let Err(e) = regex::Regex::new(&p.reason_regex)
        {
            errors.push(format!(
                "policies[{i}].reasonRegex: \"{}\" does not compile: {e}",
                p.reason_regex
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(InvalidPolicies(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn the_default_set_is_valid_and_an_empty_set_too() {
        assert_eq!(validate(&RepairPolicy::node_not_ready(MIN)), Ok(()));
        assert_eq!(validate(&[]), Ok(()));
    }

    #[test]
    fn a_set_needs_exactly_one_replacing_fallback() {
        let unknown = RepairPolicy::replace("Ready", "Unknown", MIN);
        let err = validate(std::slice::from_ref(&unknown)).expect_err("no fallback");
        assert!(err.to_string().contains("no fallback"), "{err}");
        let two = [unknown.clone().fallback(), unknown.clone().fallback()];
        let err = validate(&two).expect_err("two fallbacks");
        assert!(
            err.to_string().contains("policies[0], policies[1]"),
            "{err}"
        );
        let reboot = RepairPolicy {
            action: RepairAction::RebootNode,
            ..unknown.fallback()
        };
        let err = validate(&[reboot]).expect_err("rebooting fallback");
        assert!(
            err.to_string().contains("must use action ReplaceNode"),
            "{err}"
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let bad = RepairPolicy {
            condition_type: String::new(),
            condition_status: "Maybe".into(),
            reason_regex: "(".into(),
            priority: 101,
            ..RepairPolicy::replace("Ready", "False", MIN)
        };
        let set = [RepairPolicy::replace("Ready", "False", MIN).fallback(), bad];
        let err = validate(&set).expect_err("bad");
        for field in [
            "policies[1].conditionType",
            "policies[1].conditionStatus",
            "policies[1].priority",
            "policies[1].reasonRegex",
        ] {
            assert!(err.to_string().contains(field), "{field}: {err}");
        }
    }
}
