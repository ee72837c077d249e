//! Consolidation's search over a whole pass: its time limits, and moves across NodePools
//! (fixtures from `consolidation_tests`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::Timers;
use super::consolidation_tests::{LATER, World, half_empty_mediums, one_pod_each, pod, pool, why};
use super::search::{Limits, MULTI_LIMIT, SINGLE_LIMIT};

/// Consolidation whose search clock advances `step` at every reading (counted in `reads`).
fn stepping(multi: Duration, single: Duration, step: Duration, reads: Arc<AtomicU32>) -> Timers {
    let t0 = Instant::now();
    let clock = move || t0 + step * reads.fetch_add(1, Ordering::SeqCst);
    Timers {
        consolidation: super::consolidation::Consolidation::with_limits(Limits {
            multi,
            single,
            clock: Arc::new(clock),
        }),
        ..Timers::default()
    }
}

#[test]
fn multi_node_search_stops_at_its_limit_with_the_best_move_so_far() {
    let w = half_empty_mediums();
    // 40 s per clock reading, 1 min limit: the prefix of 2 is tried, that of 3 is not.
    let reads = Arc::new(AtomicU32::new(0));
    let mut timers = stepping(MULTI_LIMIT, SINGLE_LIMIT, Duration::from_secs(40), reads);
    let (first, second) = w.run_with(LATER, &mut timers);
    let c = why(&first, "c");
    assert!(
        c.starts_with(
            "multi-node search stopped after 1m; best so far: candidate: replace 2 nodes"
        ),
        "{c}"
    );
    assert_eq!(first.verdicts["a"].nodes, ["a", "b"]);
    assert_eq!(second.decisions.len(), 1, "{:?}", second.decisions);
    let surge = second.decisions[0].surge.as_ref().expect("surge");
    assert_eq!(surge.with, ["b"]);
}

#[test]
fn single_node_search_stops_at_its_limit_and_is_not_remembered() {
    // Two small nodes whose pods fit nowhere cheaper: no move either way.
    let w = one_pod_each(&[("a", "small", "1500m"), ("b", "small", "1500m")]);
    // Multi-node stops at once; single-node (150 s, 100 s per reading) evaluates one.
    let reads = Arc::new(AtomicU32::new(0));
    let mut timers = stepping(
        Duration::ZERO,
        Duration::from_secs(150),
        Duration::from_secs(100),
        Arc::clone(&reads),
    );
    let (first, second) = w.run_with(LATER, &mut timers);
    assert!(second.decisions.is_empty());
    assert_eq!(why(&first, "a"), "no cheaper option");
    assert_eq!(
        why(&first, "b"),
        "single-node search stopped after 2m30s (1 of 2 candidates evaluated)"
    );
    // Cut short, the search is not cached: the next pass (nothing changed) searches again.
    assert_eq!(why(&second, "b"), why(&first, "b"));
    let before = reads.load(Ordering::SeqCst);
    w.run_with(LATER, &mut timers);
    assert!(reads.load(Ordering::SeqCst) > before);
    // A search that finished is: with generous limits, the repeat reads no clock.
    let reads = Arc::new(AtomicU32::new(0));
    let mut timers = stepping(
        MULTI_LIMIT,
        SINGLE_LIMIT,
        Duration::from_millis(1),
        Arc::clone(&reads),
    );
    let (first, _) = w.run_with(LATER, &mut timers);
    assert_eq!(why(&first, "b"), "no cheaper option");
    let before = reads.load(Ordering::SeqCst);
    w.run_with(LATER, &mut timers);
    assert_eq!(reads.load(Ordering::SeqCst), before);
}

impl World {
    /// Moves NodeClaim `claim` and its Node to NodePool `to` of `policy` (added if new,
    /// budget `budget`).
    fn in_pool(&mut self, claim: &str, to: &str, policy: &str, budget: &str) {
        if !self
            .pools
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(to))
        {
            let mut p = (*pool(policy, json!([{ "nodes": budget }]))).clone();
            p.metadata.name = Some(to.into());
            self.pools.push(Arc::new(p));
        }
        let relabel = |m: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.labels
                .get_or_insert_default()
                .insert("karpenter.sh/nodepool".into(), to.into());
        };
        for c in self
            .claims
            .iter_mut()
            .filter(|c| c.metadata.name.as_deref() == Some(claim))
        {
            let mut x = (**c).clone();
            relabel(&mut x.metadata);
            *c = Arc::new(x);
        }
        let node = format!("node-{claim}");
        for n in self
            .nodes
            .iter_mut()
            .filter(|n| n.metadata.name.as_deref() == Some(node.as_str()))
        {
            let mut x = (**n).clone();
            relabel(&mut x.metadata);
            *n = Arc::new(x);
        }
    }
}

