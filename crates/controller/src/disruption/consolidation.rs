//! Consolidation of nodes that still run pods (pools under `WhenEmptyOrUnderutilized` or
//! `Balanced`), as Karpenter does it:
//! - candidates: `Consolidatable` (`consolidateAfter` after their last pod event), no
//!   blocker (see [`super::blockers`]), price known; sorted by price per disruption cost;
//! - multi-node first: the largest prefix (≥ 2, ≤ 100, within the `Underutilized` budget)
//!   whose pods fit elsewhere or on one strictly cheaper new node (binary search); then
//!   single-node: the first candidate that can be deleted or replaced;
//! - `Balanced` pools approve a move only if its score is ≥ 0.5;
//! - a move found is validated [`VALIDATION`] later by the same simulation (candidates
//!   still eligible, the move still possible) before it is decided.
//!
//! One move at a time across all pools (two would plan onto the same free room), none while
//! pods wait for capacity. Every candidate gets a [`Verdict`].

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::consts::conditions as types;
use api::karpenter::{ConsolidationPolicy, DisruptionReason};

use super::blockers::{Blocker, disruption_cost, do_not_disrupt, pod_blocker};
use super::budgets::PoolBudget;
use super::candidates::{Candidate, Pool, consolidatable_at};
use super::plan::{Action, Move, Priced};
use super::search::{Limits, PoolTotals, search, validate};
use super::verdict::Verdict;
use super::{Clock, Decision, Method, Note, Pass, Surge, VALIDATION, View, consolidation_verdict};
use crate::objects::{annotation, claim_condition, name};

/// Without a change in the pool, a search is repeated this often at most.
const RESEARCH: Duration = Duration::from_secs(300);

/// A move found, waiting for its validation.
#[derive(Debug)]
struct Pending {
    pool: String,
    mv: Arc<Move>,
    since: Instant,
}

/// The move under validation, and per pool the last search (state fingerprint, time,
/// verdicts).
#[derive(Debug, Default)]
pub struct Consolidation {
    pending: Option<Pending>,
    searched: HashMap<String, (u64, Instant, BTreeMap<String, Verdict>)>,
    limits: Limits,
}

impl Consolidation {
    /// With the search's time limits (and clock) `limits`.
    pub fn with_limits(limits: Limits) -> Self {
        Consolidation {
            limits,
            ..Consolidation::default()
        }
    }
}

/// The offering a NodeClaim runs on, priced from its NodePool's current catalog (else its
/// launch plan's price; 0 if neither is known).
pub fn priced<'a>(view: &View, pool: &Pool, c: &'a Candidate<'a>) -> Option<Priced<'a>> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Plan {
        instance_type: String,
        zone: Option<String>,
        capacity_type: String,
        #[serde(default)]
        price: f64,
    }
    let label = |k: &str| {
        c.node
            .and_then(|n| n.metadata.labels.as_ref()?.get(k).cloned())
            .or_else(|| c.claim.metadata.labels.as_ref()?.get(k).cloned())
    };
    let plan = annotation(c.claim, api::consts::annotations::LAUNCH_PLAN)
        .and_then(|p| serde_json::from_str::<Plan>(p).ok())
        .or_else(|| {
            Some(Plan {
                instance_type: label(scheduling::LABEL_INSTANCE_TYPE)?,
                zone: label(scheduling::LABEL_ZONE),
                capacity_type: label(scheduling::LABEL_CAPACITY_TYPE)?,
                price: 0.0,
            })
        })?;
    let current = (view.catalog)(&pool.spec.template.spec.node_class_ref.name).and_then(|cat| {
        let it = cat
            .instance_types
            .iter()
            .find(|t| t.name == plan.instance_type)?;
        it.offerings
            .iter()
            .find(|o| {
                o.capacity_type == plan.capacity_type && (o.zone.is_none() || o.zone == plan.zone)
            })
            .map(|o| o.price)
    });
    Some(Priced {
        candidate: c,
        price: current.unwrap_or(plan.price),
        instance_type: plan.instance_type,
        capacity_type: plan.capacity_type,
        cost: disruption_cost(&c.pods),
    })
}

