//! Semantics the differential conformance run against Karpenter's scheduling tests found
//! missing (docs/conformance.md): label aliases, namespaceSelector, the spread node inclusion
//! policies, combined zone and capacity-type spreads.
mod common;
use common::*;

const SPREAD_LABEL: &str = "fake-label";

fn web(n: usize) -> Vec<Pod> {
    let mut ps = pods("web", n, 1000, 256);
    for p in &mut ps {
        p.labels = labels(&[("app", "web")]);
    }
    ps
}

fn spread_on(ps: &mut [Pod], key: &str, f: impl Fn(&mut TopologySpread)) {
    for p in ps {
        let mut s = spread(key, 1, WhenUnsatisfiable::DoNotSchedule, &[("app", "web")]);
        f(&mut s);
        p.topology_spread.push(s);
    }
}

fn taint(key: &str, value: &str) -> Taint {
    Taint::new(key, value, TaintEffect::NoSchedule)
}

/// A node in domain `value` of the spread label (zone 1), with `extra` labels.
fn spread_node(name: &str, value: &str, extra: &[(&str, &str)]) -> ExistingNode {
    let mut n = node(name, "test-zone-1", 100, 1);
    n.labels.insert(SPREAD_LABEL.into(), value.into());
    n.labels.extend(labels(extra));
    n
}

/// Domains of the spread label over the new claims: value → pods.
fn by_domain(out: &Output) -> Vec<(String, usize)> {
    let mut m = std::collections::BTreeMap::new();
    for c in &out.new_node_claims {
        let (_, v) = req_values(c, SPREAD_LABEL).expect("spread label on the claim");
        assert_eq!(v.len(), 1, "{v:?}");
        *m.entry(v[0].clone()).or_insert(0) += c.pods.len();
    }
    m.into_iter().collect()
}

#[test]
fn deprecated_instance_type_selector_picks_that_type() {
    let mut p = pod("p", 100, 64);
    p.node_selector = labels(&[("beta.kubernetes.io/instance-type", "large")]);
    let out = solve(&input(vec![pool("default")], vec![p]));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(out.new_node_claims[0].instance_types(), ["large"]);
}

#[test]
fn deprecated_zone_label_of_a_node_matches_the_stable_zone() {
    let mut p = pod("p", 100, 64);
    p.required_node_affinity = vec![vec![Requirement::new(
        LABEL_ZONE,
        Operator::In,
        &["test-zone-2"],
    )]];
    let mut n = node("n", "x", 4000, 8);
    n.labels.remove(LABEL_ZONE);
    n.labels.insert(
        "failure-domain.beta.kubernetes.io/zone".into(),
        "test-zone-2".into(),
    );
    let mut inp = input(vec![pool("default")], vec![p]);
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert_eq!(out.existing.len(), 1);
    assert!(out.new_node_claims.is_empty());
}

#[test]
fn pod_label_selectors_are_not_normalized() {
    // A selector on pod labels reads the key as written: the pod labelled with the beta key
    // is the affinity target, found in its zone.
    let mut target = pod("target", 100, 64);
    target.labels = labels(&[("beta.kubernetes.io/arch", "x")]);
    target.node_selector = labels(&[(LABEL_ZONE, "test-zone-3")]);
    let mut follower = pod("follower", 100, 64);
    follower.creation = 1;
    follower.pod_affinity = vec![PodAffinityTerm::new(
        LABEL_ZONE,
        LabelSelector::labels(&[("beta.kubernetes.io/arch", "x")]),
    )];
    let out = solve(&input(vec![pool("default")], vec![target, follower]));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert!(
        out.new_node_claims
            .iter()
            .all(|c| zone_of(c) == "test-zone-3")
    );
}

