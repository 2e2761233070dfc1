//! The Anthropic Messages dialect (`POST /v1/messages`, `stream: true`).
//!
//! Every event is `event: <type>` plus `data: {"type": "<type>", ...}`:
//! `message_start`, then per content block `content_block_start`, `content_block_delta`...,
//! `content_block_stop`, then `message_delta` and `message_stop`; `ping` may come anywhere.
//! - **Token event**: `content_block_delta` whose delta carries output: non-empty `text`
//!   (`text_delta`), `thinking` (`thinking_delta`) or `partial_json` (`input_json_delta`; the
//!   empty first fragment of a tool call is not a token). `signature_delta` / `citations_delta`
//!   and `ping` are not. Deltas do not say how many tokens they hold.
//! - **Usage**: `message_start` gives the input tokens (`message.usage`); `message_delta` gives
//!   the cumulative `usage.output_tokens` (and, from newer servers, the input again). Input
//!   tokens are `input_tokens + cache_creation_input_tokens + cache_read_input_tokens`, as
//!   OpenTelemetry counts cached input as input. The placeholder `output_tokens` of
//!   `message_start` is not used: a stream cut before `message_delta` falls back to counting
//!   token events rather than reporting 1.
//! - **Error**: an `error` event (`{"type":"error","error":{...}}`) after the 200.
//! - **End**: `message_stop`.

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
    let Top {
        kind,
        delta,
        usage,
        message_usage,
    } = found;
    let kind = kind.unwrap_or_else(|| Kind::of(event));
    let usage = match kind {
        Kind::MessageStart => message_usage.and_then(|u| u.input()),
        Kind::MessageDelta => usage.and_then(|u| {
            let Counts { output, .. } = u;
            let usage = Usage {
                prompt_tokens: u.input().and_then(|i| i.prompt_tokens),
                completion_tokens: output,
            };
            (usage != Usage::default()).then_some(usage)
        }),
        _ => None,
    };
    EventSummary {
        token: kind == Kind::Delta && delta,
        usage,
        error: kind == Kind::Error,
        done: kind == Kind::Stop,
        ..EventSummary::default()
    }
}

/// The usage of a whole non-streaming response (`"stream": false`: one `message` object): its
/// top-level `usage`, input counted as in the stream (`input_tokens` plus the cache creation and
/// cache read input tokens), output `usage.output_tokens`. The content blocks are skipped unread.
/// `None` when the body is not JSON or carries no readable count.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    let counts = walk::parse(body, UsageMember(CountsPick))??;
    let usage = Usage {
        prompt_tokens: counts.input().and_then(|input| input.prompt_tokens),
        completion_tokens: counts.output,
    };
    (usage != Usage::default()).then_some(usage)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    MessageStart,
    Delta,
    MessageDelta,
    Stop,
    Error,
    Other,
}

impl Kind {
    fn of(name: &[u8]) -> Kind {
        match name {
            b"message_start" => Kind::MessageStart,
            b"content_block_delta" => Kind::Delta,
            b"message_delta" => Kind::MessageDelta,
            b"message_stop" => Kind::Stop,
            b"error" => Kind::Error,
            _ => Kind::Other,
        }
    }

    fn of_raw(raw: &RawValue) -> Option<Kind> {
        walk::raw_str(raw).map(|name| Kind::of(name.as_bytes()))
    }
}

/// The counts of an Anthropic `usage` object.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    input: Option<u64>,
    cache_creation: Option<u64>,
    cache_read: Option<u64>,
    output: Option<u64>,
}

impl Counts {
    /// The input tokens, cached ones included, when `input_tokens` is known.
    fn input(self) -> Option<Usage> {
        let Counts {
            input,
            cache_creation,
            cache_read,
            output: _,
        } = self;
        let total = input?
            .saturating_add(cache_creation.unwrap_or(0))
            .saturating_add(cache_read.unwrap_or(0));
        Some(Usage {
            prompt_tokens: Some(total),
            completion_tokens: None,
        })
    }
}

#[derive(Default)]
struct Top {
    kind: Option<Kind>,
    delta: bool,
    usage: Option<Counts>,
    message_usage: Option<Counts>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Type,
    Delta,
    Usage,
    Message,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum DeltaKey {
    Text,
    Thinking,
    PartialJson,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum UsageKey {
    InputTokens,
    CacheCreationInputTokens,
    CacheReadInputTokens,
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
                TopKey::Delta => top.delta = map.next_value_seed(Lenient(DeltaPick))?,
                TopKey::Usage => top.usage = map.next_value_seed(Lenient(CountsPick))?,
                TopKey::Message => {
                    top.message_usage = map.next_value_seed(Lenient(UsageMember(CountsPick)))?;
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(top)
    }
}

/// A content block delta: output is non-empty text, thinking or tool-input JSON.
struct DeltaPick;

impl<'de> Pick<'de> for DeltaPick {
    type Out = bool;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut output = false;
        while let Some(key) = map.next_key::<DeltaKey>()? {
            match key {
                DeltaKey::Text | DeltaKey::Thinking | DeltaKey::PartialJson => {
                    output |= is_nonempty_string(map.next_value()?);
                }
                DeltaKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(output)
    }
}

#[derive(Clone, Copy)]
struct CountsPick;

impl<'de> Pick<'de> for CountsPick {
    type Out = Option<Counts>;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Counts>, A::Error> {
        let mut counts = Counts::default();
        while let Some(key) = map.next_key::<UsageKey>()? {
            let slot = match key {
                UsageKey::InputTokens => &mut counts.input,
                UsageKey::CacheCreationInputTokens => &mut counts.cache_creation,
                UsageKey::CacheReadInputTokens => &mut counts.cache_read,
                UsageKey::OutputTokens => &mut counts.output,
                UsageKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value_seed(Lenient(Count))?;
        }
        Ok(Some(counts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(event: &str, data: &str) -> EventSummary {
        classify(event.as_bytes(), data.as_bytes())
    }

    fn usage(prompt: Option<u64>, completion: Option<u64>) -> Option<Usage> {
        Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
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
            usage(Some(30), None),
            "input includes cached input; the placeholder output count is ignored"
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
            usage(Some(2095), Some(503)),
            "usage.input_tokens / usage.output_tokens"
        );
        let cached = r#"{"type":"message","content":[],"usage":{"cache_read_input_tokens":100,"input_tokens":12,"cache_creation_input_tokens":30,"output_tokens":7,"service_tier":"standard"}}"#;
        assert_eq!(
            body_usage(cached.as_bytes()),
            usage(Some(142), Some(7)),
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
}
