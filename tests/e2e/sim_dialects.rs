//! The replica's Responses and Messages dialects over loopback: the exact event sequences, the
//! engine's timing, `max_output_tokens` / `max_tokens`, and the streams metered by tokenmeter's
//! own dialect classifiers to the expected token counts.

use crate::sim_support;
use http::Method;
use http_body_util::BodyExt;
use sim_support::{call, config, read_events, start, Conn, Event};
use tokenmeter::dialect::Dialect;
use tokenmeter::sse::Framer;

/// `"Hello, world!"` is 4 tokens; one message (5) and the request (5) add the chat template.
const HELLO_PROMPT_TOKENS: u64 = 14;

/// The SSE `event:` name and the parsed `data` of one event.
fn parse(event: &Event) -> (String, serde_json::Value) {
    let mut lines = event.text.lines();
    let name = lines
        .next()
        .and_then(|l| l.strip_prefix("event: "))
        .unwrap_or_else(|| panic!("named event: {:?}", event.text));
    let data = lines
        .next()
        .and_then(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("one data line: {:?}", event.text));
    assert_eq!(
        lines.collect::<Vec<_>>(),
        [""],
        "two lines and the blank line per event: {:?}",
        event.text
    );
    let value: serde_json::Value = serde_json::from_str(data).expect("data is JSON");
    assert_eq!(
        value["type"], name,
        "the data's type repeats the event name"
    );
    (name.to_owned(), value)
}

/// Streams `body` to `path` and returns the events (timestamped on arrival).
async fn stream(
    profile_edit: impl FnOnce(&mut tokenmeter::testbed::sim::SimConfig),
    path: &str,
    body: &str,
) -> Vec<Event> {
    let sim = start(config("fast", profile_edit)).await;
    let mut conn = Conn::open(sim.local_addr()).await;
    let (response, _) = conn.send("POST", path, body).await;
    assert_eq!(response.status(), 200, "{path}: stream accepted");
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream; charset=utf-8",
        "{path}: SSE content type"
    );
    let events = read_events(response.into_body(), |_| {}).await;
    sim.shutdown().await;
    events
}

/// What tokenmeter's dialect layer makes of a stream received as `events` (one frame each).
#[derive(Debug, PartialEq, Eq)]
struct Metered {
    token_events: u64,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    errors: u64,
    done: u64,
}

fn meter(path: &str, events: &[Event]) -> Metered {
    let dialect = Dialect::for_request(&Method::POST, path).expect("a generation endpoint");
    let framing = dialect
        .stream_format(Some("text/event-stream; charset=utf-8"))
        .expect("an SSE stream");
    let mut framer = Framer::new(framing, 1 << 20);
    let mut metered = Metered {
        token_events: 0,
        prompt_tokens: None,
        completion_tokens: None,
        errors: 0,
        done: 0,
    };
    for event in events {
        framer.feed(event.text.as_bytes(), |framed| {
            let summary = dialect.classify(framed.event, framed.data);
            metered.token_events += u64::from(summary.token);
            if let Some(usage) = summary.usage {
                metered.prompt_tokens = usage.prompt_tokens.or(metered.prompt_tokens);
                metered.completion_tokens = usage.completion_tokens.or(metered.completion_tokens);
            }
            metered.errors += u64::from(summary.error);
            metered.done += u64::from(summary.done);
        });
    }
    metered
}

