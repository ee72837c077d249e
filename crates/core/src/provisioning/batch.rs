//! Pure: the provisioner's batch window, driven by events. A provisionable pod not seen
//! before opens the window; each further new one extends it while they arrive within
//! `idle`; it closes `idle` after the last or `max` after it opened (Karpenter: 1 s / 10 s).
//! A pod a batch handled opens no window again for [`RECONSIDER`]; then, still pending, it
//! counts as new (a batch re-plans it).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A pod handled in a batch is not a reason to open a new window again before this.
pub(crate) const RECONSIDER: Duration = Duration::from_secs(10);

/// The window and the pods handled recently.
#[derive(Debug)]
pub(crate) struct Batcher {
    idle: Duration,
    max: Duration,
    /// Opened at, last extended at, the pods seen in it.
    window: Option<(Instant, Instant, HashSet<String>)>,
    /// Pods handled by a batch, and when.
    handled: HashMap<String, Instant>,
}

impl Batcher {
    pub(crate) fn new(idle: Duration, max: Duration) -> Batcher {
        Batcher {
            idle,
            max,
            window: None,
            handled: HashMap::new(),
        }
    }

    /// A provisionable pod (by uid) was seen at `now`: opens the window, or extends it when
    /// the pod is new to it. Pods handled less than [`RECONSIDER`] ago are ignored.
    pub(crate) fn pod(&mut self, uid: &str, now: Instant) {
        if self
            .handled
            .get(uid)
            .is_some_and(|t| now.duration_since(*t) < RECONSIDER)
        {
            return;
        }
        match &mut self.window {
            None => self.window = Some((now, now, HashSet::from([uid.to_string()]))),
            Some((_, last, seen)) => {
                if seen.insert(uid.to_string()) {
                    *last = now;
                }
            }
        }
    }

    /// When the loop must wake without an event: the window closes, or a handled pod may
    /// be reconsidered.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let close = self
            .window
            .as_ref()
            .map(|(opened, last, _)| (*last + self.idle).min(*opened + self.max));
        let reconsider = self.handled.values().min().map(|t| *t + RECONSIDER);
        match (close, reconsider) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a handled pod's time is up at `now` (the pending pods should be offered
    /// again through [`Self::pod`]); forgets those.
    pub(crate) fn reconsider(&mut self, now: Instant) -> bool {
        let before = self.handled.len();
        self.handled
            .retain(|_, t| now.duration_since(*t) < RECONSIDER);
        self.handled.len() != before
    }

    /// Forgets every handled pod (the capacity they were planned on changed: a NodePool
    /// changed, a NodeClaim or Node went away).
    pub(crate) fn forget_handled(&mut self) {
        self.handled.clear();
    }

    /// Whether the window is open and closes at `now`; it is then closed.
    pub(crate) fn close(&mut self, now: Instant) -> bool {
        let due = self.window.as_ref().is_some_and(|(opened, last, _)| {
            now.duration_since(*last) >= self.idle || now.duration_since(*opened) >= self.max
        });
        if due {
            self.window = None;
        }
        due
    }

    /// The pods (by uid) a batch handled at `now`.
    pub(crate) fn handled<'a>(&mut self, uids: impl IntoIterator<Item = &'a str>, now: Instant) {
        for u in uids {
            self.handled.insert(u.to_string(), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(10);

    #[test]
    fn a_pod_opens_the_window_which_closes_after_idle() {
        let t0 = Instant::now();
        let mut b = Batcher::new(IDLE, MAX);
        assert_eq!(b.deadline(), None, "nothing to wait for");
        b.pod("a", t0);
        assert_eq!(b.deadline(), Some(t0 + IDLE));
        assert!(!b.close(t0 + Duration::from_millis(999)));
        assert!(b.close(t0 + IDLE));
        assert!(!b.close(t0 + IDLE), "closed once");
    }

    #[test]
    fn new_pods_extend_the_window_up_to_max() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = Batcher::new(IDLE, MAX);
        b.pod("a", t0);
        // A pod already in the window does not extend it.
        b.pod("a", t0 + ms(500));
        assert_eq!(b.deadline(), Some(t0 + IDLE));
        // A new pod every 0.9 s keeps it open ...
        for i in 1..=11u32 {
            let t = t0 + ms(900) * i;
            assert!(!b.close(t), "open at {i}");
            b.pod(&format!("p{i}"), t);
            assert_eq!(b.deadline(), Some((t + IDLE).min(t0 + MAX)));
        }
        // ... until max.
        assert!(!b.close(t0 + MAX - ms(1)));
        assert!(b.close(t0 + MAX));
    }

    #[test]
    fn handled_pods_open_no_window_until_reconsidered() {
        let t0 = Instant::now();
        let mut b = Batcher::new(IDLE, MAX);
        b.pod("a", t0);
        assert!(b.close(t0 + IDLE));
        let done = t0 + IDLE;
        b.handled(["a"], done);
        b.pod("a", done + Duration::from_secs(1));
        assert!(!b.close(done + Duration::from_secs(5)), "no window for a");
        assert_eq!(b.deadline(), Some(done + RECONSIDER));
        assert!(!b.reconsider(done + Duration::from_secs(9)));
        assert!(b.reconsider(done + RECONSIDER));
        b.pod("a", done + RECONSIDER);
        assert_eq!(b.deadline(), Some(done + RECONSIDER + IDLE));
        // Forgetting makes every handled pod new at once.
        b.handled(["b"], done);
        b.forget_handled();
        assert_eq!(b.deadline(), Some(done + RECONSIDER + IDLE));
    }
}
