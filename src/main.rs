//! `karpenter-capi`: Karpenter for Cluster API. CLI and wiring only.

use clap::{Parser, Subcommand};
use karpenter_capi::{inspect, inspect_hub, inspect_pending, simulate};
use std::io::IsTerminal;
use std::path::PathBuf;

#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read by jemalloc at its first allocation (see `memory`).
#[cfg(not(feature = "system-alloc"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: Option<&u8> = Some(&karpenter_core::memory::CONF[0]);

#[derive(Parser)]
#[command(name = "karpenter-capi", version, about = "Karpenter for Cluster API")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the version.
    Version,
    /// Offline: print the instance types the operator would build from template YAML.
    InstanceTypes(InstanceTypesArgs),
    /// Run the operator (controllers, metrics, health, leader election).
    Run(Box<RunArgs>),
    /// Write the CRDs we install (NodePool, NodeClaim, ClusterAPINodeClass) as YAML.
    Crds {
        /// Output directory (one file per CRD).
        #[arg(long, default_value = "crds")]
        out: PathBuf,
    },
    /// One view of NodePool -> NodeClaim -> Machine -> Node, flagging what is stuck and why.
    Inspect(InspectArgs),
    /// Offline: the NodeClaims the provisioner would create for a snapshot read from YAML.
    Simulate(SimulateArgs),
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// YAML/JSON file, directory (recursive, *.yaml/*.yml/*.json in name order) or `-` for
    /// stdin: Pods, Deployments, ReplicaSets, StatefulSets, Jobs, DaemonSets, Nodes,
    /// NodeClaims, NodePools, ClusterAPINodeClasses, *MachineTemplates, Clusters, and the
    /// hosts a NodeClass's inventory counts (e.g. BareMetalHosts). Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: InspectFormat,
}

fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    let loaded = simulate::load(&args.files)?;
    let plan = simulate::plan(&loaded);
    for i in &plan.ignored {
        eprintln!("warning: ignored {i}: not read by the simulation");
    }
    match args.output {
        InspectFormat::Table => print!("{}", simulate::render_table(&plan)),
        InspectFormat::Json => println!("{}", serde_json::to_string_pretty(&plan)?),
    }
    Ok(())
}

#[derive(clap::Args)]
struct InspectArgs {
    /// Workload cluster kubeconfig; default: $KUBECONFIG or in-cluster.
    #[arg(long, env = "KUBECONFIG_WORKLOAD")]
    kubeconfig: Option<PathBuf>,
    /// Management cluster kubeconfig (Cluster API objects); default: the workload cluster.
    #[arg(long, env = "MANAGEMENT_KUBECONFIG")]
    management_kubeconfig: Option<PathBuf>,
    /// Only this NodePool.
    #[arg(long)]
    nodepool: Option<String>,
    /// Also each NodeClaim's disruption verdict: the move it is part of, or what keeps it
    /// (do-not-disrupt, a PDB, consolidateAfter, a budget, no cheaper option, ...).
    #[arg(long)]
    why: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: InspectFormat,
    /// `hub`: `--kubeconfig` is a hub's management cluster; list the opted-in Clusters with
    /// their state and owner (or, with `--cluster`, inspect one).
    #[arg(long, value_enum, default_value = "single")]
    mode: Mode,
    /// Hub mode: inspect the workload cluster of Cluster `<namespace>/<name>` (through its
    /// kubeconfig Secret).
    #[arg(long, value_parser = parse_cluster)]
    cluster: Option<String>,
    /// Hub mode: the namespace of the hub's Leases.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "karpenter")]
    lease_namespace: String,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum InspectFormat {
    Table,
    Json,
}

fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if args.mode == Mode::Hub && args.cluster.is_none() {
        let rows = runtime.block_on(async {
            let options = operator::ClientOptions::default();
            let path = args
                .management_kubeconfig
                .as_ref()
                .or(args.kubeconfig.as_ref());
            let management = operator::client(path, &options).await?;
            anyhow::Ok(inspect_hub::clusters(&management, &args.lease_namespace).await?)
        })?;
        match args.output {
            InspectFormat::Table => print!("{}", inspect_hub::render_table(&rows)),
            InspectFormat::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        }
        return Ok(());
    }
    let rows = runtime.block_on(async {
        let options = operator::ClientOptions::default();
        let (workload, management) = match &args.cluster {
            Some(cluster) => {
                let path = args
                    .management_kubeconfig
                    .as_ref()
                    .or(args.kubeconfig.as_ref());
                let management = operator::client(path, &options).await?;
                let workload = inspect_hub::workload_client(&management, cluster, &options).await?;
                (workload, management)
            }
            None => {
                let workload = operator::client(args.kubeconfig.as_ref(), &options).await?;
                let management = match &args.management_kubeconfig {
                    Some(p) => operator::client(Some(p), &options).await?,
                    None => workload.clone(),
                };
                (workload, management)
            }
        };
        anyhow::Ok(
            inspect::collect_all(&workload, &management, args.nodepool.as_deref(), args.why)
                .await?,
        )
    })?;
    let (rows, pending) = rows;
    match args.output {
        InspectFormat::Table => print!(
            "{}{}",
            inspect::render_table(&rows),
            inspect_pending::render(&pending)
        ),
        InspectFormat::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
    }
    Ok(())
}

