//! Our side: a record's input through the operator's own conversion (the cluster join and
//! `provisioning::snapshot::build`, as the provisioner builds its input from its caches) and
//! our solver; the result as a [`Plan`].

use std::collections::BTreeMap;
use std::sync::Arc;

use controller::provisioning::{convert, nodeclaim, snapshot};
use controller::state::{Cluster, Objects};
use scheduling::{Input, InstanceType, Offering, Output};

use crate::check::{Plan, PlannedClaim};
use crate::record::{Record, RecordedInstanceType};

/// Keys our instance types derive from the name and the offerings.
const DERIVED: [&str; 3] = [
    scheduling::LABEL_INSTANCE_TYPE,
    scheduling::LABEL_ZONE,
    scheduling::LABEL_CAPACITY_TYPE,
];

/// A recorded instance type as the solver's (as `hack/bench`'s `vs_karpenter` converts
/// Karpenter's fake catalog). Offerings keep zone, capacity type, price and availability.
pub fn instance_type(it: &RecordedInstanceType) -> InstanceType {
    let requirements: Vec<_> = it
        .requirements
        .iter()
        .filter(|r| !DERIVED.contains(&r.key.as_str()))
        .cloned()
        .collect();
    InstanceType {
        volume_limits: Default::default(),
        name: it.name.clone(),
        requirements: convert::requirements(&requirements),
        capacity: convert::resources(&it.capacity),
        overhead: convert::resources(&it.overhead),
        offerings: it
            .offerings
            .iter()
            .map(|o| Offering {
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                price: o.price,
                available: o.available,
                count: None,
            })
            .collect(),
        taints: Vec::new(),
    }
}

fn arcs<T: Clone>(v: &[T]) -> Vec<Arc<T>> {
    v.iter().cloned().map(Arc::new).collect()
}

/// The solver input for a record.
pub fn input(rec: &Record) -> Input {
    let pending = arcs(&rec.pods);
    let mut pods = arcs(&rec.input.bound_pods);
    pods.extend(pending.iter().cloned());
    let cluster = Cluster::new(Objects {
        pods,
        nodes: arcs(&rec.input.nodes),
        nodeclaims: arcs(&rec.input.node_claims),
        nodepools: arcs(&rec.input.node_pools),
        daemonsets: arcs(&rec.input.daemon_sets),
        ..Objects::default()
    });
    let pools = arcs(&rec.input.node_pools);
    let snap = snapshot::build(
        &cluster,
        &pools,
        &pending,
        &|_| None,
        controller::provisioning::convert::Availability::Ignored,
    );
    let mut input = snap.input;
    for pool in &mut input.node_pools {
        pool.instance_types = rec
            .instance_types(&pool.name)
            .iter()
            .map(instance_type)
            .collect();
    }
    input
}

/// Our solver's output as a plan.
pub fn plan(out: &Output) -> Plan {
    let key = |p: &scheduling::PodRef| format!("{}/{}", p.namespace, p.name);
    let mut existing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &out.existing {
        existing
            .entry(p.node.clone())
            .or_default()
            .push(key(&p.pod));
    }
    Plan {
        claims: out
            .new_node_claims
            .iter()
            .map(|c| PlannedClaim {
                node_pool: c.node_pool.clone(),
                requirements: nodeclaim::api_requirements(&c.requirements),
                instance_types: c.instance_types().to_vec(),
                pods: c.pods.iter().map(key).collect(),
            })
            .collect(),
        existing,
        failed: out
            .unschedulable
            .iter()
            .map(|u| (key(&u.pod), u.reason.clone()))
            .collect(),
    }
}

/// Replays a record: our plan.
pub fn ours(rec: &Record) -> Plan {
    plan(&scheduling::solve(&input(rec)))
}

/// Karpenter's recorded result as a plan.
pub fn karpenter(rec: &Record) -> Plan {
    let k = &rec.karpenter;
    Plan {
        claims: k
            .node_claims
            .iter()
            .map(|c| PlannedClaim {
                node_pool: c.node_pool.clone(),
                requirements: c.requirements.clone(),
                instance_types: c.instance_types.clone(),
                pods: c.pods.clone(),
            })
            .collect(),
        existing: k
            .existing
            .iter()
            .map(|e| (e.node.clone(), e.pods.clone()))
            .collect(),
        failed: k.pod_errors.clone(),
    }
}
