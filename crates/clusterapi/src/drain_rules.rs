//! MachineDrainRules honoured by the core's drain: the provider-neutral
//! [`cloudprovider::DrainRules`] of one of our Machines.
//!
//! The core drains a NodeClaim's Node itself and Cluster API's own drain is excluded for our
//! Machines, so the rules a user wrote for Cluster API's drain are handed to the core here.
//! Cluster API's facts (v1.14, `core/reconcilers/machine/drain/`): a MachineDrainRule applies
//! to the Machines of its namespace that one of its `spec.machines[]` selects (the Machine's
//! labels by `selector`, its Cluster's by `clusterSelector`; none: every Machine); the rules
//! applying to a Machine are taken in name order, and the first whose `spec.pods[]` selects a
//! pod (the pod's labels by `selector`, its namespace's by `namespaceSelector`; none: every
//! pod) decides: `Drain` with its `order` (default 0), `Skip` or `WaitCompleted`. The pod
//! label `cluster.x-k8s.io/drain` (`skip` or `wait-completed`, any case) overrides the rules.

use std::sync::Arc;

use api::NodeClaim;
use cloudprovider::{DrainBehaviour, DrainRule, DrainRules, Error, PodSelector, Retry};
use clusterapi_api::{Cluster, Machine, MachineDrainRule};
use futures::FutureExt;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::plan::Plan;

/// The pod label that overrides MachineDrainRules (Cluster API's `PodDrainLabel`).
pub const POD_DRAIN_LABEL: &str = "cluster.x-k8s.io/drain";

fn matches(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    selector.is_none_or(|s| api::selector::selector_matches(s, labels))
}

/// Whether `rule` applies to `machine` (of the Cluster `cluster`, if it is known: an unknown
/// Cluster has no labels).
pub fn selects(rule: &MachineDrainRule, machine: &Machine, cluster: Option<&Cluster>) -> bool {
    let none = Default::default();
    let cluster_labels = cluster.map_or(&none, |c| c.labels());
    rule.namespace() == machine.namespace()
        && (rule.spec.machines.is_empty()
            || rule.spec.machines.iter().any(|m| {
                matches(m.selector.as_ref(), machine.labels())
                    && matches(m.cluster_selector.as_ref(), cluster_labels)
            }))
}

/// The behaviour a rule gives the pods it selects (`None`: a behaviour this version does not
/// know; the rule is left out).
fn behaviour(rule: &MachineDrainRule) -> Option<DrainBehaviour> {
    match rule.spec.drain.behavior.as_str() {
        "Drain" => Some(DrainBehaviour::Drain {
            order: rule.spec.drain.order.unwrap_or(0),
        }),
        "Skip" => Some(DrainBehaviour::Skip),
        "WaitCompleted" => Some(DrainBehaviour::WaitCompleted),
        other => {
            tracing::warn!(rule = %describe(rule), behavior = other,
                "MachineDrainRule with an unknown spec.drain.behavior ignored");
            None
        }
    }
}

/// `MachineDrainRule <namespace>/<name>`.
pub fn describe(rule: &MachineDrainRule) -> String {
    format!(
        "MachineDrainRule {}/{}",
        rule.namespace().unwrap_or_default(),
        rule.name_any()
    )
}

/// The drain rules of `machine` (of `cluster`): those of `rules` selecting it, in name order,
/// and the pod label that overrides them.
pub fn for_machine(
    machine: &Machine,
    cluster: Option<&Cluster>,
    rules: &[Arc<MachineDrainRule>],
) -> DrainRules {
    let mut selecting: Vec<&MachineDrainRule> = rules
        .iter()
        .map(Arc::as_ref)
        .filter(|r| selects(r, machine, cluster))
        .collect();
    selecting.sort_by_key(|r| r.name_any());
    DrainRules {
        label: Some(POD_DRAIN_LABEL.into()),
        rules: selecting
            .into_iter()
            .filter_map(|r| {
                Some(DrainRule {
                    name: describe(r),
                    behaviour: behaviour(r)?,
                    pods: r
                        .spec
                        .pods
                        .iter()
                        .map(|p| PodSelector {
                            selector: p.selector.clone(),
                            namespace_selector: p.namespace_selector.clone(),
                        })
                        .collect(),
                })
            })
            .collect(),
    }
}

