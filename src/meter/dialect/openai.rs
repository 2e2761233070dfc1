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
//! [`IgnoredAny`].
//!
//! The walk is lenient about types below the top level: a field of an unexpected type (say
//! `"usage": {"completion_tokens": "5"}` or `"choices": null`) contributes nothing instead of
//! discarding the whole event, so one quirky field cannot hide a token. Input that is not JSON at
//! all gives [`EventSummary::default()`]. Nothing here panics on any bytes.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

#[cfg(test)]
mod tests;

/// Token counts reported by the server in a `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// `usage.prompt_tokens`, when it is a non-negative integer that fits in a `u64`.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, same rule. With vLLM's `continuous_usage_stats` it is
    /// cumulative, so the last value seen is the stream's total.
    pub completion_tokens: Option<u64>,
}

/// What one event of the stream means to the meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventSummary {
    /// The event carries generated output: some choice has a non-empty `delta.content`,
    /// `delta.reasoning`, `delta.reasoning_content`, or a non-empty `delta.tool_calls` array
    /// (chat), or a non-empty `text` (completions).
    pub token: bool,
    /// `usage` when present, an object, and at least one of its counts is a valid integer
    /// (`"usage": null`, as OpenAI sends on ordinary chunks, is `None`).
    pub usage: Option<Usage>,
    /// `choices` is an empty array and `usage` is present (the chunk
    /// `stream_options.include_usage` adds at the end of the stream).
    pub usage_only: bool,
    /// A top-level non-null `error` member (an error sent after a 200).
    pub error: bool,
    /// The data is exactly `[DONE]` (surrounding ASCII whitespace allowed).
    pub done: bool,
}

/// Classifies the `data` payload of one SSE event.
///
/// Never panics. Allocation-free for the ordinary chunk of a vLLM / OpenAI stream; serde_json
/// grows its scratch buffer (once per call) only to unescape a key such as `"\u0063hoices"` or to
/// skip a value nested two or more levels deep (`tool_calls` entries, `logprobs` content).
pub fn classify(data: &[u8]) -> EventSummary {
    // The terminator is the one non-JSON payload; checking it first keeps it off the parser.
    if data.trim_ascii() == b"[DONE]" {
        return EventSummary {
            done: true,
            ..EventSummary::default()
        };
    }
    let mut de = serde_json::Deserializer::from_slice(data);
    let chunk = match Lenient(ChunkPick).deserialize(&mut de) {
        Ok(chunk) => chunk,
        Err(_) => return EventSummary::default(),
    };
    // Trailing garbage means this is not the JSON document we think it is.
    if de.end().is_err() {
        return EventSummary::default();
    }
    let Chunk {
        choices,
        usage,
        error,
    } = chunk;
    EventSummary {
        token: choices.is_some_and(|c| c.token),
        usage,
        usage_only: usage.is_some() && choices.is_some_and(|c| c.empty),
        error,
        done: false,
    }
}

/// What the walk found at the top level.
#[derive(Default)]
struct Chunk {
    /// `None` when `choices` is absent or not an array.
    choices: Option<Choices>,
    usage: Option<Usage>,
    error: bool,
}

/// What the walk found in a `choices` array.
#[derive(Clone, Copy)]
struct Choices {
    empty: bool,
    token: bool,
}

/// A string value with at least one character. The raw text of a JSON string is its quoted,
/// still-escaped form, so `""` is the only raw string that decodes to the empty string.
fn is_nonempty_string(raw: &RawValue) -> bool {
    let text = raw.get().as_bytes();
    text.first() == Some(&b'"') && text.len() > 2
}

/// An array with at least one element (`[]` and `[ ]` are empty; `[[]]` is not).
fn is_nonempty_array(raw: &RawValue) -> bool {
    match raw.get().as_bytes().split_first() {
        Some((b'[', rest)) => rest.trim_ascii_start().first() != Some(&b']'),
        _ => false,
    }
}

/// One level of the walk: what to extract when the value has the expected shape. Every other
/// shape yields `Out::default()` (see [`Lenient`]).
trait Pick<'de>: Sized {
    type Out: Default;

    fn u64(self, _value: u64) -> Self::Out {
        Self::Out::default()
    }

    fn seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Out, A::Error> {
        IgnoredAny.visit_seq(seq).map(|_| Self::Out::default())
    }

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error> {
        IgnoredAny.visit_map(map).map(|_| Self::Out::default())
    }
}

/// Runs a [`Pick`] on any JSON value: the expected shape goes to the pick, every other shape is
/// consumed and gives the default, so a wrong type is "nothing here" rather than a parse error.
struct Lenient<P>(P);

