//! The seam is a boundary (issue 36): the provider-neutral crates compile without Cluster
//! API. For each crate of [`NEUTRAL`], its dependency closure (normal dependencies, from
//! `cargo metadata`) holds no package of [`PROVIDER_PACKAGES`] and no workspace package
//! whose sources define a kind of the Cluster API group, and no source file of the crate
//! itself (`src/` and `tests/`) names `cluster.x-k8s.io`. (`api` may: the label and annotation
//! names of our own `karpenter.cluster.x-k8s.io` group are constants there.)
//!
//! The checker is run against `clusterapi` as its positive control: that crate is the
//! Cluster API provider, and the check must say so on every count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Crates that must know no provider.
const NEUTRAL: &[&str] = &["cloudprovider", "scheduling", "karpenter-core"];

/// Packages that define Cluster API kinds or templates, or are a provider.
const PROVIDER_PACKAGES: &[&str] = &[
    "templates",
    "clusterapi",
    "clusterapi-api",
    "kwok",
    "operator",
];

/// How a kube derive defines a kind of the Cluster API group.
const DEFINES_A_KIND: &str = "group = \"cluster.x-k8s.io\"";

/// The API group no neutral source may name.
const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";

struct Package {
    name: String,
    /// The directory of its Cargo.toml (workspace members only).
    dir: Option<PathBuf>,
    /// Normal (non-dev, non-build) dependencies, by package id.
    deps: Vec<String>,
}

fn metadata() -> BTreeMap<String, Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut packages: BTreeMap<String, Package> = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let id = p["id"].as_str().expect("package id").to_string();
        let dir = members.contains(id.as_str()).then(|| {
            Path::new(p["manifest_path"].as_str().expect("manifest_path"))
                .parent()
                .expect("a manifest has a directory")
                .to_path_buf()
        });
        let name = p["name"].as_str().expect("package name").to_string();
        packages.insert(
            id,
            Package {
                name,
                dir,
                deps: Vec::new(),
            },
        );
    }
    for node in meta["resolve"]["nodes"].as_array().expect("resolve graph") {
        let id = node["id"].as_str().expect("node id");
        let normal: Vec<String> = node["deps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["kind"].is_null())
            })
            .filter_map(|d| d["pkg"].as_str().map(str::to_string))
            .collect();
        if let Some(p) = packages.get_mut(id) {
            p.deps = normal;
        }
    }
    packages
}

/// Every package `name` depends on, itself included (normal dependencies only).
fn closure<'a>(packages: &'a BTreeMap<String, Package>, name: &str) -> Vec<&'a Package> {
    let start = packages
        .iter()
        .find(|(_, p)| p.name == name && p.dir.is_some())
        .map(|(id, _)| id.clone())
        .unwrap_or_else(|| panic!("{name} is not a workspace package"));
    let mut seen = BTreeSet::from([start.clone()]);
    let mut todo = vec![start];
    while let Some(id) = todo.pop() {
        for d in &packages[&id].deps {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen.iter().map(|id| &packages[id]).collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    if !dir.exists() {
        return;
    }
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let e = e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The Rust sources under `dir`, with their text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f)
                .unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
            (f, text)
        })
        .collect()
}

/// What makes `name` not neutral: provider packages in its closure, workspace packages in
/// it defining a Cluster API kind, and its own sources naming the Cluster API group.
fn violations(packages: &BTreeMap<String, Package>, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    for p in closure(packages, name) {
        if PROVIDER_PACKAGES.contains(&p.name.as_str()) {
            found.push(format!("{name} depends on {}", p.name));
        }
        let Some(dir) = &p.dir else { continue };
        let own = p.name == name;
        // A package's own directory holds the others' only for the root package.
        let roots: Vec<PathBuf> = if own {
            ["src", "tests"].iter().map(|d| dir.join(d)).collect()
        } else {
            vec![dir.join("src")]
        };
        for (f, text) in roots.iter().flat_map(|r| sources(r)) {
            if own && text.contains(CLUSTER_API_GROUP) {
                found.push(format!("{name}: {} names {CLUSTER_API_GROUP}", f.display()));
            }
            if text.contains(DEFINES_A_KIND) {
                found.push(format!(
                    "{name}'s closure: {} defines a Cluster API kind",
                    f.display()
                ));
            }
        }
    }
    found
}

#[test]
fn neutral_crates_know_no_cluster_api() {
    let packages = metadata();
    let found: Vec<String> = NEUTRAL
        .iter()
        .flat_map(|n| violations(&packages, n))
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_check_sees_cluster_api_where_it_is() {
    let packages = metadata();
    let found = violations(&packages, "clusterapi");
    for dep in ["templates", "clusterapi-api"] {
        let want = format!("clusterapi depends on {dep}");
        assert!(found.contains(&want), "{want} not in {found:?}");
    }
    assert!(
        found
            .iter()
            .any(|f| f.ends_with(&format!("names {CLUSTER_API_GROUP}"))),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.ends_with("defines a Cluster API kind")),
        "{found:?}"
    );
}
