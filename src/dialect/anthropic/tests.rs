use super::*;
use crate::dialect::tests::usage;

fn summary(event: &str, data: &str) -> EventSummary {
    classify(event.as_bytes(), data.as_bytes())
}

fn cached(prompt: u64, completion: Option<u64>, cached: u64) -> Option<Usage> {
    usage(Some(prompt), completion).map(|usage| Usage {
        cached_tokens: Some(cached),
        ..usage
    })
}

#[test]
fn content_deltas_are_tokens() {
    for delta in [
        r#"{"type":"text_delta","text":"Hello"}"#,
        r#"{"type":"thinking_delta","thinking":"Let me"}"#,
        r#"{"type":"input_json_delta","partial_json":"{\"loc"}"#,
    ] {
        let data = format!(r#"{{"type":"content_block_delta","index":0,"delta":{delta}}}"#);
        assert_eq!(
            summary("content_block_delta", &data),
            EventSummary {
                token: true,
                ..EventSummary::default()
            },
            "{delta} is a token event"
        );
    }
    for delta in [
        r#"{"type":"input_json_delta","partial_json":""}"#,
        r#"{"type":"signature_delta","signature":"EqQBCg"}"#,
        r#"{"type":"text_delta","text":""}"#,
    ] {
        let data = format!(r#"{{"type":"content_block_delta","index":1,"delta":{delta}}}"#);
        assert!(!summary("", &data).token, "{delta} carries no output");
    }
    assert!(
        !summary("ping", r#"{"type": "ping"}"#).token,
        "ping is not a token"
    );
    assert!(
        !summary("", r#"{"type":"message_delta","delta":{"text":"x"}}"#).token,
        "only content_block_delta events are tokens"
    );
}

#[test]
fn input_from_message_start_output_from_message_delta() {
    let start = summary(
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":2,"output_tokens":1}}}"#,
    );
    assert_eq!(
        start.usage,
        cached(30, None, 2),
        "input includes cached input (cache_read_input_tokens: the cache hits); the placeholder \
         output count is ignored"
    );
    let delta = summary(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
    );
    assert_eq!(
        delta.usage,
        usage(None, Some(15)),
        "cumulative output tokens"
    );
    let newer = summary(
        "",
        r#"{"usage":{"input_tokens":25,"output_tokens":15},"type":"message_delta","delta":{}}"#,
    );
    assert_eq!(
        newer.usage,
        usage(Some(25), Some(15)),
        "input repeated in message_delta"
    );
    assert!(
        summary("", r#"{"type":"message_stop"}"#).done,
        "message_stop ends the stream"
    );
}

#[test]
fn error_events() {
    let error = summary(
        "error",
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    assert!(error.error && !error.token, "an error event: {error:?}");
    assert!(
        summary("error", r#"{"error":{"type":"api_error"}}"#).error,
        "the SSE event name says error when the payload has no type"
    );
}

#[test]
fn garbage_is_nothing() {
    for data in [
        "",
        "{",
        "null",
        r#"{"type":"content_block_delta","delta":"x"}"#,
    ] {
        assert_eq!(
            summary("content_block_delta", data),
            EventSummary::default(),
            "{data:?}"
        );
    }
}

#[test]
fn body_usage_reads_a_whole_message() {
    let body = r#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":503}}"#;
    assert_eq!(
        body_usage(body.as_bytes()),
        cached(2095, Some(503), 0),
        "usage.input_tokens / usage.output_tokens; no cache read"
    );
    let cached = r#"{"type":"message","content":[],"usage":{"cache_read_input_tokens":100,"input_tokens":12,"cache_creation_input_tokens":30,"output_tokens":7,"service_tier":"standard"}}"#;
    assert_eq!(
        body_usage(cached.as_bytes()),
        self::cached(142, Some(7), 100),
        "cached input counts as input, as in the stream"
    );
    for body in [
        r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}]}"#,
        r#"{"type":"message","usage":{}}"#,
        r#"{"type":"message","message":{"usage":{"input_tokens":3,"output_tokens":4}}}"#,
        r#"{"type":"message","usage":{"input_tokens":3,"output_tokens":4}"#,
        "",
    ] {
        assert_eq!(body_usage(body.as_bytes()), None, "{body:?} gives nothing");
    }
}
