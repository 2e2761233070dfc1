//! Hostile clients: request smuggling, oversized or endless heads (slowloris), floods past the
//! admission limits, and label cardinality attacks. Each answer is exact and nothing reaches the
//! upstream that should not.

use crate::support;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::raw::{self, chunk, chunked_head, RawRequest, RawUpstream, LAST_CHUNK};
use support::{client, prom};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";
const JSON_OK: &str = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;

/// An upstream that answers every request with a small JSON completion, one per connection.
async fn json_upstream() -> RawUpstream {
    RawUpstream::start(|_request: RawRequest, mut stream| async move {
        let mut bytes = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n".as_bytes().to_vec();
        bytes.extend(chunk(JSON_OK.as_bytes()));
        bytes.extend_from_slice(LAST_CHUNK);
        raw::write(&mut stream, &bytes).await;
        raw::hold(&mut stream, Duration::from_secs(30)).await;
    })
    .await
}

/// Sends raw bytes and reads until the proxy closes the connection (bounded by `within`).
async fn exchange(addr: std::net::SocketAddr, request: &[u8], within: Duration) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut received = Vec::new();
    let _ = tokio::time::timeout(within, stream.read_to_end(&mut received)).await;
    String::from_utf8_lossy(&received).into_owned()
}

fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn smuggling_content_length_with_chunked_is_refused_and_the_connection_closed() {
    let upstream = json_upstream().await;
    let proxy = support::start_proxy(support::config_for(&upstream.url)).await;
    let json = r#"{"model":"m","messages":[]}"#;
    // Content-Length covers only the first chunk line; the rest would be a second, smuggled request
    // for a server that trusted Content-Length.
    let smuggled = "GET /admin/secret HTTP/1.1\r\nHost: x\r\n\r\n";
    let attack = |order: &str| {
        let framing = if order == "cl-first" {
            "Content-Length: 4\r\nTransfer-Encoding: chunked"
        } else {
            "transfer-encoding: chunked\r\ncontent-length: 4"
        };
        format!(
            "POST {CHAT} HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n{:x}\r\n{json}\r\n0\r\n\r\n{smuggled}",
            json.len()
        )
    };
    for order in ["cl-first", "te-first"] {
        let response = exchange(
            proxy.traffic_addr,
            attack(order).as_bytes(),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(status_of(&response), 400, "{order}: refused: {response}");
        assert!(
            response.contains("\"type\":\"invalid_request_error\"")
                && response.contains("both transfer-encoding and content-length"),
            "{order}: an OpenAI-style error naming the cause: {response}"
        );
        assert!(
            response.to_ascii_lowercase().contains("connection: close"),
            "{order}: the connection is closed after it: {response}"
        );
        assert_eq!(
            response.matches("HTTP/1.1 ").count(),
            1,
            "{order}: one answer, the smuggled request never read: {response}"
        );
    }

    // Pipelined behind a well-framed request on the same connection: the first is served, the
    // second refused, nothing after it read.
    let first = format!(
        "POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{json}",
        json.len()
    );
    let pipeline = format!("{first}{}", attack("cl-first"));
    let response = exchange(
        proxy.traffic_addr,
        pipeline.as_bytes(),
        Duration::from_secs(10),
    )
    .await;
    let statuses: Vec<u16> = response
        .match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| response[at + 9..at + 12].parse().ok())
        .collect();
    assert_eq!(
        statuses,
        vec![200, 400],
        "the well-framed request served, the conflicting one refused: {response}"
    );
    assert_eq!(
        upstream.request_count(),
        1,
        "only the well-framed request reached the upstream"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_requests_total",
            &[("outcome", "client_error")]
        ),
        3.0,
        "each refusal counted as a client error"
    );
}

