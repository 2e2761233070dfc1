//! The OpenAI Responses dialect (`POST /v1/responses`, `stream: true`).
//!
//! Every event is `event: <type>` plus `data: {"type": "<type>", ...}`; there is no `[DONE]`.
//! - **Token event**: an output delta with a non-empty `delta` — `response.output_text.delta`,
//!   `response.refusal.delta`, `response.reasoning_text.delta`,
//!   `response.reasoning_summary_text.delta`, `response.function_call_arguments.delta`,
//!   `response.custom_tool_call_input.delta`. How many tokens a delta holds is not said.
//! - **Usage**: `response.usage` (`input_tokens`, `output_tokens`; cached prompt tokens
//!   `input_tokens_details.cached_tokens`) of the terminal event
//!   (`response.completed`, `response.incomplete`, `response.failed`); `response.created`
//!   carries `"usage": null`. The server always sends it, so nothing is injected.
//! - **Error**: `response.failed`, or an `error` event.
//! - **End**: `response.completed`, `response.incomplete` or `response.failed`.
//!
//! The type comes from the payload's `type` (the SSE `event:` name when the payload has none),
//! and fields are read in whatever order they come.

use serde::de::MapAccess;

use super::event::{EventSummary, Usage, UsagePick};
use super::skim::Skim;
use super::typed::{self, EventType};
use super::walk::{self, is_nonempty_string, keys, Lenient, Members, Object, UsageMember};
use kind::Kind;

/// Classifies one event; `event` is its SSE `event:` field. The skimming fast path
/// ([`classify_fast`]) answers for the frequent events, the serde walk ([`classify_parsed`]) for
/// the rest.
pub fn classify(event: &[u8], data: &[u8]) -> EventSummary {
    classify_fast(event, data).unwrap_or_else(|| classify_parsed(event, data))
}

/// The fast path alone: the output deltas and other small events skimmed instead of walked
/// ([`typed::classify`]). `None` when the event needs the full walk: one with a `response` object
/// (the lifecycle events, the terminal one with `usage`), and anything outside the skimmer's
/// subset of JSON. Whenever it answers, it answers as [`classify_parsed`] does (the differential
/// test `tests/e2e/dialect_skim.rs`).
pub fn classify_fast(event: &[u8], data: &[u8]) -> Option<EventSummary> {
    typed::classify::<Kind>(event, data, &[b"response"], Skim::skip_is_nonempty_string)
}

/// The definition: the serde walk of the whole event (the reference the fast path is tested
/// against).
pub fn classify_parsed(event: &[u8], data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, Object::<Top>::pick()) else {
        return EventSummary::default();
    };
    let Top { kind, delta, usage } = found;
    let kind = kind.unwrap_or_else(|| Kind::of(event));
    EventSummary {
        usage,
        ..kind.summary(delta)
    }
}

/// The usage of a whole non-streaming response (`"stream": false`: one `response` object): its
/// top-level `usage.input_tokens` / `usage.output_tokens`. The output items are skipped unread.
/// `None` when the body is not JSON or carries no readable usage.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    walk::parse(body, UsageMember(UsagePick::Responses))?
}

#[derive(Default)]
struct Top {
    kind: Option<Kind>,
    delta: bool,
    usage: Option<Usage>,
}

keys! { enum TopKey { Type, Delta, Response } }

impl<'de> Members<'de> for Top {
    type Key = TopKey;

    fn member<A: MapAccess<'de>>(&mut self, key: TopKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            TopKey::Type => self.kind = Kind::of_raw(map.next_value()?),
            TopKey::Delta => self.delta = is_nonempty_string(map.next_value()?),
            TopKey::Response => {
                self.usage = map.next_value_seed(Lenient(UsageMember(UsagePick::Responses)))?;
            }
            TopKey::Other => walk::skip(map)?,
        }
        Ok(())
    }
}

mod kind;
#[cfg(test)]
mod tests;
