//! The solver's output back into the API: the NodeClaim to create for a planned claim of a
//! NodePool, and the NodePool hash it carries.

use api::consts::annotations::{
    CAPACITY_OVERLAY_APPLIED, NODEPOOL_HASH, NODEPOOL_HASH_VERSION as NODEPOOL_HASH_VERSION_KEY,
    PRICE_OVERLAY_APPLIED, RESIZED,
};
use api::karpenter::{self as k, NodeSelectorRequirementWithMinValues};
use api::{NodeClaim, NodePool};
use cloudprovider::InstanceTypes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::ObjectMeta;
use scheduling::{Operator, Requirement, Taint, TaintEffect};

use crate::model::convert::quantities;

/// The API's operator for the scheduler's.
pub(crate) fn api_operator(op: Operator) -> k::Operator {
    match op {
        Operator::In => k::Operator::In,
        Operator::NotIn => k::Operator::NotIn,
        Operator::Exists => k::Operator::Exists,
        Operator::DoesNotExist => k::Operator::DoesNotExist,
        Operator::Gt => k::Operator::Gt,
        Operator::Lt => k::Operator::Lt,
        Operator::Gte => k::Operator::Gte,
        Operator::Lte => k::Operator::Lte,
    }
}

/// The scheduler's requirements → Karpenter's.
pub fn api_requirements(reqs: &[Requirement]) -> Vec<NodeSelectorRequirementWithMinValues> {
    reqs.iter()
        .map(|r| NodeSelectorRequirementWithMinValues {
            key: r.key.clone(),
            operator: api_operator(r.operator),
            values: r.values.clone(),
            min_values: r.min_values.map(|m| i32::try_from(m).unwrap_or(i32::MAX)),
        })
        .collect()
}

/// The scheduler's taints → Karpenter's.
pub(crate) fn api_taints(taints: &[Taint]) -> Vec<k::Taint> {
    taints
        .iter()
        .map(|t| k::Taint {
            key: t.key.clone(),
            value: (!t.value.is_empty()).then(|| t.value.clone()),
            effect: match t.effect {
                TaintEffect::NoSchedule => k::TaintEffect::NoSchedule,
                TaintEffect::PreferNoSchedule => k::TaintEffect::PreferNoSchedule,
                TaintEffect::NoExecute => k::TaintEffect::NoExecute,
            },
            time_added: None,
        })
        .collect()
}

/// The `karpenter.sh/nodepool-hash-version` of [`nodepool_hash`]. Ours, not Karpenter's
/// (`v3`): the hash is not Karpenter's hashstructure. A NodeClaim stamped with another
/// version is re-stamped, never rolled, when the scheme changes.
pub const NODEPOOL_HASH_VERSION: &str = "capi-1";

/// The NodePool hash Karpenter's drift compares: FNV-1a 64 of the canonical JSON (keys
/// sorted, empty values dropped, taint lists as sets) of the pool's `spec.template` without
/// its requirements: labels, annotations, taints, startupTaints, nodeClassRef,
/// terminationGracePeriod, expireAfter. Limits, weight, disruption are outside the template.
pub(crate) fn nodepool_hash(pool: &NodePool) -> String {
    let mut v = serde_json::to_value(&pool.spec.template).unwrap_or(serde_json::Value::Null);
    if let Some(spec) = v.get_mut("spec").and_then(|s| s.as_object_mut()) {
        spec.remove("requirements");
        for key in ["taints", "startupTaints"] {
            if let Some(list) = spec.get_mut(key).and_then(|l| l.as_array_mut()) {
                list.sort_by_key(|t| t.to_string());
            }
        }
    }
    crate::objects::fnv64(&crate::objects::pruned(v).to_string()).to_string()
}

