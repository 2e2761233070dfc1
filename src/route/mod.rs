//! Routing: which backend a request goes to, and keeping the backends healthy.
//!
//! A long prompt admitted to a replica that is decoding for many chat users stalls all of their
//! token streams for the length of its prefill. The router protects decode latency by sending long
//! prompts to a pool of replicas tuned for prefill and short ones to a pool tuned for decode.
//!
//! The unit is the [`pool::Pool`]: its [`members`] (backends, DNS, health), how a request chooses
//! among them (balancing, an [`affinity`], or the latency models' [`placement`] with its gateway
//! queue) and its [`handoff`] to a prefill pool. The [`Router`] is the list of pools, the
//! [`rules`] that plan for them, the prompt calibration and the [`settings`].
//!
//! Per request, in two phases, three where a pool hands its prefills off (the stack reads
//! `admission -> meter -> plan -> dispatch -> [handoff ->] forward`):
//! 1. the **plan** ([`plan`], [`Plan`], once the meter has read the body):
//!    [`estimate`] measures the prompt (text bytes times the model's tokens-per-byte ratio, which
//!    every finished request's `usage.prompt_tokens` calibrates at the finish point, and
//!    [`tokenize`] asks a backend's own tokenizer while a model is untrusted); [`rules`] list the
//!    candidate pools, best first;
//! 2. the **dispatch** ([`dispatch`], [`Dispatch`], before forwarding): in a pool with an
//!    [`affinity`], the backend whose prompt cache likely holds the prompt's prefix (or a session's
//!    home) goes first, within a load bound; otherwise [`balance`] picks a backend
//!    by power of two choices on the pool's load (streams in flight, or prompt tokens not yet past
//!    their first byte), kept by a [`backend::LoadGuard`] that the response body carries to the end
//!    of the stream; a failure before the first response byte is retried on another backend;
//!    every outcome feeds passive [`health`];
//! 3. the **handoff** ([`handoff`], [`Handoff`], only when a pool has `[pools.handoff]`):
//!    prefill/decode disaggregation. A long prompt prefills on the pool's prefill pool and its KV
//!    cache moves to the decode backend the dispatch chose, so its prefill never stalls the
//!    streams that backend is decoding; any failure of that phase leaves the decode backend to
//!    serve the whole request.
//!
//! Around it, [`probe`] runs the background tasks: DNS re-resolution of a pool's name, active
//! health checks, scraping of vLLM's queue and KV-cache gauges, and the checks that confirm a
//! run of answer failures.
//!
//! With no `[[pools]]` configured, `upstream.urls` forms one pool named `default` and no rule
//! applies: a sidecar is one line of config.
//!
//! ```no_run
//! # use tokenmeter::{config::Config, metrics::Metrics, proxy, route};
//! # use tokenmeter::proxy::phase::Then;
//! # use std::sync::Arc;
//! let config = Config::default();
//! let metrics = Arc::new(Metrics::new(&config).unwrap());
//! let router = Arc::new(route::Router::from_config(&config, Arc::clone(&metrics)).unwrap());
//! let forward = proxy::Forward::new(proxy::client::build(&config.upstream), &config.upstream);
//! let phases = Then::new(
//!     route::Plan::new(Arc::clone(&router)),
//!     Then::new(route::Dispatch::new(router), forward),
//! );
//! ```
pub mod affinity;
pub mod backend;
pub mod balance;
pub mod dispatch;
pub mod estimate;
pub mod fleet;
pub mod handoff;
pub mod health;
pub mod members;
pub mod placement;
pub mod plan;
pub mod pool;
pub mod probe;
pub mod record;
pub mod replay;
mod router;
pub mod rules;
pub mod series;
pub mod settings;
pub mod tokenize;

pub use dispatch::Dispatch;
pub use handoff::Handoff;
pub use plan::Plan;
pub use router::Router;

/// Why the router could not be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("pool {pool:?}: {source}")]
    Target {
        pool: String,
        source: crate::upstream::UpstreamError,
    },
    #[error("rule {index}: no pool named {pool:?}")]
    UnknownPool { index: usize, pool: String },
    #[error("pool {pool:?}: its handoff names no pool {prefill:?}")]
    HandoffPool { pool: String, prefill: String },
    /// A TLS table of `https://` backends does not load (the error names its key).
    #[error(transparent)]
    Tls(crate::config::ConfigError),
    /// The fleet's store cannot be opened.
    #[error("fleet.store: {0}")]
    Fleet(#[from] crate::store::OpenError),
}
