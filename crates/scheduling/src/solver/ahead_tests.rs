//! The packing run beside first-fit's ([`price::first_fit_and_ahead`]): whatever the guess,
//! the plan is the one the packings give one after the other.

use super::price::{Ahead, plan};
use super::*;
use crate::bench_workload::{diverse_pods, input, instance_types};

/// The plan with the packings one after the other (no guess).
fn sequential(inp: &Input) -> Output {
    let (out, ahead) = plan(inp, &crate::dra::Dra::default(), |_, _| None);
    assert_eq!(ahead, Ahead::NotRun);
    out
}

/// The plan and the packing's fate when `cap` is packed beside first-fit's.
fn guessing(inp: &Input, cap: Option<f64>) -> (Output, Ahead) {
    plan(inp, &crate::dra::Dra::default(), |_, _| cap)
}

/// The caps first-fit's plan asks for, in order.
fn first_fit_caps(inp: &Input) -> Vec<(f64, Option<f64>)> {
    let mut s = build::build(inp, &crate::dra::Dra::default());
    let queue = Queue::of(&s, inp);
    assert!(pack_all(&mut s, &queue).is_some());
    s.caps()
}

/// The plan and the packing's fate with the solver's own guess.
fn guessed(inp: &Input) -> (Output, Ahead) {
    plan(inp, &crate::dra::Dra::default(), |s, q| {
        s.likely_fair_cap(q)
    })
}

/// Sizes of 1 to 128 cpu, 4 GiB per cpu, the metal ones (64 cpu and up) 4 % dearer per cpu:
/// a price per cpu that is not flat.
fn bare_metal() -> Vec<InstanceType> {
    let mut types = instance_types(1);
    let template = types.remove(0);
    [1, 2, 4, 8, 16, 32, 48, 64, 96, 128]
        .into_iter()
        .map(|cpu: i64| {
            let mut t = template.clone();
            t.name = format!("size-{cpu}");
            let price = 0.06 * cpu as f64 * if cpu >= 64 { 1.04 } else { 1.0 };
            t.capacity.insert(CPU.into(), cpu * 1000);
            t.capacity.insert(MEMORY.into(), (cpu * 4) << 30);
            t.capacity.insert(PODS.into(), 110);
            for o in &mut t.offerings {
                o.price = price;
            }
            t
        })
        .collect()
}

#[test]
fn the_guessed_cap_is_packed_beside_first_fit_and_the_plan_is_unchanged() {
    let karpenter = input(1000);
    let mut metal = input(1000);
    metal.node_pools[0].instance_types = bare_metal();
    for inp in [&karpenter, &metal] {
        let one_by_one = sequential(inp);
        // Positive control: the fair cap's plan is not first-fit's, so a packing that went
        // wrong would show.
        assert!(one_by_one.first_fit_price.is_some());
        let (out, ahead) = guessed(inp);
        // The guess was right: the packing beside first-fit's stood for the fair cap's.
        assert_eq!(ahead, Ahead::Taken);
        assert_eq!(out, one_by_one);
    }
}

#[test]
fn a_wrong_guess_is_dropped_and_the_plan_is_unchanged() {
    let mut inp = input(1000);
    inp.node_pools[0].instance_types = bare_metal();
    // Some pods land on a node there is, one fits nowhere: the output lists each pod once,
    // wherever it went (its reference made ahead, while the other packing ran).
    inp.nodes.push(ExistingNode {
        name: "there".into(),
        state: NodeState::Ready,
        labels: BTreeMap::from([
            (LABEL_HOSTNAME.to_string(), "there".to_string()),
            (LABEL_ZONE.to_string(), "test-zone-1".to_string()),
        ]),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        allocatable: BTreeMap::from([
            (CPU.to_string(), 4000),
            (MEMORY.to_string(), 16 << 30),
            (PODS.to_string(), 110),
        ]),
        requested: Resources::new(),
        pods: Vec::new(),
        refuses_moving: false,
        volume_limits: BTreeMap::new(),
    });
    inp.pods[0].requests.insert(CPU.into(), 1_000_000);
    let one_by_one = sequential(&inp);
    // Positive control: each of the three places holds pods.
    assert!(!one_by_one.existing.is_empty());
    assert_eq!(one_by_one.unschedulable.len(), 1);
    assert!(!one_by_one.new_node_claims.is_empty());
    // No type costs this: no cap is ever this.
    let (out, ahead) = guessing(&inp, Some(0.123_456_7));
    assert_eq!(ahead, Ahead::Dropped);
    assert_eq!(out, one_by_one);
}

#[test]
fn a_guess_dearer_than_first_fit_is_dropped_as_its_packing_stops() {
    // Pods with spread and affinity rules but no anti-affinity on Karpenter's catalog (price
    // linear in size, overhead per node): nodes of the average size only add overhead.
    let mut inp = input(0);
    inp.pods = (diverse_pods(1000, 42).into_iter())
        .filter(|p| p.pod_anti_affinity.is_empty())
        .take(300)
        .collect();
    let one_by_one = sequential(&inp);
    // Positive control: first-fit's plan is kept, though a fair cap was tried.
    assert_eq!(one_by_one.first_fit_price, None);
    let caps = first_fit_caps(&inp);
    let Some(&(fair, None)) = caps.first() else {
        panic!("no fair cap is tried: the case tests nothing ({caps:?})");
    };
    let (out, ahead) = guessing(&inp, Some(fair));
    assert_eq!(ahead, Ahead::OverBudget);
    assert_eq!(out, one_by_one);
}
