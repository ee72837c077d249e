//! Executing decisions: the loop that, every [`TICK`] (by default), moves the surge-first commands in
//! flight on ([`Orchestrator::progress`]), runs a pass on the shared caches, and carries out
//! its decisions: a surge-first one becomes a command ([`Orchestrator::start`]), any other
//! deletes its NodeClaim at once (an event first, the delete preconditioned on the uid).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::karpenter::DisruptionReason;
use cloudprovider::InstanceTypes;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};

use super::orchestrate::{Command, Orchestrator, delete_disrupted, reason_label};
use super::simulate::Simulator;
use super::{Decision, Note, Outcome, Timers, View, pass, status};
use crate::events::Recorder;
use crate::metrics::Metrics;
use crate::nodeclaim::context::publish;
use crate::state::{Cluster, ClusterState};
use cloudprovider::CloudProvider;

/// How often candidates are evaluated by default (Karpenter: 10 s).
pub const TICK: Duration = Duration::from_secs(5);

/// What the loop reads and writes.
#[derive(Clone)]
pub struct Disruption {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    /// What a pass decides on.
    pub state: ClusterState,
    /// The stores surge-first commands follow their NodeClaims and Nodes in.
    pub nodeclaims: Store<api::NodeClaim>,
    pub nodes: Store<Node>,
    /// The provider's instance types, with each offering's availability and count:
    /// replacements are planned as the provisioner would plan them.
    pub provider: Arc<dyn CloudProvider>,
    /// How long a surge-first command may wait for its replacements to initialize.
    pub command_timeout: Duration,
    /// How long a move is validated before it is taken (Karpenter's [`super::VALIDATION`]).
    pub validation: Duration,
    /// How often a pass runs and commands in flight move on ([`TICK`]; tests shorten it).
    pub tick: Duration,
    /// How often a `Consolidatable` message alone may be rewritten
    /// ([`status::MESSAGE_REFRESH`]; tests shorten it).
    pub message_refresh: Duration,
    /// No pass while the workload cluster does not answer (see `health`).
    pub connection: crate::health::Connection,
    /// The NodeClaim status writes this pass shares with the pod-event loop: one at a time
    /// per claim, and a claim either wrote after the pass's copy gets no `Consolidatable`
    /// write from this pass (the next pass decides on the written version).
    pub claim_writes: Arc<super::claim_writes::ClaimWrites>,
}

impl Disruption {
    /// Whether a pass may run now: the workload cluster answers (else the caches are stale:
    /// disrupt nothing, counted as skipped), its pods are listed (a lazy watch just started:
    /// every node would look empty), and our last writes are cached.
    fn may_pass(&self, orchestrator: &Orchestrator) -> bool {
        if !self.connection.connected() {
            self.metrics
                .disruption_skipped
                .get_or_create(&crate::metrics::NoLabels {})
                .inc();
            return false;
        }
        !self.state.pending() && !orchestrator.caches_lag()
    }

    /// One pass over `cluster` (the cluster state as it is now).
    pub fn pass(&self, cluster: &Cluster, timers: &mut Timers) -> Outcome {
        // One answer per NodeClass for the whole pass: its simulations plan on the same
        // offerings (replacements count against templates' counts as launches do).
        let answers: Mutex<HashMap<String, Option<Arc<InstanceTypes>>>> = Mutex::default();
        let catalog = |nodeclass: &str| {
            let mut answers = answers.lock().unwrap_or_else(|p| p.into_inner());
            answers
                .entry(nodeclass.to_string())
                .or_insert_with(|| self.provider.instance_types(nodeclass))
                .clone()
        };
        let manual_drift = |nodeclass: &str| self.provider.manual_drift(nodeclass);
        let view = View {
            cluster,
            catalog: &catalog,
            manual_drift: &manual_drift,
        };
        let simulator = Simulator {
            catalog: &catalog,
            available: crate::model::convert::Availability::Offered,
        };
        pass(&view, timers, &simulator, Timestamp::now(), Instant::now())
    }

    /// An Event on a NodePool.
    async fn note(&self, cluster: &Cluster, note: &Note) {
        let Some(pool) = cluster
            .nodepools
            .iter()
            .find(|p| crate::objects::name(p.as_ref()) == note.nodepool)
        else {
            return;
        };
        let event = crate::events::Event {
            type_: if note.warning {
                kube::runtime::events::EventType::Warning
            } else {
                kube::runtime::events::EventType::Normal
            },
            reason: note.reason.into(),
            note: Some(note.message.clone()),
            action: "Consolidate".into(),
            secondary: None,
        };
        use kube::Resource;
        if let Err(e) = self.recorder.publish(&event, &pool.object_ref(&())).await {
            tracing::debug!(error = %e, "publishing event failed");
        }
    }

    async fn blocked(&self, claim: &str, message: &str) {
        let Some(obj) = self.nodeclaims.get(&ObjectRef::new(claim)) else {
            return;
        };
        tracing::info!(nodeclaim = claim, message, "disruption blocked");
        publish(
            &self.recorder,
            obj.object_ref(&()),
            EventType::Normal,
            api::consts::events::DISRUPTION_BLOCKED,
            message.to_string(),
        )
        .await;
    }

