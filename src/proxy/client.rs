//! The one pooled HTTP client shared by every request to every upstream.
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::RequestBody;
use crate::config::UpstreamConfig;

/// The client type: HTTP/1.1 to upstreams (what vLLM's uvicorn speaks), keep-alive pooled.
pub type UpstreamClient = Client<HttpConnector, RequestBody>;

/// Builds the shared client: `TCP_NODELAY` (a token chunk must not wait for Nagle), the connect
/// timeout, and an idle timeout on pooled connections driven by a tokio timer.
pub fn build(config: &UpstreamConfig) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(config.connect_timeout));
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(config.pool_idle_timeout)
        .pool_max_idle_per_host(config.pool_max_idle_per_host)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
}
