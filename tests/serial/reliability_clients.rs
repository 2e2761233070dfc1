//! Clients that go away at every phase of a request, and a client that stops reading: the upstream
//! request is cancelled (its connection closed), the outcome is counted, nothing stays in flight,
//! and a slow reader gets backpressure instead of a proxy that buffers without bound.

use crate::support;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::raw::{self, chunk, chunked_head, RawRequest, RawUpstream};
use support::{client, prom};
use tokenmeter::server::ServerHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
const EVENT: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n";

/// What the upstream does before it waits for the proxy to hang up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Never answers.
    BeforeHead,
    /// Sends the head, no token yet.
    BeforeFirstToken,
    /// Sends the head and one token.
    MidStream,
}

/// An upstream that plays `phase`, then reports when the proxy closed the connection.
async fn upstream(phase: Phase) -> (RawUpstream, mpsc::UnboundedReceiver<Instant>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let upstream = RawUpstream::start(move |_request: RawRequest, mut stream| {
        let tx = tx.clone();
        async move {
            if phase != Phase::BeforeHead {
                raw::write(&mut stream, &chunked_head(200, "text/event-stream")).await;
            }
            if phase == Phase::MidStream {
                raw::write(&mut stream, &chunk(EVENT)).await;
            }
            raw::hold(&mut stream, Duration::from_secs(30)).await;
            let _ = tx.send(Instant::now());
        }
    })
    .await;
    (upstream, rx)
}

fn outcome(proxy: &ServerHandle, outcome: &str) -> f64 {
    prom::sum(
        &proxy.metrics.render(),
        "tokenmeter_requests_total",
        &[("outcome", outcome)],
    )
}