#[derive(clap::Args)]
struct RunArgs {
    /// Workload cluster kubeconfig (Karpenter objects, Nodes, Pods); default: in-cluster or
    /// $KUBECONFIG.
    #[arg(long, env = "KUBECONFIG_WORKLOAD")]
    kubeconfig: Option<PathBuf>,
    /// Management cluster kubeconfig (Cluster API objects); default: the workload cluster.
    #[arg(long, env = "MANAGEMENT_KUBECONFIG")]
    management_kubeconfig: Option<PathBuf>,
    /// Address of /metrics.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: std::net::SocketAddr,
    /// Address of /healthz and /readyz.
    #[arg(long, env = "HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: std::net::SocketAddr,
    /// Provisioning batch: idle window.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    batch_idle_duration: std::time::Duration,
    /// Provisioning batch: maximum window.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    batch_max_duration: std::time::Duration,
    /// Replace a Node that has been NotReady/Unknown this long (CAPI's MachineHealthCheck
    /// does not remediate standalone Machines).
    #[arg(long, env = "NODE_REPAIR_AFTER", default_value = "10m", value_parser = parse_duration)]
    node_repair_after: std::time::Duration,
    /// A YAML file of repair policies (Karpenter's reason-aware RepairPolicy: condition,
    /// reasonRegex, toleration, terminationGracePeriod, priority, action RebootNode or
    /// ReplaceNode); default: Ready False or Unknown for --node-repair-after, replaced.
    #[arg(long, env = "REPAIR_POLICIES")]
    repair_policies: Option<PathBuf>,
    /// How long a surge-first disruption (drift) waits for its replacement NodeClaims to
    /// initialize before it is rolled back.
    #[arg(long, env = "DISRUPTION_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    disruption_timeout: std::time::Duration,
    /// How long a template's `karpenter.cluster.x-k8s.io/available-count` (written by an
    /// outside inventory job with `…/available-count-updated`) is trusted; older counts are
    /// ignored (unbounded).
    #[arg(long, env = "AVAILABLE_COUNT_STALENESS", default_value = "10m", value_parser = parse_duration)]
    available_count_staleness: std::time::Duration,
    /// What provisioning does when a NodeClaim's instance types cannot meet a requirement's
    /// `minValues`: `Strict` leaves the pod off that NodeClaim; `BestEffort` lowers
    /// `minValues` to what they reach and annotates the NodeClaim
    /// `karpenter.sh/nodeclaim-min-values-relaxed` (Karpenter's `--min-values-policy`).
    #[arg(long, env = "MIN_VALUES_POLICY", value_enum, default_value = "Strict")]
    min_values_policy: MinValuesPolicy,
    /// Client-side rate limit of each Kubernetes client (workload, management): requests
    /// per second once the burst is spent.
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = karpenter_core::ratelimit::DEFAULT_QPS)]
    kube_client_qps: std::num::NonZeroU32,
    /// Client-side rate limit: requests sent at once before the QPS limit applies.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = karpenter_core::ratelimit::DEFAULT_BURST)]
    kube_client_burst: std::num::NonZeroU32,
    /// Disable leader election (a single replica only).
    #[arg(long, env = "DISABLE_LEADER_ELECTION")]
    disable_leader_election: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "karpenter")]
    leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "karpenter-capi-leader-election"
    )]
    leader_election_name: String,
    /// Identity of this workload cluster, as label `karpenter.cluster.x-k8s.io/cluster-id` on
    /// every Cluster API object the operator creates; it only touches objects with its own.
    /// Must be unique among the workload clusters sharing a management cluster (default: the
    /// UID of this cluster's kube-system namespace).
    #[arg(long, env = "CLUSTER_ID")]
    cluster_id: Option<String>,
    /// Identity of this replica in the Lease (default: $POD_NAME or the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Karpenter's feature gates, `Name=true|false,...` (accepted for compatibility; only
    /// `NodeOverlay`, default true, changes anything here: false neither watches nor
    /// applies NodeOverlays).
    #[arg(long, env = "FEATURE_GATES", default_value = "NodeOverlay=true", value_parser = parse_feature_gates)]
    feature_gates: std::collections::BTreeMap<String, bool>,
    /// `single`: one workload cluster (`--kubeconfig`), Cluster API objects in it or in
    /// `--management-kubeconfig`. `hub`: run in the management cluster and serve every
    /// Cluster labelled `karpenter.cluster.x-k8s.io/enabled: "true"` (see docs/hub.md).
    #[arg(long, env = "MODE", value_enum, default_value = "single")]
    mode: Mode,
    /// The provider: `clusterapi` launches one standalone Cluster API Machine per NodeClaim;
    /// `kwok` makes each NodeClaim's Node directly for kwok to run (Karpenter's kwok
    /// provider, for tests and benchmarks; needs `--instance-types-file`, single mode only).
    #[arg(long, env = "PROVIDER", value_enum, default_value = "clusterapi")]
    provider: ProviderKind,
    /// `--provider kwok`: the instance types, in Karpenter kwok's JSON format.
    #[arg(long, env = "INSTANCE_TYPES_FILE_PATH")]
    instance_types_file: Option<PathBuf>,
    /// Hub mode: only Clusters matching this label selector too.
    #[arg(long, env = "CLUSTER_SELECTOR", value_parser = parse_selector)]
    cluster_selector: Option<String>,
    /// Hub mode: only Clusters in these namespaces (comma-separated; default all).
    #[arg(long, env = "NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Hub mode: only Clusters labelled `cluster.x-k8s.io/watch-filter=<value>` (Cluster
    /// API's `--watch-filter`).
    #[arg(long, env = "WATCH_FILTER")]
    watch_filter: Option<String>,
    /// Hub mode: how often each engaged cluster's API server is probed (3 failures in a row
    /// mark it disconnected).
    #[arg(long, env = "HUB_PROBE_INTERVAL", default_value = "10s", value_parser = parse_interval)]
    hub_probe_interval: std::time::Duration,
    /// Hub mode: static sharding across replicas — this replica engages the Clusters with
    /// `murmur3_fmix64(fnv1a64("<ns>/<name>")) % N == --shard-index` (FNV-1a 64 then
    /// MurmurHash3's 64-bit finalizer; no peer Leases; each Cluster still fenced by its Lease
    /// unless leader election is disabled). Without it, replicas split the Clusters by
    /// rendezvous hashing over their peer Leases.
    #[arg(long, env = "SHARD_COUNT", requires = "shard_index", value_parser = clap::value_parser!(u32).range(1..))]
    shard_count: Option<u32>,
    /// Hub mode: this replica's shard, 0..N-1 (with `--shard-count`).
    #[arg(long, env = "SHARD_INDEX", requires = "shard_count")]
    shard_index: Option<u32>,
    /// Hub mode: label each cluster's series with `cluster="<namespace>/<name>"`; `false`
    /// sums them over the clusters (fewer series).
    #[arg(long, env = "METRICS_CLUSTER_LABEL", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    metrics_cluster_label: bool,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "pretty")]
    log_format: LogFormat,
    /// Log level / filter (tracing EnvFilter syntax).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    log_level: String,
}