#[tokio::test]
async fn responses_stream_event_sequence() {
    let body =
        r#"{"model":"my-model","input":"Hello, world!","max_output_tokens":3,"stream":true}"#;
    let events = stream(|_| {}, "/v1/responses", body).await;
    let parsed: Vec<(String, serde_json::Value)> = events.iter().map(parse).collect();
    let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ],
        "OpenAI's event order, one delta per token"
    );
    let sequence: Vec<u64> = parsed
        .iter()
        .map(|(_, v)| v["sequence_number"].as_u64().expect("sequence_number"))
        .collect();
    assert_eq!(
        sequence,
        (0..11).collect::<Vec<u64>>(),
        "sequence numbers count up from 0"
    );
    let deltas: Vec<&str> = parsed[4..7]
        .iter()
        .map(|(_, v)| v["delta"].as_str().expect("delta"))
        .collect();
    assert_eq!(
        deltas,
        [" tok0", " tok1", " tok2"],
        "the sim's deterministic text"
    );
    let created = &parsed[0].1["response"];
    assert_eq!(
        (
            created["status"].as_str(),
            created["model"].as_str(),
            created["usage"].is_null()
        ),
        (Some("in_progress"), Some("my-model"), true),
        "created: in progress, the request's model, no usage yet"
    );
    let id = created["id"].as_str().expect("id");
    assert!(id.starts_with("resp_"), "a Responses id: {id}");
    let completed = &parsed[10].1["response"];
    assert_eq!(completed["id"], id, "one response id throughout");
    assert_eq!(completed["status"], "completed", "completed");
    assert_eq!(
        completed["output"][0]["content"][0]["text"], " tok0 tok1 tok2",
        "the whole text in the final output"
    );
    assert_eq!(
        (
            completed["usage"]["input_tokens"].as_u64(),
            completed["usage"]["output_tokens"].as_u64(),
            completed["usage"]["total_tokens"].as_u64()
        ),
        (
            Some(HELLO_PROMPT_TOKENS),
            Some(3),
            Some(HELLO_PROMPT_TOKENS + 3)
        ),
        "usage in input / output tokens"
    );
    assert_eq!(
        meter("/v1/responses", &events),
        Metered {
            token_events: 3,
            prompt_tokens: Some(HELLO_PROMPT_TOKENS),
            completion_tokens: Some(3),
            errors: 0,
            done: 1
        },
        "tokenmeter's Responses dialect reads the sim's stream"
    );
}

#[tokio::test]
async fn messages_stream_event_sequence() {
    let body = r#"{"model":"claude-sim","max_tokens":3,"messages":[{"role":"user","content":"Hello, world!"}],"stream":true}"#;
    let events = stream(|_| {}, "/v1/messages", body).await;
    let parsed: Vec<(String, serde_json::Value)> = events.iter().map(parse).collect();
    let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ],
        "Anthropic's event order, one delta per token"
    );
    let message = &parsed[0].1["message"];
    assert_eq!(
        (
            message["model"].as_str(),
            message["role"].as_str(),
            message["usage"]["input_tokens"].as_u64()
        ),
        (
            Some("claude-sim"),
            Some("assistant"),
            Some(HELLO_PROMPT_TOKENS)
        ),
        "message_start: the model and the input tokens"
    );
    assert!(
        message["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("msg_")),
        "a message id: {message}"
    );
    let texts: Vec<&str> = parsed[3..6]
        .iter()
        .map(|(_, v)| {
            assert_eq!(v["delta"]["type"], "text_delta", "text deltas");
            v["delta"]["text"].as_str().expect("text")
        })
        .collect();
    assert_eq!(
        texts,
        [" tok0", " tok1", " tok2"],
        "the sim's deterministic text"
    );
    assert_eq!(
        (
            parsed[7].1["delta"]["stop_reason"].as_str(),
            parsed[7].1["usage"]["output_tokens"].as_u64()
        ),
        (Some("max_tokens"), Some(3)),
        "message_delta: stopped at max_tokens, cumulative output"
    );
    assert_eq!(
        meter("/v1/messages", &events),
        Metered {
            token_events: 3,
            prompt_tokens: Some(HELLO_PROMPT_TOKENS),
            completion_tokens: Some(3),
            errors: 0,
            done: 1
        },
        "tokenmeter's Anthropic dialect reads the sim's stream"
    );
}

