//! The one place a request ends (`tokenmeter::context::finish`), end to end: whatever happens to a
//! request — a metered stream, a refusal at admission, a passthrough, an upstream failure, the
//! client leaving before the head or during the body — its finish point runs exactly once, with
//! the right outcome and the whole context.
//!
//! Each test records every finish with a hook of its own ([`support::start_proxy_with_hooks`]),
//! then shuts the proxy down (which ends whatever is still open) before it counts: a finish that
//! ran twice, or not at all, would show.

use crate::support;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokenmeter::context::{FinishHook, Finished, Outcome};
use tokenmeter::dialect::Dialect;
use tokenmeter::server::ServerHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use support::backend::{replay, Backend, Script, Step};
use support::ports::Refusing;
use support::raw::{self, RawUpstream};
use support::{client, config_for, events_of, fixture, prom};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true}"#;

/// One finish, as the hooks saw it.
#[derive(Debug, Clone)]
struct Ending {
    outcome: Outcome,
    status: Option<u16>,
    upstream_status: Option<u16>,
    dialect: Option<Dialect>,
    pool: Option<String>,
    backend: Option<String>,
    attempts: u32,
    token_events: u64,
    output_tokens: u64,
    ttft: Option<Duration>,
    e2e: Duration,
    error: Option<String>,
    /// The request body the context still held when the request ended.
    body_bytes: Option<usize>,
}

/// Every finish of one proxy, in order.
#[derive(Debug, Default)]
struct Endings(Mutex<Vec<Ending>>);

impl FinishHook for Endings {
    fn finished(&self, request: &Finished<'_>) {
        let context = request.context;
        let ending = Ending {
            outcome: request.outcome,
            status: context.status.map(|s| s.as_u16()),
            upstream_status: context.upstream_status.map(|s| s.as_u16()),
            dialect: context.dialect,
            pool: context.route.pool.as_deref().map(str::to_owned),
            backend: context.route.backend.as_ref().map(|b| b.label.to_string()),
            attempts: context.route.attempts,
            token_events: context.stream.token_events,
            output_tokens: request.figures.output_tokens,
            ttft: request.figures.ttft,
            e2e: request.figures.e2e,
            error: request.error.map(|err| err.to_string()),
            body_bytes: context.request.generation.as_ref().map(|g| g.body.len()),
        };
        self.0.lock().expect("lock").push(ending);
    }
}

impl Endings {
    fn all(&self) -> Vec<Ending> {
        self.0.lock().expect("lock").clone()
    }

    /// Waits (5 s at most) until `n` requests have ended.
    async fn wait_for(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.all().len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} finishes expected, saw {:?}",
                self.all()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

async fn proxy_with(config: tokenmeter::config::Config) -> (ServerHandle, Arc<Endings>) {
    let endings = Arc::new(Endings::default());
    let hook: Arc<dyn FinishHook> = endings.clone();
    (
        support::start_proxy_with_hooks(config, vec![hook]).await,
        endings,
    )
}

/// Shuts the proxy down (ending whatever is still open) and returns every finish, after checking
/// that the proxy's own finish hook counted each exactly once too.
async fn finishes(proxy: ServerHandle, endings: &Endings) -> Vec<Ending> {
    let metrics = Arc::clone(&proxy.metrics);
    proxy.shutdown().await;
    let all = endings.all();
    let counted = prom::sum(&metrics.render(), "tokenmeter_requests_total", &[]);
    assert_eq!(
        counted,
        all.len() as f64,
        "tokenmeter_requests_total counted every finish once: {all:?}"
    );
    all
}

/// A chat request as raw HTTP/1.1.
fn request(body: &str) -> String {
    format!(
        "POST {CHAT} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn port_of(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

#[tokio::test]
async fn a_metered_stream_ends_once_ok_with_its_tokens() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::from_millis(2))).await;
    let (proxy, endings) = proxy_with(config_for(&backend.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 200);
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "one request, one finish: {all:?}");
    let end = &all[0];
    assert_eq!(end.outcome, Outcome::Ok);
    assert_eq!((end.status, end.upstream_status), (Some(200), Some(200)));
    assert_eq!(end.dialect, Some(Dialect::OpenAiChat));
    assert_eq!(end.pool.as_deref(), Some("default"));
    assert_eq!(
        end.backend,
        Some(port_of(&backend.url)),
        "the backend that answered"
    );
    assert_eq!(end.attempts, 1);
    assert_eq!(end.token_events, 7, "every content delta of the fixture");
    assert_eq!(end.output_tokens, 7, "usage.completion_tokens");
    assert!(
        end.ttft.is_some_and(|ttft| ttft <= end.e2e),
        "TTFT within E2E"
    );
    assert_eq!(end.error, None);
    assert_eq!(
        end.body_bytes,
        Some(0),
        "the request body was let go at the response head, not held for the stream"
    );
}

