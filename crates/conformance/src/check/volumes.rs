//! Volumes, as kube-scheduler judges a node for a pod (VolumeBinding, NodeVolumeLimits):
//! each claim a pod uses (`persistentVolumeClaim`, or the generic ephemeral volume's
//! `<pod>-<volume>`, which must be the pod's own) must exist, not be deleting or lost, and be
//! bound to an existing volume or wait for its first consumer through a StorageClass; the
//! node must satisfy the bound volume's node affinity (one of its terms) or the class's
//! `allowedTopologies`; and per CSI driver the distinct volumes on the node stay within its
//! attach limit: the node's CSINode where it lists the driver, else the instance type's
//! expected limit (Karpenter's `VolumeAttachmentLimits`; a new node has no CSINode yet).
//! Bare ephemeral claims are the pod's, as the replay takes them ([`Record::volume_claims`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

use super::labels::{self, Labels, Req, Value};
use crate::record::{Record, RecordedInstanceType};

// The names are Kubernetes' (shared with the operator); the rules below are the checker's own.
use karpenter_core::model::volumes::ANN_STORAGE_CLASS as BETA_CLASS;
use scheduling::volumes::{ANNOTATION_BIND_COMPLETED as BIND_COMPLETED, IN_TREE_TO_CSI as IN_TREE};

/// One claim of a pod, as it bears on a node.
pub(super) struct Use {
    pub(super) claim: String,
    /// Why no node can take the pod (kube-scheduler's VolumeBinding PreFilter).
    pub(super) refused: Option<String>,
    /// Node selector terms (OR) the node must meet; empty: any node.
    pub(super) terms: Vec<Vec<Req>>,
    /// (driver, volume) counted against the node's attach limit.
    pub(super) attach: Option<(String, String)>,
}

fn find<
    'a,
    T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
>(
    list: &'a [T],
    namespace: Option<&str>,
    name: &str,
) -> Option<&'a T> {
    list.iter().find(|o| {
        let m = o.metadata();
        m.name.as_deref() == Some(name)
            && (namespace.is_none() || m.namespace.as_deref() == namespace)
    })
}

fn pv_driver(pv: &PersistentVolume) -> Option<String> {
    let s = pv.spec.as_ref()?;
    if let Some(csi) = &s.csi {
        return Some(csi.driver.clone());
    }
    let plugin = if s.aws_elastic_block_store.is_some() {
        "kubernetes.io/aws-ebs"
    } else if s.gce_persistent_disk.is_some() {
        "kubernetes.io/gce-pd"
    } else if s.azure_disk.is_some() {
        "kubernetes.io/azure-disk"
    } else if s.cinder.is_some() {
        "kubernetes.io/cinder"
    } else {
        return None;
    };
    class_driver(plugin)
}

fn class_driver(provisioner: &str) -> Option<String> {
    if provisioner.is_empty() || provisioner == "kubernetes.io/no-provisioner" {
        return None;
    }
    let csi = IN_TREE
        .iter()
        .find(|(p, _)| *p == provisioner)
        .map_or(provisioner, |(_, c)| c);
    Some(csi.to_string())
}

fn pv_terms(pv: &PersistentVolume) -> Vec<Vec<Req>> {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| {
            r.node_selector_terms
                .iter()
                .map(|t| {
                    t.match_expressions
                        .iter()
                        .flatten()
                        .map(Req::from_core)
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn class_terms(sc: &StorageClass) -> Vec<Vec<Req>> {
    sc.allowed_topologies
        .iter()
        .flatten()
        .map(|t| {
            t.match_label_expressions
                .iter()
                .flatten()
                .map(|e| Req {
                    key: e.key.clone(),
                    op: "In".into(),
                    values: e.values.clone(),
                })
                .collect()
        })
        .collect()
}

fn class_of(pvc: &PersistentVolumeClaim) -> String {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_CLASS))
        .cloned()
        .or_else(|| pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}

/// The claims of `pod` against `rec`'s volume objects.
pub(super) fn uses(rec: &Record, pod: &Pod) -> Vec<Use> {
    let i = &rec.input;
    let claims = rec.volume_claims();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let (claim, ephemeral) = if let Some(c) = &v.persistent_volume_claim {
            (c.claim_name.clone(), false)
        } else if v.ephemeral.is_some() {
            (format!("{pod_name}-{}", v.name), true)
        } else {
            continue;
        };
        let mut u = Use {
            claim: format!("{ns}/{claim}"),
            refused: None,
            terms: Vec::new(),
            attach: None,
        };
        let Some(pvc) = find(&claims, Some(ns), &claim) else {
            u.refused = Some("claim not found".into());
            out.push(u);
            continue;
        };
        let owned = pvc.metadata.owner_references.iter().flatten().any(|o| {
            o.controller == Some(true) && Some(o.uid.as_str()) == pod.metadata.uid.as_deref()
        });
        let volume_name = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        let completed = pvc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED));
        let class = class_of(pvc);
        let sc = find(&i.storage_classes, None, &class);
        if ephemeral && !owned {
            u.refused = Some("ephemeral claim not created for the pod".into());
        } else if pvc.metadata.deletion_timestamp.is_some() {
            u.refused = Some("claim being deleted".into());
        } else if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            u.refused = Some("claim lost".into());
        } else if !volume_name.is_empty() && completed {
            match find(&i.persistent_volumes, None, &volume_name) {
                Some(pv) => {
                    u.terms = pv_terms(pv);
                    u.attach = pv_driver(pv).map(|d| (d, format!("pv/{volume_name}")));
                }
                None => u.refused = Some(format!("bound to missing volume {volume_name}")),
            }
        } else if !volume_name.is_empty()
            || sc.and_then(|c| c.volume_binding_mode.as_deref()) != Some("WaitForFirstConsumer")
        {
            u.refused = Some("unbound immediate claim".into());
        } else if let Some(sc) = sc {
            u.terms = class_terms(sc);
            u.attach = class_driver(&sc.provisioner).map(|d| (d, u.claim.clone()));
        }
        out.push(u);
    }
    out
}

