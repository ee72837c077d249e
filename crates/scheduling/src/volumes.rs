//! What a pod's persistent volumes require of the node it lands on, from the claims, volumes
//! and storage classes they name (Karpenter's `VolumeTopology` and `VolumeUsage`, with
//! kube-scheduler's refusals): the topology alternatives and the attachments per CSI
//! driver, or why no node can take the pod yet.
//!
//! Pure: the caller reads the objects (trimmed to these fields) from its caches.

use std::collections::{BTreeMap, BTreeSet};

use crate::{LABEL_HOSTNAME, Operator, Requirement, Requirements, VolumeUse};

/// A volume of a pod that goes through a PersistentVolumeClaim; other volume types
/// (emptyDir, configMap, CSI inline, …) constrain no node and are not listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodVolume {
    /// `persistentVolumeClaim.claimName`.
    Claim { volume: String, claim: String },
    /// A generic ephemeral volume: its claim is `<pod name>-<volume name>`, created by the
    /// ephemeral volume controller and owned by the pod.
    Ephemeral { volume: String },
}

/// A PersistentVolumeClaim, trimmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claim {
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.phase: Lost`.
    pub lost: bool,
    /// `spec.volumeName`.
    pub volume_name: Option<String>,
    /// Annotation `pv.kubernetes.io/bind-completed` is present.
    pub bind_completed: bool,
    /// The class: annotation `volume.beta.kubernetes.io/storage-class` first (as
    /// kube-scheduler reads it), else `spec.storageClassName`.
    pub storage_class: Option<String>,
    /// The uid of the pod that controls it (owner reference with `controller: true` of
    /// kind Pod): an ephemeral volume's claim must be its pod's.
    pub controller_pod_uid: Option<String>,
}

/// A PersistentVolume, trimmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    pub deleting: bool,
    /// `spec.nodeAffinity.required.nodeSelectorTerms`: OR of terms, each the AND of its
    /// `matchExpressions` (`matchFields` are not node labels and are dropped).
    pub node_affinity: Vec<Vec<Requirement>>,
    /// `spec.local` or `spec.hostPath` is set: the data lives on one host.
    pub local: bool,
    /// `spec.csi.driver`, else the CSI name of an in-tree source (EBS only, as Karpenter).
    pub csi_driver: Option<String>,
}

/// A StorageClass, trimmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Class {
    pub provisioner: String,
    /// `volumeBindingMode`: `Some(true)` WaitForFirstConsumer, `Some(false)` Immediate,
    /// `None` unset (kube-scheduler refuses a class without one).
    pub wait_for_first_consumer: Option<bool>,
    /// `allowedTopologies`: OR of terms, each `key In values` per `matchLabelExpressions`.
    pub allowed_topologies: Vec<Vec<Requirement>>,
}

/// The objects pods' volumes are resolved against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Objects {
    /// By (namespace, name).
    pub claims: BTreeMap<(String, String), Claim>,
    /// By name.
    pub volumes: BTreeMap<String, Volume>,
    /// By name.
    pub classes: BTreeMap<String, Class>,
    /// `kubernetes.io/hostname` of every existing node: a local volume pinned elsewhere
    /// can be reached by no node and no launch.
    pub hostnames: BTreeSet<String>,
}

/// What a pod's volumes require.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Alternatives (OR), each an AND; empty: unconstrained. See
    /// [`crate::Pod::volume_requirements`].
    pub alternatives: Vec<Vec<Requirement>>,
    /// Attachments per driver (each claim once).
    pub uses: Vec<VolumeUse>,
    /// Per constraining volume, what it needs: e.g. `needs topology.kubernetes.io/zone in
    /// [zone-c]: volume data (claim data-db-0)`, for events and `inspect --why`.
    pub pins: Vec<String>,
}

/// Why no node can take the pod until an object changes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("volume {volume}: {reason}")]
pub struct Blocked {
    /// The pod's volume name.
    pub volume: String,
    pub reason: String,
}

