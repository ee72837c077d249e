//! Surge-first execution of a disruption [`Command`], shared by every method that replaces
//! nodes (drift, replace and multi-node consolidation):
//!
//! 1. [`Orchestrator::start`] records the command on each candidate NodeClaim (annotation
//!    [`COMMAND`], a JSON [`Record`]) and sets its `DisruptionReason` condition, taints the
//!    candidates' Nodes `karpenter.sh/disrupted:NoSchedule`, then creates the replacement
//!    NodeClaims, labelled [`COMMAND`] = the command id.
//! 2. Every pass, [`Orchestrator::progress`] finds the commands on the cached objects and
//!    takes one [`Step`] for each: wait while replacements initialize; once all are
//!    `Initialized`, delete the candidates (termination drains them); when a replacement is
//!    gone or the timeout passed, roll back: delete the replacements that never initialized,
//!    untaint, clear the condition, and remove the record last (a crash mid-rollback rolls
//!    back again), noting the failure ([`FAILED`]) so the candidate waits [`COOLDOWN`]
//!    before it is tried again ([`retry_after`]).
//!
//! All state is on the objects, so a restarted process resumes or rolls back what it finds.
//! Like Karpenter, each pass also strips `disrupted` taints and `DisruptionReason`
//! conditions that no command (and no deletion) accounts for.

use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::consts::{annotations, conditions as types, events, labels, taints};
use api::karpenter::DisruptionReason;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;

pub use super::command::*;
pub use super::steps::{Step, steps, tainted};
use crate::events::Recorder;
use crate::metrics::{CreatedLabels, DecisionLabels, Metrics};
use crate::nodeclaim::context::publish;
use crate::objects::{annotation, claim_node_name, deleting};
use crate::state::ClusterState;
use crate::write::{Created, Expectations, Outcome, Refused, Writer, manager};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("NodeClaim {0} is gone or already being deleted")]
    Gone(String),
    #[error(transparent)]
    Write(#[from] Refused),
    #[error("replacement NodeClaim {0} exists already")]
    Exists(String),
}

/// Whether an error may pass by itself: a conflict, a claim gone, an overloaded or failing
/// API server, or no answer from it.
fn transient(e: &Error) -> bool {
    match e {
        Error::Write(_) | Error::Gone(_) => true,
        Error::Kube(k) if crate::write::is_conflict(k) => true,
        Error::Kube(kube::Error::Api(s)) => s.code == 429 || s.code >= 500,
        Error::Kube(_) => true,
        Error::Exists(_) => false,
    }
}

/// Runs commands: starts them and moves them on (see the module documentation).
pub struct Orchestrator {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub nodeclaims: Store<NodeClaim>,
    pub nodes: Store<Node>,
    pub timeout: Duration,
    /// What the disruption counts read (pods on a disrupted NodeClaim's Node).
    pub state: ClusterState,
    /// Every write of the disruption loop, until the caches show it.
    pub expectations: Arc<Expectations>,
    /// The NodeClaim writes shared with the pod-event loop: its claim writes are recorded
    /// there, and a claim is deleted in its turn.
    pub(crate) claim_writes: Arc<super::claim_writes::ClaimWrites>,
}

impl Orchestrator {
    pub fn new(
        client: kube::Client,
        recorder: Recorder,
        metrics: Metrics,
        nodeclaims: Store<NodeClaim>,
        nodes: Store<Node>,
        timeout: Duration,
        state: ClusterState,
    ) -> Self {
        Orchestrator {
            client,
            recorder,
            metrics,
            nodeclaims,
            nodes,
            timeout,
            state,
            expectations: Arc::default(),
            claim_writes: Arc::default(),
        }
    }

    /// The disruption loop's NodeClaim writer.
    pub fn claims(&self) -> Writer<NodeClaim> {
        Writer::new(Api::all(self.client.clone()), manager::DISRUPTION)
            .expecting(self.expectations.clone())
            .sharing(self.claim_writes.own())
    }

