//! Shared pieces of the end-to-end tests: a scripted upstream, a proxy on loopback, a streaming client
//! that stamps every frame, and a Prometheus text reader.
#![allow(dead_code)] // each test binary uses a different subset

pub mod backend;
pub mod client;
pub mod llama;
pub mod prom;
pub mod raw;

use std::time::Duration;

use tokenmeter::config::Config;
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

/// Starts a proxy on 127.0.0.1 ephemeral ports.
pub async fn start_proxy(config: Config) -> ServerHandle {
    let traffic = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind traffic");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
    server::spawn(config, traffic, admin).expect("proxy starts")
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
