//! End to end: every stream dialect through the proxy. The recorded-shape fixtures come from a
//! scripted upstream (one event per frame, bytes unchanged); the OpenAI Responses and Anthropic
//! Messages streams also come from the simulated replica.

use crate::support;
use std::time::Duration;

use support::backend::{Backend, Script};
use support::timeline::{self, Window};
use support::{client, config_for, prom, start_proxy};
use tokenmeter::testbed::sim::{self, SimConfig};
use tokio::net::TcpListener;

fn dialect_fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/dialects/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|err| panic!("read {path}: {err}"))
}

fn expected(name: &str) -> serde_json::Value {
    serde_json::from_slice(&dialect_fixture(&format!("{name}.expected.json")))
        .expect("expected JSON")
}

/// The fixture cut into frames: SSE events end at a blank line, NDJSON events at a newline.
fn frames(stream: &[u8], ndjson: bool) -> Vec<Vec<u8>> {
    let separator: &[u8] = if ndjson { b"\n" } else { b"\n\n" };
    let mut frames = Vec::new();
    let mut start = 0;
    while let Some(pos) = stream[start..]
        .windows(separator.len())
        .position(|w| w == separator)
    {
        let end = start + pos + separator.len();
        frames.push(stream[start..end].to_vec());
        start = end;
    }
    if start < stream.len() {
        frames.push(stream[start..].to_vec());
    }
    frames
}

#[tokio::test]
async fn every_dialect_fixture_is_metered_through_the_proxy_unchanged() {
    for (name, file, path, body, operation, provider) in [
        (
            "tgi",
            "tgi.sse",
            "/generate_stream",
            r#"{"inputs":"hi","parameters":{"max_new_tokens":20}}"#,
            "text_completion",
            "tgi",
        ),
        (
            "triton",
            "triton.sse",
            "/v2/models/ensemble/generate_stream",
            r#"{"text_input":"hi","max_tokens":20}"#,
            "text_completion",
            "triton",
        ),
        (
            "ollama-chat",
            "ollama-chat.ndjson",
            "/api/chat",
            r#"{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}"#,
            "chat",
            "ollama",
        ),
        (
            "ollama-generate",
            "ollama-generate.ndjson",
            "/api/generate",
            r#"{"model":"llama3.2","prompt":"hi"}"#,
            "text_completion",
            "ollama",
        ),
        (
            "llamacpp-completion",
            "llamacpp-completion.sse",
            "/completion",
            r#"{"prompt":"hi","stream":true}"#,
            "text_completion",
            "llama_cpp",
        ),
        (
            "openai-responses",
            "openai-responses.sse",
            "/v1/responses",
            r#"{"model":"gpt-x","input":"hi","stream":true}"#,
            "chat",
            "openai",
        ),
        (
            "anthropic-messages",
            "anthropic-messages.sse",
            "/v1/messages",
            r#"{"model":"claude","max_tokens":64,"messages":[{"role":"user","content":"hi"}],"stream":true}"#,
            "chat",
            "anthropic",
        ),
    ] {
        let ndjson = file.ends_with(".ndjson");
        let stream = dialect_fixture(file);
        let content_type = if ndjson {
            "application/x-ndjson"
        } else {
            "text/event-stream"
        };
        let scripted = frames(&stream, ndjson);
        let backend = Backend::start(move |_| {
            let mut script = Script::sse(
                scripted
                    .iter()
                    .map(|f| (Duration::from_millis(3), f.clone()))
                    .collect(),
            );
            script.content_type = content_type.to_owned();
            script
        })
        .await;
        let proxy = start_proxy(config_for(&backend.url)).await;
        let streamed = client::post(proxy.traffic_addr, path, body).await;
        assert_eq!(streamed.status, 200, "{name}");
        assert_eq!(
            streamed.bytes(),
            stream,
            "{name}: bytes unchanged (no usage injection outside OpenAI chat/completions)"
        );

        let want = expected(name);
        let text = proxy.metrics.render();
        let labels = [
            ("gen_ai_operation_name", operation),
            ("gen_ai_provider_name", provider),
        ];
        let token_events = want["token_events"].as_u64().expect("token_events");
        assert_eq!(
            prom::sum(
                &text,
                "gen_ai_server_time_to_first_token_seconds_count",
                &labels
            ),
            1.0,
            "{name}: one TTFT"
        );
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_inter_token_latency_seconds_count",
                &labels
            ),
            (token_events - 1) as f64,
            "{name}: a gap per pair of token events"
        );
        let output = want["completion_tokens"]
            .as_u64()
            .or_else(|| want["event_tokens"].as_u64())
            .unwrap_or(token_events);
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_tokens_total",
                &[labels[0], labels[1], ("gen_ai_token_type", "output")]
            ),
            output as f64,
            "{name}: output tokens"
        );
        if let Some(prompt) = want["prompt_tokens"].as_u64() {
            assert_eq!(
                prom::sum(
                    &text,
                    "tokenmeter_tokens_total",
                    &[labels[0], labels[1], ("gen_ai_token_type", "input")]
                ),
                prompt as f64,
                "{name}: input tokens from the stream's usage"
            );
        }
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_requests_total",
                &[labels[0], ("outcome", "ok")]
            ),
            1.0,
            "{name}: ok"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn error_events_of_other_dialects_count_as_upstream_errors() {
    for (file, path) in [
        ("anthropic-messages-error.sse", "/v1/messages"),
        ("openai-responses-failed.sse", "/v1/responses"),
    ] {
        let stream = dialect_fixture(file);
        let scripted = frames(&stream, false);
        let backend = Backend::start(move |_| {
            Script::sse(
                scripted
                    .iter()
                    .map(|f| (Duration::from_millis(2), f.clone()))
                    .collect(),
            )
        })
        .await;
        let proxy = start_proxy(config_for(&backend.url)).await;
        let streamed =
            client::post(proxy.traffic_addr, path, r#"{"model":"m","stream":true}"#).await;
        assert_eq!(streamed.bytes(), stream, "{file}: passed through");
        let text = proxy.metrics.render();
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_requests_total",
                &[("outcome", "upstream_error")]
            ),
            1.0,
            "{file}"
        );
        assert_eq!(
            prom::sum(&text, "tokenmeter_requests_total", &[("outcome", "ok")]),
            0.0,
            "{file}"
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn unknown_streaming_endpoints_are_timed_never_refused() {
    let mut backend = Backend::start(|_| {
        Script::sse(vec![
            (
                Duration::from_millis(120),
                b"data: {\"anything\": 1}\n\n".to_vec(),
            ),
            (
                Duration::from_millis(50),
                b"data: {\"anything\": 2}\n\n".to_vec(),
            ),
        ])
    })
    .await;
    let mut config = config_for(&backend.url);
    config.server.max_request_body_bytes = 1024;
    let proxy = start_proxy(config).await;
    let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(8192));
    let streamed = client::post(proxy.traffic_addr, "/v1/some/new/stream", &big).await;
    assert_eq!(
        streamed.status, 200,
        "an unknown POST is not held to the inspection limit"
    );
    let seen = backend.next_request().await;
    assert_eq!(seen.body, big.as_bytes(), "streamed through untouched");
    assert!(streamed.error.is_none(), "clean end: {:?}", streamed.error);

    // What the proxy can have measured (support/timeline.rs), whatever the machine's load; the
    // windows' lower ends hold the script (120 ms to the first event, 50 ms more to the second).
    let writes = backend.writes();
    assert_eq!(writes.len(), 3, "two events and the end: {writes:?}");
    let at = timeline::arrivals(&writes, &streamed);
    let start = timeline::request_start(&streamed, &seen);
    let ttfb_window = Window::between(start, at[0]);
    let e2e_window = Window::between(start, at[2]);
    assert!(
        ttfb_window.low >= 0.120 && e2e_window.low >= 0.170,
        "the script's delays bound the windows from below: {ttfb_window:?}, {e2e_window:?}"
    );
    let text = proxy.metrics.render();
    let unknown = [("gen_ai_operation_name", "_OTHER")];
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_time_to_first_byte_seconds_count",
            &unknown
        ),
        1.0,
        "one TTFB"
    );
    let ttfb = prom::sum(&text, "tokenmeter_time_to_first_byte_seconds_sum", &unknown);
    ttfb_window.assert_contains("TTFB (the first event, 120 ms)", ttfb);
    assert_eq!(
        prom::sum(
            &text,
            "gen_ai_server_request_duration_seconds_count",
            &unknown
        ),
        1.0,
        "one E2E"
    );
    let e2e = prom::sum(
        &text,
        "gen_ai_server_request_duration_seconds_sum",
        &unknown,
    );
    e2e_window.assert_contains("E2E (120 + 50 ms, to the body's end)", e2e);
    assert_eq!(
        prom::sum(
            &text,
            "gen_ai_server_time_to_first_token_seconds_count",
            &unknown
        ),
        0.0,
        "no tokens invented"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_tokens_total", &unknown),
        0.0,
        "no token counts"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_requests_total",
            &[unknown[0], ("outcome", "ok")]
        ),
        1.0
    );
}

