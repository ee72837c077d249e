//! What a pod's persistent volumes require of the node it lands on, from the claims, volumes
//! and storage classes they name (Karpenter's `VolumeTopology` and `VolumeUsage`, with
//! kube-scheduler's refusals): the topology alternatives and the attachments per CSI
//! driver, or why no node can take the pod yet.
//!
//! Pure: the caller reads the objects (trimmed to these fields) from its caches.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Requirement, VolumeUse};

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

/// PLACEHOLDER until the resolver lands (branch `vsolve`): constrains nothing.
pub fn resolve(
    _namespace: &str,
    _pod_name: &str,
    _pod_uid: &str,
    _volumes: &[PodVolume],
    _objects: &Objects,
) -> Result<Resolved, Blocked> {
    Ok(Resolved::default())
}
