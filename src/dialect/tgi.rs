//! The Hugging Face TGI native dialect (`POST /generate_stream`).
//!
//! One SSE event per generated token, usually written `data:{...}` (no space after the colon,
//! which the SSE scanner treats the same): `{"index":1,"token":{"id":..,"text":"Hello",
//! "logprob":..,"special":false},"generated_text":null,"details":null}`; the last event has the
//! whole `generated_text` and, when the request asked for `details`, `details.generated_tokens`
//! (and `input_length` on TGI 2.x). There is no `[DONE]`.
//! - **Token event**: an event whose `token` is not `special` (the EOS token of the last event
//!   is special: generated, but no output). Each token event carries exactly one token.
//! - **Usage**: `details.generated_tokens` (it counts the special EOS token too) and
//!   `details.input_length` when present.
//! - **Error**: a non-null top-level `error` (`{"error":"...","error_type":"..."}`).
//! - **End**: the event with a non-null `generated_text`.

use serde::de::MapAccess;
use serde_json::value::RawValue;

use super::event::{EventSummary, Usage};
use super::walk::{self, is_non_null, keys, Count, Flag, Lenient, Members, Object, Pick};

/// Classifies the `data` of one event.
pub fn classify(data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, Object::<Top>::pick()) else {
        return EventSummary::default();
    };
    let Top {
        token,
        usage,
        error,
        done,
    } = found;
    let token = token.is_some_and(|special| !special);
    EventSummary {
        token,
        usage,
        error,
        done,
        tokens: token.then_some(1),
        ..EventSummary::default()
    }
}

#[derive(Default)]
struct Top {
    /// `Some(special)` when the event has a `token` object.
    token: Option<bool>,
    usage: Option<Usage>,
    error: bool,
    done: bool,
}

keys! { enum TopKey { Token, Details, GeneratedText, Error } }

keys! { enum TokenKey { Special } }

keys! { enum DetailsKey { GeneratedTokens, InputLength } }

impl<'de> Members<'de> for Top {
    type Key = TopKey;

    fn member<A: MapAccess<'de>>(&mut self, key: TopKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            TopKey::Token => self.token = map.next_value_seed(Lenient(TokenPick))?,
            TopKey::Details => self.usage = map.next_value_seed(Lenient(DetailsPick))?,
            TopKey::GeneratedText => self.done = is_non_null(map.next_value::<&RawValue>()?),
            TopKey::Error => self.error = is_non_null(map.next_value::<&RawValue>()?),
            TopKey::Other => walk::skip(map)?,
        }
        Ok(())
    }
}

/// The `token` object: `Some(special)`, a missing `special` counting as an ordinary token.
struct TokenPick;

impl<'de> Pick<'de> for TokenPick {
    type Out = Option<bool>;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Option<bool>, A::Error> {
        walk::members(map, false, |special, key: TokenKey, map| {
            match key {
                TokenKey::Special => {
                    *special = map.next_value_seed(Lenient(Flag))?.unwrap_or(false);
                }
                TokenKey::Other => walk::skip(map)?,
            }
            Ok(())
        })
        .map(Some)
    }
}

/// `details`: `generated_tokens` and `input_length`.
struct DetailsPick;

impl<'de> Pick<'de> for DetailsPick {
    type Out = Option<Usage>;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Option<Usage>, A::Error> {
        let usage = walk::members(map, Usage::default(), |usage, key: DetailsKey, map| {
            match key {
                DetailsKey::GeneratedTokens => {
                    usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
                }
                DetailsKey::InputLength => {
                    usage.prompt_tokens = map.next_value_seed(Lenient(Count))?;
                }
                DetailsKey::Other => walk::skip(map)?,
            }
            Ok(())
        })?;
        Ok((usage != Usage::default()).then_some(usage))
    }
}

#[cfg(test)]
mod tests;
