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
//! `examples/templates/` or `examples/resizable/` (same kind and name, every field shown
//! equal).
//!
//! The benchmark figures of README.md's Performance tables and docs/performance.md's tables
//! each appear in a committed summary under `hack/bench/baseline/` that the table (or row)
//! names (`common/baselines.rs` says exactly what is checked).
//!
//! The testbed (etcd and kube-apiserver only) is started once, on first need.

#[path = "common/baselines.rs"]
mod baselines;
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
    let mut files: Vec<PathBuf> = ["examples/templates", "examples/resizable"]
        .into_iter()
        .flat_map(|d| std::fs::read_dir(root().join(d)).expect(d))
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
                serde_json::from_value::<clusterapi_api::ClusterAPINodeClass>(d.clone()).map(drop)
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
                .ok_or_else(|| {
                    format!(
                        "{at}: {kind} {name} is not in examples/templates/ or examples/resizable/"
                    )
                })?;
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

// ---------------------------------------------------------------------------------------
// Drift between the documentation and the repository: every repository path the docs name
// exists, and every `--flag` they give `karpenter-capi` or one of our scripts is one it
// accepts. Offline and fast: no testbed, only the built binary's `--help`.

/// What the documentation may name: the repository's top-level entries, the binary's long
/// flags per subcommand (from its `--help`, i.e. its clap definitions) and the options our
/// scripts parse.
struct Known {
    root: PathBuf,
    top: std::collections::BTreeSet<String>,
    /// `None`: the flags `karpenter-capi --help` lists; `Some(sub)`: `karpenter-capi sub --help`.
    cli: std::collections::BTreeMap<Option<String>, std::collections::BTreeSet<String>>,
    /// How many repository paths and flags were checked (the check is not vacuous).
    checked_paths: std::cell::Cell<usize>,
    checked_flags: std::cell::Cell<usize>,
}

/// The long flags (`--name`) a help text or script line mentions.
fn long_flags(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("--") {
        let start = i + at;
        let boundary =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'-');
        let name_len = text[start + 2..]
            .bytes()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            .count();
        if boundary && name_len > 0 && b[start + 2].is_ascii_lowercase() {
            out.push(
                text[start..start + 2 + name_len]
                    .trim_end_matches('-')
                    .to_string(),
            );
        }
        i = start + 2 + name_len;
    }
    out
}