#[tokio::test]
async fn simulated_replica_speaks_responses_and_messages_through_the_proxy() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let replica = sim::spawn(listener, SimConfig::profile("fast").expect("profile"))
        .await
        .expect("sim");
    let proxy = start_proxy(config_for(&format!("http://{}", replica.local_addr()))).await;
    let responses = client::post(
        proxy.traffic_addr,
        "/v1/responses",
        r#"{"model":"m","input":"one two three","max_output_tokens":9,"stream":true}"#,
    )
    .await;
    assert!(
        responses.text().contains("response.completed"),
        "{}",
        responses.text()
    );
    let messages = client::post(
        proxy.traffic_addr,
        "/v1/messages",
        r#"{"model":"m","max_tokens":6,"messages":[{"role":"user","content":"one two"}],"stream":true}"#,
    )
    .await;
    assert!(
        messages.text().contains("message_stop"),
        "{}",
        messages.text()
    );

    let text = proxy.metrics.render();
    for (provider, tokens) in [("openai", 9.0), ("anthropic", 6.0)] {
        let labels = [
            ("gen_ai_provider_name", provider),
            ("gen_ai_token_type", "output"),
        ];
        assert_eq!(
            prom::sum(&text, "tokenmeter_tokens_total", &labels),
            tokens,
            "{provider}: output from usage"
        );
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_inter_token_latency_seconds_count",
                &[labels[0]]
            ),
            tokens - 1.0,
            "{provider}: one delta per token, so tokens - 1 gaps"
        );
        assert_eq!(
            prom::sum(
                &text,
                "tokenmeter_token_count_source_total",
                &[labels[0], ("source", "usage")]
            ),
            1.0,
            "{provider}: exact count"
        );
    }
}
