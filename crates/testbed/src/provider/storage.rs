//! The provider plays a zonal CSI storage driver, [`ZONAL_DRIVER`], in the workload clusters
//! it serves (with [`ProviderConfig::storage`]), as a real driver's install would:
//!
//! - a `CSIDriver` object (`attachRequired: false`: no attacher, so no VolumeAttachments;
//!   `storageCapacity: false`: kube-scheduler checks no CSIStorageCapacity), applied at start;
//! - an external-provisioner: a PVC of a StorageClass whose provisioner is [`ZONAL_DRIVER`],
//!   unbound, gets a PV named `pvc-<PVC uid>` (capacity the request, the PVC's access modes
//!   and volume mode, the class's reclaim policy (default Delete) and mount options,
//!   `claimRef` to the PVC, annotation `pv.kubernetes.io/provisioned-by`) pinned by
//!   `nodeAffinity` to `topology.kubernetes.io/zone In [<zone>]`. With a WaitForFirstConsumer
//!   class it waits for kube-scheduler's `volume.kubernetes.io/selected-node` and takes that
//!   Node's zone (a Node without a zone label: its `kubernetes.io/hostname`); with an
//!   Immediate class it provisions at once in the class's first `allowedTopologies` zone (none:
//!   no affinity). kube-controller-manager's PV binder (the testbed runs it) then binds the PVC
//!   (`spec.volumeName`, `pv.kubernetes.io/bind-completed`);
//! - reclaim: a PV it provisioned that is `Released` with policy Delete is deleted;
//! - a `CSINode` per Node the provider creates (named like the Node, owned by it, as the
//!   kubelet makes it): one driver per entry of the template's (or the TestMachine's own)
//!   `capacity.cluster-autoscaler.kubernetes.io/csi-driver` annotation, `allocatable.count`
//!   its limit (none for `0`), plus [`ZONAL_DRIVER`] without a limit when the annotation does
//!   not list it. A bad annotation is logged and ignored (only [`ZONAL_DRIVER`]).
//!
//! Everything is idempotent (deterministic names, creates that accept 409, deletes that
//! accept 404), so a restarted provider carries on. Clusters reached only through a
//! kubeconfig Secret ([`ProviderConfig::workloads_from_secrets`]) get CSINodes but no
//! provisioner.

use api::consts::annotations::CA_CSI_DRIVER;
use api::consts::labels::{HOSTNAME, ZONE};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};

use super::*;

/// The CSI driver and provisioner name the provider plays (a CSI driver name: no `/`).
pub const ZONAL_DRIVER: &str = "zonal.csi.testbed.cluster.x-k8s.io";
/// On the PVs the provisioner makes: the provisioner's name (as the external-provisioner).
pub const PROVISIONED_BY_ANNOTATION: &str = "pv.kubernetes.io/provisioned-by";
/// kube-scheduler's choice for a WaitForFirstConsumer claim.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// The legacy class annotation kube-scheduler still reads before `spec.storageClassName`.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// A StorageClass of [`ZONAL_DRIVER`]: `WaitForFirstConsumer` when `wait_for_consumer`,
/// else `Immediate`, with `allowedTopologies` on those zones when any.
pub fn zonal_storage_class(name: &str, wait_for_consumer: bool, zones: &[&str]) -> StorageClass {
    let mode = if wait_for_consumer {
        WAIT_FOR_FIRST_CONSUMER
    } else {
        "Immediate"
    };
    let mut class = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": ZONAL_DRIVER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": mode,
    });
    if !zones.is_empty() {
        class["allowedTopologies"] =
            json!([{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]);
    }
    serde_json::from_value(class).unwrap_or_default()
}

/// The name of the PV the provisioner makes for the PVC with this uid.
pub fn volume_name(pvc_uid: &str) -> String {
    format!("pvc-{pvc_uid}")
}

struct Storage {
    client: Client,
}