    async fn act(&self, orchestrator: &Orchestrator, d: &Decision) {
        let reason = match (d.expired, d.reason) {
            (true, _) => "expired",
            (false, r) => reason_label(r),
        };
        if let Some(surge) = &d.surge {
            let mut candidates = vec![d.nodeclaim.clone()];
            candidates.extend(surge.with.iter().cloned());
            let command = Command {
                reason: d.reason,
                nodepool: d.nodepool.clone(),
                candidates,
                replacements: surge.replacements.clone(),
                message: d.message.clone(),
                consolidation_type: surge.consolidation_type.clone(),
            };
            if let Err(e) = orchestrator.start(&command).await {
                tracing::warn!(nodeclaim = %d.nodeclaim, error = %e, "starting disruption failed; the next pass cleans up");
            }
            return;
        }
        let Some(claim) = self.nodeclaims.get(&ObjectRef::new(&d.nodeclaim)) else {
            return;
        };
        if !d.expired {
            let consolidation_type = match d.reason {
                DisruptionReason::Empty => "empty",
                DisruptionReason::Underutilized => "single",
                DisruptionReason::Drifted | DisruptionReason::Unhealthy => "",
            };
            let decision = if d.terminate_first.is_some() {
                "terminate-first"
            } else {
                "delete"
            };
            super::tally::record_decision(
                &self.metrics,
                &d.nodepool,
                decision,
                reason,
                consolidation_type,
            );
            if let Some(why) = d.terminate_first {
                super::tally::record_terminate_first(&self.metrics, &d.nodepool, reason, why);
            }
        }
        if let Err(e) =
            delete_disrupted(orchestrator, &claim, reason, &d.nodepool, &d.message).await
        {
            tracing::warn!(nodeclaim = %d.nodeclaim, error = %e, "deleting NodeClaim failed");
        }
    }
}

/// Runs until `shutdown`.
pub async fn run(d: Disruption, shutdown: impl std::future::Future<Output = ()> + Send) {
    tokio::pin!(shutdown);
    let mut orchestrator = Orchestrator::new(
        d.client.clone(),
        d.recorder.clone(),
        d.metrics.clone(),
        d.nodeclaims.clone(),
        d.nodes.clone(),
        d.command_timeout,
        d.state.clone(),
    );
    orchestrator.claim_writes = d.claim_writes.clone();
    let mut timers = Timers::with_validation(d.validation);
    // The last DisruptionBlocked message per NodeClaim: an event only when it changes.
    let mut blocked: HashMap<String, String> = HashMap::new();
    let mut written = status::Written::with_refresh(d.message_refresh);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(d.tick) => {}
        }
        if !d.may_pass(&orchestrator) {
            continue;
        }
        orchestrator.progress().await;
        // The pass (a snapshot and possibly a scheduling simulation) is CPU work: off the
        // async workers.
        let this = d.clone();
        let cluster = d.state.current();
        let read = Arc::clone(&cluster);
        let controller = crate::metrics::controller::current();
        let pass = tokio::task::spawn_blocking(move || {
            crate::metrics::controller::blocking_as(controller, || {
                let outcome = this.pass(&read, &mut timers);
                (outcome, timers)
            })
        })
        .await;
        let outcome = match pass {
            Ok((outcome, kept)) => {
                timers = kept;
                outcome
            }
            Err(e) => {
                tracing::error!(error = %e, "disruption pass failed; timers restart");
                timers = Timers::with_validation(d.validation);
                continue;
            }
        };
        status::record(&d.metrics, &outcome);
        for note in &outcome.notes {
            d.note(&cluster, note).await;
        }
        // A NodeClaim this pass deletes at once gets no condition write: it would be stale
        // a moment later (the deletion is what the user sees).
        let deleted_now: HashSet<&str> = outcome
            .decisions
            .iter()
            .filter(|d| d.surge.is_none())
            .map(|d| d.nodeclaim.as_str())
            .collect();
        // The NodeClaims the verdicts were computed from.
        let claims: Vec<_> = cluster
            .nodeclaims
            .iter()
            .filter(|c| !deleted_now.contains(kube::ResourceExt::name_any(c.as_ref()).as_str()))
            .cloned()
            .collect();
        status::write_conditions(
            &orchestrator.claims(),
            &claims,
            &outcome.verdicts,
            (&mut written, &d.claim_writes),
            |c| {
                orchestrator
                    .nodeclaims
                    .get(&kube::runtime::reflector::ObjectRef::from_obj(c))
            },
        )
        .await;
        let now_blocked: HashMap<String, String> = timers
            .blocked()
            .into_iter()
            .map(|b| (b.nodeclaim, b.message))
            .collect();
        for (claim, message) in &now_blocked {
            if blocked.get(claim) != Some(message) {
                d.blocked(claim, message).await;
            }
        }
        blocked = now_blocked;
        for decision in &outcome.decisions {
            d.act(&orchestrator, decision).await;
        }
    }
}
