//! The one pooled HTTP client shared by every request to every upstream (and the probes).
use crate::config::UpstreamConfig;

/// The client type: HTTP/1.1 to upstreams (what vLLM's uvicorn speaks), keep-alive pooled; see
/// [`super::h1`] for why it is not hyper-util's.
pub type UpstreamClient = super::h1::Client;

/// Builds the shared client: `TCP_NODELAY`, the connect timeout, idle pooled connections kept
/// for `pool_idle_timeout`, at most `pool_max_idle_per_host` per upstream.
pub fn build(config: &UpstreamConfig) -> UpstreamClient {
    super::h1::Client::new(config)
}