/// The drain rules of `claim`'s Machine, from the caches (what
/// [`cloudprovider::CloudProvider::drain_rules`] answers).
pub(crate) fn of_claim(ctx: &Context, claim: &NodeClaim) -> Result<DrainRules, Error> {
    let Some(plan) = Plan::of(claim) else {
        return Ok(DrainRules::default());
    };
    // Never judged from a cache still filling: a rule not listed yet would be ignored.
    if !matches!(
        ctx.drain_rules.wait_until_ready().now_or_never(),
        Some(Ok(()))
    ) {
        return Err(Error::retryable(
            Retry::Waiting,
            "the MachineDrainRule cache is not filled yet",
        ));
    }
    let rules = ctx.drain_rules.state();
    let Some(machine) = ctx
        .machines
        .get(&ObjectRef::new(&plan.machine).within(&plan.namespace))
    else {
        // The Machine is there while its Node drains (deleted after); were it not, only the
        // rules for every Machine of its namespace can apply.
        let all: Vec<_> = rules
            .into_iter()
            .filter(|r| r.spec.machines.is_empty())
            .collect();
        let mut stand_in = Machine::new(&plan.machine, Default::default());
        stand_in.metadata.namespace = Some(plan.namespace.clone());
        return Ok(for_machine(&stand_in, None, &all));
    };
    let cluster = ctx
        .clusters
        .get(&ObjectRef::new(&machine.spec.cluster_name).within(&plan.namespace));
    Ok(for_machine(&machine, cluster.as_deref(), &rules))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    fn machine(labels: Value) -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns", "labels": labels},
            "spec": {"clusterName": "c1", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "n"}},
        }))
        .expect("machine")
    }

    fn cluster(labels: Value) -> Cluster {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns", "labels": labels},
            "spec": {},
        }))
        .expect("cluster")
    }

    fn rule(name: &str, namespace: &str, spec: Value) -> Arc<MachineDrainRule> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "MachineDrainRule",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }))
            .expect("rule"),
        )
    }

    fn pod(labels: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "app", "labels": labels}}),
        )
        .expect("pod")
    }

    #[test]
    fn rules_select_machines_of_their_namespace_by_machine_and_cluster_labels() {
        let m = machine(json!({"pool": "a"}));
        let prod = cluster(json!({"stage": "prod"}));
        let all = rule("all", "ns", json!({"drain": {"behavior": "Skip"}}));
        assert!(selects(&all, &m, None));
        // Another namespace's rule never applies.
        let elsewhere = rule("all", "other", json!({"drain": {"behavior": "Skip"}}));
        assert!(!selects(&elsewhere, &m, Some(&prod)));
        let both = rule(
            "both",
            "ns",
            json!({"drain": {"behavior": "Skip"}, "machines": [
                {"selector": {"matchLabels": {"pool": "a"}},
                 "clusterSelector": {"matchLabels": {"stage": "prod"}}}]}),
        );
        assert!(selects(&both, &m, Some(&prod)));
        assert!(!selects(&both, &m, Some(&cluster(json!({"stage": "dev"})))));
        assert!(!selects(&both, &m, None));
        assert!(!selects(&both, &machine(json!({"pool": "b"})), Some(&prod)));
        // Selectors are ORed.
        let either = rule(
            "either",
            "ns",
            json!({"drain": {"behavior": "Skip"}, "machines": [
                {"selector": {"matchLabels": {"pool": "b"}}},
                {"clusterSelector": {"matchLabels": {"stage": "prod"}}}]}),
        );
        assert!(selects(&either, &m, Some(&prod)));
        assert!(!selects(&either, &m, None));
    }

    #[test]
    fn rules_apply_in_name_order_and_the_pod_label_overrides_them() {
        let m = machine(json!({"pool": "a"}));
        let rules = [
            rule(
                "b-catch-all",
                "ns",
                json!({"drain": {"behavior": "Drain", "order": 5}}),
            ),
            rule(
                "a-db",
                "ns",
                json!({"drain": {"behavior": "Drain", "order": 10},
                       "pods": [{"selector": {"matchLabels": {"app": "db"}}}]}),
            ),
            rule(
                "c-jobs",
                "ns",
                json!({"drain": {"behavior": "WaitCompleted"},
                       "pods": [{"selector": {"matchLabels": {"app": "job"}}}]}),
            ),
            rule(
                "0-other-machines",
                "ns",
                json!({"drain": {"behavior": "Skip"},
                       "machines": [{"selector": {"matchLabels": {"pool": "b"}}}]}),
            ),
        ];
        let drain = for_machine(&m, None, &rules);
        let names: Vec<&str> = drain.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "MachineDrainRule ns/a-db",
                "MachineDrainRule ns/b-catch-all",
                "MachineDrainRule ns/c-jobs"
            ]
        );
        assert_eq!(
            drain.behaviour(&pod(json!({"app": "db"})), None),
            DrainBehaviour::Drain { order: 10 }
        );
        // The catch-all comes before c-jobs: its WaitCompleted never applies.
        assert_eq!(
            drain.behaviour(&pod(json!({"app": "job"})), None),
            DrainBehaviour::Drain { order: 5 }
        );
        assert_eq!(
            drain.behaviour(&pod(json!({"app": "db", POD_DRAIN_LABEL: "Skip"})), None),
            DrainBehaviour::Skip
        );
        assert_eq!(
            drain.behaviour(&pod(json!({POD_DRAIN_LABEL: "wait-completed"})), None),
            DrainBehaviour::WaitCompleted
        );
        // Positive control: no rule selecting the Machine, the default (the label still holds).
        let none = for_machine(&machine(json!({})), None, &rules[3..]);
        assert!(none.rules.is_empty());
        assert_eq!(
            none.behaviour(&pod(json!({})), None),
            DrainBehaviour::DEFAULT
        );
        assert_eq!(
            none.behaviour(&pod(json!({POD_DRAIN_LABEL: "skip"})), None),
            DrainBehaviour::Skip
        );
    }
}
