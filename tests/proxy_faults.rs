//! End to end: what clients see and what is counted when something goes wrong.
mod support;

use std::time::Duration;

use support::backend::{Backend, Script, Step};
use support::{client, config_for, events_of, fixture, prom, start_proxy};
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn outcome(text: &str, outcome: &str) -> f64 {
    prom::sum(text, "tokenmeter_requests_total", &[("outcome", outcome)])
}

/// The fixture's first `n` events, each as its own chunk after `gap`.
fn first_events(n: usize, gap: Duration) -> Vec<Step> {
    events_of(&fixture("vllm-chat-usage.sse"))
        .into_iter()
        .take(n)
        .map(|event| Step::Chunk(gap, event))
        .collect()
}

fn sse(steps: Vec<Step>) -> Script {
    Script {
        status: 200,
        content_type: "text/event-stream".to_owned(),
        steps,
    }
}

#[tokio::test]
async fn client_disconnect_closes_the_upstream_within_100ms_and_counts_cancelled() {
    let mut steps = first_events(2, ms(10));
    steps.push(Step::Pause(Duration::from_secs(10)));
    let mut backend = Backend::start(move |_| sse(steps.clone())).await;
    let proxy = start_proxy(config_for(&backend.url)).await;

    let mut stream = client::open(proxy.traffic_addr, CHAT, BODY).await;
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("Hello") {
        let (_, bytes) = stream
            .next_frame()
            .await
            .expect("a frame")
            .expect("no error");
        seen.extend_from_slice(&bytes);
    }
    backend.next_request().await;
    let hung_up = Instant::now();
    stream.disconnect();
    let closed = backend
        .next_close(Duration::from_secs(2))
        .await
        .expect("the proxy closed its upstream connection");
    let delay = closed - hung_up;
    assert!(
        delay < ms(100),
        "upstream closed {delay:?} after the client left"
    );

    // The meter finishes on drop, on the proxy's connection task: wait for the count.
    let deadline = Instant::now() + Duration::from_secs(2);
    while outcome(&proxy.metrics.render(), "cancelled") < 1.0 && Instant::now() < deadline {
        tokio::time::sleep(ms(5)).await;
    }
    let text = proxy.metrics.render();
    assert_eq!(
        outcome(&text, "cancelled"),
        1.0,
        "counted as cancelled:\n{text}"
    );
    assert_eq!(outcome(&text, "ok"), 0.0, "not as ok");
    assert_eq!(
        prom::sum(&text, "tokenmeter_streams_active", &[]),
        0.0,
        "no stream left active"
    );
}

#[tokio::test]
async fn upstream_crash_midstream_breaks_the_client_stream_and_is_counted() {
    let mut steps = first_events(3, ms(5));
    steps.push(Step::Crash);
    let backend = Backend::start(move |_| sse(steps.clone())).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 200, "the head was already sent");
    assert!(
        streamed.error.is_some(),
        "the client sees a broken stream, not a clean end"
    );
    assert!(
        streamed.text().contains("\"!\""),
        "tokens before the crash arrived"
    );
    let text = proxy.metrics.render();
    assert_eq!(outcome(&text, "upstream_error"), 1.0, "counted:\n{text}");
    assert_eq!(
        prom::sum(&text, "tokenmeter_slo_requests_total", &[]),
        0.0,
        "no SLO verdict for a failure"
    );
}

#[tokio::test]
async fn upstream_down_is_a_502_json_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let proxy = start_proxy(config_for(&format!("http://127.0.0.1:{port}"))).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 502, "bad gateway");
    assert_eq!(streamed.headers["content-type"], "application/json");
    let json: serde_json::Value =
        serde_json::from_slice(&streamed.bytes()).expect("JSON error body");
    assert_eq!(json["error"]["type"], "upstream_unavailable", "{json}");
    assert_eq!(json["error"]["code"], 502, "{json}");
    let text = proxy.metrics.render();
    let labels = [("outcome", "upstream_error"), ("gen_ai_request_model", "m")];
    assert_eq!(
        prom::value(&text, "tokenmeter_requests_total", &labels),
        1.0,
        "{text}"
    );
}

#[tokio::test]
async fn error_event_after_a_200_is_an_upstream_error() {
    let events = events_of(&fixture("vllm-chat-error-midstream.sse"));
    let backend =
        Backend::start(move |_| Script::sse(events.iter().map(|e| (ms(5), e.clone())).collect()))
            .await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-error-midstream.sse"),
        "passed through"
    );
    let text = proxy.metrics.render();
    assert_eq!(outcome(&text, "upstream_error"), 1.0, "{text}");
    assert_eq!(outcome(&text, "ok"), 0.0);
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        1.0,
        "one token before the error"
    );
}

