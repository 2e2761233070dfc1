//! The OpenAI-compatible stream dialect (`/v1/chat/completions`, `/v1/completions`), as vLLM,
//! SGLang, TGI's OpenAI layer and OpenAI itself send it.
//!
//! [`classify`] looks at the `data` of one SSE event and says what the meter needs from it. The
//! definition it implements (REFERENCE.md §1): a **token event** carries generated output — some
//! choice has a non-empty `delta.content`, `delta.reasoning`, `delta.reasoning_content` or
//! `delta.tool_calls` (chat), or a non-empty `text` (completions). The role-only first chunk, the
//! final empty delta with `finish_reason`, the usage-only chunk (`choices: []`), `[DONE]` and error
//! events are not token events.
//!
//! This runs once per streamed chunk, so it must not allocate: the payload is walked with
//! serde visitors that keep nothing but a few booleans and counters. Strings are never decoded —
//! a field is borrowed as a [`RawValue`] (a slice of the input) and a string is non-empty exactly
//! when its raw text is longer than `""`. Everything the meter does not need is skipped with
//! [`IgnoredAny`](serde::de::IgnoredAny).
//!
//! Usage: `usage.prompt_tokens`, `completion_tokens`, and the cached prompt tokens
//! `usage.prompt_tokens_details.cached_tokens` (OpenAI, SGLang, vLLM with
//! `--enable-prompt-tokens-details`, llama.cpp); llama.cpp's `timings` (`cache_n`, and the
//! counts of a last chunk that carries no `usage`) fill what `usage` lacks.
//!
//! The walk is lenient about types below the top level: a field of an unexpected type (say
//! `"usage": {"completion_tokens": "5"}` or `"choices": null`) contributes nothing instead of
//! discarding the whole event, so one quirky field cannot hide a token. Input that is not JSON at
//! all gives [`EventSummary::default()`]. Nothing here panics on any bytes.

use serde::de::{MapAccess, SeqAccess};
use serde_json::value::RawValue;

use super::event::{EventSummary, Usage, UsagePick};
use super::llamacpp::TimingsPick;
use super::output::Output;
use super::walk::{
    self, is_non_null, is_nonempty_string, keys, Lenient, Members, Object, Pick, UsageMember,
};
use choices::{delta_member, Choices};

mod choices;
mod fast;
#[cfg(test)]
mod tests;

/// Classifies the `data` payload of one SSE event: the skimming fast path ([`classify_fast`]) for
/// the ordinary chunk, the serde walk ([`classify_parsed`]) for anything it hands back.
///
/// Never panics. Allocation-free for the ordinary chunk of a vLLM / OpenAI stream; serde_json
/// grows its scratch buffer (once per call) only to unescape a key such as `"\u0063hoices"` or to
/// skip a value nested two or more levels deep (`tool_calls` entries, `logprobs` content).
pub fn classify(data: &[u8]) -> EventSummary {
    classify_fast(data).unwrap_or_else(|| classify_parsed(data))
}

/// The fast path alone: the summary of an ordinary chunk, read by skimming its bytes once, or
/// `None` when the event needs the full walk (a usage object, an unusual shape, anything outside
/// the skimmer's subset of JSON). Whenever it answers, it answers as [`classify_parsed`] does;
/// public so the differential test (`tests/e2e/dialect_skim.rs`) and the benchmarks can call it.
pub fn classify_fast(data: &[u8]) -> Option<EventSummary> {
    if is_done(data) {
        return Some(done());
    }
    fast::classify(data)
}

/// The definition: the serde walk of the whole event, with the lenient rules of the module docs.
/// [`classify`] uses it for what the fast path hands back; public as the reference the fast path
/// is tested against.
pub fn classify_parsed(data: &[u8]) -> EventSummary {
    // The terminator is the one non-JSON payload; checking it first keeps it off the parser.
    if is_done(data) {
        return done();
    }
    let Some(chunk) = walk::parse(data, Object::<Chunk>::pick()) else {
        return EventSummary::default();
    };
    let Chunk {
        choices,
        usage,
        timings,
        error,
    } = chunk;
    let usage_only = usage.is_some() && choices.is_some_and(|c| c.empty);
    // llama.cpp's `timings` fill what `usage` lacks (cached tokens), or stand in for it on the
    // last chunk of a stream that asked for no usage.
    let usage = match usage {
        Some(usage) => Some(Usage {
            cached_tokens: usage.cached_tokens.or(timings.cached_tokens),
            prefill_micros: timings.prefill_micros,
            ..usage
        }),
        None => (timings != Usage::default()).then_some(timings),
    };
    EventSummary {
        token: choices.is_some_and(|c| c.token),
        usage,
        usage_only,
        finish: choices.is_some_and(|c| c.finish),
        error,
        done: false,
        tokens: None,
    }
}

