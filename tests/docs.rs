//! The documentation's rule: every command shown in a ```sh or ```console block of
//! `README.md` and `docs/*.md` is run, by this test or by the demo / CI, and every ```yaml
//! block is a valid object.
//!
//! A command is run here when it is one of:
//! - `karpenter-capi` offline: `simulate`, `instance-types`, `version`, `--help`; `crds`
//!   (in a temporary directory, and the files must equal the committed ones);
//! - `helm template|lint|show` with the pinned helm (hack/helm/build.sh); `helm install` is
//!   rendered with `helm template` (same arguments) and applied with a server-side dry run;
//! - `kubectl kustomize`; `kubectl apply -k DIR` (rendered, then a server-side dry run);
//!   `kubectl apply -f FILE` (server-side dry run); read-only `kubectl get|describe|explain`
//!   and `karpenter-capi inspect` on a testbed holding the CRDs and the documentation's own
//!   NodeClasses and NodePools.
//!
//! Otherwise it must be run by `hack/demo.sh` or by the Makefile's `test` target (what CI
//! runs), modulo placeholders (`<name>`, `$VAR`), environment assignments and
//! `--kubeconfig`. A console block's output lines must appear in the real output of a
//! command run here (`...` lines elide).
//!
//! YAML blocks parse; ClusterAPINodeClass, NodePool and NodeClaim documents deserialize into
//! the `api` types, and NodeClasses and NodePools pass a server-side dry run (the CRD schema
//! and its CEL rules); `*MachineTemplate` documents are part of a fixture of
//! `examples/templates/` (same kind and name, every field shown equal).
//!
//! The testbed (etcd and kube-apiserver only) is started once, on first need.

mod common;
#[path = "common/docs.rs"]
mod doc_blocks;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use common::is_subset;
use common::manifests::{docs, helm, pipe, root};
use doc_blocks::{Block, Corpus, DocCommand, blocks, commands, normalize, simple_commands};
use serde_json::Value;

fn all_blocks() -> Vec<Block> {
    doc_blocks::doc_files(root())
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root().join(f))
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            blocks(&f.display().to_string(), &text)
        })
        .collect()
}

/// The testbed shared by every case that needs an API server, with the `karpenter`
/// namespace (where the install manifests go) and the documentation's NodeClasses and
/// NodePools created, so read-only commands about them have something to read.
struct Cluster {
    tb: testbed::Testbed,
}

impl Cluster {
    fn get() -> &'static Cluster {
        static CLUSTER: OnceLock<Cluster> = OnceLock::new();
        CLUSTER.get_or_init(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let tb = rt
                .block_on(testbed::Testbed::start(testbed::Options::default()))
                .expect("testbed starts");
            let c = Cluster { tb };
            let mut ns = c.tb.kubectl();
            ns.args(["create", "namespace", "karpenter"]);
            common::manifests::output(ns);
            for b in all_blocks().iter().filter(|b| b.lang == "yaml") {
                let objects: Vec<Value> = docs(&b.text())
                    .into_iter()
                    .filter(|d| {
                        matches!(d["kind"].as_str(), Some("ClusterAPINodeClass" | "NodePool"))
                    })
                    .collect();
                if !objects.is_empty() {
                    let yaml = objects
                        .iter()
                        .map(|o| serde_json::to_string(o).expect("json"))
                        .collect::<Vec<_>>()
                        .join("\n---\n");
                    // An invalid block is reported by yaml_blocks_are_valid_objects.
                    let _ = c.apply(&yaml, false);
                }
            }
            c
        })
    }

    fn kubectl(&self) -> Command {
        let mut cmd = self.tb.kubectl();
        cmd.current_dir(root());
        cmd
    }

    /// Server-side apply of YAML/JSON documents, as a dry run or for real.
    fn apply(&self, yaml: &str, dry_run: bool) -> (bool, String) {
        let mut cmd = self.kubectl();
        cmd.args(["apply", "--server-side", "--force-conflicts", "-f", "-"]);
        if dry_run {
            cmd.arg("--dry-run=server");
        }
        pipe(cmd, yaml)
    }
}

fn run(mut cmd: Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{cmd:?} does not start: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{}: {text}", out.status))
    }
}

fn karpenter_capi(args: &[String], env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_karpenter-capi"));
    cmd.args(args).current_dir(root()).envs(env.iter().cloned());
    cmd
}

/// `karpenter-capi crds [--out DIR]` in a temporary directory: the files it writes must be
/// the committed ones.
fn crds(args: &[String]) -> Result<String, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_karpenter-capi"));
    cmd.args(args).current_dir(tmp.path());
    let out = run(cmd)?;
    let dir = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map_or("crds", String::as_str);
    let written = tmp.path().join(dir);
    let files = std::fs::read_dir(&written).map_err(|e| format!("{}: {e}", written.display()))?;
    for f in files {
        let f = f.map_err(|e| e.to_string())?.path();
        let name = f.file_name().expect("file name");
        let committed = root().join(dir).join(name);
        let (a, b) = (std::fs::read(&f), std::fs::read(&committed));
        if a.map_err(|e| e.to_string())?
            != b.map_err(|e| format!("{}: {e}", committed.display()))?
        {
            return Err(format!(
                "{} differs from what `crds` writes",
                committed.display()
            ));
        }
    }
    Ok(out)
}

