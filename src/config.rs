//! Typed configuration: defaults, validation, environment overrides.
//!
//! Long on purpose: the root table: its defaults, environment overrides and the check that ties
//! them to config/tokenmeter.toml, which must change together.
//!
//! The shipped `config/tokenmeter.toml` holds every key with its default value; a unit test keeps the
//! file and [`Config::default`] identical, so `tokenmeter serve` without `--config` behaves exactly as
//! with the shipped file. Unknown keys and bad values are rejected at start with the full key path
//! (`upstream.idle_timeout: invalid duration ...`), because a sidecar that silently ignores a typo'd
//! SLO target reports the wrong attainment for weeks.
//!
//! The config also serializes ([`Config::to_toml`], what `serve --check` prints): back to TOML
//! that reads to the same config, durations as the human strings it accepts, secrets replaced by
//! [`REDACTED`] (a URL's password, the tracing exporter's header values).
//!
//! This file holds the types and their defaults; each table's own types are in a file of its
//! own, and so are reading a config (`load.rs`: TOML, a file, the environment), checking it
//! (`validate.rs`), how values are spelled (`spelling.rs`) and the error (`error.rs`), so that
//! they all depend on this file and it depends only on the tables.
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use autoscale::AutoscaleConfig;
pub(crate) use budgets::ENV_BUDGET_STORE;
pub use budgets::{BudgetsConfig, Counts, Limits, OnStoreError, StoreTlsConfig, StoreUrl};
pub use error::ConfigError;
pub use fleet::FleetConfig;
pub(crate) use fleet::ENV_FLEET_STORE;
pub use handoff::{HandoffConfig, HandoffProtocol};
pub use load::{ENV_ADMIN_LISTEN, ENV_LISTEN};
pub use queue::{OnDeadline, QueueConfig};
pub(crate) use routing::DEFAULT_POOL;
pub use routing::{Affinity, BalanceLoad, PoolConfig, PrefillHeavy, RoutingConfig, RuleConfig};
pub use slo::{SloConfig, SloTargets, TargetsOverride};
pub use spelling::REDACTED;
pub(crate) use tenants::ENV_TENANT_KEYS_FILE;
pub use tenants::{Anonymous, CertField, TenantSource, TenantsConfig, UsageConfig};
pub use tls::{ServerTlsConfig, UpstreamTlsConfig};
pub use tracing::{ExportSettings, OtlpProtocol, Sampler, TracingConfig};

mod autoscale;
mod budgets;
mod error;
mod fleet;
mod handoff;
mod load;
mod queue;
mod routing;
mod slo;
mod spelling;
mod tenants;
pub mod tls;
pub mod tracing;
mod validate;

use spelling::secret_urls;

/// The whole configuration of `tokenmeter serve`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub upstream: UpstreamConfig,
    pub metering: MeteringConfig,
    pub slo: SloConfig,
    pub buckets: BucketConfig,
    /// Prompt-length estimation, health and retry settings of the router.
    pub routing: RoutingConfig,
    /// Named backend pools (`[[pools]]`); none = one implicit pool `default` of `upstream.urls`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolConfig>,
    /// Ordered routing rules (`[[rules]]`); the first that matches picks the pool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleConfig>,
    /// OpenTelemetry spans and the `server-timing` header (`[tracing]`).
    pub tracing: TracingConfig,
    /// Who is calling, and the bound on the tenant label (`[tenants]`).
    pub tenants: TenantsConfig,
    /// Gateway replicas that share their load through a store (`[fleet]`).
    pub fleet: FleetConfig,
}

/// Listeners and request limits.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Traffic listener (clients connect here). HTTP/1.1 and h2c on one port.
    pub listen: SocketAddr,
    /// Admin listener: `/metrics`, `/healthz`, `/readyz`. Kept apart from traffic so that metrics are
    /// never exposed to API clients.
    pub admin_listen: SocketAddr,
    /// Accept queue of each listener: connections the kernel completes before the proxy accepts
    /// them (capped by `net.core.somaxconn`). Past it, new clients' SYNs are dropped and they
    /// retry a second later (see `server::listen`).
    pub listen_backlog: u32,
    /// Largest request body buffered for inspection (chat and completions requests); larger -> 413.
    pub max_request_body_bytes: usize,
    /// How long in-flight streams may run after SIGTERM before they are cut.
    #[serde(with = "spelling::human_duration")]
    pub shutdown_grace: Duration,
    /// Open traffic connections; one more is answered 503 (`retry-after`) and closed at once.
    pub max_connections: usize,
    /// Requests in flight on the traffic port (head to end of response body), over all
    /// connections and both protocols; one more is answered 503 (`retry-after`).
    pub max_streams: usize,
    /// A client must send a whole HTTP/1 request head within this long (slowloris).
    #[serde(with = "spelling::human_duration")]
    pub header_read_timeout: Duration,
    /// Largest request head (HTTP/1 read buffer; HTTP/2 header list); larger -> 431 / reset.
    pub max_header_bytes: usize,
    /// Most headers in one HTTP/1 request; more -> 431.
    pub max_headers: usize,
    /// Concurrent streams one HTTP/2 connection may open (advertised in SETTINGS).
    pub http2_max_concurrent_streams: u32,
    /// TLS on the traffic listener (ALPN `h2`, `http/1.1`); absent: plain HTTP/1.1 and h2c.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<ServerTlsConfig>,
    /// TLS on the admin listener; absent: plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_tls: Option<ServerTlsConfig>,
    /// Reload the config file when its content changes (looked at every `watch_interval`), as on
    /// SIGHUP: a Kubernetes ConfigMap update then applies without a restart.
    pub watch_config: bool,
    #[serde(with = "spelling::human_duration")]
    pub watch_interval: Duration,
}

