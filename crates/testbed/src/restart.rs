//! Restarting one process of a testbed (a crash and its recovery), and waiting until a
//! component answers its health endpoint.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Error, Result, Testbed, wait_for};

impl Testbed {
    /// Kills one of the testbed's processes (`kube-apiserver`, `cluster-api`, `kwok`,
    /// `kube-controller-manager`, `kube-scheduler`, `etcd`) with SIGKILL, as a crash would,
    /// waits `down` (the outage), starts it again with the same command line (same ports,
    /// same data) and returns once it reports healthy.
    pub async fn restart(&self, component: &str, down: Duration) -> Result<()> {
        let pids_file = self.dir().join("pids");
        let io = |what: String| move |source| Error::Io { what, source };
        let pids = std::fs::read_to_string(&pids_file).map_err(io("reading pids".into()))?;
        let pid = pids
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(name, _)| *name == component)
            .map(|(_, pid)| pid.trim().to_string())
            .next_back()
            .ok_or_else(|| Error::Timeout {
                what: format!("{component} in {}", pids_file.display()),
                timeout: Duration::ZERO,
            })?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).map_err(io(format!(
            "reading the command line of {component} ({pid})"
        )))?;
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let status = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .map_err(io(format!("killing {component}")))?;
        if !status.success() {
            return Err(Error::Start {
                status: status.to_string(),
                output: format!("kill -KILL {pid} ({component})"),
            });
        }
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        wait_for(
            &format!("{component} ({pid}) to exit"),
            Duration::from_secs(30),
            || {
                let proc_dir = proc_dir.clone();
                async move {
                    let state = std::fs::read_to_string(proc_dir.join("stat")).ok();
                    // Gone, or a zombie waiting for its parent.
                    state
                        .is_none_or(|s| {
                            s.rsplit(')')
                                .next()
                                .is_some_and(|r| r.trim_start().starts_with('Z'))
                        })
                        .then_some(())
                }
            },
        )
        .await?;
        tokio::time::sleep(down).await;
        // Detached in its own session, as hack/testbed/up.sh starts it.
        let log = self.log(component);
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(r#"log=$1; shift; setsid "$@" >> "$log" 2>&1 < /dev/null & echo $!"#)
            .arg("restart")
            .arg(&log)
            .args(&argv)
            .output()
            .map_err(io(format!("starting {component}")))?;
        let new_pid = String::from_utf8_lossy(&output.stdout).trim().to_string();
        let mut pids = std::fs::OpenOptions::new()
            .append(true)
            .open(&pids_file)
            .map_err(io("appending to pids".into()))?;
        std::io::Write::write_all(&mut pids, format!("{component} {new_pid}\n").as_bytes())
            .map_err(io("appending to pids".into()))?;
        self.wait_healthy(component).await
    }

    /// Waits until a component answers its health endpoint (ports from `DIR/ports`).
    async fn wait_healthy(&self, component: &str) -> Result<()> {
        let ports =
            std::fs::read_to_string(self.dir().join("ports")).map_err(|source| Error::Io {
                what: "reading ports".into(),
                source,
            })?;
        let port = |key: &str| {
            ports
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_default()
                .trim()
                .trim_matches('"')
                .to_string()
        };
        let pki = self.dir().join("pki");
        let mut args: Vec<String> = vec!["-s".into(), "--max-time".into(), "2".into()];
        let (url, ok) = match component {
            "kube-apiserver" => {
                for (flag, file) in [
                    ("--cacert", "ca.crt"),
                    ("--cert", "admin.crt"),
                    ("--key", "admin.key"),
                ] {
                    args.push(flag.into());
                    args.push(pki.join(file).display().to_string());
                }
                (
                    format!("https://127.0.0.1:{}/readyz", port("API_PORT")),
                    "ok",
                )
            }
            "cluster-api" => (
                format!("http://127.0.0.1:{}/readyz", port("CAPI_HEALTH")),
                "ok",
            ),
            "kwok" => (
                format!("http://127.0.0.1:{}/healthz", port("KWOK_PORT")),
                "ok",
            ),
            "etcd" => (
                format!("http://127.0.0.1:{}/health", port("ETCD_PORT")),
                "\"health\":\"true\"",
            ),
            "kube-controller-manager" | "kube-scheduler" => {
                args.push("-k".into());
                let key = if component == "kube-scheduler" {
                    "SCHED_PORT"
                } else {
                    "KCM_PORT"
                };
                (format!("https://127.0.0.1:{}/healthz", port(key)), "ok")
            }
            _ => return Ok(()),
        };
        args.push(url.clone());
        wait_for(
            &format!("{component} healthy at {url}"),
            Duration::from_secs(120),
            || {
                let args = args.clone();
                async move {
                    let out = tokio::process::Command::new("curl")
                        .args(&args)
                        .output()
                        .await
                        .ok()?;
                    String::from_utf8_lossy(&out.stdout)
                        .contains(ok)
                        .then_some(())
                }
            },
        )
        .await
    }
}
