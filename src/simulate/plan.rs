//! The provisioner's plan for a loaded snapshot: catalogs, the scheduling simulation, totals.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;
use templates::model::Catalog;

use karpenter_core::model::convert;
use karpenter_core::model::convert::Availability;
use karpenter_core::objects::{name, namespaced_name, pod_node_name, terminal};
use karpenter_core::provisioning::snapshot;
use karpenter_core::state::Cluster;

use super::counts::{Counted, CountedTemplate, counted_templates};
use super::disruption::{DisruptionVerdict, disruption};
use super::{Loaded, pod_ref};

/// One NodeClass's catalog, as `instance-types` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSummary {
    pub name: String,
    pub cluster: Option<String>,
    pub instance_types: usize,
    pub zones: Vec<String>,
    /// Templates left out of the catalog (`kind ns/name: reason`).
    pub excluded: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSummary {
    pub name: String,
    pub node_class: String,
    pub weight: i64,
    /// Instance types of its NodeClass with an offering the pool's requirements allow.
    pub instance_types: usize,
    pub taints: Vec<String>,
}

/// A NodeClaim the provisioner would create.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedNodeClaim {
    pub node_pool: String,
    /// The cheapest compatible offering: what the operator launches.
    pub instance_type: String,
    /// `kubernetes.io/arch` of the instance type.
    pub arch: String,
    pub zone: String,
    pub capacity_type: String,
    pub price_per_hour: f64,
    /// All candidate instance types, cheapest first (the NodeClaim's requirement).
    pub instance_types: Vec<String>,
    /// Pods' requests plus DaemonSet overhead.
    pub requests: BTreeMap<String, String>,
    /// `namespace/name`.
    pub pods: Vec<String>,
    /// For a resizable template: the size the NodeClaim is shrunk to (`instance_type`
    /// names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<PlannedSize>,
}

/// The size of a NodeClaim of a resizable template.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedSize {
    /// vCPUs.
    pub cpu: String,
    pub memory: String,
}

/// Pods the solver put on a Node or an in-flight NodeClaim of the snapshot.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingPlacement {
    pub node: String,
    /// `node` (Ready, initialized) or `in-flight` (a NodeClaim or its uninitialized Node).
    pub state: String,
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnplaceablePod {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    pub node_claims: usize,
    pub price_per_hour: f64,
    pub pods_placed: usize,
    pub pods_on_new_node_claims: usize,
    pub pods_on_existing: usize,
    pub pods_unplaceable: usize,
    /// What `price_per_hour` would have been with Karpenter's first-fit packing, when the
    /// price-aware plan beat it (`scheduling::Output::first_fit_price`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_fit_price_per_hour: Option<f64>,
}

/// The provisioner's plan for a snapshot.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub pods_pending: usize,
    pub pods_bound: usize,
    pub nodes: usize,
    pub in_flight_node_claims: usize,
    pub daemon_sets: usize,
    pub node_classes: Vec<NodeClassSummary>,
    pub node_pools: Vec<NodePoolSummary>,
    pub warnings: Vec<String>,
    /// Objects of kinds the simulation does not read.
    pub ignored: Vec<String>,
    pub node_claims: Vec<PlannedNodeClaim>,
    pub existing: Vec<ExistingPlacement>,
    pub unplaceable: Vec<UnplaceablePod>,
    /// Templates with a count (max-machines, node-group max size, reported count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counted_templates: Vec<CountedTemplate>,
    pub total: Total,
    /// With existing NodeClaims: each one's disruption verdict now.
    pub disruption: Vec<DisruptionVerdict>,
    /// NodeClaims of the snapshot with `Drifted=True`, and their replacements.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<super::DriftedNodeClaim>,
}

pub(crate) type Catalogs = HashMap<String, Arc<Catalog>>;

