//! The replica over loopback: vLLM's exact stream bytes, whole responses, errors, routes.

use crate::sim_support;
use sim_support::{call, config, read_events, start, Conn};

/// Replaces the random id and the clock in `event` with fixed ones, for exact comparison.
fn normalise(event: &str) -> String {
    let value: serde_json::Value = match event
        .strip_prefix("data: ")
        .map(|t| serde_json::from_str(t.trim_end()))
    {
        Some(Ok(value)) => value,
        _ => return event.to_owned(),
    };
    let id = value["id"].as_str().expect("id");
    let created = value["created"].as_u64().expect("created");
    event
        .replacen(id, "ID", 1)
        .replacen(&format!("\"created\":{created},"), "\"created\":0,", 1)
}

#[tokio::test]
async fn chat_stream_bytes_are_vllms() {
    let sim = start(config("fast", |_| {})).await;
    let mut conn = Conn::open(sim.local_addr()).await;
    let body = r#"{"model":"my-model","messages":[{"role":"user","content":"Hello, world!"}],"stream":true,"max_tokens":3,"stream_options":{"include_usage":true}}"#;
    let (response, _) = conn.send("POST", "/v1/chat/completions", body).await;
    assert_eq!(response.status(), 200, "stream accepted");
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8",
        "SSE content type"
    );
    let events = read_events(response.into_body(), |_| {}).await;
    let got: Vec<String> = events.iter().map(|e| normalise(&e.text)).collect();
    let head = r#"data: {"id":"ID","object":"chat.completion.chunk","created":0,"model":"my-model","choices":["#;
    // "Hello, world!" is 4 tokens; one message (5) and the request (5) add the template.
    let want = vec![
        format!("{head}{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"),
        format!("{head}{{\"index\":0,\"delta\":{{\"content\":\" tok0\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"),
        format!("{head}{{\"index\":0,\"delta\":{{\"content\":\" tok1\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"),
        format!("{head}{{\"index\":0,\"delta\":{{\"content\":\" tok2\"}},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}}]}}\n\n"),
        format!("{head}],\"usage\":{{\"prompt_tokens\":14,\"total_tokens\":17,\"completion_tokens\":3}}}}\n\n"),
        "data: [DONE]\n\n".to_owned(),
    ];
    assert_eq!(
        got, want,
        "role + 3 content + usage + [DONE], byte for byte"
    );
    let ids: Vec<&str> = events[..5].iter().map(|e| &e.text[13..22]).collect();
    assert!(
        ids.iter().all(|id| *id == "chatcmpl-"),
        "chatcmpl- ids: {ids:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn completions_stream_with_continuous_usage() {
    let sim = start(config("fast", |_| {})).await;
    let mut conn = Conn::open(sim.local_addr()).await;
    let body = r#"{"model":"m","prompt":"a b c","stream":true,"max_tokens":2,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#;
    let (response, _) = conn.send("POST", "/v1/completions", body).await;
    let got: Vec<String> = read_events(response.into_body(), |_| {})
        .await
        .iter()
        .map(|e| normalise(&e.text))
        .collect();
    let head = r#"data: {"id":"ID","object":"text_completion","created":0,"model":"m","choices":["#;
    let want = vec![
        format!("{head}{{\"index\":0,\"text\":\" tok0\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}}],\"usage\":{{\"prompt_tokens\":3,\"total_tokens\":4,\"completion_tokens\":1}}}}\n\n"),
        format!("{head}{{\"index\":0,\"text\":\" tok1\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}}],\"usage\":{{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2}}}}\n\n"),
        format!("{head}],\"usage\":{{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2}}}}\n\n"),
        "data: [DONE]\n\n".to_owned(),
    ];
    assert_eq!(got, want, "no role chunk, cumulative usage on every chunk");
    sim.shutdown().await;
}