/// A pod of namespace `other` in zone 2 and a pod with affinity to it from `default`.
fn cross_namespace(all: bool) -> Output {
    let mut target = pod("target", 100, 64);
    target.namespace = "other".into();
    target.labels = labels(&[("app", "db")]);
    target.node_selector = labels(&[(LABEL_ZONE, "test-zone-2")]);
    let mut follower = pod("follower", 100, 64);
    follower.creation = 1;
    let mut term = PodAffinityTerm::new(LABEL_ZONE, LabelSelector::labels(&[("app", "db")]));
    term.all_namespaces = all;
    follower.pod_affinity = vec![term];
    solve(&input(vec![pool("default")], vec![target, follower]))
}

#[test]
fn empty_namespace_selector_selects_pods_of_every_namespace() {
    let out = cross_namespace(true);
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    let Some(Ok(c)) = out.find("follower") else {
        panic!("follower not on a new claim")
    };
    assert_eq!(zone_of(&out.new_node_claims[c]), "test-zone-2");
}

#[test]
fn affinity_without_namespace_selector_stays_in_the_own_namespace() {
    let out = cross_namespace(false);
    let pending: Vec<&str> = out
        .unschedulable
        .iter()
        .map(|u| u.pod.name.as_str())
        .collect();
    assert_eq!(pending, ["follower"]);
}

/// Two nodes in domains foo and bar, tainted, full; the pool labels its nodes baz.
fn tainted_domains(policy: NodeInclusionPolicy) -> Output {
    let mut np = pool("default");
    np.labels = labels(&[(SPREAD_LABEL, "baz")]);
    let mut ps = web(5);
    spread_on(&mut ps, SPREAD_LABEL, |s| s.node_taints_policy = policy);
    let mut inp = input(vec![np], ps);
    for (name, d) in [("n1", "foo"), ("n2", "bar")] {
        let mut n = spread_node(name, d, &[]);
        n.taints = vec![taint("taintname", "taintvalue")];
        inp.nodes.push(n);
    }
    solve(&inp)
}

#[test]
fn node_taints_policy_honor_ignores_domains_of_untolerated_nodes() {
    let out = tainted_domains(NodeInclusionPolicy::Honor);
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(by_domain(&out), [("baz".to_string(), 5)]);
}

#[test]
fn node_taints_policy_ignore_counts_tainted_nodes() {
    // foo and bar (empty, unreachable for the pod) hold the minimum at 0: one pod in baz.
    let out = tainted_domains(NodeInclusionPolicy::Ignore);
    assert_eq!(by_domain(&out), [("baz".to_string(), 1)]);
    assert_eq!(out.unschedulable.len(), 4);
}

#[test]
fn node_taints_policy_honor_ignores_domains_of_untolerated_nodepools() {
    let mut open = pool("open");
    open.requirements = vec![Requirement::new(SPREAD_LABEL, Operator::In, &["foo"])];
    let mut tainted = pool("tainted");
    tainted.requirements = vec![Requirement::new(SPREAD_LABEL, Operator::In, &["bar"])];
    tainted.taints = vec![taint("taint-key", "taint-value")];
    let mut ps = web(2);
    spread_on(&mut ps, SPREAD_LABEL, |s| {
        s.node_taints_policy = NodeInclusionPolicy::Honor
    });
    let out = solve(&input(vec![open, tainted], ps));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(by_domain(&out), [("foo".to_string(), 2)]);
}

#[test]
fn node_taints_policy_honor_counts_per_toleration_when_pools_share_a_domain() {
    // Pools 0 (foo, bar) and 1 (foo, baz), each tainted; two pods tolerate pool 0, four pool 1.
    // Each deployment spreads over its own pool's domains and counts only pods on nodes it
    // tolerates: foo 2, bar 1, baz 3 (Karpenter's expected skew).
    let pools: Vec<NodePool> = [("p0", ["foo", "bar"]), ("p1", ["foo", "baz"])]
        .into_iter()
        .map(|(name, ds)| {
            let mut np = pool(name);
            np.requirements = vec![Requirement::new(SPREAD_LABEL, Operator::In, &ds)];
            np.taints = vec![taint("taint-key", name)];
            np
        })
        .collect();
    let mut ps = web(6);
    spread_on(&mut ps, SPREAD_LABEL, |s| {
        s.node_taints_policy = NodeInclusionPolicy::Honor
    });
    for (i, p) in ps.iter_mut().enumerate() {
        let pool = if i < 2 { "p0" } else { "p1" };
        p.tolerations = vec![Toleration::equal(
            "taint-key",
            pool,
            Some(TaintEffect::NoSchedule),
        )];
    }
    let out = solve(&input(pools, ps));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    let mut counts: Vec<usize> = by_domain(&out).into_iter().map(|(_, n)| n).collect();
    counts.sort();
    assert_eq!(counts, [1, 2, 3]);
}

