//! The traffic port peeks at a connection's first bytes to pick the HTTP/1-only builder
//! (src/server/sniff.rs): a connection that never sends a byte must not hold shutdown back, and
//! HTTP/1 streams still pass through whole.

use crate::support;
use std::time::Duration;

use support::backend::Script;
use support::client;
use support::{config_for, events_of, fixture, start_proxy};
use tokio::io::AsyncReadExt;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;

/// A backend that streams the recorded vLLM chat fixture at once.
async fn chat_backend() -> support::backend::Backend {
    support::backend::Backend::start(|_| {
        Script::sse(
            events_of(&fixture("vllm-chat-usage.sse"))
                .into_iter()
                .map(|event| (Duration::ZERO, event))
                .collect(),
        )
    })
    .await
}

#[tokio::test]
async fn a_silent_connection_does_not_hold_shutdown_for_the_grace_period() {
    let backend = chat_backend().await;
    let mut config = config_for(&backend.url);
    config.server.shutdown_grace = Duration::from_secs(20);
    let proxy = start_proxy(config).await;
    let mut silent = tokio::net::TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    // Accepted after the silent one (one listener, accepted in order): when this stream has run,
    // the silent connection is being sniffed.
    let stream = client::open(proxy.traffic_addr, CHAT, BODY)
        .await
        .collect()
        .await;
    assert!(stream.error.is_none(), "the HTTP/1 stream ends cleanly");
    assert!(
        stream.text().contains("[DONE]"),
        "the HTTP/1 stream is whole"
    );

    // The property is "not the 20 s grace": with no stream to drain, shutdown and the close take
    // milliseconds even on a loaded 2-core machine, and 5 s is a quarter of the grace.
    let bound = Duration::from_secs(5);
    let started = tokio::time::Instant::now();
    tokio::time::timeout(bound, proxy.shutdown())
        .await
        .expect("shutdown does not wait the 20 s grace for a connection that sent nothing");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout_at(started + bound, silent.read(&mut byte))
        .await
        .expect("the silent connection is closed, not left open for the grace period");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "the silent connection gets EOF or a reset, not data: {read:?}"
    );
}

#[tokio::test]
async fn a_connection_silent_past_the_header_read_timeout_is_closed() {
    let backend = chat_backend().await;
    let mut config = config_for(&backend.url);
    config.server.header_read_timeout = Duration::from_millis(300);
    let proxy = start_proxy(config).await;
    let started = tokio::time::Instant::now();
    let mut silent = tokio::net::TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let mut byte = [0u8; 1];
    // Bounded by the property: closed by the configured 300 ms timer, not by the default's 10 s
    // (or never). A loaded 2-core machine fires the timer late by milliseconds; 5 s is half the
    // default.
    let read = tokio::time::timeout_at(started + Duration::from_secs(5), silent.read(&mut byte))
        .await
        .expect("closed at the configured header_read_timeout, not left open to the default");
    let waited = started.elapsed();
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "EOF or a reset, no data: {read:?}"
    );
    // The timer starts once the proxy accepted the connection, after `started`: a timer never
    // fires early.
    assert!(
        waited >= Duration::from_millis(300),
        "closed at the 300 ms header_read_timeout, not before: {waited:?}"
    );
    assert_eq!(
        proxy.limits.connections_open(),
        0,
        "its connection slot is free again"
    );
    proxy.shutdown().await;
}
