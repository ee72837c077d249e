//! The API fixtures (tests/fixtures/api) parse into the Rust types, and the Rust types
//! serialize them back without losing a field: the types are field for field the API.

mod common;

use std::path::{Path, PathBuf};

use api::{NodeClaim, NodeOverlay, NodePool};
use clusterapi_api::ClusterAPINodeClass;
use common::is_subset;
use serde_json::Value;

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/api")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("fixture readable");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("fixture is YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value, path: &Path) {
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
    let back = serde_json::to_value(&typed).expect("serializes");
    assert!(
        is_subset(&doc["spec"], &back["spec"]),
        "{}: spec changed in a round trip through the Rust type:\n{}\n{}",
        path.display(),
        doc["spec"],
        back["spec"]
    );
}

#[test]
fn valid_fixtures_parse_and_round_trip() {
    let files = fixtures("valid");
    assert!(files.len() >= 12, "at least 12 valid documents");
    for path in files {
        for doc in docs(&path) {
            match doc["kind"].as_str() {
                Some("NodePool") => roundtrip::<NodePool>(&doc, &path),
                Some("NodeClaim") => roundtrip::<NodeClaim>(&doc, &path),
                Some("ClusterAPINodeClass") => roundtrip::<ClusterAPINodeClass>(&doc, &path),
                Some("NodeOverlay") => roundtrip::<NodeOverlay>(&doc, &path),
                other => panic!("{}: unexpected kind {other:?}", path.display()),
            }
        }
    }
}

#[test]
fn invalid_fixtures_name_field_and_message() {
    let files = fixtures("invalid");
    assert!(files.len() >= 10, "at least 10 invalid documents");
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        assert!(
            text.contains("# expect: "),
            "{} has no `# expect:` line",
            path.display()
        );
        assert!(
            text.contains("# field: "),
            "{} has no `# field:` line",
            path.display()
        );
        assert!(!docs(&path).is_empty());
    }
}

#[test]
fn defaults_match_karpenter() {
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}}}}
    }))
    .expect("minimal NodePool");
    assert_eq!(pool.spec.template.spec.expire_after, "720h");
    assert_eq!(pool.spec.disruption.consolidate_after, "0s");
    assert_eq!(
        pool.spec.disruption.consolidation_policy,
        api::karpenter::ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(pool.spec.disruption.budgets.len(), 1);
    assert_eq!(pool.spec.disruption.budgets[0].nodes, "10%");
    let class: ClusterAPINodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass",
        "metadata": {"name": "c"},
        "spec": {"clusterRef": {"namespace": "ns", "name": "c"}, "bootstrap": {"dataSecretName": "s"}}
    }))
    .expect("minimal NodeClass");
    assert_eq!(class.spec.launch_timeout, "10m");
    assert_eq!(class.spec.registration_timeout, "15m");
}
