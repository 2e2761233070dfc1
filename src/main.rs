use std::io::IsTerminal;

use clap::Parser;
use tokenmeter::cli::Cli;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let default_level = cli.command.default_log_level();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in `kubectl logs` or a log shipper.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Err(err) = tokenmeter::cli::run(cli).await {
        eprintln!("tokenmeter: {err}");
        std::process::exit(1);
    }
}
