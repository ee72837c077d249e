//! The Dynamic Resource Allocation side of a solve ([`scheduling::dra::Dra`]) from a
//! cluster's objects ([`DraObjects`]), read by [`devices::dra`] as `simulate` reads a
//! snapshot's. Pods without claims pay nothing: a batch where no pod claims a device gets the
//! empty model (the solve is then [`scheduling::solve`]'s).

use std::collections::HashSet;
use std::sync::Arc;

use cloudprovider::InstanceTypes;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1 as dra;
use k8s_openapi::api::resource::v1::ResourceClaim;
use scheduling::dra::Dra;

/// The Dynamic Resource Allocation objects (`resource.k8s.io/v1`) of a cluster.
#[derive(Debug, Default, Clone)]
pub struct DraObjects {
    pub classes: Vec<Arc<dra::DeviceClass>>,
    pub claims: Vec<Arc<dra::ResourceClaim>>,
    pub templates: Vec<Arc<dra::ResourceClaimTemplate>>,
    pub slices: Vec<Arc<dra::ResourceSlice>>,
}

/// The DRA model of a solve of `pending` pods over the instance types of `catalogs`.
pub fn dra<'a>(
    objects: &DraObjects,
    pending: &[Arc<Pod>],
    catalogs: impl IntoIterator<Item = &'a InstanceTypes>,
) -> Dra {
    if !pending.iter().any(|p| claims_devices(p)) {
        return Dra::default();
    }
    let (classes, claims) = (owned(&objects.classes), owned(&objects.claims));
    let (templates, slices) = (owned(&objects.templates), owned(&objects.slices));
    devices::dra(
        devices::Objects {
            classes: &classes,
            claims: &claims,
            templates: &templates,
            slices: &slices,
        },
        pending.iter().map(AsRef::as_ref),
        catalogs.into_iter().flat_map(|c| c.instance_types.iter()),
    )
}

/// `objects` with the allocation of every claim reserved only for pods of `moving` cleared
/// (its `status` dropped): the pods leave their node, so a simulated move allocates their
/// claims again, as Karpenter's disruption simulation does. A claim also reserved for a pod
/// that stays keeps its allocation (and pins the moving pods to its node).
pub fn released(objects: &DraObjects, moving: &[Arc<Pod>]) -> DraObjects {
    let uids: HashSet<&str> = moving
        .iter()
        .filter(|p| claims_devices(p))
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    if uids.is_empty() {
        return objects.clone();
    }
    let only_moving = |c: &ResourceClaim| {
        let reserved = c.status.as_ref().and_then(|s| s.reserved_for.as_ref());
        reserved.is_some_and(|r| !r.is_empty() && r.iter().all(|r| uids.contains(r.uid.as_str())))
    };
    DraObjects {
        claims: objects
            .claims
            .iter()
            .map(|c| match only_moving(c) {
                true => Arc::new(ResourceClaim {
                    status: None,
                    ..ResourceClaim::clone(c)
                }),
                false => Arc::clone(c),
            })
            .collect(),
        ..objects.clone()
    }
}

/// Whether `pod` lists a ResourceClaim (`spec.resourceClaims`).
pub fn claims_devices(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

fn owned<T: Clone>(objects: &[Arc<T>]) -> Vec<T> {
    objects.iter().map(|o| T::clone(o)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Arc<Pod> {
        Arc::new(serde_json::from_value(v).expect("fixture"))
    }

    #[test]
    fn only_a_batch_with_claiming_pods_reads_the_objects() {
        let plain =
            pod(json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"containers": []}}));
        let claiming = pod(json!({"metadata": {"name": "b", "namespace": "ns"},
            "spec": {"containers": [], "resourceClaims": [{"name": "gpu", "resourceClaimName": "missing"}]}}));
        let objects = DraObjects::default();
        assert!(dra(&objects, std::slice::from_ref(&plain), []).is_empty());
        // Positive control: the claiming pod is read (its claim is named, not yet known).
        let d = dra(&objects, &[plain, claiming], []);
        assert!(!d.is_empty());
        assert_eq!(
            d.pod_claims.get(&("ns".to_string(), "b".to_string())),
            Some(&vec![("ns".to_string(), "missing".to_string())])
        );
    }

    #[test]
    fn a_claim_held_only_by_moving_pods_is_released() {
        let moving = pod(
            json!({"metadata": {"name": "m", "namespace": "ns", "uid": "um"},
            "spec": {"containers": [], "resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}]}}),
        );
        let claim =
            |name: &str, uids: &[&str]| -> Arc<ResourceClaim> {
                let reserved: Vec<_> = uids
                    .iter()
                    .map(|u| json!({"resource": "pods", "name": "x", "uid": u}))
                    .collect();
                Arc::new(serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {},
                "status": {"allocation": {"devices": {"results": []}}, "reservedFor": reserved}
            })).expect("fixture"))
            };
        let objects = DraObjects {
            claims: vec![claim("c1", &["um"]), claim("c2", &["um", "stays"])],
            ..DraObjects::default()
        };
        let out = released(&objects, &[moving]);
        assert!(
            out.claims[0].status.is_none(),
            "held only by the moving pod"
        );
        assert!(
            out.claims[1].status.is_some(),
            "also held by a pod that stays"
        );
        // Positive control: nothing moves, nothing is released.
        let same = released(&objects, &[]);
        assert!(same.claims.iter().all(|c| c.status.is_some()));
    }
}