/// `[DONE]`, the stream's end marker (surrounding ASCII whitespace allowed).
fn is_done(data: &[u8]) -> bool {
    data.trim_ascii() == b"[DONE]"
}

fn done() -> EventSummary {
    EventSummary {
        done: true,
        ..EventSummary::default()
    }
}

/// The usage of a whole non-streaming response (`"stream": false`: one `chat.completion` or
/// `text_completion` object): its top-level `usage.prompt_tokens` / `usage.completion_tokens`.
/// The choices are skipped unread. `None` when the body is not JSON or carries no readable usage.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    walk::parse(body, UsageMember(UsagePick::OpenAi))?
}

/// What the walk found at the top level.
#[derive(Default)]
struct Chunk {
    /// `None` when `choices` is absent or not an array.
    choices: Option<Choices>,
    usage: Option<Usage>,
    /// llama.cpp's `timings` (its last chunk): counts the chunk may carry without `usage`.
    timings: Usage,
    error: bool,
}

// Key enums (`walk::keys!`): serde matches a borrowed key against the names without allocating;
// any other key is `Other` and its value is skipped.

keys! { enum ChunkKey { Choices, Usage, Timings, Error } }

keys! { enum ChoiceKey { Delta, Text, FinishReason } }

/// The top-level object. A repeated key is folded in (last `usage` wins, tokens accumulate):
/// the event is still worth metering.
impl<'de> Members<'de> for Chunk {
    type Key = ChunkKey;

    fn member<A: MapAccess<'de>>(&mut self, key: ChunkKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            ChunkKey::Choices => {
                if let Some(found) = map.next_value_seed(Lenient(ChoicesPick))? {
                    let previous = self.choices.unwrap_or(Choices {
                        empty: true,
                        ..Choices::default()
                    });
                    self.choices = Some(Choices {
                        empty: previous.empty && found.empty,
                        token: previous.token || found.token,
                        finish: previous.finish || found.finish,
                    });
                }
            }
            ChunkKey::Usage => self.usage = map.next_value_seed(Lenient(UsagePick::OpenAi))?,
            ChunkKey::Timings => self.timings = map.next_value_seed(Lenient(TimingsPick))?,
            ChunkKey::Error => self.error = map.next_value::<&RawValue>()?.get() != "null",
            ChunkKey::Other => walk::skip(map)?,
        }
        Ok(())
    }
}

/// The `choices` array, walked element by element without collecting it.
struct ChoicesPick;

impl<'de> Pick<'de> for ChoicesPick {
    type Out = Option<Choices>;

    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Choices>, A::Error> {
        let mut choices = Choices {
            empty: true,
            ..Choices::default()
        };
        while let Some(choice) = seq.next_element_seed(Lenient(Object::<Choices>::pick()))? {
            choices.empty = false;
            choices.token |= choice.token;
            choices.finish |= choice.finish;
        }
        Ok(Some(choices))
    }
}

/// One choice: a chat `delta` or a completions `text`, and its `finish_reason`.
impl<'de> Members<'de> for Choices {
    type Key = ChoiceKey;

    fn member<A: MapAccess<'de>>(&mut self, key: ChoiceKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            ChoiceKey::Delta => {
                self.token |= map.next_value_seed(Lenient(Output(delta_member)))?;
            }
            ChoiceKey::Text => self.token |= is_nonempty_string(map.next_value()?),
            ChoiceKey::FinishReason => self.finish |= is_non_null(map.next_value()?),
            ChoiceKey::Other => walk::skip(map)?,
        }
        Ok(())
    }
}
