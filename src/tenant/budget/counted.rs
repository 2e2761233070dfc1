//! The limits a request can be refused by, and what a store had counted for a tenant: which
//! limit a reservation would pass, and how long until it would fit.
use std::time::Duration;

use super::window::{self, Now};
use crate::config::Limits;

/// A limit a request can be refused by: the `limit` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    TokensPerMinute,
    TokensPerDay,
    RequestsPerMinute,
    ConcurrentStreams,
}

impl Limit {
    pub const ALL: [Limit; 4] = [
        Limit::TokensPerMinute,
        Limit::TokensPerDay,
        Limit::RequestsPerMinute,
        Limit::ConcurrentStreams,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Limit::TokensPerMinute => "tokens_per_minute",
            Limit::TokensPerDay => "tokens_per_day",
            Limit::RequestsPerMinute => "requests_per_minute",
            Limit::ConcurrentStreams => "concurrent_streams",
        }
    }

    pub(super) fn of(self, limits: &Limits) -> Option<u64> {
        match self {
            Limit::TokensPerMinute => limits.tokens_per_minute,
            Limit::TokensPerDay => limits.tokens_per_day,
            Limit::RequestsPerMinute => limits.requests_per_minute,
            Limit::ConcurrentStreams => limits.concurrent_streams,
        }
    }
}

/// What a store had counted for a tenant before a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Tokens of the previous and the current minute.
    pub tokens: [u64; 2],
    /// Requests of the previous and the current minute.
    pub requests: [u64; 2],
    /// Tokens of the UTC day.
    pub day_tokens: u64,
    /// Streams in flight.
    pub streams: u64,
}

impl Counted {
    /// What the tenant has used of `limit` at `now`.
    pub fn used(&self, limit: Limit, now: Now) -> u64 {
        match limit {
            Limit::TokensPerMinute => window::sliding(self.tokens[0], self.tokens[1], now),
            Limit::TokensPerDay => self.day_tokens,
            Limit::RequestsPerMinute => window::sliding(self.requests[0], self.requests[1], now),
            Limit::ConcurrentStreams => self.streams,
        }
    }

    /// What a request takes of `limit`: its reservation of a token limit, or one.
    pub(super) fn need(limit: Limit, reserve: u64) -> u64 {
        match limit {
            Limit::TokensPerMinute | Limit::TokensPerDay => reserve,
            Limit::RequestsPerMinute | Limit::ConcurrentStreams => 1,
        }
    }

    /// The first limit (streams, requests, tokens per minute, per day: the order `admit.lua`
    /// checks in) one more request reserving `reserve` tokens would pass.
    pub fn over(&self, limits: &Limits, reserve: u64, now: Now) -> Option<Limit> {
        [
            Limit::ConcurrentStreams,
            Limit::RequestsPerMinute,
            Limit::TokensPerMinute,
            Limit::TokensPerDay,
        ]
        .into_iter()
        .find(|&limit| {
            limit.of(limits).is_some_and(|cap| {
                self.used(limit, now)
                    .saturating_add(Self::need(limit, reserve))
                    > cap
            })
        })
    }

    /// How long a request refused by `limit` should wait; `None` when waiting cannot help (it
    /// alone is over the limit).
    pub fn wait(&self, limit: Limit, limits: &Limits, reserve: u64, now: Now) -> Option<Duration> {
        let cap = limit.of(limits)?;
        let need = Self::need(limit, reserve);
        match limit {
            Limit::TokensPerMinute => {
                window::minute_wait(self.tokens[0], self.tokens[1], now, cap, need)
            }
            Limit::RequestsPerMinute => {
                window::minute_wait(self.requests[0], self.requests[1], now, cap, need)
            }
            Limit::TokensPerDay => (need <= cap).then(|| window::day_wait(now)),
            // A slot frees when a stream ends, which nothing here can foresee.
            Limit::ConcurrentStreams => Some(Duration::from_secs(1)),
        }
    }
}
