//! Launch-failure backoff: an offering (template, zone, capacity type) whose launch failed
//! for lack of capacity or an infrastructure failure is skipped by launch and by the
//! scheduler for a while, so the replacement picks another one. The first failure holds it
//! for 3 minutes (as Karpenter's AWS provider's unavailable-offerings cache); each failure
//! while it is still backed off, or soon after, doubles the hold up to 30 minutes (as
//! cluster-autoscaler's node-group backoff); a successful launch resets it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use templates::model::TemplateRef;

/// The first hold.
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_secs(180);
/// The longest hold.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1800);

/// Identifies one offering: the template it is launched from, its zone and capacity type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OfferingKey {
    pub template: TemplateRef,
    pub zone: Option<String>,
    pub capacity_type: String,
}

impl OfferingKey {
    /// The offering a plan launched: template, zone, capacity type.
    pub(crate) fn of_plan(plan: &crate::plan::Plan) -> OfferingKey {
        let t = &plan.infrastructure_template;
        OfferingKey {
            template: TemplateRef {
                api_version: t.api_version.clone(),
                kind: t.kind.clone(),
                namespace: Some(plan.namespace.clone()),
                name: t.name.clone(),
            },
            zone: plan.zone.clone(),
            capacity_type: plan.capacity_type.clone(),
        }
    }

    /// The key of a catalog offering.
    pub fn of(offering: &templates::model::Offering) -> OfferingKey {
        OfferingKey {
            template: templates::model::launched_from(offering),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type.clone(),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    until: Instant,
    /// `until` on the wall clock, as marked (what the NodeClass status shows).
    wall_until: k8s_openapi::jiff::Timestamp,
    /// The hold of the last failure (the next one doubles it).
    hold: Duration,
    reason: String,
}

/// Thread-safe backoff per offering.
#[derive(Debug)]
pub struct UnavailableOfferings {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<OfferingKey, Entry>>,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        Self::new(INITIAL_BACKOFF, MAX_BACKOFF)
    }
}

impl UnavailableOfferings {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OfferingKey, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A launch of the offering failed at `now`: it is unavailable for the next hold (3 min
    /// on a first failure, double the last hold after another, at most 30 min). Returns the
    /// hold.
    pub fn mark(&self, key: OfferingKey, reason: impl Into<String>, now: Instant) -> Duration {
        let mut entries = self.lock();
        let hold = match entries.get(&key) {
            Some(e) => (e.hold * 2).min(self.max),
            None => self.initial,
        };
        entries.insert(
            key,
            Entry {
                until: now + hold,
                wall_until: k8s_openapi::jiff::Timestamp::now()
                    .checked_add(hold)
                    .unwrap_or(k8s_openapi::jiff::Timestamp::MAX),
                hold,
                reason: reason.into(),
            },
        );
        hold
    }

    /// A launch of the offering succeeded: the next failure starts from the first hold.
    pub fn succeeded(&self, key: &OfferingKey) {
        self.lock().remove(key);
    }

    /// Why the offering is unavailable at `now`, and until when, if it is.
    pub fn reason(&self, key: &OfferingKey, now: Instant) -> Option<(String, Instant)> {
        self.lock()
            .get(key)
            .filter(|e| e.until > now)
            .map(|e| (e.reason.clone(), e.until))
    }

    /// Until when (wall clock, as marked) the offering is unavailable at `now`, if it is.
    pub(crate) fn wall_until(
        &self,
        key: &OfferingKey,
        now: Instant,
    ) -> Option<k8s_openapi::jiff::Timestamp> {
        self.lock()
            .get(key)
            .filter(|e| e.until > now)
            .map(|e| e.wall_until)
    }

    /// Ends the backoff of every offering `freed` names (a host of its template was freed:
    /// launching may succeed now, whatever the hold left).
    pub(crate) fn forgive(&self, freed: impl Fn(&OfferingKey) -> bool) {
        self.lock().retain(|k, _| !freed(k));
    }

    pub(crate) fn is_unavailable(&self, key: &OfferingKey, now: Instant) -> bool {
        self.reason(key, now).is_some()
    }

    /// Number of offerings unavailable at `now`.
    pub fn len(&self, now: Instant) -> usize {
        self.lock().values().filter(|e| e.until > now).count()
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
            template: TemplateRef {
                api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
                kind: "DockerMachineTemplate".into(),
                namespace: Some("ns".into()),
                name: "m5-large".into(),
            },
            zone: Some(zone.into()),
            capacity_type: "on-demand".into(),
        }
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn backoff_doubles_from_three_to_thirty_minutes_and_resets_on_success() {
        let cache = UnavailableOfferings::default();
        // A fake clock: every instant is t0 plus what the test says.
        let t0 = Instant::now();
        let mut now = t0;
        let mut holds = Vec::new();
        for _ in 0..6 {
            let hold = cache.mark(key("a"), "InsufficientCapacity", now);
            holds.push(hold.as_secs() / 60);
            assert!(cache.is_unavailable(&key("a"), now + hold - Duration::from_secs(1)));
            assert!(
                !cache.is_unavailable(&key("a"), now + hold),
                "available again once the hold is over"
            );
            // The replacement fails again right after the hold.
            now += hold;
        }
        assert_eq!(holds, [3, 6, 12, 24, 30, 30]);
        assert!(
            !cache.is_unavailable(&key("b"), t0),
            "other zones stay available"
        );
        cache.succeeded(&key("a"));
        assert_eq!(
            cache.mark(key("a"), "again", now),
            3 * MIN,
            "reset by success"
        );
        assert_eq!(
            cache
                .reason(&key("a"), now)
                .map(|(r, until)| (r, until - now)),
            Some(("again".to_string(), 3 * MIN))
        );
        assert_eq!(cache.len(now), 1);
        assert!(cache.is_empty(now + 3 * MIN));
    }
}