impl Known {
    fn load() -> Known {
        let root = root().to_path_buf();
        let ignored = ["target", ".git", ".cache"];
        let top = std::fs::read_dir(&root)
            .expect("repository root")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| !ignored.contains(&n.as_str()))
            .collect();
        let help = |args: &[&str]| -> String {
            let out = Command::new(env!("CARGO_BIN_EXE_karpenter-capi"))
                .args(args)
                .output()
                .expect("karpenter-capi runs");
            assert!(out.status.success(), "karpenter-capi {args:?} fails");
            String::from_utf8(out.stdout).expect("utf-8 help")
        };
        let top_help = help(&["--help"]);
        let subs: Vec<String> = top_help
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|s| *s != "help")
            .map(str::to_string)
            .collect();
        assert!(subs.iter().any(|s| s == "run"), "no `run` in:\n{top_help}");
        let mut cli = std::collections::BTreeMap::new();
        cli.insert(None, long_flags(&top_help).into_iter().collect());
        for s in subs {
            let flags = long_flags(&help(&[&s, "--help"])).into_iter().collect();
            cli.insert(Some(s), flags);
        }
        Known {
            root,
            top,
            cli,
            checked_paths: Default::default(),
            checked_flags: Default::default(),
        }
    }

    /// Whether the script at `path` (relative to the root) parses `flag`: a `case` arm
    /// `--flag)` or an alternative `--flag|` / `|--flag`.
    fn script_accepts(&self, path: &str, flag: &str) -> bool {
        let Ok(text) = std::fs::read_to_string(self.root.join(path)) else {
            return false;
        };
        text.match_indices(flag).any(|(i, _)| {
            let next = text[i + flag.len()..].chars().next();
            let prev = text[..i].chars().next_back();
            matches!(next, Some(')' | '|')) || prev == Some('|')
        })
    }

    /// Our scripts: the executable text files under `hack/` and `.ci/`.
    fn scripts(&self) -> Vec<String> {
        fn walk(dir: &std::path::Path, rel: &str, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = format!("{rel}/{}", e.file_name().to_string_lossy());
                let p = e.path();
                if p.is_dir() {
                    walk(&p, &name, out);
                } else if name.ends_with(".sh") || name == ".ci/run" {
                    out.push(name);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root.join("hack"), "hack", &mut out);
        walk(&self.root.join(".ci"), ".ci", &mut out);
        out
    }

    /// A flag named alone (`--batch-idle-duration`): some subcommand of the binary or some
    /// script must accept it.
    fn anyone_accepts(&self, flag: &str) -> bool {
        self.checked_flags.set(self.checked_flags.get() + 1);
        self.cli.values().any(|f| f.contains(flag))
            || self.scripts().iter().any(|s| self.script_accepts(s, flag))
    }

    /// What a documented command's flags must be accepted by: `karpenter-capi [sub]` or a
    /// script of the repository; `None` for other tools (kubectl, helm, cargo…).
    fn flag_problems(&self, words: &[String]) -> Vec<String> {
        let w = normalize(words);
        let Some(first) = w.first() else {
            return Vec::new();
        };
        let flags: Vec<&str> = w[1..]
            .iter()
            .map(|a| a.trim_matches(|c| c == '[' || c == ']'))
            .filter(|a| a.starts_with("--") && a.len() > 2)
            .map(|a| a.split('=').next().unwrap_or(a))
            .collect();
        let accepted: Box<dyn Fn(&str) -> bool> = if first == "karpenter-capi" {
            let sub = w
                .get(1)
                .filter(|s| self.cli.contains_key(&Some(s.to_string())));
            let top = &self.cli[&None];
            let own = sub.map(|s| &self.cli[&Some(s.clone())]);
            Box::new(move |f| top.contains(f) || own.is_some_and(|o| o.contains(f)))
        } else if self.root.join(first).is_file() && !first.contains("..") {
            let script = first.clone();
            Box::new(move |f| self.script_accepts(&script, f))
        } else {
            return Vec::new();
        };
        self.checked_flags
            .set(self.checked_flags.get() + flags.len());
        flags
            .into_iter()
            .filter(|f| !accepted(f))
            .map(|f| format!("`{f}` is not a flag of `{}`", command_name(&w)))
            .collect()
    }

    /// Why a word naming a repository path does not name an existing one (`None`: it exists,
    /// or the word is not a repository path).
    fn path_problem(&self, word: &str) -> Option<String> {
        let w = clean_word(word)?;
        let first = w.split('/').next()?;
        if !w.contains('/') || !self.top.contains(first) {
            return None;
        }
        self.checked_paths.set(self.checked_paths.get() + 1);
        let missing: Vec<String> = expand_braces(&w)
            .into_iter()
            .filter(|p| glob(&self.root, p).is_empty())
            .collect();
        (!missing.is_empty()).then(|| format!("`{}` does not exist", missing.join("`, `")))
    }
}

