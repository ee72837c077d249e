//! MachineHealthCheck coexistence: which MachineHealthCheck owns the remediation of one of our
//! Machines, as the provider-neutral answer the core's repair reads
//! ([`cloudprovider::RemediatedElsewhere`] on the instance `get` returns).
//!
//! Cluster API's facts (v1.14, `core/reconcilers/machinehealthcheck/`): an MHC targets the
//! Machines of its namespace that its `spec.selector` and the label
//! `cluster.x-k8s.io/cluster-name=<spec.clusterName>` select, owned or not, except those
//! annotated `cluster.x-k8s.io/skip-remediation` or `cluster.x-k8s.io/paused`. It judges them
//! by its own checks (node startup timeout, unhealthy Node and Machine conditions) and its
//! `triggerIf` gate, and marks an unhealthy one `HealthCheckSucceeded=False`. Then:
//! - without `remediation.templateRef` it only sets `OwnerRemediated=False` and waits for the
//!   Machine's owner to remediate (a MachineSet deletes the Machine, when both conditions are
//!   False and it is not being deleted). Our Machines have no owning controller but the
//!   operator, so the operator is that owner: the instance asks the core to replace it;
//! - with `remediation.templateRef` an external remediator (e.g. CAPM3's `Metal3Remediation`)
//!   acts on the Machine itself; the core does nothing but follow what happens (a deleted
//!   Machine gets its NodeClaim cleaned up by the lifecycle).
//!
//! Either way the core's own repair policies replace nothing on such a Machine: one
//! remediator per node.

use std::sync::Arc;

use cloudprovider::{RemediatedElsewhere, Unhealthy};
use clusterapi_api::{Machine, MachineHealthCheck};
use kube::ResourceExt;

/// A Machine annotation that keeps every MachineHealthCheck from remediating it.
pub const SKIP_REMEDIATION: &str = "cluster.x-k8s.io/skip-remediation";
/// Cluster API's paused annotation (also skips remediation).
pub const PAUSED: &str = "cluster.x-k8s.io/paused";
/// The Machine condition an MHC sets: False when it found the Machine unhealthy.
pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
/// The Machine condition an MHC sets False to ask the Machine's owner to remediate.
pub const OWNER_REMEDIATED: &str = "OwnerRemediated";

/// Whether `mhc` targets `m` (Cluster API's `getMachinesFromMHC` plus its skips).
pub fn selects(mhc: &MachineHealthCheck, m: &Machine) -> bool {
    let labels = m.labels();
    mhc.namespace() == m.namespace()
        && !mhc.spec.cluster_name.is_empty()
        && mhc.spec.cluster_name == m.spec.cluster_name
        && labels.get(api::consts::labels::CLUSTER_NAME) == Some(&mhc.spec.cluster_name)
        && api::selector::selector_matches(&mhc.spec.selector, labels)
        && !m.annotations().contains_key(SKIP_REMEDIATION)
        && !m.annotations().contains_key(PAUSED)
}

/// The MachineHealthCheck that owns the remediation of `m`: of those selecting it, the
/// first by name (Cluster API does not support overlapping selectors).
pub fn owner<'a>(
    m: &Machine,
    checks: &'a [Arc<MachineHealthCheck>],
) -> Option<&'a MachineHealthCheck> {
    checks
        .iter()
        .filter(|c| selects(c, m))
        .min_by_key(|c| c.name_any())
        .map(Arc::as_ref)
}

/// `MachineHealthCheck <namespace>/<name>`.
pub fn describe(mhc: &MachineHealthCheck) -> String {
    format!(
        "MachineHealthCheck {}/{}",
        mhc.namespace().unwrap_or_default(),
        mhc.name_any()
    )
}

/// Whether remediation is an external remediator's (`remediation.templateRef` set).
fn external(mhc: &MachineHealthCheck) -> bool {
    mhc.spec
        .remediation
        .as_ref()
        .and_then(|r| r.template_ref.as_ref())
        .is_some_and(|t| !t.name.is_empty())
}

