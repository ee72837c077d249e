//! Property tests of the snapshot reader of `karpenter-capi simulate`
//! (`karpenter_capi::simulate::load_yaml`, then `plan` and `render_table`): any text,
//! YAML-like text, generated documents and the example snapshot with subtrees replaced or
//! removed are read, planned and rendered without a panic. Case counts:
//! `tests/common/prop_cases.rs` (`PROP_LONG=1` for the long run).
//!
//! A reader that refused everything would pass "without a panic" while never planning: each
//! property counts the inputs that were read (and so planned and rendered). Arbitrary text,
//! near-YAML, subtrees replaced by arbitrary values and generated documents are mostly
//! refused by the strict reader (about 5 %, 7 %, 13 % and 2 % are read): they look for
//! panics on its error paths. The example snapshot with scalar leaves given other values of
//! the same type (`retyped`) keeps a snapshot's shape: at least 30 % of it must be read,
//! planned and rendered (about 70 % are), so a reader that refused everything fails here.

#[path = "common/prop_cases.rs"]
mod prop_cases;
#[path = "common/prop_json.rs"]
mod prop_json;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use karpenter_capi::simulate::{load_yaml, plan, render_table};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;

/// The documents of `examples/snapshot/`.
fn examples() -> Vec<Value> {
    prop_json::read_examples(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/snapshot"))
}

/// Fewer cases than this (`PROPTEST_CASES=N`) print the share without asserting the floor.
const MIN_CASES_FOR_FLOOR: usize = 20;

/// Reads `text` and, when it reads, plans and renders; whether it was read.
fn simulate(text: &str) -> bool {
    match load_yaml(Path::new("prop.yaml"), text) {
        Ok(loaded) => {
            let _ = render_table(&plan(&loaded));
            true
        }
        Err(_) => false,
    }
}

/// Runs `property` over `strategy` (a panic fails it, shrunk), then asserts that at least
/// `floor` (a share, 0..1) of the generated inputs were read, planned and rendered (with
/// [`MIN_CASES_FOR_FLOOR`] cases or more: a share of a handful says nothing).
fn check_read_share<S: Strategy>(
    name: &str,
    config: Config,
    strategy: S,
    text: impl Fn(S::Value) -> String,
    floor: f64,
) {
    let (read, total) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy, |value| {
        total.fetch_add(1, Ordering::Relaxed);
        if simulate(&text(value)) {
            read.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    let (read, total) = (read.into_inner(), total.into_inner());
    let share = read as f64 / total.max(1) as f64;
    eprintln!("{name}: {read} of {total} inputs read, planned and rendered ({share:.2})");
    assert!(
        total < MIN_CASES_FOR_FLOOR || share >= floor,
        "{name}: only {read} of {total} inputs were read (floor {floor}): the property \
         exercised the error path only"
    );
}

#[test]
fn any_text_is_simulated_without_panic() {
    check_read_share(
        "any text",
        prop_cases::config(256, 100_000),
        any::<String>(),
        |text| text,
        0.0,
    );
}

#[test]
fn near_yaml_text_is_simulated_without_panic() {
    check_read_share(
        "near-YAML text",
        prop_cases::config(256, 100_000),
        prop_json::near_yaml(),
        |text| text,
        0.0,
    );
}

#[test]
fn mutated_example_snapshots_are_simulated_without_panic() {
    check_read_share(
        "mutated example snapshots",
        prop_cases::config(48, 20_000),
        prop_json::mutated(examples()),
        |docs| prop_json::yaml(&docs),
        0.0,
    );
}

/// Every scalar leaf of `v`: (JSON pointer, the value).
fn leaves(v: &Value, at: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                let key = k.replace('~', "~0").replace('/', "~1");
                leaves(c, format!("{at}/{key}"), out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                leaves(c, format!("{at}/{i}"), out);
            }
        }
        Value::Null => {}
        scalar => out.push((at, scalar.clone())),
    }
}

/// `docs` with one to four scalar leaves given another value of the same type: a string
/// another leaf of the examples holds (a name, label, quantity, operator...), an integer, a
/// boolean. The shape stays that of a snapshot; the values, and so the plan, vary.
fn retyped(docs: Vec<Value>) -> impl Strategy<Value = Vec<Value>> {
    let all = Value::Array(docs);
    let mut found = Vec::new();
    leaves(&all, String::new(), &mut found);
    let mut strings: Vec<String> = found
        .iter()
        .filter_map(|(_, v)| v.as_str().map(str::to_string))
        .collect();
    strings.sort();
    strings.dedup();
    let pointers: Vec<String> = found.into_iter().map(|(p, _)| p).collect();
    prop::collection::vec(
        (
            prop::sample::select(pointers),
            any::<prop::sample::Index>(),
            0i64..1000,
            any::<bool>(),
        ),
        1..5,
    )
    .prop_map(move |edits| {
        let mut all = all.clone();
        for (pointer, pick, number, flag) in edits {
            if let Some(slot) = all.pointer_mut(&pointer) {
                *slot = match slot {
                    Value::String(_) => Value::from(strings[pick.index(strings.len())].clone()),
                    Value::Number(_) => Value::from(number),
                    _ => Value::from(flag),
                };
            }
        }
        match all {
            Value::Array(docs) => docs,
            other => vec![other],
        }
    })
}

#[test]
fn retyped_example_snapshots_are_read_and_planned() {
    check_read_share(
        "retyped example snapshots",
        prop_cases::config(48, 20_000),
        retyped(examples()),
        |docs| prop_json::yaml(&docs),
        0.3,
    );
}

#[test]
fn generated_documents_are_simulated_without_panic() {
    let kinds = prop::sample::select(vec![
        ("v1", "Pod"),
        ("v1", "Node"),
        ("karpenter.sh/v1", "NodePool"),
        ("karpenter.sh/v1", "NodeClaim"),
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("batch/v1", "Job"),
        ("v1", "List"),
    ]);
    let docs = prop::collection::vec(
        (kinds, "[a-z]{1,3}", prop_json::value(), prop_json::value()),
        1..5,
    );
    check_read_share(
        "generated documents",
        prop_cases::config(48, 20_000),
        docs,
        |docs| {
            let docs: Vec<Value> = docs
                .into_iter()
                .map(|((api_version, kind), name, spec, status)| {
                    serde_json::json!({"apiVersion": api_version, "kind": kind,
                        "metadata": {"name": name}, "spec": spec, "status": status,
                        "items": [spec]})
                })
                .collect();
            prop_json::yaml(&docs)
        },
        0.0,
    );
}
