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
//! A 5xx to a request whose body the proxy found not to be valid JSON is not a failure at all (the
//! router does not report it). Any other response is a success and clears the record. After
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
pub struct Health {
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
    pub fn on_success(&mut self) {
        *self = Health::default();
    }

    /// A failure at `now` and what it did.
    pub fn on_failure(&mut self, now: Instant, policy: &EjectPolicy, fault: Fault) -> Verdict {
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
mod tests {
    use super::*;

    fn policy() -> EjectPolicy {
        EjectPolicy {
            after: 3,
            base: Duration::from_secs(1),
            max: Duration::from_secs(5),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = policy();
        let lengths: Vec<u64> = (0..5).map(|n| p.backoff(n).as_secs()).collect();
        assert_eq!(lengths, vec![1, 2, 4, 5, 5], "1s doubling, capped at 5s");
        assert_eq!(p.backoff(200), p.max, "no overflow for huge counts");
    }

    #[tokio::test(start_paused = true)]
    async fn consecutive_failures_eject_with_exponential_backoff() {
        let p = policy();
        let mut health = Health::default();
        let now = Instant::now();
        assert_eq!(
            health.on_failure(now, &p, Fault::Connection),
            Verdict::Counted,
            "first failure"
        );
        assert_eq!(
            health.on_failure(now, &p, Fault::Connection),
            Verdict::Counted,
            "second failure"
        );
        assert_eq!(
            health.on_failure(now, &p, Fault::Connection),
            Verdict::Ejected(Duration::from_secs(1)),
            "the third consecutive failure ejects for eject_base"
        );
        assert!(!health.available(Instant::now()), "ejected");
        assert_eq!(
            health.on_failure(Instant::now(), &p, Fault::Connection),
            Verdict::Counted,
            "failures while ejected change nothing"
        );

        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!health.available(Instant::now()), "still ejected at 999 ms");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(health.available(Instant::now()), "back after 1 s");

        assert_eq!(
            health.on_failure(Instant::now(), &p, Fault::Connection),
            Verdict::Ejected(Duration::from_secs(2)),
            "on probation one failure re-ejects, for twice as long"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(health.available(Instant::now()), "back after 2 s");
        assert_eq!(
            health.on_failure(Instant::now(), &p, Fault::Connection),
            Verdict::Ejected(Duration::from_secs(4)),
            "then 4 s"
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        health.on_success();
        assert_eq!(health, Health::default(), "a success clears the record");
        assert_eq!(
            health.on_failure(Instant::now(), &p, Fault::Connection),
            Verdict::Counted,
            "after a success it takes three failures again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_between_failures_resets_the_count() {
        let p = policy();
        let mut health = Health::default();
        let now = Instant::now();
        health.on_failure(now, &p, Fault::Connection);
        health.on_failure(now, &p, Fault::Connection);
        health.on_success();
        assert_eq!(
            health.on_failure(now, &p, Fault::Connection),
            Verdict::Counted,
            "count restarted"
        );
        assert!(health.available(now), "not ejected");
    }

    #[tokio::test(start_paused = true)]
    async fn answer_failures_ask_for_a_check_instead_of_ejecting() {
        let p = EjectPolicy {
            after: 3,
            base: Duration::from_secs(1),
            max: Duration::from_secs(5),
        };
        let mut health = Health::default();
        let now = Instant::now();
        for i in 0..2 {
            assert_eq!(
                health.on_failure(now, &p, Fault::Answer),
                Verdict::Counted,
                "answer failure {i}"
            );
        }
        assert_eq!(
            health.on_failure(now, &p, Fault::Answer),
            Verdict::Confirm,
            "the third asks for a check"
        );
        assert!(health.available(now), "not ejected by answers alone");
        for i in 0..2 {
            assert_eq!(
                health.on_failure(now, &p, Fault::Answer),
                Verdict::Counted,
                "the run restarted after the check was asked for ({i})"
            );
        }
        assert_eq!(
            health.on_failure(now, &p, Fault::Connection),
            Verdict::Ejected(Duration::from_secs(1)),
            "a connection failure completes a mixed run and ejects"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            health.on_failure(Instant::now(), &p, Fault::Answer),
            Verdict::Confirm,
            "on probation one answer failure asks for a check at once"
        );
        assert!(health.available(Instant::now()), "still in rotation");
        assert_eq!(
            health.eject(Instant::now(), &p),
            Duration::from_secs(2),
            "a failed check ejects, backed off as any ejection"
        );
    }
}
