//! Counted offerings at solve and launch time: how each template is used now (Machines
//! from it, launches in flight) and so the count each catalog offering has left
//! ([`templates::count`] states the sources and the smallest-wins rule).
//!
//! A template's use is counted from our own labels: a NodeClaim whose launch plan names the
//! template (labels written before its Machine is created, so a launch in progress counts
//! at once), and a Machine labelled `karpenter.cluster.x-k8s.io/instance-template` in the
//! template's namespace that no such NodeClaim accounts for (another workload cluster's,
//! or one whose NodeClaim is gone). In flight: no providerID yet. A NodeClaim the
//! provisioner created that launch has not planned yet holds a unit of the instance type it
//! lists first (the one the solver held a unit for), so the next solve cannot hand that
//! unit out again before launch records the template.
//!
//! A template of a NodeClass with a host inventory ([`super::hosts`]) also counts its
//! free hosts, minus the launches in flight whose InfraMachine holds no host yet (one that
//! does is no longer free: counting it again would under-count).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use api::NodeClaim;
use api::consts::{annotations as ann, labels as label};
use cloudprovider::OfferingCount;
use clusterapi_api::Machine;
use k8s_openapi::jiff::Timestamp;
use templates::count::{Available, CountSource, TemplateUse, smallest};
use templates::model::{Catalog, InstanceType, Offering, launched_from as template};

use super::hosts::{Tallies, TemplateKey};
use super::unavailable::{OfferingKey, UnavailableOfferings};
use crate::plan::Plan;

/// The launch state of offerings now: the launch-failure backoff and the counts.
pub struct LaunchState<'a> {
    pub unavailable: &'a UnavailableOfferings,
    pub counts: &'a OfferingCounts,
    pub now: std::time::Instant,
}

impl LaunchState<'_> {
    /// Whether `offering` can be launched now (not backed off after a failed launch).
    pub fn available(&self, offering: &Offering) -> bool {
        !self
            .unavailable
            .is_unavailable(&OfferingKey::of(offering), self.now)
    }

    /// Why launch must skip `offering` (of `it`, in `catalog`) now (backed off, or no count
    /// left), if it must.
    pub fn skip(
        &self,
        catalog: &Catalog,
        it: &InstanceType,
        offering: &Offering,
    ) -> Option<String> {
        if let Some((reason, _)) = self
            .unavailable
            .reason(&OfferingKey::of(offering), self.now)
        {
            return Some(reason);
        }
        let a = self.counts.available(catalog, it, offering)?;
        let template = template(offering);
        (a.count == 0).then(|| match a.source {
            CountSource::Inventory => format!("template {}: {}", template.name, a.describe()),
            source => format!(
                "{template}: no count left ({} {})",
                source.annotation(),
                a.limit
            ),
        })
    }
}

/// The key counts keep a template's use under: its namespace and name.
fn key_of(offering: &Offering) -> TemplateKey {
    let t = template(offering);
    (t.namespace.unwrap_or_default(), t.name)
}

/// How long a reported `available-count` is trusted by default: a job that counts hosts
/// every minute or few has refreshed it many times over; one that stopped ten minutes ago
/// is broken, and unbounded (launch and learn from failures, with backoff) is safer than a
/// number nobody keeps current.
pub const DEFAULT_STALENESS: Duration = Duration::from_secs(600);

/// The use of every template, and the time and staleness counts are resolved with.
#[derive(Debug, Clone, Default)]
pub struct OfferingCounts {
    uses: HashMap<TemplateKey, TemplateUse>,
    /// NodeClaims not planned by launch yet, by the instance type they list first.
    unplanned: HashMap<String, u32>,
    /// Launches in flight per template: the InfraMachine's name and the zone.
    launching: HashMap<TemplateKey, Vec<(String, Option<String>)>>,
    /// The hosts of templates with an inventory.
    hosts: Arc<Tallies>,
    now: Option<Timestamp>,
    staleness: Duration,
}

