//! Pure decisions of registration and initialization (shared/reference/karpenter-v1.md,
//! "NodeClaim lifecycle"): which Node belongs to a NodeClaim, what the Node must look like
//! once registered, and whether it is initialized. No I/O: the loops call these and write.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::api::resource::v1::ResourceSlice;

/// What registration and initialization need to know of a NodeClaim.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClaimView {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Extended resources (e.g. `nvidia.com/gpu`) the NodeClaim requested.
    pub extended_resources: Vec<String>,
    /// DRA drivers its pods' claims take devices of (`karpenter.sh/requested-dra-drivers`).
    pub dra_drivers: Vec<String>,
}

impl ClaimView {
    /// The view of a typed NodeClaim whose instance has `provider_id`; its annotations
    /// without the provider's `private` ones (`CloudProvider::private_annotations`).
    pub(crate) fn of(claim: &api::NodeClaim, private: &[&str]) -> ClaimView {
        use kube::ResourceExt;
        let taints = |ts: &[api::karpenter::Taint]| ts.iter().map(Taint::from).collect();
        ClaimView {
            labels: claim.labels().clone(),
            annotations: claim
                .annotations()
                .iter()
                .filter(|(k, _)| {
                    !k.starts_with("kubectl.kubernetes.io/") && !private.contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints: taints(&claim.spec.taints),
            startup_taints: taints(&claim.spec.startup_taints),
            extended_resources: claim
                .spec
                .resources
                .iter()
                .flat_map(|r| r.requests.keys())
                .filter(|k| k.contains('/'))
                .cloned()
                .collect(),
            dra_drivers: claim
                .annotations()
                .get(api::consts::annotations::REQUESTED_DRA_DRIVERS)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|d| !d.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// The Node's desired labels, annotations and taints after registration: the NodeClaim's
/// labels and annotations merged in, its taints and startup taints added (unless the Node
/// opted out with `karpenter.sh/do-not-sync-taints=true`), the unregistered taint removed,
/// `karpenter.sh/registered=true`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RegisteredNode {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub finalizers: Vec<String>,
}

pub(crate) fn registered_node(node: &Node, claim: &ClaimView) -> RegisteredNode {
    let mut labels = node.metadata.labels.clone().unwrap_or_default();
    let mut annotations = node.metadata.annotations.clone().unwrap_or_default();
    let sync_taints = labels
        .get(api::consts::labels::DO_NOT_SYNC_TAINTS)
        .map(String::as_str)
        != Some("true");
    labels.extend(claim.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(api::consts::labels::REGISTERED.into(), "true".into());
    annotations.extend(
        claim
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != api::consts::taints::UNREGISTERED)
        .collect();
    if sync_taints {
        for t in claim.taints.iter().chain(&claim.startup_taints) {
            if !taints.iter().any(|x| same_taint(x, t)) {
                taints.push(t.clone());
            }
        }
    }
    let mut finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers
        .iter()
        .any(|f| f == api::consts::finalizers::TERMINATION)
    {
        finalizers.push(api::consts::finalizers::TERMINATION.into());
    }
    RegisteredNode {
        labels,
        annotations,
        taints,
        finalizers,
    }
}

/// Taints that are expected while a node starts and must be gone before it is initialized.
pub(crate) fn is_ephemeral_taint(taint: &Taint) -> bool {
    api::consts::taints::EPHEMERAL.contains(&taint.key.as_str())
        || taint.key.starts_with(api::consts::taints::READINESS_PREFIX)
}

/// Why a registered Node is not initialized yet (the Initialized condition's message).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotInitialized {
    NodeNotReady,
    StartupTaint(String),
    EphemeralTaint(String),
    ResourceNotRegistered(String),
    /// A requested DRA driver has no complete pool of ResourceSlices for the Node.
    DraDriverNotPublished(String),
}

impl std::fmt::Display for NotInitialized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotInitialized::NodeNotReady => write!(f, "Node not ready"),
            NotInitialized::StartupTaint(t) => write!(f, "StartupTaint \"{t}\" still exists"),
            NotInitialized::EphemeralTaint(t) => {
                write!(f, "KnownEphemeralTaint \"{t}\" still exists")
            }
            NotInitialized::ResourceNotRegistered(r) => {
                write!(f, "Resource \"{r}\" was requested but not registered")
            }
            NotInitialized::DraDriverNotPublished(d) => {
                write!(
                    f,
                    "DRA driver \"{d}\" has not published a complete resource pool"
                )
            }
        }
    }
}

impl NotInitialized {
    /// Karpenter's condition reason.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            NotInitialized::NodeNotReady => "NodeNotReady",
            NotInitialized::StartupTaint(_) => "StartupTaintsExist",
            NotInitialized::EphemeralTaint(_) => "KnownEphemeralTaintsExist",
            NotInitialized::ResourceNotRegistered(_) => "ResourceNotRegistered",
            NotInitialized::DraDriverNotPublished(_) => "DRADriverPoolsNotPublished",
        }
    }
}

