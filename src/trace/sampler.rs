//! Which requests are recorded: OpenTelemetry's samplers, decided once when a request's head
//! arrives.
//!
//! `parentbased_*` samplers follow the sampled flag of a valid incoming `traceparent`, so a
//! client's trace is recorded whole or not at all; for a new trace (no header, or one that is not
//! valid) they decide as their root sampler. `traceidratio` keeps a trace when the low 63 bits of
//! its 8 last bytes fall under `ratio * 2^63`, as the OpenTelemetry SDKs do, so every process of a
//! trace that samples by ratio agrees.
use crate::config::Sampler;
use crate::metrics::exemplar::TraceId;
use crate::trace::record::TraceParent;

/// A sampler with its ratio resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    sampler: Sampler,
    /// A trace id whose low 63 bits are below this is kept by a ratio sampler.
    bound: u64,
}

impl Sampling {
    pub fn new(sampler: Sampler, ratio: f64) -> Self {
        let ratio = ratio.clamp(0.0, 1.0);
        let bound = if ratio >= 1.0 {
            u64::MAX
        } else {
            (ratio * (1u64 << 63) as f64) as u64
        };
        Self { sampler, bound }
    }

    /// Whether the request with this `parent` (a valid incoming `traceparent`) in `trace` is
    /// recorded.
    pub fn decide(&self, parent: Option<&TraceParent>, trace: &TraceId) -> bool {
        let by_ratio = || {
            let low = u64::from_be_bytes(trace.0[8..].try_into().unwrap_or([0; 8]));
            (low >> 1) < self.bound
        };
        match (self.sampler, parent) {
            (Sampler::AlwaysOn, _) => true,
            (Sampler::AlwaysOff, _) => false,
            (Sampler::Traceidratio, _) => by_ratio(),
            (
                Sampler::ParentbasedAlwaysOn
                | Sampler::ParentbasedAlwaysOff
                | Sampler::ParentbasedTraceidratio,
                Some(parent),
            ) => parent.sampled(),
            (Sampler::ParentbasedAlwaysOn, None) => true,
            (Sampler::ParentbasedAlwaysOff, None) => false,
            (Sampler::ParentbasedTraceidratio, None) => by_ratio(),
        }
    }
}

#[cfg(test)]
mod tests;
