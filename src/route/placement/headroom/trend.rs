//! The offered load's trend: how fast it rises, when it rises by more than its own noise.
//!
//! A replica asked for now serves a cold start later, and the count is asked from a moving
//! average that lags a ramp by its time constant: on the testbed's ramp the third replica was
//! asked 106 s into the ramp and served 20 s after, while the ramp's second minute went short
//! (docs/autoscaling.md). So the count is asked for the load one cold start ahead, from the
//! trend. But a Poisson load's rate sampled each second is noisy (at 8 requests a second, a
//! sample's standard deviation is 2.8), and a trend read from noise would ask for replicas on
//! every lucky minute, each held for a `scale_down_after`. So the slope is a least-squares fit
//! over a whole `span` of samples, and the rise is its lower bound: the slope less
//! [`SIGNIFICANT`] standard errors (the error from the fit's own residuals, so a bursty load is
//! held to its own noise), and nothing when that is below zero. Simulated at 7 requests a
//! second (Poisson, a 60 s span, 35 s ahead; `scripts/sim-trend.py`), the lower bound forecast at most 1.14x the load over
//! a flat 1 000 s and saw a ramp of 0.1 a second in a median 30 s, reaching 84 % of the rate it
//! forecast; the slope itself, gated at two standard errors, saw it in 24 s but forecast more
//! than 1.1x a flat load 2.7 % of the time, and fitted from 10 samples up to 2x. Only a rise
//! counts: a replica is removed at once, so a fall needs no forecast, and the stabilisation that
//! holds the count on the way down is what protects the SLO there.
use std::collections::VecDeque;
use std::time::Duration;

/// Standard errors taken off the slope: its lower bound, about 97.5 % one-sided.
pub(super) const SIGNIFICANT: f64 = 2.0;

/// The share of the span the samples must cover before a slope is fitted: a fit over a few
/// seconds has an error as wide as the load.
const COVERED: f64 = 0.9;

/// The samples of the offered rate within the trend's span, and the slope they fit.
#[derive(Debug, Default)]
pub(super) struct Trend {
    /// `(seconds since the first sample, requests a second)`, oldest first.
    samples: VecDeque<(f64, f64)>,
    /// The span they were last kept over.
    span: Duration,
}

impl Trend {
    /// Takes `rate` at `at` seconds (from any fixed origin), and forgets what is older than
    /// `span` before it.
    pub fn observe(&mut self, at: f64, rate: f64, span: Duration) {
        self.span = span;
        let oldest = at - span.as_secs_f64();
        while self.samples.front().is_some_and(|&(t, _)| t < oldest) {
            self.samples.pop_front();
        }
        self.samples.push_back((at, rate));
    }

    /// The rise of the rate, in requests a second per second: the fitted slope's lower bound; 0
    /// when the load is flat, falls, or its rise is within its noise, or before the samples
    /// cover the span.
    pub fn rising(&self) -> f64 {
        let n = self.samples.len();
        let covered = match (self.samples.front(), self.samples.back()) {
            (Some(&(first, _)), Some(&(last, _))) => last - first,
            _ => 0.0,
        };
        if n < 3 || covered < COVERED * self.span.as_secs_f64() {
            return 0.0;
        }
        let count = n as f64;
        let mean_t = self.samples.iter().map(|&(t, _)| t).sum::<f64>() / count;
        let mean_r = self.samples.iter().map(|&(_, r)| r).sum::<f64>() / count;
        let (mut sxx, mut sxy) = (0.0, 0.0);
        for &(t, r) in &self.samples {
            sxx += (t - mean_t) * (t - mean_t);
            sxy += (t - mean_t) * (r - mean_r);
        }
        if sxx <= 0.0 {
            return 0.0;
        }
        let slope = sxy / sxx;
        let residuals: f64 = self
            .samples
            .iter()
            .map(|&(t, r)| {
                let off = r - mean_r - slope * (t - mean_t);
                off * off
            })
            .sum();
        let error = (residuals / (count - 2.0) / sxx).sqrt();
        (slope - SIGNIFICANT * error).max(0.0)
    }
}

#[cfg(test)]
mod tests;
