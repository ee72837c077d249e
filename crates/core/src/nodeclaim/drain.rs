//! Draining a terminating NodeClaim's Node before the provider is asked to delete it, with
//! Karpenter's terminator semantics (`pkg/controllers/node/termination/terminator`):
//!
//! - The Node is tainted `karpenter.sh/disrupted:NoSchedule` (and labelled
//!   `node.kubernetes.io/exclude-from-external-load-balancers`) so nothing new lands on it.
//! - Pods are waited for unless they tolerate that taint (they would come back), are static
//!   or mirror pods (the kubelet owns them), are finished, or have been terminating for over a
//!   minute past their deletionTimestamp (stuck: their kubelet is gone).
//! - Pods are evicted through the Eviction API (`policy/v1`: PodDisruptionBudgets apply; a
//!   refusal, 429, is retried later) in strict groups: non-critical pods, non-critical
//!   DaemonSet pods, critical pods (`system-cluster-critical` / `system-node-critical`),
//!   critical DaemonSet pods. A group starts only when the one before has left.
//! - Pods with `karpenter.sh/do-not-disrupt` are never evicted; the drain waits for them.
//! - With a termination time (the NodeClaim's `karpenter.sh/nodeclaim-termination-timestamp`,
//!   from `spec.terminationGracePeriod`), a pod whose own grace period would run past it is
//!   deleted instead (any group, PDBs and do-not-disrupt bypassed), with the time left as its
//!   grace period (at least 1 s, never 0: no force-removal from etcd).
//!
//! - The provider's drain rules ([`cloudprovider::DrainRules`], for Cluster API its
//!   MachineDrainRules and its drain pod label) say per pod: `Skip` (not
//!   evicted, not waited for: it goes with the Node), `WaitCompleted` (never evicted, waited
//!   for until it finishes, as a do-not-disrupt pod: the termination time still deletes it;
//!   counted in order 0) or `Drain` with an order. Pods leave in groups of increasing order
//!   first, Karpenter's four groups within each order: `(order, group)`, a group starting only
//!   when every pod of the groups before has left. Without rules every pod is order 0: the
//!   drain is Karpenter's.
//!
//! [`plan`] is the pure decision, [`Drainer`] carries it out. No provider type here: every
//! provider's Nodes are drained alike, by the rules the provider answers.

use std::collections::BTreeMap;
use std::ops::Not;
use std::time::Duration;

use api::consts::events;
use cloudprovider::{DrainBehaviour, DrainRules};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::error::Error;
use crate::blockers::{pod_do_not_disrupt, tolerates_disrupted};
use crate::events::{EventType, Recorder};
use crate::metrics::{CodeLabels, DrainedLabels, Metrics};
use crate::objects::{annotation, namespaced_name, owned_by, terminal};
use crate::write::{Outcome, Refused, Writer, is_too_many_requests, manager};

/// A drained Node is declared drained only this long after its drain started (pods the
/// scheduler bound before it saw the taint are caught): Karpenter's `MinDrainTime`.
pub(crate) const MIN_DRAIN_TIME: Duration = Duration::from_secs(5);
/// A pod terminating this long past its deletionTimestamp is not waited for.
pub(crate) const STUCK_TERMINATING: Duration = Duration::from_secs(60);
/// The label that takes a draining Node out of external load balancers.
pub(crate) const EXCLUDE_FROM_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
/// What the API server answers when a pod matches more than one PodDisruptionBudget.
pub(crate) const MULTIPLE_PDBS: &str = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";
/// At most this many evictions of one Node are in flight at once.
const CONCURRENT: usize = 8;

/// The eviction groups, in the order they leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Group {
    NonCritical,
    NonCriticalDaemon,
    Critical,
    CriticalDaemon,
}

/// A pod's eviction group.
pub(crate) fn group(pod: &Pod) -> Group {
    let critical = matches!(
        pod.spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref()),
        Some("system-cluster-critical" | "system-node-critical")
    );
    let daemon = owned_by(pod, &["DaemonSet"]);
    match (critical, daemon) {
        (false, false) => Group::NonCritical,
        (false, true) => Group::NonCriticalDaemon,
        (true, false) => Group::Critical,
        (true, true) => Group::CriticalDaemon,
    }
}

