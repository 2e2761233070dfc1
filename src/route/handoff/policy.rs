//! Which requests prefill on the prefill pool: a pure decision over what the router knows when a
//! request has its decode backend.
//!
//! A prefill on the replica that is decoding other streams stalls them for as long as it runs;
//! handing it off removes the stall but costs a round trip, a KV transfer, and a place in the
//! prefill pool's queue. So:
//! 1. a prompt whose **uncached** part (the estimate, less what the decode backend's prompt
//!    cache is known to hold) is at least `min_prompt_tokens` is handed off: its prefill would
//!    stall the decode replica longest;
//! 2. a long prompt that the decode backend holds all but a short part of (a conversation's
//!    follow-up) prefills there: moving a whole cache to save a short prefill is a loss;
//! 3. with `spill_queue_tokens`, a long prompt prefills where it decodes while the prefill pool's
//!    least-queued backend has more prompt tokens queued than that (`local_busy`): past it, its
//!    wait there would cost more TTFT than its prefill costs the decode backend's streams (whose
//!    per-request TPOT a few long steps barely move);
//! 4. a short prompt is handed off only while the prefill pool's least-queued backend has fewer
//!    than `short_queue_tokens` prompt tokens queued: behind a long document its TTFT would be
//!    worse than the short stall it saves (the measured failure of handing off everything); and
//!    only if the decode backend holds none of it: a conversation's next turn would otherwise be
//!    recomputed whole on the prefill pool (which does not hold the conversation) to save the
//!    decode backend a prefill of its few new tokens, and its moved cache would replace the one
//!    the decode backend had (measured on llama-server: every turn handed off took TTFT p50 from
//!    0.5 to 4.4 s).
//!
//! A decode pool with `balance = "slo"` decides by prediction instead ([`decide_predicted`], in
//! [`crate::route::placement::handed`]: its placement scores each decode replica on the path the
//! same decision takes from there), the thresholds unused: its latency models say when the
//! request's first token would come on its decode backend (with its queue, less its prompt
//! cache) and through the prefill pool (that pool's best backend, whose model learns from its
//! prefills, then the transfer and first step as the pool's handoffs measured them), and whether
//! its prefill would stall the streams decoding beside it. Rules 1, 2 and 4 fall out of those figures rather than fixed token counts: a prefill
//! that would stall its decode backend's streams goes to the prefill pool (1), whatever its own
//! TTFT there; a follow-up whose prefix is cached stalls nobody and meets its target where it
//! decodes (2); a short chat goes to the prefill pool only when its own decode backend's queue
//! would miss its target and the prefill pool would meet it (4). And a prefill the prefill pool is
//! predicted to take longer than `prefill_timeout` over stays where it decodes (`local_busy`, as
//! rule 3): handed off, it would be abandoned at the timeout and prefilled there all the same,
//! late by the timeout.
use super::PoolHandoff;
pub use crate::route::handoff::record::Choice;
use crate::route::handoff::record::HandoffResult;
pub(crate) use crate::route::placement::handed::{decide_predicted, Forecast};

/// What the decision weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyInput {
    /// The prompt's estimated tokens.
    pub prompt_tokens: u64,
    /// Of those, the ones the decode backend is not known to hold.
    pub uncached_tokens: u64,
    /// Prompt tokens queued on the prefill pool's least-queued available backend; `None` when
    /// it has no available backend.
    pub prefill_queue: Option<u64>,
}

/// Decides where a request's prefill runs.
pub fn decide(handoff: &PoolHandoff, input: PolicyInput) -> Choice {
    let long = input.uncached_tokens >= handoff.min_prompt_tokens;
    let idle = input
        .prefill_queue
        .is_some_and(|queued| queued < handoff.short_queue_tokens);
    if long {
        return match input.prefill_queue {
            None => Choice::Local(HandoffResult::PrefillUnavailable),
            Some(queued)
                if handoff.spill_queue_tokens > 0 && queued > handoff.spill_queue_tokens =>
            {
                Choice::Local(HandoffResult::LocalBusy)
            }
            Some(_) => Choice::Remote,
        };
    }
    if input.prompt_tokens >= handoff.min_prompt_tokens
        || input.uncached_tokens < input.prompt_tokens
    {
        return Choice::Local(HandoffResult::LocalCached);
    }
    if idle {
        return Choice::Remote;
    }
    Choice::Local(HandoffResult::LocalShort)
}

/// The uncached part of `prompt_tokens` when the decode backend holds `cached_bytes` of the
/// prompt's `text_bytes` (prompt caches hold whole blocks from the start, so the cached share of
/// the bytes is the cached share of the tokens, to the estimate's accuracy).
pub fn uncached(prompt_tokens: u64, text_bytes: u64, cached_bytes: Option<u64>) -> u64 {
    let cached = cached_bytes.unwrap_or(0).min(text_bytes);
    if text_bytes == 0 || cached == 0 {
        return prompt_tokens;
    }
    let share = cached as f64 / text_bytes as f64;
    let uncached = (prompt_tokens as f64 * (1.0 - share)).ceil() as u64;
    uncached.min(prompt_tokens)
}

#[cfg(test)]
mod tests;