#[tokio::test]
async fn idle_timeout_cuts_a_stalled_stream() {
    let mut steps = first_events(2, ms(5));
    steps.push(Step::Pause(Duration::from_secs(5)));
    let backend = Backend::start(move |_| sse(steps.clone())).await;
    let mut config = config_for(&backend.url);
    config.upstream.idle_timeout = ms(300);
    let proxy = start_proxy(config).await;
    let started = Instant::now();
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    let took = started.elapsed();
    assert!(streamed.error.is_some(), "broken stream, not a clean end");
    assert!(
        took >= ms(300) && took < ms(1500),
        "cut after the idle timeout, took {took:?}"
    );
    assert_eq!(outcome(&proxy.metrics.render(), "timeout"), 1.0);
}

#[tokio::test]
async fn silent_upstream_is_a_504() {
    // A listener that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_url = format!("http://{}", silent.local_addr().expect("addr"));
    let mut config = config_for(&silent_url);
    config.upstream.response_timeout = ms(200);
    let proxy = start_proxy(config).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 504, "gateway timeout");
    let json: serde_json::Value = serde_json::from_slice(&streamed.bytes()).expect("JSON");
    assert_eq!(json["error"]["type"], "upstream_timeout");
    assert_eq!(outcome(&proxy.metrics.render(), "timeout"), 1.0);
    drop(silent);
}

#[tokio::test]
async fn invalid_json_is_forwarded_untouched_and_the_backend_answers() {
    let mut backend = Backend::start(|_| {
        Script::json(
            400,
            r#"{"object":"error","message":"bad json","type":"BadRequestError","code":400}"#,
        )
    })
    .await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let garbage = "{\"stream\": true, \"messages\": [oops";
    let streamed = client::post(proxy.traffic_addr, CHAT, garbage).await;
    let seen = backend.next_request().await;
    assert_eq!(seen.body, garbage.as_bytes(), "forwarded byte for byte");
    assert_eq!(streamed.status, 400, "the backend's answer");
    assert!(streamed.text().contains("bad json"));
    let text = proxy.metrics.render();
    let labels = [
        ("outcome", "client_error"),
        ("gen_ai_request_model", "unknown"),
    ];
    assert_eq!(
        prom::value(&text, "tokenmeter_requests_total", &labels),
        1.0,
        "{text}"
    );
}

#[tokio::test]
async fn oversized_request_body_is_a_413_json_error() {
    let backend = Backend::start(|_| Script::json(200, "{}")).await;
    let mut config = config_for(&backend.url);
    config.server.max_request_body_bytes = 1024;
    let proxy = start_proxy(config).await;
    let big = format!(
        r#"{{"model":"m","prompt":"{}","stream":true}}"#,
        "x".repeat(4096)
    );
    let streamed = client::post(proxy.traffic_addr, "/v1/completions", &big).await;
    assert_eq!(streamed.status, 413);
    let json: serde_json::Value = serde_json::from_slice(&streamed.bytes()).expect("JSON");
    assert_eq!(json["error"]["type"], "invalid_request_error", "{json}");
    assert_eq!(outcome(&proxy.metrics.render(), "client_error"), 1.0);
}

#[tokio::test]
async fn total_timeout_bounds_a_stream_that_keeps_trickling() {
    // A frame every 100 ms never trips the idle timeout; the total timeout still ends it.
    let events = events_of(&fixture("vllm-chat-usage.sse"));
    let backend = Backend::start(move |_| {
        let mut steps = Vec::new();
        for _ in 0..50 {
            steps.push(Step::Chunk(ms(100), events[2].clone()));
        }
        sse(steps)
    })
    .await;
    let mut config = config_for(&backend.url);
    config.upstream.idle_timeout = ms(400);
    config.upstream.total_timeout = ms(700);
    let proxy = start_proxy(config).await;
    let started = Instant::now();
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    let took = started.elapsed();
    assert!(streamed.error.is_some(), "cut, not ended cleanly");
    assert!(
        took >= ms(700) && took < ms(1500),
        "cut at the total timeout: {took:?}"
    );
    assert!(
        streamed.frames.len() >= 5,
        "frames flowed until then: {}",
        streamed.frames.len()
    );
    assert_eq!(outcome(&proxy.metrics.render(), "timeout"), 1.0);
}

#[tokio::test]
async fn connect_timeout_is_a_504_counted_as_timeout() {
    // A listener whose accept queue is full drops further SYNs: connecting to it times out.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let addr = socket.local_addr().expect("addr");
    let listener = socket.listen(1).expect("listen");
    let mut fillers = Vec::new();
    for _ in 0..8 {
        match tokio::time::timeout(ms(200), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => fillers.push(stream),
            _ => break, // the queue is full: connects now hang
        }
    }
    let mut config = config_for(&format!("http://{addr}"));
    config.upstream.connect_timeout = ms(300);
    let proxy = start_proxy(config).await;
    let started = Instant::now();
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    let took = started.elapsed();
    assert_eq!(streamed.status, 504, "connect timeout: {}", streamed.text());
    let json: serde_json::Value = serde_json::from_slice(&streamed.bytes()).expect("JSON");
    assert_eq!(json["error"]["type"], "upstream_timeout", "{json}");
    assert!(took >= ms(300), "waited for the connect timeout: {took:?}");
    assert_eq!(outcome(&proxy.metrics.render(), "timeout"), 1.0);
    drop((listener, fillers));
}