fn command_name(w: &[String]) -> String {
    match w {
        [k, sub, ..] if k == "karpenter-capi" && !sub.starts_with('-') => format!("{k} {sub}"),
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// A word as a path: quotes, brackets and trailing punctuation off, a `:LINE` suffix and a
/// `#anchor` off; `None` for placeholders, URLs and words that are no path at all.
fn clean_word(word: &str) -> Option<String> {
    let w = word
        .trim_matches(|c: char| "\"'()[],;`".contains(c))
        .trim_end_matches(['.', ':']);
    let w = w.strip_prefix("./").unwrap_or(w);
    let w = w.split('#').next().unwrap_or(w);
    let w = match w.rsplit_once(':') {
        Some((p, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => w,
    };
    let placeholder = ["<", ">", "$", "…", "...", "://", "="]
        .iter()
        .any(|p| w.contains(p));
    (!w.is_empty() && !placeholder).then(|| w.to_string())
}

/// `a-{1,2}.json` → `a-1.json`, `a-2.json` (one level, as the docs use it).
fn expand_braces(w: &str) -> Vec<String> {
    match (w.find('{'), w.find('}')) {
        (Some(a), Some(b)) if a < b => w[a + 1..b]
            .split(',')
            .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &w[..a], &w[b + 1..])))
            .collect(),
        _ => vec![w.to_string()],
    }
}

/// The paths under `root` matching `pattern` (`*` within one segment); a pattern without
/// `*` matches itself when it exists.
fn glob(root: &std::path::Path, pattern: &str) -> Vec<PathBuf> {
    fn matches(pat: &str, name: &str) -> bool {
        match pat.split_once('*') {
            None => pat == name,
            Some((head, tail)) => {
                name.starts_with(head)
                    && (head.len()..=name.len())
                        .any(|i| name.is_char_boundary(i) && matches(tail, &name[i..]))
            }
        }
    }
    let mut found = vec![root.to_path_buf()];
    for seg in pattern.split('/').filter(|s| !s.is_empty()) {
        found = found
            .iter()
            .flat_map(|dir| {
                if seg.contains('*') {
                    std::fs::read_dir(dir)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .filter(|e| matches(seg, &e.file_name().to_string_lossy()))
                        .map(|e| e.path())
                        .collect::<Vec<_>>()
                } else {
                    let p = dir.join(seg);
                    if p.exists() { vec![p] } else { Vec::new() }
                }
            })
            .collect();
    }
    found
}

/// The inline code spans and link targets of a Markdown text outside its fenced blocks,
/// with their line numbers.
/// Texts found on a line (1-based).
type Located = Vec<(usize, String)>;

fn spans_and_links(text: &str) -> (Located, Located) {
    let (mut spans, mut links) = (Vec::new(), Vec::new());
    // Runs of prose lines between fences, each scanned on its own.
    let mut chunks: Vec<Vec<(usize, &str)>> = vec![Vec::new()];
    let mut fenced = false;
    for (i, l) in text.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            chunks.push(Vec::new());
        } else if !fenced {
            chunks.last_mut().expect("a chunk").push((i + 1, l));
        }
    }
    for chunk in chunks {
        let chars: Vec<(usize, char)> = chunk
            .iter()
            .flat_map(|(n, l)| l.chars().chain(['\n']).map(move |c| (*n, c)))
            .collect();
        let run_at = |i: usize| chars[i..].iter().take_while(|(_, c)| *c == '`').count();
        let mut i = 0;
        while i < chars.len() {
            let (line, c) = chars[i];
            if c == '`' {
                let n = run_at(i);
                let close = (i + n..chars.len())
                    .find(|&j| run_at(j) == n && (j == 0 || chars[j - 1].1 != '`'));
                match close {
                    Some(j) => {
                        let s: String = chars[i + n..j]
                            .iter()
                            .map(|(_, c)| if *c == '\n' { ' ' } else { *c })
                            .collect();
                        spans.push((line, s.trim().to_string()));
                        i = j + n;
                    }
                    None => i += n,
                }
                continue;
            }
            if c == ']' && chars.get(i + 1).is_some_and(|(_, c)| *c == '(') {
                let target: String = chars[i + 2..]
                    .iter()
                    .map(|(_, c)| *c)
                    .take_while(|c| *c != ')' && !c.is_whitespace())
                    .collect();
                links.push((line, target));
            }
            i += 1;
        }
    }
    (spans, links)
}

