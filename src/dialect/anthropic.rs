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
//!   OpenTelemetry counts cached input as input; the cached prompt tokens (prompt-cache hits) are
//!   `cache_read_input_tokens` (a cache write is computed: a miss). The placeholder `output_tokens` of
//!   `message_start` is not used: a stream cut before `message_delta` falls back to counting
//!   token events rather than reporting 1.
//! - **Error**: an `error` event (`{"type":"error","error":{...}}`) after the 200.
//! - **End**: `message_stop`.

use serde::de::MapAccess;

use super::event::{EventSummary, Usage};
use super::output::{self, Holds, Output};
use super::typed::{self, EventType};
use super::walk::{self, keys, Count, Lenient, Members, Object, Pick, UsageMember};
use kind::Kind;

/// Classifies one event; `event` is its SSE `event:` field. The skimming fast path
/// ([`classify_fast`]) answers for the frequent events, the serde walk ([`classify_parsed`]) for
/// the rest.
pub fn classify(event: &[u8], data: &[u8]) -> EventSummary {
    classify_fast(event, data).unwrap_or_else(|| classify_parsed(event, data))
}

/// The fast path alone: the frequent events (`content_block_delta`, `content_block_start` /
/// `_stop`, `ping`, `message_stop`, `error`) skimmed instead of walked ([`typed::classify`]).
/// `None` when the event needs the full walk: `message_start` and `message_delta`, which carry a
/// `message` or `usage` object (once per stream), and anything outside the skimmer's subset of
/// JSON. Whenever it answers, it answers as [`classify_parsed`] does (the differential test
/// `tests/e2e/dialect_skim.rs`).
pub fn classify_fast(event: &[u8], data: &[u8]) -> Option<EventSummary> {
    typed::classify::<Kind>(event, data, &[b"usage", b"message"], |skim| {
        output::skimmed(skim, delta_member)
    })
}

/// The definition: the serde walk of the whole event (the reference the fast path is tested
/// against).
pub fn classify_parsed(event: &[u8], data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, Object::<Top>::pick()) else {
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
            let input = u.input();
            let usage = Usage {
                prompt_tokens: input.and_then(|i| i.prompt_tokens),
                completion_tokens: output,
                cached_tokens: input.and_then(|i| i.cached_tokens),
                prefill_micros: None,
            };
            (usage != Usage::default()).then_some(usage)
        }),
        _ => None,
    };
    EventSummary {
        usage,
        ..kind.summary(delta)
    }
}

/// The usage of a whole non-streaming response (`"stream": false`: one `message` object): its
/// top-level `usage`, input counted as in the stream (`input_tokens` plus the cache creation and
/// cache read input tokens), output `usage.output_tokens`. The content blocks are skipped unread.
/// `None` when the body is not JSON or carries no readable count.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    let counts = walk::parse(body, UsageMember(CountsPick))??;
    let input = counts.input();
    let usage = Usage {
        prompt_tokens: input.and_then(|input| input.prompt_tokens),
        completion_tokens: counts.output,
        cached_tokens: input.and_then(|input| input.cached_tokens),
        prefill_micros: None,
    };
    (usage != Usage::default()).then_some(usage)
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
            cached_tokens: cache_read,
            prefill_micros: None,
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

keys! { enum TopKey { Type, Delta, Usage, Message } }

/// A content block delta's members: output is non-empty text, thinking or tool-input JSON.
fn delta_member(name: &[u8]) -> Holds {
    match name {
        b"text" | b"thinking" | b"partial_json" => Holds::Text,
        _ => Holds::Nothing,
    }
}

keys! {
    enum UsageKey {
        InputTokens,
        CacheCreationInputTokens,
        CacheReadInputTokens,
        OutputTokens,
    }
}

impl<'de> Members<'de> for Top {
    type Key = TopKey;

    fn member<A: MapAccess<'de>>(&mut self, key: TopKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            TopKey::Type => self.kind = Kind::of_raw(map.next_value()?),
            TopKey::Delta => {
                self.delta = map.next_value_seed(Lenient(Output(delta_member)))?;
            }
            TopKey::Usage => self.usage = map.next_value_seed(Lenient(CountsPick))?,
            TopKey::Message => {
                self.message_usage = map.next_value_seed(Lenient(UsageMember(CountsPick)))?;
            }
            TopKey::Other => walk::skip(map)?,
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
struct CountsPick;

impl<'de> Pick<'de> for CountsPick {
    type Out = Option<Counts>;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Option<Counts>, A::Error> {
        let counts = walk::members(map, Counts::default(), |counts, key: UsageKey, map| {
            let slot = match key {
                UsageKey::InputTokens => &mut counts.input,
                UsageKey::CacheCreationInputTokens => &mut counts.cache_creation,
                UsageKey::CacheReadInputTokens => &mut counts.cache_read,
                UsageKey::OutputTokens => &mut counts.output,
                UsageKey::Other => return walk::skip(map),
            };
            *slot = map.next_value_seed(Lenient(Count))?;
            Ok(())
        })?;
        Ok(Some(counts))
    }
}

mod kind;
#[cfg(test)]
mod tests;