#[tokio::test]
async fn a_head_request_ends_once_with_its_head() {
    // A HEAD's answer has no body; hyper never polls it, so the request ends with the head.
    let upstream = RawUpstream::start(|_request, mut stream| async move {
        let _ = stream
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n",
            )
            .await;
        let mut sink = [0u8; 64];
        let _ = stream.read(&mut sink).await;
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&upstream.url)).await;
    let mut raw = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    raw.write_all(b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("send");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(raw.read(&mut byte).await.expect("read"), 1, "a head");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    endings.wait_for(1).await;
    drop(raw);
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].outcome, Outcome::Ok, "not cancelled: {:?}", all[0]);
    assert_eq!(all[0].upstream_status, Some(200));
}

#[tokio::test]
async fn a_request_refused_at_admission_ends_once_overloaded() {
    // The held stream's end waits for the test's word: it holds the one stream slot for as long
    // as the refusal takes, however slow the machine.
    let release = Arc::new(Notify::new());
    let upstream = RawUpstream::start({
        let release = Arc::clone(&release);
        move |_request, mut stream| {
            let release = Arc::clone(&release);
            async move {
                let events = events_of(&fixture("vllm-chat-usage.sse"));
                let head = raw::chunked_head(200, "text/event-stream");
                for bytes in [head, raw::chunk(&events[0]), raw::chunk(&events[1])] {
                    if !raw::write(&mut stream, &bytes).await {
                        return;
                    }
                }
                release.notified().await;
                raw::write(&mut stream, raw::LAST_CHUNK).await;
            }
        }
    })
    .await;
    let mut config = config_for(&upstream.url);
    config.server.max_streams = 1;
    let (proxy, endings) = proxy_with(config).await;
    let mut held = client::open(proxy.traffic_addr, CHAT, BODY).await;
    let first = held.next_frame().await.expect("a frame").expect("ok");
    let refused = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(refused.status, 503);
    endings.wait_for(1).await;
    let refusal = endings.all()[0].clone();
    assert_eq!(refusal.outcome, Outcome::Overloaded, "{refusal:?}");
    assert_eq!(refusal.status, Some(503));
    assert_eq!(refusal.upstream_status, None, "never sent upstream");
    assert_eq!(
        refusal.dialect,
        Some(Dialect::OpenAiChat),
        "named from its head"
    );
    assert_eq!((refusal.attempts, refusal.backend), (0, None));
    release.notify_one();
    let held = held.collect_after(first).await;
    assert!(held.error.is_none(), "clean end: {:?}", held.error);
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 2, "the refused one and the held one: {all:?}");
    assert_eq!(
        all[1].outcome,
        Outcome::Ok,
        "the admitted stream ended well"
    );
}

