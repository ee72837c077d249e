//! Counted offerings: how many more Machines a template can become. `None` is unbounded.
//!
//! A template states its limits in annotations ([`CountLimits`], read with the template and
//! kept in the catalog); the count available at one moment is resolved from them, the live
//! use of the template and the time ([`CountLimits::available`]). Every source gives a
//! number; the smallest wins:
//! - `karpenter.cluster.x-k8s.io/max-machines: "N"` — N minus the live Machines from the
//!   template ([`CountSource::MaxMachines`]);
//! - cluster-autoscaler's `cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size` —
//!   the same, for templates shared with cluster-autoscaler setups
//!   ([`CountSource::NodeGroupMaxSize`]);
//! - `karpenter.cluster.x-k8s.io/available-count` with `…/available-count-updated`
//!   (RFC 3339), written by an outside inventory job: the count minus the launches still in
//!   flight (no providerID yet, so the job cannot have seen them), ignored (unknown) once
//!   older than the staleness ([`CountSource::Reported`]).
//!
//! - a host inventory (`spec.inventory` on the NodeClass, the `inventory` module): the free
//!   hosts the template's selector matches, minus the launches in flight that hold no host
//!   yet ([`CountSource::Inventory`]); handed to [`smallest`] with the others.

use std::time::Duration;

use api::consts::annotations as ann;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::error::TemplateError;
use crate::reference::TemplateRef;

/// A count reported by an outside job, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reported {
    pub count: u32,
    /// `…/available-count-updated`.
    pub updated: Timestamp,
}

/// A template's count annotations, as read (no time, no use).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CountLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_machines: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_group_max_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported: Option<Reported>,
}

/// Where an available count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CountSource {
    /// `karpenter.cluster.x-k8s.io/max-machines` minus live Machines.
    MaxMachines,
    /// cluster-autoscaler's node-group max size minus live Machines.
    NodeGroupMaxSize,
    /// `karpenter.cluster.x-k8s.io/available-count` minus launches in flight.
    Reported,
    /// The NodeClass's host inventory: free matching hosts minus launches holding none yet.
    Inventory,
}

impl CountSource {
    /// The annotation the count comes from.
    pub fn annotation(self) -> &'static str {
        match self {
            Self::MaxMachines => ann::MAX_MACHINES,
            Self::NodeGroupMaxSize => ann::CA_NODE_GROUP_MAX_SIZE,
            Self::Reported => ann::AVAILABLE_COUNT,
            Self::Inventory => "inventory",
        }
    }
}

impl Available {
    /// The count in words: `0 of 4 hosts available`, or `2 left of max-machines 5`.
    pub fn describe(&self) -> String {
        match self.source {
            CountSource::Inventory => format!("{} of {} hosts available", self.count, self.limit),
            s => format!("{} left of {} {}", self.count, s.annotation(), self.limit),
        }
    }
}

/// An available count and the source that set it (the smallest one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Available {
    pub count: u32,
    pub source: CountSource,
    /// The source's own number before use was subtracted (the max, or the reported count).
    pub limit: u32,
}

/// How a template is used right now: Machines from it that exist (`live`, deleting ones
/// included: they still hold the capacity), and those launched without a providerID yet
/// (`in_flight`, a subset of `live`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TemplateUse {
    pub live: u32,
    pub in_flight: u32,
}

/// The smallest of `candidates`; `None` (unbounded) when there is none.
pub fn smallest(candidates: impl IntoIterator<Item = Available>) -> Option<Available> {
    candidates.into_iter().min_by_key(|a| a.count)
}

impl CountLimits {
    /// No count annotation at all: unbounded.
    pub fn is_empty(&self) -> bool {
        self.max_machines.is_none() && self.node_group_max_size.is_none() && self.reported.is_none()
    }

    /// The count available at `now` given the template's use; a reported count older than
    /// `staleness` is unknown. `None` is unbounded.
    pub fn available(
        &self,
        used: TemplateUse,
        now: Timestamp,
        staleness: Duration,
    ) -> Option<Available> {
        let fresh = |r: &Reported| {
            now.duration_since(r.updated)
                .try_into()
                .map_or(true, |age: Duration| age <= staleness)
        };
        let max = |limit: u32, source| Available {
            count: limit.saturating_sub(used.live),
            source,
            limit,
        };
        smallest(
            [
                self.max_machines.map(|m| max(m, CountSource::MaxMachines)),
                self.node_group_max_size
                    .map(|m| max(m, CountSource::NodeGroupMaxSize)),
                self.reported.filter(fresh).map(|r| Available {
                    count: r.count.saturating_sub(used.in_flight),
                    source: CountSource::Reported,
                    limit: r.count,
                }),
            ]
            .into_iter()
            .flatten(),
        )
    }
}

