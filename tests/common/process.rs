//! The operator as a separate process (`karpenter-capi run`), so tests can SIGKILL it and
//! read its log for panics.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A running `karpenter-capi run`; killed when dropped.
pub struct Operator {
    child: tokio::process::Child,
    args: Vec<String>,
    /// stdout and stderr of every incarnation, appended.
    pub log: PathBuf,
    /// SIGKILLs survived so far.
    pub kills: usize,
}

impl Operator {
    /// Starts `karpenter-capi run` against `kubeconfig` (without leader election, on free
    /// ports, JSON logs to `log`), with `extra` flags.
    pub fn start(kubeconfig: &Path, log: PathBuf, extra: &[&str]) -> Self {
        let mut args: Vec<String> = vec![
            "run".into(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--disable-leader-election".into(),
            "--log-format".into(),
            "json".into(),
            "--batch-max-duration".into(),
            "2s".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let child = spawn(&args, &log);
        Operator {
            child,
            args,
            log,
            kills: 0,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, then a new process with the same arguments (on new ports).
    pub async fn kill9_and_restart(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        self.kills += 1;
        self.child = spawn(&self.args, &self.log);
    }

    /// Lines of the log that report a panic (Rust's panic message goes to stderr).
    pub fn panics(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked at") || l.contains("RUST_BACKTRACE"))
            .map(str::to_string)
            .collect()
    }

    /// Asserts the process is alive and logged no panic.
    pub fn assert_healthy(&mut self) {
        let panics = self.panics();
        assert!(panics.is_empty(), "operator panicked: {panics:#?}");
        if !self.alive() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            panic!("operator exited; last log lines (newest first): {tail:#?}");
        }
    }
}

fn spawn(args: &[String], log: &Path) -> tokio::process::Child {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("operator log");
    let err = file.try_clone().expect("operator log");
    let metrics = super::free_addr().to_string();
    let health = super::free_addr().to_string();
    tokio::process::Command::new(env!("CARGO_BIN_EXE_karpenter-capi"))
        .args(args)
        .args(["--metrics-addr", &metrics, "--health-addr", &health])
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .expect("karpenter-capi starts")
}
