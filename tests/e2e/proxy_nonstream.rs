//! End to end: non-streaming answers (`"stream": false`, one `application/json` body) through the
//! proxy. The body is forwarded byte for byte, and its `usage` gives N_in / N_out in the same
//! token metrics the streams use (source `usage`); no TTFT / ITL / TPOT without token events.

use crate::support;
use std::time::Duration;

use support::backend::{Backend, Script, Step};
use support::raw::{self, RawRequest, RawUpstream};
use support::{client, config_for, prom, start_proxy};
use tokenmeter::meter::whole::MAX_WHOLE_BODY;
use tokenmeter::testbed::sim::{self, SimConfig};
use tokio::net::TcpListener;

const CHAT_REQUEST: &str =
    r#"{"model":"m","messages":[{"role":"user","content":"hello there"}],"stream":false}"#;

const CHAT_ANSWER: &str = r#"{"id":"chatcmpl-9","object":"chat.completion","created":1764400000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi! How can I help you today?"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}"#;

/// The token figures of one operation / provider, read from the proxy's exposition.
#[derive(Debug, PartialEq)]
struct Tokens {
    input_total: f64,
    output_total: f64,
    input_histogram_sum: f64,
    output_histogram_sum: f64,
    output_histogram_count: f64,
    source_usage: f64,
    source_events: f64,
}

fn tokens(text: &str, provider: &str) -> Tokens {
    let by = |kind: &'static str| {
        [
            ("gen_ai_provider_name", provider),
            ("gen_ai_token_type", kind),
        ]
    };
    let provider_only = [("gen_ai_provider_name", provider)];
    let source = |name: &'static str| {
        prom::sum(
            text,
            "tokenmeter_token_count_source_total",
            &[provider_only[0], ("source", name)],
        )
    };
    Tokens {
        input_total: prom::sum(text, "tokenmeter_tokens_total", &by("input")),
        output_total: prom::sum(text, "tokenmeter_tokens_total", &by("output")),
        input_histogram_sum: prom::sum(text, "gen_ai_client_token_usage_sum", &by("input")),
        output_histogram_sum: prom::sum(text, "gen_ai_client_token_usage_sum", &by("output")),
        output_histogram_count: prom::sum(text, "gen_ai_client_token_usage_count", &by("output")),
        source_usage: source("usage"),
        source_events: source("events"),
    }
}

/// Exactly `input` / `output` tokens from one answer's usage.
fn counted(input: f64, output: f64) -> Tokens {
    Tokens {
        input_total: input,
        output_total: output,
        input_histogram_sum: input,
        output_histogram_sum: output,
        output_histogram_count: 1.0,
        source_usage: 1.0,
        source_events: 0.0,
    }
}

/// One request, one `ok`, one E2E, and none of the token-event timings.
fn assert_timed_without_token_events(text: &str, provider: &str) {
    let labels = [("gen_ai_provider_name", provider)];
    for (name, want) in [
        ("tokenmeter_requests_total", 1.0),
        ("gen_ai_server_request_duration_seconds_count", 1.0),
        ("tokenmeter_time_to_first_byte_seconds_count", 1.0),
        ("gen_ai_server_time_to_first_token_seconds_count", 0.0),
        ("tokenmeter_inter_token_latency_seconds_count", 0.0),
        ("gen_ai_server_time_per_output_token_seconds_count", 0.0),
        ("tokenmeter_slo_requests_total", 0.0),
    ] {
        assert_eq!(prom::sum(text, name, &labels), want, "{provider}: {name}");
    }
    assert_eq!(
        prom::sum(
            text,
            "tokenmeter_requests_total",
            &[labels[0], ("outcome", "ok")]
        ),
        1.0,
        "{provider}: the one request is ok"
    );
}

/// A backend answering every request with `body` as `application/json`, cut into `frame`-byte
/// chunks written `gap` apart.
async fn json_backend(body: &'static [u8], frame: usize, gap: Duration) -> Backend {
    Backend::start(move |_| {
        let mut script = Script::json(200, "");
        script.steps = body
            .chunks(frame)
            .map(|chunk| Step::Chunk(gap, chunk.to_vec()))
            .collect();
        script
    })
    .await
}

#[tokio::test]
async fn openai_chat_usage_is_counted_and_the_body_forwarded_unchanged() {
    let mut backend = json_backend(CHAT_ANSWER.as_bytes(), usize::MAX, Duration::ZERO).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let answer = client::post(proxy.traffic_addr, "/v1/chat/completions", CHAT_REQUEST).await;
    assert_eq!(answer.status, 200, "answered");
    assert_eq!(answer.error, None, "clean end");
    assert_eq!(answer.text(), CHAT_ANSWER, "forwarded byte for byte");
    assert_eq!(
        backend.next_request().await.body,
        CHAT_REQUEST.as_bytes(),
        "no usage injection into a non-streaming request"
    );

    let text = proxy.metrics.render();
    assert_eq!(tokens(&text, "openai"), counted(11.0, 7.0), "usage 11 / 7");
    assert_timed_without_token_events(&text, "openai");
    assert_eq!(
        prom::sum(&text, "tokenmeter_prompt_estimate_error_ratio_count", &[]),
        1.0,
        "usage.prompt_tokens calibrated the router's prompt estimate"
    );
    proxy.shutdown().await;
}