/// Reads a template's count annotations. A bad value (not a non-negative integer, a count
/// without a valid timestamp) is a [`TemplateError::Count`] naming the annotation.
pub(crate) fn read_limits(
    template: &TemplateRef,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<CountLimits, TemplateError> {
    let bad = |key: &str, value: &str, reason: &str| TemplateError::Count {
        template: Box::new(template.clone()),
        field: format!("metadata.annotations[{key}]"),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let count = |key: &str| -> Result<Option<u32>, TemplateError> {
        let Some(raw) = annotations.get(key) else {
            return Ok(None);
        };
        let t = raw.trim();
        if t.starts_with('-') && t[1..].parse::<u64>().is_ok() {
            return Err(bad(key, raw, "must not be negative"));
        }
        t.parse::<u32>()
            .map(Some)
            .map_err(|_| bad(key, raw, "expected a non-negative integer"))
    };
    let max_machines = count(ann::MAX_MACHINES)?;
    let node_group_max_size = count(ann::CA_NODE_GROUP_MAX_SIZE)?;
    let reported = match (
        count(ann::AVAILABLE_COUNT)?,
        annotations.get(ann::AVAILABLE_COUNT_UPDATED),
    ) {
        (None, None) => None,
        (None, Some(raw)) => {
            return Err(bad(
                ann::AVAILABLE_COUNT_UPDATED,
                raw,
                &format!("set without {}", ann::AVAILABLE_COUNT),
            ));
        }
        (Some(_), None) => {
            return Err(bad(
                ann::AVAILABLE_COUNT,
                &annotations[ann::AVAILABLE_COUNT],
                &format!(
                    "needs {} (RFC 3339) to tell when it was counted",
                    ann::AVAILABLE_COUNT_UPDATED
                ),
            ));
        }
        (Some(count), Some(raw)) => {
            let updated = raw.trim().parse::<Timestamp>().map_err(|_| {
                bad(
                    ann::AVAILABLE_COUNT_UPDATED,
                    raw,
                    "expected an RFC 3339 timestamp",
                )
            })?;
            Some(Reported { count, updated })
        }
    };
    Ok(CountLimits {
        max_machines,
        node_group_max_size,
        reported,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn tref() -> TemplateRef {
        TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
            kind: "Metal3MachineTemplate".into(),
            namespace: Some("ns".into()),
            name: "metal-large".into(),
        }
    }

    fn read(pairs: &[(&str, &str)]) -> Result<CountLimits, TemplateError> {
        let a: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read_limits(&tref(), &a)
    }

    const NOW: &str = "2026-01-01T12:00:00Z";
    const TEN_MIN: Duration = Duration::from_secs(600);

    fn now() -> Timestamp {
        NOW.parse().expect("timestamp")
    }

    #[test]
    fn parses_every_source() {
        let l = read(&[
            (ann::MAX_MACHINES, "5"),
            (ann::CA_NODE_GROUP_MAX_SIZE, " 7 "),
            (ann::AVAILABLE_COUNT, "4"),
            (ann::AVAILABLE_COUNT_UPDATED, "2026-01-01T11:55:00Z"),
        ])
        .expect("valid");
        assert_eq!(l.max_machines, Some(5));
        assert_eq!(l.node_group_max_size, Some(7));
        assert_eq!(l.reported.map(|r| r.count), Some(4));
        assert!(read(&[]).expect("none").is_empty());
    }

    #[test]
    fn bad_values_name_the_annotation() {
        for (pairs, field, reason) in [
            (
                vec![(ann::MAX_MACHINES, "three")],
                ann::MAX_MACHINES,
                "non-negative integer",
            ),
            (
                vec![(ann::CA_NODE_GROUP_MAX_SIZE, "-1")],
                ann::CA_NODE_GROUP_MAX_SIZE,
                "negative",
            ),
            (
                vec![
                    (ann::AVAILABLE_COUNT, "2"),
                    (ann::AVAILABLE_COUNT_UPDATED, "yesterday"),
                ],
                ann::AVAILABLE_COUNT_UPDATED,
                "RFC 3339",
            ),
            (
                vec![(ann::AVAILABLE_COUNT, "2")],
                ann::AVAILABLE_COUNT,
                "needs",
            ),
            (
                vec![(ann::AVAILABLE_COUNT_UPDATED, NOW)],
                ann::AVAILABLE_COUNT_UPDATED,
                "without",
            ),
        ] {
            let e = read(&pairs).expect_err("invalid");
            assert_eq!(e.reason(), "InvalidCount");
            let msg = e.to_string();
            assert!(msg.contains(field) && msg.contains(reason), "{msg}");
            assert!(
                msg.starts_with("Metal3MachineTemplate ns/metal-large"),
                "{msg}"
            );
        }
    }

    #[test]
    fn smallest_source_wins_after_use() {
        let l = CountLimits {
            max_machines: Some(5),
            node_group_max_size: Some(4),
            reported: Some(Reported {
                count: 3,
                updated: now(),
            }),
        };
        let used = |live, in_flight| TemplateUse { live, in_flight };
        // max 5 − 1 live = 4, CA 4 − 1 = 3, reported 3 − 1 in flight = 2.
        let a = l.available(used(1, 1), now(), TEN_MIN).expect("bounded");
        assert_eq!((a.count, a.source, a.limit), (2, CountSource::Reported, 3));
        // Nothing in flight: the CA max-size and the reported count tie at 3; max-machines 4.
        let a = l.available(used(1, 0), now(), TEN_MIN).expect("bounded");
        assert_eq!(a.count, 3);
        // More live than the max: zero, never negative.
        let a = l.available(used(9, 0), now(), TEN_MIN).expect("bounded");
        assert_eq!((a.count, a.source), (0, CountSource::MaxMachines));
        assert_eq!(
            CountLimits::default().available(used(100, 100), now(), TEN_MIN),
            None
        );
    }

    #[test]
    fn a_stale_report_is_unknown() {
        let at = |ts: &str| CountLimits {
            reported: Some(Reported {
                count: 1,
                updated: ts.parse().expect("timestamp"),
            }),
            ..CountLimits::default()
        };
        let used = TemplateUse::default();
        assert_eq!(
            at("2026-01-01T11:50:00Z")
                .available(used, now(), TEN_MIN)
                .map(|a| a.count),
            Some(1),
            "exactly at the staleness: still fresh"
        );
        assert_eq!(
            at("2026-01-01T11:49:59Z").available(used, now(), TEN_MIN),
            None,
            "older than the staleness: unbounded"
        );
        assert_eq!(
            at("2026-01-01T12:05:00Z")
                .available(used, now(), TEN_MIN)
                .map(|a| a.count),
            Some(1),
            "a timestamp ahead of our clock (skew) is fresh"
        );
    }
}
