//! A real local Kubernetes control plane for tests: etcd and kube-apiserver, plus on demand
//! kube-controller-manager, kube-scheduler, kwok and the Cluster API core manager, all built
//! from pinned Go modules by `hack/testbed/build.sh` and started on loopback by
//! `hack/testbed/up.sh` (one implementation for humans and tests).
//!
//! ```no_run
//! # async fn demo() -> Result<(), testbed::Error> {
//! use testbed::{Component, Options, Testbed};
//! let tb = Testbed::start(Options::default().with(Component::Scheduler)).await?;
//! let ns = tb.temp_namespace().await?;
//! # Ok(()) }
//! ```
//!
//! Every testbed has its own ports and directory, so tests may run several in parallel.
//! Dropping the handle stops its processes; a watchdog stops them too if the test process
//! is killed.

pub mod audit;
pub mod bench;
pub mod procstat;
pub mod provider;
mod restart;
pub mod workloads;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::{self, Scope};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config, ResourceExt};

/// Field manager used for everything the testbed applies.
pub const FIELD_MANAGER: &str = "testbed";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("testbed did not start (hack/testbed/up.sh exited with {status}):\n{output}")]
    Start { status: String, output: String },
    #[error("running {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("watching: {0}")]
    Wait(#[from] kube::runtime::wait::Error),
    #[error("YAML: {0}")]
    Yaml(String),
    #[error("object without apiVersion/kind in YAML: {0}")]
    Untyped(String),
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout { what: String, timeout: Duration },
    #[error("audit log {path}: {message}")]
    Audit { path: PathBuf, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Control-plane components beyond etcd and kube-apiserver (which always run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    ControllerManager,
    Scheduler,
    /// kwok manages Nodes annotated `kwok.x-k8s.io/node: fake` and the pods bound to them.
    Kwok,
    /// The Cluster API core manager (Machine, Cluster, MachineSet... controllers).
    ClusterApi,
}

impl Component {
    fn flag(self) -> &'static str {
        match self {
            Component::ControllerManager => "controller-manager",
            Component::Scheduler => "scheduler",
            Component::Kwok => "kwok",
            Component::ClusterApi => "capi",
        }
    }
}

/// What to start. `Options::default()` is etcd + kube-apiserver with the Cluster API
/// CRDs and this project's CRDs (`crds/`) installed ([`Options::without_cluster_api`]: without
/// the Cluster API ones).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    components: Vec<Component>,
    crds: Vec<PathBuf>,
    audit_log: bool,
    /// `up.sh --no-cluster-api`.
    no_cluster_api: bool,
    /// Another testbed's etcd (URL) and this one's key prefix in it.
    etcd: Option<(String, String)>,
}

impl Options {
    /// Adds a component.
    pub fn with(mut self, component: Component) -> Self {
        if !self.components.contains(&component) {
            self.components.push(component);
        }
        self
    }

    /// Everything: controller-manager, scheduler, kwok and the Cluster API manager.
    pub fn all() -> Self {
        Self::default()
            .with(Component::ControllerManager)
            .with(Component::Scheduler)
            .with(Component::Kwok)
            .with(Component::ClusterApi)
    }

    /// A control plane without Cluster API: its CRDs are not installed, so the API server
    /// serves no Machine or Cluster (this project's CRDs are installed as always). The start
    /// fails if [`Component::ClusterApi`] is asked for too.
    pub fn without_cluster_api(mut self) -> Self {
        self.no_cluster_api = true;
        self
    }

    /// kube-apiserver writes an audit log of every request (Metadata level: verb,
    /// resource, user agent, response code); read it with [`Testbed::audit_events`].
    pub fn audit_log(mut self) -> Self {
        self.audit_log = true;
        self
    }

    /// Runs kube-apiserver on a running etcd (another testbed's: [`Testbed::etcd_url`])
    /// under the key prefix `prefix` instead of starting its own etcd (see
    /// [`Testbed::start_workloads`]). That etcd must outlive this testbed.
    pub fn shared_etcd(mut self, url: impl Into<String>, prefix: impl Into<String>) -> Self {
        self.etcd = Some((url.into(), prefix.into()));
        self
    }

    /// Installs extra CRDs from a YAML file or directory at start-up.
    pub fn crds(mut self, path: impl Into<PathBuf>) -> Self {
        self.crds.push(path.into());
        self
    }
}

