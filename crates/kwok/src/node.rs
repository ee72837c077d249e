//! What kwok's `create` makes: the Node of a NodeClaim (there is no kubelet to register one),
//! of the cheapest available offering compatible with the claim, and how a Node reads back as
//! an instance. Pure: the provider does the API calls.

use std::collections::BTreeMap;

use api::NodeClaim;
use api::consts::labels as label;
use cloudprovider::Instance;
use cloudprovider::Resources;
use cloudprovider::quantity::{parse_milli, parse_value};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use crate::instance_types::{InstanceType, Offering};
use crate::labels;

/// The Node name of a NodeClaim's instance: the claim's own (unique, and stable across
/// retries, so a second `create` finds the first one's Node).
pub(crate) fn node_name(claim: &NodeClaim) -> String {
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.strip_prefix(labels::PROVIDER_ID_PREFIX))
        .map_or_else(|| claim.name_any(), str::to_string)
}

/// Why no offering was chosen (the InsufficientCapacity message).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoOffering {
    #[error("resources.requests[{0}]: {1}")]
    Requests(String, String),
    #[error("no kwok instance type satisfies the requirements and fits the requests ({0})")]
    None(String),
}

/// The chosen instance type and offering, with the labels of the Node.
#[derive(Debug)]
pub(crate) struct Choice<'a> {
    pub(crate) instance_type: &'a InstanceType,
    pub(crate) offering: &'a Offering,
}

