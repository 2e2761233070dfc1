//! What a latency-predicting placement (`balance = "slo"`) said of the backend it chose, kept in
//! the request's context so the finish point can hold it against what the request measured: the
//! model learns from it, and the prediction's error is counted.
use std::time::Duration;

/// The placement's view of one request on its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// Index of the pool (in the router that placed it).
    pub pool: usize,
    /// The backend's prompt tokens queued and streams in flight at the placement, without this
    /// request.
    pub queued_tokens: u64,
    pub streams: u64,
    /// The request's estimated prompt tokens, and how many of them the backend's prompt cache was
    /// expected to hold.
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Predicted time from the dispatch to the first token.
    pub ttft: Duration,
    /// Predicted mean gap between its tokens.
    pub tpot: Duration,
    /// Predicted largest gap between its tokens: the mean, plus the stall the backend expected
    /// a stream started there to meet ([`super::designate`]).
    pub gap: Duration,
    /// The TTFT the placement held it to: its target, or for a prompt whose own prefill misses
    /// that anywhere, [`super::LONG_PROMPT_SLACK`] times that prefill ([`super::for_prompt`]).
    pub ttft_target: Duration,
}

impl Prediction {
    /// The prompt tokens the backend was expected to prefill: its prompt less what its cache held.
    pub fn uncached_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }
}