fn since(t: Option<&Time>, now: Timestamp) -> Option<SignedDuration> {
    t.map(|t| now.duration_since(t.0))
}

/// Whether the drain waits for `pod`: not finished, not tolerating the disrupted taint, not
/// static or mirror, not stuck terminating.
pub(crate) fn waited_for(pod: &Pod, now: Timestamp) -> bool {
    let mirror = annotation(pod, "kubernetes.io/config.mirror").is_some();
    let stuck = since(pod.metadata.deletion_timestamp.as_ref(), now)
        .is_some_and(|d| d > SignedDuration::try_from(STUCK_TERMINATING).unwrap_or_default());
    !(terminal(pod) || tolerates_disrupted(pod) || mirror || owned_by(pod, &["Node"]) || stuck)
}

/// The grace period to delete `pod` with now, when its own would run past `deadline`
/// (a terminating pod: when its deletionTimestamp is after it): the time left, at least 1 s.
pub(crate) fn force_delete_grace(
    pod: &Pod,
    deadline: Option<Timestamp>,
    now: Timestamp,
) -> Option<u32> {
    let deadline = deadline?;
    let due = match &pod.metadata.deletion_timestamp {
        Some(t) => t.0 > deadline,
        None => {
            let grace = pod.spec.as_ref()?.termination_grace_period_seconds?;
            // A grace period reaching past the start of time runs past any deadline.
            deadline
                .checked_sub(SignedDuration::from_secs(grace))
                .is_ok_and(|start| now <= start)
                .not()
        }
    };
    let left = deadline
        .duration_since(now)
        .as_secs()
        .clamp(1, i64::from(u32::MAX));
    due.then(|| u32::try_from(left).unwrap_or(u32::MAX))
}

/// What to do with a Node's pods now.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan<'a> {
    /// Past the termination time: deleted with this grace period, every group at once.
    pub delete: Vec<(&'a Pod, u32)>,
    /// Evicted now: the evictable pods of the first group with pods left.
    pub evict: Vec<&'a Pod>,
    /// Pods the drain still waits for (those above included).
    pub waiting: usize,
}

impl Plan<'_> {
    pub(crate) fn drained(&self) -> bool {
        self.waiting == 0
    }
}

/// Where a pod waits its turn: its drain order first, then Karpenter's group.
type Turn = (i32, Group);

/// The drain's next step over the pods bound to a Node, each treated as `behaviour` says.
pub(crate) fn plan<'a>(
    pods: &[&'a Pod],
    behaviour: &dyn Fn(&Pod) -> DrainBehaviour,
    deadline: Option<Timestamp>,
    now: Timestamp,
) -> Plan<'a> {
    // Skipped pods are neither evicted nor waited for.
    let waiting: Vec<(&Pod, DrainBehaviour, i32)> = pods
        .iter()
        .copied()
        .filter(|p| waited_for(p, now))
        .filter_map(|p| {
            let b = behaviour(p);
            b.order().map(|order| (p, b, order))
        })
        .collect();
    let mut out = Plan {
        waiting: waiting.len(),
        ..Plan::default()
    };
    let mut graceful: Vec<(&Pod, DrainBehaviour, Turn)> = Vec::new();
    for (p, b, order) in waiting {
        match force_delete_grace(p, deadline, now) {
            Some(grace) => out.delete.push((p, grace)),
            None => graceful.push((p, b, (order, group(p)))),
        }
    }
    if let Some(first) = graceful.iter().map(|(_, _, turn)| *turn).min() {
        out.evict = graceful
            .into_iter()
            .filter(|(_, b, turn)| *turn == first && *b != DrainBehaviour::WaitCompleted)
            .map(|(p, _, _)| p)
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !pod_do_not_disrupt(p, now))
            .collect();
    }
    out.delete.sort_by_key(|(p, _)| namespaced_name(*p));
    out.evict.sort_by_key(|p| namespaced_name(*p));
    out
}