/// Waits (bounded) until the request is counted as `expected` and nothing is in flight.
async fn counted(proxy: &ServerHandle, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let active = prom::sum(&proxy.metrics.render(), "tokenmeter_streams_active", &[]);
        if outcome(proxy, expected) == 1.0 && active == 0.0 && proxy.limits.streams_admitted() == 0
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "expected one {expected} and nothing in flight, got streams_active {active}, admitted {}:\n{}",
            proxy.limits.streams_admitted(),
            proxy.metrics.render()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Leaves at `phase`; returns the proxy once the upstream connection was seen closed.
async fn disconnect_at(phase: Phase) -> ServerHandle {
    let (upstream, mut closed) = upstream(phase).await;
    let proxy = support::start_proxy(support::config_for(&upstream.url)).await;
    let hung_up = match phase {
        Phase::BeforeHead => {
            // The response head never comes: hang up while the proxy waits for it.
            let addr = proxy.traffic_addr;
            let request = tokio::spawn(async move { client::open(addr, CHAT, BODY).await });
            let deadline = Instant::now() + Duration::from_secs(10);
            while upstream.request_count() == 0 {
                assert!(
                    Instant::now() < deadline,
                    "the request reached the upstream"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            request.abort();
            Instant::now()
        }
        Phase::BeforeFirstToken | Phase::MidStream => {
            let mut stream = client::open(proxy.traffic_addr, CHAT, BODY).await;
            assert_eq!(stream.status, 200, "head received");
            if phase == Phase::MidStream {
                let (_, first) = stream.next_frame().await.expect("frame").expect("ok");
                assert_eq!(&first[..], EVENT, "the first token arrived");
            }
            stream.disconnect();
            Instant::now()
        }
    };
    let at = tokio::time::timeout(Duration::from_secs(10), closed.recv())
        .await
        .expect("the proxy closed the upstream connection")
        .expect("report");
    println!(
        "{phase:?}: upstream closed {:?} after the client left",
        at - hung_up
    );
    proxy
}

#[tokio::test]
async fn client_leaves_before_the_response_head() {
    let _alone = crate::alone().await;
    let proxy = disconnect_at(Phase::BeforeHead).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.limits.streams_admitted() > 0 || proxy.limits.connections_open() > 0 {
        assert!(
            Instant::now() < deadline,
            "the admission slot and connection are released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn client_leaves_before_the_response_head_is_counted_cancelled() {
    let _alone = crate::alone().await;
    let proxy = disconnect_at(Phase::BeforeHead).await;
    counted(&proxy, "cancelled").await;
}

#[tokio::test]
async fn client_leaves_waiting_for_the_first_token() {
    let _alone = crate::alone().await;
    let proxy = disconnect_at(Phase::BeforeFirstToken).await;
    counted(&proxy, "cancelled").await;
}

#[tokio::test]
async fn client_leaves_mid_stream() {
    let _alone = crate::alone().await;
    let proxy = disconnect_at(Phase::MidStream).await;
    counted(&proxy, "cancelled").await;
}

#[tokio::test]
async fn client_leaves_before_its_body_is_sent() {
    let _alone = crate::alone().await;
    let (upstream, _closed) = upstream(Phase::MidStream).await;
    let proxy = support::start_proxy(support::config_for(&upstream.url)).await;
    let mut stream = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let head = format!("POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"model\":");
    stream.write_all(head.as_bytes()).await.expect("send");
    // Wait until the proxy is reading the body (the request is in flight), then leave.
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.limits.streams_admitted() == 0 {
        assert!(Instant::now() < deadline, "the request was admitted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(stream);
    // The request never had a complete body: it must not reach the upstream, and it is counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = proxy.metrics.render();
        let total = prom::sum(&text, "tokenmeter_requests_total", &[]);
        if total == 1.0 && proxy.limits.streams_admitted() == 0 {
            let counted_as = prom::find(&text, "tokenmeter_requests_total", &[])
                .into_iter()
                .map(|s| s.labels["outcome"].clone())
                .collect::<Vec<_>>();
            assert_eq!(
                counted_as,
                vec!["cancelled"],
                "a client that left mid-body is cancelled, like one that left later"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counted once and released:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(upstream.request_count(), 0, "nothing reached the upstream");
}

#[tokio::test]
async fn malformed_request_body_is_a_400_counted_client_error() {
    let _alone = crate::alone().await;
    let (upstream, _closed) = upstream(Phase::MidStream).await;
    let proxy = support::start_proxy(support::config_for(&upstream.url)).await;
    let mut stream = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    // A chunk size that is not hex: the client is still there, its body is wrong.
    let request = format!("POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"a\":\r\nzz\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut received = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received)).await;
    let response = String::from_utf8_lossy(&received);
    assert!(
        response.starts_with("HTTP/1.1 400"),
        "a 400 answer: {response}"
    );
    assert!(
        response.contains("could not read the request body"),
        "an OpenAI-style error saying why: {response}"
    );
    // Counted when the request ends, which need not be before the client read the answer.
    support::wait_for_metric(
        &proxy,
        "tokenmeter_requests_total",
        &[("outcome", "client_error")],
        1.0,
    )
    .await;
    assert_eq!(
        prom::sum(&proxy.metrics.render(), "tokenmeter_requests_total", &[]),
        1.0,
        "counted once, as client_error"
    );
    assert_eq!(upstream.request_count(), 0, "nothing reached the upstream");
}

/// Megabytes the upstream offers a reader that never reads.
const OFFERED: usize = 64 * 1024 * 1024;

#[tokio::test]
async fn slow_reader_gets_backpressure_and_bounded_memory() {
    let _alone = crate::alone().await;
    let written = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&written);
    // Set while the upstream is inside a write: a write that stays unfinished is backpressure,
    // not an upstream task that merely waits for a core.
    let writing = Arc::new(AtomicBool::new(false));
    let in_write = Arc::clone(&writing);
    let (tx, mut closed) = mpsc::unbounded_channel();
    let upstream = RawUpstream::start(move |_request: RawRequest, mut stream| {
        let counter = Arc::clone(&counter);
        let in_write = Arc::clone(&in_write);
        let tx = tx.clone();
        async move {
            raw::write(&mut stream, &chunked_head(200, "text/event-stream")).await;
            let event = format!(
                "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
                "y".repeat(64 * 1024)
            );
            let frame = chunk(event.as_bytes());
            while counter.load(Ordering::SeqCst) < OFFERED {
                in_write.store(true, Ordering::SeqCst);
                let wrote = raw::write(&mut stream, &frame).await;
                in_write.store(false, Ordering::SeqCst);
                if !wrote {
                    break;
                }
                counter.fetch_add(frame.len(), Ordering::SeqCst);
            }
            let _ = tx.send(Instant::now());
        }
    })
    .await;
    let proxy = support::start_proxy(support::config_for(&upstream.url)).await;
    let rss_before = raw::rss_kib("self");
    let mut stream = client::open(proxy.traffic_addr, CHAT, BODY).await;
    let (_, first) = stream.next_frame().await.expect("frame").expect("ok");
    let received = first.len();

    // Stop reading. The upstream's writes must stall. A stall is the absence of progress, so it
    // is seen over time: the upstream inside one write, its count unchanged, at ten looks 50 ms
    // apart (polled within a 10 s deadline). A loaded machine can only make this conclude early
    // (the upstream waiting for a core in mid-write), and then the bounds below are checked on
    // fewer bytes in flight, never more: it cannot fail them by being slow.
    let mut peak_rss = rss_before;
    let mut last = 0;
    let mut stable_rounds = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while stable_rounds < 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak_rss = peak_rss.max(raw::rss_kib("self"));
        let now = written.load(Ordering::SeqCst);
        let stalled = now == last && writing.load(Ordering::SeqCst);
        stable_rounds = if stalled { stable_rounds + 1 } else { 0 };
        last = now;
    }
    assert!(
        stable_rounds >= 10,
        "the upstream's writes stalled (backpressure); written {last}"
    );
    let in_flight = last - received;
    println!(
        "slow reader: upstream wrote {} KiB of {} KiB offered, client read {received} B; in flight {} KiB; RSS peak growth {} KiB",
        last / 1024,
        OFFERED / 1024,
        in_flight / 1024,
        peak_rss.saturating_sub(rss_before)
    );
    assert!(
        in_flight < 16 * 1024 * 1024,
        "at most socket buffers plus a frame or two between upstream and client: {in_flight} bytes"
    );
    assert!(
        peak_rss.saturating_sub(rss_before) < 48 * 1024,
        "RSS grew by {} KiB (the upstream offered {} MiB)",
        peak_rss.saturating_sub(rss_before),
        OFFERED / 1024 / 1024
    );
    stream.disconnect();
    tokio::time::timeout(Duration::from_secs(10), closed.recv())
        .await
        .expect("the upstream connection was closed once the client left")
        .expect("report");
    counted(&proxy, "cancelled").await;
}