/// Starts the storage driver in each workload cluster the provider is configured with.
pub(super) fn spawn(ctx: &Ctx) -> Vec<tokio::task::JoinHandle<()>> {
    let clients =
        std::iter::once(ctx.workload.clone()).chain(ctx.config.workloads.values().cloned());
    let mut tasks = Vec::new();
    for client in clients {
        let storage = Arc::new(Storage { client });
        tasks.push(tokio::spawn(install_driver(storage.client.clone())));
        let claims: Api<PersistentVolumeClaim> = Api::all(storage.client.clone());
        let provisioner = Controller::new(claims, watcher::Config::default()).run(
            provision,
            |_, e, _| retry_storage(e),
            storage.clone(),
        );
        tasks.push(tokio::spawn(provisioner.for_each(|_| async {})));
        let volumes: Api<PersistentVolume> = Api::all(storage.client.clone());
        let reclaimer = Controller::new(volumes, watcher::Config::default()).run(
            reclaim,
            |_, e, _| retry_storage(e),
            storage,
        );
        tasks.push(tokio::spawn(reclaimer.for_each(|_| async {})));
    }
    tasks
}

fn retry_storage(error: &Error) -> Action {
    tracing::debug!(%error, "test storage driver retries");
    Action::requeue(Duration::from_millis(500))
}

/// Applies the `CSIDriver` object until it is there.
async fn install_driver(client: Client) {
    let drivers: Api<CSIDriver> = Api::all(client);
    let driver = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": ZONAL_DRIVER},
        "spec": {
            "attachRequired": false, "podInfoOnMount": false, "storageCapacity": false,
            "requiresRepublish": false, "volumeLifecycleModes": ["Persistent"]
        }
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for _ in 0..120 {
        match drivers
            .patch(ZONAL_DRIVER, &params, &Patch::Apply(&driver))
            .await
        {
            Ok(_) => return,
            Err(error) => tracing::debug!(%error, "applying the test CSIDriver"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::warn!("the test CSIDriver {ZONAL_DRIVER} could not be applied");
}

/// The provisioner: a PV for an unbound claim of a [`ZONAL_DRIVER`] class, once placed.
async fn provision(pvc: Arc<PersistentVolumeClaim>, storage: Arc<Storage>) -> Result<Action> {
    let spec = pvc.spec.clone().unwrap_or_default();
    if pvc.metadata.deletion_timestamp.is_some()
        || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
    {
        return Ok(Action::await_change());
    }
    let class_name = pvc
        .annotations()
        .get(BETA_CLASS_ANNOTATION)
        .cloned()
        .or(spec.storage_class_name.clone())
        .filter(|c| !c.is_empty());
    let Some(class_name) = class_name else {
        return Ok(Action::await_change());
    };
    let classes: Api<StorageClass> = Api::all(storage.client.clone());
    let Some(class) = classes.get_opt(&class_name).await? else {
        // The class may come later; nothing else wakes this claim then.
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    if class.provisioner != ZONAL_DRIVER {
        return Ok(Action::await_change());
    }
    let topology = if class.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER) {
        let Some(node) = pvc.annotations().get(SELECTED_NODE_ANNOTATION) else {
            return Ok(Action::await_change());
        };
        let nodes: Api<Node> = Api::all(storage.client.clone());
        let node = nodes.get(node).await?;
        Some(match node.labels().get(ZONE).filter(|z| !z.is_empty()) {
            Some(zone) => (ZONE, zone.clone()),
            None => (HOSTNAME, node.name_any()),
        })
    } else {
        first_allowed_zone(&class).map(|z| (ZONE, z))
    };
    let Some(uid) = pvc.metadata.uid.clone() else {
        return Ok(Action::await_change());
    };
    let Some(size) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
    else {
        tracing::warn!(pvc = %pvc.name_any(), "test storage driver: the claim requests no storage");
        return Ok(Action::await_change());
    };
    let name = volume_name(&uid);
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY_ANNOTATION: ZONAL_DRIVER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "persistentVolumeReclaimPolicy": class.reclaim_policy.as_deref().unwrap_or("Delete"),
            "storageClassName": class_name,
            "volumeMode": spec.volume_mode.as_deref().unwrap_or("Filesystem"),
            "csi": {"driver": ZONAL_DRIVER, "volumeHandle": name, "fsType": "ext4"},
            "claimRef": {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": pvc.namespace().unwrap_or_default(),
                "name": pvc.name_any(), "uid": uid,
            },
        }
    });
    if let Some(options) = &class.mount_options {
        pv["spec"]["mountOptions"] = json!(options);
    }
    if let Some((key, value)) = topology {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        ]}});
    }
    let pv: PersistentVolume = serde_json::from_value(pv)?;
    let volumes: Api<PersistentVolume> = Api::all(storage.client.clone());
    match volumes.create(&PostParams::default(), &pv).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// The first zone the class's `allowedTopologies` allow.