#[tokio::test]
async fn smuggling_conflicting_framing_is_a_400_that_never_reaches_the_upstream() {
    let upstream = json_upstream().await;
    let proxy = support::start_proxy(support::config_for(&upstream.url)).await;
    let cases = [
        (
            "two different content-lengths",
            format!("POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
        ),
        (
            "transfer-encoding not ending in chunked",
            format!("POST {CHAT} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
        ),
        (
            "transfer-encoding in HTTP/1.0",
            format!("POST {CHAT} HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ),
        (
            "a content-length that is not a number",
            format!("POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: 5x\r\n\r\nhello"),
        ),
        (
            "a space before the header colon",
            format!("POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello"),
        ),
    ];
    for (what, request) in cases {
        let response = exchange(
            proxy.traffic_addr,
            request.as_bytes(),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            status_of(&response),
            400,
            "{what}: 400 Bad Request, got {response:?}"
        );
    }
    assert_eq!(
        upstream.request_count(),
        0,
        "no malformed request reached the upstream"
    );
}

#[tokio::test]
async fn oversized_heads_are_431() {
    let upstream = json_upstream().await;
    let mut config = support::config_for(&upstream.url);
    config.server.max_header_bytes = 16 * 1024;
    config.server.max_headers = 20;
    let proxy = support::start_proxy(config).await;
    let big = format!(
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(32 * 1024)
    );
    let response = exchange(proxy.traffic_addr, big.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(
        status_of(&response),
        431,
        "a 32 KiB header over a 16 KiB limit: {response:?}"
    );
    let many: String = (0..40).map(|i| format!("x-h{i}: v\r\n")).collect();
    let request = format!("GET /v1/models HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    let response = exchange(
        proxy.traffic_addr,
        request.as_bytes(),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        status_of(&response),
        431,
        "40 headers over a limit of 20: {response:?}"
    );
    let fine = "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let response = exchange(proxy.traffic_addr, fine.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(
        status_of(&response),
        200,
        "a normal head passes: {response:?}"
    );
    assert_eq!(
        upstream.request_count(),
        1,
        "only the normal request reached the upstream"
    );
}

#[tokio::test]
async fn slowloris_head_is_cut_at_the_header_read_timeout() {
    let upstream = json_upstream().await;
    let mut config = support::config_for(&upstream.url);
    let timeout = Duration::from_millis(500);
    config.server.header_read_timeout = timeout;
    let proxy = support::start_proxy(config).await;
    // Before the connection exists: the proxy's timer cannot have started earlier.
    let connecting = Instant::now();
    let stream = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let (mut read, mut write) = stream.into_split();
    // The close is stamped when the client sees it, by a reader waiting for it (not by polling).
    let closed = tokio::spawn(async move {
        let mut received = Vec::new();
        let _ = read.read_to_end(&mut received).await;
        (received, Instant::now())
    });
    write
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("send");
    // The slowloris itself: one header byte every 100 ms, for at most 10 s (the script, not a
    // wait); the proxy must hang up long before.
    let trickle = async {
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if write.write_all(b"x").await.is_err() {
                break;
            }
        }
    };
    let (received, closed_at) = tokio::select! {
        closed = closed => closed.expect("the reader"),
        () = trickle => panic!("the proxy kept a slow head open for the 10 s the client trickled"),
    };
    if !received.is_empty() {
        let text = String::from_utf8_lossy(&received);
        assert_eq!(
            status_of(&text),
            408,
            "a slow head is answered 408: {text:?}"
        );
    }
    let closed_after = closed_at - connecting;
    // A timer never fires early: not cut before the timeout.
    assert!(
        closed_after >= timeout,
        "closed {closed_after:?} after connecting, before the {timeout:?} timeout"
    );
    // The property is an upper bound, so a generous one: the timeout plus 2.5 s for the proxy's
    // timer task and this test's reader to get a core, which on a loaded 2-core machine takes a few
    // scheduler slices (tens of ms); a proxy that did not cut the head would hold it for the whole
    // 10 s the client trickles (and forever in the wild).
    assert!(
        closed_after < timeout + Duration::from_millis(2500),
        "closed {closed_after:?} after connecting (timeout {timeout:?})"
    );
    assert_eq!(upstream.request_count(), 0, "nothing reached the upstream");
}

/// Streams at the upstream: in flight now, and the most at once.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// An upstream whose streams stay open until `release` turns true (every stream after that,
/// too, finishes at once), counting the streams it holds in `in_flight`.
async fn held_upstream(release: watch::Receiver<bool>, in_flight: Arc<InFlight>) -> RawUpstream {
    RawUpstream::start(move |_request: RawRequest, mut stream| {
        let mut release = release.clone();
        let in_flight = Arc::clone(&in_flight);
        async move {
            let now = in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
            in_flight.peak.fetch_max(now, Ordering::SeqCst);
            raw::write(&mut stream, &chunked_head(200, "text/event-stream")).await;
            raw::write(
                &mut stream,
                &chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"),
            )
            .await;
            let _ = tokio::time::timeout(Duration::from_secs(30), release.wait_for(|r| *r)).await;
            raw::write(&mut stream, &chunk(b"data: [DONE]\n\n")).await;
            // Out of flight before the body can end: only then can the proxy finish this
            // stream and start one waiting for its slot.
            in_flight.now.fetch_sub(1, Ordering::SeqCst);
            raw::write(&mut stream, LAST_CHUNK).await;
        }
    })
    .await
}

const STREAM_BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;

async fn assert_overloaded(got: &support::client::Streamed, key: &str) {
    assert_eq!(got.status, 503, "503 past {key}");
    assert_eq!(got.headers["retry-after"], "1", "retry-after past {key}");
    let json: serde_json::Value = serde_json::from_slice(&got.bytes()).expect("JSON error");
    assert_eq!(json["error"]["type"], "overloaded", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(key)),
        "the message names {key}: {json}"
    );
}

#[tokio::test]
async fn max_streams_answers_503_with_retry_after_and_counts_it() {
    let (release, held) = watch::channel(false);
    let upstream = held_upstream(held, Arc::default()).await;
    let mut config = support::config_for(&upstream.url);
    config.server.max_streams = 2;
    let proxy = support::start_proxy(config).await;
    let mut first = client::open(proxy.traffic_addr, CHAT, STREAM_BODY).await;
    let mut second = client::open(proxy.traffic_addr, CHAT, STREAM_BODY).await;
    first.next_frame().await.expect("frame").expect("ok");
    second.next_frame().await.expect("frame").expect("ok");
    let third = client::post(proxy.traffic_addr, CHAT, STREAM_BODY).await;
    assert_overloaded(&third, "server.max_streams").await;
    assert_eq!(
        upstream.request_count(),
        2,
        "the rejected request never reached the upstream"
    );

    release.send_replace(true);
    let (first, second) = (first.collect().await, second.collect().await);
    assert!(
        first.error.is_none() && second.error.is_none(),
        "admitted streams finish"
    );
    let again = client::post(proxy.traffic_addr, "/v1/models", "").await;
    assert_ne!(
        again.status, 503,
        "a slot is free again once the streams ended"
    );
    let (_, metrics) = client::get(proxy.admin_addr, "/metrics").await;
    assert_eq!(
        prom::value(
            &metrics,
            "tokenmeter_rejected_total",
            &[("reason", "max_streams")]
        ),
        1.0,
        "counted:\n{metrics}"
    );
    assert_eq!(
        prom::sum(
            &metrics,
            "tokenmeter_requests_total",
            &[("outcome", "overloaded")]
        ),
        1.0,
        "and ended once, overloaded:\n{metrics}"
    );
}

#[tokio::test]
async fn max_connections_answers_503_and_closes() {
    let upstream = json_upstream().await;
    let mut config = support::config_for(&upstream.url);
    config.server.max_connections = 2;
    let proxy = support::start_proxy(config).await;
    // Two keep-alive connections, each proven accepted by a request.
    let keep = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(proxy.traffic_addr)
            .await
            .expect("connect");
        stream.write_all(keep.as_bytes()).await.expect("send");
        let mut buffer = [0u8; 4096];
        let n = stream.read(&mut buffer).await.expect("read");
        assert_eq!(
            status_of(&String::from_utf8_lossy(&buffer[..n])),
            200,
            "admitted"
        );
        held.push(stream);
    }
    let third = client::post(proxy.traffic_addr, "/v1/models", "").await;
    assert_overloaded(&third, "server.max_connections").await;
    assert_eq!(
        third.headers["connection"], "close",
        "the refused connection is closed"
    );
    assert_eq!(
        proxy.limits.connections_open(),
        2,
        "the refused one holds no slot"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.limits.connections_open() > 0 {
        assert!(
            Instant::now() < deadline,
            "closed connections free their slots"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fourth = client::post(proxy.traffic_addr, "/v1/models", "").await;
    assert_eq!(fourth.status, 200, "admitted again");
    let (_, metrics) = client::get(proxy.admin_addr, "/metrics").await;
    assert_eq!(
        prom::value(
            &metrics,
            "tokenmeter_rejected_total",
            &[("reason", "max_connections")]
        ),
        1.0,
        "counted:\n{metrics}"
    );
    assert_eq!(
        prom::sum(
            &metrics,
            "tokenmeter_requests_total",
            &[("outcome", "overloaded")]
        ),
        1.0,
        "and ended once, overloaded:\n{metrics}"
    );
}

#[tokio::test]
async fn http2_concurrent_streams_are_capped_per_connection() {
    let (release, held) = watch::channel(false);
    let in_flight = Arc::new(InFlight::default());
    let upstream = held_upstream(held, Arc::clone(&in_flight)).await;
    let mut config = support::config_for(&upstream.url);
    config.server.http2_max_concurrent_streams = 2;
    let proxy = support::start_proxy(config).await;
    let stream = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    tokio::spawn(connection);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut sender = sender.clone();
        let addr = proxy.traffic_addr;
        tasks.push(tokio::spawn(async move {
            let request = http::Request::post(format!("http://{addr}{CHAT}"))
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(STREAM_BODY)))
                .expect("request");
            use http_body_util::BodyExt;
            match sender.send_request(request).await {
                Ok(response) => response.into_body().collect().await.map(|b| b.to_bytes()),
                Err(err) => Err(err),
            }
        }));
    }
    // The client sends before it has the server's SETTINGS, so the limit shows either as queueing
    // (after SETTINGS) or as REFUSED_STREAM resets (before): never as a third stream upstream.
    // The upstream counts the streams it holds, so that is checked over the whole test below,
    // with no moment to wait for.
    let deadline = Instant::now() + Duration::from_secs(10);
    while upstream.request_count() < 2 {
        assert!(Instant::now() < deadline, "two streams reach the upstream");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(proxy.limits.streams_admitted(), 2, "the proxy admitted 2");
    // Every held stream, and every one that starts later, finishes now.
    release.send_replace(true);
    let (mut completed, mut refused) = (0, 0);
    for task in tasks {
        let answered = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("every request is answered once the upstream lets go");
        match answered.expect("no panic") {
            Ok(body) => {
                assert!(
                    body.ends_with(b"data: [DONE]\n\n"),
                    "a served stream is complete"
                );
                completed += 1;
            }
            Err(err) => {
                assert!(
                    err.to_string().contains("REFUSED_STREAM")
                        || format!("{err:?}").contains("REFUSED_STREAM"),
                    "an excess stream is refused (safe to retry), not broken: {err:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(completed + refused, 4, "every request answered");
    // How many were refused depends on when the client had the server's SETTINGS, so only a
    // range is known: the two admitted first always complete.
    assert!(
        completed >= 2,
        "the admitted streams completed ({completed} of 4, {refused} refused)"
    );
    assert_eq!(
        upstream.request_count(),
        completed,
        "refused streams never reached the upstream"
    );
    assert_eq!(
        in_flight.peak.load(Ordering::SeqCst),
        2,
        "at most 2 streams in flight on one h2 connection, at any moment"
    );
}

#[tokio::test]
async fn ten_thousand_model_names_and_paths_make_bounded_series() {
    let upstream = RawUpstream::start(|_request: RawRequest, mut stream| async move {
        // Keep-alive: answer every request on this connection until the proxy closes it.
        let mut request = Some(_request);
        for _ in 0..100_000 {
            if request.take().is_none() {
                // Read the next request head (bodies of these requests are small and complete).
                let mut buffer = Vec::new();
                let mut chunk_buf = [0u8; 16384];
                loop {
                    if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buffer[..pos]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        while buffer.len() < pos + 4 + length {
                            match stream.read(&mut chunk_buf).await {
                                Ok(n) if n > 0 => buffer.extend_from_slice(&chunk_buf[..n]),
                                _ => return,
                            }
                        }
                        break;
                    }
                    match stream.read(&mut chunk_buf).await {
                        Ok(n) if n > 0 => buffer.extend_from_slice(&chunk_buf[..n]),
                        _ => return,
                    }
                }
            }
            let mut bytes = chunked_head(200, "application/json");
            bytes.extend(chunk(JSON_OK.as_bytes()));
            bytes.extend_from_slice(LAST_CHUNK);
            if !raw::write(&mut stream, &bytes).await {
                return;
            }
        }
    })
    .await;
    let proxy = support::start_proxy(support::config_for(&upstream.url)).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let addr = proxy.traffic_addr;
    const MODELS: usize = 10_000;
    const PATHS: usize = 2_000;
    const WORKERS: usize = 16;
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let client = client.clone();
        workers.push(tokio::spawn(async move {
            let mut i = worker;
            while i < MODELS + PATHS {
                let request = if i < MODELS {
                    let body = format!(r#"{{"model":"attacker-model-{i}","messages":[{{"role":"user","content":"x"}}]}}"#);
                    http::Request::post(format!("http://{addr}{CHAT}"))
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                } else {
                    http::Request::get(format!("http://{addr}/v1/random-{i}/path?q={i}"))
                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                }
                .expect("request");
                let response = client.request(request).await.expect("a response");
                assert_eq!(response.status(), 200, "request {i}");
                use http_body_util::BodyExt;
                response.into_body().collect().await.expect("body");
                i += WORKERS;
            }
        }));
    }
    for worker in workers {
        worker.await.expect("no panic");
    }
    let text = proxy.metrics.render();
    let series = prom::find(&text, "tokenmeter_requests_total", &[]);
    let models: std::collections::BTreeSet<&str> = series
        .iter()
        .map(|s| s.labels["gen_ai_request_model"].as_str())
        .collect();
    assert!(
        models.len() <= 32 + 2,
        "model label values bounded by max_observed_models (32) + other + unknown: {}",
        models.len()
    );
    assert!(models.contains("other"), "the rest are folded into other");
    assert!(
        series.len() <= 40,
        "{} tokenmeter_requests_total series for {} distinct names and paths",
        series.len(),
        MODELS + PATHS
    );
    let total: f64 = series.iter().map(|s| s.value).sum();
    assert_eq!(total, (MODELS + PATHS) as f64, "every request counted once");
    assert!(
        !text.contains("random-"),
        "no path ever becomes a label value"
    );
    let lines = text.lines().filter(|l| !l.starts_with('#')).count();
    println!(
        "exposition: {lines} sample lines after {} distinct model names and paths",
        MODELS + PATHS
    );
    assert!(
        lines < 20_000,
        "the exposition stays bounded: {lines} lines"
    );
}
