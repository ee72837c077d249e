//! What every method starts from: per NodePool, its NodeClaims that may be disrupted (not
//! being deleted already, nor in a surge-first command), each with its Node, the pods bound
//! to it, and when it becomes `Consolidatable` (`consolidateAfter` after its last pod event,
//! or after it initialized).

use std::sync::Arc;
use std::time::Duration;

use api::consts::conditions as types;
use api::karpenter::NodePoolSpec;
use api::{NodeClaim, NodePool};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::View;
pub(crate) use crate::blockers::{do_not_disrupt, reschedulable};
use crate::objects::{claim_condition, deleting, name, nodepool_of};
use api::duration::parse_duration;

/// One NodeClaim a method may disrupt.
#[derive(Debug)]
pub struct Candidate<'a> {
    pub claim: &'a NodeClaim,
    pub name: &'a str,
    /// Its Node, once registered and cached.
    pub node: Option<&'a Node>,
    /// The reschedulable pods on its Node.
    pub pods: Vec<&'a Pod>,
    /// Every unfinished pod bound to its Node (DaemonSet and mirror pods included).
    pub bound: Vec<&'a Pod>,
}

impl Candidate<'_> {
    /// Initialized, with a Node, and neither annotated do-not-disrupt: what emptiness and
    /// consolidation both require.
    pub(crate) fn disruptable(&self) -> bool {
        claim_condition(self.claim, types::INITIALIZED)
            && !do_not_disrupt(self.claim)
            && self.node.is_some_and(|n| !do_not_disrupt(n))
    }

    /// Disruptable and without a reschedulable pod.
    pub fn empty(&self) -> bool {
        self.disruptable() && self.pods.is_empty()
    }
}

/// One NodePool and its candidates.
#[derive(Debug)]
pub struct Pool<'a> {
    pub name: &'a str,
    pub spec: &'a NodePoolSpec,
    /// `consolidateAfter`; `None` for `Never` (or unparsable).
    pub consolidate_after: Option<Duration>,
    /// All its NodeClaims, those being deleted included.
    pub total: usize,
    /// Its NodeClaims being deleted, in a surge-first command or rebooting.
    pub disrupting: usize,
    /// Its NodeClaims being deleted.
    pub deleting: usize,
    /// `spec.replicas`: a static pool (never consolidated; drift replaced one for one).
    pub replicas: Option<i64>,
    /// Its NodeClaims neither being deleted nor in a command, in name order.
    pub candidates: Vec<Candidate<'a>>,
}

/// Being deleted, a candidate of a surge-first command, or being rebooted by repair.
fn busy(claim: &NodeClaim) -> bool {
    deleting(claim) || super::orchestrate::in_command(claim) || crate::objects::rebooting(claim)
}

/// The NodePools of `view` with their candidates.
pub(crate) fn pools<'a>(view: &'a View) -> Vec<Pool<'a>> {
    view.nodepools
        .iter()
        .map(|p: &Arc<NodePool>| {
            let pool_name = name(p.as_ref());
            let claims: Vec<_> = view.cluster.claims_of_pool(pool_name).collect();
            Pool {
                name: pool_name,
                spec: &p.spec,
                consolidate_after: consolidate_after(&p.spec),
                total: claims.len(),
                disrupting: claims.iter().filter(|(c, _)| busy(c)).count(),
                deleting: claims.iter().filter(|(c, _)| deleting(c.as_ref())).count(),
                replicas: p.spec.replicas,
                candidates: claims
                    .into_iter()
                    .filter(|(c, _)| !busy(c))
                    .map(|(c, node)| {
                        let bound: Vec<&Pod> = node
                            .and_then(|n| view.cluster.bound(name(n.as_ref())))
                            .map(|b| b.pods.iter().map(|p| p.as_ref()).collect())
                            .unwrap_or_default();
                        Candidate {
                            claim: c,
                            name: name(c.as_ref()),
                            node: node.map(|n| n.as_ref()),
                            pods: bound.iter().copied().filter(|p| reschedulable(p)).collect(),
                            bound,
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// A NodePool's `consolidateAfter`; `None` for `Never` (or unparsable), and for a static
/// pool (`replicas`), whose nodes are never consolidated (no `Consolidatable` condition).
pub(crate) fn consolidate_after(spec: &NodePoolSpec) -> Option<Duration> {
    if spec.replicas.is_some() {
        return None;
    }
    match spec.disruption.consolidate_after.as_str() {
        "Never" => None,
        d => parse_duration(d),
    }
}

/// Whether a NodeClaim of `pools` is `Consolidatable` at `now` (`None`: the condition does
/// not apply).
pub(crate) fn consolidatable(
    claim: &NodeClaim,
    pools: &[Arc<NodePool>],
    now: Timestamp,
) -> Option<bool> {
    let pool = pools
        .iter()
        .find(|p| Some(name(p.as_ref())) == nodepool_of(claim))?;
    consolidatable_at(claim, consolidate_after(&pool.spec)).map(|t| t <= now)
}

/// When a NodeClaim becomes `Consolidatable`: `consolidateAfter` after its last pod event
/// (`status.lastPodEventTime`), or after it initialized. `None` when consolidation is off
/// (`Never`) or it has not initialized: the condition is then absent.
pub(crate) fn consolidatable_at(claim: &NodeClaim, after: Option<Duration>) -> Option<Timestamp> {
    let after = SignedDuration::try_from(after?).ok()?;
    let status = claim.status.as_ref()?;
    let initialized = api::conditions::get(&status.conditions, types::INITIALIZED)
        .filter(|c| c.status == api::conditions::TRUE)?;
    let since = match &status.last_pod_event_time {
        Some(t) if t.0 > initialized.last_transition_time.0 => t.0,
        _ => initialized.last_transition_time.0,
    };
    since.checked_add(after).ok()
}
