//! An exponential moving average over time: the headroom's smoothing of rates sampled once a
//! tick, each weighted by the time since the last.
use std::time::Duration;

/// An exponential moving average over time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Average(pub Option<f64>);

impl Average {
    /// Takes `sample`, `elapsed` after the last, with time constant `window`; the first sample
    /// is taken whole.
    pub fn update(&mut self, sample: f64, elapsed: Duration, window: Duration) -> f64 {
        let weight = 1.0 - (-elapsed.as_secs_f64() / window.as_secs_f64()).exp();
        let value = match self.0 {
            None => sample,
            Some(old) => old + (sample - old) * weight,
        };
        self.0 = Some(value);
        value
    }
}
