//! Counted offerings: a planned NodeClaim holds one unit of its preferred offering's count,
//! within one solve and across NodePools sharing the count; reserved offerings come first.

mod common;
use common::*;

/// `name` with every offering drawing from the count `key` (`available` units).
fn counted(name: &str, cpu_m: i64, mem_gi: i64, key: &str, available: u32) -> InstanceType {
    let mut t = it(name, cpu_m, mem_gi);
    for o in &mut t.offerings {
        o.count = Some(OfferingCount {
            key: key.to_string(),
            available,
        });
    }
    t
}

/// Pods of 1.5 cpu: one per 2-cpu node.
fn big_pods(prefix: &str, n: usize) -> Vec<Pod> {
    pods(prefix, n, 1500, 256)
}

fn on<'a>(out: &'a Output, instance_type: &str) -> Vec<&'a NewNodeClaim> {
    out.new_node_claims
        .iter()
        .filter(|c| c.cheapest.instance_type == instance_type)
        .collect()
}

#[test]
fn a_count_caps_claims_within_one_solve_and_the_rest_fall_back() {
    // The counted type is the cheapest; the fallback (same shape, pricier) is unbounded.
    let mut fallback = it("fallback", 2000, 4);
    for o in &mut fallback.offerings {
        o.price *= 2.0;
    }
    let np = NodePool::new(
        "default",
        vec![counted("metal", 2000, 4, "template metal", 3), fallback],
    );
    let out = solve(&input(vec![np], big_pods("p", 5)));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(on(&out, "metal").len(), 3, "{:#?}", out.new_node_claims);
    let fell_back = on(&out, "fallback");
    assert_eq!(fell_back.len(), 2);
    for c in fell_back {
        assert_eq!(
            c.instance_types(),
            ["fallback"],
            "an exhausted count is not offered to other claims"
        );
    }
}

#[test]
fn without_a_fallback_pods_fail_naming_the_count() {
    let np = NodePool::new(
        "default",
        vec![counted("metal", 2000, 4, "template metal", 3)],
    );
    let out = solve(&input(vec![np], big_pods("p", 5)));
    assert_eq!(out.new_node_claims.len(), 3);
    assert_eq!(out.unschedulable.len(), 2);
    for u in &out.unschedulable {
        assert_eq!(
            u.failures,
            [(
                "default".to_string(),
                Failure::CountExhausted {
                    key: "template metal".into(),
                    available: 3
                }
            )]
        );
        assert!(
            u.reason.contains("template metal (3 available"),
            "{}",
            u.reason
        );
    }
}

#[test]
fn a_zero_count_offers_nothing() {
    let np = NodePool::new(
        "default",
        vec![counted("metal", 2000, 4, "template metal", 0)],
    );
    let out = solve(&input(vec![np], big_pods("p", 1)));
    assert!(out.new_node_claims.is_empty());
    assert!(matches!(
        out.unschedulable[0].failures[0].1,
        Failure::CountExhausted { available: 0, .. }
    ));
}

#[test]
fn two_pools_sharing_a_count_never_over_commit() {
    let mut a = NodePool::new("a", vec![counted("metal", 2000, 4, "template metal", 2)]);
    a.weight = 10;
    let b = NodePool::new("b", vec![counted("metal", 2000, 4, "template metal", 2)]);
    let mut pending = big_pods("a", 2);
    for p in &mut pending {
        p.node_selector = labels(&[(LABEL_NODEPOOL, "a")]);
    }
    let mut for_b = big_pods("b", 3);
    for p in &mut for_b {
        p.node_selector = labels(&[(LABEL_NODEPOOL, "b")]);
    }
    pending.extend(for_b);
    let out = solve(&input(vec![a, b], pending));
    assert_eq!(
        out.new_node_claims.len(),
        2,
        "two units in all, whichever pool: {:#?}",
        out.new_node_claims
    );
    assert_eq!(out.unschedulable.len(), 3);
}

#[test]
fn pods_sharing_a_claim_use_one_unit() {
    let np = NodePool::new(
        "default",
        vec![counted("metal", 8000, 16, "template metal", 1)],
    );
    let out = solve(&input(vec![np], pods("p", 4, 1000, 256)));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(out.new_node_claims.len(), 1);
    assert_eq!(out.new_node_claims[0].pods.len(), 4);
}

#[test]
fn a_claim_that_moves_to_a_bigger_type_gives_its_unit_back() {
    // small is counted (1 unit), large is not. The first pod takes small; the second joins
    // the same claim, which no longer fits small and moves to large: small's unit is free
    // again for the third pod's claim.
    let np = NodePool::new(
        "default",
        vec![
            counted("small", 2000, 4, "template small", 1),
            it("large", 8000, 16),
        ],
    );
    let mut ps = pods("p", 2, 1200, 256);
    // Smaller, so it is queued last; its anti-affinity keeps it off the first claim.
    let mut anti = pod("alone", 1000, 256);
    anti.creation = 10;
    anti.labels = labels(&[("app", "alone")]);
    anti.pod_anti_affinity = vec![PodAffinityTerm::new(
        LABEL_HOSTNAME,
        LabelSelector::labels(&[("app", "other")]),
    )];
    for p in &mut ps {
        p.labels = labels(&[("app", "other")]);
    }
    ps.push(anti);
    let out = solve(&input(vec![np], ps));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(out.new_node_claims.len(), 2, "{:#?}", out.new_node_claims);
    let large = on(&out, "large");
    assert_eq!(large.len(), 1);
    assert_eq!(large[0].pods.len(), 2, "the first claim grew out of small");
    let small = on(&out, "small");
    assert_eq!(small.len(), 1, "small's unit was given back");
    assert_eq!(small[0].pods[0].name, "alone");
}

#[test]
fn reserved_offerings_are_preferred_over_cheaper_ones() {
    let mut t = it("metal", 2000, 4);
    let mut reserved = t.offerings[0].clone();
    reserved.capacity_type = "reserved".into();
    reserved.price *= 3.0;
    reserved.count = Some(OfferingCount {
        key: "template metal-reserved".into(),
        available: 1,
    });
    t.offerings.push(reserved);
    let np = NodePool::new("default", vec![t]);
    let out = solve(&input(vec![np], big_pods("p", 2)));
    let cts: Vec<&str> = out
        .new_node_claims
        .iter()
        .map(|c| c.cheapest.capacity_type.as_str())
        .collect();
    assert_eq!(cts, ["reserved", "on-demand"], "{:#?}", out.new_node_claims);
}
