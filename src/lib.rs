//! tokenmeter: a transparent reverse proxy that meters LLM token streams.
//!
//! Crate map. The data path, outside in: the stack is `admission -> meter -> plan -> dispatch ->
//! forward`, and every arrow between modules points one way:
//! - [`server`]: listeners (traffic and admin), TLS accept, the stack revisions (composed here:
//!   the only module that names both `meter` and `route`), graceful shutdown, admission limits, the
//!   request-smuggling guard, HTTP/2 abuse budgets, the protocol sniff, live reload.
//! - [`meter`]: reads a generation request once, injects `include_usage`, meters the response
//!   body (TTFT, ITL, TPOT, tokens), and records the per-request series when a request ends.
//! - [`route`]: the plan (prompt estimate, rules) and the dispatch (balancing, affinity, retries,
//!   health) over pools of backends, as two layers; its calibration learns when requests end.
//! - [`proxy`]: forwarding to the chosen backend over tokenmeter's own HTTP/1.1 client, header
//!   hygiene, timeouts, and the errors a client sees.
//! - [`tenant`]: who is calling (a header, or an API key by its hash), and each tenant's usage
//!   and SLO attainment under a bounded label; its finish hook is composed by `server`.
//! - [`trace`]: where each TTFT went and the proxy's own time (histograms, from the context's
//!   phase marks), and OpenTelemetry spans over OTLP; its finish hook is composed by `server`.
//!
//! The vocabulary they share, which depends on none of them:
//! - [`context`]: the request context every phase fills in, and the one place a request ends
//!   ([`context::finish`]): every ending runs the stack's finish hooks once.
//! - [`request`]: what a generation request's body says, read in one walk.
//! - [`dialect`]: which API a stream speaks and what its events mean.
//! - [`sse`]: cutting a response stream into events (SSE, NDJSON).
//! - [`upstream`]: where a request goes, and the guard it holds there.
//! - [`tls`]: TLS on the listeners (reloaded certificates, mTLS) and to `https://` upstreams.
//! - [`metrics`]: what every subsystem's series share (recorder, histograms, expositions, label
//!   capping); each subsystem declares its own series.
//! - [`config`]: typed configuration, defaults, validation, environment overrides.
//! - [`shutdown`]: SIGTERM / Ctrl-C, for `serve` and the demo.
//! - `stdout`: a command's output, ended quietly by a closed pipe.
//!
//! And the testbed, `testbed` (a simulated vLLM replica, a load generator, the one-command demo,
//! driven from [`cli`]), behind the `testbed` cargo feature (on by default), which the sidecar
//! build leaves out.
//!
//! **The public API** is what an embedder uses, re-exported below: a [`Config`], a proxy run in
//! the foreground ([`Server`]) or spawned on bound listeners ([`spawn`], [`spawn_with_hooks`],
//! giving a [`ServerHandle`] to reload and stop it), and the hook that hears of every finished
//! request ([`FinishHook`], with the [`Finished`] request, its [`RequestContext`] and its
//! [`Outcome`]); the testbed for tests of your own. `tests/e2e/embedder.rs` is an example
//! embedder that compiles against exactly this. The modules stay public for the crate's own
//! tests, benchmarks and fuzz targets, which reach the parsers and the series inside; inside a
//! module, what no other module names is `pub(crate)` or narrower.
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
mod stdout;
pub mod store;
pub mod tenant;
#[cfg(feature = "testbed")]
pub mod testbed;
pub mod tls;
pub mod trace;
pub mod upstream;

/// The boxed error type used at the command-line boundary.
pub use config::Config;
pub use context::{FinishHook, Finished, Outcome, RequestContext};
pub use server::{spawn, spawn_with_hooks, Server, ServerError, ServerHandle};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