/// Every drift of one documentation file (`file` relative to the root, `text` its content)
/// from the repository: paths that do not exist, flags nobody accepts.
fn drift(known: &Known, file: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut report = |line: usize, p: String| problems.push(format!("{file}:{line}: {p}"));
    // Words of a command: for kubectl only what follows -f / -k / kustomize is a path
    // (`deploy/karpenter-capi` is a resource).
    let command_paths = |words: &[String]| -> Vec<String> {
        let w = normalize(words);
        let kubectl = w.first().is_some_and(|f| f == "kubectl");
        w.iter()
            .enumerate()
            .filter(|(i, _)| {
                !kubectl
                    || (*i > 0
                        && matches!(w[i - 1].as_str(), "-f" | "-k" | "--filename" | "kustomize"))
            })
            .filter_map(|(_, a)| known.path_problem(a))
            .collect()
    };
    let (spans, links) = spans_and_links(text);
    for (line, span) in &spans {
        let bare = span.trim_start_matches('[').starts_with("--");
        if bare {
            for f in long_flags(span) {
                if !known.anyone_accepts(&f) {
                    report(
                        *line,
                        format!("`{f}` is a flag of neither karpenter-capi nor a script"),
                    );
                }
            }
            continue;
        }
        match simple_commands(span) {
            Ok(cmds) => {
                for words in &cmds {
                    for p in known
                        .flag_problems(words)
                        .into_iter()
                        .chain(command_paths(words))
                    {
                        report(*line, p);
                    }
                }
            }
            Err(_) => {
                for w in span.split_whitespace() {
                    if let Some(p) = known.path_problem(w) {
                        report(*line, p);
                    }
                }
            }
        }
    }
    let dir = std::path::Path::new(file)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    for (line, target) in &links {
        let t = target.split('#').next().unwrap_or_default();
        if t.is_empty() || t.contains("://") || t.starts_with("mailto:") {
            continue;
        }
        if !known.root.join(dir).join(t).exists() {
            report(*line, format!("link target `{target}` does not exist"));
        }
    }
    for b in blocks(file, text) {
        let cmds = if b.lang == "sh" || b.lang == "console" {
            commands(&b)
        } else {
            Vec::new()
        };
        for c in &cmds {
            for words in simple_commands(&c.text).unwrap_or_default() {
                for p in known
                    .flag_problems(&words)
                    .into_iter()
                    .chain(command_paths(&words))
                {
                    report(c.line, p);
                }
            }
        }
        // Lines that are no command (output, text, code): every word naming a path.
        let command_lines: std::collections::BTreeSet<usize> =
            cmds.iter().map(|c| c.line).collect();
        for (n, l) in &b.lines {
            if command_lines.contains(n) || (b.lang == "sh" && !l.trim_start().starts_with('#')) {
                continue;
            }
            for w in l.split_whitespace() {
                if let Some(p) = known.path_problem(w) {
                    report(*n, p);
                }
            }
        }
    }
    problems
}

#[test]
fn paths_and_flags_named_in_the_docs_exist() {
    let known = Known::load();
    let mut problems = Vec::new();
    for f in doc_blocks::doc_files(root()) {
        let text = std::fs::read_to_string(root().join(&f)).expect("readable");
        problems.extend(drift(&known, &f.display().to_string(), &text));
    }
    assert!(
        problems.is_empty(),
        "the docs drifted:\n{}",
        problems.join("\n")
    );
    let (paths, flags) = (known.checked_paths.get(), known.checked_flags.get());
    assert!(
        paths >= 50 && flags >= 20,
        "only {paths} paths and {flags} flags checked"
    );
    println!("{paths} paths and {flags} flags named in the docs checked");
}