/// What the core reads of `m`'s remediation: `None` when no MachineHealthCheck selects it
/// (the core's repair applies); else who owns it, and whether it asks the owner (us) to
/// replace the Machine now: `HealthCheckSucceeded=False` and `OwnerRemediated=False` on a
/// Machine not being deleted, with no external remediator (what a MachineSet acts on).
pub fn remediated_elsewhere(
    m: &Machine,
    checks: &[Arc<MachineHealthCheck>],
) -> Option<RemediatedElsewhere> {
    let mhc = owner(m, checks)?;
    let by = describe(mhc);
    let conditions = m
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let is_false = |t: &str| {
        api::conditions::get(conditions, t).filter(|c| c.status == api::conditions::FALSE)
    };
    let replace = match (is_false(HEALTH_CHECK_SUCCEEDED), is_false(OWNER_REMEDIATED)) {
        (Some(failed), Some(_)) if !external(mhc) && m.metadata.deletion_timestamp.is_none() => {
            let message = if failed.message.is_empty() {
                String::new()
            } else {
                format!(": {}", failed.message)
            };
            Some(Unhealthy {
                condition: HEALTH_CHECK_SUCCEEDED.into(),
                detail: format!(
                    "{by}: {HEALTH_CHECK_SUCCEEDED}=False ({}{message})",
                    failed.reason
                ),
                since: failed.last_transition_time.0,
            })
        }
        _ => None,
    };
    Some(RemediatedElsewhere { by, replace })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(labels: serde_json::Value, conditions: serde_json::Value) -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns", "labels": labels},
            "spec": {"clusterName": "c1", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "n"}},
            "status": {"conditions": conditions},
        }))
        .expect("machine")
    }

    fn mhc(
        name: &str,
        ns: &str,
        cluster: &str,
        selector: serde_json::Value,
        template: bool,
    ) -> Arc<MachineHealthCheck> {
        let remediation = if template {
            json!({"templateRef": {"apiVersion": "x/v1", "kind": "T", "name": "t"}})
        } else {
            json!({})
        };
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "MachineHealthCheck",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterName": cluster, "selector": selector, "remediation": remediation},
            }))
            .expect("mhc"),
        )
    }

    fn cond(t: &str, status: &str, reason: &str) -> serde_json::Value {
        json!({"type": t, "status": status, "reason": reason, "message": "",
               "lastTransitionTime": "2026-11-28T12:00:00Z"})
    }

    const LABELS: fn() -> serde_json::Value =
        || json!({"cluster.x-k8s.io/cluster-name": "c1", "pool": "a"});

    #[test]
    fn selection_needs_namespace_cluster_and_selector() {
        let m = machine(LABELS(), json!([]));
        let sel = json!({"matchLabels": {"pool": "a"}});
        assert!(selects(&mhc("x", "ns", "c1", sel.clone(), false), &m));
        assert!(!selects(&mhc("x", "other", "c1", sel.clone(), false), &m));
        assert!(!selects(&mhc("x", "ns", "c2", sel.clone(), false), &m));
        assert!(!selects(
            &mhc(
                "x",
                "ns",
                "c1",
                json!({"matchLabels": {"pool": "b"}}),
                false
            ),
            &m
        ));
        let mut skipped = m.clone();
        skipped
            .annotations_mut()
            .insert(SKIP_REMEDIATION.into(), "".into());
        assert!(!selects(&mhc("x", "ns", "c1", sel, false), &skipped));
    }

    #[test]
    fn the_first_by_name_owns_it() {
        let m = machine(LABELS(), json!([]));
        let all = json!({});
        let checks = [
            mhc("b", "ns", "c1", all.clone(), false),
            mhc("a", "ns", "c1", all, false),
        ];
        let got = remediated_elsewhere(&m, &checks).expect("selected");
        assert_eq!(got.by, "MachineHealthCheck ns/a");
        assert_eq!(got.replace, None, "healthy: nothing asked");
        assert_eq!(remediated_elsewhere(&m, &[]), None, "no MHC: our repair");
    }

    #[test]
    fn the_owner_is_asked_only_when_both_conditions_are_false() {
        let unhealthy = machine(
            LABELS(),
            json!([
                cond("HealthCheckSucceeded", "False", "UnhealthyNode"),
                cond("OwnerRemediated", "False", "WaitingForRemediation")
            ]),
        );
        let checks = [mhc("a", "ns", "c1", json!({}), false)];
        let got = remediated_elsewhere(&unhealthy, &checks).expect("selected");
        let replace = got.replace.expect("asked to replace");
        assert_eq!(replace.condition, "HealthCheckSucceeded");
        assert!(
            replace.detail.contains("UnhealthyNode"),
            "{}",
            replace.detail
        );
        // An external remediator acts by itself.
        let external = [mhc("a", "ns", "c1", json!({}), true)];
        assert_eq!(
            remediated_elsewhere(&unhealthy, &external).and_then(|r| r.replace),
            None
        );
        // Marked unhealthy but recovered (the owner condition left behind): nothing asked.
        let recovered = machine(
            LABELS(),
            json!([
                cond("HealthCheckSucceeded", "True", "HealthCheckSucceeded"),
                cond("OwnerRemediated", "False", "WaitingForRemediation")
            ]),
        );
        assert_eq!(
            remediated_elsewhere(&recovered, &checks).and_then(|r| r.replace),
            None
        );
    }
}
