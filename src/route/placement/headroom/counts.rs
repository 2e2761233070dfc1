//! What a pool was offered and what finished, counted on the request path: relaxed atomics that
//! the headroom's tick reads as totals and differences between ticks.
use std::sync::atomic::{AtomicU64, Ordering};

/// What the pool was offered and what finished, counted on the request path.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub offered: AtomicU64,
    pub offered_tokens: AtomicU64,
    /// The sum of the squares of the uncached prompt tokens offered: the mix's spread
    /// ([`super::capacity`]'s queue, where chats wait behind documents). It wraps after some 10¹⁹
    /// (a year of a hundred 100 000-token prompts a second), and a tick reads only its growth.
    pub offered_token_squares: AtomicU64,
    pub finished: AtomicU64,
    pub output_tokens: AtomicU64,
    /// Requests judged against their SLO targets (those that finished whole, and those shed),
    /// and of them, those that missed.
    pub judged: AtomicU64,
    pub missed: AtomicU64,
}

/// The counts at one tick, as numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Totals {
    pub offered: u64,
    pub offered_tokens: u64,
    pub offered_token_squares: u64,
    pub finished: u64,
    pub output_tokens: u64,
    pub judged: u64,
    pub missed: u64,
}

impl Counts {
    pub fn totals(&self) -> Totals {
        Totals {
            offered: self.offered.load(Ordering::Relaxed),
            offered_tokens: self.offered_tokens.load(Ordering::Relaxed),
            offered_token_squares: self.offered_token_squares.load(Ordering::Relaxed),
            finished: self.finished.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            judged: self.judged.load(Ordering::Relaxed),
            missed: self.missed.load(Ordering::Relaxed),
        }
    }
}
