//! Drift: a NodeClaim with `Drifted=True` (see [`crate::nodeclaim::drift`]) is replaced
//! surge-first within the pool's `Drifted` budget: the oldest first, empty ones before
//! those with pods, one command per pool and pass. Its replacements are what the
//! provisioner's simulation of its pods asks for (none when they fit elsewhere; see
//! [`simulate::without`](super::simulate::without) for the pods it places with them); a pod
//! that fits nowhere, or only on a node that has not initialized, a
//! `karpenter.sh/do-not-disrupt` pod or a PDB that allows no eviction blocks it (unless the
//! NodeClaim has a `terminationGracePeriod`, as in Karpenter), as
//! does the NodeClass's drift policy `Manual`, and a command of it rolled back less than
//! [`COOLDOWN`](super::orchestrate::COOLDOWN) ago. Each block is reported once
//! ([`Timers::blocked`](super::Timers::blocked)) and is the candidate's verdict
//! (`drifted (NodeClassDrifted); blocked: pod default/db-0 has do-not-disrupt`) unless a later
//! method takes it ([`Pass::held`](super::Pass::held)).
//!
//! Terminate-first (Karpenter v1.15's `TerminateFirstDrift`, on here): when the pods fit
//! nowhere before the candidate goes, but would once the unit of its counted offering it
//! holds is free again (a bare-metal host, a `max-machines` slot: finite hardware, where a
//! surge can never launch), it is deleted first within the same budget and the provisioner
//! launches its replacement once its pods are pending and the unit is back.

use api::consts::conditions as types;
use api::karpenter::DisruptionReason;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::budgets::PoolBudget;
use super::candidates::{Candidate, Pool};
use super::verdict::Verdict;
use super::{Clock, Decision, Method, Pass, Surge, View};
use crate::blockers::{self, Blocker};

/// `terminate_first_reason` of a drifted NodeClaim deleted before its replacement: no
/// compatible offering has a unit left until it frees its own (Karpenter's
/// `no-reserved-capacity`, for counted offerings).
pub(crate) const NO_AVAILABLE_CAPACITY: &str = "no-available-capacity";

/// A candidate that may not be disrupted now, and why (a `DisruptionBlocked` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub nodeclaim: String,
    pub message: String,
}

/// What a drifted candidate's event and verdict say when `why` keeps it: `drifted
/// (<Drifted reason>); blocked: <why>`.
pub(crate) fn blocked_message(reason: &str, why: &str) -> String {
    format!("drifted ({reason}); blocked: {why}")
}

/// What the last passes found blocked (drained by the loop).
#[derive(Debug, Default)]
pub(crate) struct Drift {
    pub(super) blocked: Vec<Blocked>,
}

/// The `Drifted` condition of a candidate: (reason, message).
pub(super) fn condition<'a>(c: &'a Candidate) -> Option<(&'a str, &'a str)> {
    let s = c.claim.status.as_ref()?;
    let d = api::conditions::get(&s.conditions, types::DRIFTED)?;
    (d.status == api::conditions::TRUE).then_some((d.reason.as_str(), d.message.as_str()))
}

/// Whether the candidate's NodeClass leaves drift to the user (policy `Manual`).
pub(super) fn manual(view: &View, c: &Candidate) -> bool {
    (view.manual_drift)(&c.claim.spec.node_class_ref.name)
}

/// What keeps `c` from a graceful disruption: a do-not-disrupt pod or a PDB allowing no
/// eviction (a pod no controller owns does not block drift, an eventual method).
pub(crate) fn pod_blocker(
    view: &View,
    c: &Candidate,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<String> {
    let pdbs: Vec<&PodDisruptionBudget> = view.pdbs.iter().map(|p| p.as_ref()).collect();
    match blockers::pod_blocker(&c.bound, &pdbs, now)? {
        Blocker::NotControllerOwned { .. } => None,
        b => Some(b.to_string()),
    }
}

impl Method for Drift {
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        if pool.replicas.is_some() {
            return Vec::new(); // static drift's
        }
        let mut drifted: Vec<&Candidate> = pool
            .candidates
            .iter()
            .filter(|c| c.disruptable() && condition(c).is_some())
            .collect();
        drifted.sort_by_key(|c| {
            (
                !c.pods.is_empty(),
                c.claim.metadata.creation_timestamp.clone(),
                c.name,
            )
        });
        let mut block = |pass: &mut Pass, c: &Candidate, why: String| {
            let message = blocked_message(condition(c).unwrap_or_default().0, &why);
            pass.held
                .insert(c.name.to_string(), Verdict::blocked(&message));
            self.blocked.push(Blocked {
                nodeclaim: c.name.to_string(),
                message,
            })
        };
        let view = pass.view;
        for c in drifted {
            if manual(view, c) {
                block(
                    pass,
                    c,
                    "its NodeClass's drift policy is Manual: delete the NodeClaim to replace it"
                        .into(),
                );
                continue;
            }
            if let Some(until) = super::orchestrate::retry_after(c.claim, clock.now) {
                block(
                    pass,
                    c,
                    format!("a replacement failed, next try after {until}"),
                );
                continue;
            }
            if budget.remaining(DisruptionReason::Drifted) == 0 {
                block(pass, c, "budget Drifted: 0 allowed".into());
                continue;
            }
            if c.claim.spec.termination_grace_period.is_none()
                && let Some(why) = pod_blocker(view, c, clock.now)
            {
                block(pass, c, why);
                continue;
            }
            // Surge-first; where no replacement can launch first but one could once the
            // candidate frees what it holds (finite hardware), terminate-first.
            let (surge, terminate_first) = match pass.simulate.replacements(view, &[c]) {
                Ok(replacements) => (
                    Some(Surge {
                        replacements,
                        ..Surge::default()
                    }),
                    None,
                ),
                Err(why) => match pass.simulate.terminate_first(view, c) {
                    Ok(_) => (None, Some(why)),
                    Err(_) => {
                        block(pass, c, format!("its pods cannot be placed: {why}"));
                        continue;
                    }
                },
            };
            let (reason, message) = condition(c).unwrap_or_default();
            let mut message = format!("drifted ({reason}): {message}");
            if let Some(why) = &terminate_first {
                message.push_str(&format!(
                    "; terminate-first: no replacement can launch before it goes ({why})"
                ));
            }
            budget.take(1);
            return vec![Decision {
                command: None,
                surge,
                nodeclaim: c.name.to_string(),
                nodepool: pool.name.to_string(),
                reason: DisruptionReason::Drifted,
                expired: false,
                terminate_first: terminate_first.map(|_| NO_AVAILABLE_CAPACITY),
                message,
            }];
        }
        Vec::new()
    }
}