    /// Whether the caches have not shown one of our writes yet (a patch, a delete, a
    /// replacement created): no decision on them then. A command this process started is
    /// judged (rolled back, cleaned up) only on caches that show all of what it wrote.
    pub(crate) fn caches_lag(&self) -> bool {
        let claims = self.nodeclaims.state();
        let nodes = self.nodes.state();
        let live: std::collections::HashSet<&str> = claims
            .iter()
            .filter_map(|c| c.metadata.uid.as_deref())
            .chain(nodes.iter().filter_map(|n| n.metadata.uid.as_deref()))
            .collect();
        if self.expectations.unseen_creates(|uid| live.contains(uid)) {
            return true;
        }
        self.expectations.retain(|uid| live.contains(uid));
        claims
            .iter()
            .any(|c| self.expectations.stale_object(c.as_ref()))
            || nodes
                .iter()
                .any(|n| self.expectations.stale_object(n.as_ref()))
    }

    /// Starts `cmd`; returns its id. On an error part of it may be written. When no
    /// replacement was asked for yet, the record is taken off the candidates here (with the
    /// failure mark only when the error is not transient), and the next [`Self::progress`]
    /// strips the taints and reasons no command accounts for; once replacements are being
    /// created, the next [`Self::progress`] rolls back (replacements missing) or cleans up.
    pub async fn start(&self, cmd: &Command) -> Result<String, Error> {
        let now = Timestamp::now();
        let id = command_id(&cmd.candidates, now);
        let mut written = Vec::new();
        if let Err(e) = self.prepare(cmd, &id, now, &mut written).await {
            self.abandon(&written, &cmd.message, &e).await;
            return Err(e);
        }
        self.create_replacements(cmd, id).await
    }

    /// Records the command on the candidates (`written`: each as last written), sets their
    /// reason and taints their Nodes.
    async fn prepare(
        &self,
        cmd: &Command,
        id: &str,
        now: Timestamp,
        written: &mut Vec<NodeClaim>,
    ) -> Result<(), Error> {
        let record = Record {
            id: id.to_string(),
            reason: cmd.reason,
            started: now.to_string(),
            replacements: cmd.replacements.len(),
            candidates: cmd.candidates.clone(),
            message: cmd.message.clone(),
            consolidation_type: cmd.consolidation_type.clone(),
        };
        let text = serde_json::to_string(&record).unwrap_or_default();
        let mut nodes = Vec::new();
        for c in &cmd.candidates {
            let cached = self
                .nodeclaims
                .get(&ObjectRef::new(c))
                .filter(|c| !deleting(c.as_ref()))
                .ok_or_else(|| Error::Gone(c.clone()))?;
            nodes.extend(claim_node_name(&cached).map(str::to_string));
            written.push(self.annotate(&cached, Some(&text)).await?);
            let last = written.len() - 1;
            written[last] = self
                .set_reason(&written[last], Some(cmd.reason), &cmd.message)
                .await?;
            self.event(
                &written[last],
                EventType::Normal,
                events::DISRUPTION_LAUNCHING,
                format!(
                    "Launching {} replacement(s) ({}): {}",
                    cmd.replacements.len(),
                    reason_label(cmd.reason),
                    cmd.message
                ),
            )
            .await;
        }
        for n in &nodes {
            self.taint(n, true).await?;
        }
        Ok(())
    }

    /// Takes the record of a command whose start failed before any replacement was asked for
    /// off the candidates it reached. A transient error (a conflict, an overloaded or
    /// unreachable API server) leaves no failure mark: nothing was tried, so the candidate
    /// may be tried again next pass; any other error marks it, so it cools down. Errors here
    /// are logged: the record left behind is rolled back by [`Self::progress`] as before.
    async fn abandon(&self, written: &[NodeClaim], message: &str, error: &Error) {
        let failed = (!transient(error)).then(|| Timestamp::now().to_string());
        for c in written {
            let cleared = self
                .update(c, false, |c| {
                    annotation(c, COMMAND)
                        .is_some()
                        .then(|| json!({"annotations": {COMMAND: null, FAILED: failed}}))
                })
                .await;
            match cleared {
                Ok(c) => {
                    self.event(
                        &c,
                        EventType::Warning,
                        events::DISRUPTION_ROLLED_BACK,
                        format!("Disruption ({message}) rolled back: starting it failed: {error}"),
                    )
                    .await;
                }
                Err(e) => {
                    tracing::warn!(nodeclaim = %c.name_any(), error = %e, "taking back a disruption that failed to start failed; the next pass rolls it back");
                }
            }
        }
    }

