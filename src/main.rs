use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = tokenmeter::cli::Cli::parse();
    if let Err(err) = tokenmeter::cli::run(cli).await {
        eprintln!("tokenmeter: {err}");
        std::process::exit(1);
    }
}