/// Builds the catalogs, runs the provisioner's scheduling simulation and collects the plan.
pub fn plan(loaded: &Loaded) -> Plan {
    let mut warnings = loaded.warnings.clone();
    let (node_classes, catalogs) = node_class_catalogs(loaded, &mut warnings);
    let mut node_pools = node_pool_summaries(loaded, &catalogs, &mut warnings);
    let cluster = Cluster::new(loaded.state.clone());
    let counted = Counted::of(&cluster).with_hosts(loaded, &catalogs);
    // As the provider offers them: each offering with its count.
    let catalogs = counted.offer(&catalogs);
    // Hosts an inventory counts are read, not ignored.
    let hosts = super::counts::inventory_kinds(loaded);
    let ignored: Vec<String> = loaded
        .ignored
        .iter()
        .filter(|w| !hosts.iter().any(|k| w.starts_with(&format!("{k} "))))
        .cloned()
        .collect();
    let snap = snapshot::build(
        &cluster,
        &cluster.nodepools,
        &loaded.pending,
        &|nc| catalogs.get(nc).map(|c| c.types.clone()),
        Availability::Offered,
    );
    for summary in &mut node_pools {
        if let Some(p) = snap
            .input
            .node_pools
            .iter()
            .find(|p| p.name == summary.name)
        {
            summary.instance_types = compatible_instance_types(p);
        }
    }
    warn_bound_elsewhere(loaded, &snap.input, &mut warnings);
    let mut seen = HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    let dra = devices::dra(
        loaded.dra.objects(),
        loaded.pending.iter().map(AsRef::as_ref),
        catalogs.values().flat_map(|c| c.instance_types.iter()),
    );
    let output = scheduling::solve_with_devices(&snap.input, &dra);
    let mut node_claims = planned_node_claims(loaded, &catalogs, &output);
    let static_claims = super::static_pools::planned(&cluster, &catalogs, &mut warnings);
    node_claims.extend(
        static_claims
            .iter()
            .map(|c| planned_node_claim(loaded, &catalogs, c)),
    );
    for p in super::static_pools::pools(&cluster, &catalogs) {
        if let Some(s) = node_pools.iter_mut().find(|s| s.name == p.name) {
            s.instance_types = compatible_instance_types(&p);
        }
    }
    let counted_templates = counted_templates(&counted, &catalogs, &output);
    let existing = existing_placements(&snap.input, &output);
    let unplaceable = unplaceable(loaded, &cluster, &output);
    let total = total(&node_claims, &output, unplaceable.len());
    let nodes_in = |state| snap.input.nodes.iter().filter(|n| n.state == state).count();
    Plan {
        pods_pending: loaded.pending.len(),
        pods_bound: loaded
            .state
            .pods
            .iter()
            .filter(|p| pod_node_name(p).is_some())
            .count(),
        nodes: nodes_in(scheduling::NodeState::Ready),
        in_flight_node_claims: nodes_in(scheduling::NodeState::InFlight),
        daemon_sets: loaded.state.daemonsets.len(),
        node_classes,
        node_pools,
        warnings,
        ignored,
        node_claims,
        existing,
        unplaceable,
        counted_templates,
        total,
        disruption: disruption(
            &cluster,
            &catalogs,
            &|nc| manual_drift(loaded, nc),
            k8s_openapi::jiff::Timestamp::now(),
        ),
        drifted: super::drift::drifted(&cluster, &catalogs),
    }
}

/// The plan's totals: what its new NodeClaims cost and where the pods go.
fn total(
    node_claims: &[PlannedNodeClaim],
    output: &scheduling::Output,
    unplaceable: usize,
) -> Total {
    let on_new: usize = node_claims.iter().map(|c| c.pods.len()).sum();
    let on_existing = output.existing.len();
    let price_per_hour = node_claims
        .iter()
        .fold(0.0, |sum, c| sum + c.price_per_hour);
    Total {
        node_claims: node_claims.len(),
        price_per_hour,
        first_fit_price_per_hour: output
            .first_fit_price
            .map(|ff| price_per_hour - output.price() + ff),
        pods_placed: on_new + on_existing,
        pods_on_new_node_claims: on_new,
        pods_on_existing: on_existing,
        pods_unplaceable: unplaceable,
    }
}