/// The first claim of `uses` the node with `labels` cannot take, and why.
pub(super) fn topology(uses: &[Use], labels: &Labels) -> Option<String> {
    uses.iter().find_map(|u| {
        if let Some(why) = &u.refused {
            return Some(format!("claim {}: {why}", u.claim));
        }
        let holds = u.terms.is_empty()
            || u.terms
                .iter()
                .any(|t| t.iter().all(|r| labels::holds(labels, r)));
        (!holds).then(|| format!("claim {}: volume topology not met", u.claim))
    })
}

/// The instance type's expected limits.
pub(super) fn type_limits(it: &RecordedInstanceType) -> BTreeMap<String, i64> {
    it.volume_attachment_limits.clone()
}

/// An existing node's limits: its CSINode's where it lists the driver (listed without a count:
/// unlimited), else its instance type's (by its NodePool and instance-type labels).
pub(super) fn node_limits(rec: &Record, node: &str, labels: &Labels) -> BTreeMap<String, i64> {
    let fixed = |k: &str| match labels.get(k) {
        Some(Value::Fixed(v)) => Some(v.as_str()),
        _ => None,
    };
    let mut out = match (
        fixed("karpenter.sh/nodepool"),
        fixed("node.kubernetes.io/instance-type"),
    ) {
        (Some(pool), Some(it)) => rec
            .instance_types(pool)
            .iter()
            .find(|t| t.name == it)
            .map(type_limits)
            .unwrap_or_default(),
        _ => BTreeMap::new(),
    };
    if let Some(c) = find(&rec.input.csi_nodes, None, node) {
        for d in &c.spec.drivers {
            match d.allocatable.as_ref().and_then(|a| a.count) {
                Some(n) => out.insert(d.name.clone(), i64::from(n)),
                None => out.remove(&d.name),
            };
        }
    }
    out
}

/// The first driver whose distinct volumes among `uses` exceed its limit.
pub(super) fn over_limit<'u>(
    uses: impl Iterator<Item = &'u Use>,
    limits: &BTreeMap<String, i64>,
) -> Option<String> {
    let mut per: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (d, v) in uses.filter_map(|u| u.attach.as_ref()) {
        per.entry(d).or_default().insert(v);
    }
    per.into_iter().find_map(|(d, vols)| {
        let limit = *limits.get(d)?;
        (vols.len() as i64 > limit)
            .then(|| format!("{} volumes of {d} > limit {limit}", vols.len()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone_use(claim: &str, zones: &[&str], driver: Option<&str>) -> Use {
        Use {
            claim: claim.into(),
            refused: None,
            terms: zones
                .iter()
                .map(|z| {
                    vec![Req {
                        key: "topology.kubernetes.io/zone".into(),
                        op: "In".into(),
                        values: vec![z.to_string()],
                    }]
                })
                .collect(),
            attach: driver.map(|d| (d.to_string(), claim.to_string())),
        }
    }

    fn zone(v: Value) -> Labels {
        [("topology.kubernetes.io/zone".to_string(), v)].into()
    }

    #[test]
    fn volume_topology_must_hold_for_every_zone_the_launch_may_take() {
        let uses = [zone_use("ns/a", &["z1", "z2"], None)];
        assert_eq!(topology(&uses, &zone(Value::Fixed("z2".into()))), None);
        assert!(topology(&uses, &zone(Value::Fixed("z3".into()))).is_some());
        let both = Value::OneOf(["z1".to_string(), "z3".to_string()].into());
        assert!(topology(&uses, &zone(both)).is_some());
        let refused = Use {
            refused: Some("claim not found".into()),
            ..zone_use("ns/b", &[], None)
        };
        assert!(
            topology(&[refused], &Labels::new())
                .unwrap()
                .contains("not found")
        );
    }

    #[test]
    fn attach_limit_counts_distinct_volumes_per_driver() {
        let limits: BTreeMap<String, i64> = [("csi".to_string(), 2)].into();
        let shared = [
            zone_use("ns/a", &[], Some("csi")),
            zone_use("ns/a", &[], Some("csi")),
            zone_use("ns/b", &[], Some("csi")),
            zone_use("ns/c", &[], Some("other")),
        ];
        assert_eq!(over_limit(shared.iter(), &limits), None);
        let more = [zone_use("ns/d", &[], Some("csi"))];
        assert!(over_limit(shared.iter().chain(&more), &limits).is_some());
    }
}
