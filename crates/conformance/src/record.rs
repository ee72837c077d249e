//! The records `hack/conformance` writes (one per Karpenter Solve), and corpora of them.
//!
//! A record file is one JSON object (`solve-NNNNN.json`); a corpus file
//! (`tests/conformance/*.json`) is `{"instanceTypeSets": {id: [...]}, "records": [...]}` where
//! each record names its NodePools' instance types by set id (the same few catalogs recur in
//! every scenario, so they are stored once).

use std::collections::BTreeMap;
use std::path::Path;

use api::NodeClaim;
use api::NodePool;
use api::karpenter::NodeSelectorRequirementWithMinValues;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Taint};
use k8s_openapi::api::resource::v1::{
    CounterSet, Device, DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::{Deserialize, Deserializer, Serialize};

/// Go's `nil` slices and maps are `null`.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordedOffering {
    #[serde(default, deserialize_with = "nullable")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    pub available: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reservation_capacity: i64,
    /// Entries replacing the instance type's capacity / overhead for this offering.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity_override: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overhead_override: BTreeMap<String, Quantity>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A Karpenter `cloudprovider.InstanceType` as recorded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordedInstanceType {
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default, deserialize_with = "nullable")]
    pub capacity: BTreeMap<String, Quantity>,
    #[serde(default, deserialize_with = "nullable")]
    pub overhead: BTreeMap<String, Quantity>,
    #[serde(default, deserialize_with = "nullable")]
    pub offerings: Vec<RecordedOffering>,
    /// Expected attach limits per CSI driver (Karpenter's `VolumeAttachmentLimits`).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub volume_attachment_limits: BTreeMap<String, i64>,
    /// The DRA devices a node of this type publishes (Karpenter's
    /// `DynamicResources.ResourceSliceTemplates`; absent in records made before them).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_slice_templates: Vec<RecordedSliceTemplate>,
    /// How many `DynamicResources.AttributeBindings` the type has (not replayed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attribute_bindings: i64,
}

/// A Karpenter `cloudprovider.ResourceSliceTemplate`: a driver's devices in a pool, as a
/// ResourceSlice's `spec.devices`, or the pool's shared counters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordedSliceTemplate {
    pub driver: String,
    #[serde(default)]
    pub pool: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub devices: Vec<Device>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub shared_counters: Vec<CounterSet>,
}

/// What Karpenter's scheduler was given (besides the pods to schedule).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedInput {
    #[serde(default, deserialize_with = "nullable")]
    pub node_pools: Vec<NodePool>,
    /// NodePool name → its instance types (in a corpus: `instance_type_sets` ids instead).
    #[serde(default, deserialize_with = "nullable")]
    pub instance_types: BTreeMap<String, Vec<RecordedInstanceType>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instance_type_sets: BTreeMap<String, String>,
    /// The state nodes' Nodes and NodeClaims.
    #[serde(default, deserialize_with = "nullable")]
    pub nodes: Vec<Node>,
    #[serde(default, deserialize_with = "nullable")]
    pub node_claims: Vec<NodeClaim>,
    /// Every pod bound to a node.
    #[serde(default, deserialize_with = "nullable")]
    pub bound_pods: Vec<Pod>,
    #[serde(default, deserialize_with = "nullable")]
    pub daemon_sets: Vec<DaemonSet>,
    /// The volume objects the scheduler's client saw (absent in records made before them).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub persistent_volume_claims: Vec<PersistentVolumeClaim>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub persistent_volumes: Vec<PersistentVolume>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub storage_classes: Vec<StorageClass>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub csi_nodes: Vec<CSINode>,
    /// The Dynamic Resource Allocation objects the scheduler's client saw (absent in records
    /// made before them).
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_claims: Vec<ResourceClaim>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_claim_templates: Vec<ResourceClaimTemplate>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub device_classes: Vec<DeviceClass>,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_slices: Vec<ResourceSlice>,
    /// Some pod to schedule has volume topology requirements (Karpenter's view).
    #[serde(default)]
    pub volume_requirements: bool,
    #[serde(default)]
    pub dra: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordedNodeClaim {
    pub node_pool: String,
    #[serde(default, deserialize_with = "nullable")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default, deserialize_with = "nullable")]
    pub taints: Vec<Taint>,
    #[serde(default, deserialize_with = "nullable")]
    pub instance_types: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub pods: Vec<String>,
    pub price: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedExisting {
    pub node: String,
    #[serde(default, deserialize_with = "nullable")]
    pub pods: Vec<String>,
}

/// Karpenter's result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordedResult {
    #[serde(default, deserialize_with = "nullable")]
    pub node_claims: Vec<RecordedNodeClaim>,
    #[serde(default, deserialize_with = "nullable")]
    pub existing: Vec<RecordedExisting>,
    #[serde(default, deserialize_with = "nullable")]
    pub pod_errors: BTreeMap<String, String>,
}

/// One Solve of Karpenter's test suite.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub scenario: String,
    pub solve: u64,
    pub input: RecordedInput,
    #[serde(default, deserialize_with = "nullable")]
    pub pods: Vec<Pod>,
    pub karpenter: RecordedResult,
}