#[tokio::test]
async fn a_connection_refused_at_admission_ends_its_request_once_overloaded() {
    let backend = Backend::start(|_| Script::json(200, r#"{"data":[]}"#)).await;
    let mut config = config_for(&backend.url);
    config.server.max_connections = 1;
    let (proxy, endings) = proxy_with(config).await;
    let mut held = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    held.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("send");
    // Read to the end of the answer (its last chunk), so the GET has ended before we go on.
    client::read_chunked_answer(&mut held).await;
    let refused = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(refused.status, 503);
    drop(held);
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let refusal = all
        .iter()
        .find(|end| end.outcome == Outcome::Overloaded)
        .expect("the refused request ended");
    assert_eq!(refusal.status, Some(503));
    assert_eq!(refusal.dialect, Some(Dialect::OpenAiChat));
    assert_eq!(
        all.iter().filter(|end| end.outcome == Outcome::Ok).count(),
        1,
        "the admitted GET ended ok"
    );
}

#[tokio::test]
async fn a_passthrough_ends_once_with_its_body() {
    // The body comes 150 ms after the head: the request ends with the body, not the head.
    let backend = Backend::start(|_| Script {
        status: 200,
        content_type: "application/json".to_owned(),
        steps: vec![
            Step::Chunk(Duration::ZERO, b"{\"data\":".to_vec()),
            Step::Chunk(Duration::from_millis(150), b"[]}".to_vec()),
        ],
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&backend.url)).await;
    let (status, text) = client::get(proxy.traffic_addr, "/v1/models").await;
    assert_eq!((status.as_u16(), text.as_str()), (200, "{\"data\":[]}"));
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let end = &all[0];
    assert_eq!(end.outcome, Outcome::Ok);
    assert_eq!(end.dialect, None, "not a generation request");
    assert_eq!(end.upstream_status, Some(200));
    assert_eq!(end.backend, Some(port_of(&backend.url)));
    assert!(
        end.e2e >= Duration::from_millis(150),
        "ended with its last byte: {:?}",
        end.e2e
    );
}

#[tokio::test]
async fn an_empty_answer_ends_once_with_its_status_not_as_cancelled() {
    // hyper never polls a body that is empty from the start: the request must end with its head.
    let upstream = RawUpstream::start(|_request, mut stream| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
            .await;
        let _ = stream.shutdown().await;
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&upstream.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 503);
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].outcome, Outcome::UpstreamError, "{:?}", all[0]);
    assert_eq!(all[0].upstream_status, Some(503));
}

#[tokio::test]
async fn an_unreachable_upstream_ends_once_after_every_attempt() {
    // Held for the whole test: a released port could be taken by another test's listener.
    let dead = [Refusing::new(), Refusing::new()];
    let urls: Vec<String> = dead.iter().map(Refusing::url).collect();
    let mut config = config_for(&urls[0]);
    config.upstream.urls = urls.clone();
    config.routing.retries = 1;
    let (proxy, endings) = proxy_with(config).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 502);
    let all = finishes(proxy, &endings).await;
    assert_eq!(
        all.len(),
        1,
        "one finish for the request and its retry: {all:?}"
    );
    let end = &all[0];
    assert_eq!(end.outcome, Outcome::UpstreamError);
    assert_eq!(end.status, Some(502), "the proxy's own answer");
    assert_eq!(end.upstream_status, None);
    assert_eq!(end.attempts, 2, "tried both backends");
    assert!(
        end.backend
            .as_ref()
            .is_some_and(|b| urls.iter().any(|url| port_of(url) == *b)),
        "labelled with the last backend tried: {end:?}"
    );
    assert!(
        end.error
            .as_deref()
            .is_some_and(|e| e.contains("unreachable")),
        "with the error: {end:?}"
    );
}

#[tokio::test]
async fn a_client_gone_before_the_head_ends_once_cancelled_at_its_backend() {
    let upstream = RawUpstream::start(|_request, mut stream| async move {
        // Never answers; holds the connection until the proxy closes it.
        let mut sink = [0u8; 64];
        let _ = stream.read(&mut sink).await;
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&upstream.url)).await;
    let mut raw = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    raw.write_all(request(BODY).as_bytes()).await.expect("send");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while upstream.request_count() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request reached the backend"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(raw);
    endings.wait_for(1).await;
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let end = &all[0];
    assert_eq!(end.outcome, Outcome::Cancelled);
    assert_eq!(
        (end.status, end.upstream_status),
        (None, None),
        "no head came back"
    );
    assert_eq!(
        end.backend,
        Some(port_of(&upstream.url)),
        "it was waiting on this backend"
    );
    assert_eq!(end.attempts, 1);
}

