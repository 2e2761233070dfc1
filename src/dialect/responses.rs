//! The OpenAI Responses dialect (`POST /v1/responses`, `stream: true`).
//!
//! Every event is `event: <type>` plus `data: {"type": "<type>", ...}`; there is no `[DONE]`.
//! - **Token event**: an output delta with a non-empty `delta` — `response.output_text.delta`,
//!   `response.refusal.delta`, `response.reasoning_text.delta`,
//!   `response.reasoning_summary_text.delta`, `response.function_call_arguments.delta`,
//!   `response.custom_tool_call_input.delta`. How many tokens a delta holds is not said.
//! - **Usage**: `response.usage` (`input_tokens`, `output_tokens`) of the terminal event
//!   (`response.completed`, `response.incomplete`, `response.failed`); `response.created`
//!   carries `"usage": null`. The server always sends it, so nothing is injected.
//! - **Error**: `response.failed`, or an `error` event.
//! - **End**: `response.completed`, `response.incomplete` or `response.failed`.
//!
//! The type comes from the payload's `type` (the SSE `event:` name when the payload has none),
//! and fields are read in whatever order they come.

use serde::de::{IgnoredAny, MapAccess};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::event::{EventSummary, Usage};
use super::walk::{self, is_nonempty_string, Count, Lenient, Pick, UsageMember};

/// Classifies one event; `event` is its SSE `event:` field.
pub fn classify(event: &[u8], data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, TopPick) else {
        return EventSummary::default();
    };
    let Top { kind, delta, usage } = found;
    let kind = kind.unwrap_or_else(|| Kind::of(event));
    EventSummary {
        token: kind == Kind::Delta && delta,
        usage,
        error: matches!(kind, Kind::Failed | Kind::Error),
        done: matches!(kind, Kind::Finished | Kind::Failed),
        ..EventSummary::default()
    }
}

/// The usage of a whole non-streaming response (`"stream": false`: one `response` object): its
/// top-level `usage.input_tokens` / `usage.output_tokens`. The output items are skipped unread.
/// `None` when the body is not JSON or carries no readable usage.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    walk::parse(body, UsageMember(UsagePick))?
}

/// The event types the meter tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A delta of generated output.
    Delta,
    /// `response.completed` / `response.incomplete`.
    Finished,
    /// `response.failed`.
    Failed,
    /// `error`.
    Error,
    Other,
}

impl Kind {
    fn of(name: &[u8]) -> Kind {
        match name {
            b"response.output_text.delta"
            | b"response.refusal.delta"
            | b"response.reasoning_text.delta"
            | b"response.reasoning_summary_text.delta"
            | b"response.function_call_arguments.delta"
            | b"response.custom_tool_call_input.delta" => Kind::Delta,
            b"response.completed" | b"response.incomplete" => Kind::Finished,
            b"response.failed" => Kind::Failed,
            b"error" => Kind::Error,
            _ => Kind::Other,
        }
    }

    /// The kind named by a raw JSON string (`None` when the value is not a plain string).
    fn of_raw(raw: &RawValue) -> Option<Kind> {
        walk::raw_str(raw).map(|name| Kind::of(name.as_bytes()))
    }
}

#[derive(Default)]
struct Top {
    kind: Option<Kind>,
    delta: bool,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Type,
    Delta,
    Response,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum UsageKey {
    InputTokens,
    OutputTokens,
    #[serde(other)]
    Other,
}

struct TopPick;

impl<'de> Pick<'de> for TopPick {
    type Out = Top;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut top = Top::default();
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::Type => top.kind = Kind::of_raw(map.next_value()?),
                TopKey::Delta => top.delta = is_nonempty_string(map.next_value()?),
                TopKey::Response => {
                    top.usage = map.next_value_seed(Lenient(UsageMember(UsagePick)))?;
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(top)
    }
}

/// `usage`: `input_tokens` / `output_tokens`; `None` unless one of them is a valid count.
#[derive(Clone, Copy)]
struct UsagePick;

impl<'de> Pick<'de> for UsagePick {
    type Out = Option<Usage>;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Usage>, A::Error> {
        let mut usage = Usage::default();
        while let Some(key) = map.next_key::<UsageKey>()? {
            match key {
                UsageKey::InputTokens => {
                    usage.prompt_tokens = map.next_value_seed(Lenient(Count))?
                }
                UsageKey::OutputTokens => {
                    usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
                }
                UsageKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let readable = usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
        Ok(readable.then_some(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            EventSummary {
                usage: Some(Usage {
                    prompt_tokens: Some(36),
                    completion_tokens: Some(87)
                }),
                done: true,
                ..EventSummary::default()
            },
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
                completion_tokens: Some(52)
            }),
            "usage.input_tokens / usage.output_tokens"
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
}
