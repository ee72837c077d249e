//! A pod no node can take whatever the plan (`Pod::unplaceable`, e.g. its volume's claim
//! does not exist yet) is reported with its reason, buys no NodeClaim and takes no room.

mod common;
use common::*;

fn input(pods: Vec<Pod>) -> Input {
    Input {
        node_pools: vec![pool("default")],
        pods,
        ..Default::default()
    }
}

#[test]
fn an_unplaceable_pod_is_reported_and_buys_nothing() {
    let mut blocked = pod("db-0", 1000, 512);
    blocked.unplaceable =
        Some("volume data: persistentvolumeclaim default/data-db-0 not found".into());
    // The positive control: the same pod without the reason gets a NodeClaim.
    let out = solve(&input(vec![pod("db-0", 1000, 512)]));
    assert_eq!(out.new_node_claims.len(), 1);
    assert!(out.unschedulable.is_empty());

    let out = solve(&input(vec![blocked.clone(), pod("web", 1000, 512)]));
    assert_eq!(out.new_node_claims.len(), 1, "{out:?}");
    assert_eq!(out.new_node_claims[0].pods.len(), 1);
    assert_eq!(out.new_node_claims[0].pods[0].name, "web");
    assert_eq!(out.unschedulable.len(), 1);
    assert_eq!(out.unschedulable[0].pod.name, "db-0");
    assert_eq!(
        out.unschedulable[0].reason,
        "volume data: persistentvolumeclaim default/data-db-0 not found"
    );
    assert!(out.unschedulable[0].failures.is_empty());

    // The first-fit packing reports it the same way.
    let ff = solve_first_fit(&input(vec![blocked]));
    assert!(ff.new_node_claims.is_empty());
    assert_eq!(ff.unschedulable.len(), 1);
}
