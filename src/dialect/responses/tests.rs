use super::*;
use crate::dialect::tests::last_event;

fn summary(event: &str, data: &str) -> EventSummary {
    classify(event.as_bytes(), data.as_bytes())
}

#[test]
fn output_deltas_are_tokens() {
    for kind in [
        "response.output_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.refusal.delta",
    ] {
        let data = format!(
            r#"{{"type":"{kind}","item_id":"msg_1","output_index":0,"delta":"Hi","sequence_number":4}}"#
        );
        assert_eq!(
            summary(kind, &data),
            EventSummary {
                token: true,
                ..EventSummary::default()
            },
            "{kind} with a non-empty delta is a token event"
        );
    }
    assert!(
        !summary("", r#"{"type":"response.output_text.delta","delta":""}"#).token,
        "an empty delta carries nothing"
    );
    assert!(
        summary("response.output_text.delta", r#"{"delta":"x"}"#).token,
        "the SSE event name stands in for a missing type"
    );
    assert!(
        !summary("", r#"{"type":"response.output_text.done","text":"Hi"}"#).token,
        "the done event repeats the text: not a token"
    );
}

#[test]
fn usage_from_the_terminal_events() {
    let completed = summary(
        "response.completed",
        r#"{"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}},"type":"response.completed"}"#,
    );
    assert_eq!(
        completed,
        last_event(Some(Usage {
            prompt_tokens: Some(36),
            completion_tokens: Some(87),
            cached_tokens: Some(0),
            prefill_micros: None
        })),
        "usage read even when `type` comes last; completed ends the stream"
    );
    let created = summary(
        "response.created",
        r#"{"type":"response.created","response":{"usage":null,"status":"in_progress"}}"#,
    );
    assert_eq!(created, EventSummary::default(), "usage null is no usage");
    let incomplete = summary(
        "",
        r#"{"type":"response.incomplete","response":{"usage":{"input_tokens":5,"output_tokens":16}}}"#,
    );
    assert!(
        incomplete.done && !incomplete.error && incomplete.usage.is_some(),
        "incomplete ends the stream with usage: {incomplete:?}"
    );
}

#[test]
fn failures_are_errors() {
    let failed = summary(
        "",
        r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"x"},"usage":null}}"#,
    );
    assert!(
        failed.error && failed.done,
        "failed: error and end: {failed:?}"
    );
    let error = summary(
        "error",
        r#"{"type":"error","code":"ERR","message":"x","param":null}"#,
    );
    assert!(
        error.error && !error.done,
        "an error event is an error: {error:?}"
    );
}

#[test]
fn garbage_is_nothing() {
    for data in [
        "",
        "[DONE]",
        "{",
        r#"{"type":5}"#,
        r#"{"type":"response.output_text.delta","delta":7}"#,
    ] {
        assert_eq!(
            summary("", data),
            EventSummary::default(),
            "{data:?} means nothing"
        );
    }
}

#[test]
fn body_usage_reads_a_whole_response_object() {
    let body = r#"{"id":"resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41","object":"response","created_at":1741476777,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4o-2024-08-06","output":[{"type":"message","id":"msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41","status":"completed","role":"assistant","content":[{"type":"output_text","text":"The image depicts a scenic landscape.","annotations":[]}]}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":328,"input_tokens_details":{"cached_tokens":0},"output_tokens":52,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":380},"user":null,"metadata":{}}"#;
    assert_eq!(
        body_usage(body.as_bytes()),
        Some(Usage {
            prompt_tokens: Some(328),
            completion_tokens: Some(52),
            cached_tokens: Some(0),
            prefill_micros: None
        }),
        "usage.input_tokens / usage.output_tokens / input_tokens_details.cached_tokens"
    );
    for body in [
        r#"{"id":"resp_1","object":"response","status":"completed","output":[]}"#,
        r#"{"object":"response","usage":null}"#,
        r#"{"response":{"usage":{"input_tokens":5,"output_tokens":6}}}"#,
        r#"{"object":"response","usage":{"input_tokens":5"#,
        "not json",
    ] {
        assert_eq!(body_usage(body.as_bytes()), None, "{body:?} gives nothing");
    }
}