/// Bound pods whose node is not a Ready Node or NodeClaim of the snapshot.
fn warn_bound_elsewhere(loaded: &Loaded, input: &scheduling::Input, warnings: &mut Vec<String>) {
    for p in &loaded.state.pods {
        let Some(node) = pod_node_name(p) else {
            continue;
        };
        if !input.nodes.iter().any(|n| n.name == node) && !terminal(p) {
            warnings.push(format!(
                "Pod {}: bound to {node}, which is not a Ready Node or NodeClaim of the snapshot",
                namespaced_name(p.as_ref())
            ));
        }
    }
}

/// Each NodeClass's catalog (as `instance-types` builds it) and its summary; problems become
/// warnings.
pub(crate) fn node_class_catalogs(
    loaded: &Loaded,
    warnings: &mut Vec<String>,
) -> (Vec<NodeClassSummary>, Catalogs) {
    let mut node_classes = Vec::new();
    let mut catalogs: Catalogs = HashMap::new();
    let mut names = HashSet::new();
    for nc in &loaded.inputs.node_classes {
        let name = nc.metadata.name.clone().unwrap_or_default();
        if !names.insert(name.clone()) {
            warnings.push(format!(
                "NodeClass {name}: defined more than once, the last one is used"
            ));
        }
    }
    if loaded.inputs.node_classes.is_empty() {
        return (node_classes, catalogs);
    }
    for r in templates::offline::reports(&loaded.inputs) {
        let name = r.node_class.clone().unwrap_or_default();
        for w in &r.warnings {
            warnings.push(format!("NodeClass {name}: {w}"));
        }
        if let Some(e) = &r.error {
            warnings.push(format!(
                "NodeClass {name}: {e}: its NodePools get no instance types"
            ));
        }
        let Some(c) = r.catalog else {
            continue;
        };
        let excluded: Vec<String> = c
            .excluded
            .iter()
            .map(|e| format!("{}: {}: {}", e.template, e.error.reason(), e.error.detail()))
            .collect();
        for e in &excluded {
            warnings.push(format!("NodeClass {name}: template excluded: {e}"));
        }
        let mut zones: Vec<String> = c
            .instance_types
            .iter()
            .flat_map(|it| it.offerings.iter().filter_map(|o| o.zone.clone()))
            .collect();
        zones.sort();
        zones.dedup();
        node_classes.push(NodeClassSummary {
            name: name.clone(),
            cluster: r.cluster.clone(),
            instance_types: c.instance_types.len(),
            zones,
            excluded,
        });
        catalogs.insert(name, Arc::new(c));
    }
    apply_overlays(&loaded.overlays, &mut catalogs, warnings);
    (node_classes, catalogs)
}

/// The snapshot's NodeOverlays evaluated over every catalog and applied as the operator
/// applies them; one that conflicts or is invalid becomes a warning.
fn apply_overlays(
    overlays: &[api::NodeOverlay],
    catalogs: &mut Catalogs,
    warnings: &mut Vec<String>,
) {
    if overlays.is_empty() {
        return;
    }
    let parsed = overlays
        .iter()
        .map(|o| {
            cloudprovider::overlay::Overlay::from_api(o).map_err(|why| {
                let name = o.metadata.name.clone().unwrap_or_default();
                (name, o.spec.weight.unwrap_or(0), why)
            })
        })
        .collect();
    let mut names: Vec<String> = catalogs.keys().cloned().collect();
    names.sort();
    let bases: Vec<&[cloudprovider::InstanceType]> = names
        .iter()
        .filter_map(|n| catalogs.get(n).map(|c| &c.instance_types[..]))
        .collect();
    let evaluation = cloudprovider::overlay::evaluate(parsed, &bases);
    for (name, outcome) in &evaluation.outcomes {
        match &outcome.verdict {
            cloudprovider::overlay::Verdict::Applied => {}
            cloudprovider::overlay::Verdict::Conflict { with, what } => warnings.push(format!(
                "NodeOverlay {name}: conflicts with NodeOverlay {with} (same weight) on the {what}; not applied"
            )),
            cloudprovider::overlay::Verdict::Invalid(why) => {
                warnings.push(format!("NodeOverlay {name}: {why}; not applied"))
            }
        }
    }
    for c in catalogs.values_mut() {
        let types = Arc::new(cloudprovider::overlay::apply(&c.types, &evaluation.applied));
        *c = Arc::new(Catalog {
            types,
            ..Catalog::clone(c)
        });
    }
}

