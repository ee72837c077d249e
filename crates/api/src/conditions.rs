//! metav1 `Condition` helpers shared by every status writer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Longest condition message we write (the API allows 32768; keep `kubectl describe`
/// readable).
pub const MAX_MESSAGE: usize = 1024;

/// `True`, `False`, `Unknown`.
pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// The condition of `type_`, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present and `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// The status of the condition of `type_` (`Unknown` when absent).
pub fn status<'a>(conditions: &'a [Condition], type_: &str) -> &'a str {
    get(conditions, type_).map_or(UNKNOWN, |c| c.status.as_str())
}

/// Cuts `message` to at most `max` bytes on a character boundary, marking the cut with "...".
pub fn truncate(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// Sets a condition; `lastTransitionTime` changes only when the status changes. Returns
/// whether anything changed (so callers can skip a status write).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let message = truncate(message, MAX_MESSAGE);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed = c.status != status
                || c.reason != reason
                || c.message != message
                || c.observed_generation != observed_generation;
            if c.status != status {
                c.last_transition_time = Time(now);
            }
            c.status = status.to_string();
            c.reason = reason.to_string();
            c.message = message;
            c.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                message,
                observed_generation,
                last_transition_time: Time(now),
            });
            true
        }
    }
}

/// Removes the condition of `type_`; returns whether it was present.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    before != conditions.len()
}

/// Whether two condition lists say the same, transition times aside (a status write that
/// would change only those is skipped).
pub fn same_untimed(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
                && x.observed_generation == y.observed_generation
        })
}

/// Sets `Ready` from its parts: True when every part is True, otherwise False (any part
/// False) or Unknown, naming the parts that are not True.
pub fn set_ready_from(
    conditions: &mut Vec<Condition>,
    parts: &[&str],
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let not_true: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| !is_true(conditions, p))
        .collect();
    if not_true.is_empty() {
        return set(
            conditions,
            crate::consts::conditions::READY,
            TRUE,
            crate::consts::reasons::READY,
            "",
            observed_generation,
            now,
        );
    }
    let any_false = not_true.iter().any(|p| status(conditions, p) == FALSE);
    let message = not_true
        .iter()
        .map(|p| format!("{p}={}", status(conditions, p)))
        .collect::<Vec<_>>()
        .join(", ");
    set(
        conditions,
        crate::consts::conditions::READY,
        if any_false { FALSE } else { UNKNOWN },
        crate::consts::reasons::NOT_READY_DEPENDENCIES,
        &message,
        observed_generation,
        now,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    #[test]
    fn same_untimed_ignores_only_transition_times() {
        let mut a = Vec::new();
        set(&mut a, "Ready", TRUE, "Ok", "fine", Some(1), at(10));
        let mut later = a.clone();
        later[0].last_transition_time = Time(at(99));
        assert!(same_untimed(&a, &later));
        // Controls: any other field, or another condition, differs.
        let mut other = a.clone();
        other[0].message = "changed".into();
        assert!(!same_untimed(&a, &other));
        let mut generation = a.clone();
        generation[0].observed_generation = Some(2);
        assert!(!same_untimed(&a, &generation));
        let mut more = a.clone();
        set(&mut more, "Launched", TRUE, "Ok", "", Some(1), at(10));
        assert!(!same_untimed(&a, &more));
    }

    #[test]
    fn transition_time_kept_when_status_unchanged() {
        let mut c = Vec::new();
        assert!(set(
            &mut c,
            "Launched",
            TRUE,
            "Launched",
            "",
            Some(1),
            at(10)
        ));
        assert!(!set(
            &mut c,
            "Launched",
            TRUE,
            "Launched",
            "",
            Some(1),
            at(20)
        ));
        assert_eq!(c[0].last_transition_time, Time(at(10)));
        assert!(set(
            &mut c,
            "Launched",
            TRUE,
            "Launched",
            "new message",
            Some(1),
            at(30)
        ));
        assert_eq!(c[0].last_transition_time, Time(at(10)));
        assert!(set(
            &mut c,
            "Launched",
            FALSE,
            "LaunchFailed",
            "boom",
            Some(2),
            at(40)
        ));
        assert_eq!(c[0].last_transition_time, Time(at(40)));
        assert_eq!(c.len(), 1);
        assert_eq!(status(&c, "Registered"), UNKNOWN);
        assert!(remove(&mut c, "Launched"));
        assert!(c.is_empty());
    }

    #[test]
    fn ready_from_parts() {
        let mut c = Vec::new();
        let parts = crate::consts::conditions::NODECLAIM_READY_PARTS;
        set(&mut c, "Launched", TRUE, "Launched", "", None, at(1));
        set_ready_from(&mut c, parts, None, at(1));
        assert_eq!(status(&c, "Ready"), UNKNOWN);
        assert!(get(&c, "Ready").is_some_and(|r| r.message.contains("Registered=Unknown")));
        set(&mut c, "Registered", FALSE, "NodeNotFound", "", None, at(2));
        set_ready_from(&mut c, parts, None, at(2));
        assert_eq!(status(&c, "Ready"), FALSE);
        set(&mut c, "Registered", TRUE, "Registered", "", None, at(3));
        set(&mut c, "Initialized", TRUE, "Initialized", "", None, at(3));
        set_ready_from(&mut c, parts, None, at(3));
        assert!(is_true(&c, "Ready"));
    }

    #[test]
    fn truncate_on_char_boundary() {
        let s = "é".repeat(600);
        let t = truncate(&s, MAX_MESSAGE);
        assert!(t.len() <= MAX_MESSAGE);
        assert!(t.ends_with("..."));
        assert_eq!(truncate("short", 10), "short");
    }
}
