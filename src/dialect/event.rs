//! The vocabulary every dialect reports in: what one event means to the meter ([`EventSummary`])
//! and the token counts a server reports ([`Usage`]), with the picks that read the counts the
//! OpenAI APIs share.

use serde::de::MapAccess;

use super::walk::{self, keys, Count, Lenient, Pick};

/// Token counts reported by the server in a `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// `usage.prompt_tokens`, when it is a non-negative integer that fits in a `u64`.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, same rule. With vLLM's `continuous_usage_stats` it is
    /// cumulative, so the last value seen is the stream's total.
    pub completion_tokens: Option<u64>,
    /// Prompt tokens the server served from its prompt cache instead of computing them, where it
    /// says (each dialect's module names the field); `prompt_tokens` includes them. `None` when
    /// the server reports no cache figure, which is not the same as `Some(0)`.
    pub cached_tokens: Option<u64>,
    /// The server's own time to compute the prompt, in microseconds, where it reports one per
    /// request (llama.cpp's `timings.prompt_ms`): shown beside the proxy's TTFT split.
    pub prefill_micros: Option<u64>,
}

/// A nested `…_details` object's `cached_tokens` (OpenAI's `prompt_tokens_details`, the
/// Responses API's `input_tokens_details`).
#[derive(Clone, Copy)]
pub(super) struct CachedTokensPick;

keys! { enum DetailsKey { CachedTokens } }

impl<'de> Pick<'de> for CachedTokensPick {
    type Out = Option<u64>;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Option<u64>, A::Error> {
        walk::members(map, None, |cached, key: DetailsKey, map| {
            match key {
                DetailsKey::CachedTokens => *cached = map.next_value_seed(Lenient(Count))?,
                DetailsKey::Other => walk::skip(map)?,
            }
            Ok(())
        })
    }
}

/// A `usage` object of the two OpenAI APIs, which name the same three members differently:
/// the prompt count, the output count and the `…_details` object of cached prompt tokens.
/// `None` unless one of the two counts is a valid integer, so a usage object the meter cannot
/// read does not mark a chunk as usage-only. A key in the other API's spelling is skipped.
#[derive(Clone, Copy)]
pub(super) enum UsagePick {
    /// Chat completions and completions: `prompt_tokens`, `completion_tokens`,
    /// `prompt_tokens_details`.
    OpenAi,
    /// Responses: `input_tokens`, `output_tokens`, `input_tokens_details`.
    Responses,
}

keys! {
    /// Both APIs' spellings; [`UsagePick`] reads only its own.
    enum UsageKey {
        PromptTokens,
        CompletionTokens,
        PromptTokensDetails,
        InputTokens,
        OutputTokens,
        InputTokensDetails,
    }
}

impl<'de> Pick<'de> for UsagePick {
    type Out = Option<Usage>;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Option<Usage>, A::Error> {
        use UsageKey::*;
        let usage = walk::members(map, Usage::default(), |usage, key: UsageKey, map| {
            match (self, key) {
                (UsagePick::OpenAi, PromptTokens) | (UsagePick::Responses, InputTokens) => {
                    usage.prompt_tokens = map.next_value_seed(Lenient(Count))?;
                }
                (UsagePick::OpenAi, CompletionTokens) | (UsagePick::Responses, OutputTokens) => {
                    usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
                }
                (UsagePick::OpenAi, PromptTokensDetails)
                | (UsagePick::Responses, InputTokensDetails) => {
                    usage.cached_tokens = map.next_value_seed(Lenient(CachedTokensPick))?;
                }
                _ => walk::skip(map)?,
            }
            Ok(())
        })?;
        let readable = usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
        Ok(readable.then_some(usage))
    }
}

/// What one event of the stream means to the meter (every dialect reports in this shape; see
/// [`super::Dialect::classify`]). The fields name OpenAI's members; each dialect's module says
/// what sets them in its API.
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
    /// Some choice has a non-null `finish_reason`: the chunk where a choice ends, the one a
    /// backend's last members go to when there is no usage chunk (see [`crate::meter::strip`]).
    pub finish: bool,
    /// A top-level non-null `error` member (an error sent after a 200).
    pub error: bool,
    /// The stream's end marker: `[DONE]` here (surrounding ASCII whitespace allowed); the
    /// terminal event of the other dialects (see each module).
    pub done: bool,
    /// How many output tokens this event carries, when the dialect says so per event (TGI and
    /// Ollama: one per token event). `None` when unknown, as for every OpenAI chunk: a chunk may
    /// hold several tokens (speculative decoding) or none, so only `usage` counts tokens here.
    pub tokens: Option<u64>,
}