/// Each NodePool's summary (its instance types are counted once the snapshot is built); a
/// NodeClass reference that yields nothing becomes a warning.
fn node_pool_summaries(
    loaded: &Loaded,
    catalogs: &Catalogs,
    warnings: &mut Vec<String>,
) -> Vec<NodePoolSummary> {
    let mut node_pools = Vec::new();
    for p in &loaded.state.nodepools {
        let pool = name(p.as_ref());
        let reference = &p.spec.template.spec.node_class_ref;
        let nc = reference.name.as_str();
        let kind = reference.kind.as_str();
        if kind != templates::offline::NODE_CLASS_KIND {
            warnings.push(format!(
                "NodePool {pool}: nodeClassRef.kind is {kind:?}, expected {}",
                templates::offline::NODE_CLASS_KIND
            ));
        }
        if !loaded
            .inputs
            .node_classes
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(nc))
        {
            warnings.push(format!(
                "NodePool {pool}: ClusterAPINodeClass {nc:?} (nodeClassRef) is not in the snapshot: no instance types"
            ));
        } else if catalogs
            .get(nc)
            .is_some_and(|c| c.instance_types.is_empty())
        {
            warnings.push(format!(
                "NodePool {pool}: NodeClass {nc} selects no usable template: no instance types"
            ));
        }
        node_pools.push(NodePoolSummary {
            name: pool.to_string(),
            node_class: nc.to_string(),
            weight: i64::from(p.spec.weight.unwrap_or(0)),
            instance_types: 0,
            taints: convert::taints(&p.spec.template.spec.taints)
                .iter()
                .map(taint_text)
                .collect(),
        });
    }
    node_pools
}

/// The NodeClaims the solver would create.
fn planned_node_claims(
    loaded: &Loaded,
    catalogs: &Catalogs,
    output: &scheduling::Output,
) -> Vec<PlannedNodeClaim> {
    output
        .new_node_claims
        .iter()
        .map(|c| planned_node_claim(loaded, catalogs, c))
        .collect()
}

/// The plan's view of one claim the solver (or a static pool's template) planned.
fn planned_node_claim(
    loaded: &Loaded,
    catalogs: &Catalogs,
    c: &scheduling::NewNodeClaim,
) -> PlannedNodeClaim {
    let catalog = loaded
        .state
        .nodepools
        .iter()
        .find(|p| name(p.as_ref()) == c.node_pool)
        .and_then(|p| catalogs.get(&p.spec.template.spec.node_class_ref.name));
    // As the provisioner writes it: shrunk to its size when resizable.
    let shrunk = catalog.and_then(|cat| {
        let (size, names) = karpenter_core::provisioning::nodeclaim::shrink(cat, c)?;
        let it = cat.lookup(names.first()?)?.into_owned();
        Some((size, names, it))
    });
    let it = match &shrunk {
        Some((_, _, it)) => Some(std::borrow::Cow::Borrowed(it)),
        None => catalog.and_then(|cat| cat.lookup(&c.cheapest.instance_type)),
    };
    let price = shrunk
        .as_ref()
        .and_then(|(_, _, it)| {
            it.offerings.iter().find(|o| {
                o.zone.as_deref().unwrap_or("") == c.cheapest.zone
                    && o.capacity_type == c.cheapest.capacity_type
            })
        })
        .map_or(c.cheapest.price, |o| o.price);
    PlannedNodeClaim {
        node_pool: c.node_pool.clone(),
        instance_type: it
            .as_ref()
            .map_or_else(|| c.cheapest.instance_type.clone(), |it| it.name.clone()),
        arch: it
            .as_ref()
            .and_then(|it| it.labels.get(scheduling::LABEL_ARCH))
            .cloned()
            .unwrap_or_default(),
        zone: c.cheapest.zone.clone(),
        capacity_type: c.cheapest.capacity_type.clone(),
        price_per_hour: price,
        instance_types: shrunk
            .as_ref()
            .map_or_else(|| c.instance_types().to_vec(), |(_, n, _)| n.clone()),
        requests: convert::quantities(&c.requests)
            .into_iter()
            .map(|(k, q)| (k, q.0))
            .collect(),
        pods: c.pods.iter().map(pod_ref).collect(),
        size: shrunk.map(|(s, _, _)| PlannedSize {
            cpu: s.vcpus().to_string(),
            memory: templates::quantity::format_bytes(s.memory),
        }),
    }
}

