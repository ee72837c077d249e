//! Our CRDs offer everything Karpenter's do, as of the pinned release (v1.15.0, from the Go
//! module: `hack/karpenter/crds.sh` fetches and caches `pkg/apis/crds/*.yaml`).
//!
//! For every CRD of Karpenter's in the `karpenter.sh` group, ours of the same name must have,
//! schema path by schema path (`spec.template.spec.requirements[].key`, `.*` for map values):
//! - every field (property) theirs has;
//! - every `enum` value theirs allows (no enum where theirs has one is a difference too);
//! - every CEL rule (`x-kubernetes-validations[].rule`) theirs has at that path, compared after
//!   whitespace normalisation. One rewrite is ours on purpose and undone before comparing:
//!   our requirement rules guard `x.values` with `has(x.values) && ` (the field is optional,
//!   and without the guard an omitted `values` fails with CEL's "no such key" instead of the
//!   rule's message; both reject the same objects);
//! - no `required` field theirs does not require (we must not refuse what Karpenter accepts);
//! - the same scalar `default` (object defaults are compared through their fields' defaults)
//!   and the same `type` where both declare one;
//! - every subresource (`status`, `scale` with the same replica paths).
//!
//! Extra fields, enum values and rules of ours are fine. Our own rules may also be stricter
//! in ways Karpenter cannot express for Cluster API (label domains we reserve): those are
//! extras, not differences.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

/// Karpenter's API groups whose CRDs we must match (not `autoscaling.x-k8s.io`'s
/// CapacityBuffer: Karpenter ships it, it is not part of the karpenter.sh API).
const GROUP: &str = "karpenter.sh";

/// One difference: the CRD's kind and what ours lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Difference {
    kind: String,
    what: String,
}

/// Whitespace runs become one space; our `has(x.values) && ` guard goes.
fn normalise_rule(rule: &str) -> String {
    rule.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("has(x.values) && ", "")
}

