//! The install manifests rendered as the user renders them: `deploy/` with kustomize (the
//! testbed's kubectl), `charts/karpenter-capi` with the pinned helm (hack/helm/build.sh).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub const CHART: &str = "charts/karpenter-capi";

/// The release name and namespace the chart is rendered with: the names deploy/base uses, so
/// both render the same object names.
pub const RELEASE: &str = "karpenter-capi";
pub const NAMESPACE: &str = "karpenter";

/// Runs a command; its stdout, or a panic with its stderr.
pub fn output(mut cmd: Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The pinned helm binary, built on first use (cached under .cache/helm).
pub fn helm() -> PathBuf {
    let mut build = Command::new("bash");
    build.arg(root().join("hack/helm/build.sh"));
    PathBuf::from(output(build).trim())
}

/// `helm template` of the chart (release `karpenter-capi` in `karpenter`) with extra
/// arguments (`--set ...`, `--include-crds`).
pub fn helm_template(args: &[&str]) -> String {
    let mut cmd = Command::new(helm());
    cmd.args(["template", RELEASE])
        .arg(root().join(CHART))
        .args(["--namespace", NAMESPACE])
        .args(args);
    output(cmd)
}

/// `kubectl kustomize` of a directory of the repository (e.g. `deploy/base`).
pub fn kustomize(dir: &str) -> String {
    let mut cmd = Command::new(testbed::bin_dir().join("kubectl"));
    cmd.arg("kustomize").arg(root().join(dir));
    output(cmd)
}

/// The documents of a multi-document YAML stream (empty ones dropped).
pub fn docs(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("rendered YAML parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Runs a command with `input` on stdin; returns (success, stdout + stderr).
pub fn pipe(mut cmd: Command, input: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("command finishes");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The RBAC rules with a `*` in apiGroups, resources or verbs (there must be none).
pub fn wildcards(docs: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    for d in docs {
        for rule in d["rules"].as_array().into_iter().flatten() {
            for key in ["apiGroups", "resources", "verbs"] {
                if rule[key]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|v| v == "*"))
                {
                    found.push(format!("{}: {rule}", d["metadata"]["name"]));
                }
            }
        }
    }
    found
}
