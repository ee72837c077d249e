//! Host inventory: how many hosts a template can still become, counted from the host
//! objects themselves (a [`CountSource::Inventory`](crate::count::CountSource) count).
//!
//! A NodeClass's `spec.inventory` resolves to a [`HostQuery`]: the host kind, where the
//! template keeps its host selector, which host field names the object using it, and the
//! rules a free host meets. The `Metal3` preset is Metal3's contract: BareMetalHosts
//! (`metal3.io/v1alpha1`) in the template's namespace matching the Metal3MachineTemplate's
//! `spec.template.spec.hostSelector`, without `spec.consumerRef`, not being deleted, with
//! `status.provisioning.state` `available` (or `ready`, its name before baremetal-operator
//! 0.5). [`tally`] counts the hosts a template's selector matches, the free ones, per zone
//! when the query names a zone label, and the names of the objects holding a matching host.

use std::collections::{BTreeMap, HashSet};

use clusterapi_api::nodeclass::{Inventory, InventoryPreset};
use kube::api::DynamicObject;
use serde_json::Value;

use crate::count::{Available, CountSource};

/// The host kind of the `Metal3` preset.
pub const METAL3_API_VERSION: &str = "metal3.io/v1alpha1";
pub const METAL3_KIND: &str = "BareMetalHost";
pub const METAL3_PLURAL: &str = "baremetalhosts";

/// One availability rule: the field is absent, or its value is one of `values`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    pub field: Vec<String>,
    pub values: Vec<String>,
    pub absent: bool,
}

/// A NodeClass's inventory, resolved (the preset expanded).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostQuery {
    pub api_version: String,
    pub kind: String,
    /// The plural when known (the preset's); otherwise discovered.
    pub plural: Option<String>,
    pub selector_path: Vec<String>,
    pub consumer_path: Option<Vec<String>>,
    pub rules: Vec<Rule>,
    pub zone_label: Option<String>,
}

fn path(p: &str) -> Vec<String> {
    p.split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl HostQuery {
    /// The query of a NodeClass's `spec.inventory`; `None` when it names neither a preset
    /// nor a host kind (the CRD's validation refuses that).
    pub fn of(inventory: &Inventory) -> Option<HostQuery> {
        let zone_label = inventory.zone_label.clone();
        if let Some(InventoryPreset::Metal3) = inventory.preset {
            return Some(HostQuery {
                api_version: METAL3_API_VERSION.into(),
                kind: METAL3_KIND.into(),
                plural: Some(METAL3_PLURAL.into()),
                selector_path: path("spec.template.spec.hostSelector"),
                consumer_path: Some(path("spec.consumerRef.name")),
                rules: vec![
                    Rule {
                        field: path("spec.consumerRef"),
                        values: Vec::new(),
                        absent: true,
                    },
                    Rule {
                        field: path("metadata.deletionTimestamp"),
                        values: Vec::new(),
                        absent: true,
                    },
                    Rule {
                        field: path("status.provisioning.state"),
                        values: vec!["available".into(), "ready".into()],
                        absent: false,
                    },
                ],
                zone_label,
            });
        }
        let h = inventory.hosts.as_ref()?;
        Some(HostQuery {
            api_version: h.api_version.clone(),
            kind: h.kind.clone(),
            plural: None,
            selector_path: path(&h.selector_path),
            consumer_path: h.consumer_path.as_deref().map(path),
            rules: h
                .available
                .iter()
                .map(|r| Rule {
                    field: path(&r.field),
                    values: r.values.clone(),
                    absent: r.absent,
                })
                .collect(),
            zone_label,
        })
    }

    /// The API group of the host kind (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

/// A host selector's operator (Kubernetes label selector and `k8s.io/apimachinery`
/// `selection.Operator` spellings, as Metal3 accepts both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Expression {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A template's host selector: `matchLabels` and `matchExpressions`, all must hold. An
/// absent selector matches every host of the namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSelector {
    match_labels: BTreeMap<String, String>,
    expressions: Vec<Expression>,
}

/// A host selector that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct SelectorError {
    pub path: String,
    pub reason: String,
}

