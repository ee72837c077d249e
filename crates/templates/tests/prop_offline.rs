//! Property tests of the offline reader (`templates::offline`, behind `karpenter-capi
//! instance-types`): any text, YAML-like text, and the example templates with subtrees
//! replaced or removed are read, reported and rendered without a panic. Case counts:
//! `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).

#[path = "../../../tests/common/prop_cases.rs"]
mod prop_cases;
#[path = "../../../tests/common/prop_json.rs"]
mod prop_json;

use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;
use templates::offline::{Inputs, render_json, render_table, render_yaml, reports};

/// The documents of `examples/templates/`.
fn examples() -> Vec<Value> {
    prop_json::read_examples(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/templates"),
    )
}

/// Reads `text` and, when it reads, renders every report.
fn read_and_render(text: &str) {
    let mut inputs = Inputs::default();
    if inputs.add_yaml(Path::new("prop.yaml"), text).is_ok() {
        let reports = reports(&inputs);
        let _ = render_table(&reports);
        let _ = render_json(&reports);
        let _ = render_yaml(&reports);
    }
}

proptest! {
    #![proptest_config(prop_cases::config(256, 100_000))]

    #[test]
    fn any_text_is_read_without_panic(text in prop_oneof![any::<String>(), prop_json::near_yaml()]) {
        read_and_render(&text);
    }
}

proptest! {
    #![proptest_config(prop_cases::config(64, 20_000))]

    #[test]
    fn mutated_example_templates_are_read_without_panic(docs in prop_json::mutated(examples())) {
        read_and_render(&prop_json::yaml(&docs));
    }

    #[test]
    fn generated_documents_are_read_without_panic(docs in prop::collection::vec(prop_json::value(), 1..4)) {
        read_and_render(&prop_json::yaml(&docs));
    }
}