/// A planned claim whose cheapest instance type is a size of a resizable template, shrunk
/// to the smallest size that holds its requests (pods, daemonsets; the catalog's overhead
/// and the template's headroom): the size, and the claim's instance types with that size
/// first in place of the group's grid sizes (the other templates' types stay as fallbacks).
/// `None`: not resizable, or an instance-type `minValues` the list must keep.
pub fn shrink(
    catalog: &InstanceTypes,
    claim: &scheduling::NewNodeClaim,
) -> Option<(cloudprovider::resize::Size, Vec<String>)> {
    let (group, planned) = catalog.resizable_of(&claim.cheapest.instance_type)?;
    let requirement = claim
        .requirements
        .iter()
        .find(|r| r.key == scheduling::LABEL_INSTANCE_TYPE)?;
    if requirement.min_values.is_some() {
        return None;
    }
    let demand = cloudprovider::Resources(claim.requests.clone());
    let size = match group.size_for(&demand) {
        Ok(s) if s.cpu <= planned.cpu && s.memory <= planned.memory => s,
        Ok(_) => planned,
        Err(e) => {
            tracing::debug!(instance_type = %claim.cheapest.instance_type, error = %e, "not shrunk");
            planned
        }
    };
    let mut instance_types = vec![cloudprovider::resize::sized_name(&group.base, size)];
    instance_types.extend(
        requirement
            .values
            .iter()
            .filter(|n| cloudprovider::resize::parse_sized_name(&group.base, n).is_none())
            .cloned(),
    );
    Some((size, instance_types))
}

