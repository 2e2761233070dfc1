use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = tokenmeter::cli::Cli::parse();
    if let Err(err) = tokenmeter::cli::run(cli).await {
        eprintln!("tokenmeter: {err}");
        std::process::exit(1);
    }
}
