//! The state of each opted-in Cluster as this hub replica sees it, and the gauge
//! `karpenter_capi_clusters{state}` counting them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::catalogs::ClusterKey;
use karpenter_core::metrics::StateLabels;

/// Where a Cluster stands with this replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// Engaged and its API server answers.
    Engaged,
    /// Engaged, but its API server failed its last probes.
    Disconnected,
    /// Ours, fenced; connecting to its API server.
    Connecting,
    /// Ours by the hash, but its fence Lease is still held by another replica (which
    /// releases it, or it expires).
    WaitingLease,
    /// Ours, but its kubeconfig Secret is missing or unreadable.
    WaitingCredentials,
    /// Another replica's.
    NotOwned,
    /// Not engaged by anyone: its opt-in label is not `"true"`, paused, being deleted, not
    /// initialized, outside `--namespaces`.
    Ineligible,
}

impl State {
    pub const ALL: [State; 7] = [
        State::Engaged,
        State::Disconnected,
        State::Connecting,
        State::WaitingLease,
        State::WaitingCredentials,
        State::NotOwned,
        State::Ineligible,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Engaged => "engaged",
            State::Disconnected => "disconnected",
            State::Connecting => "connecting",
            State::WaitingLease => "waiting-lease",
            State::WaitingCredentials => "waiting-credentials",
            State::NotOwned => "not-owned",
            State::Ineligible => "ineligible",
        }
    }
}

/// Every Cluster's state; each change recounts the gauge. Clones share the table.
#[derive(Clone)]
pub struct Table {
    states: Arc<Mutex<BTreeMap<ClusterKey, State>>>,
    gauge: Family<StateLabels, Gauge>,
}

impl Table {
    pub fn new(gauge: Family<StateLabels, Gauge>) -> Self {
        let table = Table {
            states: Arc::default(),
            gauge,
        };
        table.publish(&BTreeMap::new());
        table
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ClusterKey, State>> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, states: &BTreeMap<ClusterKey, State>) {
        for s in State::ALL {
            let n = states.values().filter(|v| **v == s).count();
            self.gauge
                .get_or_create(&StateLabels {
                    state: s.as_str().into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Sets `key`'s state; whether it changed.
    pub(crate) fn set(&self, key: &ClusterKey, state: State) -> bool {
        let mut states = self.lock();
        if states.get(key) == Some(&state) {
            return false;
        }
        states.insert(key.clone(), state);
        self.publish(&states);
        true
    }

    /// Forgets the Clusters not in `keep` (deleted, or no longer opted in).
    pub(crate) fn retain(&self, keep: impl Fn(&ClusterKey) -> bool) {
        let mut states = self.lock();
        let before = states.len();
        states.retain(|k, _| keep(k));
        if states.len() != before {
            self.publish(&states);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_counts_clusters_by_state() {
        let gauge: Family<StateLabels, Gauge> = Family::default();
        let table = Table::new(gauge.clone());
        let count = |s: State| {
            gauge
                .get_or_create(&StateLabels {
                    state: s.as_str().into(),
                })
                .get()
        };
        assert_eq!(
            count(State::Engaged),
            0,
            "every state is served from the start"
        );
        let key = |n: &str| ClusterKey {
            namespace: "t".into(),
            name: n.into(),
        };
        table.set(&key("a"), State::Connecting);
        table.set(&key("b"), State::NotOwned);
        table.set(&key("a"), State::Engaged);
        assert_eq!(
            (
                count(State::Engaged),
                count(State::Connecting),
                count(State::NotOwned)
            ),
            (1, 0, 1)
        );
        table.retain(|k| k.name == "a");
        assert_eq!(count(State::NotOwned), 0);
        assert_eq!(count(State::Engaged), 1);
    }
}
