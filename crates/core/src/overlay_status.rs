//! The NodeOverlay status controller (Karpenter's `nodeoverlay.controller`): every overlay's
//! `ValidationSucceeded` (True; False with reason `Conflict` naming the overlay of equal
//! weight recorded first, or `RuntimeValidation`) and `Ready`, the number of offerings it
//! selects in the message, and the gauge `karpenter_capi_nodeoverlay_matched_offerings`.
//! The verdicts are the overlay decorator's evaluation ([`Overlaid::evaluation`]), the same
//! it applies to every provider's instance types. Every overlay is looked at again when any
//! overlay or NodePool changes, and when the evaluation changed because a provider's
//! instance types did (checked every [`EVALUATION_POLL`]). Written only when it changed,
//! conditional on the version it was computed from.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::NodeOverlay;
use api::consts::conditions::{NODEOVERLAY_READY_PARTS, VALIDATION_SUCCEEDED};
use api::consts::reasons;
use cloudprovider::overlay::{Evaluation, Outcome, Overlaid, Verdict};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use serde_json::json;

use crate::cache::Cache;
use crate::metrics::{Metrics, OverlayLabels};
use crate::write::{Expectations, Outcome as Written, Writer, manager};

/// What the loop reads and writes.
#[derive(Clone)]
pub(crate) struct OverlayStatus {
    pub client: kube::Client,
    pub metrics: Metrics,
    /// The provider, decorated: its evaluation is what the status reports.
    pub overlaid: Arc<Overlaid>,
    /// Our writes the cache has not shown yet.
    pub expectations: Arc<Expectations>,
    /// The overlays the gauge has a series for (removed when the overlay is gone).
    pub gauged: Arc<Mutex<BTreeSet<String>>>,
}

/// How soon an overlay whose cached object predates our own write is looked at again.
const STALE_RETRY: Duration = Duration::from_millis(100);

/// How often the evaluation is compared with the last one seen (a provider's instance types
/// may change without any object of the core changing: a template, a catalog file).
pub(crate) const EVALUATION_POLL: Duration = Duration::from_secs(5);