fn rules(schema: &Value) -> Vec<String> {
    schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["rule"].as_str())
        .map(normalise_rule)
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// What `ours` lacks of `theirs` at `path` and below.
fn compare_schema(path: &str, theirs: &Value, ours: &Value, out: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    if let Some(their_enum) = theirs.get("enum") {
        let our_enum = strings(&ours["enum"]);
        if ours.get("enum").is_none() {
            out.push(format!(
                "{at}: no enum (theirs: {})",
                strings(their_enum).join(", ")
            ));
        } else {
            for v in strings(their_enum) {
                if !our_enum.contains(&v) {
                    out.push(format!("{at}: enum value {v:?} missing"));
                }
            }
        }
    }
    let our_rules = rules(ours);
    for rule in rules(theirs) {
        if !our_rules.contains(&rule) {
            out.push(format!("{at}: CEL rule missing: {rule}"));
        }
    }
    let their_required = strings(&theirs["required"]);
    for r in strings(&ours["required"]) {
        if !their_required.contains(&r) && theirs["properties"].get(&r).is_some() {
            out.push(format!("{at}: requires {r:?}, Karpenter does not"));
        }
    }
    match (theirs.get("default"), ours.get("default")) {
        (Some(t), o) if !t.is_object() && o != Some(t) => {
            out.push(format!("{at}: default {t} (ours: {o:?})"));
        }
        _ => {}
    }
    if let (Some(t), Some(o)) = (theirs.get("type"), ours.get("type"))
        && t != o
    {
        out.push(format!("{at}: type {t} (ours: {o})"));
    }
    let their_props = theirs["properties"].as_object().into_iter().flatten();
    for (name, their_child) in their_props {
        let child = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        match ours["properties"].get(name) {
            Some(our_child) => compare_schema(&child, their_child, our_child, out),
            None => out.push(format!("{child}: field missing")),
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", ".*")] {
        match (theirs.get(key), ours.get(key)) {
            (Some(t), Some(o)) if t.is_object() => {
                compare_schema(&format!("{path}{suffix}"), t, o, out)
            }
            (Some(t), None) if t.is_object() => out.push(format!("{at}: no {key} schema")),
            _ => {}
        }
    }
}

/// What our CRD lacks of theirs (same name), version by version.
fn compare_crd(theirs: &Value, ours: Option<&Value>) -> Vec<Difference> {
    let kind = theirs["spec"]["names"]["kind"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    let diff = |what: String| Difference {
        kind: kind.clone(),
        what,
    };
    let Some(ours) = ours else {
        return vec![diff(format!(
            "no CRD {}",
            theirs["metadata"]["name"].as_str().unwrap_or("?")
        ))];
    };
    let mut out = Vec::new();
    for their_version in theirs["spec"]["versions"].as_array().into_iter().flatten() {
        let name = their_version["name"].as_str().unwrap_or("?");
        let Some(our_version) = ours["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
        else {
            out.push(diff(format!("no version {name}")));
            continue;
        };
        let mut lacks = Vec::new();
        let subresources = their_version["subresources"].as_object().into_iter();
        for (sub, their_sub) in subresources.flatten() {
            match our_version["subresources"].get(sub) {
                None => lacks.push(format!("no {sub} subresource")),
                Some(our_sub) if our_sub != their_sub => {
                    lacks.push(format!("{sub} subresource {their_sub} (ours: {our_sub})"))
                }
                Some(_) => {}
            }
        }
        let schema = |v: &Value| v["schema"]["openAPIV3Schema"].clone();
        compare_schema("", &schema(their_version), &schema(our_version), &mut lacks);
        out.extend(lacks.into_iter().map(|l| diff(format!("{name}: {l}"))));
    }
    out
}

/// Every difference between Karpenter's CRDs (of [`GROUP`]) and ours, matched by name.
fn compare_all(theirs: &[Value], ours: &[Value]) -> Vec<Difference> {
    let ours: BTreeMap<&str, &Value> = ours
        .iter()
        .filter_map(|c| Some((c["metadata"]["name"].as_str()?, c)))
        .collect();
    theirs
        .iter()
        .filter(|c| c["spec"]["group"] == GROUP)
        .flat_map(|c| {
            let name = c["metadata"]["name"].as_str().unwrap_or_default();
            compare_crd(c, ours.get(name).copied())
        })
        .collect()
}

fn parse(yaml: &str, what: &str) -> Value {
    serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{what} is not YAML: {e}"))
}

/// Karpenter's CRD directory, from `hack/karpenter/crds.sh` (fetched and cached on first use).
fn karpenter_crds_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("hack/karpenter/crds.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("running hack/karpenter/crds.sh");
    assert!(
        out.status.success(),
        "hack/karpenter/crds.sh failed (its message is above): Karpenter's CRDs are needed to compare ours with"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
fn our_crds_offer_everything_karpenters_do() {
    let dir = karpenter_crds_dir();
    let mut theirs = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("Karpenter CRD directory") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let yaml = std::fs::read_to_string(&path).expect("Karpenter CRD");
            theirs.push(parse(&yaml, &path.display().to_string()));
        }
    }
    let compared: Vec<&Value> = theirs
        .iter()
        .filter(|c| c["spec"]["group"] == GROUP)
        .collect();
    assert!(
        compared.len() >= 3,
        "expected Karpenter's NodePool, NodeClaim and NodeOverlay CRDs in {}",
        dir.display()
    );
    let ours: Vec<Value> = clusterapi_api::crds::rendered()
        .expect("our CRDs render")
        .iter()
        .map(|(name, yaml)| parse(yaml, name))
        .collect();
    let differences = compare_all(&theirs, &ours);
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &differences {
        *by_kind.entry(&d.kind).or_default() += 1;
    }
    let listed: Vec<String> = differences
        .iter()
        .map(|d| format!("  {}: {}", d.kind, d.what))
        .collect();
    assert!(
        differences.is_empty(),
        "our CRDs lack {} things Karpenter's have (by kind: {by_kind:?}):\n{}",
        differences.len(),
        listed.join("\n")
    );
    eprintln!(
        "{} Karpenter CRDs compared: ours lack nothing",
        compared.len()
    );
}

// The comparator itself: each kind of difference is caught.

fn crd(kind: &str, schema: Value, subresources: Value) -> Value {
    serde_json::json!({
        "metadata": {"name": format!("{}s.karpenter.sh", kind.to_lowercase())},
        "spec": {"group": GROUP, "names": {"kind": kind}, "versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": schema}, "subresources": subresources}
        ]}
    })
}

