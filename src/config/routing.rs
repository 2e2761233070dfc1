//! The routing tables: `[routing]`, `[[pools]]` (balancing, affinity, health, DNS, TLS) and
//! `[[rules]]`, with their defaults.
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{AutoscaleConfig, HandoffConfig, QueueConfig, UpstreamTlsConfig};

/// Name of the implicit pool formed by `upstream.urls` when no `[[pools]]` are configured.
pub(crate) const DEFAULT_POOL: &str = "default";

/// Router settings shared by every pool.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
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
    #[serde(with = "super::spelling::human_duration")]
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
    #[serde(with = "super::spelling::human_duration")]
    pub eject_base: Duration,
    /// Longest ejection.
    #[serde(with = "super::spelling::human_duration")]
    pub eject_max: Duration,
    /// How often a pool's `dns` name is resolved again.
    #[serde(with = "super::spelling::human_duration")]
    pub dns_refresh: Duration,
    /// Prefix affinity's block: a prompt's text is cut into blocks of this many bytes, each named
    /// by the hash of its content and every block before it. Every tokenmeter replica in front of
    /// the same backends must use the same value.
    pub prefix_block_bytes: usize,
    /// A text prompt (no chat roles) is known by its first this-many blocks: the key its home
    /// backend is hashed from (a chat is known by its messages up to the first user message).
    pub prefix_key_blocks: usize,
    /// The latency models' memory (`balance = "slo"`), in finished requests: each weighs
    /// `1/prediction_memory` against the history, so a backend that changed is seen as it is now
    /// within a few times this many of its requests.
    pub prediction_memory: u32,
}

/// How a pool chooses among its healthy backends (power of two choices on a load, or placement by
/// predicted latency).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BalanceLoad {
    /// The default: `slo` where there is a choice to make, `prompt_tokens` in a handoff's prefill
    /// pool, `streams` in a pool of one backend or with a header affinity (see
    /// [`PoolConfig::resolve_balance`]).
    /// [`Config::effective_pools`](super::Config::effective_pools) resolves it, so no pool runs
    /// with it.
    #[default]
    Auto,
    /// Streams in flight (head to end of stream): what loads a decode replica.
    Streams,
    /// Prompt tokens sent and not yet past their first response byte: what queues on a prefill
    /// replica.
    PromptTokens,
    /// Plain round-robin (a baseline for benchmarks).
    RoundRobin,
    /// Latency-predicting placement: each request goes where its predicted TTFT has the most
    /// headroom under the `[slo]` target without pushing the backend's streams past the TPOT
    /// target, from each backend's latency model learned online (see `route::placement`).
    Slo,
}

/// One named pool of interchangeable backends.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// The pool's name: rules refer to it, and it is the `pool` label.
    pub name: String,
    /// Static base URLs (`http://host:port`).
    #[serde(serialize_with = "super::spelling::secret_urls")]
    pub urls: Vec<String>,
    /// `host:port` resolved every `routing.dns_refresh` (a Kubernetes headless Service); every
    /// address becomes a backend, in addition to `urls`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<String>,
    /// The load power-of-two-choices compares.
    pub balance: BalanceLoad,
    /// Interval of active `GET health_path` checks; `"0s"` = passive health only.
    #[serde(with = "super::spelling::human_duration")]
    pub health_check: Duration,
    /// The backends' health endpoint: polled every `health_check`, and asked to confirm a run of
    /// answer failures before they eject a backend.
    pub health_path: String,
    /// Interval of scraping each backend's `/metrics` (`vllm:num_requests_waiting`,
    /// `vllm:kv_cache_usage_perc`) to weight its load; `"0s"` = off.
    #[serde(with = "super::spelling::human_duration")]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTlsConfig>,
    /// Prefill/decode disaggregation: this pool decodes, and its requests' prefills may run on
    /// another pool, the KV cache moved between them (see [`HandoffConfig`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffConfig>,
    /// The gateway queue of a `balance = "slo"` pool (see [`QueueConfig`]); none by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueConfig>,
    /// Whether a `balance = "slo"` pool without a handoff designates its prefill-heavy replicas
    /// from the measured load (see [`PrefillHeavy`]); unset: `auto`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_heavy: Option<PrefillHeavy>,
    /// How a `balance = "slo"` pool's SLO headroom becomes the replica count an autoscaler reads
    /// (see [`AutoscaleConfig`]); unset: its defaults (every such pool exports the signal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleConfig>,
}

/// Whether a `balance = "slo"` pool designates prefill-heavy replicas (`route::placement::designate`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefillHeavy {
    /// From the measured demand of long prompts against the replicas' learned prefill rates: long
    /// prompts go to those replicas, chats elsewhere.
    #[default]
    Auto,
    /// None: every replica takes every prompt, ranked by its predictions alone.
    Off,
}

impl PoolConfig {
    /// The policy `balance = "auto"` stands for in this pool; any other value stands for itself.
    /// - `prompt_tokens` in the prefill pool of another pool's handoff (`prefill_pool`): every
    ///   prompt there is long, and what queues on a prefill replica is its prompt tokens;
    /// - `streams` in a pool with a header affinity (`header:<name>`): a session's home is a
    ///   promise `slo` does not keep (its placement weighs prompt caches, which only a prefix
    ///   affinity knows);
    /// - `slo` (latency-predicting placement, prefill-heavy replicas designated from the load) in
    ///   a pool that may have several backends (two or more `urls`, or `dns`), or that sets what
    ///   only `slo` reads (`queue`, `prefill_heavy`, `autoscale`): the one policy that kept both TTFT and the
    ///   chats' gaps on the mixed fleet (docs/routing.md, "Which policy");
    /// - `streams` in a pool of one backend, where there is nothing to choose.
    pub fn resolve_balance(&self, prefill_pool: bool) -> BalanceLoad {
        if self.balance != BalanceLoad::Auto {
            return self.balance;
        }
        if self.queue.is_some() || self.prefill_heavy.is_some() || self.autoscale.is_some() {
            BalanceLoad::Slo
        } else if prefill_pool {
            BalanceLoad::PromptTokens
        } else if matches!(self.affinity, Affinity::Header(_)) {
            BalanceLoad::Streams
        } else if self.urls.len() >= 2 || self.dns.is_some() {
            BalanceLoad::Slo
        } else {
            BalanceLoad::Streams
        }
    }

    /// Whether the pool designates prefill-heavy replicas: a `balance = "slo"` pool without a
    /// handoff, unless `prefill_heavy = "off"`.
    pub fn designates(&self) -> bool {
        self.balance == BalanceLoad::Slo
            && self.handoff.is_none()
            && self.prefill_heavy.unwrap_or_default() == PrefillHeavy::Auto
    }
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

impl Serialize for Affinity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Affinity::None => serializer.serialize_str("none"),
            Affinity::Prefix => serializer.serialize_str("prefix"),
            Affinity::Header(name) => serializer.collect_str(&format_args!("header:{name}")),
        }
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
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuleConfig {
    /// The pool requests matching this rule go to.
    pub pool: String,
    /// Matches when the estimated prompt is at least this many tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_prompt_tokens: Option<u64>,
    /// Matches this model name exactly, or by prefix when it ends in `*`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Matches this request path exactly, or by prefix when it ends in `*`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Pool to use when `pool` has no healthy backend (default: the next matching rule's pool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Spill to the fallback pool when the least-loaded backend of `pool` has more than this many
    /// prompt tokens queued (not yet past their first byte).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_queue_tokens: Option<u64>,
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
            handoff: None,
            queue: None,
            autoscale: None,
            prefill_heavy: None,
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
            prediction_memory: 200,
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