/// The conditions `outcome` gives an overlay whose conditions are `current`.
pub(crate) fn conditions(
    current: &[Condition],
    generation: Option<i64>,
    outcome: &Outcome,
    now: Timestamp,
) -> Vec<Condition> {
    let mut c = current.to_vec();
    let offerings = |n: usize| match n {
        1 => "1 offering".to_string(),
        n => format!("{n} offerings"),
    };
    let (status, reason, message) = match &outcome.verdict {
        Verdict::Applied => (
            api::conditions::TRUE,
            reasons::VALIDATION_SUCCEEDED,
            format!("Applied to {}", offerings(outcome.matched)),
        ),
        Verdict::Conflict { with, what } => (
            api::conditions::FALSE,
            reasons::CONFLICT,
            format!(
                "Conflicts with NodeOverlay {with} (same weight) on the {what}; not applied \
                 (selects {})",
                offerings(outcome.matched)
            ),
        ),
        Verdict::Invalid(why) => (
            api::conditions::FALSE,
            reasons::RUNTIME_VALIDATION,
            format!("{why}; not applied"),
        ),
    };
    api::conditions::set(
        &mut c,
        VALIDATION_SUCCEEDED,
        status,
        reason,
        &message,
        generation,
        now,
    );
    api::conditions::set_ready_from(&mut c, NODEOVERLAY_READY_PARTS, generation, now);
    c
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StatusError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl OverlayStatus {
    fn writer(&self) -> Writer<NodeOverlay> {
        Writer::new(Api::all(self.client.clone()), manager::NODEOVERLAY_STATUS)
            .expecting(self.expectations.clone())
    }

    /// Sets the gauge of every evaluated overlay; drops the series of overlays gone.
    fn gauge(&self, evaluation: &Evaluation) {
        let mut gauged = self.gauged.lock().unwrap_or_else(|e| e.into_inner());
        for gone in gauged
            .iter()
            .filter(|n| !evaluation.outcomes.contains_key(*n))
        {
            self.metrics
                .nodeoverlay_matched_offerings
                .remove(&OverlayLabels {
                    nodeoverlay: gone.clone(),
                });
        }
        gauged.clear();
        for (name, o) in &evaluation.outcomes {
            self.metrics
                .nodeoverlay_matched_offerings
                .get_or_create(&OverlayLabels {
                    nodeoverlay: name.clone(),
                })
                .set(i64::try_from(o.matched).unwrap_or(i64::MAX));
            gauged.insert(name.clone());
        }
    }
}

async fn reconcile(obj: Arc<NodeOverlay>, ctx: Arc<OverlayStatus>) -> Result<Action, StatusError> {
    if ctx.expectations.stale_object(obj.as_ref()) {
        return Ok(Action::requeue(STALE_RETRY));
    }
    let evaluation = ctx.overlaid.evaluation();
    ctx.gauge(&evaluation);
    let Some(outcome) = evaluation.outcomes.get(&obj.name_any()) else {
        // Evaluated from a cache that does not hold it yet (or any more).
        return Ok(Action::requeue(STALE_RETRY));
    };
    let stored = obj
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let next = conditions(&stored, obj.metadata.generation, outcome, Timestamp::now());
    if !api::conditions::same_untimed(&stored, &next)
        && ctx
            .writer()
            .patch_status(&obj, json!({ "conditions": next }))
            .await?
            == Written::Conflict
    {
        return Ok(Action::requeue(Duration::ZERO));
    }
    Ok(Action::await_change())
}

fn error_policy(obj: Arc<NodeOverlay>, error: &StatusError, _ctx: Arc<OverlayStatus>) -> Action {
    tracing::warn!(nodeoverlay = %obj.name_any(), %error, "nodeoverlay status failed");
    Action::requeue(Duration::from_secs(5))
}

/// Runs the NodeOverlay status controller over `overlays` until `shutdown`; every overlay
/// is reconciled again on any change of an overlay or a NodePool, and when the evaluation
/// changed.
pub(crate) async fn run(
    ctx: OverlayStatus,
    overlays: Cache<NodeOverlay>,
    nodepools: Cache<api::NodePool>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let overlaid = ctx.overlaid.clone();
    let evaluations = futures::stream::unfold(overlaid.evaluation(), move |last| {
        let overlaid = overlaid.clone();
        async move {
            loop {
                tokio::time::sleep(EVALUATION_POLL).await;
                let now = overlaid.evaluation();
                if !Arc::ptr_eq(&now, &last) {
                    return Some(((), now));
                }
            }
        }
    });
    let all = futures::stream::select_all([
        overlays.subscribe().map(|_| ()).boxed(),
        nodepools.subscribe().map(|_| ()).boxed(),
        evaluations.boxed(),
    ]);
    // Coalesce bursts: one pass over every overlay per burst.
    let (tx, rx) = futures::channel::mpsc::channel::<()>(1);
    let mut tasks = crate::tasks::Tasks::default();
    tasks.spawn(async move {
        let mut tx = tx;
        futures::pin_mut!(all);
        while all.next().await.is_some() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = tx.try_send(());
        }
    });
    Controller::for_shared_stream(overlays.subscribe(), overlays.store())
        .reconcile_all_on(rx)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|_| futures::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    #[test]
    fn conditions_say_applied_conflict_or_invalid() {
        let t0 = at("2026-11-22T10:00:00Z");
        let applied = Outcome {
            verdict: Verdict::Applied,
            matched: 3,
        };
        let c = conditions(&[], Some(1), &applied, t0);
        let v = api::conditions::get(&c, VALIDATION_SUCCEEDED).expect("condition");
        assert_eq!(
            (v.status.as_str(), v.reason.as_str()),
            ("True", "ValidationSucceeded")
        );
        assert_eq!(v.message, "Applied to 3 offerings");
        assert!(api::conditions::is_true(&c, "Ready"));
        // Unchanged: the same conditions (no write), even later.
        let again = conditions(&c, Some(1), &applied, at("2026-11-22T11:00:00Z"));
        assert!(api::conditions::same_untimed(&c, &again));
        let conflict = Outcome {
            verdict: Verdict::Conflict {
                with: "b".into(),
                what: "price of large".into(),
            },
            matched: 1,
        };
        let c2 = conditions(&c, Some(2), &conflict, t0);
        assert!(!api::conditions::same_untimed(&c, &c2));
        let v = api::conditions::get(&c2, VALIDATION_SUCCEEDED).expect("condition");
        assert_eq!(
            (v.status.as_str(), v.reason.as_str()),
            ("False", "Conflict")
        );
        assert!(v.message.contains("NodeOverlay b") && v.message.contains("1 offering)"));
        assert_eq!(api::conditions::status(&c2, "Ready"), "False");
        let invalid = Outcome {
            verdict: Verdict::Invalid("invalid capacity: cpu".into()),
            matched: 0,
        };
        let c3 = conditions(&[], None, &invalid, t0);
        let v = api::conditions::get(&c3, VALIDATION_SUCCEEDED).expect("condition");
        assert_eq!(v.reason, "RuntimeValidation");
    }
}
