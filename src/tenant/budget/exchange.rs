//! What the budgets and a store say to each other: an admission's question ([`Ask`]) and its
//! answer ([`Verdict`], with what was [`Counted`]), a finished request's [`Settlement`] (and the
//! [`DayReport`] it makes once charged), and why a store did not answer ([`StoreError`]).
//!
//! Both stores (`memory.rs`, `redis.rs`) speak it and the budgets (`mod.rs`) choose between
//! them, so it is in a file of its own: the budgets use the stores, and the stores need nothing
//! of the budgets.
use std::sync::Arc;
use std::time::Duration;

use super::limit::Limit;
use super::series::BudgetSeries;
use super::window::{self, Now};
use crate::config::Limits;

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

/// One admission's question to a store.
#[derive(Debug)]
pub struct Ask<'a> {
    /// The tenant's name (or `anonymous`).
    pub tenant: &'a str,
    pub limits: &'a Limits,
    /// Tokens to charge now.
    pub reserve: u64,
    /// The request's id (its member in the store's set of streams).
    pub id: u64,
    pub now: Now,
}

/// A store's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted and charged; what was counted before it.
    Admitted(Counted),
    /// Refused by the limit; what was counted.
    Over(Limit, Counted),
}

/// Where a settlement reports the tenant's day once it is charged: the tenant's label and its
/// `tokens_per_day` limit (the used-ratio gauge of that limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayReport {
    pub label: Arc<str>,
    pub limit: u64,
}

impl DayReport {
    /// Sets the gauge from the tenant's tokens of the day after the settlement.
    pub fn report(&self, series: &BudgetSeries, day_tokens: u64) {
        series.used(
            &self.label,
            Limit::TokensPerDay,
            day_tokens as f64 / self.limit as f64,
        );
    }
}

/// A finished request's settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub tenant: Arc<str>,
    /// The minute and day its tokens were charged to.
    pub minute: u64,
    pub day: u64,
    /// Tokens it used and reserved, as its limits count them.
    pub used: u64,
    pub reserved: u64,
    /// The store admitted it (see [`BudgetHold::in_store`](crate::tenant::budget::record::BudgetHold::in_store)).
    pub in_store: bool,
    /// A request refused because its admission went unanswered: its reservation and its
    /// request are taken back should the admission reach the store after all.
    pub withdrawn: bool,
    pub id: u64,
    /// Where to report the tenant's day once settled (`None`: its revision has no day limit for
    /// it, or nothing is reported, as for a withdrawal).
    pub report: Option<DayReport>,
}

impl Settlement {
    /// What it adds to its windows when the store holds its reservation.
    pub fn difference(&self) -> i64 {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        clamp(self.used) - clamp(self.reserved)
    }
}

/// Why the store did not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the budget store did not answer within tenants.budgets.store_timeout")]
    Timeout,
    #[error("the budget store is unavailable: {0}")]
    Unavailable(String),
    #[error("the budget store answered unexpectedly: {0}")]
    Reply(String),
    /// The TLS handshake with the store failed (a certificate refused, either way).
    #[error("the TLS handshake with the budget store failed: {0}")]
    Tls(String),
    /// The store cannot be opened (at start).
    #[error("tenants.budgets.store: {0}")]
    Config(String),
    /// A file of `tenants.budgets.store_tls` cannot be used (at start).
    #[error(transparent)]
    File(#[from] crate::config::ConfigError),
}

impl From<crate::store::OpenError> for StoreError {
    fn from(err: crate::store::OpenError) -> Self {
        match err {
            crate::store::OpenError::Config(message) => StoreError::Config(message),
            crate::store::OpenError::File(err) => StoreError::File(err),
        }
    }
}

impl StoreError {
    /// The `error` label.
    pub fn as_str(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Unavailable(_) | StoreError::Config(_) | StoreError::File(_) => {
                "unavailable"
            }
            StoreError::Reply(_) => "reply",
            StoreError::Tls(_) => "tls",
        }
    }

    pub(super) fn from_redis(err: &::redis::RedisError) -> Self {
        if err.is_timeout() {
            StoreError::Timeout
        } else if let Some(detail) = tls_failure(err) {
            StoreError::Tls(detail)
        } else if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_unrecoverable_error()
        {
            // The kind, not the message: a message may quote the URL.
            StoreError::Unavailable(format!("{:?}", err.kind()))
        } else {
            StoreError::Reply(format!("{:?}", err.kind()))
        }
    }
}

/// What a failed TLS handshake says, if `err` is one. The client reports rustls's own error
/// (`invalid peer certificate: UnknownIssuer`: the CA does not match); Redis refusing the client
/// (no certificate, or one its CA did not sign) arrives as rustls's alert (`received fatal
/// alert: ...`). Both come wrapped as I/O errors, so they are told apart by their text: rustls's
/// messages, never the URL.
fn tls_failure(err: &::redis::RedisError) -> Option<String> {
    let text = err.to_string();
    [
        "invalid peer certificate",
        "received fatal alert",
        "peer is incompatible",
    ]
    .iter()
    .find_map(|needle| text.find(needle).map(|at| text[at..].to_owned()))
}