/// Both dialects run on the chat engine: the opening events go out when the request is
/// accepted, before the engine has run a step for it; then one event per step; several tokens per
/// step give fewer events but the same usage.
#[tokio::test]
async fn engine_timing_and_token_limits_are_shared_with_chat() {
    // path, body, opening events, index of the first token event
    for (path, body, opening, first) in [
        (
            "/v1/responses",
            r#"{"input":[{"role":"user","content":[{"type":"input_text","text":"w w w w"}]}],"max_output_tokens":7,"stream":true}"#,
            2,
            4,
        ),
        (
            "/v1/messages",
            r#"{"system":"s","max_tokens":7,"messages":[{"role":"user","content":[{"type":"text","text":"w w w w"}]}],"stream":true}"#,
            3,
            3,
        ),
    ] {
        // One slot, taken by a stream that has started: no step can run for the request under
        // test until that stream goes, so whatever arrives before then was sent on acceptance.
        let sim = start(config("fast", |c| {
            c.tokens_per_chunk = 2;
            c.max_num_seqs = 1;
        }))
        .await;
        let addr = sim.local_addr();
        let mut blocker = Conn::open(addr).await;
        let (response, _) = blocker
            .send(
                "POST",
                "/v1/completions",
                r#"{"prompt":"x","max_tokens":100000,"stream":true}"#,
            )
            .await;
        let mut blocker_body = response.into_body();
        assert!(
            blocker_body
                .frame()
                .await
                .is_some_and(|frame| frame.is_ok_and(|f| f.is_data())),
            "{path}: the blocking stream has started, so it holds the slot"
        );
        let mut conn = Conn::open(addr).await;
        let (response, _) = conn.send("POST", path, body).await;
        assert_eq!(response.status(), 200, "{path}: stream accepted");
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream; charset=utf-8",
            "{path}: SSE content type"
        );
        let (opened_tx, opened) = tokio::sync::oneshot::channel();
        let mut opened_tx = Some(opened_tx);
        let mut seen = 0;
        let reader = tokio::spawn(read_events(response.into_body(), move |_| {
            seen += 1;
            if seen == opening {
                if let Some(tx) = opened_tx.take() {
                    let _ = tx.send(());
                }
            }
        }));
        // Bounded so that opening events held back until a token fail the test instead of
        // hanging it.
        tokio::time::timeout(std::time::Duration::from_secs(10), opened)
            .await
            .expect("the opening events arrive while the request waits for the slot")
            .expect("the reader signals");
        drop(blocker_body);
        blocker.close();
        let events = reader.await.expect("the reader task");
        sim.shutdown().await;
        let metered = meter(path, &events);
        assert_eq!(
            (
                metered.token_events,
                metered.completion_tokens,
                metered.done
            ),
            (4, Some(7), 1),
            "{path}: 1 token at prefill then 2 per step = 4 token events, usage says 7"
        );
        let first_token = events
            .iter()
            .position(|e| {
                e.text.contains("output_text.delta") || e.text.contains("content_block_delta")
            })
            .expect("a token event");
        assert_eq!(first_token, first, "{path}: the first token event's place");
    }
    let responses = meter(
        "/v1/responses",
        &stream(
            |_| {},
            "/v1/responses",
            r#"{"instructions":"a b","input":"c","stream":true}"#,
        )
        .await,
    );
    assert_eq!(
        (
            responses.token_events,
            responses.prompt_tokens,
            responses.completion_tokens
        ),
        (16, Some(2 + 1 + 2 * 5 + 5), Some(16)),
        "no max_output_tokens: the default 16; instructions count as a message"
    );
}

#[tokio::test]
async fn whole_responses_and_errors_speak_each_api() {
    let sim = start(config("fast", |_| {})).await;
    let addr = sim.local_addr();
    let (status, text) = call(
        addr,
        "POST",
        "/v1/responses",
        r#"{"input":"Hello, world!","max_output_tokens":2}"#,
    )
    .await;
    let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(status, 200, "whole response");
    assert_eq!(
        (
            value["object"].as_str(),
            value["output"][0]["content"][0]["text"].as_str(),
            value["usage"]["input_tokens"].as_u64(),
            value["usage"]["output_tokens"].as_u64()
        ),
        (
            Some("response"),
            Some(" tok0 tok1"),
            Some(HELLO_PROMPT_TOKENS),
            Some(2)
        ),
        "a Responses object: {text}"
    );
    let (status, text) = call(
        addr,
        "POST",
        "/v1/messages",
        r#"{"model":"c","max_tokens":2,"messages":[{"role":"user","content":"Hello, world!"}]}"#,
    )
    .await;
    let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(status, 200, "whole message");
    assert_eq!(
        (
            value["type"].as_str(),
            value["content"][0]["text"].as_str(),
            value["stop_reason"].as_str(),
            value["usage"]["output_tokens"].as_u64()
        ),
        (
            Some("message"),
            Some(" tok0 tok1"),
            Some("max_tokens"),
            Some(2)
        ),
        "an Anthropic message: {text}"
    );
    let (status, text) = call(
        addr,
        "POST",
        "/v1/messages",
        r#"{"messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        (
            status,
            value["type"].as_str(),
            value["error"]["type"].as_str()
        ),
        (400, Some("error"), Some("invalid_request_error")),
        "Anthropic's error body when max_tokens is missing: {text}"
    );
    let (status, text) = call(addr, "POST", "/v1/responses", r#"{"model":"m"}"#).await;
    let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        (status, value["error"]["type"].as_str()),
        (400, Some("invalid_request_error")),
        "OpenAI's error body when input is missing: {text}"
    );
    let (status, _) = call(addr, "GET", "/v1/messages", "").await;
    assert_eq!(status, 405, "GET is not allowed on a generation route");
    sim.shutdown().await;
}
