//! The command line: `serve`, `sim`, `bench`, `demo`.
use clap::{Parser, Subcommand};

/// tokenmeter: meter LLM token streams (TTFT, ITL, TPOT) as they pass.
#[derive(Parser, Debug)]
#[command(name = "tokenmeter", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the simulated vLLM replica.
    Sim(crate::sim::SimArgs),
    /// Run the load generator.
    Bench(crate::bench::BenchArgs),
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<(), crate::BoxError> {
    match cli.command {
        Command::Sim(args) => crate::sim::run(args).await,
        Command::Bench(args) => crate::bench::run(args).await,
    }
}
