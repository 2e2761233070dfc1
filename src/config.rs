//! Typed configuration: defaults, validation, environment overrides.
//!
//! The shipped `config/tokenmeter.toml` holds every key with its default value; a unit test keeps the
//! file and [`Config::default`] identical, so `tokenmeter serve` without `--config` behaves exactly as
//! with the shipped file. Unknown keys and bad values are rejected at start with the full key path
//! (`upstream.idle_timeout: invalid duration ...`), because a sidecar that silently ignores a typo'd
//! SLO target reports the wrong attainment for weeks.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use tls::{ServerTlsConfig, UpstreamTlsConfig};

pub mod tls;

/// Where a configuration problem was found, and what it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config: {key}: {message}")]
    Invalid { key: String, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: &'static str, message: String },
}

/// The whole configuration of `tokenmeter serve`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
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
    pub pools: Vec<PoolConfig>,
    /// Ordered routing rules (`[[rules]]`); the first that matches picks the pool.
    pub rules: Vec<RuleConfig>,
}

/// Listeners and request limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
    #[serde(deserialize_with = "duration")]
    pub shutdown_grace: Duration,
    /// Open traffic connections; one more is answered 503 (`retry-after`) and closed at once.
    pub max_connections: usize,
    /// Requests in flight on the traffic port (head to end of response body), over all
    /// connections and both protocols; one more is answered 503 (`retry-after`).
    pub max_streams: usize,
    /// A client must send a whole HTTP/1 request head within this long (slowloris).
    #[serde(deserialize_with = "duration")]
    pub header_read_timeout: Duration,
    /// Largest request head (HTTP/1 read buffer; HTTP/2 header list); larger -> 431 / reset.
    pub max_header_bytes: usize,
    /// Most headers in one HTTP/1 request; more -> 431.
    pub max_headers: usize,
    /// Concurrent streams one HTTP/2 connection may open (advertised in SETTINGS).
    pub http2_max_concurrent_streams: u32,
    /// TLS on the traffic listener (ALPN `h2`, `http/1.1`); absent: plain HTTP/1.1 and h2c.
    pub tls: Option<ServerTlsConfig>,
    /// TLS on the admin listener; absent: plain HTTP.
    pub admin_tls: Option<ServerTlsConfig>,
    /// Reload the config file when its content changes (looked at every `watch_interval`), as on
    /// SIGHUP: a Kubernetes ConfigMap update then applies without a restart.
    pub watch_config: bool,
    #[serde(deserialize_with = "duration")]
    pub watch_interval: Duration,
}

/// Upstream inference servers and the timeouts of talking to them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Base URLs (`http://host:port`): the implicit pool `default` when no `[[pools]]` are configured.
    pub urls: Vec<String>,
    /// TCP connect timeout.
    #[serde(deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// From sending the request to the response head (status and headers).
    #[serde(deserialize_with = "duration")]
    pub response_timeout: Duration,
    /// Longest silence between two body frames (and before the first one); reset by every frame, so
    /// long streams are fine. Long prefills under queueing need a generous value.
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// Bound on a whole request, head to end of body; `"0s"` = none.
    #[serde(deserialize_with = "duration")]
    pub total_timeout: Duration,
    /// Idle keep-alive connections to upstreams are closed after this long.
    #[serde(deserialize_with = "duration")]
    pub pool_idle_timeout: Duration,
    /// Idle keep-alive connections kept per upstream.
    pub pool_max_idle_per_host: usize,
    /// TLS to `https://` upstreams (a pool's own `tls` table replaces it for that pool).
    pub tls: UpstreamTlsConfig,
}

/// How streams are metered.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeteringConfig {
    /// Ask the backend for `usage` on streams whose client did not (and strip the usage chunk from what
    /// the client receives), so token counts are exact.
    pub inject_usage: bool,
    /// An inter-token gap at least this long is counted as a stall.
    #[serde(deserialize_with = "duration")]
    pub stall_threshold: Duration,
    /// Model names always given their own label value.
    pub models: Vec<String>,
    /// Further model names observed at run time that get their own label value; the rest are `other`.
    pub max_observed_models: usize,
    /// Cap on one SSE line (and one event's data); longer lines are skipped and counted.
    pub max_sse_line_bytes: usize,
}

