//! The Ollama native dialect (`POST /api/chat`, `POST /api/generate`): NDJSON, one object per
//! line (`application/x-ndjson`), framed by [`super::ndjson`].
//!
//! `/api/chat` lines carry `message.content` (and `message.thinking`, `message.tool_calls`);
//! `/api/generate` lines carry `response` (and `thinking`). Every line has `done`; the last one
//! has `"done": true`, `done_reason`, `prompt_eval_count` (input tokens) and `eval_count`
//! (output tokens).
//! - **Token event**: a line with non-empty content, thinking or tool calls. Ollama writes one
//!   line per generated token, so a token line that is not the final one carries one token.
//! - **Usage**: `prompt_eval_count` / `eval_count` (the final line).
//! - **Error**: a non-null `error` (`{"error":"..."}` once the 200 is out).
//! - **End**: `"done": true`.

use serde::de::{IgnoredAny, MapAccess};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::event::{EventSummary, Usage};
use super::walk::{
    self, is_non_null, is_nonempty_array, is_nonempty_string, Count, Flag, Lenient, Pick,
};

/// Classifies one line.
pub fn classify(data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, TopPick) else {
        return EventSummary::default();
    };
    let Top {
        output,
        done,
        usage,
        error,
    } = found;
    let readable = usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
    EventSummary {
        token: output,
        usage: readable.then_some(usage),
        error,
        done,
        tokens: (output && !done).then_some(1),
        ..EventSummary::default()
    }
}

/// The usage of a whole non-streaming response (`"stream": false`): Ollama then answers with one
/// JSON object shaped like the stream's final line, so it is the same walk: `prompt_eval_count`
/// (input) and `eval_count` (output). `None` when the body is not one JSON object or carries
/// neither count.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    classify(body).usage
}

#[derive(Default)]
struct Top {
    output: bool,
    done: bool,
    usage: Usage,
    error: bool,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Message,
    Response,
    Thinking,
    Done,
    PromptEvalCount,
    EvalCount,
    Error,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum MessageKey {
    Content,
    Thinking,
    ToolCalls,
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
                TopKey::Message => top.output |= map.next_value_seed(Lenient(MessagePick))?,
                TopKey::Response | TopKey::Thinking => {
                    top.output |= is_nonempty_string(map.next_value()?);
                }
                TopKey::Done => top.done = map.next_value_seed(Lenient(Flag))? == Some(true),
                TopKey::PromptEvalCount => {
                    top.usage.prompt_tokens = map.next_value_seed(Lenient(Count))?;
                }
                TopKey::EvalCount => {
                    top.usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
                }
                TopKey::Error => top.error = is_non_null(map.next_value::<&RawValue>()?),
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(top)
    }
}

/// A chat `message`: output is content, thinking or tool calls.
struct MessagePick;

impl<'de> Pick<'de> for MessagePick {
    type Out = bool;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut output = false;
        while let Some(key) = map.next_key::<MessageKey>()? {
            match key {
                MessageKey::Content | MessageKey::Thinking => {
                    output |= is_nonempty_string(map.next_value()?);
                }
                MessageKey::ToolCalls => output |= is_nonempty_array(map.next_value()?),
                MessageKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(data: &str) -> EventSummary {
        classify(data.as_bytes())
    }

    #[test]
    fn chat_and_generate_lines_are_one_token_each() {
        let one = EventSummary {
            token: true,
            tokens: Some(1),
            ..EventSummary::default()
        };
        for line in [
            r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"The"},"done":false}"#,
            r#"{"model":"qwen3","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"","thinking":"Hmm"},"done":false}"#,
            r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#,
            r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","response":" sky","done":false}"#,
        ] {
            assert_eq!(summary(line), one, "{line}");
        }
    }

    #[test]
    fn the_done_line_reports_usage() {
        let last = summary(
            r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:01Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":4353619900,"load_duration":63915300,"prompt_eval_count":26,"prompt_eval_duration":246847000,"eval_count":259,"eval_duration":4032296000}"#,
        );
        assert_eq!(
            last,
            EventSummary {
                usage: Some(Usage {
                    prompt_tokens: Some(26),
                    completion_tokens: Some(259)
                }),
                done: true,
                ..EventSummary::default()
            },
            "the final line: no output, usage, end"
        );
        let with_text = summary(r#"{"response":"!","done":true,"eval_count":3}"#);
        assert!(
            with_text.token && with_text.tokens.is_none() && with_text.done,
            "a final line with text is a token event whose count usage gives: {with_text:?}"
        );
    }

    #[test]
    fn errors_and_garbage() {
        assert!(
            summary(r#"{"error":"model 'x' not found"}"#).error,
            "error member"
        );
        for data in [
            "",
            "{",
            r#"{"message":"hi"}"#,
            r#"{"done":"yes","eval_count":-1}"#,
        ] {
            assert_eq!(summary(data), EventSummary::default(), "{data:?}");
        }
    }

    #[test]
    fn body_usage_reads_a_whole_answer() {
        let chat = r#"{"model":"llama3.2","created_at":"2023-12-12T14:13:43.416799Z","message":{"role":"assistant","content":"Hello! How are you today?"},"done":true,"total_duration":5191566416,"load_duration":2154458,"prompt_eval_count":26,"prompt_eval_duration":383809000,"eval_count":298,"eval_duration":4799921000}"#;
        assert_eq!(
            body_usage(chat.as_bytes()),
            Some(Usage {
                prompt_tokens: Some(26),
                completion_tokens: Some(298)
            }),
            "/api/chat: prompt_eval_count / eval_count"
        );
        let generate = r#"{"model":"llama3.2","created_at":"2023-08-04T19:22:45.499127Z","response":"The sky is blue because it is the color of the sky.","done":true,"context":[1,2,3],"total_duration":5043500667,"load_duration":5025959,"prompt_eval_count":26,"prompt_eval_duration":325953000,"eval_count":290,"eval_duration":4709213000}"#;
        assert_eq!(
            body_usage(generate.as_bytes()),
            Some(Usage {
                prompt_tokens: Some(26),
                completion_tokens: Some(290)
            }),
            "/api/generate: prompt_eval_count / eval_count"
        );
        for body in [
            r#"{"model":"llama3.2","response":"hi","done":true}"#,
            r#"{"model":"llama3.2","response":"hi","done":true,"eval_count":2"#,
            "{}\n{}",
            "",
        ] {
            assert_eq!(body_usage(body.as_bytes()), None, "{body:?} gives nothing");
        }
    }
}
