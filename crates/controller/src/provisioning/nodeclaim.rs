//! The solver's output back into the API: the NodeClaim to create for a planned claim of a
//! NodePool, and the NodePool hash it carries.

use api::karpenter::{self as k, NodeSelectorRequirementWithMinValues};
use api::{NodeClaim, NodePool};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::api::ObjectMeta;
use scheduling::{Operator, Requirement, Taint, TaintEffect};

use super::convert::quantities;

/// The API's operator for the scheduler's.
pub fn api_operator(op: Operator) -> k::Operator {
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
pub fn api_taints(taints: &[Taint]) -> Vec<k::Taint> {
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

/// FNV-1a 64 of the canonical JSON (keys sorted) of the pool's `spec.template` (stable
/// across processes).
pub fn nodepool_hash(pool: &NodePool) -> String {
    let text = serde_json::to_value(&pool.spec.template)
        .unwrap_or(serde_json::Value::Null)
        .to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.to_string()
}

/// The NodeClaim to create for one planned claim of `pool`.
pub fn nodeclaim(pool: &NodePool, claim: &scheduling::NewNodeClaim) -> NodeClaim {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let tpl = &pool.spec.template;
    let mut labels = tpl.metadata.labels.clone();
    labels.insert(scheduling::LABEL_NODEPOOL.into(), name.clone());
    let mut annotations = tpl.metadata.annotations.clone();
    annotations.insert("karpenter.sh/nodepool-hash".into(), nodepool_hash(pool));
    annotations.insert("karpenter.sh/nodepool-hash-version".into(), "v3".into());
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
            requirements: api_requirements(&claim.requirements),
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
    use crate::provisioning::convert::node_pool;
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
        };
        let nc = serde_json::to_value(nodeclaim(&pool, &claim)).expect("json");
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

    /// The hash written on NodeClaims is the one earlier versions wrote (JSON of the
    /// template with sorted keys): changing it would mark every claim as drifted.
    #[test]
    fn nodepool_hash_is_stable() {
        let pool: NodePool = typed(json!({
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "nc"},
                                            "requirements": []}}}
        }));
        let text = r#"{"spec":{"expireAfter":"720h","nodeClassRef":{"group":"g","kind":"K","name":"nc"},"requirements":[]}}"#;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        assert_eq!(nodepool_hash(&pool), h.to_string());
    }
}
