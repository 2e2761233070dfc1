//! The command line: `serve`, and with the `testbed` feature (on by default) `sim`, `bench` and
//! `demo`. The sidecar build leaves the feature out, so its binary has `serve` only.
//!
//! What the commands print goes through `crate::stdout::print`, never `println!`: a reader that
//! stops early (`tokenmeter serve --check | head -1`) ends the output instead of panicking the
//! process.
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::config::Config;
use crate::server::Server;

/// tokenmeter: meter LLM token streams (TTFT, ITL, TPOT) as they pass.
#[derive(Parser, Debug)]
#[command(name = "tokenmeter", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands; parsed once, so the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the metering proxy.
    Serve(ServeArgs),
    /// Run the simulated vLLM replica.
    #[cfg(feature = "testbed")]
    Sim(crate::testbed::sim::SimArgs),
    /// Run the load generator.
    #[cfg(feature = "testbed")]
    Bench(crate::testbed::bench::BenchArgs),
    /// Simulated replicas + the proxy + a mixed load, then the SLO table.
    #[cfg(feature = "testbed")]
    Demo(crate::testbed::demo::DemoArgs),
}

impl Command {
    /// The log level when `RUST_LOG` names none: servers log their lifecycle; the tools that
    /// print tables keep the terminal for the table.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            Command::Serve(_) => "info",
            #[cfg(feature = "testbed")]
            Command::Sim(_) => "info",
            #[cfg(feature = "testbed")]
            Command::Bench(_) | Command::Demo(_) => "warn",
        }
    }
}

/// Arguments of `tokenmeter serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Configuration file; without it the shipped defaults apply. TOKENMETER_LISTEN,
    /// TOKENMETER_ADMIN_LISTEN and TOKENMETER_UPSTREAM override either.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Check the configuration: build everything `serve` would (every file it names read, every
    /// URL parsed, the router built) without listening or connecting, then print it as TOML (the
    /// file, the defaults and the environment's overrides; secrets shown as ***) and exit.
    #[arg(long)]
    pub check: bool,
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<(), crate::BoxError> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        #[cfg(feature = "testbed")]
        Command::Sim(args) => crate::testbed::sim::run(args).await,
        #[cfg(feature = "testbed")]
        Command::Bench(args) => crate::testbed::bench::run(args).await,
        #[cfg(feature = "testbed")]
        Command::Demo(args) => crate::testbed::demo::run(args).await,
    }
}

async fn serve(args: ServeArgs) -> Result<(), crate::BoxError> {
    let config = Config::load(args.config.as_deref())?;
    if args.check {
        // Everything `serve` builds, built and dropped: a file that does not load stops the check
        // as it would stop the start, its key named. Nothing binds or connects.
        Server::check(&config)?;
        // Itself a config `serve --check` accepts, and that reads back to this one (but for the
        // secrets), so it can be saved, diffed and edited.
        crate::stdout::print(format_args!(
            "# The configuration in effect: the file, the defaults for what it leaves out, the \
             environment's overrides. Secrets are shown as \"{}\".\n{}",
            crate::config::REDACTED,
            config.to_toml()?
        ))?;
        return Ok(());
    }
    // Every subsystem first, then the listeners: a start that cannot be whole stops before it
    // binds, and before it says it is serving.
    let metrics = Arc::new(crate::metrics::Metrics::new(&config)?);
    let server = Server::new(config.clone(), metrics)?.with_config_source(args.config.clone());
    // The environment wins over the file (Config::load), so an address that cannot be bound is
    // named by the variable that set it, or else by its key.
    let origins = crate::server::ListenOrigins::from_env(|var| std::env::var(var).is_ok());
    let (traffic, admin) = crate::server::bind_from(&config, &origins).await?;
    server.verify_budget_store().await?;
    tracing::info!(
        listen = %config.server.listen,
        admin = %config.server.admin_listen,
        pools = ?config
            .effective_pools()
            .iter()
            .map(|pool| format!("{}={:?} balance={:?}", pool.name, pool.urls, pool.balance))
            .collect::<Vec<_>>(),
        "tokenmeter serving"
    );
    // SIGHUP reloads the config (see server::reload).
    tokio::spawn(crate::server::reload::on_sighup(server.reloads()));
    server.run(traffic, admin, crate::shutdown::signal()).await;
    Ok(())
}
