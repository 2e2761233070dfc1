//! `tokenmeter sim`: a simulated vLLM replica.
//!
//! An OpenAI-compatible HTTP/1.1 server (`/v1/chat/completions`, `/v1/completions`,
//! `/v1/models`, `/health`, `/metrics`), which also speaks the OpenAI Responses
//! (`/v1/responses`) and Anthropic Messages (`/v1/messages`) stream dialects, whose timing comes from a model of vLLM V1's
//! continuous-batching engine rather than from per-request sleeps, so load, batching and
//! long-prompt stalls show up in TTFT and ITL the way they do on a GPU.
//!
//! - [`scheduler`]: the step planner (decode first, chunked prefill in arrival order,
//!   `max_num_seqs`, KV admission), pure and clock-free.
//! - [`profile`]: [`SimConfig`], the named profiles and the roofline step time.
//! - [`engine`]: the loop that runs steps on absolute deadlines and fans out progress.
//! - [`tokenizer`]: the deterministic prompt-length rule ([`count_prompt_tokens`]).
//! - [`api`]: what the four generation APIs share (endpoint, parsed request, content, ids); it
//!   depends on none of the modules below, which all point at it.
//! - [`request`], [`stream`], [`body`], [`server`]: request parsing, vLLM's exact chunk shapes,
//!   the one-frame-per-chunk body, and the routes.
//! - [`responses`], [`messages`]: the Responses and Messages requests and event shapes, on the
//!   same engine timing.
//! - [`metrics`]: vLLM's metric names and buckets, one registry per replica.
//! - [`kv_transfer`]: vLLM's prefill/decode disaggregation protocol (`kv_transfer_params`).
//!
//! Output timing, as in vLLM: nothing until a request's prefill completes; that step emits the
//! role chunk and the first content chunk back to back; then one chunk per step (with
//! `tokens_per_chunk` tokens in it). Every request generates exactly `max_tokens` tokens and
//! finishes with `"length"`. A client that disconnects is aborted at the next step boundary,
//! freeing its batch slot and KV.
//!
//! Prefill/decode disaggregation, as vLLM's KV connectors (NIXL) do it: every replica can play
//! both roles. A chat or completions request with `"kv_transfer_params": {"do_remote_decode":
//! true, ...}` (and `stream` false) runs as usual and its JSON answer gains a last member
//! `"kv_transfer_params"` naming the prompt's KV blocks: `remote_block_ids` (one id per 16-token
//! block), `remote_engine_id`, `remote_host`, `remote_port`. The same request sent to another
//! replica with those params (`do_remote_prefill` true) first pulls the KV, for
//! `prompt_tokens * kv_bytes_per_token / kv_link_bandwidth` (times `time_scale`), then is
//! scheduled with every prompt token but the last already computed, so its first token costs one
//! decode-sized step. Params that do not fit the request's own prompt are a 400; the knob
//! `kv_transfer_fault` makes the prefill side offer `null` or the decode side's pull fail (500).
//! `/metrics` counts the tokens each replica sent and received
//! (`vllm:kv_transfer_tokens_total`) and computed (`vllm:prompt_tokens_by_source_total`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), tokenmeter::testbed::sim::SimError> {
//! use tokenmeter::testbed::sim::{spawn, SimConfig};
//! let mut config = SimConfig::profile("llama-3.1-8b-h100").expect("known profile");
//! config.time_scale = 2.0; // half speed on a slow machine
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let sim = spawn(listener, config).await?;
//! println!("replica at http://{}", sim.local_addr());
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub mod api;
pub mod body;
pub mod engine;
mod error;
pub mod kv_transfer;
pub mod messages;
pub mod metrics;
pub mod overrides;
pub mod prefix_cache;
pub mod profile;
pub mod request;
pub mod responses;
pub mod scheduler;
pub mod server;
pub mod stream;
pub mod tokenize;
pub mod tokenizer;

pub use error::SimError;
pub use overrides::SimOverrides;
pub use profile::SimConfig;
pub use tokenizer::{
    count_chat_tokens, count_prompt_tokens, CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PER_REQUEST,
};

/// Command-line arguments of `tokenmeter sim`. Every profile knob can be overridden; flags
/// beat `--config`, which beats the profile.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// TOML file of overrides (the flags' names with `_`, e.g. `max_num_seqs = 64`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The knobs (boxed: they are many, and the CLI enum should stay small).
    #[command(flatten)]
    pub overrides: Box<SimOverrides>,
}

impl SimArgs {
    /// The validated configuration these arguments describe.
    pub fn to_config(&self) -> Result<SimConfig, SimError> {
        let file = match &self.config {
            Some(path) => SimOverrides::from_file(path)?,
            None => SimOverrides::default(),
        };
        overrides::resolve(&file, &self.overrides)
    }
}

/// Runs the simulated replica until interrupted (Ctrl-C).
pub async fn run(args: SimArgs) -> Result<(), crate::BoxError> {
    let config = args.to_config()?;
    // A burst of clients must not overflow the accept queue (see `server::listen`).
    let listener = crate::server::listen(args.listen, 4096).map_err(|source| {
        format!(
            "cannot bind the sim listener on {} (--listen): {source}",
            args.listen
        )
    })?;
    let model = config.model.clone();
    let sim = spawn(listener, config).await?;
    eprintln!(
        "tokenmeter sim: serving {model} on http://{}",
        sim.local_addr()
    );
    tokio::signal::ctrl_c().await?;
    sim.shutdown().await;
    Ok(())
}

/// A running replica. Dropping it detaches the replica (it runs until the runtime ends);
/// call [`SimHandle::shutdown`] to stop it.
#[derive(Debug)]
pub struct SimHandle {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl SimHandle {
    /// The address the replica listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, ends the engine, returns when the server task is gone.
    pub async fn shutdown(self) {
        let SimHandle {
            addr: _,
            shutdown,
            task,
        } = self;
        shutdown.send_replace(true);
        if let Err(err) = task.await {
            tracing::warn!(%err, "sim: server task failed");
        }
    }
}

/// Starts the replica on an already-bound listener (tests bind 127.0.0.1:0).
pub async fn spawn(listener: TcpListener, config: SimConfig) -> Result<SimHandle, SimError> {
    config.validate()?;
    let addr = listener.local_addr()?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let metrics = Arc::new(metrics::SimMetrics::new(&config.model));
    let (engine, engine_task) =
        engine::start(config.clone(), Arc::clone(&metrics), shutdown_rx.clone());
    let state = Arc::new(server::State {
        config,
        engine,
        metrics,
        connector: kv_transfer::Connector::new(addr),
    });
    let task = tokio::spawn(server::serve(listener, state, shutdown_rx, engine_task));
    Ok(SimHandle {
        addr,
        shutdown,
        task,
    })
}
