//! The committed CRD YAML (`crds/`, and the copies kustomize installs from `deploy/base/crds/`
//! and helm from `charts/karpenter-capi/crds/`) is exactly what `karpenter-capi crds`
//! generates from crates/api; `crds/` also holds the KWOKNodeClass CRD crates/kwok generates
//! (not installed by the Cluster API chart). Regenerate with `make crds`.

use std::path::Path;

/// The CRDs of crates/api, plus kwok's KWOKNodeClass when `with_kwok`.
fn rendered(with_kwok: bool) -> Vec<(String, String)> {
    let mut rendered = clusterapi_api::crds::rendered().expect("CRDs render");
    if with_kwok {
        rendered.push(kwok::nodeclass::rendered().expect("the KWOKNodeClass CRD renders"));
    }
    rendered
}

fn check_dir(dir: &Path, rendered: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, yaml) in rendered {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(committed) if committed == *yaml => {}
            Ok(_) => problems.push(format!(
                "{} differs from the generated CRD",
                dir.join(name).display()
            )),
            Err(e) => problems.push(format!("{}: {e}", dir.join(name).display())),
        }
    }
    // No stale files: every YAML file in the directory is a generated one.
    for entry in std::fs::read_dir(dir).expect("CRD directory exists") {
        let name = entry
            .expect("dir entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".yaml") && !rendered.iter().any(|(n, _)| *n == name) {
            problems.push(format!(
                "{} is not generated any more",
                dir.join(&name).display()
            ));
        }
    }
    problems
}

#[test]
fn committed_crds_match_generated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = check_dir(&root.join("crds"), &rendered(true));
    problems.extend(check_dir(&root.join("deploy/base/crds"), &rendered(false)));
    problems.extend(check_dir(
        &root.join("charts/karpenter-capi/crds"),
        &rendered(false),
    ));
    assert!(
        problems.is_empty(),
        "CRD YAML is stale; run `make crds`:\n{}",
        problems.join("\n")
    );
}

#[test]
fn kustomization_lists_every_crd() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kustomization = std::fs::read_to_string(root.join("deploy/base/kustomization.yaml"))
        .expect("kustomization");
    for (name, _) in clusterapi_api::crds::rendered().expect("CRDs render") {
        assert!(
            kustomization.contains(&format!("crds/{name}")),
            "deploy/base/kustomization.yaml does not list crds/{name}"
        );
    }
}

#[test]
fn crds_command_writes_the_same_files() {
    let out = tempfile::tempdir().expect("tempdir");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-capi"))
        .arg("crds")
        .arg("--out")
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("karpenter-capi runs");
    assert!(status.success());
    assert!(check_dir(out.path(), &rendered(false)).is_empty());
}