/// Service-level objectives; each target is also made an exact histogram bucket edge.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SloConfig {
    #[serde(deserialize_with = "duration")]
    pub ttft: Duration,
    #[serde(deserialize_with = "duration")]
    pub tpot: Duration,
}

/// Router settings shared by every pool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// Tokens per byte of prompt text assumed for a model before any response calibrated it.
    pub prior_tokens_per_byte: f64,
    /// Per-model priors (exact model names as requests give them), for models whose tokenizer
    /// is known to differ from `prior_tokens_per_byte`; a model listed here is trusted from its
    /// first request (no `/tokenize` wait).
    pub model_tokens_per_byte: BTreeMap<String, f64>,
    /// While a model's ratio is uncalibrated, ask a backend's `/tokenize` for the prompt's count:
    /// at once (bounded by `tokenize_timeout`) when the prompt's length decides its pool under
    /// the prior's uncertainty, else in the background to calibrate the next requests.
    pub tokenize: bool,
    /// Longest wait for `/tokenize` before routing by the estimate.
    #[serde(deserialize_with = "duration")]
    pub tokenize_timeout: Duration,
    /// Calibration memory, in observations: each response with `usage.prompt_tokens` weighs
    /// `1/calibration_window` against the history (an exponentially weighted tokens/bytes ratio).
    pub calibration_window: u32,
    /// When a request's pool has no healthy backend, try the next matching rule's pool (or the
    /// rule's `fallback`).
    pub fallback: bool,
    /// Attempts on other backends after a connect failure (or a connection that broke before any
    /// response byte); never after the first byte.
    pub retries: u32,
    /// Consecutive failures that eject a backend: connection failures eject outright; answer
    /// failures (5xx, no response head in time) only when the backend's health check then fails.
    pub eject_after_failures: u32,
    /// First ejection length; doubled on each further ejection without a success in between.
    #[serde(deserialize_with = "duration")]
    pub eject_base: Duration,
    /// Longest ejection.
    #[serde(deserialize_with = "duration")]
    pub eject_max: Duration,
    /// How often a pool's `dns` name is resolved again.
    #[serde(deserialize_with = "duration")]
    pub dns_refresh: Duration,
    /// Prefix affinity's block: a prompt's text is cut into blocks of this many bytes, each named
    /// by the hash of its content and every block before it. Every tokenmeter replica in front of
    /// the same backends must use the same value.
    pub prefix_block_bytes: usize,
    /// A text prompt (no chat roles) is known by its first this-many blocks: the key its home
    /// backend is hashed from (a chat is known by its messages up to the first user message).
    pub prefix_key_blocks: usize,
}

/// How a pool chooses among its healthy backends (power of two choices on a load).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BalanceLoad {
    /// Streams in flight (head to end of stream): what loads a decode replica.
    #[default]
    Streams,
    /// Prompt tokens sent and not yet past their first response byte: what queues on a prefill
    /// replica.
    PromptTokens,
    /// Plain round-robin (a baseline for benchmarks).
    RoundRobin,
}

