//! The NodeClaim writes of the two loops that share `Consolidatable` and
//! `status.lastPodEventTime`: the pod-event loop and the disruption loop (its pass's
//! conditions, and its commands' writes and deletions). Each guards its JSON
//! patch with a `test` of what it was computed from, so a write computed from a copy the other
//! loop has just changed is refused (422) by the API server. Two things keep that from
//! happening between our own loops:
//! - one write at a time per NodeClaim: a loop holds the claim's turn from its last look at
//!   the claim until the API server has answered and the answer is recorded, so the other
//!   never sends while a write is queued in the client or in flight;
//! - what either wrote, until the cache shows it ([`OwnWrites`]): each decides on the newest
//!   version either loop has seen, and the disruption pass, whose verdicts come from the
//!   pass's copy, writes nothing for a claim that changed since that copy (the next pass
//!   decides on the new one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use api::NodeClaim;
use kube::Resource;
use tokio::sync::OwnedMutexGuard;

use crate::write::OwnWrites;

/// One turn per NodeClaim, and both loops' last writes. Shared by one engagement's pod-event
/// loop and disruption pass.
#[derive(Debug, Default)]
pub struct ClaimWrites {
    written: Arc<OwnWrites<NodeClaim>>,
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A loop's turn to write one NodeClaim's status; the other waits until it is dropped.
pub(crate) struct Turn {
    _held: OwnedMutexGuard<()>,
}

impl ClaimWrites {
    /// Waits for the claim's turn (by UID; a claim without one shares the empty key).
    pub(crate) async fn turn(&self, claim: &NodeClaim) -> Turn {
        let uid = claim.meta().uid.clone().unwrap_or_default();
        let lock = self
            .turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(uid)
            .or_default()
            .clone();
        Turn {
            _held: lock.lock_owned().await,
        }
    }

    /// Where a writer records what it wrote ([`crate::write::Writer::sharing`]).
    pub(crate) fn own(&self) -> Arc<OwnWrites<NodeClaim>> {
        self.written.clone()
    }

    /// The newer of `cached` and either loop's last write to it.
    pub(crate) fn latest(&self, cached: &Arc<NodeClaim>) -> Arc<NodeClaim> {
        self.written.latest(cached)
    }

    /// Records the object a write returned.
    pub(crate) fn wrote(&self, after: NodeClaim) {
        self.written.wrote(after)
    }

    /// Whether `copy` is still the newest version we know of: the claim `cached` now (the
    /// cache's current copy of it, at least as new as `copy`) and our writes since.
    pub(crate) fn unchanged_since(&self, copy: &NodeClaim, cached: &Arc<NodeClaim>) -> bool {
        self.latest(cached).meta().resource_version == copy.meta().resource_version
    }

    /// Forgets the claims `live` says are gone (their turns and copies).
    pub(crate) fn retain(&self, live: impl Fn(&str) -> bool) {
        self.written.retain(&live);
        self.turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|uid, turn| live(uid) || Arc::strong_count(turn) > 1);
    }

    /// How many claims are remembered (copies or turns).
    pub(crate) fn len(&self) -> usize {
        let turns = self.turns.lock().unwrap_or_else(|p| p.into_inner()).len();
        self.written.len().max(turns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn claim(uid: &str, rv: &str) -> Arc<NodeClaim> {
        let mut c = NodeClaim::new("c", Default::default());
        c.metadata.uid = Some(uid.into());
        c.metadata.resource_version = Some(rv.into());
        Arc::new(c)
    }

    #[tokio::test]
    async fn one_write_at_a_time_per_claim() {
        let w = Arc::new(ClaimWrites::default());
        let first = w.turn(&claim("a", "1")).await;
        // Another claim's turn is free meanwhile.
        let other =
            tokio::time::timeout(Duration::from_millis(100), w.turn(&claim("b", "1"))).await;
        assert!(other.is_ok(), "claims do not wait for each other");
        // The same claim's turn waits until the first is dropped: polled, it asks for the
        // turn and is not given it (no timing involved).
        let same = claim("a", "1");
        let mut second = Box::pin(w.turn(&same));
        assert!(
            futures::poll!(second.as_mut()).is_pending(),
            "the second writer waits"
        );
        drop(first);
        assert!(
            futures::poll!(second.as_mut()).is_ready(),
            "its turn comes once the first is done"
        );
    }

    #[test]
    fn a_claim_written_since_the_copy_is_changed() {
        let w = ClaimWrites::default();
        let copy = claim("a", "5");
        assert!(
            w.unchanged_since(&copy, &copy),
            "nothing written: unchanged"
        );
        // The cache moved on (someone else's write).
        assert!(!w.unchanged_since(&copy, &claim("a", "6")));
        // Our own write the cache has not shown yet.
        w.wrote((*claim("a", "7")).clone());
        assert!(
            !w.unchanged_since(&copy, &copy),
            "our write is newer than the copy"
        );
        assert_eq!(w.len(), 1);
        w.retain(|_| false);
        assert_eq!(w.len(), 0, "gone claims are forgotten");
    }
}