#[tokio::test]
async fn a_client_gone_during_the_body_ends_once_cancelled_with_what_it_saw() {
    // The role and two tokens, then a long silence the client does not wait out.
    let sent: Vec<Vec<u8>> = events_of(&fixture("vllm-chat-usage.sse"))
        .into_iter()
        .take(3)
        .collect();
    let mut steps: Vec<Step> = sent
        .iter()
        .map(|event| Step::Chunk(Duration::from_millis(2), event.clone()))
        .collect();
    steps.push(Step::Pause(Duration::from_secs(10)));
    let backend = Backend::start(move |_| Script {
        status: 200,
        content_type: "text/event-stream".to_owned(),
        steps: steps.clone(),
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&backend.url)).await;
    let mut stream = client::open(proxy.traffic_addr, CHAT, BODY).await;
    // Everything the backend will send before its silence: the meter saw each event before the
    // client did, so it has seen them all.
    let all_sent = sent.concat();
    let mut seen = Vec::new();
    while seen.len() < all_sent.len() {
        let (_, bytes) = stream.next_frame().await.expect("a frame").expect("ok");
        seen.extend_from_slice(&bytes);
    }
    assert_eq!(seen, all_sent, "the three events, unchanged");
    stream.disconnect();
    endings.wait_for(1).await;
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let end = &all[0];
    assert_eq!(end.outcome, Outcome::Cancelled);
    assert_eq!(end.upstream_status, Some(200));
    assert_eq!(
        end.token_events, 2,
        "the tokens it saw (\"Hello\" and \"!\"; the role chunk is none): {end:?}"
    );
    assert!(end.ttft.is_some(), "and its TTFT");
}

#[tokio::test]
async fn a_stream_cut_by_the_upstream_ends_once_with_the_error() {
    let mut steps: Vec<Step> = events_of(&fixture("vllm-chat-usage.sse"))
        .into_iter()
        .take(3)
        .map(|event| Step::Chunk(Duration::from_millis(2), event))
        .collect();
    steps.push(Step::Crash);
    let backend = Backend::start(move |_| Script {
        status: 200,
        content_type: "text/event-stream".to_owned(),
        steps: steps.clone(),
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&backend.url)).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert!(streamed.error.is_some(), "the client saw a broken stream");
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].outcome, Outcome::UpstreamError);
    assert!(all[0].error.is_some(), "with what cut it: {:?}", all[0]);
}

#[tokio::test]
async fn an_idle_upstream_ends_once_as_a_timeout() {
    let mut steps: Vec<Step> = events_of(&fixture("vllm-chat-usage.sse"))
        .into_iter()
        .take(2)
        .map(|event| Step::Chunk(Duration::ZERO, event))
        .collect();
    steps.push(Step::Pause(Duration::from_secs(5)));
    let backend = Backend::start(move |_| Script {
        status: 200,
        content_type: "text/event-stream".to_owned(),
        steps: steps.clone(),
    })
    .await;
    let mut config = config_for(&backend.url);
    config.upstream.idle_timeout = Duration::from_millis(200);
    let (proxy, endings) = proxy_with(config).await;
    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert!(streamed.error.is_some(), "cut");
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].outcome, Outcome::Timeout);
}

#[tokio::test]
async fn requests_refused_by_the_meter_end_once_as_client_errors() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = config_for(&backend.url);
    config.server.max_request_body_bytes = 1024;
    let (proxy, endings) = proxy_with(config).await;
    let large = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(2000)
    );
    let too_large = client::post(proxy.traffic_addr, CHAT, &large).await;
    assert_eq!(too_large.status, 413);
    // Both framing headers: refused as possible request smuggling.
    let mut raw = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    raw.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await
    .expect("send");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut answer)).await;
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 400"),
        "refused: {}",
        String::from_utf8_lossy(&answer)
    );
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let statuses: Vec<_> = all.iter().map(|end| (end.outcome, end.status)).collect();
    assert_eq!(
        statuses,
        vec![
            (Outcome::ClientError, Some(413)),
            (Outcome::ClientError, Some(400))
        ]
    );
    assert!(all
        .iter()
        .all(|end| end.upstream_status.is_none() && end.attempts == 0));
}

#[tokio::test]
async fn a_client_gone_mid_request_body_ends_once_cancelled() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let (proxy, endings) = proxy_with(config_for(&backend.url)).await;
    let mut raw = TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    raw.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: 1000\r\n\r\n{\"model\":",
    )
    .await
    .expect("send");
    // Admitted: the meter is reading its body when the client leaves.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while proxy.limits.streams_admitted() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request was admitted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(raw);
    endings.wait_for(1).await;
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].outcome, Outcome::Cancelled, "{:?}", all[0]);
    assert_eq!(all[0].attempts, 0, "never sent upstream");
}

