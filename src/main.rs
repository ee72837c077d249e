//! `karpenter-capi`: Karpenter for Cluster API. CLI and wiring only.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

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
    }
    Ok(())
}