fn pool_schema(reasons: &[&str], rules: &[&str], extra: Value) -> Value {
    let rules: Vec<Value> = rules
        .iter()
        .map(|r| serde_json::json!({"rule": r, "message": "m"}))
        .collect();
    let mut spec = serde_json::json!({
        "type": "object",
        "x-kubernetes-validations": rules,
        "properties": {
            "budgets": {"type": "array", "items": {"type": "object", "properties": {
                "reasons": {"type": "array", "items": {"type": "string", "enum": reasons}}}}},
        }
    });
    if let (Some(props), Value::Object(extra)) = (spec["properties"].as_object_mut(), extra) {
        props.extend(extra);
    }
    serde_json::json!({"type": "object", "properties": {"spec": spec}})
}

fn whats(theirs: &Value, ours: &Value) -> Vec<String> {
    compare_all(std::slice::from_ref(theirs), std::slice::from_ref(ours))
        .into_iter()
        .map(|d| d.what)
        .collect()
}

#[test]
fn comparator_catches_a_missing_field_enum_value_rule_and_subresource() {
    let rule = "!has(self.replicas) || !has(self.weight)";
    let replicas = serde_json::json!({"replicas": {"type": "integer"}});
    let scale = serde_json::json!({"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}});
    let theirs = crd(
        "NodePool",
        pool_schema(&["Empty", "Unhealthy"], &[rule], replicas.clone()),
        scale.clone(),
    );
    // Identical (the rule's whitespace aside): nothing lacks.
    let same = crd(
        "NodePool",
        pool_schema(
            &["Empty", "Unhealthy", "Ours"],
            &["!has(self.replicas)  ||\n !has(self.weight)"],
            replicas.clone(),
        ),
        scale.clone(),
    );
    assert_eq!(whats(&theirs, &same), Vec::<String>::new());

    let lacking = crd(
        "NodePool",
        pool_schema(&["Empty"], &[], serde_json::json!({})),
        serde_json::json!({"status": {}}),
    );
    assert_eq!(
        whats(&theirs, &lacking),
        [
            "v1: no scale subresource",
            "v1: spec: CEL rule missing: !has(self.replicas) || !has(self.weight)",
            "v1: spec.budgets[].reasons[]: enum value \"Unhealthy\" missing",
            "v1: spec.replicas: field missing",
        ]
    );
    // No CRD at all is one difference, named by kind.
    let missing = compare_all(&[theirs], &[]);
    assert_eq!(
        missing,
        [Difference {
            kind: "NodePool".into(),
            what: "no CRD nodepools.karpenter.sh".into()
        }]
    );
}

#[test]
fn comparator_catches_stricter_required_and_other_defaults() {
    let schema = |required: Value, default: &str| {
        serde_json::json!({"type": "object", "properties": {"spec": {
            "type": "object", "required": required,
            "properties": {
                "consolidateAfter": {"type": "string", "default": default},
                "template": {"type": "object"}}}}})
    };
    let theirs = crd(
        "NodePool",
        schema(serde_json::json!(["template"]), "0s"),
        Value::Null,
    );
    let ours = crd(
        "NodePool",
        schema(serde_json::json!(["template", "consolidateAfter"]), "1m"),
        Value::Null,
    );
    assert_eq!(
        whats(&theirs, &ours),
        [
            "v1: spec: requires \"consolidateAfter\", Karpenter does not",
            "v1: spec.consolidateAfter: default \"0s\" (ours: Some(String(\"1m\")))",
        ]
    );
    // Our requirement rules' `has(x.values) && ` guard is not a difference.
    assert_eq!(
        normalise_rule(
            "self.all(x, x.operator == 'In' ? has(x.values) && x.values.size() != 0 : true)"
        ),
        "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)"
    );
}
