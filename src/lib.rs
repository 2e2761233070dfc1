//! tokenmeter: a transparent reverse proxy that meters LLM token streams.
//!
//! Crate map (the data path, outside in):
//! - [`config`]: typed configuration, defaults, validation, environment overrides.
//! - [`server`]: listeners (traffic and admin), the tower stack, graceful shutdown.
//! - [`limits`]: admission limits on the traffic port (connections, requests in flight -> 503).
//! - [`framing`]: the request-smuggling guard (`transfer-encoding` with `content-length` -> 400).
//! - [`meter`]: request inspection, usage injection, the metered response body.
//! - [`sse`]: the byte-level, incremental Server-Sent Events scanner.
//! - [`route`]: pools, rules, prompt-length estimate, power-of-two-choices balancing, health.
//! - [`proxy`]: forwarding to upstreams over one pooled client, header hygiene, errors.
//! - [`metrics`]: metric names, buckets, bounded labels, the Prometheus exporter;
//!   [`exposition`]: reading the text format back (demo, tests).
//! - [`shutdown`]: SIGTERM / Ctrl-C, for `serve` and the demo.
//! - `testbed`: a simulated vLLM replica, a load generator, and the one-command demo; behind the
//!   `testbed` cargo feature (on by default), which the sidecar build leaves out.
pub mod cli;
pub mod config;
pub mod exposition;
pub mod framing;
pub mod limits;
pub mod meter;
pub mod metrics;
pub mod proxy;
pub mod route;
pub mod server;
pub mod shutdown;
pub mod sse;
#[cfg(feature = "testbed")]
pub mod testbed;

/// The boxed error type used at the command-line boundary.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