/// A length-delimited answer (`content-length`, as most servers send a JSON body) ends with its
/// last byte: hyper stops polling the body there, and the meter must finish it as a clean end,
/// not as a client that went away.
#[tokio::test]
async fn length_delimited_answers_end_cleanly() {
    const ERROR: &str = r#"{"object":"error","message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}"#;
    for (status, body, outcome, output) in [
        (200u16, CHAT_ANSWER, "ok", 7.0),
        (400, ERROR, "client_error", 0.0),
    ] {
        let upstream = RawUpstream::start(move |_request: RawRequest, mut stream| async move {
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let (first, second) = body.as_bytes().split_at(body.len() / 2);
            for part in [head.as_bytes(), first, second] {
                if !raw::write(&mut stream, part).await {
                    return;
                }
            }
        })
        .await;
        let proxy = start_proxy(config_for(&upstream.url)).await;
        let answer = client::post(proxy.traffic_addr, "/v1/chat/completions", CHAT_REQUEST).await;
        assert_eq!(answer.status.as_u16(), status, "status passed through");
        assert_eq!(answer.text(), body, "forwarded byte for byte");
        let text = proxy.metrics.render();
        for (name, want) in [(outcome, 1.0), ("cancelled", 0.0)] {
            assert_eq!(
                prom::sum(&text, "tokenmeter_requests_total", &[("outcome", name)]),
                want,
                "{status}: outcome {name}"
            );
        }
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_tokens_total",
                &[("gen_ai_token_type", "output")]
            ),
            output,
            "{status}: output tokens"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn anthropic_message_usage_is_counted() {
    const MESSAGE: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":9}}"#;
    let backend = json_backend(MESSAGE.as_bytes(), usize::MAX, Duration::ZERO).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let answer = client::post(
        proxy.traffic_addr,
        "/v1/messages",
        r#"{"model":"claude","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(answer.text(), MESSAGE, "forwarded byte for byte");
    let text = proxy.metrics.render();
    assert_eq!(
        tokens(&text, "anthropic"),
        counted(25.0, 9.0),
        "input 20 + 5 cache read, output 9"
    );
    assert_timed_without_token_events(&text, "anthropic");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_body_in_many_small_frames_gives_the_same_counts() {
    let backend = json_backend(CHAT_ANSWER.as_bytes(), 7, Duration::from_millis(1)).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let answer = client::post(proxy.traffic_addr, "/v1/chat/completions", CHAT_REQUEST).await;
    // The proxy passes each upstream chunk on as a frame of its own, and the client's decoder
    // yields one chunk per frame, however many arrive in one read: exact under any load.
    assert_eq!(
        answer.frames.len(),
        CHAT_ANSWER.len().div_ceil(7),
        "the answer arrived in the backend's frames, one by one"
    );
    assert_eq!(answer.text(), CHAT_ANSWER, "forwarded byte for byte");
    let text = proxy.metrics.render();
    assert_eq!(tokens(&text, "openai"), counted(11.0, 7.0), "usage 11 / 7");
    assert_timed_without_token_events(&text, "openai");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_body_over_the_bound_is_forwarded_whole_and_counts_nothing() {
    // A valid answer with usage, one byte per padding character past the bound.
    let padding = "x".repeat(MAX_WHOLE_BODY);
    let big: &'static str = Box::leak(
        CHAT_ANSWER
            .replace("Hi! How can I help you today?", &padding)
            .into_boxed_str(),
    );
    assert!(big.len() > MAX_WHOLE_BODY, "the body is over the bound");
    let backend = json_backend(big.as_bytes(), 64 * 1024, Duration::ZERO).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let answer = client::post(proxy.traffic_addr, "/v1/chat/completions", CHAT_REQUEST).await;
    assert_eq!(answer.status, 200, "answered");
    assert_eq!(answer.error, None, "no error");
    assert!(
        answer.bytes() == big.as_bytes(),
        "forwarded whole and unchanged"
    );
    let text = proxy.metrics.render();
    let found = tokens(&text, "openai");
    assert_eq!(
        (
            found.output_total,
            found.output_histogram_count,
            found.source_usage,
            found.source_events
        ),
        (0.0, 0.0, 0.0, 0.0),
        "no output count: {found:?}"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_prompt_estimate_error_ratio_count", &[]),
        0.0,
        "usage unread: the prompt estimate is not calibrated (it stands in as N_in, as before)"
    );
    assert_timed_without_token_events(&text, "openai");
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_answer_without_usage_counts_no_output() {
    const BARE: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}]}"#;
    let backend = json_backend(BARE.as_bytes(), usize::MAX, Duration::ZERO).await;
    let proxy = start_proxy(config_for(&backend.url)).await;
    let answer = client::post(proxy.traffic_addr, "/v1/chat/completions", CHAT_REQUEST).await;
    assert_eq!(answer.text(), BARE, "forwarded byte for byte");
    let text = proxy.metrics.render();
    let found = tokens(&text, "openai");
    assert_eq!(
        (
            found.output_total,
            found.output_histogram_count,
            found.source_usage
        ),
        (0.0, 0.0, 0.0),
        "nothing invented: {found:?}"
    );
    assert_timed_without_token_events(&text, "openai");
    proxy.shutdown().await;
}

#[tokio::test]
async fn simulated_replica_non_streaming_answers_are_counted() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let replica = sim::spawn(listener, SimConfig::profile("fast").expect("profile"))
        .await
        .expect("sim");
    let proxy = start_proxy(config_for(&format!("http://{}", replica.local_addr()))).await;
    let answer = client::post(
        proxy.traffic_addr,
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"one two three four"}],"max_tokens":9,"stream":false}"#,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let body: serde_json::Value = serde_json::from_slice(&answer.bytes()).expect("JSON answer");
    let prompt = body["usage"]["prompt_tokens"]
        .as_f64()
        .expect("the simulated answer carries usage");
    assert_eq!(
        body["usage"]["completion_tokens"].as_f64(),
        Some(9.0),
        "max_tokens generated: {body}"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        tokens(&text, "openai"),
        counted(prompt, 9.0),
        "the proxy counts what the replica reported"
    );
    assert_timed_without_token_events(&text, "openai");
    proxy.shutdown().await;
}