fn first_allowed_zone(class: &StorageClass) -> Option<String> {
    class
        .allowed_topologies
        .iter()
        .flatten()
        .flat_map(|term| term.match_label_expressions.iter().flatten())
        .filter(|e| e.key == ZONE)
        .find_map(|e| e.values.first().cloned())
}

/// Reclaim: a Released PV of ours with policy Delete is deleted.
async fn reclaim(pv: Arc<PersistentVolume>, storage: Arc<Storage>) -> Result<Action> {
    let ours = pv
        .annotations()
        .get(PROVISIONED_BY_ANNOTATION)
        .map(String::as_str)
        == Some(ZONAL_DRIVER);
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let delete = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    if !(ours && released && delete) || pv.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let volumes: Api<PersistentVolume> = Api::all(storage.client.clone());
    match volumes
        .delete(&pv.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// The CSINode of a Node the provider created for `machine` (a TestMachine), in `workload`.
pub(super) async fn publish_csinode(
    ctx: &Ctx,
    workload: &Client,
    machine: &DynamicObject,
    node: &Node,
) -> Result<()> {
    let mut drivers = declared_drivers(ctx, machine).await?;
    drivers.entry(ZONAL_DRIVER.to_string()).or_insert(0);
    let name = node.name_any();
    let drivers: Vec<Value> = drivers
        .into_iter()
        .map(|(driver, limit)| {
            let mut d = json!({"name": driver, "nodeID": name, "topologyKeys": [ZONE]});
            if limit > 0 {
                d["allocatable"] = json!({"count": limit});
            }
            d
        })
        .collect();
    let csinode: CSINode = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "Node", "name": name,
            "uid": node.metadata.uid.clone().unwrap_or_default()
        }]},
        "spec": {"drivers": drivers}
    }))?;
    let api: Api<CSINode> = Api::all(workload.clone());
    match api.create(&PostParams::default(), &csinode).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The `…/csi-driver` annotation of the TestMachine, else of the template it was cloned
/// from; a bad one is logged and read as none.
async fn declared_drivers(ctx: &Ctx, machine: &DynamicObject) -> Result<BTreeMap<String, u32>> {
    let mut raw = machine.annotations().get(CA_CSI_DRIVER).cloned();
    if raw.is_none()
        && let Some(template) = machine.annotations().get(CLONED_FROM_NAME_ANNOTATION)
    {
        let templates = namespaced(ctx, machine, &test_machine_template_resource())?;
        raw = templates
            .get_opt(template)
            .await?
            .and_then(|t| t.annotations().get(CA_CSI_DRIVER).cloned());
    }
    let Some(raw) = raw else {
        return Ok(BTreeMap::new());
    };
    Ok(api::csi::parse_csi_drivers(&raw).unwrap_or_else(|error| {
        tracing::warn!(machine = %machine.name_any(), %error, "test provider: ignoring {CA_CSI_DRIVER}");
        BTreeMap::new()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_zones() {
        let wffc = zonal_storage_class("z", true, &[]);
        assert_eq!(wffc.provisioner, ZONAL_DRIVER);
        assert_eq!(
            wffc.volume_binding_mode.as_deref(),
            Some(WAIT_FOR_FIRST_CONSUMER)
        );
        assert_eq!(first_allowed_zone(&wffc), None);
        let now = zonal_storage_class("z", false, &["zone-a", "zone-b"]);
        assert_eq!(now.volume_binding_mode.as_deref(), Some("Immediate"));
        assert_eq!(first_allowed_zone(&now).as_deref(), Some("zone-a"));
        assert!(api::csi::validate_driver_name(ZONAL_DRIVER).is_ok());
    }
}