/// A use of a template: a Machine from it, in flight when it has no providerID yet.
struct Use {
    key: TemplateKey,
    in_flight: bool,
    infra: String,
    zone: Option<String>,
}

fn bump(
    uses: &mut HashMap<TemplateKey, TemplateUse>,
    launching: &mut HashMap<TemplateKey, Vec<(String, Option<String>)>>,
    u: Use,
) {
    let e = uses.entry(u.key.clone()).or_default();
    e.live += 1;
    if u.in_flight {
        e.in_flight += 1;
        launching.entry(u.key).or_default().push((u.infra, u.zone));
    }
}

impl OfferingCounts {
    /// Counts from the NodeClaims and Machines as cached, resolved at `now`.
    pub fn new(
        claims: &[Arc<NodeClaim>],
        machines: &[Arc<Machine>],
        now: Timestamp,
        staleness: Duration,
    ) -> OfferingCounts {
        let mut uses = HashMap::new();
        let mut launching = HashMap::new();
        let mut unplanned: HashMap<String, u32> = HashMap::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for c in claims {
            let Some(plan) = Plan::of(c) else {
                if c.metadata.deletion_timestamp.is_none()
                    && let Some(first) = first_instance_type(c)
                {
                    *unplanned.entry(first.to_string()).or_default() += 1;
                }
                continue;
            };
            if let Some(uid) = c.metadata.uid.as_deref() {
                seen.insert(uid);
            }
            let launched = c.status.as_ref().and_then(|s| s.provider_id.as_ref());
            bump(
                &mut uses,
                &mut launching,
                Use {
                    key: (plan.namespace, plan.infrastructure_template.name),
                    in_flight: launched.is_none(),
                    infra: plan.infrastructure.name,
                    zone: plan.failure_domain.or(plan.zone),
                },
            );
        }
        for m in machines {
            let labels = m.metadata.labels.as_ref();
            let Some(template) = labels.and_then(|l| l.get(label::INSTANCE_TEMPLATE)) else {
                continue;
            };
            let claim_uid = m
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ann::NODECLAIM_UID));
            if claim_uid.is_some_and(|uid| seen.contains(uid.as_str())) {
                continue;
            }
            let ns = m.metadata.namespace.clone().unwrap_or_default();
            bump(
                &mut uses,
                &mut launching,
                Use {
                    key: (ns, template.clone()),
                    in_flight: m.spec.provider_id.is_none(),
                    infra: m.spec.infrastructure_ref.name.clone(),
                    zone: m.spec.failure_domain.clone(),
                },
            );
        }
        OfferingCounts {
            uses,
            unplanned,
            launching,
            hosts: Arc::default(),
            now: Some(now),
            staleness,
        }
    }

    /// These counts with the hosts of the templates with an inventory.
    pub fn with_hosts(mut self, hosts: Tallies) -> OfferingCounts {
        self.hosts = Arc::new(hosts);
        self
    }

    /// Counts for launching `claim`: it is not planned yet, so it holds no unit of its own.
    pub fn launching(mut self, claim: &NodeClaim) -> OfferingCounts {
        if Plan::of(claim).is_none()
            && let Some(n) = first_instance_type(claim).and_then(|t| self.unplanned.get_mut(t))
        {
            *n = n.saturating_sub(1);
        }
        self
    }

    /// The use of the template `offering` (of instance type `it`) is launched from:
    /// NodeClaims and Machines from it, and NodeClaims not yet planned that list `it` first.
    pub fn use_of(&self, it: &InstanceType, offering: &Offering) -> TemplateUse {
        let key = key_of(offering);
        let mut u = self.uses.get(&key).copied().unwrap_or_default();
        let unplanned = self.unplanned.get(&it.name).copied().unwrap_or(0);
        u.live += unplanned;
        u.in_flight += unplanned;
        u
    }

    /// The count `offering` (of instance type `it`, in `catalog`) has left now; `None` is
    /// unbounded.
    pub fn available(
        &self,
        catalog: &Catalog,
        it: &InstanceType,
        offering: &Offering,
    ) -> Option<Available> {
        let limits = catalog.limits_of(offering);
        let limits = (!limits.is_empty())
            .then(|| {
                let now = self.now.unwrap_or_else(Timestamp::now);
                limits.available(self.use_of(it, offering), now, self.staleness)
            })
            .flatten();
        smallest(limits.into_iter().chain(self.hosts_available(it, offering)))
    }

    /// The offering's count of free hosts (templates with an inventory only): the free
    /// hosts of its zone minus the launches in flight there holding none yet and the
    /// NodeClaims not planned yet that list its instance type first.
    fn hosts_available(&self, it: &InstanceType, offering: &Offering) -> Option<Available> {
        let key = key_of(offering);
        let tally = self.hosts.get(&key)?;
        let zone = offering.zone.as_deref();
        let in_zone = |z: &Option<String>| !tally.zone_split || z.is_none() || z.as_deref() == zone;
        let launching = self.launching.get(&key).map_or(0, |l| {
            l.iter()
                .filter(|(infra, z)| in_zone(z) && !tally.consumers.contains(infra))
                .count()
        });
        let unplanned = self.unplanned.get(&it.name).copied().unwrap_or(0);
        let pending = u32::try_from(launching)
            .unwrap_or(u32::MAX)
            .saturating_add(unplanned);
        Some(tally.available(zone, pending))
    }

    /// The offering's count as the solver shares it: one per template, named with the
    /// source that set it, with what to say once none is left.
    pub fn count(
        &self,
        catalog: &Catalog,
        it: &InstanceType,
        offering: &Offering,
    ) -> Option<OfferingCount> {
        let a = self.available(catalog, it, offering)?;
        let template = template(offering);
        let key = match (&a.source, &offering.zone) {
            // Hosts split per zone: each zone's count is its own.
            (CountSource::Inventory, Some(z)) if self.split(offering) => {
                format!("template {template} zone {z}, inventory")
            }
            _ => format!("template {template}, {} {}", a.source.annotation(), a.limit),
        };
        // Exhausted: none left once the solve handed out what it had.
        let none_left = Available { count: 0, ..a };
        Some(OfferingCount {
            key,
            available: a.count,
            exhausted: format!("template {}: {}", template.name, none_left.describe()),
        })
    }

    /// Whether the offering's template counts its hosts per zone.
    fn split(&self, offering: &Offering) -> bool {
        self.hosts
            .get(&key_of(offering))
            .is_some_and(|h| h.zone_split)
    }
}