#[tokio::test]
async fn a_client_that_closes_right_after_done_ends_its_request_once_ok() {
    // The backend writes the whole stream, `[DONE]` included, and holds the body's end (its
    // terminating chunk) until the proxy hangs up: the client's close after `[DONE]` (what the
    // OpenAI SDK does) always reaches the proxy before the upstream body's end.
    let upstream = RawUpstream::start(|_request, mut stream| async move {
        let events = events_of(&fixture("vllm-chat-usage.sse"));
        let mut bytes = raw::chunked_head(200, "text/event-stream");
        for event in &events {
            bytes.extend_from_slice(&raw::chunk(event));
        }
        if raw::write(&mut stream, &bytes).await {
            raw::hold(&mut stream, Duration::from_secs(30)).await;
            raw::write(&mut stream, raw::LAST_CHUNK).await;
        }
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&upstream.url)).await;
    let metrics = Arc::clone(&proxy.metrics);
    let mut stream = client::open(proxy.traffic_addr, CHAT, BODY).await;
    let mut seen = Vec::new();
    while !seen.ends_with(b"data: [DONE]\n\n") {
        let (_, bytes) = stream.next_frame().await.expect("a frame").expect("ok");
        seen.extend_from_slice(&bytes);
    }
    assert_eq!(
        seen,
        fixture("vllm-chat-no-usage.sse"),
        "the whole stream, the injected usage chunk stripped"
    );
    stream.disconnect();
    endings.wait_for(1).await;
    let text = metrics.render();
    let all = finishes(proxy, &endings).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let end = &all[0];
    assert_eq!(
        end.outcome,
        Outcome::Ok,
        "the client had the whole stream: {end:?}"
    );
    assert_eq!((end.token_events, end.output_tokens), (7, 7), "{end:?}");
    assert_eq!(end.error, None);
    let outcome = |outcome| prom::sum(&text, "tokenmeter_requests_total", &[("outcome", outcome)]);
    assert_eq!(
        (outcome("ok"), outcome("cancelled")),
        (1.0, 0.0),
        "counted ok, not cancelled:\n{text}"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        7.0,
        "its tokens, from its usage"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_slo_requests_total", &[("slo", "all")]),
        1.0,
        "and judged against the SLO, as an ok stream is"
    );
    assert_eq!(prom::sum(&text, "tokenmeter_streams_active", &[]), 0.0);
}

#[tokio::test]
async fn refusals_end_once_as_the_clients_errors_whatever_their_status() {
    // As llama-server answers (without bodies here, so the requests end with their heads): 500 to
    // a body that is not JSON, 501 to an endpoint it does not serve; and 502 to a request it could
    // read, which stays the upstream's.
    let upstream = RawUpstream::start(|request, mut stream| async move {
        let status = if request.head.starts_with("POST /v1/embeddings ") {
            "501 Not Implemented"
        } else if serde_json::from_slice::<serde_json::Value>(&request.body).is_err() {
            "500 Internal Server Error"
        } else {
            "502 Bad Gateway"
        };
        let head = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
    let (proxy, endings) = proxy_with(config_for(&upstream.url)).await;
    for (path, body, status) in [
        (CHAT, r#"{"model":"m","messages":["#, 500),
        ("/v1/embeddings", r#"{"model":"m","input":"hi"}"#, 501),
        (CHAT, BODY, 502),
    ] {
        let answered = client::post(proxy.traffic_addr, path, body).await;
        assert_eq!(answered.status.as_u16(), status, "{path} {body}");
    }
    let all = finishes(proxy, &endings).await;
    let ends: Vec<_> = all
        .iter()
        .map(|end| (end.outcome, end.upstream_status, end.dialect))
        .collect();
    assert_eq!(
        ends,
        vec![
            (Outcome::ClientError, Some(500), Some(Dialect::OpenAiChat)),
            (Outcome::ClientError, Some(501), None),
            (Outcome::UpstreamError, Some(502), Some(Dialect::OpenAiChat)),
        ],
        "{all:?}"
    );
}