/// The pods the solver put on Nodes and in-flight NodeClaims, grouped by node.
fn existing_placements(
    input: &scheduling::Input,
    output: &scheduling::Output,
) -> Vec<ExistingPlacement> {
    let mut existing: Vec<ExistingPlacement> = Vec::new();
    for p in &output.existing {
        match existing.iter_mut().find(|e| e.node == p.node) {
            Some(e) => e.pods.push(pod_ref(&p.pod)),
            None => {
                let in_flight = input
                    .nodes
                    .iter()
                    .any(|n| n.name == p.node && n.state == scheduling::NodeState::InFlight);
                existing.push(ExistingPlacement {
                    node: p.node.clone(),
                    state: if in_flight { "in-flight" } else { "node" }.into(),
                    pods: vec![pod_ref(&p.pod)],
                });
            }
        }
    }
    existing
}

/// How many of a pool's instance types its requirements allow (labels and an offering).
pub(super) fn compatible_instance_types(pool: &scheduling::NodePool) -> usize {
    let reqs = scheduling::Requirements::from_list(&pool.requirements);
    let allows = |key: &str, value: &str| {
        reqs.get(&key.to_string())
            .is_none_or(|set| set.has(&value.to_string()))
    };
    pool.instance_types
        .iter()
        .filter(|it| {
            reqs.intersects(&scheduling::Requirements::from_list(&it.requirements))
                .is_ok()
                && it.offerings.iter().any(|o| {
                    allows(scheduling::LABEL_ZONE, &o.zone)
                        && allows(scheduling::LABEL_CAPACITY_TYPE, &o.capacity_type)
                })
        })
        .count()
}

pub(super) fn taint_text(t: &scheduling::Taint) -> String {
    let effect = convert::effect_name(t.effect);
    if t.value.is_empty() {
        format!("{}:{effect}", t.key)
    } else {
        format!("{}={}:{effect}", t.key, t.value)
    }
}

/// The pods no plan places, each with the solver's reason and what its volumes pin it to.
fn unplaceable(
    loaded: &Loaded,
    cluster: &Cluster,
    output: &scheduling::Output,
) -> Vec<UnplaceablePod> {
    output
        .unschedulable
        .iter()
        .map(|u| {
            let pod = loaded
                .pending
                .iter()
                .find(|p| p.metadata.uid.as_deref() == Some(u.pod.uid.as_str()));
            UnplaceablePod {
                pod: pod_ref(&u.pod),
                reason: match pod {
                    Some(p) => {
                        karpenter_core::model::volumes::explain(&u.reason, p, cluster.volumes())
                    }
                    None => u.reason.clone(),
                },
            }
        })
        .collect()
}

/// Whether the snapshot's NodeClass `nodeclass` leaves drift to the user.
fn manual_drift(loaded: &Loaded, nodeclass: &str) -> bool {
    loaded.inputs.node_classes.iter().any(|o| {
        o.metadata.name.as_deref() == Some(nodeclass)
            && serde_json::to_value(o)
                .ok()
                .and_then(|v| serde_json::from_value::<clusterapi_api::ClusterAPINodeClass>(v).ok())
                .is_some_and(|nc| nc.manual_drift())
    })
}
