use std::io::IsTerminal;

use clap::Parser;
use tokenmeter::cli::{Cli, Command};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // Servers log their lifecycle; the tools that print tables keep the terminal for the table.
    let default_level = match cli.command {
        Command::Serve(_) | Command::Sim(_) => "info",
        Command::Bench(_) | Command::Demo(_) => "warn",
    };
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
