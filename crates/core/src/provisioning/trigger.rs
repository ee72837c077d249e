//! What wakes the provisioner: the events of the caches of pods, Nodes, NodeClaims,
//! NodePools, claims, volumes, StorageClasses and DRA claims and classes (their `subscribe()` streams), and what each asks of the batch window.

use std::collections::HashMap;
use std::sync::Arc;

use api::{NodeClaim, NodePool};
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::ObjectRef;

use crate::objects::provisionable;
use crate::state::ClusterState;

/// What wakes the provisioner.
pub(crate) enum Trigger {
    Pod(Arc<Pod>),
    Node(Arc<Node>),
    NodeClaim(Arc<NodeClaim>),
    NodePool(Arc<NodePool>),
    /// The provider says its offerings' availability may have changed (e.g. a host of an
    /// inventory was freed, taken, added or gone).
    Offerings,
    /// A claim, volume or StorageClass changed: what pods' volumes require (or whether they
    /// can be placed at all) may have. (A CSINode only refines a node's attach limits: it
    /// appears with every Node, and wakes nothing.)
    Volumes,
    /// A DeviceClass, ResourceClaim or ResourceClaimTemplate changed: what pods' claims
    /// require may have. (A ResourceSlice appears with every Node whose driver publishes, as
    /// a CSINode does, and wakes nothing.)
    Devices,
}

/// The events of the caches the provisioner reacts to, as one stream.
pub(crate) fn triggers(
    state: &ClusterState,
    offerings: Option<tokio::sync::watch::Receiver<u64>>,
) -> BoxStream<'static, Trigger> {
    let s = state.sources();
    let offerings = match offerings {
        Some(rx) => futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            Some((Trigger::Offerings, rx))
        })
        .boxed(),
        None => futures::stream::pending().boxed(),
    };
    futures::stream::select_all([
        offerings,
        s.pods.subscribe().map(Trigger::Pod).boxed(),
        s.nodes.subscribe().map(Trigger::Node).boxed(),
        s.nodeclaims.subscribe().map(Trigger::NodeClaim).boxed(),
        s.nodepools.subscribe().map(Trigger::NodePool).boxed(),
        s.pvcs.subscribe().map(|_| Trigger::Volumes).boxed(),
        s.pvs.subscribe().map(|_| Trigger::Volumes).boxed(),
        s.storageclasses
            .subscribe()
            .map(|_| Trigger::Volumes)
            .boxed(),
        s.dra.classes.subscribe().map(|_| Trigger::Devices).boxed(),
        s.dra.claims.subscribe().map(|_| Trigger::Devices).boxed(),
        s.dra
            .templates
            .subscribe()
            .map(|_| Trigger::Devices)
            .boxed(),
    ])
    .boxed()
}

/// What a trigger asks of the batcher.
pub(crate) enum Wake {
    /// A pod that may be provisionable (by uid).
    Pod(String),
    /// Capacity the handled pods were planned on changed: a NodePool's spec or readiness,
    /// a NodeClaim or a Node gone. Every pending pod is new again.
    Capacity,
    Nothing,
}

/// Per NodePool, the generation and readiness last seen (a status write that changes
/// neither is no reason to re-plan).
pub(crate) type PoolsSeen = HashMap<String, (Option<i64>, bool)>;

pub(crate) fn wake(state: &ClusterState, pools: &mut PoolsSeen, t: Trigger) -> Wake {
    let s = state.sources();
    match t {
        Trigger::Pod(p) => match (&p.metadata.uid, provisionable(&p)) {
            (Some(uid), true) => Wake::Pod(uid.clone()),
            _ => Wake::Nothing,
        },
        Trigger::Node(n) if s.nodes.store().get(&ObjectRef::from_obj(&*n)).is_none() => {
            Wake::Capacity
        }
        Trigger::NodeClaim(c)
            if s.nodeclaims
                .store()
                .get(&ObjectRef::from_obj(&*c))
                .is_none() =>
        {
            Wake::Capacity
        }
        Trigger::NodePool(p) => {
            let pool = crate::objects::name(p.as_ref()).to_string();
            let gone = s.nodepools.store().get(&ObjectRef::new(&pool)).is_none();
            let seen = (
                p.metadata.generation,
                crate::objects::pool_condition(&p, api::consts::conditions::READY),
            );
            let changed = if gone {
                pools.remove(&pool).is_some()
            } else {
                pools.insert(pool, seen) != Some(seen)
            };
            if changed {
                Wake::Capacity
            } else {
                Wake::Nothing
            }
        }
        Trigger::Offerings | Trigger::Volumes | Trigger::Devices => Wake::Capacity,
        Trigger::Node(_) | Trigger::NodeClaim(_) => Wake::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    fn pool(generation: i64, ready: &str) -> NodePool {
        typed(
            json!({"metadata": {"name": "default", "generation": generation},
            "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}}}},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "r",
                "message": "", "lastTransitionTime": "2026-11-22T10:00:00Z"}]}}),
        )
    }

    #[test]
    fn pending_pods_wake_the_batch_and_capacity_changes_reconsider() {
        let (pods, _) = Cache::detached();
        let (nodes, _) = Cache::detached();
        let (nodeclaims, mut claim_feed) = Cache::detached();
        let (nodepools, mut pool_feed) = Cache::detached();
        let state = ClusterState::new(crate::state::Sources {
            storageclasses: Cache::empty(),
            csinodes: Cache::empty(),
            dra: crate::cache::DraCaches::empty(),
            pvcs: Cache::empty(),
            pvs: Cache::empty(),
            pods,
            nodes,
            nodeclaims,
            nodepools,
            daemonsets: Cache::detached().0,
            pdbs: Cache::detached().0,
        });
        let mut seen = PoolsSeen::new();
        let mut wake = |t| wake(&state, &mut seen, t);
        let pending: Pod = typed(json!({"metadata": {"name": "p", "uid": "u1"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}));
        assert!(matches!(wake(Trigger::Pod(Arc::new(pending))), Wake::Pod(u) if u == "u1"));
        let bound: Pod = typed(json!({"metadata": {"name": "b", "uid": "u2"},
            "spec": {"nodeName": "n1", "containers": []}}));
        assert!(matches!(wake(Trigger::Pod(Arc::new(bound))), Wake::Nothing));

        // A NodePool: new, then a status write changing neither generation nor readiness,
        // then its readiness, then its spec.
        for (p, capacity) in [
            (pool(1, "False"), true),
            (pool(1, "False"), false),
            (pool(1, "True"), true),
            (pool(2, "True"), true),
        ] {
            pool_feed.apply(Event::Apply(p.clone()));
            let got = wake(Trigger::NodePool(Arc::new(p)));
            assert_eq!(matches!(got, Wake::Capacity), capacity);
        }

        // A NodeClaim changing is nothing; one going away is capacity.
        let claim: NodeClaim = typed(json!({"metadata": {"name": "c"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}}}));
        claim_feed.apply(Event::Apply(claim.clone()));
        assert!(matches!(
            wake(Trigger::NodeClaim(Arc::new(claim.clone()))),
            Wake::Nothing
        ));
        claim_feed.apply(Event::Delete(claim.clone()));
        assert!(matches!(
            wake(Trigger::NodeClaim(Arc::new(claim))),
            Wake::Capacity
        ));
    }
}
