//! Drain rules: how the core's drain treats each pod of a terminating NodeClaim's Node, as
//! the provider answers it ([`crate::CloudProvider::drain_rules`]). Provider-neutral: a list
//! of rules (pod and namespace label selectors, first match wins) and an optional pod label
//! that overrides them. The Cluster API provider fills it from the MachineDrainRules that
//! select the claim's Machine and Cluster API's drain pod label; a
//! provider that has none answers [`DrainRules::default`]: every pod drained, order 0.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// What the drain does with one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainBehaviour {
    /// Evicted, in groups of increasing `order` (each group starts when the one before has
    /// left).
    Drain { order: i32 },
    /// Neither evicted nor waited for (it goes with the Node).
    Skip,
    /// Never evicted; the drain waits until it has finished (counted in order 0).
    WaitCompleted,
}

impl DrainBehaviour {
    /// Karpenter's and Cluster API's default: drained, order 0.
    pub const DEFAULT: DrainBehaviour = DrainBehaviour::Drain { order: 0 };

    /// The order group the pod belongs to while the drain waits for it (`None`: skipped).
    pub fn order(self) -> Option<i32> {
        match self {
            DrainBehaviour::Drain { order } => Some(order),
            DrainBehaviour::WaitCompleted => Some(0),
            DrainBehaviour::Skip => None,
        }
    }
}

impl Default for DrainBehaviour {
    fn default() -> Self {
        DrainBehaviour::DEFAULT
    }
}

/// Which pods a rule applies to: both selectors match (absent or empty: everything).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSelector {
    /// Over the pod's labels.
    pub selector: Option<LabelSelector>,
    /// Over the labels of the pod's namespace.
    pub namespace_selector: Option<LabelSelector>,
}

/// One rule: the pods it selects get `behaviour`.
#[derive(Clone, Debug, PartialEq)]
pub struct DrainRule {
    /// Where it comes from, in logs (`MachineDrainRule ns/name`).
    pub name: String,
    pub behaviour: DrainBehaviour,
    /// Any one selecting the pod applies the rule; empty: every pod.
    pub pods: Vec<PodSelector>,
}

/// How a claim's pods are drained: [`DrainRules::behaviour`] of each pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainRules {
    /// A pod label whose value overrides the rules: `skip` (any case) skips the pod,
    /// `wait-completed` (any case, the dash optional) waits for it; other values are ignored.
    pub label: Option<String>,
    /// In the order they apply: the first that selects a pod decides; none: drained, order 0.
    pub rules: Vec<DrainRule>,
}

fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    selector.is_none_or(|s| api::selector::selector_matches(s, labels))
}

impl DrainRules {
    /// Whether a rule reads namespace labels (the core then looks the pods' namespaces up).
    pub fn needs_namespaces(&self) -> bool {
        self.rules
            .iter()
            .flat_map(|r| &r.pods)
            .any(|p| p.namespace_selector.is_some())
    }