fn op_of(raw: &str) -> Option<Op> {
    Some(match raw.to_ascii_lowercase().as_str() {
        "in" | "=" | "==" => Op::In,
        "notin" | "!=" => Op::NotIn,
        "exists" => Op::Exists,
        "doesnotexist" | "!" => Op::DoesNotExist,
        "gt" => Op::Gt,
        "lt" => Op::Lt,
        _ => return None,
    })
}

/// The value at `path` in `v` (`None`: absent or null).
fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    (!cur.is_null()).then_some(cur)
}

fn as_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads the host selector of `template` at `query.selector_path`.
pub fn selector_of(
    template: &DynamicObject,
    query: &HostQuery,
) -> Result<HostSelector, SelectorError> {
    let shown = query.selector_path.join(".");
    let bad = |reason: String| SelectorError {
        path: shown.clone(),
        reason,
    };
    let Some(sel) = at(&template.data, &query.selector_path) else {
        return Ok(HostSelector::default());
    };
    let mut out = HostSelector::default();
    if let Some(labels) = sel.get("matchLabels").filter(|v| !v.is_null()) {
        let map = labels
            .as_object()
            .ok_or_else(|| bad("matchLabels is not a map".into()))?;
        for (k, v) in map {
            out.match_labels.insert(k.clone(), as_string(v));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").filter(|v| !v.is_null()) {
        let list = exprs
            .as_array()
            .ok_or_else(|| bad("matchExpressions is not a list".into()))?;
        for e in list {
            let key = e["key"]
                .as_str()
                .ok_or_else(|| bad("a matchExpression has no key".into()))?;
            let raw = e["operator"].as_str().unwrap_or_default();
            let op = op_of(raw).ok_or_else(|| bad(format!("unknown operator {raw:?}")))?;
            let values: Vec<String> = e["values"]
                .as_array()
                .map(|vs| vs.iter().map(as_string).collect())
                .unwrap_or_default();
            if matches!(op, Op::Gt | Op::Lt)
                && (values.len() != 1 || values[0].parse::<i64>().is_err())
            {
                return Err(bad(format!("{raw} needs one integer value")));
            }
            out.expressions.push(Expression {
                key: key.to_string(),
                op,
                values,
            });
        }
    }
    Ok(out)
}

impl HostSelector {
    /// Whether a host with `labels` matches.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|e| {
                let have = labels.get(&e.key);
                let num = |v: &String| v.parse::<i64>().ok();
                let bound = e.values.first().and_then(num);
                match e.op {
                    Op::In => have.is_some_and(|h| e.values.contains(h)),
                    Op::NotIn => !have.is_some_and(|h| e.values.contains(h)),
                    Op::Exists => have.is_some(),
                    Op::DoesNotExist => have.is_none(),
                    Op::Gt => matches!((have.and_then(num), bound), (Some(h), Some(b)) if h > b),
                    Op::Lt => matches!((have.and_then(num), bound), (Some(h), Some(b)) if h < b),
                }
            })
    }
}

/// What the hosts of one template are: per zone (the zone label's value; `None` without
/// a split or without the label) the hosts matching and the free ones, and the names of
/// the objects holding a matching host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTally {
    pub zone_split: bool,
    matching: BTreeMap<Option<String>, u32>,
    free: BTreeMap<Option<String>, u32>,
    pub consumers: HashSet<String>,
}

impl HostTally {
    /// No host (a kind not listed yet, or a selector that cannot be read).
    pub fn none(zone_split: bool) -> HostTally {
        HostTally {
            zone_split,
            ..HostTally::default()
        }
    }

    fn sum(map: &BTreeMap<Option<String>, u32>, split: bool, zone: Option<&str>) -> u32 {
        match (split, zone) {
            (true, Some(z)) => map.get(&Some(z.to_string())).copied().unwrap_or(0),
            _ => map.values().sum(),
        }
    }
    /// Free hosts an offering in `zone` can become.
    pub fn free_in(&self, zone: Option<&str>) -> u32 {
        Self::sum(&self.free, self.zone_split, zone)
    }
    /// Hosts matching the template's selector that an offering in `zone` draws from.
    pub fn matching_in(&self, zone: Option<&str>) -> u32 {
        Self::sum(&self.matching, self.zone_split, zone)
    }