/// `--min-values-policy`, spelled as Karpenter spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum MinValuesPolicy {
    #[value(name = "Strict")]
    Strict,
    #[value(name = "BestEffort")]
    BestEffort,
}

impl From<MinValuesPolicy> for scheduling::MinValuesPolicy {
    fn from(p: MinValuesPolicy) -> Self {
        match p {
            MinValuesPolicy::Strict => scheduling::MinValuesPolicy::Strict,
            MinValuesPolicy::BestEffort => scheduling::MinValuesPolicy::BestEffort,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Single,
    Hub,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProviderKind {
    Clusterapi,
    Kwok,
}

/// The provider `--provider` names (`None`: Cluster API's, the runtime's own).
fn provider(args: &RunArgs) -> anyhow::Result<Option<karpenter_core::engagement::ProviderFactory>> {
    match args.provider {
        ProviderKind::Clusterapi => Ok(None),
        ProviderKind::Kwok => {
            if args.mode == Mode::Hub {
                anyhow::bail!("--provider kwok serves one cluster: it cannot run with --mode hub");
            }
            let Some(path) = &args.instance_types_file else {
                anyhow::bail!(
                    "--provider kwok needs --instance-types-file (Karpenter kwok's JSON)"
                );
            };
            let types = kwok::instance_types::read_file(path)?;
            Ok(Some(kwok::wiring::factory(types)))
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Json,
    Pretty,
}

/// `A=true,B=false` → {A: true, B: false}.
fn parse_feature_gates(s: &str) -> Result<std::collections::BTreeMap<String, bool>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (k, v) = e
                .split_once('=')
                .ok_or_else(|| format!("{e:?}: expected Name=true|false"))?;
            let v = v
                .trim()
                .parse::<bool>()
                .map_err(|_| format!("{e:?}: expected Name=true|false"))?;
            Ok((k.trim().to_string(), v))
        })
        .collect()
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    api::duration::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration (e.g. 1s, 500ms, 1m)"))
}

/// A duration above zero (a zero interval would loop without pause).
fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?} must be more than 0 (e.g. 10s)")),
        d => Ok(d),
    }
}