/// `helm install NAME CHART ARGS` as `helm template NAME CHART ARGS` (minus the flags only
/// an install has), applied with a server-side dry run.
fn helm_install(words: &[String]) -> Result<String, String> {
    let mut args: Vec<String> = vec!["template".into()];
    args.extend(
        words[2..]
            .iter()
            .filter(|w| !matches!(w.as_str(), "--create-namespace" | "--wait" | "--atomic"))
            .cloned(),
    );
    let mut cmd = Command::new(helm());
    cmd.args(&args).current_dir(root());
    let rendered = run(cmd)?;
    dry_run(&rendered)
}

fn dry_run(yaml: &str) -> Result<String, String> {
    match Cluster::get().apply(yaml, true) {
        (true, out) => Ok(out),
        (false, out) => Err(format!("server-side dry run failed: {out}")),
    }
}

/// What this test does with a documented simple command: `Some(result)` when it runs it,
/// `None` when it is not one it can run.
fn execute(words: &[String]) -> Option<Result<String, String>> {
    let (env, words) = doc_blocks::split_env(words);
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let help = w.iter().any(|a| *a == "--help" || *a == "-h");
    Some(match w.as_slice() {
        ["karpenter-capi", "crds", ..] if !help => crds(&words[1..]),
        [
            "karpenter-capi",
            "simulate" | "instance-types" | "version" | "help",
            ..,
        ] => run(karpenter_capi(&words[1..], &env)),
        ["karpenter-capi", ..] if help => run(karpenter_capi(&words[1..], &env)),
        ["karpenter-capi", "inspect", ..] => {
            let mut cmd = karpenter_capi(&words[1..], &env);
            cmd.env("KUBECONFIG", Cluster::get().tb.kubeconfig());
            run(cmd)
        }
        ["helm", "template" | "lint" | "show", ..] => {
            let mut cmd = Command::new(helm());
            cmd.args(&words[1..]).current_dir(root()).envs(env);
            run(cmd)
        }
        ["helm", "install", _, _, ..] => helm_install(&words),
        ["kubectl", "kustomize", ..] => {
            let mut cmd = Command::new(testbed::bin_dir().join("kubectl"));
            cmd.args(&words[1..]).current_dir(root());
            run(cmd)
        }
        ["kubectl", "apply", "-k", dir] => {
            let mut cmd = Command::new(testbed::bin_dir().join("kubectl"));
            cmd.args(["kustomize", dir]).current_dir(root());
            run(cmd).and_then(|yaml| dry_run(&yaml))
        }
        ["kubectl", "apply", "-f", file] => std::fs::read_to_string(root().join(file))
            .map_err(|e| format!("{file}: {e}"))
            .and_then(|yaml| dry_run(&yaml)),
        [
            "kubectl",
            "get" | "describe" | "explain" | "api-resources",
            ..,
        ] => {
            let mut cmd = Cluster::get().kubectl();
            cmd.args(&words[1..]);
            run(cmd)
        }
        _ => return None,
    })
}

/// Every shown output line (trailing spaces aside; `...` elides) is a line of `actual`.
fn missing_output(shown: &[String], actual: &str) -> Vec<String> {
    let lines: Vec<&str> = actual.lines().map(str::trim_end).collect();
    shown
        .iter()
        .map(|l| l.trim_end())
        .filter(|l| !l.is_empty() && *l != "..." && *l != "…")
        .filter(|l| !lines.contains(l))
        .map(str::to_string)
        .collect()
}

fn check(cmd: &DocCommand, corpus: &Corpus) -> Result<(), String> {
    let parts = simple_commands(&cmd.text).map_err(|e| format!("{}: {e}", cmd.at()))?;
    if parts.is_empty() {
        return Err(format!("{}: no command in {:?}", cmd.at(), cmd.text));
    }
    let compound = parts.len() > 1;
    let mut outputs = String::new();
    for words in &parts {
        // Corpus first for what needs no execution to be trusted (the demo runs it).
        let ran = if compound { None } else { execute(words) };
        match ran {
            Some(Ok(out)) => outputs.push_str(&out),
            Some(Err(e)) => return Err(format!("{}: `{}` failed: {e}", cmd.at(), cmd.text)),
            None if corpus.covers(words) => {}
            None => {
                return Err(format!(
                    "{}: `{}` is neither run by tests/docs.rs nor by hack/demo.sh or `make test` (as `{}`)",
                    cmd.at(),
                    cmd.text,
                    normalize(words).join(" ")
                ));
            }
        }
    }
    if !cmd.output.is_empty() {
        if outputs.is_empty() {
            return Err(format!(
                "{}: a console block shows output of `{}`, which this test does not run",
                cmd.at(),
                cmd.text
            ));
        }
        let missing = missing_output(&cmd.output, &outputs);
        if !missing.is_empty() {
            return Err(format!(
                "{}: output shown for `{}` is not what it prints; lines not found:\n  {}\nactual output:\n{outputs}",
                cmd.at(),
                cmd.text,
                missing.join("\n  ")
            ));
        }
    }
    Ok(())
}

