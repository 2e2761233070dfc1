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
//!   `timings.predicted_n` / `timings.prompt_n` + `timings.cache_n` when the top-level counts are
//!   missing; the server's own prompt time, `timings.prompt_ms`. Cached prompt tokens: `timings.cache_n` (the prompt tokens a slot reused from its
//!   last prompt, not computed again; `prompt_n` is the rest).
//! - **Error**: a non-null `error` (`{"error":{"code":..,"message":..,"type":..}}`).
//! - **End**: `"stop": true`.

use serde::de::MapAccess;
use serde_json::value::RawValue;

use super::event::{EventSummary, Usage};
use super::walk::{
    self, is_non_null, is_nonempty_string, keys, Count, Flag, Lenient, Members, Millis, Object,
    Pick,
};

/// Classifies the `data` of one event.
pub fn classify(data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, Object::<Top>::pick()) else {
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
        cached_tokens: timings.cached_tokens,
        prefill_micros: timings.prefill_micros,
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

keys! { enum TopKey { Content, Stop, TokensPredicted, TokensEvaluated, Timings, Error } }

keys! { enum TimingsKey { PromptN, CacheN, PredictedN, PromptMs } }

impl<'de> Members<'de> for Top {
    type Key = TopKey;

    fn member<A: MapAccess<'de>>(&mut self, key: TopKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            TopKey::Content => self.content = is_nonempty_string(map.next_value()?),
            TopKey::Stop => self.stop = map.next_value_seed(Lenient(Flag))? == Some(true),
            TopKey::TokensPredicted => {
                self.usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
            }
            TopKey::TokensEvaluated => {
                self.usage.prompt_tokens = map.next_value_seed(Lenient(Count))?;
            }
            TopKey::Timings => self.timings = map.next_value_seed(Lenient(TimingsPick))?,
            TopKey::Error => self.error = is_non_null(map.next_value::<&RawValue>()?),
            TopKey::Other => walk::skip(map)?,
        }
        Ok(())
    }
}

/// llama.cpp's `timings` as a usage: the prompt is `prompt_n` (computed) plus `cache_n` (reused
/// from the slot's cache), the output `predicted_n`. Also read on llama.cpp's OpenAI routes
/// (see [`super::openai`]), whose last chunk carries the same object.
#[derive(Clone, Copy)]
pub(super) struct TimingsPick;

impl<'de> Pick<'de> for TimingsPick {
    type Out = Usage;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Usage, A::Error> {
        let (computed, cached, predicted, prefill) = walk::members(
            map,
            (None, None, None, None),
            |(computed, cached, predicted, prefill), key: TimingsKey, map| {
                match key {
                    TimingsKey::PromptN => *computed = map.next_value_seed(Lenient(Count))?,
                    TimingsKey::CacheN => *cached = map.next_value_seed(Lenient(Count))?,
                    TimingsKey::PredictedN => *predicted = map.next_value_seed(Lenient(Count))?,
                    TimingsKey::PromptMs => *prefill = map.next_value_seed(Lenient(Millis))?,
                    TimingsKey::Other => walk::skip(map)?,
                }
                Ok(())
            },
        )?;
        Ok(Usage {
            prompt_tokens: computed.map(|computed| computed.saturating_add(cached.unwrap_or(0))),
            completion_tokens: predicted,
            cached_tokens: cached,
            prefill_micros: prefill,
        })
    }
}

#[cfg(test)]
mod tests;
