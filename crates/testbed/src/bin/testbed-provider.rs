//! Runs the test infrastructure provider against a cluster until interrupted; used by the
//! local demo (`hack/demo.sh`).
//!
//!   testbed-provider --kubeconfig PATH [--cluster NAMESPACE/NAME[=WORKLOAD_KUBECONFIG]]...
//!                    [--failure-domains a,b] [--provision-delay 1s]
//!
//! `--provision-delay` is the simulated instance boot before a TestMachine gets its providerID
//! (default 1s; the end-to-end bench uses 0s, as Karpenter's kwok provider has none).
//! With `--cluster`, also creates that Cluster API Cluster (namespace, kubeconfig Secret,
//! TestCluster, TestControlPlane, Cluster) and waits until it is provisioned, then prints
//! `cluster ready` (once all are). A Cluster given `=WORKLOAD_KUBECONFIG` is a separate
//! workload cluster (its Secret holds that kubeconfig): the provider creates its Nodes there,
//! reaching it through the Cluster's kubeconfig Secret as Cluster API does (the hub demo,
//! `hack/demo.sh --hub`).

use std::path::PathBuf;
use std::process::ExitCode;

use testbed::provider::{ClusterSetup, ProviderConfig, TestProvider, create_cluster};

struct Args {
    kubeconfig: PathBuf,
    /// (namespace, name, workload kubeconfig: `None` = this cluster).
    clusters: Vec<(String, String, Option<PathBuf>)>,
    failure_domains: Vec<String>,
    provision_delay: Option<std::time::Duration>,
}

fn parse() -> Result<Args, String> {
    let mut kubeconfig = None;
    let mut clusters = Vec::new();
    let mut failure_domains = Vec::new();
    let mut provision_delay = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--kubeconfig" => kubeconfig = Some(PathBuf::from(value()?)),
            "--cluster" => {
                let v = value()?;
                let (key, workload) = match v.split_once('=') {
                    Some((k, w)) => (k, Some(PathBuf::from(w))),
                    None => (v.as_str(), None),
                };
                let (ns, name) = key.split_once('/').ok_or_else(|| {
                    format!("--cluster {v:?}: expected NAMESPACE/NAME[=KUBECONFIG]")
                })?;
                clusters.push((ns.to_string(), name.to_string(), workload));
            }
            "--failure-domains" => {
                failure_domains = value()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "--provision-delay" => {
                let v = value()?;
                provision_delay = Some(api::duration::parse_duration(&v).ok_or_else(|| {
                    format!("--provision-delay {v:?}: expected a duration such as 0s or 500ms")
                })?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        kubeconfig: kubeconfig.ok_or("--kubeconfig is required")?,
        clusters,
        failure_domains,
        provision_delay,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("testbed-provider: {e}");
            return ExitCode::from(2);
        }
    };
    let client = match testbed::client_for(&args.kubeconfig).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("testbed-provider: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut config = ProviderConfig {
        workloads_from_secrets: true,
        ..ProviderConfig::default()
    };
    if let Some(d) = args.provision_delay {
        config.provision_delay = d;
    }
    let _provider = match TestProvider::start(client.clone(), config).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("testbed-provider: starting: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("provider running");
    for (ns, name, workload) in &args.clusters {
        let setup = ClusterSetup::new(ns, name, workload.as_ref().unwrap_or(&args.kubeconfig))
            .failure_domains(args.failure_domains.clone());
        if let Err(e) = create_cluster(&client, &setup).await {
            eprintln!("testbed-provider: creating Cluster {ns}/{name}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if !args.clusters.is_empty() {
        println!("cluster ready");
    }
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