    /// Creates the replacements of a command recorded on its candidates.
    async fn create_replacements(&self, cmd: &Command, id: String) -> Result<String, Error> {
        let mut created = Vec::new();
        for r in &cmd.replacements {
            let mut r = r.clone();
            r.labels_mut()
                .insert(labels::DISRUPTION_COMMAND.into(), id.clone());
            r.annotations_mut()
                .insert(annotations::REPLACES.into(), cmd.candidates.join(","));
            let nc = match self.claims().create(&r).await? {
                Created::Created(nc) => nc,
                Created::Exists => return Err(Error::Exists(r.name_any())),
            };
            self.metrics
                .nodeclaims_created
                .get_or_create(&CreatedLabels {
                    reason: reason_label(cmd.reason).into(),
                    nodepool: cmd.nodepool.clone(),
                })
                .inc();
            created.push(nc.name_any());
        }
        let decision = if cmd.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        };
        super::tally::record_decision(
            &self.metrics,
            &cmd.nodepool,
            decision,
            reason_label(cmd.reason),
            &cmd.consolidation_type,
        );
        tracing::info!(command = %id, candidates = %cmd.candidates.join(","), replacements = %created.join(","),
            reason = reason_label(cmd.reason), message = %cmd.message, "disruption command started");
        if !created.is_empty() {
            for c in &cmd.candidates {
                if let Some(claim) = self.nodeclaims.get(&ObjectRef::new(c)) {
                    self.event(
                        &claim,
                        EventType::Normal,
                        events::DISRUPTION_WAITING_READINESS,
                        format!(
                            "Waiting on readiness to continue disruption: {}",
                            created.join(", ")
                        ),
                    )
                    .await;
                }
            }
        }
        Ok(id)
    }

    /// One step of every command found on the cached objects, plus leftover cleanup.
    /// Failures are logged and retried on the next call.
    pub async fn progress(&self) {
        let (claims, nodes) = (self.nodeclaims.state(), self.nodes.state());
        let steps = steps(&claims, &nodes, Timestamp::now(), self.timeout);
        for step in steps {
            if let Err(e) = self.take(step).await {
                tracing::warn!(error = %e, "disruption command step failed; retrying next pass");
            }
        }
    }

    async fn take(&self, step: Step) -> Result<(), Error> {
        match step {
            Step::Wait { .. } => Ok(()),
            Step::Untaint(node) => self.taint(&node, false).await,
            Step::ClearReason(claim) => self.set_reason(&claim, None, "").await.map(|_| ()),
            Step::Finish { record, candidates } => {
                for c in &candidates {
                    let nodepool = crate::objects::nodepool_of(c).unwrap_or_default();
                    delete_disrupted(
                        self,
                        c,
                        reason_label(record.reason),
                        nodepool,
                        &record.message,
                    )
                    .await?;
                }
                Ok(())
            }
            Step::Rollback {
                record,
                candidates,
                delete,
                why,
            } => {
                tracing::warn!(command = %record.id, %why, "disruption command failed; rolling back");
                for r in &delete {
                    let _turn = self.claim_writes.turn(r).await;
                    delete_claim(&self.claims(), r).await?;
                }
                for c in &candidates {
                    if let Some(n) = claim_node_name(c) {
                        self.taint(n, false).await?;
                    }
                    let c = self.set_reason(c, None, "").await?;
                    let failed = Timestamp::now().to_string();
                    let c = self
                        .update(&c, false, |c| {
                            annotation(c, COMMAND)
                                .is_some()
                                .then(|| json!({"annotations": {COMMAND: null, FAILED: failed}}))
                        })
                        .await?;
                    self.event(
                        &c,
                        EventType::Warning,
                        events::DISRUPTION_ROLLED_BACK,
                        format!("Disruption ({}) rolled back: {why}", record.message),
                    )
                    .await;
                }
                self.metrics
                    .disruption_queue_failures
                    .get_or_create(&DecisionLabels {
                        decision: if record.replacements == 0 {
                            "delete".into()
                        } else {
                            "replace".into()
                        },
                        reason: reason_label(record.reason).into(),
                        consolidation_type: record.consolidation_type.clone(),
                    })
                    .inc();
                Ok(())
            }
        }
    }

    /// Sets (or removes) the command annotation.
    async fn annotate(&self, claim: &NodeClaim, value: Option<&str>) -> Result<NodeClaim, Error> {
        self.update(claim, false, |c| {
            (annotation(c, COMMAND) != value).then(|| json!({"annotations": {COMMAND: value}}))
        })
        .await
    }

    /// Sets `DisruptionReason=True` with `reason` (or removes the condition).
    async fn set_reason(
        &self,
        claim: &NodeClaim,
        reason: Option<DisruptionReason>,
        message: &str,
    ) -> Result<NodeClaim, Error> {
        self.update(claim, true, |c| {
            let mut status = c.status.clone().unwrap_or_default();
            let changed = match reason {
                Some(r) => api::conditions::set(
                    &mut status.conditions,
                    types::DISRUPTION_REASON,
                    api::conditions::TRUE,
                    reason_name(r),
                    message,
                    None,
                    Timestamp::now(),
                ),
                None => api::conditions::remove(&mut status.conditions, types::DISRUPTION_REASON),
            };
            changed.then(|| json!({"conditions": status.conditions}))
        })
        .await
    }

    /// Merge-patches the claim's metadata (or status) with what `change` computes from it,
    /// conditional on the resourceVersion it was computed from; on a conflict once more
    /// from a fresh read. Nothing to change, or the claim gone: no write.
    async fn update(
        &self,
        claim: &NodeClaim,
        status: bool,
        change: impl Fn(&NodeClaim) -> Option<serde_json::Value>,
    ) -> Result<NodeClaim, Error> {
        let mut claim = claim.clone();
        let writer = self.claims();
        for attempt in 0..2 {
            let Some(body) = change(&claim) else {
                return Ok(claim);
            };
            let written = if status {
                writer.patch_status(&claim, body).await?
            } else {
                writer.patch(&claim, json!({ "metadata": body })).await?
            };
            match written {
                Outcome::Written(written) => return Ok(written),
                Outcome::Conflict if attempt == 0 => {
                    claim = Api::<NodeClaim>::all(self.client.clone())
                        .get(&claim.name_any())
                        .await?;
                }
                Outcome::Conflict => return Err(Refused::Conflict(claim.name_any()).into()),
                Outcome::Gone => return Ok(claim),
            }
        }
        Ok(claim)
    }

    /// Adds (or removes) the `disrupted:NoSchedule` taint of Node `name`, conditional on
    /// the resourceVersion read; a Node that is gone needs nothing.
    async fn taint(&self, node: &str, on: bool) -> Result<(), Error> {
        let api: Api<Node> = Api::all(self.client.clone());
        let writer =
            Writer::new(api.clone(), manager::DISRUPTION).expecting(self.expectations.clone());
        let mut current = self.nodes.get(&ObjectRef::new(node));
        for attempt in 0..2 {
            let n = match current.take() {
                Some(n) => n,
                None => match api.get_opt(node).await? {
                    Some(n) => Arc::new(n),
                    None => return Ok(()),
                },
            };
            if tainted(&n) == on {
                return Ok(());
            }
            let mut list: Vec<Taint> = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            if on {
                list.push(Taint {
                    key: taints::DISRUPTED.into(),
                    effect: "NoSchedule".into(),
                    value: None,
                    time_added: Some(Time(Timestamp::now())),
                });
            } else {
                list.retain(|t| t.key != taints::DISRUPTED);
            }
            match writer
                .patch(n.as_ref(), json!({"spec": {"taints": list}}))
                .await?
            {
                Outcome::Written(_) | Outcome::Gone => return Ok(()),
                Outcome::Conflict if attempt == 0 => {}
                Outcome::Conflict => return Err(Refused::Conflict(format!("Node {node}")).into()),
            }
        }
        Ok(())
    }

    async fn event(&self, claim: &NodeClaim, type_: EventType, reason: &str, note: String) {
        publish(&self.recorder, claim.object_ref(&()), type_, reason, note).await;
    }
}

