//! An exponential moving average over time: the headroom's smoothing of rates sampled once a
//! tick, each weighted by the time since the last.
use std::time::Duration;

/// An exponential moving average over time that starts as a running mean: until it has seen a
/// time constant of samples, each counts as much as its share of the time seen. Taken whole,
/// a first sample still weighs a third of the average a time constant later, and the first
/// second of a pool's mix (a document, or the sessions' first turns before the prompt cache
/// holds their system prompts) read as its capacity: a simulated pool asked for 3 replicas 25 s
/// after it started (docs/autoscaling.md).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Average {
    value: Option<f64>,
    /// The time its samples span.
    seen: Duration,
}

impl Average {
    /// Takes `sample`, `elapsed` after the last, with time constant `window`.
    pub fn update(&mut self, sample: f64, elapsed: Duration, window: Duration) -> f64 {
        self.seen = self.seen.saturating_add(elapsed);
        let moving = 1.0 - (-elapsed.as_secs_f64() / window.as_secs_f64()).exp();
        let share = if self.seen.is_zero() {
            1.0
        } else {
            elapsed.as_secs_f64() / self.seen.as_secs_f64()
        };
        let value = match self.value {
            None => sample,
            Some(old) => old + (sample - old) * moving.max(share),
        };
        self.value = Some(value);
        value
    }

    /// The average, once it has a sample.
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// The time its samples span.
    pub fn seen(&self) -> Duration {
        self.seen
    }
}
