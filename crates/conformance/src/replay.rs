//! Our side: a record's input through the operator's own conversion (the cluster join and
//! `provisioning::snapshot::build`, as the provisioner builds its input from its caches) and
//! our solver; the result as a [`Plan`]. The recorded claims, volumes, StorageClasses and
//! CSINodes join the cluster as the operator's caches hold them, so the snapshot resolves
//! pending pods' volumes (`volumes::apply`), bound pods' attachments (`volumes::uses`) and
//! each node's CSINode limits; the instance type limits a node falls back on come from the
//! record's catalog (as Karpenter's scheduler looks up a state node's instance type). Bare
//! ephemeral volume claims get their pod as owner ([`Record::volume_claims`]). The recorded
//! DRA objects (ResourceClaims, ResourceClaimTemplates, DeviceClasses, ResourceSlices) join
//! the cluster too and go through the provisioner's `model::devices::dra`, each instance type
//! publishing the devices of its recorded ResourceSliceTemplates ([`dra`]); the solve is
//! `solve_with_devices`, as the provisioner's.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use karpenter_core::model::{convert, devices, volumes};
use karpenter_core::provisioning::{nodeclaim, snapshot};
use karpenter_core::state::{Cluster, DraObjects, Objects};
use scheduling::dra::{Dra, Slice};
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
        volume_limits: volume_limits(it),
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

/// A recorded instance type's attach limits per CSI driver.
fn volume_limits(it: &RecordedInstanceType) -> BTreeMap<String, u32> {
    it.volume_attachment_limits
        .iter()
        .map(|(driver, n)| {
            (
                driver.clone(),
                u32::try_from((*n).max(0)).unwrap_or(u32::MAX),
            )
        })
        .collect()
}

fn arcs<T: Clone>(v: &[T]) -> Vec<Arc<T>> {
    v.iter().cloned().map(Arc::new).collect()
}

/// The solver input for a record.
pub fn input(rec: &Record) -> Input {
    solver_input(rec).0
}

/// The solver input for a record and its DRA side.
pub fn solver_input(rec: &Record) -> (Input, Dra) {
    let pending = arcs(&rec.pods);
    let mut pods = arcs(&rec.input.bound_pods);
    pods.extend(pending.iter().cloned());
    let cluster = Cluster::new(Objects {
        pods,
        nodes: arcs(&rec.input.nodes),
        nodeclaims: arcs(&rec.input.node_claims),
        nodepools: arcs(&rec.input.node_pools),
        daemonsets: arcs(&rec.input.daemon_sets),
        pvcs: rec.volume_claims().into_iter().map(Arc::new).collect(),
        pvs: arcs(&rec.input.persistent_volumes),
        storageclasses: arcs(&rec.input.storage_classes),
        csinodes: arcs(&rec.input.csi_nodes),
        dra: DraObjects {
            classes: arcs(&rec.input.device_classes),
            claims: arcs(&rec.input.resource_claims),
            templates: arcs(&rec.input.resource_claim_templates),
            slices: arcs(&rec.input.resource_slices),
        },
        ..Objects::default()
    });
    let pools = arcs(&rec.input.node_pools);
    let snap = snapshot::build(
        &cluster,
        &pools,
        &pending,
        &|_| None,
        karpenter_core::model::convert::Availability::Ignored,
    );
    let mut input = snap.input;
    for pool in &mut input.node_pools {
        pool.instance_types = rec
            .instance_types(&pool.name)
            .iter()
            .map(instance_type)
            .collect();
    }
    for node in &mut input.nodes {
        node.volume_limits = node_volume_limits(rec, &cluster, node);
    }
    let dra = dra(rec, &cluster, &pending);
    (input, dra)
}

/// The DRA side of a record's solve: the provisioner's model of the cluster's DRA objects
/// (`model::devices::dra`, empty when no pending pod claims devices), each instance type of
/// the record's catalogs publishing the devices of its ResourceSliceTemplates (the first of a
/// name wins, as the provisioner's catalogs), their counter sets (partitionable devices)
/// included. A type's templates are one pool per driver, as the model keeps an instance
/// type's (Karpenter's templates of a driver share a pool).
pub fn dra(rec: &Record, cluster: &Cluster, pending: &[Arc<Pod>]) -> Dra {
    let mut dra = devices::dra(&cluster.dra, pending, []);
    if dra.is_empty() {
        return dra;
    }
    for it in rec.input.instance_types.values().flatten() {
        if it.resource_slice_templates.is_empty() || dra.instance_types.contains_key(&it.name) {
            continue;
        }
        let slices = it
            .resource_slice_templates
            .iter()
            .map(|t| Slice {
                counters: ::devices::counter_sets(&t.shared_counters),
                driver: t.driver.clone(),
                pool: String::new(),
                devices: t
                    .devices
                    .iter()
                    .map(|d| ::devices::device(&t.driver, d))
                    .collect(),
            })
            .collect();
        dra.instance_types.insert(it.name.clone(), slices);
    }
    dra
}

/// An existing node's attach limits: its instance type's from the record's catalog of its
/// NodePool (by its `karpenter.sh/nodepool` and instance-type labels, Karpenter's
/// `instanceTypeForNode`; the snapshot found no catalog), each driver its CSINode lists
/// replaced by what that says.
fn node_volume_limits(
    rec: &Record,
    cluster: &Cluster,
    node: &scheduling::ExistingNode,
) -> BTreeMap<String, u32> {
    let label = |k: &str| node.labels.get(k).map(String::as_str);
    let fallback = match (
        label(api::consts::labels::NODEPOOL),
        label(scheduling::LABEL_INSTANCE_TYPE),
    ) {
        (Some(pool), Some(name)) => rec
            .instance_types(pool)
            .iter()
            .find(|it| it.name == name)
            .map(volume_limits)
            .unwrap_or_default(),
        _ => BTreeMap::new(),
    };
    // An in-flight NodeClaim is named as the claim; its CSINode as its Node.
    let node_name = if cluster.node(&node.name).is_some() {
        Some(node.name.as_str())
    } else {
        cluster
            .node_of(&node.name)
            .and_then(|n| n.metadata.name.as_deref())
            .or_else(|| {
                cluster
                    .nodeclaim(&node.name)
                    .and_then(|c| karpenter_core::objects::claim_node_name(c))
            })
    };
    volumes::limits(
        &fallback,
        node_name.and_then(|n| cluster.published_limits(n)),
    )
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
    let (input, dra) = solver_input(rec);
    plan(&scheduling::solve_with_devices(&input, &dra))
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
