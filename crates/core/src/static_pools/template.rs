//! Pure: the NodeClaim a static NodePool launches. Karpenter builds it from the pool's
//! template with every instance type compatible with the pool's requirements (no pod asks
//! for anything); here the provisioner's own solver plans it for one placeholder pod that
//! asks for nothing and tolerates every taint, so the requirements, minValues, the
//! instance-type list (cheapest compatible offering first) and the overlay marks are the
//! ones a provisioned claim of the pool would carry. `limits.nodes` is the static loop's
//! (see [`super::scale`]), not the solver's.

use api::NodeClaim;
use api::NodePool;
use cloudprovider::InstanceTypes;
use scheduling::{Operator, Requirement, Toleration};

use crate::model::convert::{self, Availability};

/// The solver's claim for a static claim of `pool` (the placeholder pod's, asking for
/// nothing), in `zone` if given; `Err(why)` when no offering of `catalog` is compatible.
pub fn planned(
    pool: &NodePool,
    catalog: &InstanceTypes,
    offerings: Availability,
    zone: Option<&str>,
) -> Result<scheduling::NewNodeClaim, String> {
    let mut p = convert::node_pool(pool);
    // Only `limits.nodes` is allowed on a static pool, and it is counted in claims.
    p.limits.clear();
    p.weight = 0;
    p.instance_types = catalog
        .instance_types
        .iter()
        .map(|it| convert::instance_type(it, offerings))
        .collect();
    let placeholder = scheduling::Pod {
        name: "static-capacity".into(),
        uid: "static-capacity".into(),
        tolerations: vec![Toleration::exists(None, None)],
        required_node_affinity: zone
            .map(|z| {
                vec![vec![Requirement::new(
                    scheduling::LABEL_ZONE,
                    Operator::In,
                    &[z],
                )]]
            })
            .unwrap_or_default(),
        ..scheduling::Pod::default()
    };
    let out = scheduling::solve(&scheduling::Input {
        node_pools: vec![p],
        nodes: Vec::new(),
        daemonsets: Vec::new(),
        pods: vec![placeholder],
        min_values_policy: Default::default(),
    });
    match out.new_node_claims.into_iter().next() {
        Some(mut claim) => {
            // Nothing is packed onto a static claim: it requests nothing.
            claim.requests.clear();
            claim.pods.clear();
            Ok(claim)
        }
        None => Err(out
            .unschedulable
            .first()
            .map(|u| u.reason.clone())
            .unwrap_or_else(|| "no compatible instance type".into())),
    }
}

/// The NodeClaim to create for `pool` (named `name`, or `<pool>-` generated when `None`),
/// in `zone` if given; `Err(why)` when no offering of `catalog` is compatible.
pub fn claim(
    pool: &NodePool,
    catalog: &InstanceTypes,
    offerings: Availability,
    zone: Option<&str>,
    name: Option<&str>,
) -> Result<NodeClaim, String> {
    let planned = planned(pool, catalog, offerings, zone)?;
    let mut nc = crate::provisioning::nodeclaim::nodeclaim(pool, &planned, Some(catalog));
    if let Some(name) = name {
        nc.metadata.generate_name = None;
        nc.metadata.name = Some(name.to_string());
    }
    Ok(nc)
}

/// The zones a claim of `pool` can launch in (sorted): those of `catalog`'s offerings for
/// which the solver finds a compatible, available offering.
pub fn zones(pool: &NodePool, catalog: &InstanceTypes, offerings: Availability) -> Vec<String> {
    let mut all: Vec<String> = catalog
        .instance_types
        .iter()
        .flat_map(|it| it.offerings.iter().filter_map(|o| o.zone.clone()))
        .collect();
    all.sort();
    all.dedup();
    all.into_iter()
        .filter(|z| planned(pool, catalog, offerings, Some(z)).is_ok())
        .collect()
}

/// Whether `pool` asks for its claims to be spread over zones
/// ([`api::consts::annotations::STATIC_ZONE_SPREAD`] `"true"`; another value is off, and
/// warned about by the static pools loop).
pub fn spreads(pool: &NodePool) -> bool {
    crate::objects::flag(pool, api::consts::annotations::STATIC_ZONE_SPREAD) == Ok(true)
}