/// Nodes in domains foo and bar labelled `selector: mismatch`; the pool's nodes are baz and
/// `selector: value`; the pods select `selector: value`.
fn affinity_domains(policy: NodeInclusionPolicy) -> Output {
    let mut np = pool("default");
    np.labels = labels(&[(SPREAD_LABEL, "baz"), ("selector", "value")]);
    let mut ps = web(5);
    for p in &mut ps {
        p.node_selector = labels(&[("selector", "value")]);
    }
    spread_on(&mut ps, SPREAD_LABEL, |s| s.node_affinity_policy = policy);
    let mut inp = input(vec![np], ps);
    for (name, d) in [("n1", "foo"), ("n2", "bar")] {
        inp.nodes
            .push(spread_node(name, d, &[("selector", "mismatch")]));
    }
    solve(&inp)
}

#[test]
fn node_affinity_policy_honor_ignores_domains_of_nodes_the_pod_cannot_select() {
    let out = affinity_domains(NodeInclusionPolicy::Honor);
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    assert_eq!(by_domain(&out), [("baz".to_string(), 5)]);
}

#[test]
fn node_affinity_policy_ignore_counts_every_node() {
    let out = affinity_domains(NodeInclusionPolicy::Ignore);
    assert_eq!(by_domain(&out), [("baz".to_string(), 1)]);
    assert_eq!(out.unschedulable.len(), 4);
}

/// Four pods selecting `tier: web` (the pool's label) spread by zone; a zone-2 node without
/// the label runs three matching pods. New pods per zone.
fn unselected_node_pods(policy: NodeInclusionPolicy) -> Vec<usize> {
    let mut np = pool("default");
    np.labels = labels(&[("tier", "web")]);
    let mut ps = web(4);
    for p in &mut ps {
        p.node_selector = labels(&[("tier", "web")]);
    }
    spread_on(&mut ps, LABEL_ZONE, |s| s.node_affinity_policy = policy);
    let mut inp = input(vec![np], ps);
    let mut n = node("n1", "test-zone-2", 100, 1);
    n.pods = (0..3)
        .map(|_| BoundPod {
            namespace: "default".into(),
            labels: labels(&[("app", "web")]),
            ..BoundPod::default()
        })
        .collect();
    inp.nodes = vec![n];
    let out = solve(&inp);
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    ZONES
        .iter()
        .map(|z| {
            out.new_node_claims
                .iter()
                .filter(|c| zone_of(c) == *z)
                .map(|c| c.pods.len())
                .sum()
        })
        .collect()
}

#[test]
fn node_affinity_policy_honor_does_not_count_pods_on_unselected_nodes() {
    let per_zone = unselected_node_pods(NodeInclusionPolicy::Honor);
    assert!(per_zone.iter().all(|n| *n >= 1), "{per_zone:?}");
    let per_zone = unselected_node_pods(NodeInclusionPolicy::Ignore);
    assert_eq!(per_zone, [2, 0, 2]);
}

/// A type offered only as spot in zone 1 and on-demand in zone 2.
fn split_offerings() -> NodePool {
    let mut t = it("medium", 4000, 8);
    t.offerings = vec![
        Offering::new("test-zone-1", "spot", 0.1),
        Offering::new("test-zone-2", "on-demand", 0.2),
    ];
    NodePool::new("default", vec![t])
}

