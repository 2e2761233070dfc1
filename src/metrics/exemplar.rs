//! Exemplars: the trace of a request that fell in a latency bucket, so that a dashboard can jump
//! from a slow bucket to a trace of it.
//!
//! The trace id is the request's (`crate::trace::record`): the client's W3C `traceparent`, or
//! the proxy's own trace when it sampled the request. Each classic bucket of a latency series keeps the most
//! recent exemplar in an [`ExemplarSlot`]: a sequence lock over four atomics, so recording takes no
//! lock and no allocation, and a writer that finds another one mid-write skips its exemplar (one
//! recent exemplar per bucket is all a scraper reads). The protobuf exposition carries them on
//! the buckets (`Bucket.exemplar`), which is where Prometheus reads a histogram's exemplars.
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A W3C trace id (16 bytes, never all zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

impl TraceId {
    /// The id as 32 lowercase hex digits (the `trace_id` exemplar label).
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// One exemplar as a scrape reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exemplar {
    pub trace: TraceId,
    pub value: f64,
    /// When it was recorded, milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

/// The most recent exemplar of one bucket. `seq` is even when the slot is stable (0: empty) and
/// odd while a writer fills it.
#[derive(Debug, Default)]
pub(crate) struct ExemplarSlot {
    seq: AtomicU64,
    trace_high: AtomicU64,
    trace_low: AtomicU64,
    value: AtomicU64,
    unix_ms: AtomicU64,
}

impl ExemplarSlot {
    /// Keeps `exemplar` unless another writer holds the slot (then this one is dropped).
    pub fn store(&self, exemplar: Exemplar) {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq % 2 == 1
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // The odd sequence is visible before any field changes.
        fence(Ordering::Release);
        let (high, low) = exemplar.trace.0.split_at(8);
        let word = |half: &[u8]| u64::from_be_bytes(half.try_into().unwrap_or([0; 8]));
        self.trace_high.store(word(high), Ordering::Relaxed);
        self.trace_low.store(word(low), Ordering::Relaxed);
        self.value
            .store(exemplar.value.to_bits(), Ordering::Relaxed);
        self.unix_ms.store(exemplar.unix_ms, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }

    /// The stored exemplar, if any; `None` also when writers kept it busy for three reads.
    pub fn load(&self) -> Option<Exemplar> {
        for _ in 0..3 {
            let before = self.seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let high = self.trace_high.load(Ordering::Relaxed);
            let low = self.trace_low.load(Ordering::Relaxed);
            let value = self.value.load(Ordering::Relaxed);
            let unix_ms = self.unix_ms.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                let mut trace = [0u8; 16];
                trace[..8].copy_from_slice(&high.to_be_bytes());
                trace[8..].copy_from_slice(&low.to_be_bytes());
                return Some(Exemplar {
                    trace: TraceId(trace),
                    value: f64::from_bits(value),
                    unix_ms,
                });
            }
        }
        None
    }
}

/// Now, in milliseconds since the Unix epoch (an exemplar's time).
pub(crate) fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests;