    /// What the drain does with `pod`, whose namespace has `namespace_labels` (`None`: not
    /// known, then only namespace selectors matching no label select it).
    pub fn behaviour(
        &self,
        pod: &Pod,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> DrainBehaviour {
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        if let Some(value) = self.label.as_ref().and_then(|l| labels.get(l)) {
            if value.eq_ignore_ascii_case("skip") {
                return DrainBehaviour::Skip;
            }
            if value
                .replacen('-', "", 1)
                .eq_ignore_ascii_case("waitcompleted")
            {
                return DrainBehaviour::WaitCompleted;
            }
        }
        let namespace = namespace_labels.unwrap_or(&empty);
        self.rules
            .iter()
            .find(|r| {
                r.pods.is_empty()
                    || r.pods.iter().any(|p| {
                        matches(p.selector.as_ref(), labels)
                            && matches(p.namespace_selector.as_ref(), namespace)
                    })
            })
            .map_or(DrainBehaviour::DEFAULT, |r| r.behaviour)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}}),
        )
        .expect("pod")
    }

    fn selector(labels: serde_json::Value) -> Option<LabelSelector> {
        Some(serde_json::from_value(json!({ "matchLabels": labels })).expect("selector"))
    }

    fn rule(name: &str, behaviour: DrainBehaviour, pods: Vec<PodSelector>) -> DrainRule {
        DrainRule {
            name: name.into(),
            behaviour,
            pods,
        }
    }

    fn ns(labels: serde_json::Value) -> BTreeMap<String, String> {
        serde_json::from_value(labels).expect("labels")
    }

    #[test]
    fn no_rules_drain_everything_at_order_zero() {
        let rules = DrainRules::default();
        assert_eq!(
            rules.behaviour(&pod(json!({"a": "b"})), None),
            DrainBehaviour::DEFAULT
        );
        assert!(!rules.needs_namespaces());
        // Without a label key the label means nothing.
        let p = pod(json!({"example.com/drain": "skip"}));
        assert_eq!(rules.behaviour(&p, None), DrainBehaviour::DEFAULT);
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let rules = DrainRules {
            label: None,
            rules: vec![
                rule(
                    "a",
                    DrainBehaviour::Drain { order: 10 },
                    vec![PodSelector {
                        selector: selector(json!({"app": "db"})),
                        namespace_selector: None,
                    }],
                ),
                rule("b", DrainBehaviour::Skip, vec![]),
            ],
        };
        assert_eq!(
            rules.behaviour(&pod(json!({"app": "db"})), None),
            DrainBehaviour::Drain { order: 10 }
        );
        // Positive control: another pod falls to the catch-all rule.
        assert_eq!(
            rules.behaviour(&pod(json!({"app": "web"})), None),
            DrainBehaviour::Skip
        );
    }

    #[test]
    fn pod_and_namespace_selectors_are_anded_and_selectors_ored() {
        let rules = DrainRules {
            label: None,
            rules: vec![rule(
                "r",
                DrainBehaviour::WaitCompleted,
                vec![
                    PodSelector {
                        selector: selector(json!({"app": "job"})),
                        namespace_selector: selector(json!({"team": "batch"})),
                    },
                    PodSelector {
                        selector: selector(json!({"app": "cron"})),
                        namespace_selector: None,
                    },
                ],
            )],
        };
        assert!(rules.needs_namespaces());
        let job = pod(json!({"app": "job"}));
        let batch = ns(json!({"team": "batch"}));
        let other = ns(json!({"team": "web"}));
        assert_eq!(
            rules.behaviour(&job, Some(&batch)),
            DrainBehaviour::WaitCompleted
        );
        assert_eq!(rules.behaviour(&job, Some(&other)), DrainBehaviour::DEFAULT);
        assert_eq!(rules.behaviour(&job, None), DrainBehaviour::DEFAULT);
        let cron = pod(json!({"app": "cron"}));
        assert_eq!(
            rules.behaviour(&cron, Some(&other)),
            DrainBehaviour::WaitCompleted
        );
    }

    #[test]
    fn the_pod_label_overrides_rules_case_insensitively() {
        let rules = DrainRules {
            label: Some("example.com/drain".into()),
            rules: vec![rule("a", DrainBehaviour::Drain { order: 5 }, vec![])],
        };
        let with = |v: &str| pod(json!({ "example.com/drain": v }));
        assert_eq!(rules.behaviour(&with("Skip"), None), DrainBehaviour::Skip);
        assert_eq!(rules.behaviour(&with("skip"), None), DrainBehaviour::Skip);
        for v in ["wait-completed", "Wait-Completed", "WaitCompleted"] {
            assert_eq!(
                rules.behaviour(&with(v), None),
                DrainBehaviour::WaitCompleted,
                "{v}"
            );
        }
        // An unknown value leaves the rules to decide.
        assert_eq!(
            rules.behaviour(&with("never"), None),
            DrainBehaviour::Drain { order: 5 }
        );
        assert_eq!(DrainBehaviour::Skip.order(), None);
        assert_eq!(DrainBehaviour::WaitCompleted.order(), Some(0));
    }
}
