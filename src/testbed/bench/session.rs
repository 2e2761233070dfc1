//! Multi-turn session workloads: conversations that resend their history, to measure what
//! prefix-cache-aware routing buys.
//!
//! Sessions arrive open loop at a rate (Poisson by default) until a session count or a duration;
//! each runs its turns one after the other (turn `k + 1` waits for turn `k`'s reply, then a think
//! time), so a session is a closed loop inside an open one. Turn 1 sends `[system, user1]`; turn
//! `k + 1` sends turn `k`'s messages, then an assistant message holding exactly the text turn `k`
//! received, then a new user message: the prompt grows and every turn's prompt starts with the
//! previous turn's prompt and reply. The completions endpoint gets the same texts joined by
//! newlines. What the texts are and how lengths and think times are drawn is
//! [`SessionWorkload`]'s business; a failed turn ends its session (there is no reply to send back).
//!
//! Every session started runs all its turns, also past a `--duration`: cutting sessions short
//! would leave later turns under-represented in the per-turn rows.
//!
//! - [`conversation`]: the message list and the request each turn sends;
//! - `run`: the driver, [`run_sessions`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), tokenmeter::testbed::bench::BenchError> {
//! use tokenmeter::testbed::bench::{run_sessions, SessionSpec, Stop};
//! let mut spec = SessionSpec::new("http://127.0.0.1:8000");
//! spec.rate = 0.5;
//! spec.stop = Stop::Sessions(20);
//! let report = run_sessions(&spec).await?;
//! print!("{}", report.render_table());
//! # Ok(()) }
//! ```
use std::fmt::Write as _;
use std::time::Duration;

use http::header::HeaderName;
use hyper::Uri;

use super::report::{ms3, tool, truncate, BenchReport, PointReport, SCHEMA_VERSION};
use super::session_stats::{SessionResults, TurnStats};
use super::spec::{join_url, validate_arrivals, validate_bounds, Counted};
use super::workload::session::SessionWorkload;
use super::{Arrival, BenchError, Endpoint, LoadMode, Slo, Stop};

pub mod conversation;
mod run;

pub use conversation::Conversation;
pub(crate) use run::{drive, CLASS};
pub use run::{run_sessions, run_sessions_with};

/// Everything a session run needs.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// Base URL of the server, e.g. `http://127.0.0.1:8000` (plain HTTP).
    pub url: String,
    pub endpoint: Endpoint,
    /// The model to request; `None` asks `GET /v1/models` (first entry, else `"default"`).
    pub model: Option<String>,
    /// Sessions per second (`inf`: all at once, which needs a session count).
    pub rate: f64,
    /// How the gaps between session arrivals are drawn.
    pub arrival: Arrival,
    /// [`Stop::Sessions`] or [`Stop::Duration`] (sessions start until then, and finish).
    pub stop: Stop,
    pub workload: SessionWorkload,
    /// A header that carries the session id on every turn (for header-keyed affinity).
    pub session_header: Option<String>,
    pub slo: Slo,
    /// Seeds the arrivals, the system prompts and every session's draws.
    pub seed: u64,
    /// Upper bound on one request, head to end of stream; past it the request is a `timeout`.
    pub request_timeout: Duration,
}

impl SessionSpec {
    /// A spec with the defaults of the command line: chat, 1 session/s (Poisson), 20 sessions,
    /// [`SessionWorkload::default`], no session header, SLO 800 ms / 35 ms, seed 0, 120 s
    /// request timeout.
    pub fn new(url: impl Into<String>) -> Self {
        SessionSpec {
            url: url.into(),
            endpoint: Endpoint::Chat,
            model: None,
            rate: 1.0,
            arrival: Arrival::Poisson,
            stop: Stop::Sessions(20),
            workload: SessionWorkload::default(),
            session_header: None,
            slo: Slo::default(),
            seed: 0,
            request_timeout: Duration::from_secs(120),
        }
    }