#[test]
fn every_documented_command_is_run() {
    let corpus = Corpus::load(root());
    let cmds: Vec<DocCommand> = all_blocks()
        .iter()
        .filter(|b| b.lang == "sh" || b.lang == "console")
        .flat_map(commands)
        .collect();
    assert!(cmds.len() >= 20, "found only {} commands", cmds.len());
    let failures: Vec<String> = cmds
        .iter()
        .filter_map(|c| check(c, &corpus).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn template_fixtures() -> Vec<Value> {
    let dir = root().join("examples/templates");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/templates")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| docs(&std::fs::read_to_string(f).expect("readable")))
        .collect()
}

fn check_yaml(b: &Block, fixtures: &[Value]) -> Result<(), String> {
    let at = format!("{}:{}", b.file, b.line());
    let parsed: Vec<Value> = serde_saphyr::from_multiple(&b.text())
        .map_err(|e| format!("{at}: YAML does not parse: {e}"))?;
    let mut to_validate = Vec::new();
    for d in parsed.into_iter().filter(|d| !d.is_null()) {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let typed = match kind.as_str() {
            "ClusterAPINodeClass" => {
                serde_json::from_value::<api::ClusterAPINodeClass>(d.clone()).map(drop)
            }
            "NodePool" => serde_json::from_value::<api::NodePool>(d.clone()).map(drop),
            "NodeClaim" => serde_json::from_value::<api::NodeClaim>(d.clone()).map(drop),
            _ => Ok(()),
        };
        typed.map_err(|e| format!("{at}: {kind} does not deserialize: {e}"))?;
        if matches!(kind.as_str(), "ClusterAPINodeClass" | "NodePool") {
            to_validate.push(serde_json::to_string(&d).expect("json"));
        }
        if kind.ends_with("MachineTemplate") {
            let name = &d["metadata"]["name"];
            let fixture = fixtures
                .iter()
                .find(|f| f["kind"] == kind && f["metadata"]["name"] == *name)
                .ok_or_else(|| format!("{at}: {kind} {name} is not in examples/templates/"))?;
            if !is_subset(&d, fixture) {
                return Err(format!(
                    "{at}: {kind} {name} differs from its fixture in examples/templates/"
                ));
            }
        }
    }
    if !to_validate.is_empty() {
        let (ok, out) = Cluster::get().apply(&to_validate.join("\n---\n"), true);
        if !ok {
            return Err(format!("{at}: rejected by the API server: {out}"));
        }
    }
    Ok(())
}

#[test]
fn yaml_blocks_are_valid_objects() {
    let fixtures = template_fixtures();
    let yaml: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| b.lang == "yaml")
        .collect();
    assert!(yaml.len() >= 8, "found only {} YAML blocks", yaml.len());
    let failures: Vec<String> = yaml
        .iter()
        .filter_map(|b| check_yaml(b, &fixtures).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn commands_are_read_like_a_shell() {
    let w = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_string).collect() };
    assert_eq!(
        simple_commands(
            r#"k get x -o 'jsonpath={.a b}' >/dev/null 2>&1 && echo "a b" | wc -l # c"#
        )
        .expect("parses"),
        vec![
            vec![
                "k".to_string(),
                "get".into(),
                "x".into(),
                "-o".into(),
                "jsonpath={.a b}".into()
            ],
            vec!["echo".to_string(), "a b".into()],
            w("wc -l"),
        ]
    );
    assert_eq!(
        normalize(&w("DEMO_PODS=6 bash $here/testbed/up.sh --components all")),
        w("hack/testbed/up.sh --components all")
    );
    let corpus = Corpus::load(root());
    for covered in [
        "make test",
        "make demo",
        "kubectl get nodeclaims -o wide",
        "karpenter-capi inspect",
        "hack/testbed/up.sh --components all",
        "BENCH_QUICK=1 hack/bench/scheduling.sh",
    ] {
        assert!(corpus.covers(&w(covered)), "{covered}");
    }
    for not in [
        "make bench",
        "kubectl delete nodeclaims --all",
        "hack/bench/e2e.sh",
    ] {
        assert!(!corpus.covers(&w(not)), "{not}");
    }
    let block = &blocks(
        "x.md",
        "text\n```console\n$ karpenter-capi \\\n  version\nkarpenter-capi 0.1.0\n```\n",
    )[0];
    let cmds = commands(block);
    assert_eq!(cmds.len(), 1);
    assert_eq!(cmds[0].text, "karpenter-capi version");
    assert_eq!(cmds[0].line, 3);
    assert_eq!(cmds[0].output, ["karpenter-capi 0.1.0"]);
}
