//! What one request showed, as the client saw it: the stream's state as its events arrive
//! ([`StreamState`]), and the record it yields ([`RequestRecord`], how it ended: [`Ending`]).
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::events::{classify, EventKind};

/// What the record says of the request that was planned.
pub(super) struct Planned<'a> {
    pub index: u64,
    pub class: &'a str,
    pub prompt_words: u32,
    pub max_tokens: u32,
}

/// How a request ended. Everything but `ok` is an error kind in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// A 2xx stream that ended with `[DONE]` and no error event.
    Ok,
    /// A non-2xx status.
    Http,
    /// Connecting, sending or reading failed.
    Transport,
    /// A `data: {"error": ...}` event in the stream.
    ErrorEvent,
    /// The stream ended without `[DONE]`.
    Incomplete,
    /// An event that is neither `[DONE]` nor JSON.
    InvalidEvent,
    /// The request outlived [`LoadSpec::request_timeout`](super::LoadSpec::request_timeout).
    Timeout,
}

impl Ending {
    pub fn is_ok(self) -> bool {
        self == Ending::Ok
    }

    /// The snake_case name used in tables and JSON maps.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Ok => "ok",
            Ending::Http => "http",
            Ending::Transport => "transport",
            Ending::ErrorEvent => "error_event",
            Ending::Incomplete => "incomplete",
            Ending::InvalidEvent => "invalid_event",
            Ending::Timeout => "timeout",
        }
    }
}

/// What one request measured. Times are seconds; `ttft_s`, `itl_s`, `tpot_s` are filled as
/// far as the stream got, even for failed requests (statistics only use `ok` ones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Request number within the point (also the seed of its workload draw).
    pub index: u64,
    /// Workload class name.
    pub class: String,
    /// Prompt length sent, in words.
    pub prompt_words: u32,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    /// When the request was sent, relative to the start of the point.
    pub start_s: f64,
    pub outcome: Ending,
    /// HTTP status, when a response head arrived.
    pub status: Option<u16>,
    /// What went wrong, for errors.
    pub error: Option<String>,
    pub ttft_s: Option<f64>,
    /// Every gap between consecutive token events.
    pub itl_s: Vec<f64>,
    /// `(last - first) / (N_out - 1)`, for N_out >= 2.
    pub tpot_s: Option<f64>,
    /// Request sent to end of stream (or to the failure).
    pub e2e_s: f64,
    pub token_events: u64,
    /// N_out: `usage.completion_tokens` when present, else `token_events`.
    pub output_tokens: u64,
    pub usage_prompt_tokens: Option<u64>,
    pub usage_completion_tokens: Option<u64>,
    /// Prompt tokens the server served from its prefix cache:
    /// `usage.prompt_tokens_details.cached_tokens`, else llama.cpp's `timings.cache_n`; absent
    /// when the server reports neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_cached_tokens: Option<u64>,
    /// The session this request belongs to (session workloads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Its turn within the session, from 1 (session workloads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
}

/// What the stream has shown so far.
#[derive(Debug, Default)]
pub(super) struct StreamState {
    pub(super) status: Option<u16>,
    token_times: Vec<Instant>,
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    cache_n: Option<u64>,
    /// The reply text so far, when the caller keeps it.
    pub(super) reply: Option<String>,
    pub(super) done: bool,
    failure: Option<(Ending, String)>,
}

impl StreamState {
    /// A state that keeps the reply text.
    pub(super) fn keeping_reply() -> Self {
        Self {
            reply: Some(String::new()),
            ..Self::default()
        }
    }

    /// Keeps the first failure: later ones are consequences.
    pub(super) fn fail(&mut self, outcome: Ending, msg: String) {
        if self.failure.is_none() {
            self.failure = Some((outcome, msg));
        }
    }

    pub(super) fn on_event(&mut self, data: &[u8], at: Instant) {
        if self.done {
            return;
        }
        let info = classify(data);
        if info.completion_tokens.is_some() {
            self.completion_tokens = info.completion_tokens;
        }
        if info.prompt_tokens.is_some() {
            self.prompt_tokens = info.prompt_tokens;
        }
        if info.cached_tokens.is_some() {
            self.cached_tokens = info.cached_tokens;
        }
        if info.cache_n.is_some() {
            self.cache_n = info.cache_n;
        }
        if let (Some(reply), Some(content)) = (&mut self.reply, &info.content) {
            reply.push_str(content);
        }
        match info.kind {
            EventKind::Token => self.token_times.push(at),
            EventKind::Other => {}
            EventKind::Done => self.done = true,
            EventKind::Error(msg) => self.fail(Ending::ErrorEvent, msg),
            EventKind::Invalid(msg) => self.fail(Ending::InvalidEvent, msg),
        }
    }

    /// The record of the request `plan` describes (sent at `t0`, ended at `end`), and the reply
    /// text when it was kept.
    pub(super) fn into_record(
        self,
        plan: Planned<'_>,
        t0: Instant,
        point_start: Instant,
        end: Instant,
    ) -> (RequestRecord, Option<String>) {
        let Self {
            status,
            token_times,
            completion_tokens,
            prompt_tokens,
            cached_tokens,
            cache_n,
            reply,
            done: _,
            failure,
        } = self;
        let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
        let token_events = token_times.len() as u64;
        let output_tokens = completion_tokens.unwrap_or(token_events);
        let ttft_s = token_times.first().map(|&t| secs(t0, t));
        let itl_s = token_times.windows(2).map(|w| secs(w[0], w[1])).collect();
        let tpot_s = match (token_times.first(), token_times.last()) {
            (Some(&first), Some(&last)) if output_tokens >= 2 => {
                Some(secs(first, last) / (output_tokens - 1) as f64)
            }
            _ => None,
        };
        let (outcome, error) = match failure {
            Some((o, m)) => (o, Some(m)),
            None => (Ending::Ok, None),
        };
        let record = RequestRecord {
            index: plan.index,
            class: plan.class.to_string(),
            prompt_words: plan.prompt_words,
            max_tokens: plan.max_tokens,
            start_s: secs(point_start, t0),
            outcome,
            status,
            error,
            ttft_s,
            itl_s,
            tpot_s,
            e2e_s: secs(t0, end),
            token_events,
            output_tokens,
            usage_prompt_tokens: prompt_tokens,
            usage_completion_tokens: completion_tokens,
            usage_cached_tokens: cached_tokens.or(cache_n),
            session: None,
            turn: None,
        };
        (record, reply)
    }
}
