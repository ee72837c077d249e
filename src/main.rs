//! `karpenter-capi`: Karpenter for Cluster API. CLI and wiring only.

use clap::{Parser, Subcommand};

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("karpenter-capi {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}