/// A label selector the API server accepts.
fn parse_selector(s: &str) -> Result<String, String> {
    templates::labels::validate_selector(s)?;
    Ok(s.to_string())
}

/// `<namespace>/<name>` of a Cluster.
fn parse_cluster(s: &str) -> Result<String, String> {
    let dns = |part: &str, max: usize| {
        !part.is_empty()
            && part.len() <= max
            && part.split('.').all(|l| {
                !l.is_empty()
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
    };
    match s.split_once('/') {
        Some((ns, name)) if dns(ns, 63) && !ns.contains('.') && dns(name, 253) => Ok(s.into()),
        _ => Err(format!(
            "{s:?}: expected <namespace>/<name> of a Cluster (lowercase DNS names)"
        )),
    }
}

/// `--shard-count/--shard-index`, checked.
fn static_shard(args: &RunArgs) -> anyhow::Result<Option<clusterapi::hub::shard::StaticShard>> {
    match (args.shard_count, args.shard_index) {
        (Some(count), Some(index)) if index < count => {
            Ok(Some(clusterapi::hub::shard::StaticShard { count, index }))
        }
        (Some(count), Some(index)) => {
            anyhow::bail!("--shard-index {index} is not below --shard-count {count}")
        }
        _ => Ok(None),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let shard = static_shard(&args)?;
    let provider = provider(&args)?;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)?;
    match args.log_format {
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init(),
        // Colours only on a terminal: a log file or collector gets plain text.
        LogFormat::Pretty => tracing_subscriber::fmt()
            .with_ansi(std::io::stdout().is_terminal())
            .with_env_filter(filter)
            .init(),
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "starting karpenter-capi"
    );
    let identity = args.identity.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| format!("karpenter-capi-{}", std::process::id()))
    });
    let repair_policies = args
        .repair_policies
        .as_deref()
        .map(karpenter_capi::repair_policies::read)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--repair-policies {e}"))?;
    let config = operator::RunConfig {
        kubeconfig: args.kubeconfig,
        management_kubeconfig: args.management_kubeconfig,
        metrics_addr: args.metrics_addr,
        health_addr: args.health_addr,
        leader_election: (!args.disable_leader_election).then(|| {
            karpenter_core::leader::LeaderConfig {
                namespace: args.leader_election_namespace,
                name: args.leader_election_name,
                identity,
                duration: std::time::Duration::from_secs(15),
                grace: std::time::Duration::from_secs(5),
            }
        }),
        batch_idle: args.batch_idle_duration,
        batch_max: args.batch_max_duration,
        node_repair_after: args.node_repair_after,
        repair_policies,
        disruption_timeout: args.disruption_timeout,
        count_staleness: args.available_count_staleness,
        min_values_policy: args.min_values_policy.into(),
        client_rate: karpenter_core::ratelimit::ClientRate {
            qps: args.kube_client_qps,
            burst: args.kube_client_burst,
        },
        cluster_id: args.cluster_id,
        node_overlay: args
            .feature_gates
            .get("NodeOverlay")
            .copied()
            .unwrap_or(true),
        hub: (args.mode == Mode::Hub).then(|| clusterapi::hub::HubConfig {
            cluster_selector: args.cluster_selector,
            namespaces: args.namespaces,
            watch_filter: args.watch_filter,
            probe_interval: args.hub_probe_interval,
            node_overlay: args
                .feature_gates
                .get("NodeOverlay")
                .copied()
                .unwrap_or(true),
            shard,
            metrics_cluster_label: args.metrics_cluster_label,
            ..Default::default()
        }),
        provider,
        // GC interval and grace.
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(operator::run_operator(config))?;
    Ok(())
}