    /// The load mode of the run, as reports name it.
    pub fn mode(&self) -> LoadMode {
        LoadMode::Sessions {
            rate: self.rate,
            arrival: self.arrival,
        }
    }

    /// Checks what the types cannot: a positive rate, a bounded stop, a usable URL and header.
    pub fn validate(&self) -> Result<(), BenchError> {
        validate_arrivals(self.rate, self.arrival, self.stop, "a session count")?;
        validate_bounds(self.stop, self.request_timeout, Counted::Sessions)?;
        self.workload.validate()?;
        self.header_name()?;
        self.endpoint_uri().map(|_| ())
    }

    /// The full URI of the generation endpoint.
    pub fn endpoint_uri(&self) -> Result<Uri, BenchError> {
        join_url(&self.url, self.endpoint.path())
    }

    /// The session header's name, checked.
    pub(crate) fn header_name(&self) -> Result<Option<HeaderName>, BenchError> {
        self.session_header
            .as_deref()
            .map(|name| {
                HeaderName::try_from(name).map_err(|e| {
                    BenchError::Spec(format!("session header {name:?} is not a header name: {e}"))
                })
            })
            .transpose()
    }
}

/// The results of a session run: the usual summary of every request, and the session rows.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionReport {
    /// Mode `sessions`; `classes` holds the `"all"` row only; `requests` every turn's record,
    /// ordered by session, then turn.
    pub point: PointReport,
    pub sessions: SessionResults,
}

impl SessionReport {
    /// The usual table, then one row per turn (TTFT, mean prompt tokens, cached ratio) and a
    /// line with the session counts and the overall cached ratio.
    pub fn render_table(&self) -> String {
        let mut out = self.point.render_table();
        let _ = writeln!(
            out,
            "{:<10} {:>6} {:>5} | {:>20} | {:>10} | {:>6}",
            "turn", "n", "err", "TTFT p50/p90/p99 ms", "prompt tok", "cached"
        );
        for row in &self.sessions.by_turn {
            let TurnStats {
                requests,
                errors,
                ttft,
                prompt_tokens,
                cached_ratio,
                ..
            } = row;
            let prompt = if prompt_tokens.count == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", prompt_tokens.mean)
            };
            let _ = writeln!(
                out,
                "{:<10} {:>6} {:>5} | {:>20} | {:>10} | {:>6}",
                truncate(&row.label(), 10),
                requests,
                errors,
                ms3(ttft),
                prompt,
                ratio(*cached_ratio)
            );
        }
        let s = &self.sessions;
        let _ = writeln!(
            out,
            "sessions: {} started, {} completed; cached prompt tokens: {} ({} of {})",
            s.started,
            s.completed,
            ratio(s.cached_ratio),
            s.cache.cached_tokens,
            s.cache.prompt_tokens
        );
        out
    }

    /// The run's one point and its `sessions` object as a JSON report holds them (this run's
    /// and a mixed run's): per-request records only with `keep_records`.
    pub(crate) fn into_report_parts(self, keep_records: bool) -> (PointReport, SessionResults) {
        let SessionReport {
            mut point,
            sessions,
        } = self;
        if !keep_records {
            point.requests.clear();
        }
        (point, sessions)
    }

    /// The JSON report (`docs/bench-results.md`): the usual fields with the run as its one
    /// point, and the `sessions` object. Per-request records only with `keep_records`.
    pub fn into_bench_report(self, spec: &SessionSpec, keep_records: bool) -> BenchReport {
        let (point, sessions) = self.into_report_parts(keep_records);
        BenchReport {
            schema_version: SCHEMA_VERSION,
            tool: tool(),
            url: spec.url.clone(),
            endpoint: spec.endpoint,
            workload: spec.workload.to_string(),
            slo: spec.slo,
            stop: spec.stop,
            seed: spec.seed,
            points: vec![point],
            sessions: Some(sessions),
        }
    }
}

/// A ratio with two decimals, `-` when there is none.
fn ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |r| format!("{r:.2}"))
}

#[cfg(test)]
mod tests;
