//! Property tests of the snapshot reader of `karpenter-capi simulate`
//! (`karpenter_capi::simulate::load_yaml`, then `plan` and `render_table`): any text,
//! YAML-like text, generated documents and the example snapshot with subtrees replaced or
//! removed are read, planned and rendered without a panic. Case counts:
//! `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "common/prop_cases.rs"]
mod prop_cases;
#[path = "common/prop_json.rs"]
mod prop_json;

use std::path::Path;

use karpenter_capi::simulate::{load_yaml, plan, render_table};
use proptest::prelude::*;
use serde_json::Value;

/// The documents of `examples/snapshot/`.
fn examples() -> Vec<Value> {
    prop_json::read_examples(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/snapshot"))
}

/// Reads `text` and, when it reads, plans and renders.
fn simulate(text: &str) {
    if let Ok(loaded) = load_yaml(Path::new("prop.yaml"), text) {
        let _ = render_table(&plan(&loaded));
    }
}

proptest! {
    #![proptest_config(prop_cases::config(256, 100_000))]

    #[test]
    fn any_text_is_simulated_without_panic(text in prop_oneof![any::<String>(), prop_json::near_yaml()]) {
        simulate(&text);
    }
}

proptest! {
    #![proptest_config(prop_cases::config(48, 20_000))]

    #[test]
    fn mutated_example_snapshots_are_simulated_without_panic(docs in prop_json::mutated(examples())) {
        simulate(&prop_json::yaml(&docs));
    }

    #[test]
    fn generated_documents_are_simulated_without_panic(
        docs in prop::collection::vec(
            (prop::sample::select(vec![
                ("v1", "Pod"), ("v1", "Node"), ("karpenter.sh/v1", "NodePool"),
                ("karpenter.sh/v1", "NodeClaim"), ("apps/v1", "DaemonSet"),
                ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("batch/v1", "Job"),
                ("v1", "List"),
            ]), "[a-z]{1,3}", prop_json::value(), prop_json::value()),
            1..5,
        ),
    ) {
        let docs: Vec<Value> = docs
            .into_iter()
            .map(|((api_version, kind), name, spec, status)| {
                serde_json::json!({"apiVersion": api_version, "kind": kind,
                    "metadata": {"name": name}, "spec": spec, "status": status, "items": [spec]})
            })
            .collect();
        simulate(&prop_json::yaml(&docs));
    }
}