#[derive(clap::Args)]
struct InstanceTypesArgs {
    /// YAML/JSON file or directory (recursive) with *MachineTemplates, optional Cluster and
    /// ClusterAPINodeClass objects. Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: OutputFormat,
    /// Exit with status 1 when a template is excluded or a NodeClass is invalid.
    #[arg(long)]
    strict: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OutputFormat {
    Table,
    Json,
    Yaml,
}

fn instance_types(args: InstanceTypesArgs) -> anyhow::Result<()> {
    use templates::offline::{Inputs, render_json, render_table, render_yaml, reports};
    let inputs = Inputs::load(&args.files)?;
    let reports = reports(&inputs);
    let text = match args.output {
        OutputFormat::Table => render_table(&reports),
        OutputFormat::Json => render_json(&reports)? + "\n",
        OutputFormat::Yaml => render_yaml(&reports)?,
    };
    print!("{text}");
    let failed = reports
        .iter()
        .any(|r| r.error.is_some() || r.catalog.as_ref().is_some_and(|c| !c.excluded.is_empty()));
    if args.strict && failed {
        std::process::exit(1);
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("karpenter-capi {}", env!("CARGO_PKG_VERSION")),
        Command::InstanceTypes(args) => instance_types(args)?,
        Command::Run(args) => run(*args)?,
        Command::Inspect(args) => inspect(args)?,
        Command::Simulate(args) => simulate(args)?,
        Command::Crds { out } => {
            for path in clusterapi_api::crds::write_all(&out)? {
                println!("{}", path.display());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let argv = ["karpenter-capi", "run"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Run(args) => Ok(*args),
            _ => unreachable!("parsed the run subcommand"),
        }
    }

    #[test]
    fn feature_gates_are_karpenters_syntax_node_overlay_on_by_default() {
        let gates = |a: &[&str]| run_args(a).map(|r| r.feature_gates);
        assert_eq!(gates(&[]).expect("parses").get("NodeOverlay"), Some(&true));
        let g = gates(&["--feature-gates", "NodeRepair=true, NodeOverlay=false"]).expect("parses");
        assert_eq!(g.get("NodeOverlay"), Some(&false));
        assert_eq!(g.get("NodeRepair"), Some(&true));
        assert!(gates(&["--feature-gates", "NodeOverlay"]).is_err());
        assert!(gates(&["--feature-gates", "NodeOverlay=maybe"]).is_err());
    }

    #[test]
    fn client_rate_defaults_are_karpenters() {
        let args = run_args(&[]).expect("parses");
        assert_eq!(args.kube_client_qps.get(), 200);
        assert_eq!(args.kube_client_burst.get(), 300);
        let args =
            run_args(&["--kube-client-qps", "50", "--kube-client-burst", "75"]).expect("parses");
        assert_eq!(args.kube_client_qps.get(), 50);
        assert_eq!(args.kube_client_burst.get(), 75);
    }

    #[test]
    fn hub_flags_parse() {
        let args = run_args(&[]).expect("parses");
        assert_eq!(
            args.mode,
            Mode::Single,
            "single-cluster mode is the default"
        );
        let args = run_args(&[
            "--mode",
            "hub",
            "--namespaces",
            "team-a,team-b",
            "--watch-filter",
            "shard-1",
            "--cluster-selector",
            "env=prod",
        ])
        .expect("parses");
        assert_eq!(args.mode, Mode::Hub);
        assert_eq!(args.namespaces, ["team-a", "team-b"]);
        assert_eq!(args.watch_filter.as_deref(), Some("shard-1"));
        assert_eq!(args.cluster_selector.as_deref(), Some("env=prod"));
    }

    #[test]
    fn shard_flags_go_together_and_index_is_below_count() {
        let args = run_args(&["--mode", "hub", "--shard-count", "3", "--shard-index", "2"])
            .expect("parses");
        assert_eq!(
            static_shard(&args).expect("valid"),
            Some(clusterapi::hub::shard::StaticShard { count: 3, index: 2 })
        );
        assert!(
            run_args(&["--shard-count", "3"]).is_err(),
            "an index is required"
        );
        assert!(
            run_args(&["--shard-index", "0"]).is_err(),
            "a count is required"
        );
        assert!(run_args(&["--shard-count", "0", "--shard-index", "0"]).is_err());
        let out_of_range = run_args(&["--shard-count", "2", "--shard-index", "2"]).expect("parses");
        assert!(static_shard(&out_of_range).is_err());
        assert_eq!(
            static_shard(&run_args(&[]).expect("parses")).expect("ok"),
            None
        );
        assert!(run_args(&[]).expect("parses").metrics_cluster_label);
        let off = run_args(&["--metrics-cluster-label=false"]).expect("parses");
        assert!(!off.metrics_cluster_label);
    }

    /// Refused at start, naming the flag (and no client is built before).
    #[test]
    fn bad_hub_flags_are_refused_naming_the_flag() {
        let refused = |a: &[&str]| match run_args(a) {
            Ok(_) => panic!("{a:?} accepted"),
            Err(e) => e.to_string(),
        };
        let e = refused(&["--mode", "hub", "--hub-probe-interval", "0"]);
        assert!(
            e.contains("--hub-probe-interval") && e.contains("must be more than 0"),
            "{e}"
        );
        assert!(refused(&["--hub-probe-interval", "0s"]).contains("--hub-probe-interval"));
        let e = refused(&["--mode", "hub", "--cluster-selector", "env in (prod"]);
        assert!(
            e.contains("--cluster-selector") && e.contains("unbalanced '('"),
            "{e}"
        );
        let e = refused(&["--cluster-selector", "env=a b"]);
        assert!(e.contains("--cluster-selector"), "{e}");
        // The positive controls: the same flags, well formed.
        let ok = run_args(&[
            "--hub-probe-interval",
            "500ms",
            "--cluster-selector",
            "env in (prod),!legacy",
        ])
        .expect("parses");
        assert_eq!(ok.hub_probe_interval, std::time::Duration::from_millis(500));
        assert_eq!(
            ok.cluster_selector.as_deref(),
            Some("env in (prod),!legacy")
        );
    }

    #[test]
    fn a_malformed_inspect_cluster_is_refused_naming_the_flag() {
        let inspect = |c: &str| {
            Cli::try_parse_from(["karpenter-capi", "inspect", "--mode", "hub", "--cluster", c])
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for bad in [
            "alpha",
            "a/b/c",
            "/alpha",
            "alpha/",
            "Team/alpha",
            "a.b/alpha",
        ] {
            let e = inspect(bad).expect_err(bad);
            assert!(
                e.contains("--cluster") && e.contains("expected <namespace>/<name>"),
                "{bad}: {e}"
            );
        }
        assert_eq!(inspect("team-a/alpha.v2"), Ok(()));
    }

    #[test]
    fn zero_client_rate_is_rejected() {
        assert!(run_args(&["--kube-client-qps", "0"]).is_err());
        assert!(run_args(&["--kube-client-burst", "0"]).is_err());
    }
}
