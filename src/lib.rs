//! tokenmeter: a transparent reverse proxy that meters LLM token streams.
//!
//! Crate map. The data path, outside in, and every arrow points one way
//! (`server -> meter -> route -> proxy`):
//! - [`server`]: listeners (traffic and admin), the tower stack, graceful shutdown, admission
//!   limits, the request-smuggling guard, the protocol sniff.
//! - [`meter`]: reads a generation request once, injects `include_usage`, asks the router for a
//!   plan, and meters the response body (TTFT, ITL, TPOT, tokens, outcome).
//! - [`route`]: the plan (prompt estimate, rules) and the dispatch (balancing, retries, health)
//!   over pools of backends.
//! - [`proxy`]: forwarding to the chosen backend over tokenmeter's own HTTP/1.1 client, header
//!   hygiene, timeouts, and the errors a client sees.
//!
//! The vocabulary they share, which depends on none of them:
//! - [`context`]: the request context every phase fills in.
//! - [`request`]: what a generation request's body says, read in one walk.
//! - [`dialect`]: which API a stream speaks and what its events mean.
//! - [`sse`]: cutting a response stream into events (SSE, NDJSON).
//! - [`upstream`]: where a request goes, and the guard it holds there.
//! - [`tls`]: TLS on the listeners (reloaded certificates, mTLS) and to `https://` upstreams.
//! - [`metrics`]: metric names, buckets, bounded labels, the Prometheus exporter, and reading the
//!   text format back.
//! - [`config`]: typed configuration, defaults, validation, environment overrides.
//! - [`shutdown`]: SIGTERM / Ctrl-C, for `serve` and the demo.
//!
//! And the testbed, `testbed` (a simulated vLLM replica, a load generator, the one-command demo,
//! driven from [`cli`]), behind the `testbed` cargo feature (on by default), which the sidecar
//! build leaves out.
pub mod cli;
pub mod config;
pub mod context;
pub mod dialect;
pub mod meter;
pub mod metrics;
pub mod proxy;
pub mod request;
pub mod route;
pub mod server;
pub mod shutdown;
pub mod sse;
#[cfg(feature = "testbed")]
pub mod testbed;
pub mod tls;
pub mod upstream;

/// The boxed error type used at the command-line boundary.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