/// Deletes a NodeClaim (only the object decided on: same uid); gone already is fine.
pub(crate) async fn delete_claim(
    claims: &Writer<NodeClaim>,
    claim: &NodeClaim,
) -> Result<bool, Error> {
    Ok(claims.delete(claim).await?.written().is_some())
}

/// Deletes a disrupted NodeClaim with the `DisruptionTerminating` event and the
/// disruption counts (`super::tally::record_disrupted`).
pub(crate) async fn delete_disrupted(
    orchestrator: &Orchestrator,
    claim: &NodeClaim,
    reason: &str,
    nodepool: &str,
    message: &str,
) -> Result<(), Error> {
    tracing::info!(nodeclaim = %claim.name_any(), nodepool, reason, message, "disrupting");
    publish(
        &orchestrator.recorder,
        claim.object_ref(&()),
        EventType::Normal,
        events::DISRUPTION_TERMINATING,
        format!("Disrupting NodeClaim: {reason} ({message})"),
    )
    .await;
    let turn = orchestrator.claim_writes.turn(claim).await;
    let deleted = delete_claim(&orchestrator.claims(), claim).await?;
    drop(turn);
    if deleted {
        super::tally::record_disrupted(
            &orchestrator.metrics,
            &orchestrator.state,
            claim,
            reason,
            nodepool,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::name;
    use serde_json::Value;

    #[test]
    fn conflicts_and_an_unavailable_server_are_transient_refusals_are_not() {
        use crate::write::tests::api_error;
        let kube = |code, message| Error::Kube(api_error(code, message));
        for e in [
            kube(409, "the object has been modified"),
            kube(429, "too many requests"),
            kube(500, "etcdserver: request timed out"),
            kube(503, "unavailable"),
            Error::Write(Refused::Conflict("Node n1".into())),
            Error::Gone("c1".into()),
        ] {
            assert!(transient(&e), "{e}");
        }
        for e in [
            kube(403, "forbidden"),
            kube(422, "denied request: no disrupted taint here"),
            kube(400, "bad request"),
            Error::Exists("r1".into()),
        ] {
            assert!(!transient(&e), "{e}");
        }
    }

    fn claim(v: Value) -> Arc<NodeClaim> {
        Arc::new(serde_json::from_value(v).expect("fixture"))
    }

    fn node(name: &str, disrupted: bool) -> Arc<Node> {
        let taints = if disrupted {
            json!([{"key": taints::DISRUPTED, "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}}))
                .expect("node"),
        )
    }

    fn record(replacements: usize, started: &str) -> String {
        serde_json::to_string(&Record {
            id: "d1".into(),
            reason: DisruptionReason::Drifted,
            started: started.into(),
            replacements,
            candidates: vec!["old".into()],
            message: "m".into(),
            consolidation_type: String::new(),
        })
        .expect("json")
    }

    fn candidate(rec: &str) -> Arc<NodeClaim> {
        claim(json!({
            "metadata": {"name": "old", "annotations": {COMMAND: rec}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"nodeName": "n-old", "conditions": [
                {"type": "DisruptionReason", "status": "True", "reason": "Drifted", "message": "",
                 "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
    }

    fn replacement(name: &str, initialized: bool, deleting: bool) -> Arc<NodeClaim> {
        let mut v = json!({
            "metadata": {"name": name, "labels": {labels::DISRUPTION_COMMAND: "d1"}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"conditions": [{"type": "Initialized",
                "status": if initialized { "True" } else { "Unknown" }, "reason": "x", "message": "",
                "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-11-22T10:01:00Z");
        }
        claim(v)
    }

    const START: &str = "2026-11-22T10:00:00Z";

    fn at(s: &str) -> Timestamp {
        s.parse().expect("ts")
    }

    fn run(claims: &[Arc<NodeClaim>], nodes: &[Arc<Node>], now: &str) -> Vec<Step> {
        steps(claims, nodes, at(now), Duration::from_secs(300))
    }

    #[test]
    fn waits_then_finishes_when_every_replacement_initialized() {
        let old = candidate(&record(2, START));
        let nodes = [node("n-old", true)];
        let waiting = run(
            &[
                old.clone(),
                replacement("r1", true, false),
                replacement("r2", false, false),
            ],
            &nodes,
            "2026-11-22T10:01:00Z",
        );
        assert_eq!(
            waiting,
            [Step::Wait {
                id: "d1".into(),
                pending: vec!["r2".into()]
            }]
        );
        let done = run(
            &[
                old.clone(),
                replacement("r1", true, false),
                replacement("r2", true, false),
            ],
            &nodes,
            "2026-11-22T10:01:00Z",
        );
        assert!(
            matches!(&done[..], [Step::Finish { candidates, .. }] if candidates.len() == 1),
            "{done:?}"
        );
    }

    #[test]
    fn a_command_without_replacements_finishes_at_once() {
        let old = candidate(&record(0, START));
        let out = run(&[old], &[node("n-old", true)], START);
        assert!(matches!(&out[..], [Step::Finish { .. }]), "{out:?}");
    }

    #[test]
    fn rolls_back_on_timeout_deleting_only_uninitialized_replacements() {
        let old = candidate(&record(2, START));
        let out = run(
            &[
                old,
                replacement("r1", true, false),
                replacement("r2", false, false),
            ],
            &[node("n-old", true)],
            "2026-11-22T10:05:00Z",
        );
        match &out[..] {
            [Step::Rollback { delete, why, .. }] => {
                assert_eq!(delete.len(), 1);
                assert_eq!(name(delete[0].as_ref()), "r2");
                assert!(why.contains("not initialized within 300s"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rolls_back_when_a_replacement_vanished_unless_its_creation_is_not_cached_yet() {
        let old = candidate(&record(2, START));
        let claims = [
            old,
            replacement("r1", false, false),
            replacement("r2", false, true),
        ];
        let out = run(&claims, &[], "2026-11-22T10:00:10Z");
        assert!(
            matches!(&out[..], [Step::Rollback { why, delete, .. }] if why.contains("1 of 2") && delete.len() == 1),
            "{out:?}"
        );
        // A replacement never seen is waited for (a create whose answer was lost), then
        // judged vanished once the command is older than the create lag.
        let waiting = candidate(&record(1, START));
        let out = run(std::slice::from_ref(&waiting), &[], "2026-11-22T10:00:10Z");
        assert!(matches!(&out[..], [Step::Wait { .. }]), "{out:?}");
        let out = run(&[waiting], &[], "2026-11-22T10:00:31Z");
        assert!(
            matches!(&out[..], [Step::Rollback { why, .. }] if why.contains("1 of 1")),
            "{out:?}"
        );
        // A replacement this process just created and the cache does not show yet holds
        // every step back: the orchestrator's caches lag (`Expectations::unseen_creates`).
        let expectations = crate::write::Expectations::default();
        let mut made = NodeClaim::new("r3", Default::default());
        made.metadata.uid = Some("uid-r3".into());
        expectations.created(&made);
        let cached: Vec<String> = claims
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        assert!(expectations.unseen_creates(|uid| cached.iter().any(|c| c == uid)));
        assert!(
            !expectations.unseen_creates(|uid| uid == "uid-r3"),
            "seen: dropped"
        );
    }

    #[test]
    fn stale_taints_and_reasons_are_cleaned_up_but_not_those_of_commands_or_deletions() {
        let stale = claim(json!({
            "metadata": {"name": "s"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"nodeName": "n-s", "conditions": [
                {"type": "DisruptionReason", "status": "True", "reason": "Drifted", "message": "",
                 "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }));
        let going = claim(json!({
            "metadata": {"name": "g", "deletionTimestamp": START},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"nodeName": "n-g"}
        }));
        let old = candidate(&record(1, START));
        let nodes = [
            node("n-s", true),
            node("n-g", true),
            node("n-old", true),
            node("n-free", false),
        ];
        let out = run(
            &[stale.clone(), going, old, replacement("r1", false, false)],
            &nodes,
            "2026-11-22T10:00:30Z",
        );
        assert!(out.contains(&Step::ClearReason(stale)), "{out:?}");
        assert!(out.contains(&Step::Untaint("n-s".into())), "{out:?}");
        assert_eq!(
            out.len(),
            3,
            "n-g (deleting) and n-old (command) kept: {out:?}"
        );
    }

    #[test]
    fn command_ids_are_label_values() {
        let id = command_id(&["a".into(), "b".into()], at(START));
        assert!(id.len() <= 63 && id.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(id, command_id(&["a".into()], at(START)));
    }
}