/// What keeps a non-empty candidate from consolidation, before any simulation.
fn blocker(pool: &Pool, c: &Candidate, pass: &Pass, clock: Clock) -> Option<String> {
    if pool.spec.disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty {
        return Some("policy WhenEmpty consolidates only empty nodes".into());
    }
    if pool.consolidate_after.is_none() {
        return Some("consolidateAfter is Never".into());
    }
    if !claim_condition(c.claim, types::INITIALIZED) {
        return Some("not initialized".into());
    }
    let Some(node) = c.node else {
        return Some("no Node".into());
    };
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return Some(format!("Node {} is cordoned", name(node)));
    }
    if do_not_disrupt(c.claim) {
        return Some(
            Blocker::NodeDoNotDisrupt {
                kind: "NodeClaim",
                name: c.name.into(),
            }
            .to_string(),
        );
    }
    if do_not_disrupt(node) {
        return Some(
            Blocker::NodeDoNotDisrupt {
                kind: "Node",
                name: name(node).into(),
            }
            .to_string(),
        );
    }
    if let Some(b) = pod_blocker(
        c.bound,
        &pass
            .view
            .pdbs
            .iter()
            .map(|p| p.as_ref())
            .collect::<Vec<_>>(),
        clock.now,
    ) {
        return Some(b.to_string());
    }
    let at = consolidatable_at(c.claim, pool.consolidate_after)?;
    if at > clock.now {
        // No countdown in the text: it becomes the Consolidatable condition's message, which
        // is written only when it changes.
        return Some(format!(
            "consolidateAfter {} not elapsed since the last pod event",
            pool.spec.disruption.consolidate_after
        ));
    }
    None
}

/// A fingerprint of what a pool's search depends on: where every pod runs, the NodeClaims
/// and Nodes (names, deletion), the pool's candidates.
fn fingerprint(view: &View, eligible: &[Priced]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in view.pods {
        (
            p.metadata.uid.as_deref(),
            crate::objects::pod_node_name(p),
            p.metadata.deletion_timestamp.is_some(),
            crate::objects::terminal(p),
        )
            .hash(&mut h);
    }
    for c in view.nodeclaims {
        (name(c.as_ref()), c.metadata.deletion_timestamp.is_some()).hash(&mut h);
    }
    for n in view.nodes {
        (name(n.as_ref()), n.metadata.deletion_timestamp.is_some()).hash(&mut h);
    }
    for (p, d) in view.pdbs.iter().map(|p| {
        (
            name(p.as_ref()),
            p.status.as_ref().and_then(|s| s.disruptions_allowed),
        )
    }) {
        (p, d).hash(&mut h);
    }
    for e in eligible {
        (e.candidate.name, e.price.to_bits()).hash(&mut h);
    }
    h.finish()
}