#[test]
fn zone_and_capacity_type_spreads_pick_an_offered_pair() {
    // The first domains of each key (on-demand, zone 1) are no offering: the pair chosen is one.
    let mut ps = web(2);
    spread_on(&mut ps, LABEL_CAPACITY_TYPE, |_| {});
    spread_on(&mut ps, LABEL_ZONE, |_| {});
    let out = solve(&input(vec![split_offerings()], ps));
    assert!(out.unschedulable.is_empty(), "{:?}", out.unschedulable);
    let mut pairs: Vec<(String, String)> = out
        .new_node_claims
        .iter()
        .map(|c| (c.cheapest.zone.clone(), c.cheapest.capacity_type.clone()))
        .collect();
    pairs.sort();
    assert_eq!(
        pairs,
        [
            ("test-zone-1".to_string(), "spot".to_string()),
            ("test-zone-2".to_string(), "on-demand".to_string())
        ]
    );
}

#[test]
fn existing_nodes_are_tried_initialized_first_then_by_name() {
    let mut inp = input(vec![pool("default")], vec![pod("p", 100, 64)]);
    let mut launching = node("a-launching", "test-zone-1", 4000, 8);
    launching.state = NodeState::InFlight;
    inp.nodes = vec![
        launching,
        node("c", "test-zone-1", 4000, 8),
        node("b", "test-zone-1", 4000, 8),
    ];
    let out = solve(&inp);
    assert_eq!(out.existing[0].node, "b");
}

/// Existing node `name` in `zone` as `ct` with one `app: web` pod bound.
fn web_node(name: &str, zone: &str, ct: &str) -> ExistingNode {
    let mut n = node(name, zone, 4000, 8);
    n.labels.insert(LABEL_CAPACITY_TYPE.into(), ct.into());
    n.pods = vec![BoundPod {
        namespace: "default".into(),
        labels: labels(&[("app", "web")]),
        ..BoundPod::default()
    }];
    n
}

#[test]
fn zone_and_capacity_type_spreads_stop_where_max_skew_leaves_only_an_unoffered_pair() {
    // Karpenter's "should spread pods while respecting both constraints" (record #420): spot
    // only in zones 1 and 2; spot in zone 2 and on-demand in zone 1 hold a pod each.
    let mut t = it("medium", 4000, 8);
    t.offerings = ["test-zone-1", "test-zone-2"]
        .iter()
        .map(|z| Offering::new(z, "spot", 0.1))
        .chain(ZONES.iter().map(|z| Offering::new(z, "on-demand", 0.2)))
        .collect();
    let mut ps = web(6);
    spread_on(&mut ps, LABEL_CAPACITY_TYPE, |_| {});
    spread_on(&mut ps, LABEL_ZONE, |_| {});
    let mut inp = input(vec![NodePool::new("default", vec![t])], ps);
    inp.nodes = vec![
        web_node("a", "test-zone-2", "spot"),
        web_node("b", "test-zone-1", "on-demand"),
    ];
    let out = solve(&inp);
    // The first pod must go to zone 3 and either capacity type may: the pair chosen is the
    // offered one (on-demand), where Karpenter's random pick may take spot and fail. Then a
    // pod each on the existing nodes; after them maxSkew allows only spot in zone 3, which no
    // offering has, as in Karpenter (a new spot node in zone 1 instead of the existing
    // on-demand one would have kept all six schedulable, but existing nodes are tried first).
    let pairs: Vec<(String, String)> = out
        .new_node_claims
        .iter()
        .map(|c| (zone_of(c), c.cheapest.capacity_type.clone()))
        .collect();
    assert_eq!(
        pairs,
        [("test-zone-3".to_string(), "on-demand".to_string())]
    );
    let mut on_nodes: Vec<&str> = out.existing.iter().map(|p| p.node.as_str()).collect();
    on_nodes.sort();
    assert_eq!(on_nodes, ["a", "b"]);
    assert_eq!(placed(&out), 3);
    assert_eq!(out.unschedulable.len(), 3, "{:?}", out.unschedulable);
    assert!(
        out.unschedulable.iter().all(|u| u
            .failures
            .iter()
            .all(|(_, f)| *f == Failure::NoCompatibleInstanceType)),
        "{:?}",
        out.unschedulable
    );
}
