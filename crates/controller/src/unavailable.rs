//! Unavailable-offerings cache: an offering (instance type, zone, capacity type) whose
//! launch failed for lack of capacity or an infrastructure failure is skipped by launch for
//! a while (Karpenter's AWS provider uses 3 minutes), so the replacement picks another one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a failed offering stays unavailable.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(180);

/// Identifies one offering of one instance type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: Option<String>,
    pub capacity_type: String,
}

/// Thread-safe TTL set of unavailable offerings.
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    entries: Mutex<HashMap<OfferingKey, (Instant, String)>>,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl UnavailableOfferings {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Marks an offering unavailable from `now` for the TTL, remembering why.
    pub fn mark(&self, key: OfferingKey, reason: impl Into<String>, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.insert(key, (now + self.ttl, reason.into()));
    }

    /// Why the offering is unavailable at `now`, if it is.
    pub fn reason(&self, key: &OfferingKey, now: Instant) -> Option<String> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some((until, reason)) if *until > now => Some(reason.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn is_unavailable(&self, key: &OfferingKey, now: Instant) -> bool {
        self.reason(key, now).is_some()
    }

    /// Number of offerings currently unavailable (expired entries are dropped).
    pub fn len(&self, now: Instant) -> usize {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, (until, _)| *until > now);
        entries.len()
    }

    pub fn is_empty(&self, now: Instant) -> bool {
        self.len(now) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(zone: &str) -> OfferingKey {
        OfferingKey {
            instance_type: "m5.large".into(),
            zone: Some(zone.into()),
            capacity_type: "on-demand".into(),
        }
    }

    #[test]
    fn offering_expires_after_ttl() {
        let cache = UnavailableOfferings::new(Duration::from_secs(180));
        let t0 = Instant::now();
        cache.mark(key("a"), "InsufficientCapacity", t0);
        assert_eq!(
            cache
                .reason(&key("a"), t0 + Duration::from_secs(179))
                .as_deref(),
            Some("InsufficientCapacity")
        );
        assert!(
            !cache.is_unavailable(&key("b"), t0),
            "other zones stay available"
        );
        assert!(!cache.is_unavailable(&key("a"), t0 + Duration::from_secs(180)));
        assert!(cache.is_empty(t0 + Duration::from_secs(181)));
    }

    #[test]
    fn marking_again_extends() {
        let cache = UnavailableOfferings::new(Duration::from_secs(10));
        let t0 = Instant::now();
        cache.mark(key("a"), "first", t0);
        cache.mark(key("a"), "second", t0 + Duration::from_secs(8));
        assert_eq!(
            cache
                .reason(&key("a"), t0 + Duration::from_secs(15))
                .as_deref(),
            Some("second")
        );
        assert_eq!(cache.len(t0 + Duration::from_secs(15)), 1);
    }
}