#[test]
fn drift_check_catches_a_bad_path_and_a_bad_flag() {
    let known = Known::load();
    for flag in [
        "--batch-idle-duration",
        "--kube-client-qps",
        "--strict",
        "--why",
    ] {
        assert!(known.anyone_accepts(flag), "{flag}");
    }
    assert!(known.script_accepts("hack/bench/e2e.sh", "--pods"));
    let doc = "\
See `crates/core/src/disruption/` and `crates/core/src/disruption.rs`, \
[a link](../nowhere.md), `hack/bench/baseline/karpenter-capi-{1000,9999}.json`,
`crates/*/tests/prop_*.rs` and `crates/*/tests/nothing_*.rs`; `kubectl logs deploy/karpenter-capi`.
Flags: `--batch-idle-duration`, `--no-such-flag`, `karpenter-capi run --cluster-id x`,
`karpenter-capi simulate --cluster-id x`.

```sh
hack/bench/e2e.sh --pods 5000 --only ours --bogus
karpenter-capi instance-types -f examples/templates/ --strict
kubectl apply -f deploy/missing.yaml
```
";
    let problems = drift(&known, "docs/x.md", doc);
    // Line 1 holds the first two source lines (joined by the `\` above).
    let expected = [
        "docs/x.md:1: `crates/core/src/disruption.rs` does not exist",
        "docs/x.md:1: link target `../nowhere.md` does not exist",
        "docs/x.md:1: `hack/bench/baseline/karpenter-capi-9999.json` does not exist",
        "docs/x.md:2: `crates/*/tests/nothing_*.rs` does not exist",
        "docs/x.md:3: `--no-such-flag` is a flag of neither karpenter-capi nor a script",
        "docs/x.md:4: `--cluster-id` is not a flag of `karpenter-capi simulate`",
        "docs/x.md:7: `--bogus` is not a flag of `hack/bench/e2e.sh`",
        "docs/x.md:9: `deploy/missing.yaml` does not exist",
    ];
    let mut got = problems.clone();
    got.sort();
    let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
}

/// The documents whose benchmark tables must name their committed summaries.
const FIGURE_DOCS: [&str; 2] = ["README.md", "docs/performance.md"];

#[test]
fn benchmark_figures_appear_in_committed_baselines() {
    let mut problems = Vec::new();
    let mut counts = Vec::new();
    for f in FIGURE_DOCS {
        let text = std::fs::read_to_string(root().join(f)).expect("readable");
        let (p, n) = baselines::check(root(), f, &text);
        problems.extend(p);
        counts.push((f, n));
    }
    assert!(
        problems.is_empty(),
        "figures without a committed summary ({counts:?} figures):\n{}",
        problems.join("\n")
    );
    for (f, n) in &counts {
        assert!(*n > 0, "{f}: no figure found: are its tables gone?");
    }
    println!("benchmark figures found in their baselines: {counts:?}");
}

#[test]
fn baseline_check_catches_an_edited_figure_and_an_unnamed_table() {
    // Positive control on the real README: its first checked figure edited to a value no
    // summary holds is reported; the same text unedited is not.
    let readme = std::fs::read_to_string(root().join("README.md")).expect("readable");
    let (clean, n) = baselines::check(root(), "README.md", &readme);
    assert!(clean.is_empty() && n > 0, "{clean:?}");
    let scope = baselines::in_scope("README.md", &readme);
    let (line, row) = scope
        .lines()
        .enumerate()
        .find(|(_, l)| l.starts_with('|') && l.contains("all pods Running"))
        .expect("a row with all pods Running");
    let figure = row
        .split('|')
        .nth(2)
        .map(baselines::numbers)
        .and_then(|n| n.into_iter().next())
        .expect("a figure in its second cell");
    let edited: Vec<String> = readme
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                l.replacen(&format!(" {figure} "), " 987.6 ", 1)
            } else {
                l.to_string()
            }
        })
        .collect();
    let (problems, _) = baselines::check(root(), "README.md", &edited.join("\n"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!("README.md:{}: 987.6", line + 1)),
        "{problems:?}"
    );
    // A table naming no summary, and one naming a file that does not exist.
    let doc = "| run | s |\n|---|---:|\n| a | 55.7 |\n\n<!-- baseline: nope.json -->\n| run | s |\n|---|---:|\n| b | 1.0 |\n";
    let (problems, _) = baselines::check(root(), "docs/performance.md", doc);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("name no summary"), "{problems:?}");
    assert!(
        problems[1].contains("nope.json does not exist"),
        "{problems:?}"
    );
    assert_eq!(
        baselines::numbers("v1.15.0 p99 2.4× 88–102 s, 21.2 (1482 / 70) 5.6."),
        ["2.4", "88", "102", "21.2", "1482", "70", "5.6"]
    );
}