/// Upstream inference servers and the timeouts of talking to them.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Base URLs (`http://host:port`): the implicit pool `default` when no `[[pools]]` are configured.
    #[serde(serialize_with = "secret_urls")]
    pub urls: Vec<String>,
    /// TCP connect timeout.
    #[serde(with = "spelling::human_duration")]
    pub connect_timeout: Duration,
    /// From sending the request to the response head (status and headers).
    #[serde(with = "spelling::human_duration")]
    pub response_timeout: Duration,
    /// Longest silence between two body frames (and before the first one); reset by every frame, so
    /// long streams are fine. Long prefills under queueing need a generous value.
    #[serde(with = "spelling::human_duration")]
    pub idle_timeout: Duration,
    /// Bound on a whole request, head to end of body; `"0s"` = none.
    #[serde(with = "spelling::human_duration")]
    pub total_timeout: Duration,
    /// Idle keep-alive connections to upstreams are closed after this long.
    #[serde(with = "spelling::human_duration")]
    pub pool_idle_timeout: Duration,
    /// Idle keep-alive connections kept per upstream.
    pub pool_max_idle_per_host: usize,
    /// TLS to `https://` upstreams (a pool's own `tls` table replaces it for that pool).
    pub tls: UpstreamTlsConfig,
}

/// How streams are metered.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeteringConfig {
    /// Ask the backend for `usage` on streams whose client did not (and strip the usage chunk from what
    /// the client receives), so token counts are exact.
    pub inject_usage: bool,
    /// An inter-token gap at least this long is counted as a stall.
    #[serde(with = "spelling::human_duration")]
    pub stall_threshold: Duration,
    /// Model names always given their own label value.
    pub models: Vec<String>,
    /// Further model names observed at run time that get their own label value; the rest are `other`.
    pub max_observed_models: usize,
    /// Cap on one SSE line (and one event's data); longer lines are skipped and counted.
    pub max_sse_line_bytes: usize,
}

/// hyper's HTTP/1 read buffer cannot be smaller (it asserts), so neither can `server.max_header_bytes`.
pub(crate) const MIN_HEADER_BYTES: usize = 8192;

/// Histogram bucket upper bounds, in seconds (token counts for `tokens`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BucketConfig {
    pub ttft: Vec<f64>,
    pub itl: Vec<f64>,
    pub tpot: Vec<f64>,
    pub e2e: Vec<f64>,
    pub tokens: Vec<f64>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8000)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            listen_backlog: 4096,
            max_request_body_bytes: 16 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(30),
            max_connections: 10_000,
            max_streams: 8_192,
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            max_headers: 128,
            http2_max_concurrent_streams: 256,
            tls: None,
            admin_tls: None,
            watch_config: false,
            watch_interval: Duration::from_secs(5),
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            urls: vec!["http://127.0.0.1:8001".to_owned()],
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            total_timeout: Duration::ZERO,
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 1024,
            tls: UpstreamTlsConfig::default(),
        }
    }
}

impl Default for MeteringConfig {
    fn default() -> Self {
        Self {
            inject_usage: true,
            stall_threshold: Duration::from_millis(500),
            models: Vec::new(),
            max_observed_models: 32,
            max_sse_line_bytes: 1024 * 1024,
        }
    }
}

impl Default for BucketConfig {
    fn default() -> Self {
        // Finer than OpenTelemetry's below 50 ms, where decode steps (5-35 ms) live.
        let latency = vec![
            0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
            0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 7.5, 10.0, 20.0,
            40.0, 80.0,
        ];
        let gap = vec![
            0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03,
            0.035, 0.04, 0.05, 0.06, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
        ];
        Self {
            ttft: latency,
            itl: gap.clone(),
            tpot: gap,
            e2e: vec![
                0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96,
                81.92, 163.84, 327.68, 655.36,
            ],
            tokens: vec![
                1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
                4194304.0, 16777216.0, 67108864.0,
            ],
        }
    }
}

/// The shipped configuration file, which doubles as the documentation of every key.
pub const SHIPPED: &str = include_str!("../config/tokenmeter.toml");

impl Config {
    /// The pools requests are routed to: the configured ones, or the implicit `default` pool of
    /// `upstream.urls` (so a sidecar config stays a one-liner); each with `balance = "auto"`
    /// resolved ([`PoolConfig::resolve_balance`]).
    pub fn effective_pools(&self) -> Vec<PoolConfig> {
        let mut pools = if self.pools.is_empty() {
            vec![PoolConfig {
                name: DEFAULT_POOL.to_owned(),
                urls: self.upstream.urls.clone(),
                ..PoolConfig::default()
            }]
        } else {
            self.pools.clone()
        };
        let prefill_pools: Vec<String> = pools
            .iter()
            .filter_map(|pool| Some(pool.handoff.as_ref()?.prefill_pool.clone()))
            .collect();
        for pool in &mut pools {
            pool.balance = pool.resolve_balance(prefill_pools.contains(&pool.name));
        }
        pools
    }
}

#[cfg(test)]
mod tests;