impl Record {
    /// Drops what no check reads: managed fields.
    fn slim(&mut self) {
        let i = &mut self.input;
        let metas = i
            .node_pools
            .iter_mut()
            .map(|o| &mut o.metadata)
            .chain(i.node_claims.iter_mut().map(|o| &mut o.metadata))
            .chain(i.nodes.iter_mut().map(|o| &mut o.metadata))
            .chain(i.bound_pods.iter_mut().map(|o| &mut o.metadata))
            .chain(i.daemon_sets.iter_mut().map(|o| &mut o.metadata))
            .chain(
                i.persistent_volume_claims
                    .iter_mut()
                    .map(|o| &mut o.metadata),
            )
            .chain(i.persistent_volumes.iter_mut().map(|o| &mut o.metadata))
            .chain(i.storage_classes.iter_mut().map(|o| &mut o.metadata))
            .chain(i.csi_nodes.iter_mut().map(|o| &mut o.metadata))
            .chain(i.resource_claims.iter_mut().map(|o| &mut o.metadata))
            .chain(
                i.resource_claim_templates
                    .iter_mut()
                    .map(|o| &mut o.metadata),
            )
            .chain(i.device_classes.iter_mut().map(|o| &mut o.metadata))
            .chain(i.resource_slices.iter_mut().map(|o| &mut o.metadata))
            .chain(self.pods.iter_mut().map(|o| &mut o.metadata));
        for m in metas {
            m.managed_fields = None;
        }
    }

    /// The scenario and the Solve's number, for tables.
    pub fn id(&self) -> String {
        format!("#{} {}", self.solve, self.scenario)
    }

    /// The instance types of a NodePool.
    pub fn instance_types(&self, pool: &str) -> &[RecordedInstanceType] {
        self.input
            .instance_types
            .get(pool)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

impl Record {
    /// The recorded claims, each generic ephemeral volume's claim (`<pod>-<volume>`) given the
    /// controller owner reference to its pod the ephemeral volume controller sets when it
    /// creates the claim, where the claim has no owner at all: envtest runs no such controller
    /// and Karpenter's tests create the claim bare (Karpenter does not check ownership;
    /// kube-scheduler, and so our resolver, refuse a claim the pod does not own).
    pub fn volume_claims(&self) -> Vec<PersistentVolumeClaim> {
        let pods = self.pods.iter().chain(&self.input.bound_pods);
        let mut made: BTreeMap<(String, String), &Pod> = BTreeMap::new();
        for p in pods {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let name = p.metadata.name.as_deref().unwrap_or_default();
            for v in p.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
                if v.ephemeral.is_some() {
                    made.insert((ns.clone(), format!("{name}-{}", v.name)), p);
                }
            }
        }
        let mut claims = self.input.persistent_volume_claims.clone();
        for c in &mut claims {
            let key = (
                c.metadata.namespace.clone().unwrap_or_default(),
                c.metadata.name.clone().unwrap_or_default(),
            );
            let Some(pod) = made.get(&key) else { continue };
            if c.metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| !o.is_empty())
            {
                continue;
            }
            c.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]);
        }
        claims
    }
}

/// A corpus: records sharing instance type sets.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Corpus {
    pub instance_type_sets: BTreeMap<String, Vec<RecordedInstanceType>>,
    pub records: Vec<Record>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
    #[error("parsing {0}: {1}")]
    Json(String, serde_json::Error),
    #[error("{0}: record {1} names instance type set {2}, which the corpus lacks")]
    MissingSet(String, String, String),
}

impl Corpus {
    /// Stores `records`, each distinct instance type list once, without managed fields.
    pub fn pack(records: Vec<Record>) -> Corpus {
        let mut corpus = Corpus::default();
        let mut ids: Vec<(Vec<RecordedInstanceType>, String)> = Vec::new();
        for mut r in records {
            r.slim();
            for (pool, its) in std::mem::take(&mut r.input.instance_types) {
                let id = match ids.iter().find(|(set, _)| *set == its) {
                    Some((_, id)) => id.clone(),
                    None => {
                        let id = format!("set-{}", ids.len());
                        corpus.instance_type_sets.insert(id.clone(), its.clone());
                        ids.push((its, id.clone()));
                        id
                    }
                };
                r.input.instance_type_sets.insert(pool, id);
            }
            corpus.records.push(r);
        }
        corpus
    }

    /// The records with their instance types resolved.
    pub fn unpack(self, origin: &str) -> Result<Vec<Record>, Error> {
        let sets = self.instance_type_sets;
        self.records
            .into_iter()
            .map(|mut r| {
                for (pool, id) in std::mem::take(&mut r.input.instance_type_sets) {
                    let set = sets
                        .get(&id)
                        .ok_or_else(|| Error::MissingSet(origin.to_string(), r.id(), id.clone()))?;
                    r.input.instance_types.insert(pool, set.clone());
                }
                Ok(r)
            })
            .collect()
    }
}

/// Removes `null` object members: Go writes a zero `metav1.Time` as `null`, which Kubernetes
/// reads as absent. A status condition without `lastTransitionTime` (the tests set
/// conditions directly) gets the zero time, which our NodeClaim type requires.
fn normalize(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(normalize);
            if let Some(serde_json::Value::Array(cs)) = m.get_mut("conditions") {
                for c in cs.iter_mut().filter_map(|c| c.as_object_mut()) {
                    c.entry("lastTransitionTime")
                        .or_insert_with(|| "1970-01-01T00:00:00Z".into());
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// Reads a record file or a corpus file.
pub fn load(path: &Path) -> Result<Vec<Record>, Error> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io(shown.clone(), e))?;
    let mut value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::Json(shown.clone(), e))?;
    normalize(&mut value);
    if value.get("records").is_some() {
        let corpus: Corpus = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::Json(format!("{shown} at {}", e.path()), e.into_inner()))?;
        corpus.unpack(&shown)
    } else {
        let record: Record = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::Json(format!("{shown} at {}", e.path()), e.into_inner()))?;
        Ok(vec![record])
    }
}

/// Every record under `dir` (`solve-*.json` and corpus files), in file name order.
pub fn load_dir(dir: &Path) -> Result<Vec<Record>, Error> {
    let shown = dir.display().to_string();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| Error::Io(shown.clone(), e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        out.extend(load(&f)?);
    }
    Ok(out)
}
