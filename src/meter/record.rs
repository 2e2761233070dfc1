//! What a response body showed: the instants and counts the meter stamps as the stream passes
//! ([`StreamRecord`], in the request's context), and the figures they yield when the request ends
//! ([`Figures`], computed once for every finish hook).
//!
//! Definitions (REFERENCE §1): t0 = the proxy has the request head; TTFB = first body byte - t0;
//! TTFT = first token event - t0; ITL = every gap between consecutive token events; TPOT = (last
//! token event - first token event) / (N_out - 1) for N_out >= 2; E2E = end of stream - t0; N_out =
//! `usage.completion_tokens` when the stream carries usage, else the number of token events.
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::dialect::Usage;
use crate::request::Inspection;

/// The meter's part of a request's context, written by [`crate::meter::layer`] once it has read
/// the body (the rest of the stack reads it: the rules the model, the dispatch and the handoff the
/// body, the budget the walk's facts, the finish point the labels and targets).
#[derive(Debug, Clone, Default)]
pub struct RequestRecord {
    /// A generation request's buffered body and what one walk read from it.
    pub generation: Option<Generation>,
    /// The request's model name (from the body, or the path for Triton), for labels and rules.
    pub model: Option<String>,
    /// The bounded `gen_ai_request_model` label of `model` (see
    /// [`crate::metrics::Metrics::model_label`]), once the meter has read the body.
    pub model_label: Option<Arc<str>>,
    /// The SLO targets the request is judged against and placed by (its class's, its model's or
    /// the defaults: [`crate::config::SloConfig::targets`]), once the meter has read the body;
    /// `None` before, and for requests the meter does not read.
    pub slo: Option<crate::config::SloTargets>,
    /// The meter asked the backend for usage on the client's behalf (`include_usage` injected).
    pub usage_injected: bool,
    /// The request is counted in `tokenmeter_streams_active` (the meter counts a generation
    /// request once its body is read); the finish takes it off.
    pub active: bool,
}

/// A generation request's body as forwarded (after any usage injection; empty once a response
/// head is back: [`crate::context::RequestContext::release_body`]), and what one walk of the
/// client's body read ([`crate::request::read`]); `read` is `None` when the body is not a JSON
/// object.
#[derive(Debug, Clone)]
pub struct Generation {
    pub body: Bytes,
    pub read: Option<Inspection>,
}

/// What one stream has shown so far.
#[derive(Debug, Clone)]
pub struct StreamRecord {
    pub t0: Instant,
    pub first_byte: Option<Instant>,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub token_events: u64,
    /// Output tokens counted from the events themselves: the dialect's per-event count where it
    /// gives one (TGI, Ollama), else one per token event. The fallback N_out without usage.
    pub event_tokens: u64,
    /// The latest usage the stream reported (cumulative when continuous usage is on).
    pub usage: Usage,
    pub error_event: bool,
    /// The stream's terminal event passed (`[DONE]` and the other dialects'): a client that
    /// leaves after it had the whole stream (see `meter::body`).
    pub terminal_event: bool,
    /// The body was a stream of a known framing (SSE or NDJSON): its events were read.
    pub framed: bool,
    /// SSE / NDJSON lines over `metering.max_sse_line_bytes` (skipped by the scanner, forwarded).
    pub overflows: u64,
    /// The longest gap between consecutive token events.
    pub max_gap: Duration,
    /// Gaps of at least `metering.stall_threshold` (as `tokenmeter_stalls_total` counts them).
    pub stalls: u32,
}

/// The figures a finished stream yields.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub e2e: Duration,
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    /// The largest gap between two token events; `None` with fewer than two.
    pub max_gap: Option<Duration>,
    pub output_tokens: u64,
    /// `true` when `output_tokens` came from usage, `false` when counted from token events.
    pub exact_output: bool,
    pub input_tokens: Option<u64>,
    /// Of `input_tokens`, those the server served from its prompt cache, where it says.
    pub cached_input_tokens: Option<u64>,
}

/// The SLO targets a stream is judged against (its own: [`crate::config::SloConfig::targets`]).
pub use crate::config::SloTargets;

