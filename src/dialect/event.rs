//! The vocabulary every dialect reports in: what one event means to the meter ([`EventSummary`])
//! and the token counts a server reports ([`Usage`]).

/// Token counts reported by the server in a `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// `usage.prompt_tokens`, when it is a non-negative integer that fits in a `u64`.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, same rule. With vLLM's `continuous_usage_stats` it is
    /// cumulative, so the last value seen is the stream's total.
    pub completion_tokens: Option<u64>,
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
