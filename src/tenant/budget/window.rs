//! The windows budgets are counted in, and how long a refused request should wait. One
//! definition for both stores: the memory store computes with it, and the Redis script computes
//! the same sliding estimate and hands the counts back so that the wait is computed here.
//!
//! A per-minute limit uses a **sliding window** estimated from two fixed minutes (as Cloudflare's
//! and Envoy's rate limiters do): the count of the current minute plus the share of the previous
//! minute's count that still lies within the last 60 s,
//! `ceil(previous * (60 s - elapsed) / 60 s) + current`. A fixed minute would let a tenant spend
//! its limit twice around a minute's boundary; the estimate costs two counters. A per-day limit
//! is the UTC day, so that "tokens per day" resets when an operator expects it to.
use std::time::Duration;

/// A minute in milliseconds.
pub(crate) const MINUTE_MS: u64 = 60_000;
/// A day in milliseconds.
pub(crate) const DAY_MS: u64 = 86_400_000;

/// A moment, in milliseconds since the Unix epoch (the replicas' clocks, kept by NTP, agree to
/// well under a window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now(pub u64);

impl Now {
    /// The wall clock.
    pub fn wall() -> Self {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    /// The minute it lies in.
    pub fn minute(self) -> u64 {
        self.0 / MINUTE_MS
    }

    /// How far into its minute it is.
    pub(crate) fn into_minute(self) -> u64 {
        self.0 % MINUTE_MS
    }

    /// The UTC day it lies in.
    pub fn day(self) -> u64 {
        self.0 / DAY_MS
    }
}

/// The sliding estimate of the last 60 s from the previous and the current minute's counts.
pub fn sliding(previous: u64, current: u64, now: Now) -> u64 {
    let remaining = MINUTE_MS - now.into_minute();
    (previous.saturating_mul(remaining)).div_ceil(MINUTE_MS) + current
}

/// How long until `need` more fits under `limit` in a sliding minute whose previous and current
/// counts are given; `None` when it never will (`need` alone is over the limit).
pub(crate) fn minute_wait(
    previous: u64,
    current: u64,
    now: Now,
    limit: u64,
    need: u64,
) -> Option<Duration> {
    if need > limit {
        return None;
    }
    let elapsed = now.into_minute();
    let room = limit - need;
    let wait = if current <= room {
        // Within this minute: the previous minute's share falls until it fits.
        let allowed = room - current;
        // ceil(previous * (MINUTE_MS - at) / MINUTE_MS) <= allowed  <=>
        // at >= MINUTE_MS - allowed * MINUTE_MS / previous (rounded so the ceil holds).
        match (allowed.saturating_mul(MINUTE_MS)).checked_div(previous) {
            Some(share) => (MINUTE_MS - share.min(MINUTE_MS))
                .saturating_sub(elapsed)
                .max(1),
            None => 1,
        }
    } else {
        // The current minute becomes the previous one, whose share then falls until it fits.
        let at = MINUTE_MS - (room.saturating_mul(MINUTE_MS) / current).min(MINUTE_MS);
        MINUTE_MS - elapsed + at
    };
    Some(Duration::from_millis(wait))
}

/// How long until the next UTC day, when a day's budget starts again.
pub(crate) fn day_wait(now: Now) -> Duration {
    Duration::from_millis(DAY_MS - now.0 % DAY_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_040_000; // a minute's start (1 700 000 040 000 / 60 000 is whole)

    #[test]
    fn the_previous_minute_counts_by_its_share_still_inside_the_last_60_s() {
        assert_eq!(T0 % MINUTE_MS, 0, "T0 starts a minute");
        assert_eq!(sliding(600, 10, Now(T0)), 610, "at the start all of it");
        assert_eq!(
            sliding(600, 10, Now(T0 + 15_000)),
            460,
            "a quarter in: three quarters"
        );
        assert_eq!(sliding(600, 10, Now(T0 + 59_999)), 11, "a share rounded up");
        assert_eq!(sliding(0, 10, Now(T0 + 30_000)), 10, "no previous minute");
    }

    #[test]
    fn a_minute_wait_is_when_the_estimate_first_leaves_room() {
        // 600 in the previous minute, none now, limit 500: 100 fits once the previous share is
        // 400, i.e. a third of the way into the minute.
        let now = Now(T0 + 5_000);
        let wait = minute_wait(600, 0, now, 500, 100).expect("fits later");
        assert_eq!(
            wait,
            Duration::from_millis(20_000 - 5_000),
            "at 20 s into the minute"
        );
        let then = Now(now.0 + wait.as_millis() as u64);
        assert!(sliding(600, 0, then) + 100 <= 500, "it fits then");
        let before = Now(then.0 - 1);
        assert!(
            sliding(600, 0, before) + 100 > 500,
            "and not a millisecond before"
        );
        // The current minute is full: wait for the next, then for its share to fall.
        let wait = minute_wait(0, 500, Now(T0 + 30_000), 500, 100).expect("fits later");
        assert_eq!(
            wait,
            Duration::from_millis(30_000 + 12_000),
            "next minute, 12 s in"
        );
        assert_eq!(minute_wait(0, 0, Now(T0), 500, 501), None, "never fits");
    }

    #[test]
    fn a_day_ends_at_utc_midnight() {
        let noon = Now(19_000 * DAY_MS + DAY_MS / 2);
        assert_eq!(noon.day(), 19_000);
        assert_eq!(day_wait(noon), Duration::from_millis(DAY_MS / 2));
    }
}
