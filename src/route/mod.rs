//! Routing: which backend a request goes to, and keeping the backends healthy.
//!
//! A long prompt admitted to a replica that is decoding for many chat users stalls all of their
//! token streams for the length of its prefill. The router protects decode latency by sending long
//! prompts to a pool of replicas tuned for prefill and short ones to a pool tuned for decode.
//!
//! The data path, per request (between the meter, which buffered the body, and forwarding):
//! 1. [`estimate`]: the prompt text's bytes (chat `messages`, completions `prompt`) times the
//!    model's tokens-per-byte ratio, which every response's `usage.prompt_tokens` calibrates;
//! 2. [`rules`]: ordered rules (prompt tokens, model, path) give the pool, then its fallbacks;
//! 3. [`balance`]: power of two choices among the pool's healthy backends on the pool's load
//!    (streams in flight, or prompt tokens not yet past their first byte), kept by a
//!    [`pools::LoadGuard`] that the response body carries to the end of the stream;
//! 4. [`layer`]: the tower service that ties these together, retries a failure before the first
//!    response byte on another backend, and reports to passive [`health`].
//!
//! Around it, [`probe`] runs the background tasks: DNS re-resolution of a pool's name, active
//! `GET /health` checks, and scraping of vLLM's queue and KV-cache gauges.
//!
//! With no `[[pools]]` configured, `upstream.urls` forms one pool named `default` and no rule
//! applies: a sidecar is one line of config.
//!
//! ```no_run
//! # use tokenmeter::{config::Config, meter::layer::MeterLayer, metrics::Metrics, proxy, route};
//! # use std::sync::Arc;
//! let config = Config::default();
//! let metrics = Arc::new(Metrics::new(&config).unwrap());
//! let router = Arc::new(route::Router::from_config(&config, Arc::clone(&metrics)).unwrap());
//! let stack = tower::ServiceBuilder::new()
//!     .layer(MeterLayer::new(&config, metrics))
//!     .layer(route::RouteLayer::new(router))
//!     .service(proxy::Forward::new(proxy::client::build(&config.upstream), &config.upstream));
//! ```
pub mod balance;
pub mod estimate;
pub mod health;
pub mod layer;
pub mod pools;
pub mod probe;
pub mod rules;
pub mod tokenize;

pub use estimate::{Calibrator, PromptEstimate, PromptSize};
pub use layer::{PoolSlot, Route, RouteLayer, Router};

/// Why the router could not be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("pool {pool:?}: {source}")]
    Target {
        pool: String,
        source: crate::proxy::upstream::UpstreamError,
    },
    #[error("rule {index}: no pool named {pool:?}")]
    UnknownPool { index: usize, pool: String },
}
