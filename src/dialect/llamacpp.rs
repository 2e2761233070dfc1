//! The llama.cpp server native dialect (`POST /completion`, `stream: true`).
//!
//! One SSE event per sampled token: `data: {"index":0,"content":" Paris","tokens":[..],
//! "stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":9}`; the last event has
//! `"stop": true`, the final `tokens_predicted` / `tokens_evaluated`, `stop_type` and `timings`
//! (`prompt_n`, `predicted_n`). There is no `[DONE]`.
//! - **Token event**: a non-empty `content`. A token that ends mid-way through a UTF-8 character
//!   is held back and sent with the next one, so an event may hold more than one token: the count
//!   per event is not said.
//! - **Usage**: `tokens_predicted` (output) and `tokens_evaluated` (prompt), falling back to
//!   `timings.predicted_n` / `timings.prompt_n` when the top-level counts are missing.
//! - **Error**: a non-null `error` (`{"error":{"code":..,"message":..,"type":..}}`).
//! - **End**: `"stop": true`.

use serde::de::{IgnoredAny, MapAccess};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::event::{EventSummary, Usage};
use super::walk::{self, is_non_null, is_nonempty_string, Count, Flag, Lenient, Pick};

/// Classifies the `data` of one event.
pub fn classify(data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, TopPick) else {
        return EventSummary::default();
    };
    let Top {
        content,
        stop,
        usage,
        timings,
        error,
    } = found;
    let usage = Usage {
        prompt_tokens: usage.prompt_tokens.or(timings.prompt_tokens),
        completion_tokens: usage.completion_tokens.or(timings.completion_tokens),
    };
    EventSummary {
        token: content,
        usage: (usage != Usage::default()).then_some(usage),
        error,
        done: stop,
        ..EventSummary::default()
    }
}

/// The usage of a whole non-streaming response (`"stream": false`): llama.cpp then answers with
/// one JSON object shaped like the stream's final event, so it is the same walk:
/// `tokens_evaluated` (input) and `tokens_predicted` (output), else `timings.prompt_n` /
/// `timings.predicted_n`. `None` when the body is not one JSON object or carries no count.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    classify(body).usage
}

#[derive(Default)]
struct Top {
    content: bool,
    stop: bool,
    usage: Usage,
    timings: Usage,
    error: bool,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Content,
    Stop,
    TokensPredicted,
    TokensEvaluated,
    Timings,
    Error,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TimingsKey {
    PromptN,
    PredictedN,
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
                TopKey::Content => top.content = is_nonempty_string(map.next_value()?),
                TopKey::Stop => top.stop = map.next_value_seed(Lenient(Flag))? == Some(true),
                TopKey::TokensPredicted => {
                    top.usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
                }
                TopKey::TokensEvaluated => {
                    top.usage.prompt_tokens = map.next_value_seed(Lenient(Count))?;
                }
                TopKey::Timings => top.timings = map.next_value_seed(Lenient(TimingsPick))?,
                TopKey::Error => top.error = is_non_null(map.next_value::<&RawValue>()?),
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(top)
    }
}

/// `timings`: `prompt_n` / `predicted_n` as a usage.
struct TimingsPick;

impl<'de> Pick<'de> for TimingsPick {
    type Out = Usage;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Usage, A::Error> {
        let mut usage = Usage::default();
        while let Some(key) = map.next_key::<TimingsKey>()? {
            match key {
                TimingsKey::PromptN => usage.prompt_tokens = map.next_value_seed(Lenient(Count))?,
                TimingsKey::PredictedN => {
                    usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
                }
                TimingsKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(data: &str) -> EventSummary {
        classify(data.as_bytes())
    }

    #[test]
    fn content_events_are_tokens_with_running_counts() {
        assert_eq!(
            summary(
                r#"{"index":0,"content":" Paris","tokens":[],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":9}"#
            ),
            EventSummary {
                token: true,
                usage: Some(Usage {
                    prompt_tokens: Some(9),
                    completion_tokens: Some(1)
                }),
                ..EventSummary::default()
            },
            "content is a token; the running counts are cumulative usage"
        );
    }

    #[test]
    fn the_stop_event_ends_with_final_counts() {
        let last = summary(
            r#"{"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"m.gguf","tokens_predicted":12,"tokens_evaluated":9,"stop_type":"limit","stopping_word":"","tokens_cached":20,"timings":{"prompt_n":9,"prompt_ms":10.5,"predicted_n":12,"predicted_ms":100.2}}"#,
        );
        assert_eq!(
            last,
            EventSummary {
                usage: Some(Usage {
                    prompt_tokens: Some(9),
                    completion_tokens: Some(12)
                }),
                done: true,
                ..EventSummary::default()
            },
            "stop: usage and end, no token"
        );
        let timings_only =
            summary(r#"{"content":"","stop":true,"timings":{"prompt_n":4,"predicted_n":6}}"#);
        assert_eq!(
            timings_only.usage,
            Some(Usage {
                prompt_tokens: Some(4),
                completion_tokens: Some(6)
            }),
            "timings stand in for missing counts"
        );
    }

    #[test]
    fn errors_and_garbage() {
        assert!(
            summary(r#"{"error":{"code":500,"message":"x","type":"server_error"}}"#).error,
            "error member"
        );
        for data in ["", "[DONE]", r#"{"content":7,"stop":1}"#] {
            assert_eq!(summary(data), EventSummary::default(), "{data:?}");
        }
    }

    #[test]
    fn body_usage_reads_a_whole_answer() {
        let body = r#"{"index":0,"content":" Paris.","tokens":[],"id_slot":0,"stop":true,"model":"gpt-3.5-turbo","tokens_predicted":3,"tokens_evaluated":9,"generation_settings":{"n_predict":-1,"temperature":0.8},"prompt":"<s> The capital of France is","has_new_line":false,"truncated":false,"stop_type":"eos","stopping_word":"","tokens_cached":11,"timings":{"prompt_n":9,"prompt_ms":51.2,"prompt_per_token_ms":5.7,"prompt_per_second":175.8,"predicted_n":3,"predicted_ms":30.1,"predicted_per_token_ms":10.0,"predicted_per_second":99.7}}"#;
        assert_eq!(
            body_usage(body.as_bytes()),
            Some(Usage {
                prompt_tokens: Some(9),
                completion_tokens: Some(3)
            }),
            "tokens_evaluated / tokens_predicted"
        );
        let timings_only =
            r#"{"content":"x","stop":true,"timings":{"prompt_n":4,"predicted_n":1}}"#;
        assert_eq!(
            body_usage(timings_only.as_bytes()),
            Some(Usage {
                prompt_tokens: Some(4),
                completion_tokens: Some(1)
            }),
            "timings stand in for missing top-level counts"
        );
        for body in [
            r#"{"content":" Paris.","stop":true}"#,
            r#"{"content":" Paris.","tokens_predicted":3"#,
            "",
        ] {
            assert_eq!(body_usage(body.as_bytes()), None, "{body:?} gives nothing");
        }
    }
}