/// Whether the Node's `Ready` condition is True.
pub(crate) fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Karpenter's initialization check for a registered Node whose own ResourceSlices are
/// `slices`.
pub(crate) fn check_initialized(
    node: &Node,
    claim: &ClaimView,
    slices: &[&ResourceSlice],
) -> Result<(), NotInitialized> {
    if !node_ready(node) {
        return Err(NotInitialized::NodeNotReady);
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if let Some(t) = claim
        .startup_taints
        .iter()
        .find(|st| taints.iter().any(|t| same_taint(t, st)))
    {
        return Err(NotInitialized::StartupTaint(t.key.clone()));
    }
    if let Some(t) = taints.iter().find(|t| is_ephemeral_taint(t)) {
        return Err(NotInitialized::EphemeralTaint(t.key.clone()));
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    for resource in &claim.extended_resources {
        let zero = allocatable.and_then(|a| a.get(resource)).is_none_or(|q| {
            let v = q.0.trim();
            v.is_empty() || v.trim_start_matches(['0', '.']).is_empty()
        });
        if zero {
            return Err(NotInitialized::ResourceNotRegistered(resource.clone()));
        }
    }
    if !claim.dra_drivers.is_empty() {
        let complete = api::dra::complete_drivers(slices);
        if let Some(d) = claim.dra_drivers.iter().find(|d| !complete.contains(*d)) {
            return Err(NotInitialized::DraDriverNotPublished(d.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(value: serde_json::Value) -> Node {
        serde_json::from_value(value).expect("fixture")
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    fn claim() -> ClaimView {
        ClaimView {
            labels: BTreeMap::from([
                ("karpenter.sh/nodepool".into(), "default".into()),
                ("node.kubernetes.io/instance-type".into(), "large".into()),
            ]),
            annotations: BTreeMap::from([("karpenter.sh/nodepool-hash".into(), "123".into())]),
            taints: vec![taint("dedicated", "NoSchedule")],
            startup_taints: vec![taint("example.com/agent-not-ready", "NoExecute")],
            extended_resources: vec![],
            dra_drivers: vec![],
        }
    }

    fn joined() -> Node {
        node(json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "spec": {"providerID": "test://ns/default-abc",
                     "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"cpu": "4", "nvidia.com/gpu": "0"}}
        }))
    }

    #[test]
    fn the_providers_private_annotations_stay_on_the_claim() {
        let claim: api::NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "annotations": {
                "karpenter.sh/nodepool-hash": "123", "example.com/plan": "{...}",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}
        }))
        .expect("claim");
        let keys = |private: &[&str]| -> Vec<String> {
            ClaimView::of(&claim, private)
                .annotations
                .into_keys()
                .collect()
        };
        assert_eq!(keys(&["example.com/plan"]), ["karpenter.sh/nodepool-hash"]);
        assert_eq!(
            keys(&[]),
            ["example.com/plan", "karpenter.sh/nodepool-hash"],
            "a provider without private annotations has them all copied"
        );
    }

    #[test]
    fn registration_syncs_and_removes_unregistered_taint() {
        let n = joined();
        let want = registered_node(&n, &claim());
        assert_eq!(want.labels["karpenter.sh/registered"], "true");
        assert_eq!(want.labels["karpenter.sh/nodepool"], "default");
        assert_eq!(
            want.labels["kubernetes.io/hostname"], "n1",
            "existing labels kept"
        );
        assert_eq!(want.annotations["karpenter.sh/nodepool-hash"], "123");
        let keys: Vec<&str> = want.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["dedicated", "example.com/agent-not-ready"]);
        assert_eq!(want.finalizers, ["karpenter.sh/termination"]);
    }

    #[test]
    fn do_not_sync_taints_is_honoured() {
        let mut n = joined();
        n.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("karpenter.sh/do-not-sync-taints".into(), "true".into());
        let want = registered_node(&n, &claim());
        assert!(
            want.taints.is_empty(),
            "only the unregistered taint is removed"
        );
    }

    #[test]
    fn initialization_waits_for_ready_startup_and_ephemeral_taints_and_resources() {
        let c = claim();
        let mut n = joined();
        n.spec.as_mut().expect("spec").taints =
            Some(vec![taint("example.com/agent-not-ready", "NoExecute")]);
        assert_eq!(
            check_initialized(&n, &c, &[]),
            Err(NotInitialized::StartupTaint(
                "example.com/agent-not-ready".into()
            ))
        );
        n.spec.as_mut().expect("spec").taints =
            Some(vec![taint("node.kubernetes.io/not-ready", "NoSchedule")]);
        assert_eq!(
            check_initialized(&n, &c, &[]).map_err(|e| e.reason()),
            Err("KnownEphemeralTaintsExist")
        );
        n.spec.as_mut().expect("spec").taints =
            Some(vec![taint("readiness.k8s.io/network", "NoSchedule")]);
        assert!(
            check_initialized(&n, &c, &[]).is_err(),
            "readiness.k8s.io/ prefix is ephemeral"
        );
        n.spec.as_mut().expect("spec").taints = Some(vec![]);
        assert_eq!(check_initialized(&n, &c, &[]), Ok(()));

        let mut gpu = c.clone();
        gpu.extended_resources = vec!["nvidia.com/gpu".into()];
        assert_eq!(
            check_initialized(&n, &gpu, &[]),
            Err(NotInitialized::ResourceNotRegistered(
                "nvidia.com/gpu".into()
            ))
        );
        n.status
            .as_mut()
            .expect("status")
            .allocatable
            .as_mut()
            .expect("alloc")
            .insert(
                "nvidia.com/gpu".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
            );
        assert_eq!(check_initialized(&n, &gpu, &[]), Ok(()));

        n.status.as_mut().expect("status").conditions = Some(vec![]);
        assert_eq!(
            check_initialized(&n, &c, &[]),
            Err(NotInitialized::NodeNotReady)
        );
    }

    fn slice(driver: &str, pool: &str, generation: i64, count: i64, node: &str) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{node}-{driver}-{pool}-{generation}")},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool, "generation": generation, "resourceSliceCount": count}}
        }))
        .expect("slice")
    }

    #[test]
    fn initialization_waits_for_a_complete_pool_of_each_requested_dra_driver() {
        let mut n = joined();
        n.spec.as_mut().expect("spec").taints = Some(vec![]);
        let mut c = claim();
        c.dra_drivers = vec!["gpu.example.com".into(), "nic.example.com".into()];
        let gpu = slice("gpu.example.com", "n1", 1, 1, "n1");
        let nic_half = slice("nic.example.com", "n1", 2, 2, "n1");
        let nic_old = slice("nic.example.com", "n1", 1, 1, "n1");
        let waits = |slices: &[&ResourceSlice]| check_initialized(&n, &c, slices);
        let missing = |d: &str| Err(NotInitialized::DraDriverNotPublished(d.into()));
        assert_eq!(waits(&[]), missing("gpu.example.com"));
        assert_eq!(waits(&[&gpu]), missing("nic.example.com"));
        // An older generation complete on its own does not count once a newer one exists.
        assert_eq!(
            waits(&[&gpu, &nic_half, &nic_old]),
            missing("nic.example.com")
        );
        let mut nic_rest = slice("nic.example.com", "n1", 2, 2, "n1");
        nic_rest.metadata.name = Some("second".into());
        assert_eq!(waits(&[&gpu, &nic_half, &nic_old, &nic_rest]), Ok(()));
        // A pool that says it has no slices is not a published pool.
        let empty = slice("gpu.example.com", "n1", 1, 0, "n1");
        c.dra_drivers = vec!["gpu.example.com".into()];
        assert_eq!(
            check_initialized(&n, &c, &[&empty]).map_err(|e| e.reason()),
            Err("DRADriverPoolsNotPublished")
        );
        // Control: a claim that requested no driver is initialized without any slice.
        assert_eq!(check_initialized(&n, &claim(), &[]), Ok(()));
        // The Node's own slices: by nodeName or a Node owner; not another Node's.
        let mut owned = slice("gpu.example.com", "p", 1, 1, "other");
        assert!(!api::dra::slice_of_node(&owned, "n1"));
        owned.spec.node_name = None;
        owned.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}))
            .expect("owner"),
        ]);
        assert!(api::dra::slice_of_node(&owned, "n1") && api::dra::slice_of_node(&gpu, "n1"));
    }

    #[test]
    fn the_requested_drivers_come_from_the_annotation() {
        let claim: api::NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "annotations": {
                "karpenter.sh/requested-dra-drivers": "gpu.example.com, nic.example.com,"}},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}
        }))
        .expect("claim");
        assert_eq!(
            ClaimView::of(&claim, &[]).dra_drivers,
            ["gpu.example.com", "nic.example.com"]
        );
    }
}
