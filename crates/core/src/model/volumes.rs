//! Pure: the volume objects of a cluster as the solver's resolver reads them
//! ([`scheduling::volumes`]), each pod's volumes resolved onto its scheduling model, and the
//! attach limits of existing nodes (the node's CSINode where it lists a driver, else its
//! instance type's).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use scheduling::volumes::{Blocked, Claim, Class, Objects, PodVolume, Resolved, Volume};
use scheduling::{Operator, Requirement};

use crate::objects::{deleting, name};

/// The legacy class annotation, read before `spec.storageClassName` (as kube-scheduler).
pub const ANN_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// The pod's volumes that go through a claim (the others constrain no node).
pub(crate) fn pod_volumes(pod: &Pod) -> Vec<PodVolume> {
    let Some(volumes) = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()) else {
        return Vec::new();
    };
    volumes
        .iter()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(PodVolume::Claim {
                    volume: v.name.clone(),
                    claim: c.claim_name.clone(),
                })
            } else {
                v.ephemeral.as_ref().map(|_| PodVolume::Ephemeral {
                    volume: v.name.clone(),
                })
            }
        })
        .collect()
}

fn claim(c: &PersistentVolumeClaim) -> Claim {
    let annotations = c.metadata.annotations.as_ref();
    let spec = c.spec.as_ref();
    Claim {
        deleting: deleting(c),
        lost: c
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Lost"),
        volume_name: spec
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty()),
        bind_completed: annotations
            .is_some_and(|a| a.contains_key(scheduling::volumes::ANNOTATION_BIND_COMPLETED)),
        storage_class: annotations
            .and_then(|a| a.get(ANN_STORAGE_CLASS).cloned())
            .or_else(|| spec.and_then(|s| s.storage_class_name.clone()))
            .filter(|c| !c.is_empty()),
        controller_pod_uid: c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "Pod")
            .map(|o| o.uid.clone()),
    }
}

fn volume(pv: &PersistentVolume) -> Volume {
    let spec = pv.spec.as_ref();
    Volume {
        deleting: deleting(pv),
        node_affinity: spec
            .and_then(|s| s.node_affinity.as_ref())
            .map(|a| super::convert::node_selector_terms(a.required.as_ref()))
            .unwrap_or_default(),
        local: spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some()),
        csi_driver: spec.and_then(|s| {
            s.csi.as_ref().map(|c| c.driver.clone()).or_else(|| {
                s.aws_elastic_block_store
                    .as_ref()
                    .map(|_| "ebs.csi.aws.com".to_string())
            })
        }),
    }
}

fn class(sc: &StorageClass) -> Class {
    Class {
        provisioner: sc.provisioner.clone(),
        wait_for_first_consumer: sc
            .volume_binding_mode
            .as_deref()
            .map(|m| m == "WaitForFirstConsumer"),
        allowed_topologies: sc
            .allowed_topologies
            .iter()
            .flatten()
            .map(|t| {
                t.match_label_expressions
                    .iter()
                    .flatten()
                    .map(|e| {
                        let values: Vec<&str> = e.values.iter().map(String::as_str).collect();
                        Requirement::new(e.key.clone(), Operator::In, &values)
                    })
                    .collect()
            })
            .collect(),
    }
}

/// The resolver's objects: claims, volumes and classes, and every node's hostname.
pub fn objects<'a>(
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    classes: impl IntoIterator<Item = &'a StorageClass>,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Objects {
    Objects {
        claims: claims
            .into_iter()
            .map(|c| {
                let key = (
                    c.metadata.namespace.clone().unwrap_or_default(),
                    name(c).to_string(),
                );
                (key, claim(c))
            })
            .collect(),
        volumes: volumes
            .into_iter()
            .map(|v| (name(v).to_string(), volume(v)))
            .collect(),
        classes: classes
            .into_iter()
            .map(|c| (name(c).to_string(), class(c)))
            .collect(),
        hostnames: nodes
            .into_iter()
            .map(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(scheduling::LABEL_HOSTNAME).cloned())
                    .unwrap_or_else(|| name(n).to_string())
            })
            .collect::<BTreeSet<String>>(),
    }
}

/// What `pod`'s volumes require, resolved against `objects`.
pub fn resolve(pod: &Pod, objects: &Objects) -> Result<Resolved, Blocked> {
    let volumes = pod_volumes(pod);
    if volumes.is_empty() {
        return Ok(Resolved::default());
    }
    scheduling::volumes::resolve(
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        name(pod),
        pod.metadata.uid.as_deref().unwrap_or_default(),
        &volumes,
        objects,
    )
}

/// `model` (the scheduling model of `pod`) with its volumes' requirements and attachments,
/// or unplaceable with the reason no node can take it yet.
pub fn apply(pod: &Pod, objects: &Objects, model: &mut scheduling::Pod) {
    match resolve(pod, objects) {
        Ok(r) => {
            model.volume_requirements = r.alternatives;
            model.volumes = r.uses;
        }
        Err(blocked) => model.unplaceable = Some(blocked.to_string()),
    }
}

