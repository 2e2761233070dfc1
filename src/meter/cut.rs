//! One WARN line per response stream its upstream cut, rate-limited per process.
//!
//! A stream that breaks after its response head (the backend was killed, reset its connection,
//! sent a broken chunk, or went quiet past a timeout) fails where no error answer can be sent any
//! more: the client sees a broken body, and the request is counted `upstream_error` or `timeout`.
//! A failure before the head is logged where it is answered ([`super::layer`]); this is the line
//! for the other case, so an operator can tell a dying backend from a client's problem. It is
//! written once, when the failed stream ends (nothing is counted or formatted per chunk), and says
//! which backend and pool, the operation and model, how far the stream got — `phase`
//! (`before_first_token` or `mid_stream`), the `bytes` the upstream had sent (the framer's
//! position; a non-streaming answer's bytes kept, absent past [`super::whole::MAX_WHOLE_BODY`])
//! and the `tokens` (token events) — and the error.
//!
//! A backend that dies with a thousand streams open would write a thousand lines in the same
//! millisecond, so the lines are rate-limited per process with a fixed window: the first cut
//! after a window has ended opens a new one of [`WINDOW`]; at most [`LINES`] cuts are logged in a
//! window; the ones past it are counted, and the first of those schedules one summary line at the
//! window's end saying how many were not logged. A flood thus writes at most `LINES + 1` lines
//! per window, and every stream is still counted in `tokenmeter_requests_total{outcome}`. When
//! the next window's first cut comes before the summary ran (or there is no tokio runtime to run
//! it), that cut writes the summary first; either way each counted cut is reported once.
//!
//! ```
//! use std::time::Duration;
//! use tokenmeter::meter::cut::{Admit, CutLog};
//! use tokio::time::Instant;
//!
//! let log = CutLog::new(2, Duration::from_secs(10));
//! let now = Instant::now();
//! assert_eq!(log.admit(now), Admit::Log { unlogged_before: 0 });
//! assert_eq!(log.admit(now), Admit::Log { unlogged_before: 0 });
//! // The third cut of the window is counted, and schedules the summary at the window's end.
//! assert_eq!(log.admit(now), Admit::Count { summary_at: Some(now + Duration::from_secs(10)) });
//! assert_eq!(log.admit(now), Admit::Count { summary_at: None });
//! assert_eq!(log.take_unlogged(), 2);
//! ```
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::context::Outcome;

/// Lines logged per window at most (a dying backend's first streams: enough to see which
/// backend and how far its streams got).
pub(crate) const LINES: u32 = 10;

/// The rate limit's window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// How far a cut stream got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No token event yet: the backend failed during the prefill (or before the answer's body).
    BeforeFirstToken,
    /// After at least one token event.
    MidStream,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::BeforeFirstToken => "before_first_token",
            Phase::MidStream => "mid_stream",
        }
    }
}

/// One cut stream, as its line reports it.
pub struct Cut<'a> {
    pub backend: &'a str,
    pub pool: &'a str,
    /// The `gen_ai_operation_name` label.
    pub operation: &'static str,
    /// The bounded model label.
    pub model: &'a str,
    pub phase: Phase,
    /// Bytes of the response body the upstream sent before the cut, where the meter knows them.
    pub bytes: Option<u64>,
    /// Token events seen before the cut.
    pub tokens: u64,
    /// `upstream_error` or `timeout`.
    pub outcome: Outcome,
    /// From the request's head to the cut.
    pub elapsed: Duration,
    pub error: &'a dyn fmt::Display,
}

impl Cut<'_> {
    fn log(&self) {
        let Self {
            backend,
            pool,
            operation,
            model,
            phase,
            bytes,
            tokens,
            outcome,
            elapsed,
            error,
        } = self;
        tracing::warn!(
            backend,
            pool,
            operation,
            model,
            phase = phase.as_str(),
            bytes,
            tokens,
            outcome = outcome.as_str(),
            elapsed_ms = elapsed.as_millis() as u64,
            error = %error,
            "stream cut by its upstream"
        );
    }
}

/// What to do with one cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Log it; first write the summary of the `unlogged_before` cuts of the last window that no
    /// summary has reported yet.
    Log { unlogged_before: u64 },
    /// Count it; `summary_at` is when to write the summary, for the first cut counted since the
    /// last summary (whoever admitted it schedules it).
    Count { summary_at: Option<Instant> },
}

/// The rate limit over the lines of one process (see the module docs).
#[derive(Debug)]
pub struct CutLog {
    lines: u32,
    window: Duration,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    /// When the current window began; `None` before the first cut.
    started: Option<Instant>,
    logged: u32,
    /// Cuts counted, not logged, since the last summary.
    unlogged: u64,
    /// A summary is scheduled for the counted cuts.
    summary_due: bool,
}

/// The process's limit, which every metered body uses.
static GLOBAL: CutLog = CutLog::new(LINES, WINDOW);

impl CutLog {
    /// At most `lines` lines in each `window`.
    pub const fn new(lines: u32, window: Duration) -> Self {
        Self {
            lines,
            window,
            state: Mutex::new(Window {
                started: None,
                logged: 0,
                unlogged: 0,
                summary_due: false,
            }),
        }
    }

    /// The process's limit: [`LINES`] per [`WINDOW`].
    pub fn global() -> &'static CutLog {
        &GLOBAL
    }

    /// Logs `cut` or counts it (see the module docs). Called once per cut stream, at its end.
    pub fn cut(&'static self, cut: &Cut<'_>) {
        match self.admit(Instant::now()) {
            Admit::Log { unlogged_before } => {
                self.summarize(unlogged_before);
                cut.log();
            }
            Admit::Count {
                summary_at: Some(at),
            } => {
                // On the runtime of the connection task that ended the stream; without one, the
                // next window's first cut writes the summary.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        tokio::time::sleep_until(at).await;
                        self.summarize(self.take_unlogged());
                    });
                }
            }
            Admit::Count { summary_at: None } => {}
        }
    }

    /// Decides one cut at `now`: the whole rate limit, without logging.
    pub fn admit(&self, now: Instant) -> Admit {
        let mut window = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let ended = window.started.map_or(true, |started| {
            now.saturating_duration_since(started) >= self.window
        });
        let mut unlogged_before = 0;
        if ended {
            // The last window's count goes with this line, unless its summary ran already.
            window.started = Some(now);
            window.logged = 0;
            window.summary_due = false;
            unlogged_before = std::mem::take(&mut window.unlogged);
        }
        if window.logged < self.lines {
            window.logged += 1;
            return Admit::Log { unlogged_before };
        }
        window.unlogged += 1;
        if window.summary_due {
            return Admit::Count { summary_at: None };
        }
        window.summary_due = true;
        let started = window.started.unwrap_or(now);
        Admit::Count {
            summary_at: Some(started + self.window),
        }
    }

    /// The cuts counted since the last summary (now reported: the count starts again).
    pub fn take_unlogged(&self) -> u64 {
        let mut window = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        window.summary_due = false;
        std::mem::take(&mut window.unlogged)
    }

    fn summarize(&self, unlogged: u64) {
        if unlogged == 0 {
            return;
        }
        tracing::warn!(
            streams = unlogged,
            "{unlogged} more streams cut by their upstream were not logged (at most {} lines every {:?}; tokenmeter_requests_total counts every one)",
            self.lines,
            self.window
        );
    }
}

#[cfg(test)]
pub(super) mod tests;
