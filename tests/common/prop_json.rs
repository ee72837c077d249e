//! Generated Kubernetes-flavoured JSON for the property tests of the snapshot readers,
//! shared by path like `prop_cases.rs`: arbitrary documents made of the field names and
//! scalars those readers look at, and mutations of real example documents (a subtree
//! replaced, a field removed).
// Test-support module: `pub` here shares items between test files of one test crate.
#![allow(unreachable_pub)]

use std::path::Path;

use proptest::prelude::*;
use serde_json::{Map, Value};

/// The documents of the `*.yaml` files of `dir`, in name order.
pub fn read_examples(dir: &Path) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("examples directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("read example");
            serde_saphyr::from_multiple::<Value>(&text).expect("example YAML")
        })
        .collect()
}

/// Field names the readers look at, and a few they do not.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "annotations",
    "uid",
    "ownerReferences",
    "controller",
    "spec",
    "status",
    "template",
    "containers",
    "initContainers",
    "resources",
    "requests",
    "limits",
    "cpu",
    "memory",
    "pods",
    "replicas",
    "parallelism",
    "completions",
    "selector",
    "matchLabels",
    "matchExpressions",
    "key",
    "operator",
    "values",
    "nodeSelector",
    "affinity",
    "nodeAffinity",
    "tolerations",
    "taints",
    "effect",
    "value",
    "requirements",
    "nodeClassRef",
    "capacity",
    "allocatable",
    "conditions",
    "type",
    "phase",
    "nodeName",
    "items",
    "limits",
    "weight",
    "disruption",
    "budgets",
    "nodes",
    "clusterRef",
    "kubelet",
    "failureDomains",
    "providerID",
    "topologySpreadConstraints",
    "x",
];

/// Scalars: quantities, label-ish words, operators, kinds, numbers, booleans, null.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..200).prop_map(Value::from),
        prop::sample::select(vec![i64::MAX, i64::MIN, 1 << 40, 4_000_000_000,])
            .prop_map(Value::from),
        (-1.0e3f64..1.0e3).prop_map(Value::from),
        "[0-9]{1,4}(m|Mi|Gi|k)?|[a-z]{1,8}|-[0-9]|1e40|\\.|".prop_map(Value::from),
        prop::sample::select(vec![
            "In",
            "NotIn",
            "Exists",
            "DoesNotExist",
            "Gt",
            "Lt",
            "Gte",
            "Lte",
            "NoSchedule",
            "NoExecute",
            "Ready",
            "True",
            "Pod",
            "Node",
            "Deployment",
            "List",
            "v1",
            "apps/v1",
            "karpenter.sh/v1",
            "kubernetes.io/arch",
            "topology.kubernetes.io/zone",
            "amd64",
        ])
        .prop_map(Value::from),
    ]
}

/// Arbitrary documents over [`KEYS`] and [`scalar`]s, a few levels deep.
pub fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..6).prop_map(
                |kvs| {
                    Value::Object(
                        kvs.into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect::<Map<_, _>>(),
                    )
                }
            ),
        ]
    })
}

/// JSON pointers of every value in `v` (its root included).
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                pointers(
                    c,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                pointers(c, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// `docs` with one to four subtrees replaced by generated values or removed.
pub fn mutated(docs: Vec<Value>) -> impl Strategy<Value = Vec<Value>> {
    let all = Value::Array(docs);
    let mut paths = Vec::new();
    pointers(&all, String::new(), &mut paths);
    paths.retain(|p| !p.is_empty());
    prop::collection::vec(
        (
            prop::sample::select(paths),
            prop::option::weighted(0.85, value()),
        ),
        1..5,
    )
    .prop_map(move |edits| {
        let mut all = all.clone();
        for (path, replacement) in edits {
            match replacement {
                Some(v) => {
                    if let Some(slot) = all.pointer_mut(&path) {
                        *slot = v;
                    }
                }
                None => {
                    let (parent, last) = path.rsplit_once('/').unwrap_or(("", &path));
                    if let Some(Value::Object(m)) = all.pointer_mut(parent) {
                        m.remove(&last.replace("~1", "/").replace("~0", "~"));
                    }
                }
            }
        }
        match all {
            Value::Array(docs) => docs,
            other => vec![other],
        }
    })
}

/// Documents as one multi-document YAML text (each document JSON, which is YAML).
pub fn yaml(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Text near YAML: keys, indentation, lists, flow collections, anchors, aliases, tags.
pub fn near_yaml() -> impl Strategy<Value = String> {
    prop::collection::vec(
        "( {0,4})(- )?([a-zA-Z]{1,6}: ?)?([a-z0-9.]{0,6}|\\[|\\]|\\{|\\}|&a|\\*a|!!str|!!binary|'|\"|\\||>|---|\\.\\.\\.|#)",
        0..16,
    )
    .prop_map(|lines| lines.join("\n"))
}
