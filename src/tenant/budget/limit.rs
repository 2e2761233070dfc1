//! The limits a request can be refused by, the `limit` label: what the series label by
//! (`series.rs`) and what a store's counts are held against (`exchange.rs`); it uses neither.
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