/// A failure `reason` of `pod` with what its volumes pin it to, if they do (e.g. `…; its
/// volumes: needs topology.kubernetes.io/zone in [zone-c]: volume data (claim data-0)`):
/// for the `FailedScheduling` event, `simulate` and `inspect --why`.
pub fn explain(reason: &str, pod: &Pod, objects: &Objects) -> String {
    match resolve(pod, objects) {
        Ok(r) if !r.pins.is_empty() => format!("{reason}; its volumes: {}", r.pins.join(", ")),
        _ => reason.to_string(),
    }
}

/// The attachments of a pod bound to a node: what counts against its limits (a volume that
/// cannot be resolved any more, e.g. its claim is gone, counts nothing).
pub fn uses(pod: &Pod, objects: &Objects) -> Vec<scheduling::VolumeUse> {
    resolve(pod, objects).map(|r| r.uses).unwrap_or_default()
}

/// What a node's CSINode publishes per driver: `Some(count)`, or `None` for a driver
/// installed without a limit.
pub fn published(csinode: &CSINode) -> BTreeMap<String, Option<u32>> {
    csinode
        .spec
        .drivers
        .iter()
        .map(|d| {
            let count = d
                .allocatable
                .as_ref()
                .and_then(|a| a.count)
                .and_then(|c| u32::try_from(c).ok());
            (d.name.clone(), count)
        })
        .collect()
}

/// A node's attach limits: its instance type's (`fallback`), each driver its CSINode lists
/// replaced by what the CSINode says (Karpenter's `AddFallbackLimit` / `AddLimit`).
pub fn limits(
    fallback: &BTreeMap<String, u32>,
    published: Option<&BTreeMap<String, Option<u32>>>,
) -> BTreeMap<String, u32> {
    let mut out = fallback.clone();
    for (driver, count) in published.into_iter().flatten() {
        match count {
            Some(n) => out.insert(driver.clone(), *n),
            None => out.remove(driver),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    #[test]
    fn only_claim_volumes_constrain() {
        let pod: Pod = typed(json!({
            "metadata": {"name": "db-0", "namespace": "d"},
            "spec": {"containers": [], "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                {"name": "cache", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}
        }));
        assert_eq!(
            pod_volumes(&pod),
            vec![
                PodVolume::Claim {
                    volume: "data".into(),
                    claim: "data-db-0".into()
                },
                PodVolume::Ephemeral {
                    volume: "cache".into()
                }
            ]
        );
    }

    #[test]
    fn objects_read_what_the_rules_need() {
        let pvc: PersistentVolumeClaim = typed(json!({
            "metadata": {"name": "c", "namespace": "d",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                "volume.beta.kubernetes.io/storage-class": "legacy"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "controller": true}]},
            "spec": {"volumeName": "pv1", "storageClassName": "fast"},
            "status": {"phase": "Bound"}
        }));
        let pv: PersistentVolume = typed(json!({
            "metadata": {"name": "pv1"},
            "spec": {"csi": {"driver": "d.csi", "volumeHandle": "h"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z3"]}]}]}}}
        }));
        let sc: StorageClass = typed(json!({
            "metadata": {"name": "fast"}, "provisioner": "kubernetes.io/aws-ebs",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["z1", "z2"]}]}]
        }));
        let node: Node = typed(
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "host-1"}}}),
        );
        let o = objects([&pvc], [&pv], [&sc], [&node]);
        let c = &o.claims[&("d".to_string(), "c".to_string())];
        assert!(c.bind_completed && !c.lost && !c.deleting);
        assert_eq!(c.volume_name.as_deref(), Some("pv1"));
        assert_eq!(
            c.storage_class.as_deref(),
            Some("legacy"),
            "the annotation first"
        );
        assert_eq!(c.controller_pod_uid.as_deref(), Some("u1"));
        let v = &o.volumes["pv1"];
        assert_eq!(v.csi_driver.as_deref(), Some("d.csi"));
        assert!(!v.local);
        assert_eq!(
            v.node_affinity,
            vec![vec![Requirement::new(
                "topology.kubernetes.io/zone",
                Operator::In,
                &["z3"]
            )]]
        );
        let class = &o.classes["fast"];
        assert_eq!(class.wait_for_first_consumer, Some(true));
        assert_eq!(class.allowed_topologies[0][0].values, vec!["z1", "z2"]);
        assert!(o.hostnames.contains("host-1"));
    }

    #[test]
    fn csinode_limits_replace_the_instance_types() {
        let csinode: CSINode = typed(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [
                {"name": "a.csi", "nodeID": "n1", "allocatable": {"count": 3}},
                {"name": "b.csi", "nodeID": "n1"}]}
        }));
        let fallback = BTreeMap::from([
            ("a.csi".to_string(), 25),
            ("b.csi".to_string(), 10),
            ("c.csi".to_string(), 7),
        ]);
        let published = published(&csinode);
        assert_eq!(
            limits(&fallback, Some(&published)),
            BTreeMap::from([("a.csi".to_string(), 3), ("c.csi".to_string(), 7)])
        );
        assert_eq!(limits(&fallback, None), fallback, "no CSINode yet");
    }
}