/// The repository root (where `hack/testbed` lives).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Directory of the testbed binaries (`TESTBED_BIN_DIR`, else `bin/` of the build cache:
/// `TESTBED_CACHE` or `.cache/testbed`, as in `hack/testbed/build.sh`).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TESTBED_BIN_DIR") {
        return PathBuf::from(dir);
    }
    match std::env::var_os("TESTBED_CACHE") {
        Some(cache) => PathBuf::from(cache).join("bin"),
        None => repo_root().join(".cache/testbed/bin"),
    }
}

/// A running control plane. Dropping it stops the processes and removes its directory.
///
/// A `Testbed` may outlive the Tokio runtime that started it and serve tests on other
/// runtimes (see [`shared`]): [`Testbed::client`] hands out a client bound to the caller's
/// runtime (a client's connection tasks die with the runtime that spawned them).
pub struct Testbed {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    config: Config,
    clients: std::sync::Mutex<Vec<(tokio::runtime::Id, Client)>>,
}

impl Testbed {
    /// Builds what is missing (first run only), starts the control plane and returns when
    /// every requested component reports healthy.
    pub async fn start(options: Options) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("testbed-")
            .tempdir()
            .map_err(|source| Error::Io {
                what: "creating the testbed directory".into(),
                source,
            })?;
        let components: Vec<&str> = options.components.iter().map(|c| c.flag()).collect();
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg(repo_root().join("hack/testbed/up.sh"))
            .arg("--dir")
            .arg(dir.path())
            .arg("--components")
            .arg(if components.is_empty() {
                "none".to_string()
            } else {
                components.join(",")
            })
            .arg("--watch-pid")
            .arg(std::process::id().to_string())
            .arg("--quiet");
        for crd in &options.crds {
            cmd.arg("--crds").arg(crd);
        }
        if options.audit_log {
            cmd.arg("--audit-log");
        }
        if options.no_cluster_api {
            cmd.arg("--no-cluster-api");
        }
        if let Some((url, prefix)) = &options.etcd {
            cmd.arg("--etcd").arg(url).arg("--etcd-prefix").arg(prefix);
        }
        let output = cmd.output().await.map_err(|source| Error::Io {
            what: "hack/testbed/up.sh".into(),
            source,
        })?;
        // From here on, Drop stops whatever was started, also on error.
        let kubeconfig = dir.path().join("kubeconfig");
        if !output.status.success() {
            stop(dir.path());
            return Err(Error::Start {
                status: output.status.to_string(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        let config = match config_for(&kubeconfig).await {
            Ok(config) => config,
            Err(e) => {
                stop(dir.path());
                return Err(e);
            }
        };
        let testbed = Testbed {
            dir,
            kubeconfig,
            config,
            clients: std::sync::Mutex::new(Vec::new()),
        };
        // Fails early (not at the first request) on a kubeconfig the client cannot use.
        if let Err(e) = Client::try_from(testbed.config.clone()) {
            return Err(e.into());
        }
        Ok(testbed)
    }

    /// A client authenticated as cluster admin (`system:masters`), for the calling Tokio
    /// runtime (one per runtime, reused; must be called inside a runtime).
    pub fn client(&self) -> Client {
        let runtime = tokio::runtime::Handle::current().id();
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, client)) = clients.iter().find(|(id, _)| *id == runtime) {
            return client.clone();
        }
        let client = Client::try_from(self.config.clone())
            .expect("the kubeconfig made a client when the testbed started");
        // (Clients of runtimes that are gone stay in the list: a few per test process.)
        clients.push((runtime, client.clone()));
        client
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The testbed's directory (state, `logs/`, `pki/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The log file of a component (`etcd`, `kube-apiserver`, `kwok`, `cluster-api`, ...).
    pub fn log(&self, component: &str) -> PathBuf {
        self.dir
            .path()
            .join("logs")
            .join(format!("{component}.log"))
    }

    /// The audit log so far (started with [`Options::audit_log`]).
    pub fn audit_events(&self) -> Result<Vec<audit::AuditEvent>> {
        let path = self.log("audit");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::Audit {
            path: path.clone(),
            message: e.to_string(),
        })?;
        audit::parse(&text).map_err(|e| Error::Audit {
            path,
            message: e.to_string(),
        })
    }

    /// A `kubectl` command (the testbed's own build) pointed at this testbed.
    pub fn kubectl(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(bin_dir().join("kubectl"));
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    /// Creates a fresh namespace with a unique name and returns the name.
    pub async fn temp_namespace(&self) -> Result<String> {
        let api: Api<Namespace> = Api::all(self.client());
        let mut ns = Namespace::default();
        ns.metadata.generate_name = Some("test-".into());
        let created = api.create(&PostParams::default(), &ns).await?;
        Ok(created.name_any())
    }

    /// Server-side applies CRDs and waits until each is Established.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in crds {
            api.patch(&crd.name_any(), &params, &Patch::Apply(crd))
                .await?;
        }
        for crd in crds {
            let name = crd.name_any();
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            match tokio::time::timeout(Duration::from_secs(30), established).await {
                Ok(result) => {
                    result?;
                }
                Err(_) => {
                    return Err(Error::Timeout {
                        what: format!("CRD {name} to be Established"),
                        timeout: Duration::from_secs(30),
                    });
                }
            }
        }
        Ok(())
    }

