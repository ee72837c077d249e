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

use super::{Decision, Timers, View, decide};
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
}

impl Disruption {
    /// One pass over the caches as they are now (shared objects, no copies).
    pub fn pass(&self, timers: &mut Timers) -> Vec<Decision> {
        let (nodepools, nodeclaims, nodes, pods) = (
            self.nodepools.state(),
            self.nodeclaims.state(),
            self.nodes.state(),
            self.pods.state(),
        );
        let view = View {
            nodepools: &nodepools,
            nodeclaims: &nodeclaims,
            nodes: &nodes,
            pods: &pods,
        };
        decide(&view, timers, Timestamp::now(), Instant::now())
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
            let decisions = this.pass(&mut timers);
            (decisions, timers)
        })
        .await;
        let decisions = match pass {
            Ok((decisions, kept)) => {
                timers = kept;
                decisions
            }
            Err(e) => {
                tracing::error!(error = %e, "disruption pass failed; timers restart");
                timers = Timers::default();
                continue;
            }
        };
        for decision in decisions {
            d.act(&decision).await;
        }
    }
}