impl<'de, P: Pick<'de>> DeserializeSeed<'de> for Lenient<P> {
    type Value = P::Out;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<P::Out, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, P: Pick<'de>> Visitor<'de> for Lenient<P> {
    type Value = P::Out;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_bool<E>(self, _value: bool) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_i64<E>(self, _value: i64) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_u64<E>(self, value: u64) -> Result<P::Out, E> {
        Ok(self.0.u64(value))
    }

    fn visit_f64<E>(self, _value: f64) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_str<E>(self, _value: &str) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<P::Out, A::Error> {
        self.0.seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<P::Out, A::Error> {
        self.0.map(map)
    }
}

// Key enums: serde matches a borrowed key against the names without allocating; any other key
// is `Other` and its value is skipped.

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ChunkKey {
    Choices,
    Usage,
    Error,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ChoiceKey {
    Delta,
    Text,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum DeltaKey {
    Content,
    Reasoning,
    ReasoningContent,
    ToolCalls,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum UsageKey {
    PromptTokens,
    CompletionTokens,
    #[serde(other)]
    Other,
}

/// The top-level object. A repeated key is folded in (last `usage` wins, tokens accumulate):
/// the event is still worth metering.
struct ChunkPick;

impl<'de> Pick<'de> for ChunkPick {
    type Out = Chunk;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Chunk, A::Error> {
        let mut chunk = Chunk::default();
        while let Some(key) = map.next_key::<ChunkKey>()? {
            match key {
                ChunkKey::Choices => {
                    if let Some(found) = map.next_value_seed(Lenient(ChoicesPick))? {
                        let previous = chunk.choices.unwrap_or(Choices {
                            empty: true,
                            token: false,
                        });
                        chunk.choices = Some(Choices {
                            empty: previous.empty && found.empty,
                            token: previous.token || found.token,
                        });
                    }
                }
                ChunkKey::Usage => chunk.usage = map.next_value_seed(Lenient(UsagePick))?,
                ChunkKey::Error => chunk.error = map.next_value::<&RawValue>()?.get() != "null",
                ChunkKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(chunk)
    }
}

/// The `choices` array, walked element by element without collecting it.
struct ChoicesPick;

impl<'de> Pick<'de> for ChoicesPick {
    type Out = Option<Choices>;

    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Choices>, A::Error> {
        let mut choices = Choices {
            empty: true,
            token: false,
        };
        while let Some(token) = seq.next_element_seed(Lenient(ChoicePick))? {
            choices.empty = false;
            choices.token |= token;
        }
        Ok(Some(choices))
    }
}

/// One choice: a chat `delta` or a completions `text`.
struct ChoicePick;

impl<'de> Pick<'de> for ChoicePick {
    type Out = bool;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut token = false;
        while let Some(key) = map.next_key::<ChoiceKey>()? {
            match key {
                ChoiceKey::Delta => token |= map.next_value_seed(Lenient(DeltaPick))?,
                ChoiceKey::Text => token |= is_nonempty_string(map.next_value()?),
                ChoiceKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(token)
    }
}

/// A chat `delta`: output is content, reasoning (both spellings servers use) or tool calls.
struct DeltaPick;

impl<'de> Pick<'de> for DeltaPick {
    type Out = bool;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut token = false;
        while let Some(key) = map.next_key::<DeltaKey>()? {
            match key {
                DeltaKey::Content | DeltaKey::Reasoning | DeltaKey::ReasoningContent => {
                    token |= is_nonempty_string(map.next_value()?);
                }
                DeltaKey::ToolCalls => token |= is_nonempty_array(map.next_value()?),
                DeltaKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(token)
    }
}

/// The `usage` object; `None` unless at least one count is a valid integer, so a usage object
/// the meter cannot read does not mark a chunk as usage-only.
struct UsagePick;

impl<'de> Pick<'de> for UsagePick {
    type Out = Option<Usage>;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Usage>, A::Error> {
        let mut usage = Usage::default();
        while let Some(key) = map.next_key::<UsageKey>()? {
            match key {
                UsageKey::PromptTokens => {
                    usage.prompt_tokens = map.next_value_seed(Lenient(Count))?
                }
                UsageKey::CompletionTokens => {
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

/// A token count: a non-negative integer that fits in `u64`. serde_json hands larger integers,
/// fractions and negative numbers to other visit methods, which give `None`.
struct Count;

impl<'de> Pick<'de> for Count {
    type Out = Option<u64>;

    fn u64(self, value: u64) -> Option<u64> {
        Some(value)
    }
}