/// The verdicts for one successful stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SloVerdict {
    pub ttft_met: bool,
    /// `None` when the stream had fewer than two output tokens (TTFT alone decides).
    pub tpot_met: Option<bool>,
    /// Its largest gap within `max_gap`; `None` without a gap target, or with fewer than two
    /// token events (no gap to judge).
    pub gap_met: Option<bool>,
}

impl SloVerdict {
    pub fn all_met(self) -> bool {
        self.ttft_met && self.tpot_met.unwrap_or(true) && self.gap_met.unwrap_or(true)
    }
}

impl StreamRecord {
    pub fn new(t0: Instant) -> Self {
        Self {
            t0,
            first_byte: None,
            first_token: None,
            last_token: None,
            token_events: 0,
            event_tokens: 0,
            usage: Usage::default(),
            error_event: false,
            terminal_event: false,
            framed: false,
            overflows: 0,
            max_gap: Duration::ZERO,
            stalls: 0,
        }
    }

    /// Notes a body frame; returns TTFB when this is the first byte.
    pub fn on_bytes(&mut self, now: Instant) -> Option<Duration> {
        if self.first_byte.is_some() {
            return None;
        }
        self.first_byte = Some(now);
        Some(now.saturating_duration_since(self.t0))
    }

    /// Notes a token event carrying `tokens` output tokens when the dialect says (else one);
    /// returns what to record: TTFT for the first event, the gap for later ones.
    pub fn on_token(&mut self, now: Instant, tokens: Option<u64>) -> TokenMark {
        self.token_events += 1;
        self.event_tokens += tokens.unwrap_or(1);
        let mark = match self.last_token {
            None => {
                self.first_token = Some(now);
                TokenMark::First(now.saturating_duration_since(self.t0))
            }
            Some(previous) => {
                let gap = now.saturating_duration_since(previous);
                self.max_gap = self.max_gap.max(gap);
                TokenMark::Gap(gap)
            }
        };
        self.last_token = Some(now);
        mark
    }

    /// Keeps the latest non-empty usage numbers the stream reported.
    pub fn on_usage(&mut self, usage: Usage) {
        if usage.prompt_tokens.is_some() {
            self.usage.prompt_tokens = usage.prompt_tokens;
        }
        if usage.completion_tokens.is_some() {
            self.usage.completion_tokens = usage.completion_tokens;
        }
        if usage.cached_tokens.is_some() {
            self.usage.cached_tokens = usage.cached_tokens;
        }
        if usage.prefill_micros.is_some() {
            self.usage.prefill_micros = usage.prefill_micros;
        }
    }

    /// The figures of the stream ending at `end`.
    pub fn figures(&self, end: Instant) -> Figures {
        let (output_tokens, exact_output) = match self.usage.completion_tokens {
            Some(tokens) => (tokens, true),
            None => (self.event_tokens, false),
        };
        let tpot = match (self.first_token, self.last_token) {
            (Some(first), Some(last)) if output_tokens >= 2 => {
                let span = last.saturating_duration_since(first);
                // u32 is plenty: a stream of 4 billion tokens is not a thing.
                let divisor = u32::try_from(output_tokens - 1).unwrap_or(u32::MAX);
                Some(span / divisor)
            }
            _ => None,
        };
        Figures {
            e2e: end.saturating_duration_since(self.t0),
            ttft: self
                .first_token
                .map(|first| first.saturating_duration_since(self.t0)),
            tpot,
            max_gap: (self.token_events >= 2).then_some(self.max_gap),
            output_tokens,
            exact_output,
            input_tokens: self.usage.prompt_tokens,
            cached_input_tokens: self.usage.cached_tokens,
        }
    }
}

impl Figures {
    /// SLO verdicts; `None` for a stream without any token (nothing to judge).
    pub fn verdict(&self, targets: SloTargets) -> Option<SloVerdict> {
        let ttft = self.ttft?;
        Some(SloVerdict {
            ttft_met: ttft <= targets.ttft,
            tpot_met: self.tpot.map(|tpot| tpot <= targets.tpot),
            gap_met: targets
                .max_gap
                .zip(self.max_gap)
                .map(|(target, gap)| gap <= target),
        })
    }
}

/// What a token event adds to the histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenMark {
    First(Duration),
    Gap(Duration),
}

#[cfg(test)]
mod tests;
