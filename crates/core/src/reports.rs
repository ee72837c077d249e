//! What one loop reports for another to write: the last registration failure per NodePool
//! (recorded by the NodeClaim liveness step, read by the NodePool status loop, which stays
//! the only writer of NodePool status).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

/// The last registration timeout per NodePool.
#[derive(Debug, Default)]
pub struct RegistrationFailures(std::sync::Mutex<BTreeMap<String, (Timestamp, String)>>);

impl RegistrationFailures {
    pub fn record(&self, nodepool: &str, at: Timestamp, message: String) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(nodepool.to_string(), (at, message));
        }
    }

    pub fn last(&self, nodepool: &str) -> Option<(Timestamp, String)> {
        self.0.lock().ok()?.get(nodepool).cloned()
    }
}