    /// Server-side applies every object of a multi-document YAML string (any kind the
    /// server knows; namespaced objects without a namespace go to `default_namespace`).
    pub async fn apply_yaml(
        &self,
        yaml: &str,
        default_namespace: &str,
    ) -> Result<Vec<DynamicObject>> {
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(yaml).map_err(|e| Error::Yaml(e.to_string()))?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let client = self.client();
        let mut applied = Vec::new();
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let obj: DynamicObject =
                serde_json::from_value(doc).map_err(|e| Error::Yaml(e.to_string()))?;
            let types = obj
                .types
                .as_ref()
                .ok_or_else(|| Error::Untyped(obj.name_any()))?;
            let gvk = kube::api::GroupVersionKind::try_from(types)
                .map_err(|e| Error::Untyped(e.to_string()))?;
            let (resource, caps) = discovery::pinned_kind(&client, &gvk).await?;
            let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
                let ns = obj
                    .namespace()
                    .unwrap_or_else(|| default_namespace.to_string());
                Api::namespaced_with(client.clone(), &ns, &resource)
            } else {
                Api::all_with(client.clone(), &resource)
            };
            applied.push(
                api.patch(&obj.name_any(), &params, &Patch::Apply(&obj))
                    .await?,
            );
        }
        Ok(applied)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        stop(self.dir.path());
    }
}

/// The testbed every caller in this process shares for `options`: started by the first
/// caller, then handed to every later one (tests on other runtimes and threads too). It is
/// never dropped: its watchdog (`up.sh --watch-pid`) stops it and removes its directory when
/// the process exits. Callers must not assume an empty cluster: each test uses its own
/// namespace and object names.
pub async fn shared(options: Options) -> Result<&'static Testbed> {
    type Cell = tokio::sync::OnceCell<Testbed>;
    static SHARED: std::sync::Mutex<Vec<(Options, &'static Cell)>> =
        std::sync::Mutex::new(Vec::new());
    let cell: &'static Cell = {
        let mut shared = SHARED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match shared.iter().find(|(o, _)| *o == options) {
            Some((_, cell)) => cell,
            None => {
                let cell: &'static Cell = Box::leak(Box::new(Cell::new()));
                shared.push((options.clone(), cell));
                cell
            }
        }
    };
    cell.get_or_try_init(|| Testbed::start(options)).await
}

/// Stops a testbed's processes and removes its directory (it is disposable: killed at once).
fn stop(dir: &Path) {
    let _ = std::process::Command::new("bash")
        .arg(repo_root().join("hack/testbed/down.sh"))
        .arg("--dir")
        .arg(dir)
        .args(["--quiet", "--purge"])
        .status();
}

/// A client for a kubeconfig file.
pub async fn client_for(path: &Path) -> Result<Client> {
    Ok(Client::try_from(config_for(path).await?)?)
}

async fn config_for(path: &Path) -> Result<Config> {
    let bad = |message: String| Error::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))
}

/// Polls `check` until it yields `Some`, or fails after `timeout`. The check runs at once,
/// then every 100 ms: this is how tests wait for an outcome, never with a bare sleep.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
