//! What the handoff phase ([`crate::route::handoff`]) did to a request of a pool with a prefill
//! pool: where its prefill ran, how each phase took, and why it went the way it did.
//!
//! Shared vocabulary, written by the route and read at the finish point (the handoff's own
//! series, and later a trace's spans): TTFT stays what the client felt, from the request head to
//! the decode replica's first token; this record splits it into the prefill phase, the KV
//! transfer, and the decode replica's first token.
use tokio::time::Instant;

use crate::upstream::Target;

/// How a request of a handoff pool was served: the `result` label of
/// `tokenmeter_disaggregated_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffResult {
    /// Still in the prefill phase (a request that ends so was abandoned there: `client_gone`).
    Pending,
    /// Prefilled on the prefill pool; the decode replica took its KV cache.
    Remote,
    /// Prefilled where it decodes by policy: its uncached part was short and the prefill pool
    /// was busy (or short prompts are never handed off).
    LocalShort,
    /// Prefilled where it decodes by policy: the decode backend's prompt cache holds all but a
    /// short part of it (a conversation's follow-up), or part of a short one.
    LocalCached,
    /// Prefilled where it decodes by policy: long, but the prefill pool's queue was past
    /// `spill_queue_tokens`; or, by prediction (`balance = "slo"`), its prefill there was
    /// predicted to outlast `prefill_timeout`.
    LocalBusy,
    /// Not a request the protocol can hand off (another API, a body that is not a JSON object,
    /// or one that carries `kv_transfer_params` of its own): served as without a prefill pool.
    Unsupported,
    /// Fallback: the prefill pool had no available backend.
    PrefillUnavailable,
    /// Fallback: the prefill request failed (connection, error status, an unreadable answer).
    PrefillFailed,
    /// Fallback: the prefill phase passed its deadline (`prefill_timeout`).
    PrefillTimeout,
    /// Fallback: the KV cache did not move (the prefill offered none, a save or restore failed,
    /// or the decode replica could not take it before answering anything).
    TransferFailed,
    /// llama.cpp: every slot of the decode server stayed held for `slot_wait`; the request went
    /// without one (the server queues it) and prefilled there.
    SlotsBusy,
}

impl HandoffResult {
    /// The `result` label; a request finished while [`HandoffResult::Pending`] is `client_gone`.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffResult::Pending => "client_gone",
            HandoffResult::Remote => "remote",
            HandoffResult::LocalShort => "local_short",
            HandoffResult::LocalCached => "local_cached",
            HandoffResult::LocalBusy => "local_busy",
            HandoffResult::Unsupported => "unsupported",
            HandoffResult::PrefillUnavailable => "prefill_unavailable",
            HandoffResult::PrefillFailed => "prefill_failed",
            HandoffResult::PrefillTimeout => "prefill_timeout",
            HandoffResult::TransferFailed => "transfer_failed",
            HandoffResult::SlotsBusy => "slots_busy",
        }
    }

    /// Served whole where it decodes, straight away: as a pool without a prefill pool would have
    /// served it (a policy's choice, or no prefill backend to try), so its TTFT is the decode
    /// backend's own. Not after a remote prefill, a failed one, or a wait for a slot.
    pub fn served_locally(self) -> bool {
        matches!(
            self,
            HandoffResult::LocalShort
                | HandoffResult::LocalCached
                | HandoffResult::LocalBusy
                | HandoffResult::Unsupported
                | HandoffResult::PrefillUnavailable
        )
    }
}

/// Where a request's prefill runs: the handoff policy's decision ([`super::policy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// On the prefill pool.
    Remote,
    /// Where it decodes, for this reason (a policy choice or a fallback).
    Local(HandoffResult),
}

/// The handoff phase of one request.
#[derive(Debug, Clone)]
pub struct HandoffRecord {
    pub result: HandoffResult,
    /// The uncached prompt tokens the policy weighed.
    pub uncached_tokens: u64,
    /// The prefill backend, once one was chosen.
    pub prefill_backend: Option<Target>,
    /// When the prefill request was sent.
    pub prefill_started: Option<Instant>,
    /// When the prefill's answer was in.
    pub prefill_done: Option<Instant>,
    /// When the KV cache was in place on the decode replica, where the proxy moves it
    /// (llama.cpp's save and restore); vLLM's decode replica pulls it itself, inside its TTFT.
    pub transfer_done: Option<Instant>,
    /// When the decode request was sent (the one whose stream the client reads).
    pub decode_sent: Option<Instant>,
}

impl HandoffRecord {
    pub fn new(result: HandoffResult, uncached_tokens: u64) -> Self {
        Self {
            result,
            uncached_tokens,
            prefill_backend: None,
            prefill_started: None,
            prefill_done: None,
            transfer_done: None,
            decode_sent: None,
        }
    }
}