/// The annotation that says a claim's binding to its volume is complete.
pub const ANNOTATION_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// The provisioner of classes whose volumes are made by hand (static local volumes): no CSI
/// driver attaches them.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// In-tree provisioners and the CSI drivers that replaced them (csi-translation-lib).
pub const IN_TREE_TO_CSI: &[(&str, &str)] = &[
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// Combinations of several volumes' alternatives kept at most (the cross product grows
/// exponentially; a pod with that many distinct topologies is not a real case).
pub const MAX_ALTERNATIVES: usize = 256;

/// The CSI driver a class provisions through: its provisioner, translated when in-tree;
/// `None` for no provisioner (nothing is attached through a driver).
pub fn class_driver(provisioner: &str) -> Option<String> {
    if provisioner.is_empty() || provisioner == NO_PROVISIONER {
        return None;
    }
    let csi = IN_TREE_TO_CSI
        .iter()
        .find(|(in_tree, _)| *in_tree == provisioner)
        .map_or(provisioner, |(_, csi)| csi);
    Some(csi.to_string())
}

/// What one volume contributes: its claim, alternatives (empty: unconstrained) and driver.
struct One {
    volume: String,
    claim: String,
    alternatives: Vec<Vec<Requirement>>,
    driver: Option<String>,
}

/// Resolves the volumes of pod `namespace/pod_name` (uid `pod_uid`) against `objects`: the
/// topology alternatives its node must meet, the attachments it makes, and a line per
/// constraining volume; or the first volume that keeps every node from taking it (as
/// kube-scheduler's VolumeBinding refuses it, and Karpenter ignores the pod).
///
/// Deviation from Karpenter: a bound local (or hostPath) volume keeps its
/// `kubernetes.io/hostname` requirement, so the pod goes only to that node (Karpenter drops
/// it and launches a node kube-scheduler will refuse), and a local volume on a host no node
/// has blocks the pod.
pub fn resolve(
    namespace: &str,
    pod_name: &str,
    pod_uid: &str,
    volumes: &[PodVolume],
    objects: &Objects,
) -> Result<Resolved, Blocked> {
    let mut ones = Vec::with_capacity(volumes.len());
    for v in volumes {
        ones.push(resolve_one(namespace, pod_name, pod_uid, v, objects)?);
    }
    let mut out = Resolved::default();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for one in &ones {
        if let Some(driver) = &one.driver
            && seen.insert(&one.claim)
        {
            out.uses.push(VolumeUse {
                driver: driver.clone(),
                id: format!("{namespace}/{}", one.claim),
            });
        }
        if !one.alternatives.is_empty() {
            out.pins.push(format!(
                "needs {}: volume {} (claim {})",
                describe(&one.alternatives),
                one.volume,
                one.claim
            ));
        }
    }
    out.alternatives = merge(ones.iter().map(|o| o.alternatives.as_slice()));
    Ok(out)
}

/// Karpenter's `mergeVolumeRequirementAlternatives`: the cross product of the volumes'
/// alternatives without the combinations whose requirements cannot hold together; all of
/// them when none can (the pod then fits nowhere, and says so).
fn merge<'a>(per_volume: impl Iterator<Item = &'a [Vec<Requirement>]>) -> Vec<Vec<Requirement>> {
    let mut combos: Vec<Vec<Requirement>> = Vec::new();
    for alts in per_volume.filter(|a| !a.is_empty()) {
        if combos.is_empty() {
            combos = alts.iter().take(MAX_ALTERNATIVES).cloned().collect();
            continue;
        }
        let mut kept = Vec::new();
        let mut unpruned = Vec::new();
        for c in &combos {
            for a in alts {
                let mut both = c.clone();
                both.extend(a.iter().cloned());
                if kept.len() < MAX_ALTERNATIVES && compatible(c, a) {
                    kept.push(both.clone());
                }
                if unpruned.len() < MAX_ALTERNATIVES {
                    unpruned.push(both);
                }
            }
        }
        combos = if kept.is_empty() { unpruned } else { kept };
    }
    combos
}

/// Whether two ANDs of requirements can hold on one node (deprecated keys read as stable).
fn compatible(a: &[Requirement], b: &[Requirement]) -> bool {
    let norm = |list: &[Requirement]| {
        let list: Vec<Requirement> = list
            .iter()
            .map(|r| Requirement {
                key: crate::normalized_label_key(&r.key).to_string(),
                ..r.clone()
            })
            .collect();
        Requirements::from_list(&list)
    };
    norm(a).intersects(&norm(b)).is_ok()
}

