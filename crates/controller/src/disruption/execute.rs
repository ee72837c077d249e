//! Executing decisions: the loop that runs a pass on the shared caches every [`TICK`] and
//! deletes the NodeClaims decided on (an event first, the delete preconditioned on the uid
//! decided about).

use std::time::{Duration, Instant};

use crate::events::{Event, EventType, Recorder};
use api::karpenter::DisruptionReason;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::Store;

use super::{Decision, Note, Outcome, Timers, View, pass, status};
use crate::metrics::{CreatedLabels, Metrics};

/// How often candidates are evaluated (Karpenter: 10 s).
const TICK: Duration = Duration::from_secs(5);

/// What the loop reads and writes.
#[derive(Clone)]
pub struct Disruption {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub nodepools: Store<api::NodePool>,
    pub nodeclaims: Store<api::NodeClaim>,
    pub nodes: Store<k8s_openapi::api::core::v1::Node>,
    pub pods: Store<k8s_openapi::api::core::v1::Pod>,
    pub daemonsets: Store<k8s_openapi::api::apps::v1::DaemonSet>,
    pub pdbs: Store<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    pub catalogs: std::sync::Arc<dyn crate::catalogs::Catalogs>,
}

impl Disruption {
    /// One pass over the caches as they are now (shared objects, no copies).
    pub fn pass(&self, timers: &mut Timers) -> Outcome {
        let (nodepools, nodeclaims, nodes, pods, daemonsets, pdbs) = (
            self.nodepools.state(),
            self.nodeclaims.state(),
            self.nodes.state(),
            self.pods.state(),
            self.daemonsets.state(),
            self.pdbs.state(),
        );
        let catalog = |nodeclass: &str| self.catalogs.catalog(nodeclass);
        let view = View {
            nodepools: &nodepools,
            nodeclaims: &nodeclaims,
            nodes: &nodes,
            pods: &pods,
            daemonsets: &daemonsets,
            pdbs: &pdbs,
            catalog: &catalog,
        };
        pass(&view, timers, Timestamp::now(), Instant::now())
    }

    /// An Event on a NodePool.
    async fn note(&self, note: &Note) {
        let Some(pool) = self
            .nodepools
            .get(&kube::runtime::reflector::ObjectRef::new(&note.nodepool))
        else {
            return;
        };
        let event = Event {
            type_: EventType::Normal,
            reason: note.reason.into(),
            note: Some(note.message.clone()),
            action: "Consolidate".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &pool.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing event failed");
        }
    }

    /// Carries out a pass's decisions: deletes directly; a replace launches its replacement
    /// first (the shared orchestration).
    async fn execute(&self, decisions: &[Decision]) {
        let mut counted = std::collections::HashSet::new();
        for decision in decisions {
            let kind = match &decision.command {
                Some(mv) if mv.candidates.len() > 1 => "multi",
                Some(_) => "single",
                None if decision.reason == DisruptionReason::Empty && !decision.expired => "empty",
                None => "",
            };
            let action = decision.command.as_ref().map_or("delete", |m| m.kind());
            let key = decision
                .command
                .as_ref()
                .map_or(decision.nodeclaim.clone(), |m| m.candidates.join(","));
            if counted.insert(key) {
                status::count_decision(&self.metrics, action, decision.reason, kind);
            }
            if let Some(mv) = &decision.command
                && matches!(mv.action, super::plan::Action::Replace(_))
            {
                tracing::info!(nodeclaim = %decision.nodeclaim, "replace awaits the orchestration");
                continue;
            }
            self.act(decision).await;
        }
    }

    async fn act(&self, d: &Decision) {
        let api: Api<api::NodeClaim> = Api::all(self.client.clone());
        let obj = match api.get_opt(&d.nodeclaim).await {
            Ok(Some(o)) => o,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(nodeclaim = %d.nodeclaim, error = %e, "reading NodeClaim failed");
                return;
            }
        };
        let reason = match (d.expired, d.reason) {
            (true, _) => "expired",
            (false, DisruptionReason::Underutilized) => "underutilized",
            (false, DisruptionReason::Drifted) => "drifted",
            (false, DisruptionReason::Empty) => "empty",
        };
        tracing::info!(nodeclaim = %d.nodeclaim, nodepool = %d.nodepool, reason, message = %d.message, "disrupting");
        let note = format!("Disrupting NodeClaim: {} ({})", reason, d.message);
        let event = Event {
            type_: EventType::Normal,
            reason: "DisruptionTerminating".into(),
            note: Some(note),
            action: "Disrupt".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing event failed");
        }
        // Preconditioned on the uid we decided about: a recreated claim of the same name is
        // not deleted by mistake.
        let params = DeleteParams {
            preconditions: obj
                .metadata
                .uid
                .clone()
                .map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
            ..DeleteParams::default()
        };
        match api.delete(&d.nodeclaim, &params).await {
            Ok(_) => {
                self.metrics
                    .nodeclaims_disrupted
                    .get_or_create(&CreatedLabels {
                        reason: reason.into(),
                        nodepool: d.nodepool.clone(),
                    })
                    .inc();
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(nodeclaim = %d.nodeclaim, error = %e, "deleting NodeClaim failed")
            }
        }
    }
}

/// Runs until `shutdown`.
pub async fn run(d: Disruption, shutdown: impl std::future::Future<Output = ()> + Send) {
    tokio::pin!(shutdown);
    let mut timers = Timers::default();
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(TICK) => {}
        }
        // The pass (a snapshot and possibly a scheduling simulation) is CPU work: off the
        // async workers.
        let this = d.clone();
        let pass = tokio::task::spawn_blocking(move || {
            let outcome = this.pass(&mut timers);
            (outcome, timers)
        })
        .await;
        let outcome = match pass {
            Ok((outcome, kept)) => {
                timers = kept;
                outcome
            }
            Err(e) => {
                tracing::error!(error = %e, "disruption pass failed; timers restart");
                timers = Timers::default();
                continue;
            }
        };
        status::record(&d.metrics, &outcome);
        for note in &outcome.notes {
            d.note(note).await;
        }
        status::write_conditions(&d.client, &d.nodeclaims.state(), &outcome.verdicts).await;
        d.execute(&outcome.decisions).await;
    }
}