/// The cheapest available offering whose labels (the type's and the offering's) satisfy the
/// claim's requirements on the keys the instance types define (others — the NodePool's own
/// labels — constrain the Node, not the choice), of a type whose allocatable fits the
/// requests. Ties: type name, then zone (deterministic, unlike Karpenter kwok's random pick).
pub(crate) fn choose<'a>(
    types: &'a [InstanceType],
    claim: &NodeClaim,
) -> Result<Choice<'a>, NoOffering> {
    let known: std::collections::HashSet<&str> = types
        .iter()
        .flat_map(|t| {
            t.labels
                .keys()
                .chain(t.offerings.iter().flat_map(|o| o.labels.keys()))
        })
        .map(String::as_str)
        .collect();
    let mut list = Vec::new();
    for r in claim
        .spec
        .requirements
        .iter()
        .filter(|r| known.contains(r.key.as_str()))
    {
        list.push(scheduling::Requirement {
            key: r.key.clone(),
            operator: operator(r.operator),
            values: r.values.clone(),
            min_values: None,
        });
    }
    // The labels recorded on the claim (its first `create`) pin the offering chosen then.
    for key in CLAIM_LABELS {
        if let Some(v) = claim.labels().get(key) {
            list.push(scheduling::Requirement {
                key: key.to_string(),
                operator: scheduling::Operator::In,
                values: vec![v.clone()],
                min_values: None,
            });
        }
    }
    let allowed = scheduling::Requirements::from_list(&list);
    let requests = requests(claim)?;
    let mut best: Option<Choice<'a>> = None;
    for it in types {
        if requests
            .0
            .iter()
            .any(|(k, want)| it.allocatable.get(k) < *want)
        {
            continue;
        }
        for offering in it.offerings.iter().filter(|o| o.available) {
            let mut l = it.labels.clone();
            l.extend(offering.labels.clone());
            if !allowed.allows(&l) {
                continue;
            }
            let key = |c: &Choice<'_>| {
                (
                    c.offering.price,
                    c.instance_type.name.clone(),
                    c.offering.zone().map(str::to_string),
                )
            };
            let candidate = Choice {
                instance_type: it,
                offering,
            };
            if best.as_ref().is_none_or(|b| key(&candidate) < key(b)) {
                best = Some(candidate);
            }
        }
    }
    best.ok_or_else(|| {
        NoOffering::None(
            list.iter()
                .map(|r| {
                    format!(
                        "{} {} [{}]",
                        r.key,
                        r.operator.as_str(),
                        r.values.join(", ")
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        )
    })
}

/// The scheduler's name for an API operator.
fn operator(op: api::karpenter::Operator) -> scheduling::Operator {
    use api::karpenter::Operator as A;
    use scheduling::Operator as S;
    match op {
        A::In => S::In,
        A::NotIn => S::NotIn,
        A::Exists => S::Exists,
        A::DoesNotExist => S::DoesNotExist,
        A::Gt => S::Gt,
        A::Lt => S::Lt,
        A::Gte => S::Gte,
        A::Lte => S::Lte,
    }
}

fn requests(claim: &NodeClaim) -> Result<Resources, NoOffering> {
    let mut out = BTreeMap::new();
    for (name, q) in claim.spec.resources.iter().flat_map(|r| &r.requests) {
        let v = if name == Resources::CPU {
            parse_milli(&q.0)
        } else {
            parse_value(&q.0)
        }
        .map_err(|e| NoOffering::Requests(name.clone(), e.to_string()))?;
        out.insert(name.clone(), v);
    }
    Ok(Resources(out))
}

/// The Node of `claim` for `choice`: Karpenter kwok's labels (the claim's, its single-valued
/// `In` requirements, the type's and the offering's, hostname, the kwok label and partition,
/// the price), the fence, the kwok annotation, the unregistered taint, capacity and
/// allocatable of the instance type, phase Pending. kwok makes it Ready.
pub(crate) fn build(claim: &NodeClaim, choice: &Choice<'_>) -> Node {
    let name = claim.name_any();
    let mut l: BTreeMap<String, String> = claim.labels().clone();
    for r in &claim.spec.requirements {
        if let (api::karpenter::Operator::In, [value]) = (r.operator, r.values.as_slice()) {
            l.insert(r.key.clone(), value.clone());
        }
    }
    l.extend(choice.instance_type.labels.clone());
    l.extend(choice.offering.labels.clone());
    l.insert(
        label::CAPACITY_TYPE.into(),
        choice.offering.capacity_type().into(),
    );
    l.insert(
        labels::NODE_VIEWER_PRICE.into(),
        format!("{:.6}", choice.offering.price),
    );
    l.insert(
        labels::KWOK_PARTITION.into(),
        labels::KWOK_PARTITION_VALUE.into(),
    );
    l.insert(label::HOSTNAME.into(), name.clone());
    l.insert(labels::KWOK_NODE.into(), labels::KWOK_NODE_VALUE.into());
    l.insert(labels::NODECLAIM.into(), name.clone());
    let mut annotations = BTreeMap::from([(
        labels::KWOK_NODE.to_string(),
        labels::KWOK_NODE_VALUE.to_string(),
    )]);
    if let Some(uid) = &claim.metadata.uid {
        annotations.insert(labels::NODECLAIM_UID.into(), uid.clone());
    }
    let mut node = Node {
        spec: Some(NodeSpec {
            provider_id: Some(format!("{}{name}", labels::PROVIDER_ID_PREFIX)),
            taints: Some(vec![Taint {
                key: api::consts::taints::UNREGISTERED.into(),
                effect: "NoExecute".into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(choice.instance_type.capacity.to_resource_list()),
            allocatable: Some(choice.instance_type.allocatable.to_resource_list()),
            phase: Some("Pending".into()),
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    node.metadata.name = Some(name);
    node.metadata.labels = Some(l);
    node.metadata.annotations = Some(annotations);
    node
}

/// Whether `node` is the one this provider made for `claim` (fence label; UID when both
/// carry one).
pub(crate) fn ours_for(node: &Node, claim: &NodeClaim) -> bool {
    let uid_matches = match (
        node.annotations().get(labels::NODECLAIM_UID),
        &claim.metadata.uid,
    ) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    is_ours(node) && node.labels().get(labels::NODECLAIM) == Some(&claim.name_any()) && uid_matches
}

/// Whether this provider made `node` at all (fence label and a `kwok://` providerID).
pub(crate) fn is_ours(node: &Node) -> bool {
    node.labels().contains_key(labels::NODECLAIM)
        && node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|p| p.starts_with(labels::PROVIDER_ID_PREFIX))
}

/// A Node of this provider as an instance.
pub(crate) fn instance(node: &Node) -> Instance {
    let labels = node.labels();
    let text = |m: Option<&BTreeMap<String, Quantity>>| {
        m.map(|m| m.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .unwrap_or_default()
    };
    let status = node.status.as_ref();
    Instance {
        nodeclaim: labels.get(labels::NODECLAIM).cloned().unwrap_or_default(),
        provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        description: format!("Node {}", node.name_any()),
        instance_type: labels
            .get(label::INSTANCE_TYPE)
            .cloned()
            .unwrap_or_default(),
        zone: labels.get(label::ZONE).cloned(),
        capacity_type: labels
            .get(label::CAPACITY_TYPE)
            .cloned()
            .unwrap_or_default(),
        capacity: text(status.and_then(|s| s.capacity.as_ref())),
        allocatable: text(status.and_then(|s| s.allocatable.as_ref())),
        terminating: node.metadata.deletion_timestamp.is_some(),
        nodeclaim_uid: node.annotations().get(labels::NODECLAIM_UID).cloned(),
        created: node.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ..Instance::default()
    }
}

/// The labels a NodeClaim records of its instance (Karpenter's core writes them from what
/// `Create` returns): instance type, zone, capacity type, architecture, OS.
const CLAIM_LABELS: [&str; 5] = [
    label::INSTANCE_TYPE,
    label::ZONE,
    label::CAPACITY_TYPE,
    label::ARCH,
    label::OS,
];

/// The claim labels of the Node made for a claim.
pub(crate) fn claim_labels(node: &Node) -> BTreeMap<String, String> {
    pick(node.labels())
}

/// The claim labels of an offering choice (what its Node will carry).
pub(crate) fn labels_of(choice: &Choice<'_>) -> BTreeMap<String, String> {
    let mut l = choice.instance_type.labels.clone();
    l.extend(choice.offering.labels.clone());
    l.insert(
        label::CAPACITY_TYPE.into(),
        choice.offering.capacity_type().into(),
    );
    pick(&l)
}

fn pick(l: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    CLAIM_LABELS
        .iter()
        .filter_map(|k| l.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect()
}

/// Whether the claim already carries every one of `labels`.
pub(crate) fn labelled(claim: &NodeClaim, labels: &BTreeMap<String, String>) -> bool {
    labels.iter().all(|(k, v)| claim.labels().get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::karpenter::{
        NodeClaimSpec, NodeSelectorRequirementWithMinValues, Operator, ResourceRequirements,
    };

    fn types() -> Vec<InstanceType> {
        let bench = include_str!("../../../hack/bench/e2e/kwok-instance-types.json");
        crate::instance_types::parse(bench.as_bytes(), "bench").expect("reads")
    }

    fn claim(reqs: &[(&str, Operator, &[&str])], cpu: &str) -> NodeClaim {
        let mut c = NodeClaim::new(
            "default-abc",
            NodeClaimSpec {
                requirements: reqs
                    .iter()
                    .map(|(k, op, v)| NodeSelectorRequirementWithMinValues {
                        key: k.to_string(),
                        operator: *op,
                        values: v.iter().map(|s| s.to_string()).collect(),
                        min_values: None,
                    })
                    .collect(),
                resources: Some(ResourceRequirements {
                    requests: BTreeMap::from([("cpu".into(), Quantity(cpu.into()))]),
                }),
                ..NodeClaimSpec::default()
            },
        );
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn cheapest_compatible_fitting_offering() {
        let types = types();
        let c = claim(
            &[(
                label::INSTANCE_TYPE,
                Operator::In,
                &["small", "medium", "large"],
            )],
            "1",
        );
        let choice = choose(&types, &c).expect("a choice");
        assert_eq!(
            (choice.instance_type.name.as_str(), choice.offering.zone()),
            ("small", Some("zone-a"))
        );
        // Too big for small (1900m allocatable): medium.
        let c = claim(
            &[(label::INSTANCE_TYPE, Operator::In, &["small", "medium"])],
            "2",
        );
        assert_eq!(
            choose(&types, &c).expect("a choice").instance_type.name,
            "medium"
        );
        // A zone requirement is honoured; a requirement on an undefined key does not restrict.
        let c = claim(
            &[
                (label::ZONE, Operator::In, &["zone-b"]),
                (label::NODEPOOL, Operator::In, &["default"]),
            ],
            "1",
        );
        assert_eq!(
            choose(&types, &c).expect("a choice").offering.zone(),
            Some("zone-b")
        );
        let c = claim(&[(label::ZONE, Operator::In, &["zone-z"])], "1");
        assert!(matches!(choose(&types, &c), Err(NoOffering::None(_))));
    }

    #[test]
    fn the_node_carries_kwoks_and_karpenters_conventions() {
        let types = types();
        let c = claim(&[(label::NODEPOOL, Operator::In, &["default"])], "1");
        let choice = choose(&types, &c).expect("a choice");
        let node = build(&c, &choice);
        let l = node.labels();
        assert_eq!(node.name_any(), "default-abc");
        assert_eq!(l[label::INSTANCE_TYPE], "small");
        assert_eq!(l[label::ZONE], "zone-a");
        assert_eq!(l[label::CAPACITY_TYPE], "on-demand");
        assert_eq!(l[label::NODEPOOL], "default");
        assert_eq!(l[label::HOSTNAME], "default-abc");
        assert_eq!(l[labels::KWOK_NODE], "fake");
        assert_eq!(l[labels::NODE_VIEWER_PRICE], "0.100000");
        assert_eq!(node.annotations()[labels::KWOK_NODE], "fake");
        let spec = node.spec.as_ref().expect("spec");
        assert_eq!(spec.provider_id.as_deref(), Some("kwok://default-abc"));
        let status = node.status.as_ref().expect("status");
        assert_eq!(
            status.allocatable.as_ref().expect("allocatable")["cpu"].0,
            "1900m"
        );
        assert!(ours_for(&node, &c));
        let mut other = c.clone();
        other.metadata.uid = Some("uid-2".into());
        assert!(
            !ours_for(&node, &other),
            "another NodeClaim of the same name"
        );
        let i = instance(&node);
        assert_eq!(
            (i.nodeclaim.as_str(), i.instance_type.as_str()),
            ("default-abc", "small")
        );
        assert_eq!(i.nodeclaim_uid.as_deref(), Some("uid-1"));
        assert_eq!(claim_labels(&node)[label::ZONE], "zone-a");
    }
}