/// One named pool of interchangeable backends.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// The pool's name: rules refer to it, and it is the `pool` label.
    pub name: String,
    /// Static base URLs (`http://host:port`).
    pub urls: Vec<String>,
    /// `host:port` resolved every `routing.dns_refresh` (a Kubernetes headless Service); every
    /// address becomes a backend, in addition to `urls`.
    pub dns: Option<String>,
    /// The load power-of-two-choices compares.
    pub balance: BalanceLoad,
    /// Interval of active `GET health_path` checks; `"0s"` = passive health only.
    #[serde(deserialize_with = "duration")]
    pub health_check: Duration,
    /// The backends' health endpoint: polled every `health_check`, and asked to confirm a run of
    /// answer failures before they eject a backend.
    pub health_path: String,
    /// Interval of scraping each backend's `/metrics` (`vllm:num_requests_waiting`,
    /// `vllm:kv_cache_usage_perc`) to weight its load; `"0s"` = off.
    #[serde(deserialize_with = "duration")]
    pub scrape_metrics: Duration,
    /// Which backend a request prefers inside the pool (see [`Affinity`]).
    pub affinity: Affinity,
    /// The backend affinity prefers is overloaded, and the pool's balancing decides instead, when
    /// its streams in flight exceed `affinity_load_factor` x the least-loaded backend's plus
    /// `affinity_load_slack` (consistent hashing with bounded loads).
    pub affinity_load_factor: f64,
    pub affinity_load_slack: u64,
    /// Prompt blocks the pool's prefix index remembers (`affinity = "prefix"`); the least
    /// recently used are forgotten first.
    pub affinity_index_blocks: usize,
    /// TLS to this pool's `https://` backends, instead of `[upstream.tls]` (the whole table).
    pub tls: Option<UpstreamTlsConfig>,
}

/// Which backend of a pool a request prefers, before the pool's balancing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Affinity {
    /// None: the pool's balancing alone (`"none"`).
    #[default]
    None,
    /// The backend that served the longest prefix of the prompt, else the conversation's
    /// rendezvous-hashed home (`"prefix"`): where the backend's prompt cache most likely holds it.
    Prefix,
    /// The rendezvous-hashed home of a client-chosen key, the value of this request header
    /// (`"header:x-session-id"`; the name is lower-cased).
    Header(http::HeaderName),
}

impl<'de> Deserialize<'de> for Affinity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Affinity::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Affinity {
    /// Parses `"none"`, `"prefix"` or `"header:<name>"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "none" => Ok(Self::None),
            "prefix" => Ok(Self::Prefix),
            _ => match text.strip_prefix("header:") {
                Some(name) => http::HeaderName::from_bytes(name.trim().as_bytes())
                    .map(Self::Header)
                    .map_err(|_| format!("{name:?} is not a header name")),
                None => Err(format!(
                    "unknown affinity {text:?} (expected \"none\", \"prefix\" or \"header:<name>\")"
                )),
            },
        }
    }
}

/// One routing rule: every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuleConfig {
    /// The pool requests matching this rule go to.
    pub pool: String,
    /// Matches when the estimated prompt is at least this many tokens.
    pub min_prompt_tokens: Option<u64>,
    /// Matches this model name exactly, or by prefix when it ends in `*`.
    pub model: Option<String>,
    /// Matches this request path exactly, or by prefix when it ends in `*`.
    pub path: Option<String>,
    /// Pool to use when `pool` has no healthy backend (default: the next matching rule's pool).
    pub fallback: Option<String>,
    /// Spill to the fallback pool when the least-loaded backend of `pool` has more than this many
    /// prompt tokens queued (not yet past their first byte).
    pub spill_queue_tokens: Option<u64>,
}

/// hyper's HTTP/1 read buffer cannot be smaller (it asserts), so neither can `server.max_header_bytes`.
pub const MIN_HEADER_BYTES: usize = 8192;

/// Name of the implicit pool formed by `upstream.urls` when no `[[pools]]` are configured.
pub const DEFAULT_POOL: &str = "default";

/// Histogram bucket upper bounds, in seconds (token counts for `tokens`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
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

impl Default for SloConfig {
    fn default() -> Self {
        Self {
            ttft: Duration::from_millis(800),
            tpot: Duration::from_millis(35),
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

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            urls: Vec::new(),
            dns: None,
            balance: BalanceLoad::default(),
            health_check: Duration::ZERO,
            health_path: "/health".to_owned(),
            scrape_metrics: Duration::ZERO,
            affinity: Affinity::None,
            affinity_load_factor: 1.5,
            affinity_load_slack: 4,
            affinity_index_blocks: 65_536,
            tls: None,
        }
    }
}