/// The instance type a NodeClaim lists first (the solver lists the preferred one first).
fn first_instance_type(claim: &NodeClaim) -> Option<&str> {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == label::INSTANCE_TYPE)
        .and_then(|r| r.values.first())
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use templates::count::{CountLimits, CountSource, Reported};
    use templates::model::{PriceSource, TemplateRef};

    /// The offering of the `metal` template (its count annotations are the catalog's:
    /// [`limited`]).
    fn offering() -> Offering {
        let template = TemplateRef {
            api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
            kind: "Metal3MachineTemplate".into(),
            namespace: Some("capi".into()),
            name: "metal".into(),
        };
        Offering {
            id: template.id(),
            zone: None,
            capacity_type: "on-demand".into(),
            price: 1.0,
            price_source: PriceSource::Default,
            reservation_id: None,
            labels: Default::default(),
            available: true,
            count: None,
        }
    }

    /// A catalog whose `metal` template has `limits`.
    fn limited(limits: CountLimits) -> Catalog {
        Catalog {
            limits: [(offering().id, limits)].into(),
            ..Catalog::default()
        }
    }

    fn metal() -> InstanceType {
        InstanceType {
            devices: None,
            volume_limits: Default::default(),
            name: "metal-type".into(),
            capacity: Default::default(),
            allocatable: Default::default(),
            labels: Default::default(),
            taints: Vec::new(),
            offerings: Vec::new(),
            capacity_overlaid: false,
        }
    }

    /// A NodeClaim the provisioner created, not planned by launch yet.
    fn unplanned(name: &str, first_type: &str) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": format!("uid-{name}")},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                         "requirements": [{"key": label::INSTANCE_TYPE, "operator": "In",
                                           "values": [first_type, "other-type"]}]}
            }))
            .expect("claim"),
        )
    }

    fn claim(name: &str, template: &str, provider_id: Option<&str>) -> Arc<NodeClaim> {
        let plan = json!({"namespace": "capi", "machine": name, "cluster": "c", "instanceType": "m",
            "capacityType": "on-demand", "price": 1.0,
            "infrastructureTemplate": {"apiVersion": "v", "kind": "Metal3MachineTemplate", "name": template},
            "infrastructure": {"apiVersion": "v", "kind": "Metal3Machine", "name": name},
            "labels": {}, "capacity": {}, "allocatable": {}});
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "uid": format!("uid-{name}"),
                             "annotations": {ann::LAUNCH_PLAN: plan.to_string()}},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
                "status": {"providerID": provider_id}
            }))
            .expect("claim"),
        )
    }

    fn machine(name: &str, claim_uid: &str, provider_id: Option<&str>) -> Arc<Machine> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "capi",
                             "labels": {label::INSTANCE_TEMPLATE: "metal"},
                             "annotations": {ann::NODECLAIM_UID: claim_uid}},
                "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": name},
                         "providerID": provider_id}
            }))
            .expect("machine"),
        )
    }

    fn now() -> Timestamp {
        "2026-01-01T12:00:00Z".parse().expect("timestamp")
    }

    #[test]
    fn claims_and_machines_count_once_and_in_flight_without_provider_id() {
        let claims = [
            claim("a", "metal", Some("metal://a")),
            claim("b", "metal", None),
            claim("other", "other", None),
        ];
        let machines = [
            // a's own Machine: already counted through its claim.
            machine("a", "uid-a", Some("metal://a")),
            // Another cluster's Machine from the same template, still provisioning.
            machine("x", "uid-elsewhere", None),
        ];
        let counts = OfferingCounts::new(&claims, &machines, now(), DEFAULT_STALENESS);
        let o = offering();
        let unbounded = limited(CountLimits::default());
        assert_eq!(
            counts.use_of(&metal(), &o),
            TemplateUse {
                live: 3,
                in_flight: 2
            }
        );
        assert_eq!(
            counts.available(&unbounded, &metal(), &o),
            None,
            "no annotation: unbounded"
        );
    }

    #[test]
    fn in_flight_launches_consume_a_reported_count_and_live_machines_the_max() {
        let claims = [
            claim("a", "metal", Some("metal://a")),
            claim("b", "metal", None),
        ];
        let counts = OfferingCounts::new(&claims, &[], now(), DEFAULT_STALENESS);
        let reported = limited(CountLimits {
            reported: Some(Reported {
                count: 4,
                updated: now(),
            }),
            ..CountLimits::default()
        });
        let o = offering();
        // The job counted 4 free hosts; b's launch is in flight and not seen by the job yet.
        assert_eq!(
            counts.available(&reported, &metal(), &o).map(|a| a.count),
            Some(3)
        );
        let max = limited(CountLimits {
            max_machines: Some(3),
            ..CountLimits::default()
        });
        let a = counts.available(&max, &metal(), &o).expect("bounded");
        assert_eq!((a.count, a.source), (1, CountSource::MaxMachines));
        let shared = counts.count(&max, &metal(), &o).expect("bounded");
        assert_eq!(
            shared.key,
            "template Metal3MachineTemplate capi/metal, karpenter.cluster.x-k8s.io/max-machines 3"
        );
        assert_eq!(shared.available, 1);
        assert_eq!(
            shared.exhausted,
            "template metal: 0 left of karpenter.cluster.x-k8s.io/max-machines 3"
        );
    }

    #[test]
    fn claims_not_planned_yet_hold_a_unit_of_their_first_type_except_when_launching() {
        let waiting = unplanned("w", "metal-type");
        let claims = [
            claim("a", "metal", None),
            Arc::clone(&waiting),
            unplanned("x", "other-type"),
        ];
        let max = limited(CountLimits {
            max_machines: Some(3),
            ..CountLimits::default()
        });
        let o = offering();
        let counts = OfferingCounts::new(&claims, &[], now(), DEFAULT_STALENESS);
        // a (planned) and w (lists metal-type first); x holds a unit of another type.
        assert_eq!(
            counts.available(&max, &metal(), &o).map(|a| a.count),
            Some(1)
        );
        // Launching w: its own unit is what it launches with.
        let launching = counts.launching(&waiting);
        assert_eq!(
            launching.available(&max, &metal(), &o).map(|a| a.count),
            Some(2)
        );
    }

    #[test]
    fn free_hosts_count_less_the_launches_holding_none_yet() {
        use templates::inventory::{HostQuery, HostSelector, tally};
        let q = HostQuery::of(
            &serde_json::from_value(json!({"preset": "Metal3", "zoneLabel": "zone"})).expect("inv"),
        )
        .expect("query");
        let host = |name: &str, zone: &str, consumer: Option<&str>| -> kube::api::DynamicObject {
            serde_json::from_value(json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                "metadata": {"name": name, "namespace": "capi", "labels": {"zone": zone}},
                "spec": {"consumerRef": consumer.map(|c| json!({"name": c}))},
                "status": {"provisioning": {"state": if consumer.is_some() {"provisioned"} else {"available"}}}}))
            .expect("host")
        };
        // z1: 3 hosts, one taken by b's InfraMachine (b is in flight, holding it); z2: 1 free.
        let hosts = [
            host("h1", "z1", None),
            host("h2", "z1", None),
            host("h3", "z1", Some("b")),
            host("h4", "z2", None),
        ];
        let tallies = Tallies::from([(
            ("capi".to_string(), "metal".to_string()),
            tally(&q, &HostSelector::default(), "capi", &hosts),
        )]);
        // a: launched (providerID); b: in flight holding h3; c: in flight holding none yet.
        let with_zone = |name: &str, pid: Option<&str>| {
            let mut c = (*claim(name, "metal", pid)).clone();
            let ann = c.metadata.annotations.get_or_insert_with(Default::default);
            let mut plan: serde_json::Value =
                serde_json::from_str(&ann[ann::LAUNCH_PLAN]).expect("plan");
            plan["failureDomain"] = json!("z1");
            ann.insert(ann::LAUNCH_PLAN.into(), plan.to_string());
            Arc::new(c)
        };
        let claims = [
            with_zone("a", Some("metal://a")),
            with_zone("b", None),
            with_zone("c", None),
        ];
        let counts =
            OfferingCounts::new(&claims, &[], now(), DEFAULT_STALENESS).with_hosts(tallies);
        let unbounded = limited(CountLimits::default());
        let mut z1 = offering();
        z1.zone = Some("z1".into());
        let a = counts
            .available(&unbounded, &metal(), &z1)
            .expect("counted");
        // 2 free in z1, minus c (b already holds h3): 1 of the 3 hosts of z1.
        assert_eq!((a.count, a.source, a.limit), (1, CountSource::Inventory, 3));
        assert_eq!(a.describe(), "1 of 3 hosts available");
        let shared = counts.count(&unbounded, &metal(), &z1).expect("counted");
        assert!(shared.key.contains("zone z1"), "{}", shared.key);
        assert_eq!(shared.exhausted, "template metal: 0 of 3 hosts available");
        let mut z2 = z1.clone();
        z2.zone = Some("z2".into());
        assert_eq!(
            counts.available(&unbounded, &metal(), &z2).map(|a| a.count),
            Some(1)
        );
        // A max-machines smaller than the free hosts wins.
        let capped = limited(CountLimits {
            max_machines: Some(3),
            ..CountLimits::default()
        });
        let a = counts.available(&capped, &metal(), &z2).expect("counted");
        assert_eq!((a.count, a.source), (0, CountSource::MaxMachines));
    }
}
