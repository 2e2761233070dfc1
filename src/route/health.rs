//! Passive health: consecutive failures eject a backend, with exponential back-off.
//!
//! A failure is a connect error, a connection that broke before the response head, or a 5xx
//! response; any other response is a success and clears the record. After `eject_after_failures`
//! consecutive failures the backend is ejected for `eject_base`; when the ejection ends it takes
//! traffic again on probation: one more failure ejects it at once for twice as long (capped at
//! `eject_max`), one success clears everything. Failures of requests already in flight while the
//! backend is ejected change nothing (they describe the same outage).
//!
//! Active checks (`GET /health`, see [`super::probe`]) use the same record: a failed check ejects,
//! a passing one clears.
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

    /// A failure at `now`; returns the ejection length when this failure ejects the backend.
    pub fn on_failure(&mut self, now: Instant, policy: &EjectPolicy) -> Option<Duration> {
        if !self.available(now) {
            return None;
        }
        self.failures += 1;
        let threshold = if self.ejections > 0 { 1 } else { policy.after };
        if self.failures < threshold {
            return None;
        }
        Some(self.eject(now, policy))
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
        assert_eq!(health.on_failure(now, &p), None, "first failure");
        assert_eq!(health.on_failure(now, &p), None, "second failure");
        assert_eq!(
            health.on_failure(now, &p),
            Some(Duration::from_secs(1)),
            "the third consecutive failure ejects for eject_base"
        );
        assert!(!health.available(Instant::now()), "ejected");
        assert_eq!(
            health.on_failure(Instant::now(), &p),
            None,
            "failures while ejected change nothing"
        );

        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!health.available(Instant::now()), "still ejected at 999 ms");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(health.available(Instant::now()), "back after 1 s");

        assert_eq!(
            health.on_failure(Instant::now(), &p),
            Some(Duration::from_secs(2)),
            "on probation one failure re-ejects, for twice as long"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(health.available(Instant::now()), "back after 2 s");
        assert_eq!(
            health.on_failure(Instant::now(), &p),
            Some(Duration::from_secs(4)),
            "then 4 s"
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        health.on_success();
        assert_eq!(health, Health::default(), "a success clears the record");
        assert_eq!(
            health.on_failure(Instant::now(), &p),
            None,
            "after a success it takes three failures again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_between_failures_resets_the_count() {
        let p = policy();
        let mut health = Health::default();
        let now = Instant::now();
        health.on_failure(now, &p);
        health.on_failure(now, &p);
        health.on_success();
        assert_eq!(health.on_failure(now, &p), None, "count restarted");
        assert!(health.available(now), "not ejected");
    }
}