impl Method for Consolidation {
    fn decide(
        &mut self,
        pool: &Pool,
        budget: &mut PoolBudget,
        pass: &mut Pass,
        clock: Clock,
    ) -> Vec<Decision> {
        let view = pass.view;
        let mut eligible = Vec::new();
        let (mut cost, mut disruption) = (0.0, 0.0);
        for c in &pool.candidates {
            let p = priced(view, pool, c);
            cost += p.as_ref().map_or(0.0, |p| p.price);
            disruption += disruption_cost(&c.pods);
            if c.empty() && pool.consolidate_after.is_some() {
                continue; // emptiness's
            }
            let at = consolidatable_at(c.claim, pool.consolidate_after);
            let state = at.map(|t| t <= clock.now);
            if let Some(why) = blocker(pool, c, pass, clock) {
                pass.verdicts.insert(
                    c.name.to_string(),
                    Verdict::blocked(why).consolidatable(state),
                );
                continue;
            }
            match p {
                Some(p) => eligible.push(p),
                None => {
                    pass.verdicts.insert(
                        c.name.to_string(),
                        Verdict::blocked("instance type, zone or capacity type unknown")
                            .consolidatable(state),
                    );
                }
            }
        }
        let totals = PoolTotals { cost, disruption };
        eligible.sort_by(|a, b| {
            (b.price / b.cost)
                .total_cmp(&(a.price / a.cost))
                .then(a.candidate.name.cmp(b.candidate.name))
        });
        let wait = |pass: &mut Pass, why: &str| {
            for p in &eligible {
                pass.verdicts.insert(
                    p.candidate.name.to_string(),
                    Verdict::blocked(why).consolidatable(Some(true)),
                );
            }
        };
        // A move under validation.
        if let Some(p) = &self.pending {
            if p.pool != pool.name {
                wait(
                    pass,
                    &format!("waiting: a move in NodePool {} is being validated", p.pool),
                );
                return Vec::new();
            }
            let mv = Arc::clone(&p.mv);
            if clock.instant.duration_since(p.since) < VALIDATION {
                wait(pass, "waiting: another move of the pool is being validated");
                for c in &mv.candidates {
                    pass.verdicts.insert(c.clone(), consolidation_verdict(&mv));
                }
                return Vec::new();
            }
            self.pending = None;
            self.searched.remove(pool.name);
            if let Err(why) = validate(pool, &totals, &eligible, &mv, pass, clock.now) {
                pass.notes.push(Note::pool(
                    pool.name,
                    "ConsolidationRejected",
                    format!("validation failed: {why}"),
                ));
                wait(
                    pass,
                    &format!("a move failed validation ({why}); searching again"),
                );
                return Vec::new();
            }
            pass.consolidated = true;
            budget.take(mv.candidates.len());
            let Some((first, with)) = mv.candidates.split_first() else {
                return Vec::new();
            };
            // Surge-first through the shared orchestration: candidates tainted, the
            // replacement initialized, then the candidates deleted.
            let replacements = match &mv.action {
                Action::Delete => Vec::new(),
                Action::Replace(r) => {
                    vec![crate::provisioning::nodeclaim::nodeclaim(
                        &r.nodepool,
                        &r.claim,
                    )]
                }
            };
            return vec![Decision {
                nodeclaim: first.clone(),
                nodepool: pool.name.to_string(),
                reason: DisruptionReason::Underutilized,
                expired: false,
                message: consolidation_verdict(&mv).to_string(),
                surge: Some(Surge {
                    replacements,
                    with: with.to_vec(),
                    consolidation_type: if with.is_empty() { "single" } else { "multi" }.into(),
                }),
                command: Some(Arc::clone(&mv)),
            }];
        }
        let remaining = budget.remaining(DisruptionReason::Underutilized);
        if eligible.is_empty() {
            return Vec::new();
        }
        if pass.consolidated {
            wait(pass, "waiting: pods are pending or another move goes first");
            return Vec::new();
        }
        if remaining == 0 {
            wait(pass, "budget Underutilized: 0 allowed");
            return Vec::new();
        }
        if !budget.idle() {
            wait(pass, "waiting: other nodes of the pool are being disrupted");
            return Vec::new();
        }
        let key = fingerprint(view, &eligible);
        if let Some((k, at, verdicts)) = self.searched.get(pool.name)
            && *k == key
            && clock.instant.duration_since(*at) < RESEARCH
        {
            pass.verdicts.extend(verdicts.clone());
            return Vec::new();
        }
        let found = search(
            pool,
            &totals,
            &eligible,
            remaining,
            pass,
            clock.now,
            &self.limits,
        );
        pass.verdicts.extend(found.verdicts.clone());
        match found.mv {
            Some(mv) => {
                pass.consolidated = true;
                let note = format!(
                    "{} (validating for {}s)",
                    consolidation_verdict(&mv),
                    VALIDATION.as_secs()
                );
                let reason =
                    if pool.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced {
                        "ConsolidationApproved"
                    } else {
                        "ConsolidationCandidate"
                    };
                pass.notes.push(Note::pool(pool.name, reason, note));
                self.pending = Some(Pending {
                    pool: pool.name.to_string(),
                    mv: Arc::new(mv),
                    since: clock.instant,
                });
            }
            // A search cut short by its time limit is not remembered: the next pass
            // searches again.
            None if found.stopped => {}
            None => {
                self.searched
                    .insert(pool.name.to_string(), (key, clock.instant, found.verdicts));
            }
        }
        Vec::new()
    }

    fn forget(&mut self, keep: &std::collections::HashSet<String>) {
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.mv.candidates.iter().any(|c| !keep.contains(c)))
        {
            self.pending = None;
        }
    }
}