/// The NodeClaim to create for one planned claim of `pool`, whose instance types came from
/// `catalog`: Karpenter's `karpenter.sh/{price,capacity}-overlay-applied: "true"` when a
/// NodeOverlay changed one of them (set at create: no write of its own).
pub fn nodeclaim(
    pool: &NodePool,
    claim: &scheduling::NewNodeClaim,
    catalog: Option<&InstanceTypes>,
) -> NodeClaim {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let tpl = &pool.spec.template;
    let mut labels = tpl.metadata.labels.clone();
    labels.insert(scheduling::LABEL_NODEPOOL.into(), name.clone());
    let mut annotations = tpl.metadata.annotations.clone();
    annotations.insert(NODEPOOL_HASH.into(), nodepool_hash(pool));
    annotations.insert(
        NODEPOOL_HASH_VERSION_KEY.into(),
        NODEPOOL_HASH_VERSION.into(),
    );
    let (price, capacity) = catalog
        .map(|c| c.overlay_marks(claim.instance_types()))
        .unwrap_or_default();
    // Karpenter's BestEffort minValues: whether the solver relaxed one (not under Strict).
    if let Some(relaxed) = claim.min_values_relaxed {
        annotations.insert(
            api::consts::annotations::NODECLAIM_MIN_VALUES_RELAXED.into(),
            relaxed.to_string(),
        );
    }
    if !claim.dra_drivers.is_empty() {
        annotations.insert(
            api::consts::annotations::REQUESTED_DRA_DRIVERS.into(),
            claim.dra_drivers.join(","),
        );
    }
    for (key, marked) in [
        (PRICE_OVERLAY_APPLIED, price),
        (CAPACITY_OVERLAY_APPLIED, capacity),
    ] {
        if marked {
            annotations.insert(key.into(), "true".into());
        }
    }
    let mut requirements = api_requirements(&claim.requirements);
    if let Some((size, instance_types)) = catalog.and_then(|c| shrink(c, claim)) {
        annotations.insert(RESIZED.into(), size.annotation());
        if let Some(r) = requirements
            .iter_mut()
            .find(|r| r.key == scheduling::LABEL_INSTANCE_TYPE)
        {
            r.values = instance_types;
        }
    }
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            // The lifecycle's finalizer comes with the object: one write less per claim.
            finalizers: Some(vec![api::consts::finalizers::TERMINATION.into()]),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![meta::OwnerReference {
                api_version: "karpenter.sh/v1".into(),
                kind: "NodePool".into(),
                name,
                uid: pool.metadata.uid.clone().unwrap_or_default(),
                block_owner_deletion: Some(true),
                controller: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: k::NodeClaimSpec {
            taints: api_taints(&claim.taints),
            startup_taints: api_taints(&claim.startup_taints),
            requirements,
            resources: Some(k::ResourceRequirements {
                requests: quantities(&claim.requests),
            }),
            node_class_ref: tpl.spec.node_class_ref.clone(),
            termination_grace_period: tpl.spec.termination_grace_period.clone(),
            expire_after: tpl.spec.expire_after.clone(),
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::convert::node_pool;
    use serde_json::json;

    fn typed<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("fixture")
    }

    #[test]
    fn nodeclaim_from_pool_and_plan() {
        let pool: NodePool = typed(json!({
            "metadata": {"name": "default", "uid": "pu"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"},
                         "expireAfter": "720h",
                         "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
            }}
        }));
        let claim = scheduling::NewNodeClaim {
            node_pool: "default".into(),
            requirements: vec![Requirement::new(
                scheduling::LABEL_INSTANCE_TYPE,
                Operator::In,
                &["small", "large"],
            )],
            requests: [("cpu".to_string(), 1500), ("memory".to_string(), 1024)].into(),
            taints: vec![],
            startup_taints: vec![Taint::new("s", "", TaintEffect::NoSchedule)],
            pods: vec![],
            cheapest: scheduling::Cheapest {
                instance_type: "small".into(),
                zone: String::new(),
                capacity_type: "on-demand".into(),
                price: 0.1,
            },
            min_values_relaxed: None,
            dra_drivers: vec![],
        };
        let nc = serde_json::to_value(nodeclaim(&pool, &claim, None)).expect("json");
        assert_eq!(nc["metadata"]["generateName"], "default-");
        assert_eq!(nc["metadata"]["labels"]["karpenter.sh/nodepool"], "default");
        assert_eq!(nc["metadata"]["labels"]["team"], "a");
        assert_eq!(nc["metadata"]["ownerReferences"][0]["uid"], "pu");
        assert_eq!(
            nc["metadata"]["annotations"]["karpenter.sh/nodepool-hash"],
            json!(nodepool_hash(&pool))
        );
        assert_eq!(nc["spec"]["resources"]["requests"]["cpu"], "1500m");
        assert_eq!(nc["spec"]["resources"]["requests"]["memory"], "1Ki");
        // Strict: no minValues annotation; BestEffort: whether the solver relaxed one.
        let relaxed = "karpenter.sh/nodeclaim-min-values-relaxed";
        assert!(nc["metadata"]["annotations"].get(relaxed).is_none());
        let drivers = api::consts::annotations::REQUESTED_DRA_DRIVERS;
        assert!(nc["metadata"]["annotations"].get(drivers).is_none());
        let gpus = scheduling::NewNodeClaim {
            dra_drivers: vec!["gpu.example.com".into(), "nic.example.com".into()],
            ..claim.clone()
        };
        let with = serde_json::to_value(nodeclaim(&pool, &gpus, None)).expect("json");
        assert_eq!(
            with["metadata"]["annotations"][drivers],
            "gpu.example.com,nic.example.com"
        );
        for (said, want) in [(Some(true), "true"), (Some(false), "false")] {
            let c = scheduling::NewNodeClaim {
                min_values_relaxed: said,
                ..claim.clone()
            };
            let nc = serde_json::to_value(nodeclaim(&pool, &c, None)).expect("json");
            assert_eq!(nc["metadata"]["annotations"][relaxed], want);
        }
        assert_eq!(
            nc["spec"]["requirements"][0]["values"],
            json!(["small", "large"])
        );
        assert_eq!(nc["spec"]["startupTaints"][0]["key"], "s");
        assert_eq!(nc["spec"]["expireAfter"], "720h");
        assert_eq!(nc["spec"]["nodeClassRef"]["name"], "nc");
        let p = node_pool(&pool);
        assert_eq!(p.requirements[0].key, "kubernetes.io/arch");
        assert_eq!(p.labels["team"], "a");
    }

    /// Karpenter's hash semantics: requirements, limits, weight and disruption are not in
    /// it; labels, taints (as a set) and the rest of the template are.
    #[test]
    fn nodepool_hash_covers_the_template_without_requirements() {
        let base = json!({
            "metadata": {"name": "default"},
            "spec": {"template": {"metadata": {"labels": {"team": "a"}},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"},
                         "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}],
                         "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]}}}
        });
        let hash = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = base.clone();
            edit(&mut v);
            nodepool_hash(&typed::<NodePool>(v))
        };
        let h = hash(&|_| {});
        assert_eq!(
            h,
            hash(&|v| v["spec"]["template"]["spec"]["requirements"] = json!([]))
        );
        assert_eq!(h, hash(&|v| v["spec"]["limits"] = json!({"cpu": "10"})));
        assert_eq!(h, hash(&|v| v["spec"]["weight"] = json!(5)));
        assert_eq!(
            h,
            hash(&|v| v["spec"]["disruption"] =
                json!({"consolidateAfter": "1m", "budgets": [{"nodes": "0"}]}))
        );
        assert_eq!(
            h,
            hash(&|v| v["spec"]["template"]["spec"]["taints"] = json!([
                {"key": "b", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}])),
            "taints are a set"
        );
        assert_ne!(
            h,
            hash(&|v| v["spec"]["template"]["metadata"]["labels"]["team"] = json!("b"))
        );
        assert_ne!(
            h,
            hash(&|v| v["spec"]["template"]["spec"]["expireAfter"] = json!("24h"))
        );
        assert_ne!(
            h,
            hash(&|v| v["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("other"))
        );
    }

    /// A claim planned on a grid size of a resizable template is shrunk to the smallest
    /// size holding its requests; its instance-type requirement names that size first, the
    /// other templates' types after it, no other size of the group.
    #[test]
    fn a_claim_on_a_resizable_template_is_shrunk() {
        let gib = 1 << 30;
        let sizing = cloudprovider::resize::Sizing {
            cpu: cloudprovider::resize::Range {
                min: 2000,
                max: 64000,
                step: 2000,
            },
            memory: cloudprovider::resize::Range {
                min: 4 * gib,
                max: 512 * gib,
                step: 4 * gib,
            },
            memory_per_cpu: None,
            price_per_cpu: None,
            price_per_gib: None,
            headroom_percent: 0,
        };
        let offering = cloudprovider::Offering::new(
            "vs",
            None,
            "on-demand",
            0.1,
            cloudprovider::PriceSource::Default,
        );
        let catalog = cloudprovider::InstanceTypes::of_group(
            cloudprovider::resize::ResizableGroup::uniform("vs", sizing, offering),
        );
        assert!(catalog.get("vs-10c-32gi").is_some() && catalog.get("vs-8c-24gi").is_none());
        let pool: NodePool = typed(json!({"metadata": {"name": "default", "uid": "pu"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"},
                "requirements": []}}}}));
        let mut claim = scheduling::NewNodeClaim {
            node_pool: "default".into(),
            requirements: vec![Requirement::new(
                scheduling::LABEL_INSTANCE_TYPE,
                Operator::In,
                &["vs-10c-32gi", "other", "vs-16c-32gi"],
            )],
            requests: [("cpu".to_string(), 6500), ("memory".to_string(), 21 << 30)].into(),
            taints: vec![],
            startup_taints: vec![],
            pods: vec![],
            cheapest: scheduling::Cheapest {
                instance_type: "vs-10c-32gi".into(),
                zone: String::new(),
                capacity_type: "on-demand".into(),
                price: 0.1,
            },
            min_values_relaxed: None,
            dra_drivers: vec![],
        };
        let nc = serde_json::to_value(nodeclaim(&pool, &claim, Some(&catalog))).expect("json");
        assert_eq!(
            nc["metadata"]["annotations"][api::consts::annotations::RESIZED],
            "cpu=8,memory=24Gi"
        );
        assert_eq!(
            nc["spec"]["requirements"][0]["values"],
            json!(["vs-8c-24gi", "other"])
        );
        // Its requests are unchanged.
        assert_eq!(nc["spec"]["resources"]["requests"]["cpu"], "6500m");
        // minValues on the instance types: the list stays.
        claim.requirements[0].min_values = Some(3);
        let nc = serde_json::to_value(nodeclaim(&pool, &claim, Some(&catalog))).expect("json");
        assert_eq!(
            nc["spec"]["requirements"][0]["values"]
                .as_array()
                .map(Vec::len),
            Some(3)
        );
        assert!(
            nc["metadata"]["annotations"]
                .get(api::consts::annotations::RESIZED)
                .is_none()
        );
    }
}