#[tokio::test]
async fn default_max_tokens_and_tokens_per_chunk() {
    let sim = start(config("fast", |c| c.tokens_per_chunk = 4)).await;
    let mut conn = Conn::open(sim.local_addr()).await;
    let (response, _) = conn
        .send(
            "POST",
            "/v1/completions",
            r#"{"prompt":"x","stream":true,"ignore_eos":true}"#,
        )
        .await;
    let events = read_events(response.into_body(), |_| {}).await;
    let texts: Vec<String> = events.iter().filter_map(|e| e.content()).collect();
    let want = [
        " tok0",
        " tok1 tok2 tok3 tok4",
        " tok5 tok6 tok7 tok8",
        " tok9 tok10 tok11 tok12",
        " tok13 tok14 tok15",
    ];
    assert_eq!(
        texts, want,
        "16 tokens by default: 1 at prefill, then 4 per chunk"
    );
    assert_eq!(
        events.len(),
        6,
        "5 content chunks + [DONE] (no usage asked)"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn non_streaming_responses() {
    let sim = start(config("fast", |_| {})).await;
    let addr = sim.local_addr();
    let (status, body) = call(
        addr,
        "POST",
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"w w"}],"max_completion_tokens":2}"#,
    )
    .await;
    assert_eq!(status, 200, "chat answered: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON body");
    assert_eq!(json["object"], "chat.completion", "chat object");
    assert_eq!(
        json["model"], "sim-fast",
        "model defaults to the served name"
    );
    assert_eq!(
        json["choices"][0]["message"]["content"], " tok0 tok1",
        "two tokens"
    );
    assert_eq!(
        json["choices"][0]["finish_reason"], "length",
        "ran to max_tokens"
    );
    assert_eq!(
        json["usage"]["prompt_tokens"], 12,
        "2 words + 5 + 5 template tokens"
    );
    assert_eq!(
        json["usage"]["completion_tokens"], 2,
        "usage counts the output"
    );
    let (status, body) = call(
        addr,
        "POST",
        "/v1/completions",
        r#"{"model":"m","prompt":["a","b c"],"max_tokens":1}"#,
    )
    .await;
    assert_eq!(status, 200, "completion answered: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON body");
    assert_eq!(
        (json["object"].as_str(), json["choices"][0]["text"].as_str()),
        (Some("text_completion"), Some(" tok0")),
        "completion body"
    );
    assert_eq!(json["usage"]["prompt_tokens"], 3, "list prompts add up");
    sim.shutdown().await;
}

#[tokio::test]
async fn invalid_requests_get_vllm_errors() {
    let sim = start(config("fast", |c| c.kv_capacity_tokens = 100)).await;
    let addr = sim.local_addr();
    let (status, body) = call(
        addr,
        "POST",
        "/v1/completions",
        r#"{"prompt":"x","max_tokens":0}"#,
    )
    .await;
    assert_eq!(status, 400, "max_tokens 0 is rejected");
    assert_eq!(
        body,
        r#"{"object":"error","message":"max_tokens must be at least 1, got 0.","type":"BadRequestError","code":400}"#,
        "vLLM error body"
    );
    let (status, body) = call(
        addr,
        "POST",
        "/v1/completions",
        &format!(
            r#"{{"prompt":"{}","max_tokens":10}}"#,
            sim_support::words(95)
        ),
    )
    .await;
    assert_eq!(status, 400, "too long for the KV cache: {body}");
    assert!(
        body.contains("maximum context length is 100 tokens") && body.contains("105 tokens"),
        "says why: {body}"
    );
    let (status, body) = call(addr, "POST", "/v1/chat/completions", "{").await;
    assert_eq!(status, 400, "malformed JSON: {body}");
    assert!(
        body.contains("\"type\":\"BadRequestError\""),
        "typed error: {body}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn routes() {
    let sim = start(config("fast", |c| c.model = "served".to_owned())).await;
    let addr = sim.local_addr();
    assert_eq!(
        call(addr, "GET", "/health", "").await,
        (200, String::new()),
        "health is 200, empty"
    );
    let (status, body) = call(addr, "GET", "/v1/models", "").await;
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        (status, json["data"][0]["id"].as_str()),
        (200, Some("served")),
        "models lists the served name"
    );
    assert_eq!(
        call(addr, "GET", "/nope", "").await,
        (404, r#"{"detail":"Not Found"}"#.to_owned()),
        "unknown path"
    );
    assert_eq!(
        call(addr, "GET", "/v1/completions", "").await.0,
        405,
        "wrong method"
    );
    sim.shutdown().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer accepting after shutdown"
    );
}
