//! What the caches keep of each object: the fields no loop reads are dropped as the watch
//! delivers them (see `docs/performance.md`, memory).

use kube::Resource;

/// What no loop reads and every object carries: server-side apply bookkeeping and the
/// `kubectl apply` copy of the object.
pub fn strip_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Nothing to trim beyond the metadata.
pub fn keep<K>(_: &mut K) {}

/// A Node without what no loop reads and a real node carries a lot of: the images its
/// kubelet reports (up to 50 entries, with every tag and digest), the volumes attached and
/// in use, the kubelet's endpoints, config and features.
pub(crate) fn trim_node(node: &mut k8s_openapi::api::core::v1::Node) {
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.daemon_endpoints = None;
        status.config = None;
        status.features = None;
    }
}

/// Of a pod's volumes, those that go through a claim (what volume topology and attach
/// limits read), each with its name and claim only.
fn slim_volumes(volumes: &mut Option<Vec<k8s_openapi::api::core::v1::Volume>>) {
    use k8s_openapi::api::core::v1::{EphemeralVolumeSource, Volume};
    let kept: Vec<Volume> = volumes
        .take()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let claim = v.persistent_volume_claim;
            let ephemeral = v.ephemeral.map(|_| EphemeralVolumeSource::default());
            (claim.is_some() || ephemeral.is_some()).then(|| Volume {
                name: v.name,
                persistent_volume_claim: claim,
                ephemeral,
                ..Volume::default()
            })
        })
        .collect();
    *volumes = (!kept.is_empty()).then_some(kept);
}

/// A claim as volume topology reads it: its class, volume, phase and annotations (the
/// binding ones); no resources, selector, data source or conditions.
pub(crate) fn trim_pvc(pvc: &mut k8s_openapi::api::core::v1::PersistentVolumeClaim) {
    use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
    if let Some(spec) = pvc.spec.as_mut() {
        *spec = PersistentVolumeClaimSpec {
            storage_class_name: spec.storage_class_name.take(),
            volume_name: spec.volume_name.take(),
            ..PersistentVolumeClaimSpec::default()
        };
    }
    if let Some(status) = pvc.status.as_mut() {
        status.conditions = None;
        status.capacity = None;
        status.allocated_resources = None;
        status.allocated_resource_statuses = None;
        status.modify_volume_status = None;
    }
}

/// A volume as volume topology reads it: its node affinity, whether it is local, its CSI
/// driver (or in-tree EBS source), its class and claim.
pub(crate) fn trim_pv(pv: &mut k8s_openapi::api::core::v1::PersistentVolume) {
    use k8s_openapi::api::core::v1::{
        CSIPersistentVolumeSource, HostPathVolumeSource, LocalVolumeSource, PersistentVolumeSpec,
    };
    if let Some(spec) = pv.spec.as_mut() {
        *spec = PersistentVolumeSpec {
            node_affinity: spec.node_affinity.take(),
            local: spec.local.take().map(|l| LocalVolumeSource {
                path: l.path,
                fs_type: None,
            }),
            host_path: spec.host_path.take().map(|h| HostPathVolumeSource {
                path: h.path,
                type_: None,
            }),
            csi: spec.csi.take().map(|c| CSIPersistentVolumeSource {
                driver: c.driver,
                volume_handle: c.volume_handle,
                ..CSIPersistentVolumeSource::default()
            }),
            aws_elastic_block_store: spec.aws_elastic_block_store.take(),
            storage_class_name: spec.storage_class_name.take(),
            claim_ref: spec.claim_ref.take(),
            ..PersistentVolumeSpec::default()
        };
    }
}

/// A pod as scheduling, disruption and the metrics read it: the containers' resources and
/// ports, placement rules, ownership, phase and the `PodScheduled` and `Ready` conditions;
/// images, commands, environment, volumes other than claims, probes, container statuses and condition
/// messages are dropped.
pub(crate) fn trim_pod(pod: &mut k8s_openapi::api::core::v1::Pod) {
    use k8s_openapi::api::core::v1::Container;
    let slim = |c: &mut Container| {
        *c = Container {
            name: std::mem::take(&mut c.name),
            resources: c.resources.take(),
            ports: c.ports.take(),
            restart_policy: c.restart_policy.take(),
            ..Container::default()
        };
    };
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.iter_mut().for_each(slim);
        if let Some(init) = spec.init_containers.as_mut() {
            init.iter_mut().for_each(slim);
        }
        spec.ephemeral_containers = None;
        slim_volumes(&mut spec.volumes);
        spec.image_pull_secrets = None;
        spec.security_context = None;
        spec.host_aliases = None;
        spec.dns_config = None;
        spec.readiness_gates = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
        status.pod_ips = None;
        status.host_ips = None;
        status.resource_claim_statuses = None;
        status.message = None;
        // Readers look at `PodScheduled` (provisionable, the pod event time) and `Ready`
        // (start-up latency, the end of a terminal pod), never at a message: kube-scheduler's
        // "0/N nodes are available: …" is the longest string a pending pod carries.
        if let Some(conditions) = status.conditions.as_mut() {
            conditions.retain(|c| c.type_ == "PodScheduled" || c.type_ == "Ready");
            for c in conditions.iter_mut() {
                c.message = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::node_provider_id;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn nodes_keep_what_the_loops_read() {
        let mut node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"providerID": "test://n", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "4"}, "capacity": {"cpu": "4"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.36.0", "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                    "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""},
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 1}],
                "volumesInUse": ["kubernetes.io/csi/x"],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}
            }
        }))
        .expect("fixture");
        trim_node(&mut node);
        let v = serde_json::to_value(&node).expect("json");
        let status = &v["status"];
        assert!(status.get("images").is_none() && status.get("volumesInUse").is_none());
        assert!(status.get("daemonEndpoints").is_none());
        assert_eq!(status["allocatable"]["cpu"], "4");
        assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.36.0");
        assert!(crate::objects::node_ready(&node));
        assert_eq!(node_provider_id(&node).as_deref(), Some("test://n"));
        assert_eq!(v["spec"]["taints"][0]["key"], "k");
    }

    #[test]
    fn pods_keep_what_scheduling_reads() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "d",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "nodeSelector": {"zone": "a"}, "volumes": [{"name": "v", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-p"}},
                    {"name": "cache", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": false, "restartCount": 0}],
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/3 nodes are available: 3 Insufficient cpu."},
                    {"type": "Initialized", "status": "True"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "containers with unready status: [c]"}]}
        }))
        .expect("fixture");
        strip_metadata(&mut pod);
        trim_pod(&mut pod);
        let v = serde_json::to_value(&pod).expect("json");
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(
            v["metadata"]["annotations"],
            serde_json::json!({"keep": "me"})
        );
        let c = &v["spec"]["containers"][0];
        assert_eq!(c["resources"]["requests"]["cpu"], "1");
        assert_eq!(c["ports"][0]["hostPort"], 8080);
        assert!(c.get("image").is_none() && c.get("env").is_none());
        assert_eq!(v["spec"]["nodeSelector"]["zone"], "a");
        assert_eq!(
            v["spec"]["volumes"],
            serde_json::json!([
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-p"}},
                {"name": "cache", "ephemeral": {}}
            ]),
            "only the claims' volumes, trimmed"
        );
        assert!(v["status"].get("containerStatuses").is_none());
        assert_eq!(v["status"]["phase"], "Pending");
        assert_eq!(
            v["status"]["conditions"],
            serde_json::json!([
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
            ])
        );
        assert!(crate::objects::provisionable(&pod), "still provisionable");
    }
}