/// `key in [a, b] and other exists or …`, short, for events.
fn describe(alternatives: &[Vec<Requirement>]) -> String {
    alternatives
        .iter()
        .map(|term| {
            term.iter()
                .map(|r| {
                    let vals = r.values.join(", ");
                    match r.operator {
                        Operator::In => format!("{} in [{vals}]", r.key),
                        Operator::NotIn => format!("{} not in [{vals}]", r.key),
                        Operator::Exists => format!("{} set", r.key),
                        Operator::DoesNotExist => format!("{} unset", r.key),
                        Operator::Gt => format!("{} > {vals}", r.key),
                        Operator::Lt => format!("{} < {vals}", r.key),
                        Operator::Gte => format!("{} >= {vals}", r.key),
                        Operator::Lte => format!("{} <= {vals}", r.key),
                    }
                })
                .collect::<Vec<_>>()
                .join(" and ")
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

fn resolve_one(
    namespace: &str,
    pod_name: &str,
    pod_uid: &str,
    v: &PodVolume,
    objects: &Objects,
) -> Result<One, Blocked> {
    let (volume, claim_name, ephemeral) = match v {
        PodVolume::Claim { volume, claim } => (volume, claim.clone(), false),
        PodVolume::Ephemeral { volume } => (volume, format!("{pod_name}-{volume}"), true),
    };
    let blocked = |reason: String| Blocked {
        volume: volume.clone(),
        reason,
    };
    let key = format!("{namespace}/{claim_name}");
    let Some(claim) = objects
        .claims
        .get(&(namespace.to_string(), claim_name.clone()))
    else {
        return Err(blocked(if ephemeral {
            format!(
                "waiting for the ephemeral volume controller to create persistentvolumeclaim {key}"
            )
        } else {
            format!("persistentvolumeclaim {key} not found")
        }));
    };
    if ephemeral && claim.controller_pod_uid.as_deref() != Some(pod_uid) {
        return Err(blocked(format!(
            "persistentvolumeclaim {key} was not created for pod {namespace}/{pod_name} (pod is not owner)"
        )));
    }
    if claim.deleting {
        return Err(blocked(format!(
            "persistentvolumeclaim {key} is being deleted"
        )));
    }
    if claim.lost {
        return Err(blocked(format!(
            "persistentvolumeclaim {key} bound to non-existent persistentvolume (phase Lost)"
        )));
    }
    let (alternatives, driver) = match claim.volume_name.as_deref().filter(|n| !n.is_empty()) {
        Some(pv_name) => bound(&key, pv_name, claim, objects),
        None => unbound(&key, claim, objects),
    }
    .map_err(blocked)?;
    Ok(One {
        volume: volume.clone(),
        claim: claim_name,
        alternatives,
        driver,
    })
}

/// What a volume requires of the node, and its CSI driver.
type Needs = (Vec<Vec<Requirement>>, Option<String>);

/// A claim bound to `pv_name`: the volume's node affinity (a local volume's, if a node can
/// meet it) and driver, or why the binding cannot be used.
fn bound(key: &str, pv_name: &str, claim: &Claim, objects: &Objects) -> Result<Needs, String> {
    if !claim.bind_completed {
        return Err(format!(
            "persistentvolumeclaim {key} is not fully bound to persistentvolume {pv_name} \
             (no annotation {ANNOTATION_BIND_COMPLETED}): pod has unbound immediate \
             PersistentVolumeClaims"
        ));
    }
    let Some(pv) = objects.volumes.get(pv_name) else {
        return Err(format!(
            "persistentvolumeclaim {key} bound to non-existent persistentvolume {pv_name}"
        ));
    };
    if pv.deleting {
        return Err(format!(
            "persistentvolume {pv_name} of persistentvolumeclaim {key} is being deleted"
        ));
    }
    let alternatives = if pv.local {
        local_terms(pv_name, pv, &objects.hostnames)?
    } else {
        pv.node_affinity.clone()
    };
    Ok((alternatives, pv.csi_driver.clone()))
}

/// An unbound claim: its class's allowed topologies and provisioner, when the class waits
/// for the first consumer; else why no node can take the pod.
fn unbound(key: &str, claim: &Claim, objects: &Objects) -> Result<Needs, String> {
    let Some(class_name) = claim.storage_class.as_deref().filter(|c| !c.is_empty()) else {
        return Err(format!(
            "unbound persistentvolumeclaim {key} has no storage class: pod has unbound \
             immediate PersistentVolumeClaims"
        ));
    };
    let Some(class) = objects.classes.get(class_name) else {
        return Err(format!(
            "storageclass {class_name} of unbound persistentvolumeclaim {key} not found"
        ));
    };
    match class.wait_for_first_consumer {
        Some(true) => Ok((
            class.allowed_topologies.clone(),
            class_driver(&class.provisioner),
        )),
        Some(false) => Err(format!(
            "persistentvolumeclaim {key} with immediate volume binding mode \
             (storageclass {class_name}) must be bound: pod has unbound immediate \
             PersistentVolumeClaims"
        )),
        None => Err(format!(
            "storageclass {class_name} of unbound persistentvolumeclaim {key} has no \
             volumeBindingMode"
        )),
    }
}

/// The node affinity terms of local volume `pv` that some node can meet: a term naming
/// `kubernetes.io/hostname` values of which no node has one is dropped; none left: why.
fn local_terms(
    pv_name: &str,
    pv: &Volume,
    hostnames: &BTreeSet<String>,
) -> Result<Vec<Vec<Requirement>>, String> {
    let mut gone: Vec<&str> = Vec::new();
    let mut live = Vec::new();
    for term in &pv.node_affinity {
        let dead = term.iter().find(|r| {
            r.key == LABEL_HOSTNAME
                && r.operator == Operator::In
                && !r.values.iter().any(|h| hostnames.contains(h))
        });
        match dead {
            Some(r) => gone.extend(r.values.iter().map(String::as_str)),
            None => live.push(term.clone()),
        }
    }
    if live.is_empty() && !gone.is_empty() {
        let hosts = gone.join(", ");
        return Err(format!(
            "local volume {pv_name} is on host {hosts}, which no node has"
        ));
    }
    Ok(live)
}