impl Default for RoutingConfig {
    fn default() -> Self {
        Self {
            prior_tokens_per_byte: 0.25,
            model_tokens_per_byte: BTreeMap::new(),
            tokenize: true,
            tokenize_timeout: Duration::from_millis(250),
            calibration_window: 100,
            fallback: true,
            retries: 2,
            eject_after_failures: 3,
            eject_base: Duration::from_secs(1),
            eject_max: Duration::from_secs(30),
            dns_refresh: Duration::from_secs(5),
            prefix_block_bytes: 128,
            prefix_key_blocks: 8,
        }
    }
}

/// The shipped configuration file, which doubles as the documentation of every key.
pub const SHIPPED: &str = include_str!("../config/tokenmeter.toml");

/// Environment variables a sidecar sets per pod; they win over the file.
pub const ENV_LISTEN: &str = "TOKENMETER_LISTEN";
pub const ENV_ADMIN_LISTEN: &str = "TOKENMETER_ADMIN_LISTEN";
pub const ENV_UPSTREAM: &str = "TOKENMETER_UPSTREAM";

impl Config {
    /// Parses TOML text, naming the full key path of the first problem.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let deserializer = toml::Deserializer::new(text);
        let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let key = err.path().to_string();
            let message = err.inner().message().trim().to_owned();
            ConfigError::Invalid { key, message }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a file, or the shipped defaults when no path is given, then applies the environment.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Self::from_toml(&text)?
            }
            None => Self::default(),
        };
        config.apply_env(|var| std::env::var(var).ok())?;
        Ok(config)
    }

    /// Applies `TOKENMETER_LISTEN`, `TOKENMETER_ADMIN_LISTEN` and `TOKENMETER_UPSTREAM` (a URL, or
    /// several separated by commas). `lookup` is injectable so tests need not touch the process env.
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&'static str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let addr = |var: &'static str, text: String| {
            text.trim()
                .parse::<SocketAddr>()
                .map_err(|err| ConfigError::Env {
                    var,
                    message: format!("{err} (expected HOST:PORT, e.g. 0.0.0.0:8000)"),
                })
        };
        if let Some(text) = lookup(ENV_LISTEN) {
            self.server.listen = addr(ENV_LISTEN, text)?;
        }
        if let Some(text) = lookup(ENV_ADMIN_LISTEN) {
            self.server.admin_listen = addr(ENV_ADMIN_LISTEN, text)?;
        }
        if let Some(text) = lookup(ENV_UPSTREAM) {
            let urls: Vec<String> = text
                .split(',')
                .map(str::trim)
                .filter(|url| !url.is_empty())
                .map(str::to_owned)
                .collect();
            for url in &urls {
                validate_upstream_url(url).map_err(|message| ConfigError::Env {
                    var: ENV_UPSTREAM,
                    message,
                })?;
            }
            if urls.is_empty() {
                return Err(ConfigError::Env {
                    var: ENV_UPSTREAM,
                    message: "is empty".to_owned(),
                });
            }
            self.upstream.urls = urls;
        }
        Ok(())
    }

    /// Checks what serde cannot: value ranges and cross-field rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: key.to_owned(),
            message: message.to_owned(),
        };
        if self.upstream.urls.is_empty() && self.pools.is_empty() {
            return Err(invalid(
                "upstream.urls",
                "needs at least one upstream URL (or configure [[pools]])",
            ));
        }
        for (i, url) in self.upstream.urls.iter().enumerate() {
            validate_upstream_url(url).map_err(|m| invalid(&format!("upstream.urls[{i}]"), &m))?;
        }
        self.upstream.tls.validate("upstream.tls")?;
        for (table, tls) in [
            ("server.tls", &self.server.tls),
            ("server.admin_tls", &self.server.admin_tls),
        ] {
            if let Some(tls) = tls {
                tls.validate(table)?;
            }
        }
        let positive = [
            ("upstream.connect_timeout", self.upstream.connect_timeout),
            ("upstream.response_timeout", self.upstream.response_timeout),
            ("upstream.idle_timeout", self.upstream.idle_timeout),
            ("slo.ttft", self.slo.ttft),
            ("slo.tpot", self.slo.tpot),
            ("metering.stall_threshold", self.metering.stall_threshold),
            ("server.watch_interval", self.server.watch_interval),
        ];
        for (key, value) in positive {
            if value.is_zero() {
                return Err(invalid(key, "must be greater than zero"));
            }
        }
        if self.server.max_request_body_bytes == 0 {
            return Err(invalid(
                "server.max_request_body_bytes",
                "must be greater than zero",
            ));
        }
        self.validate_limits()?;
        if self.metering.max_sse_line_bytes < 1024 {
            return Err(invalid(
                "metering.max_sse_line_bytes",
                "must be at least 1024",
            ));
        }
        let buckets = [
            ("buckets.ttft", &self.buckets.ttft),
            ("buckets.itl", &self.buckets.itl),
            ("buckets.tpot", &self.buckets.tpot),
            ("buckets.e2e", &self.buckets.e2e),
            ("buckets.tokens", &self.buckets.tokens),
        ];
        for (key, edges) in buckets {
            if edges.is_empty() {
                return Err(invalid(key, "needs at least one bucket edge"));
            }
            if edges.iter().any(|edge| !edge.is_finite() || *edge <= 0.0) {
                return Err(invalid(key, "bucket edges must be finite and positive"));
            }
            if edges.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err(invalid(key, "bucket edges must be strictly increasing"));
            }
        }
        self.validate_routing()
    }

    /// The pools requests are routed to: the configured ones, or the implicit `default` pool of
    /// `upstream.urls` (so a sidecar config stays a one-liner).
    pub fn effective_pools(&self) -> Vec<PoolConfig> {
        if !self.pools.is_empty() {
            return self.pools.clone();
        }
        vec![PoolConfig {
            name: DEFAULT_POOL.to_owned(),
            urls: self.upstream.urls.clone(),
            ..PoolConfig::default()
        }]
    }

    /// Request limits: every one must admit something (hyper also asserts an 8 KiB read buffer).
    fn validate_limits(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: key.to_owned(),
            message: message.to_owned(),
        };
        let s = &self.server;
        let at_least = [
            ("server.listen_backlog", s.listen_backlog as usize, 1),
            ("server.max_connections", s.max_connections, 1),
            ("server.max_streams", s.max_streams, 1),
            ("server.max_headers", s.max_headers, 1),
            (
                "server.max_header_bytes",
                s.max_header_bytes,
                MIN_HEADER_BYTES,
            ),
            (
                "server.http2_max_concurrent_streams",
                s.http2_max_concurrent_streams as usize,
                1,
            ),
        ];
        for (key, value, min) in at_least {
            if value < min {
                return Err(invalid(key, &format!("must be at least {min}")));
            }
        }
        if s.header_read_timeout.is_zero() {
            return Err(invalid(
                "server.header_read_timeout",
                "must be greater than zero",
            ));
        }
        Ok(())
    }

    fn validate_routing(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, message: &str| ConfigError::Invalid {
            key,
            message: message.to_owned(),
        };
        let r = &self.routing;
        if !(r.prior_tokens_per_byte.is_finite()
            && r.prior_tokens_per_byte > 0.0
            && r.prior_tokens_per_byte <= 16.0)
        {
            return Err(invalid(
                "routing.prior_tokens_per_byte".into(),
                "must be in (0, 16]",
            ));
        }
        for (model, ratio) in &r.model_tokens_per_byte {
            if !(ratio.is_finite() && *ratio > 0.0 && *ratio <= 16.0) {
                return Err(invalid(
                    format!("routing.model_tokens_per_byte.{model:?}"),
                    "must be in (0, 16]",
                ));
            }
        }
        if r.tokenize && r.tokenize_timeout.is_zero() {
            return Err(invalid(
                "routing.tokenize_timeout".into(),
                "must be greater than zero (or set routing.tokenize = false)",
            ));
        }
        if r.calibration_window == 0 {
            return Err(invalid(
                "routing.calibration_window".into(),
                "must be at least 1",
            ));
        }
        if r.eject_after_failures == 0 {
            return Err(invalid(
                "routing.eject_after_failures".into(),
                "must be at least 1",
            ));
        }
        for (key, value) in [
            ("routing.eject_base", r.eject_base),
            ("routing.dns_refresh", r.dns_refresh),
        ] {
            if value.is_zero() {
                return Err(invalid(key.into(), "must be greater than zero"));
            }
        }
        if r.eject_max < r.eject_base {
            return Err(invalid(
                "routing.eject_max".into(),
                "must be at least routing.eject_base",
            ));
        }
        if !(16..=65_536).contains(&r.prefix_block_bytes) {
            return Err(invalid(
                "routing.prefix_block_bytes".into(),
                "must be in 16..=65536",
            ));
        }
        if r.prefix_key_blocks == 0 {
            return Err(invalid(
                "routing.prefix_key_blocks".into(),
                "must be at least 1",
            ));
        }
        let pools = self.effective_pools();
        for (i, pool) in self.pools.iter().enumerate() {
            if pool.name.is_empty() {
                return Err(invalid(format!("pools[{i}].name"), "must not be empty"));
            }
            if pools.iter().filter(|p| p.name == pool.name).count() > 1 {
                return Err(invalid(
                    format!("pools[{i}].name"),
                    &format!("pool {:?} is defined twice", pool.name),
                ));
            }
            if pool.urls.is_empty() && pool.dns.is_none() {
                return Err(invalid(
                    format!("pools[{i}]"),
                    "needs `urls` or `dns` (or both)",
                ));
            }
            for (j, url) in pool.urls.iter().enumerate() {
                validate_upstream_url(url)
                    .map_err(|m| invalid(format!("pools[{i}].urls[{j}]"), &m))?;
            }
            if let Some(tls) = &pool.tls {
                tls.validate(&format!("pools[{i}].tls"))?;
            }
            if let Some(dns) = &pool.dns {
                validate_dns_name(dns).map_err(|m| invalid(format!("pools[{i}].dns"), &m))?;
            }
            if !pool.health_path.starts_with('/')
                || pool.health_path.parse::<http::uri::PathAndQuery>().is_err()
            {
                return Err(invalid(
                    format!("pools[{i}].health_path"),
                    "must be a path starting with /",
                ));
            }
            if !(pool.affinity_load_factor.is_finite() && pool.affinity_load_factor >= 1.0) {
                return Err(invalid(
                    format!("pools[{i}].affinity_load_factor"),
                    "must be a number of at least 1",
                ));
            }
            if pool.affinity_index_blocks < 64 {
                return Err(invalid(
                    format!("pools[{i}].affinity_index_blocks"),
                    "must be at least 64",
                ));
            }
        }
        let known = |name: &str| pools.iter().any(|p| p.name == name);
        for (i, rule) in self.rules.iter().enumerate() {
            if !known(&rule.pool) {
                return Err(invalid(
                    format!("rules[{i}].pool"),
                    &format!("no pool named {:?}", rule.pool),
                ));
            }
            if let Some(fallback) = &rule.fallback {
                if !known(fallback) {
                    return Err(invalid(
                        format!("rules[{i}].fallback"),
                        &format!("no pool named {fallback:?}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Accepts `host:port` (a name to resolve, so no scheme and no path).
fn validate_dns_name(text: &str) -> Result<(), String> {
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text:?}: expected HOST:PORT"));
    };
    if host.is_empty() || host.contains('/') {
        return Err(format!("{text:?}: expected HOST:PORT"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("{text:?}: the port is not a number"))?;
    Ok(())
}

/// Accepts `http://host:port` with no path beyond `/`; the proxy appends the client's path.
fn validate_upstream_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|err| format!("{url:?} is not a URL: {err}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!(
            "{url:?}: only http:// and https:// upstreams are supported"
        ));
    }
    if uri.authority().is_none() {
        return Err(format!("{url:?} has no host"));
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err(format!("{url:?}: a base URL takes no path"));
    }
    Ok(())
}

/// Human durations (`"800ms"`, `"2s"`, `"1m 30s"`), never bare numbers whose unit a reader must guess.
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text).map_err(|err| {
        serde::de::Error::custom(format!(
            "invalid duration {text:?}: {err} (write e.g. \"800ms\" or \"2s\")"
        ))
    })
}

#[cfg(test)]
mod tests;
