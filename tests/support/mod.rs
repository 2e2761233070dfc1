//! Shared pieces of the end-to-end tests: a scripted upstream, a proxy on loopback, a streaming client
//! that stamps every frame, and a Prometheus text reader.
#![allow(dead_code)] // each test binary uses a different subset

pub mod backend;
pub mod budget;
pub mod client;
pub mod gated;
pub mod llama;
pub mod nginx;
pub mod otlp;
pub mod ports;
pub mod prom;
pub mod raw;
pub mod redis;
pub mod timeline;
pub mod tls;

use std::time::Duration;

use tokenmeter::config::{BalanceLoad, Config, HandoffConfig, PoolConfig, RuleConfig};
use tokenmeter::server::{self, ServerHandle};
use tokio::net::TcpListener;

/// A config for a proxy in front of `upstream` (a base URL), with test-friendly timeouts.
pub fn config_for(upstream: &str) -> Config {
    let mut config = Config::default();
    config.upstream.urls = vec![upstream.to_owned()];
    config.upstream.connect_timeout = Duration::from_secs(2);
    config.upstream.idle_timeout = Duration::from_secs(10);
    config.server.shutdown_grace = Duration::from_secs(5);
    config
}

/// Pools `prefill` (balanced by queued prompt tokens) and `decode` (by streams), with a rule sending
/// prompts of `min_prompt_tokens` estimated tokens or more to `prefill` and the rest to `decode`.
/// Validated; callers may change it further.
pub fn split_pools(prefill: Vec<String>, decode: Vec<String>, min_prompt_tokens: u64) -> Config {
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![
        PoolConfig {
            name: "prefill".to_owned(),
            urls: prefill,
            balance: BalanceLoad::PromptTokens,
            ..PoolConfig::default()
        },
        PoolConfig {
            name: "decode".to_owned(),
            urls: decode,
            ..PoolConfig::default()
        },
    ];
    config.rules = vec![
        RuleConfig {
            pool: "prefill".to_owned(),
            min_prompt_tokens: Some(min_prompt_tokens),
            ..RuleConfig::default()
        },
        RuleConfig {
            pool: "decode".to_owned(),
            ..RuleConfig::default()
        },
    ];
    config.validate().expect("valid config");
    config
}

/// Pools `prefill` and `decode`, the decode pool handing its prefills off as `handoff` says (to
/// the pool named "prefill"); every request to `decode`, no `/tokenize` calls, no retries.
/// Validated.
pub fn handoff_pools(prefill: &str, decode: &str, handoff: HandoffConfig) -> Config {
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![
        PoolConfig {
            name: "prefill".to_owned(),
            urls: vec![prefill.to_owned()],
            ..PoolConfig::default()
        },
        PoolConfig {
            name: "decode".to_owned(),
            urls: vec![decode.to_owned()],
            handoff: Some(HandoffConfig {
                prefill_pool: "prefill".to_owned(),
                ..handoff
            }),
            ..PoolConfig::default()
        },
    ];
    config.rules = vec![RuleConfig {
        pool: "decode".to_owned(),
        ..RuleConfig::default()
    }];
    config.routing.tokenize = false;
    config.routing.retries = 0;
    config.validate().expect("valid config");
    config
}

/// Polls the proxy's metrics until `series` with `labels` sums to `value` (10 s at most): for
/// what happens after a response, in a background task (a health check, a tokenizer call).
pub async fn wait_for_metric(
    proxy: &ServerHandle,
    series: &str,
    labels: &[(&str, &str)],
    value: f64,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = prom::sum(&proxy.metrics.render(), series, labels);
        if seen == value {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} {labels:?} stayed at {seen}, expected {value}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts a proxy on 127.0.0.1 ephemeral ports.
pub async fn start_proxy(config: Config) -> ServerHandle {
    start_proxy_with_hooks(config, Vec::new()).await
}

/// Starts a proxy whose requests also end in `hooks` (see `tokenmeter::context::finish`).
pub async fn start_proxy_with_hooks(
    config: Config,
    hooks: Vec<std::sync::Arc<dyn tokenmeter::context::FinishHook>>,
) -> ServerHandle {
    let traffic = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind traffic");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
    server::spawn_with_hooks(config, traffic, admin, hooks).expect("proxy starts")
}

/// The bytes of an OpenAI-compatible stream fixture (`tests/fixtures/openai/`).
pub fn fixture(name: &str) -> Vec<u8> {
    fixture_in("openai", name)
}

/// The bytes of `tests/fixtures/<set>/<name>`.
pub fn fixture_in(set: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{set}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

/// Splits an SSE fixture into its events (each with its blank line), as vLLM writes one per frame.
pub fn events_of(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut events = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < stream.len() {
        if stream[i] == b'\n' && stream[i + 1] == b'\n' {
            events.push(stream[start..i + 2].to_vec());
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < stream.len() {
        events.push(stream[start..].to_vec());
    }
    events
}