    /// The count an offering in `zone` has left, `pending` launches not holding a host yet
    /// taken off.
    pub fn available(&self, zone: Option<&str>, pending: u32) -> Available {
        Available {
            count: self.free_in(zone).saturating_sub(pending),
            source: CountSource::Inventory,
            limit: self.matching_in(zone),
        }
    }
}

/// The value of `path` in a host (`metadata.*` from the typed metadata).
fn field<'a>(
    host: &'a DynamicObject,
    meta: &'a mut Option<Value>,
    path: &[String],
) -> Option<&'a Value> {
    if path.first().map(String::as_str) == Some("metadata") {
        let m =
            meta.get_or_insert_with(|| serde_json::to_value(&host.metadata).unwrap_or_default());
        return at(m, &path[1..]);
    }
    at(&host.data, path)
}

/// Counts the hosts of `namespace` that `selector` matches, under `query`'s rules.
pub fn tally<'a>(
    query: &HostQuery,
    selector: &HostSelector,
    namespace: &str,
    hosts: impl IntoIterator<Item = &'a DynamicObject>,
) -> HostTally {
    let mut t = HostTally {
        zone_split: query.zone_label.is_some(),
        ..HostTally::default()
    };
    let empty = BTreeMap::new();
    for host in hosts {
        if host.metadata.namespace.as_deref() != Some(namespace) {
            continue;
        }
        let labels = host.metadata.labels.as_ref().unwrap_or(&empty);
        if !selector.matches(labels) {
            continue;
        }
        let zone = query
            .zone_label
            .as_ref()
            .and_then(|l| labels.get(l).cloned());
        *t.matching.entry(zone.clone()).or_default() += 1;
        let mut meta = None;
        if let Some(p) = &query.consumer_path
            && let Some(name) = field(host, &mut meta, p).and_then(Value::as_str)
        {
            t.consumers.insert(name.to_string());
        }
        let free = query.rules.iter().all(|r| {
            let v = field(host, &mut meta, &r.field);
            if r.absent {
                v.is_none()
            } else {
                v.is_some_and(|v| r.values.contains(&as_string(v)))
            }
        });
        if free {
            *t.free.entry(zone).or_default() += 1;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn metal3(zone_label: Option<&str>) -> HostQuery {
        HostQuery::of(&Inventory {
            preset: Some(InventoryPreset::Metal3),
            hosts: None,
            zone_label: zone_label.map(str::to_string),
        })
        .expect("preset")
    }

    fn template(selector: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3MachineTemplate",
            "metadata": {"name": "metal-large", "namespace": "capi"},
            "spec": {"template": {"spec": {"hostSelector": selector}}}
        }))
        .expect("template")
    }

    fn host(name: &str, labels: Value, consumer: Option<&str>, state: &str) -> DynamicObject {
        let mut spec = json!({"online": true});
        if let Some(c) = consumer {
            spec["consumerRef"] = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "Metal3Machine", "name": c, "namespace": "capi"});
        }
        serde_json::from_value(json!({
            "apiVersion": METAL3_API_VERSION, "kind": METAL3_KIND,
            "metadata": {"name": name, "namespace": "capi", "labels": labels},
            "spec": spec,
            "status": {"provisioning": {"state": state}}
        }))
        .expect("host")
    }

    #[test]
    fn metal3_counts_free_matching_hosts_per_zone() {
        let hosts = [
            host(
                "a",
                json!({"size": "large", "zone": "z1"}),
                None,
                "available",
            ),
            host("b", json!({"size": "large", "zone": "z1"}), None, "ready"),
            host(
                "c",
                json!({"size": "large", "zone": "z2"}),
                Some("m-1"),
                "provisioned",
            ),
            host(
                "d",
                json!({"size": "large", "zone": "z2"}),
                None,
                "inspecting",
            ),
            host(
                "e",
                json!({"size": "small", "zone": "z2"}),
                None,
                "available",
            ),
        ];
        let q = metal3(Some("zone"));
        let sel = selector_of(&template(json!({"matchLabels": {"size": "large"}})), &q)
            .expect("selector");
        let t = tally(&q, &sel, "capi", &hosts);
        assert_eq!((t.free_in(Some("z1")), t.matching_in(Some("z1"))), (2, 2));
        assert_eq!((t.free_in(Some("z2")), t.matching_in(Some("z2"))), (0, 2));
        assert_eq!((t.free_in(None), t.matching_in(None)), (2, 4));
        assert!(t.consumers.contains("m-1"));
        let a = t.available(Some("z1"), 1);
        assert_eq!((a.count, a.source, a.limit), (1, CountSource::Inventory, 2));
        // Without a zone label, every zone draws from all of them.
        let t = tally(&metal3(None), &sel, "capi", &hosts);
        assert_eq!(t.free_in(Some("z2")), 2);
        // Another namespace's hosts are not the template's.
        assert_eq!(tally(&q, &sel, "other", &hosts).matching_in(None), 0);
    }

    #[test]
    fn match_expressions_in_both_spellings() {
        let q = metal3(None);
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let sel = selector_of(
            &template(json!({"matchExpressions": [
                {"key": "size", "operator": "in", "values": ["large", "xl"]},
                {"key": "rack", "operator": "NotIn", "values": ["r9"]},
                {"key": "gpu", "operator": "!"},
                {"key": "cores", "operator": "gt", "values": ["16"]},
            ]})),
            &q,
        )
        .expect("selector");
        assert!(sel.matches(&labels(&[("size", "xl"), ("cores", "32")])));
        assert!(!sel.matches(&labels(&[("size", "xl"), ("cores", "8")])));
        assert!(!sel.matches(&labels(&[("size", "xl"), ("cores", "32"), ("rack", "r9")])));
        assert!(!sel.matches(&labels(&[("size", "xl"), ("cores", "32"), ("gpu", "1")])));
        assert!(!sel.matches(&labels(&[("size", "small"), ("cores", "32")])));
        // No selector: every host.
        assert!(
            selector_of(&template(Value::Null), &q)
                .expect("none")
                .matches(&labels(&[]))
        );
        let e = selector_of(
            &template(json!({"matchExpressions": [{"key": "a", "operator": "near"}]})),
            &q,
        )
        .expect_err("bad operator");
        assert!(
            e.to_string().contains("spec.template.spec.hostSelector"),
            "{e}"
        );
    }

    #[test]
    fn explicit_rules_read_any_field() {
        let inv: Inventory = serde_json::from_value(json!({"hosts": {
            "apiVersion": "example.com/v1", "kind": "Slot",
            "selectorPath": "spec.template.spec.pool",
            "consumerPath": "status.owner",
            "available": [{"field": "status.owner", "absent": true},
                          {"field": "spec.enabled", "values": ["true"]}]}}))
        .expect("inventory");
        let q = HostQuery::of(&inv).expect("explicit");
        assert_eq!(q.group(), "example.com");
        let slot = |name: &str, enabled: bool, owner: Option<&str>| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Slot",
                "metadata": {"name": name, "namespace": "capi", "labels": {"pool": "p"}},
                "spec": {"enabled": enabled}, "status": {"owner": owner}}))
            .expect("slot")
        };
        let t: DynamicObject = serde_json::from_value(json!({"apiVersion": "x/v1", "kind": "T",
            "metadata": {"name": "t", "namespace": "capi"},
            "spec": {"template": {"spec": {"pool": {"matchLabels": {"pool": "p"}}}}}}))
        .expect("template");
        let sel = selector_of(&t, &q).expect("selector");
        let hosts = [
            slot("a", true, None),
            slot("b", false, None),
            slot("c", true, Some("m")),
        ];
        let tally = tally(&q, &sel, "capi", &hosts);
        assert_eq!((tally.free_in(None), tally.matching_in(None)), (1, 3));
        assert!(tally.consumers.contains("m"));
    }
}
