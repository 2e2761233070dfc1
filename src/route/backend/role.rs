//! A backend's role in its pool's placement: whether it is one of the pool's prefill-heavy
//! replicas now, and the stall a stream started on it is expected to meet there.
//!
//! The pool's designation ([`crate::route::placement::designate`]) writes both every few hundred
//! milliseconds; every placement reads them, once per candidate, without a lock.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Role {
    prefill_heavy: AtomicBool,
    /// In nanoseconds.
    expected_stall: AtomicU64,
}

impl Role {
    /// Whether the backend takes the pool's long prompts now.
    pub fn prefill_heavy(&self) -> bool {
        self.prefill_heavy.load(Ordering::Relaxed)
    }

    /// The gap a stream started on it now is expected to meet from the long prompts it will
    /// take while the stream decodes; zero when it is not expected to take any.
    pub fn expected_stall(&self) -> Duration {
        Duration::from_nanos(self.expected_stall.load(Ordering::Relaxed))
    }

    /// Sets both; returns whether `prefill_heavy` changed.
    pub(crate) fn set(&self, prefill_heavy: bool, expected_stall: Duration) -> bool {
        let nanos = u64::try_from(expected_stall.as_nanos()).unwrap_or(u64::MAX);
        self.expected_stall.store(nanos, Ordering::Relaxed);
        self.prefill_heavy.swap(prefill_heavy, Ordering::Relaxed) != prefill_heavy
    }
}