/// Where a drain stands after a pass.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    Drained,
    /// Pods are left; `moved`: this pass evicted or deleted one.
    Waiting {
        pods: usize,
        moved: bool,
    },
}

/// Carries out [`plan`] on a workload cluster.
pub(crate) struct Drainer<'a> {
    pub client: &'a Client,
    pub recorder: &'a Recorder,
    pub metrics: &'a Metrics,
    pub pods: &'a Store<Pod>,
    /// The lifecycle's own writes (read-your-writes): the taint is recorded there.
    pub writes: &'a std::sync::Arc<crate::write::Expectations>,
}

/// One pod's eviction or deletion.
enum Step {
    /// Evicted or deleted (or gone already).
    Moved,
    /// A PodDisruptionBudget refused: why.
    Refused(String),
}

impl Drainer<'_> {
    /// Taints `node` `karpenter.sh/disrupted:NoSchedule` and labels it out of external load
    /// balancers, unless it is already (a conflict is retried from the fresh Node).
    pub(crate) async fn taint(&self, node: &Node) -> Result<(), Error> {
        let key = api::consts::taints::DISRUPTED;
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let tainted = taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoSchedule");
        let labelled = node.labels().contains_key(EXCLUDE_FROM_LOAD_BALANCERS);
        if tainted && labelled {
            return Ok(());
        }
        let mut body = json!({"metadata": {"labels": {EXCLUDE_FROM_LOAD_BALANCERS: "karpenter"}}});
        if !tainted {
            let mut list: Vec<Taint> = taints.into_iter().filter(|t| t.key != key).collect();
            list.push(Taint {
                key: key.into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: Some(Time(Timestamp::now())),
            });
            body["spec"] = json!({ "taints": list });
        }
        let writer = Writer::new(Api::<Node>::all(self.client.clone()), manager::TERMINATION)
            .expecting(self.writes.clone());
        match writer.patch(node, body).await? {
            Outcome::Written(_) | Outcome::Gone => Ok(()),
            Outcome::Conflict => Err(Refused::Conflict(format!("Node {}", node.name_any())).into()),
        }
    }

    /// The labels of the namespaces of `pods`, when `rules` read them (a namespace gone has
    /// none).
    async fn namespace_labels(
        &self,
        pods: &[&Pod],
        rules: &DrainRules,
    ) -> Result<BTreeMap<String, BTreeMap<String, String>>, Error> {
        let mut out = BTreeMap::new();
        if !rules.needs_namespaces() {
            return Ok(out);
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        for ns in pods.iter().filter_map(|p| p.metadata.namespace.as_deref()) {
            if !out.contains_key(ns)
                && let Some(found) = api.get_opt(ns).await?
            {
                out.insert(ns.to_string(), found.labels().clone());
            }
        }
        Ok(out)
    }

    /// One pass of the drain of `node` (deadline: the termination time, if any; `reason`:
    /// why its pods are evicted, for their `Evicted` events; `rules`: the provider's drain
    /// rules for its NodeClaim).
    pub(crate) async fn drain_with(
        &self,
        node: &Node,
        rules: &DrainRules,
        deadline: Option<Timestamp>,
        reason: &str,
        now: Timestamp,
    ) -> Result<Progress, Error> {
        let name = node.name_any();
        let on_node: Vec<_> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name))
            .collect();
        let refs: Vec<&Pod> = on_node.iter().map(|p| p.as_ref()).collect();
        let namespaces = self.namespace_labels(&refs, rules).await?;
        let behaviour = |p: &Pod| {
            let ns = p
                .metadata
                .namespace
                .as_ref()
                .and_then(|n| namespaces.get(n));
            rules.behaviour(p, ns)
        };
        let plan = plan(&refs, &behaviour, deadline, now);
        tracing::debug!(node = %name, pods = plan.waiting, evict = plan.evict.len(),
            delete = plan.delete.len(), "drain pass");
        if plan.drained() {
            return Ok(Progress::Drained);
        }
        let mut work: Vec<BoxFuture<'_, Result<Step, Error>>> = Vec::new();
        for (p, grace) in &plan.delete {
            work.push(self.delete(p, *grace, deadline, reason).boxed());
        }
        for p in &plan.evict {
            work.push(self.evict(p, reason).boxed());
        }
        let steps: Vec<Result<Step, Error>> = futures::stream::iter(work)
            .buffer_unordered(CONCURRENT)
            .collect()
            .await;
        let mut moved = false;
        let mut first_error = None;
        for step in steps {
            match step {
                Ok(Step::Moved) => moved = true,
                Ok(Step::Refused(why)) => {
                    self.event(
                        node.object_ref(&()),
                        EventType::Warning,
                        events::FAILED_DRAINING,
                        format!("Failed to drain node, {why}"),
                    )
                    .await;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(Progress::Waiting {
            pods: plan.waiting,
            moved,
        })
    }

    fn writer(&self, pod: &Pod) -> Writer<Pod> {
        let api = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        Writer::new(api, manager::TERMINATION)
    }

    async fn evict(&self, pod: &Pod, reason: &str) -> Result<Step, Error> {
        let who = namespaced_name(pod);
        let out = self.writer(pod).evict(pod).await;
        let code = match &out {
            Ok(Outcome::Written(())) => 200,
            Ok(Outcome::Gone) => 404,
            Ok(Outcome::Conflict) => 409,
            Err(kube::Error::Api(s)) => s.code,
            Err(_) => 0,
        };
        if code != 0 {
            self.metrics
                .pods_eviction_requests
                .get_or_create(&CodeLabels {
                    code: code.to_string(),
                })
                .inc();
        }
        match out {
            // Gone, or the name holds another pod now: this one has left.
            Ok(Outcome::Gone | Outcome::Conflict) => Ok(Step::Moved),
            Ok(Outcome::Written(())) => {
                tracing::info!(pod = %who, reason, "evicted");
                self.drained(reason);
                self.event(
                    pod.object_ref(&()),
                    EventType::Normal,
                    events::EVICTED,
                    format!("Evicted pod: {reason}"),
                )
                .await;
                Ok(Step::Moved)
            }
            Err(kube::Error::Api(s)) if s.message == MULTIPLE_PDBS => Ok(Step::Refused(format!(
                "pod {who}: eviction does not support multiple PDBs"
            ))),
            Err(e) if is_too_many_requests(&e) => Ok(Step::Refused(format!(
                "pod {who}: evicting pod violates a PDB"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    fn drained(&self, reason: &str) {
        self.metrics
            .pods_drained
            .get_or_create(&DrainedLabels {
                reason: reason.into(),
            })
            .inc();
    }

    async fn delete(
        &self,
        pod: &Pod,
        grace: u32,
        deadline: Option<Timestamp>,
        reason: &str,
    ) -> Result<Step, Error> {
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or_default();
        let at = deadline.map(|d| d.to_string()).unwrap_or_default();
        self.event(
            pod.object_ref(&()),
            EventType::Normal,
            events::DISRUPTED,
            format!(
                "Deleting the pod to accommodate the terminationTime {at} of the node. The pod \
                 was granted {grace} seconds of grace-period of its {own} \
                 terminationGracePeriodSeconds. This bypasses the PDB of the pod and the \
                 do-not-disrupt annotation."
            ),
        )
        .await;
        if self.writer(pod).delete_within(pod, Some(grace)).await? == Outcome::Written(()) {
            self.drained(reason);
        }
        tracing::info!(pod = %namespaced_name(pod), grace, "deleted past the termination time");
        Ok(Step::Moved)
    }

    async fn event(
        &self,
        reference: k8s_openapi::api::core::v1::ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        super::context::publish(self.recorder, reference, type_, reason, note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const NOW: &str = "2026-01-01T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().expect("time")
    }

    fn at(secs: i64) -> Timestamp {
        now() + SignedDuration::from_secs(secs)
    }

    /// A running pod `name`, with `extra` merged into its JSON.
    fn pod(name: &str, extra: Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"nodeName": "n", "containers": [], "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running"},
        });
        merge(&mut v, extra);
        serde_json::from_value(v).expect("pod")
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn daemon() -> Value {
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds"}]}})
    }

    fn critical() -> Value {
        json!({"spec": {"priorityClassName": "system-node-critical"}})
    }

    /// No drain rules: every pod drained, order 0.
    fn drain_all(_: &Pod) -> DrainBehaviour {
        DrainBehaviour::DEFAULT
    }

    fn names(pods: &[&Pod]) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn groups_leave_in_karpenters_order() {
        let mut crit_ds = daemon();
        merge(&mut crit_ds, critical());
        let pods = [
            pod("crit-ds", crit_ds),
            pod("crit", critical()),
            pod("ds", daemon()),
            pod("app", json!({})),
            pod(
                "cluster-crit",
                json!({"spec": {"priorityClassName": "system-cluster-critical"}}),
            ),
        ];
        assert_eq!(group(&pods[0]), Group::CriticalDaemon);
        assert_eq!(group(&pods[1]), Group::Critical);
        assert_eq!(group(&pods[2]), Group::NonCriticalDaemon);
        assert_eq!(group(&pods[3]), Group::NonCritical);
        assert_eq!(group(&pods[4]), Group::Critical);
        // Each pass evicts the first group with pods left, and only it.
        let mut left: Vec<&Pod> = pods.iter().collect();
        let mut order = Vec::new();
        while !left.is_empty() {
            let p = plan(&left, &drain_all, None, now());
            assert_eq!(p.waiting, left.len());
            assert!(p.delete.is_empty());
            order.push(names(&p.evict));
            left.retain(|x| !p.evict.iter().any(|e| e.name_any() == x.name_any()));
        }
        assert_eq!(
            order,
            vec![
                vec!["app".to_string()],
                vec!["ds".into()],
                vec!["cluster-crit".into(), "crit".into()],
                vec!["crit-ds".into()],
            ]
        );
    }

    #[test]
    fn a_terminating_pod_holds_its_group_and_the_next() {
        let pods = [
            pod("app", json!({"metadata": {"deletionTimestamp": NOW}})),
            pod("ds", daemon()),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&refs, &drain_all, None, now());
        assert_eq!(p.waiting, 2);
        assert!(p.evict.is_empty(), "{:?}", names(&p.evict));
        // Positive control: once it has left, the DaemonSet pod goes.
        let p = plan(&refs[1..], &drain_all, None, now());
        assert_eq!(names(&p.evict), ["ds"]);
    }

    #[test]
    fn pods_not_waited_for() {
        let stuck = at(-61).to_string();
        let recent = at(-59).to_string();
        let pods = [
            pod("done", json!({"status": {"phase": "Succeeded"}})),
            pod("failed", json!({"status": {"phase": "Failed"}})),
            pod(
                "mirror",
                json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}),
            ),
            pod(
                "static",
                json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "n"}]}}),
            ),
            pod(
                "tolerates",
                json!({"spec": {"tolerations": [
                {"key": "karpenter.sh/disrupted", "operator": "Exists"}]}}),
            ),
            pod(
                "tolerates-all",
                json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
            ),
            pod("stuck", json!({"metadata": {"deletionTimestamp": stuck}})),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&refs, &drain_all, None, now());
        assert!(p.drained(), "{p:?}");
        // Positive controls: a pod tolerating another taint, and one terminating for less
        // than a minute past its deletionTimestamp, are waited for.
        let held = [
            pod(
                "other",
                json!({"spec": {"tolerations": [
                {"key": "other", "operator": "Exists"}]}}),
            ),
            pod("recent", json!({"metadata": {"deletionTimestamp": recent}})),
        ];
        let refs: Vec<&Pod> = held.iter().collect();
        let p = plan(&refs, &drain_all, None, now());
        assert_eq!(p.waiting, 2);
        assert_eq!(names(&p.evict), ["other"]);
    }

    #[test]
    fn do_not_disrupt_is_waited_for_never_evicted_until_the_deadline() {
        let pods = [
            pod(
                "keep",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
            pod("app", json!({})),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&refs, &drain_all, None, now());
        assert_eq!(p.waiting, 2);
        assert_eq!(names(&p.evict), ["app"]);
        let p = plan(&refs[..1], &drain_all, None, now());
        assert!(p.evict.is_empty() && p.delete.is_empty() && p.waiting == 1);
        // Far from the termination time: still waited for.
        let p = plan(&refs[..1], &drain_all, Some(at(3600)), now());
        assert!(p.delete.is_empty() && p.waiting == 1);
        // Within its own grace period (30 s) of it: deleted with the time left.
        let p = plan(&refs[..1], &drain_all, Some(at(20)), now());
        assert_eq!(p.delete.len(), 1);
        assert_eq!(p.delete[0].1, 20);
        // Past it: at least 1 s, never 0.
        let p = plan(&refs[..1], &drain_all, Some(at(-100)), now());
        assert_eq!(p.delete[0].1, 1);
        // A grace period beyond any time (user input) is due at once, no overflow.
        let huge = [pod(
            "huge",
            json!({"spec": {"terminationGracePeriodSeconds": i64::MAX}}),
        )];
        let refs: Vec<&Pod> = huge.iter().collect();
        assert_eq!(
            plan(&refs, &drain_all, Some(at(3600)), now()).delete[0].1,
            3600
        );
    }

    #[test]
    fn past_the_deadline_every_group_is_deleted_at_once() {
        let pods = [
            pod(
                "app",
                json!({"spec": {"terminationGracePeriodSeconds": 10}}),
            ),
            pod("ds", daemon()),
            pod("crit", critical()),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        // 25 s left: the 30 s pods are due, the 10 s one is evicted as usual.
        let p = plan(&refs, &drain_all, Some(at(25)), now());
        let deleted: Vec<String> = p.delete.iter().map(|(p, _)| p.name_any()).collect();
        assert_eq!(deleted, ["crit", "ds"]);
        assert!(p.delete.iter().all(|(_, g)| *g == 25));
        assert_eq!(names(&p.evict), ["app"]);
        assert_eq!(p.waiting, 3);
    }

    #[test]
    fn a_terminating_pod_is_deleted_again_when_it_would_outlive_the_deadline() {
        let late = at(40).to_string();
        let early = at(5).to_string();
        let pods = [
            pod("late", json!({"metadata": {"deletionTimestamp": late}})),
            pod("early", json!({"metadata": {"deletionTimestamp": early}})),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&refs, &drain_all, Some(at(10)), now());
        let deleted: Vec<String> = p.delete.iter().map(|(p, _)| p.name_any()).collect();
        assert_eq!(deleted, ["late"]);
        assert_eq!(p.delete[0].1, 10);
        assert!(p.evict.is_empty());
        assert_eq!(p.waiting, 2);
        // Without a termination time nothing is deleted.
        assert!(plan(&refs, &drain_all, None, now()).delete.is_empty());
    }

    /// Drain rules by pod name: `skip…`, `wait…`, or `…-o<order>`.
    fn by_name(pod: &Pod) -> DrainBehaviour {
        match pod.name_any().as_str() {
            n if n.starts_with("skip") => DrainBehaviour::Skip,
            n if n.starts_with("wait") => DrainBehaviour::WaitCompleted,
            n => match n.rsplit_once("-o").and_then(|(_, o)| o.parse().ok()) {
                Some(order) => DrainBehaviour::Drain { order },
                None => DrainBehaviour::DEFAULT,
            },
        }
    }

    /// The groups in the order they leave (each pass evicts one; evicted pods then go).
    fn passes(pods: &[Pod], behaviour: &dyn Fn(&Pod) -> DrainBehaviour) -> Vec<Vec<String>> {
        let mut left: Vec<&Pod> = pods.iter().collect();
        let mut order = Vec::new();
        loop {
            let p = plan(&left, behaviour, None, now());
            if p.evict.is_empty() {
                return order;
            }
            order.push(names(&p.evict));
            left.retain(|x| !p.evict.iter().any(|e| e.name_any() == x.name_any()));
        }
    }

    #[test]
    fn skipped_pods_are_neither_evicted_nor_waited_for() {
        let pods = [pod("skip-a", json!({})), pod("skip-ds", daemon())];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&refs, &by_name, None, now());
        assert!(p.drained() && p.evict.is_empty(), "{p:?}");
        // Not deleted at the termination time either: they go with the Node.
        let p = plan(&refs, &by_name, Some(at(-100)), now());
        assert!(p.drained() && p.delete.is_empty(), "{p:?}");
        // Positive control: without the rules they are evicted and waited for.
        let p = plan(&refs, &drain_all, None, now());
        assert_eq!(
            (p.waiting, names(&p.evict)),
            (2, vec!["skip-a".to_string()])
        );
    }

    #[test]
    fn orders_leave_in_increasing_order_karpenters_groups_within_each() {
        let mut crit_ds = daemon();
        merge(&mut crit_ds, critical());
        let pods = [
            pod("db-o10", json!({})),
            pod("app", json!({})),
            pod("ds", daemon()),
            pod("crit-ds", crit_ds),
            pod("early-o-5", json!({})),
            pod("early-ds-o-5", daemon()),
            pod("late-crit-o10", critical()),
        ];
        assert_eq!(
            passes(&pods, &by_name),
            vec![
                vec!["early-o-5".to_string()],
                vec!["early-ds-o-5".into()],
                vec!["app".into()],
                vec!["ds".into()],
                vec!["crit-ds".into()],
                vec!["db-o10".into()],
                vec!["late-crit-o10".into()],
            ]
        );
        // A terminating pod of a lower order holds the next order.
        let terminating = [
            pod("app", json!({"metadata": {"deletionTimestamp": NOW}})),
            pod("db-o10", json!({})),
        ];
        let refs: Vec<&Pod> = terminating.iter().collect();
        let p = plan(&refs, &by_name, None, now());
        assert!(p.evict.is_empty() && p.waiting == 2, "{p:?}");
        // Positive control: without rules both are order 0 and the second is evicted.
        assert_eq!(
            names(&plan(&refs, &drain_all, None, now()).evict),
            ["db-o10"]
        );
    }

    #[test]
    fn wait_completed_pods_are_waited_for_never_evicted_until_the_deadline() {
        let pods = [
            pod("wait-job", json!({})),
            pod("app", json!({})),
            pod("db-o10", json!({})),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&refs, &by_name, None, now());
        assert_eq!((p.waiting, names(&p.evict)), (3, vec!["app".to_string()]));
        // Alone in order 0 it is waited for, not evicted, and holds order 10.
        let p = plan(&[&pods[0], &pods[2]], &by_name, None, now());
        assert!(
            p.evict.is_empty() && p.delete.is_empty() && p.waiting == 2,
            "{p:?}"
        );
        // Once it has completed, order 10 goes.
        let done = pod("wait-job", json!({"status": {"phase": "Succeeded"}}));
        let p = plan(&[&done, &pods[2]], &by_name, None, now());
        assert_eq!(
            (p.waiting, names(&p.evict)),
            (1, vec!["db-o10".to_string()])
        );
        // The termination time deletes it as it does a do-not-disrupt pod.
        let p = plan(&[&pods[0]], &by_name, Some(at(20)), now());
        assert_eq!(p.delete.len(), 1);
        assert_eq!(
            (p.delete[0].0.name_any(), p.delete[0].1),
            ("wait-job".into(), 20)
        );
        // Positive control: drained as any pod without the rule.
        assert_eq!(
            names(&plan(&[&pods[0]], &drain_all, None, now()).evict),
            ["wait-job"]
        );
    }
}
