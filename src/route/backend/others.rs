//! The load the fleet's other gateway replicas put on a backend, as the store last said
//! ([`crate::route::fleet`]): their streams in flight and their prompt tokens queued, summed,
//! and until when a long prefill one of them placed there stalls its streams. The proxy adds it
//! to its own in everything that weighs a backend's load, so that every replica predicts from
//! the same load and keeps its chats off a replica another just gave a document.
use std::sync::atomic::{AtomicU64, Ordering};

/// The others' figures and when they were read, and until when their stall mark holds, in
/// nanoseconds after the backend's `born`.
#[derive(Debug, Default)]
pub(super) struct Others {
    streams: AtomicU64,
    queued_tokens: AtomicU64,
    at: AtomicU64,
    stalls_until: AtomicU64,
    /// Their models' prefill cost (seconds per thousand prompt tokens) summed weighted by each
    /// one's precision, and the weights' sum, as `f64` bits.
    prefill_cost: AtomicU64,
    prefill_weight: AtomicU64,
}

impl Others {
    /// Takes the others' latest figures, read at `at`, their stall mark ending at
    /// `stalls_until` (0: none).
    pub fn set(&self, streams: u64, queued_tokens: u64, at: u64, stalls_until: u64) {
        self.streams.store(streams, Ordering::Relaxed);
        self.queued_tokens.store(queued_tokens, Ordering::Relaxed);
        self.at.store(at, Ordering::Relaxed);
        self.stalls_until.store(stalls_until, Ordering::Relaxed);
    }

    /// Takes the others' prefill cost: `weighted` (each one's cost times its weight, summed) and
    /// `weight`.
    pub fn set_prefill_cost(&self, weighted: f64, weight: f64) {
        self.prefill_cost
            .store(weighted.to_bits(), Ordering::Relaxed);
        self.prefill_weight
            .store(weight.to_bits(), Ordering::Relaxed);
    }

    /// The others' prefill cost, weighted and summed, and the weights' sum.
    pub fn prefill_cost(&self) -> (f64, f64) {
        (
            f64::from_bits(self.prefill_cost.load(Ordering::Relaxed)),
            f64::from_bits(self.prefill_weight.load(Ordering::Relaxed)),
        )
    }

    /// Until when a long prefill another replica placed stalls the backend's streams (0: none).
    pub fn stalls_until(&self) -> u64 {
        self.stalls_until.load(Ordering::Relaxed)
    }

    pub fn streams(&self) -> u64 {
        self.streams.load(Ordering::Relaxed)
    }

    /// The backend's pool is in a fleet: the others' figures were set at least once.
    pub fn joined(&self) -> bool {
        self.at.load(Ordering::Relaxed) != 0
    }

    /// Their queued prompt tokens as read, and when (0: never).
    pub fn queued(&self) -> (u64, u64) {
        (
            self.queued_tokens.load(Ordering::Relaxed),
            self.at.load(Ordering::Relaxed),
        )
    }
}