#[test]
fn multi_node_takes_candidates_of_several_pools_each_within_its_budget() {
    // a, b in "default", c in "other": the three become three smalls, across the pools.
    let mut w = half_empty_mediums();
    w.in_pool("c", "other", "WhenEmptyOrUnderutilized", "100%");
    let (first, second) = w.run(LATER);
    assert_eq!(first.verdicts["a"].nodes, ["a", "b", "c"]);
    assert_eq!(second.decisions.len(), 1, "{:?}", second.decisions);
    let d = &second.decisions[0];
    assert_eq!(d.nodepool, "default");
    assert_eq!(d.surge.as_ref().expect("surge").with, ["b", "c"]);
    let mv = d.command.as_ref().expect("move");
    assert_eq!(mv.replacement_type().as_deref(), Some("small ×3"));
    // "other" allows no Underutilized disruption: c stays out, a and b still merge.
    let mut w = half_empty_mediums();
    w.in_pool("c", "other", "WhenEmptyOrUnderutilized", "0");
    let (first, second) = w.run(LATER);
    assert_eq!(first.verdicts["a"].nodes, ["a", "b"]);
    assert_eq!(why(&first, "c"), "budget Underutilized: 0 allowed");
    assert_eq!(
        second.decisions[0].surge.as_ref().expect("surge").with,
        ["b"]
    );
}

#[test]
fn balanced_pools_score_their_share_of_a_move_across_pools() {
    // c (large, 0.4/h, the whole Balanced pool "bal"), a and b (mediums) are replaced by
    // three smalls: saves 0.5/h, of which "bal" is credited 0.4/0.8 (0.25 of its 0.4/h)
    // while all its disruption happens: score 0.625, approved. (First-fit would pack the
    // three pods onto a large, c's own type: no option.)
    let mut w = one_pod_each(&[
        ("a", "medium", "1500m"),
        ("b", "medium", "1500m"),
        ("c", "large", "1500m"),
    ]);
    w.in_pool("c", "bal", "Balanced", "100%");
    let (first, second) = w.run(LATER);
    assert_eq!(first.verdicts["c"].nodes, ["c", "a", "b"]);
    let (pool, score) = first.scores.last().expect("a score");
    assert_eq!(pool, "bal");
    assert!((score - 0.5 * (0.4 / 0.8) / 0.4).abs() < 1e-9, "{score}");
    let notes: Vec<String> = first
        .notes
        .iter()
        .map(|n| format!("{}:{}", n.nodepool, n.reason))
        .collect();
    assert_eq!(
        notes,
        [
            "bal:ConsolidationApproved",
            "default:ConsolidationCandidate"
        ]
    );
    assert_eq!(second.decisions.len(), 1);
    // Now c is a medium with six small pods in a Balanced pool of nine more busy nodes
    // (kept by do-not-disrupt): moving a, b and c onto three smalls saves 0.3/h, "bal" is
    // credited a third of it (0.1 of its 2.0/h) for 7 of its 25 disruption: refused;
    // a and b (both in "default") go instead.
    let mut pods: Vec<Arc<Pod>> = vec![
        pod("p-a", "a", "1500m", json!({})),
        pod("p-b", "b", "1500m", json!({})),
    ];
    pods.extend((0..6).map(|i| pod(&format!("c{i}"), "c", "250m", json!({}))));
    let mut nodes = vec![("a", "medium"), ("b", "medium"), ("c", "medium")];
    let busy: Vec<String> = (0..9).map(|i| format!("busy{i}")).collect();
    for n in &busy {
        nodes.push((n.as_str(), "medium"));
        pods.push(pod(
            &format!("q-{n}"),
            n,
            "3900m",
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        ));
    }
    let mut w = World::new("WhenEmptyOrUnderutilized", &nodes, pods);
    for n in busy.iter().map(String::as_str).chain(["c"]) {
        w.in_pool(n, "bal", "Balanced", "100%");
    }
    let (first, second) = w.run(LATER);
    assert!(
        first.scores.iter().any(|(p, s)| p == "bal" && *s < 0.5),
        "{:?}",
        first.scores
    );
    assert_eq!(first.verdicts["a"].nodes, ["a", "b"]);
    assert_eq!(second.decisions.len(), 1);
}
