//! Passive health: consecutive failures eject a backend, with exponential back-off.
//!
//! Health must measure the backend, not its clients: no client may be able to drive a healthy
//! backend out of rotation. So failures come in two kinds ([`Fault`]):
//! - **connection failures** (connect refused or timed out, a connection that broke before the
//!   response head): nothing a request says causes them, so they count outright;
//! - **answer failures** (a 5xx response, no response head within `response_timeout`): a
//!   malformed or hostile request can cause them (llama.cpp answers 500 to `"tools": 5`, a long
//!   non-streaming generation can outlast the head timeout), so a run of them only makes the
//!   backend a *suspect* ([`Verdict::Confirm`]): the router then asks the backend's health
//!   endpoint, and ejects only when that check fails too.
//!
//! A 5xx to a request whose body the proxy found not to be valid JSON, and a 501 Not Implemented
//! (the backend does not do what was asked), are not failures at all (the router does not report
//! them; `context::answer_failed` is the one rule, the meter's too). Any other response is a
//! success and clears the record. After
//! `eject_after_failures` consecutive failures the backend is ejected (or, for answers, checked)
//! for `eject_base`; when the ejection ends it takes traffic again on probation: one more failure
//! ejects it (or has it checked) at once, for twice as long (capped at `eject_max`), one success
//! clears everything. Failures of requests already in flight while the backend is ejected change
//! nothing (they describe the same outage).
//!
//! Active checks (`GET health_path`, see [`super::probe`]) use the same record: a failed check
//! ejects, a passing one clears.
use std::time::Duration;

use tokio::time::Instant;

use crate::config::RoutingConfig;

/// The ejection knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EjectPolicy {
    pub after: u32,
    pub base: Duration,
    pub max: Duration,
}

impl EjectPolicy {
    pub fn from_config(config: &RoutingConfig) -> Self {
        Self {
            after: config.eject_after_failures.max(1),
            base: config.eject_base,
            max: config.eject_max,
        }
    }

    /// Length of the `n`-th ejection in a row (0-based): `base * 2^n`, at most `max`.
    pub fn backoff(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// What went wrong with one request on a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Connect refused or timed out, or the connection broke before the response head.
    Connection,
    /// A 5xx answer, or no response head in time: possibly the request's own doing.
    Answer,
}

/// What a failure did to the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Counted; the backend stays.
    Counted,
    /// The backend is ejected for this long.
    Ejected(Duration),
    /// A run of answer failures reached the threshold: check the backend's health endpoint and
    /// eject it only if that fails ([`Health::eject`]).
    Confirm,
}

/// One backend's health record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Health {
    failures: u32,
    /// Ejections since the last success.
    ejections: u32,
    ejected_until: Option<Instant>,
}

impl Health {
    /// Whether the backend takes traffic at `now`.
    pub fn available(&self, now: Instant) -> bool {
        self.ejected_until.map_or(true, |until| now >= until)
    }

    /// A success: the record is cleared (ejection included).
    pub(crate) fn on_success(&mut self) {
        *self = Health::default();
    }

    /// A failure at `now` and what it did.
    pub(crate) fn on_failure(
        &mut self,
        now: Instant,
        policy: &EjectPolicy,
        fault: Fault,
    ) -> Verdict {
        if !self.available(now) {
            return Verdict::Counted;
        }
        self.failures += 1;
        let threshold = if self.ejections > 0 { 1 } else { policy.after };
        if self.failures < threshold {
            return Verdict::Counted;
        }
        match fault {
            Fault::Connection => Verdict::Ejected(self.eject(now, policy)),
            Fault::Answer => {
                // The check decides; until it does, the run starts again (so a client repeating
                // a bad request asks for one check per `after` requests, not one per request).
                self.failures = 0;
                Verdict::Confirm
            }
        }
    }

    /// Ejects now (a failed active check); returns the length.
    pub fn eject(&mut self, now: Instant, policy: &EjectPolicy) -> Duration {
        let length = policy.backoff(self.ejections);
        self.ejections = self.ejections.saturating_add(1);
        self.failures = 0;
        self.ejected_until = Some(now + length);
        length
    }
}

#[cfg(test)]
mod tests;
