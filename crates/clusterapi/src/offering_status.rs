//! What a NodeClass shows of its offerings' state (`status.offerings`) and the offering
//! gauges (`karpenter_capi_offering_available`, `karpenter_capi_offering_unavailable`):
//! each counted or backed-off offering of its catalog with its count, the source that set
//! it, why it is unavailable and until when. The counts are the ones launch and the solver
//! use ([`super::availability::counts`], with the host inventory).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::NodeClaim;
use clusterapi_api::Machine;
use clusterapi_api::nodeclass::OfferingState;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::Store;
use templates::model::Catalog;

use crate::availability::counts::OfferingCounts;
use crate::availability::hosts::Inventory;
use crate::availability::unavailable::{OfferingKey, UnavailableOfferings};
use karpenter_core::metrics::{Metrics, OfferingLabels};

/// The offerings of `catalog` that are counted or backed off, sorted by template, zone and
/// capacity type.
pub(crate) fn offerings(
    catalog: &Catalog,
    counts: &OfferingCounts,
    unavailable: &UnavailableOfferings,
    now: Instant,
) -> Vec<OfferingState> {
    let mut out: BTreeMap<(String, String, String), OfferingState> = BTreeMap::new();
    for it in &catalog.instance_types {
        for o in &it.offerings {
            let key = OfferingKey::of(o);
            let count = counts.available(catalog, it, o);
            let template = templates::model::launched_from(o);
            let backoff = unavailable.reason(&key, now);
            if count.is_none() && backoff.is_none() {
                continue;
            }
            let exhausted = count
                .filter(|a| a.count == 0)
                .map(|a| format!("template {}: {}", template.name, a.describe()));
            let state = OfferingState {
                template: template.name,
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                available: count.map(|a| i64::from(a.count)),
                source: count.map(|a| a.source.annotation().to_string()),
                limit: count.map(|a| i64::from(a.limit)),
                unavailable_reason: backoff.map(|(reason, _)| reason).or(exhausted),
                unavailable_until: unavailable.wall_until(&key, now).map(|t| {
                    t.round(k8s_openapi::jiff::Unit::Second)
                        .unwrap_or(t)
                        .to_string()
                }),
            };
            out.entry((
                state.template.clone(),
                state.zone.clone().unwrap_or_default(),
                state.capacity_type.clone(),
            ))
            .or_insert(state);
        }
    }
    out.into_values().collect()
}

/// What the NodeClass status loop reads the offerings' state from, and the gauges it sets.
#[derive(Clone)]
pub(crate) struct OfferingStatus {
    pub machines: Store<Machine>,
    pub unavailable: Arc<UnavailableOfferings>,
    pub inventory: Inventory,
    pub count_staleness: Duration,
    pub metrics: Metrics,
    /// The gauge series each NodeClass set last (dropped once no NodeClass has them).
    pub gauged: Arc<Mutex<HashMap<String, BTreeSet<OfferingLabels>>>>,
}

impl OfferingStatus {
    /// The offerings of NodeClass `nodeclass` with catalog `catalog`, now; sets its gauges.
    pub(crate) fn compute(
        &self,
        nodeclass: &str,
        catalog: Option<&Catalog>,
        claims: &[Arc<NodeClaim>],
    ) -> Vec<OfferingState> {
        let states = match catalog {
            Some(c) => {
                let counts = OfferingCounts::new(
                    claims,
                    &self.machines.state(),
                    Timestamp::now(),
                    self.count_staleness,
                )
                .with_hosts(self.inventory.tallies());
                offerings(c, &counts, &self.unavailable, Instant::now())
            }
            None => Vec::new(),
        };
        self.gauge(nodeclass, &states);
        states
    }

    fn gauge(&self, nodeclass: &str, states: &[OfferingState]) {
        let mut gauged = self.gauged.lock().unwrap_or_else(|e| e.into_inner());
        let labels = |s: &OfferingState| OfferingLabels {
            template: s.template.clone(),
            zone: s.zone.clone().unwrap_or_default(),
            capacity_type: s.capacity_type.clone(),
        };
        let now: BTreeSet<OfferingLabels> = states.iter().map(labels).collect();
        let before = gauged.insert(nodeclass.to_string(), now.clone());
        for gone in before.unwrap_or_default().difference(&now) {
            if !gauged.values().any(|set| set.contains(gone)) {
                self.metrics.offering_available.remove(gone);
                self.metrics.offering_unavailable.remove(gone);
            }
        }
        for s in states {
            let l = labels(s);
            if let Some(n) = s.available {
                self.metrics.offering_available.get_or_create(&l).set(n);
            }
            let down = i64::from(s.unavailable_reason.is_some());
            self.metrics
                .offering_unavailable
                .get_or_create(&l)
                .set(down);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use templates::count::CountLimits;
    use templates::model::{InstanceType, PriceSource, TemplateRef};

    fn catalog(limits: CountLimits) -> Catalog {
        let template = TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
            kind: "Metal3MachineTemplate".into(),
            namespace: Some("capi".into()),
            name: "metal".into(),
        };
        let o = |zone: &str| {
            templates::model::offering(
                &template,
                Some(zone.into()),
                "on-demand",
                1.0,
                PriceSource::Default,
            )
        };
        Catalog {
            limits: [(template.id(), limits)].into(),
            ..Catalog::of(vec![InstanceType {
                devices: None,
                volume_limits: Default::default(),
                name: "metal".into(),
                capacity: Default::default(),
                allocatable: Default::default(),
                labels: Default::default(),
                taints: Vec::new(),
                offerings: vec![o("z1"), o("z2")],
                capacity_overlaid: false,
            }])
        }
    }

    #[test]
    fn counted_and_backed_off_offerings_are_shown_with_why_and_until_when() {
        let now = Instant::now();
        let unavailable = UnavailableOfferings::default();
        let counts = OfferingCounts::default();
        // Unbounded and never failed: nothing to show.
        assert!(offerings(&catalog(CountLimits::default()), &counts, &unavailable, now).is_empty());
        let cat = catalog(CountLimits {
            max_machines: Some(0),
            ..CountLimits::default()
        });
        let z2 = OfferingKey::of(&cat.instance_types[0].offerings[1]);
        unavailable.mark(z2, "InsufficientCapacity: no host", now);
        let shown = offerings(&cat, &counts, &unavailable, now);
        assert_eq!(shown.len(), 2);
        let (z1, z2) = (&shown[0], &shown[1]);
        assert_eq!(z1.zone.as_deref(), Some("z1"));
        assert_eq!((z1.available, z1.limit), (Some(0), Some(0)));
        assert_eq!(
            z1.source.as_deref(),
            Some("karpenter.cluster.x-k8s.io/max-machines")
        );
        assert_eq!(
            z1.unavailable_reason.as_deref(),
            Some("template metal: 0 left of karpenter.cluster.x-k8s.io/max-machines 0")
        );
        assert!(z1.unavailable_until.is_none());
        assert_eq!(
            z2.unavailable_reason.as_deref(),
            Some("InsufficientCapacity: no host")
        );
        let until: Timestamp = z2
            .unavailable_until
            .as_deref()
            .expect("until")
            .parse()
            .expect("RFC 3339");
        let ahead = until.duration_since(Timestamp::now()).as_secs();
        assert!((170..=181).contains(&ahead), "3 minutes ahead: {ahead}s");
    }
}
