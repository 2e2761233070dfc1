//! The latency model of one backend, learned online from the requests it served.
//!
//! What a request placed on backend `b` will feel depends on the work `b` already has, and on how
//! fast `b` does it — which differs per backend (a slower GPU, a smaller batch budget, a noisy
//! neighbour) and per moment. tokenmeter sees both without any engine metric: the load it put on
//! each backend (prompt tokens sent and not yet past their first response byte, streams in
//! flight), the share of the prompt the backend's prompt cache holds (the pool's prefix index),
//! and, at the finish point, the request's measured TTFT and TPOT. Two linear models per backend
//! relate them, each fitted by recursive least squares with forgetting ([`rls`]):
//!
//! - **TTFT** (from the dispatch to the first token) `= a₀ + a₁·Q + a₂·U + a₃·S`, where `Q` is
//!   the prompt tokens queued on `b` ahead of the request and `U` the request's own less what the
//!   cache serves, both in thousands of tokens, and `S` the streams in flight on `b`: `1/a₂` is
//!   the backend's prefill rate, `a₃` what its decoding streams cost each prefill step. `Q` and
//!   `U` have slopes of their own because a queued prompt is counted whole until its first token,
//!   though part of it is prefilled by then (a 10 000-token document spans two steps of 8 192):
//!   a queued token costs less than one of the request's own.
//! - The TTFT fit weighs each request by `1 / TTFT` (10 ms at least), so it minimises something
//!   close to the relative error, which is what a placement reads against a target: unweighted,
//!   the few requests that waited seconds behind documents set the intercept, and every chat on
//!   an idle replica was predicted 1.5-2x too slow.
//! - **TPOT** (the mean gap between the request's tokens) `= c₀ + c₁·(S + 1) + c₂·W`: the decode
//!   step grows with the batch and with the prefill chunks mixed into it. The same model says what
//!   the request's prefill does to the streams already on `b`: each of them decodes beside it.
//!
//! No slope is used below zero: more queued work never makes a backend faster, and a fit over a
//! quiet stretch may say otherwise for a while. A negative slope's feature is read at its mean
//! instead (the fit's mean, forgotten as its samples are), not dropped. Under load the streams in
//! flight barely vary (about 100 on a busy replica) and trade off against the intercept: one
//! replica's fit, seen on the simulator under a tenant's flood, was `142 ms - 1.06 ms per stream`
//! at about 108 streams (`a_negative_slope_is_read_at_its_mean_not_dropped` replays it). Right
//! there; but with the slope dropped it predicted 114 ms more than that for every request it was
//! asked about, idle or not. Until a backend has finished requests of its own the priors speak
//! (an 8B model on one GPU, roughly), and they are the same for every backend, so a cold pool is
//! balanced by its load alone.
use std::time::Duration;

pub(crate) mod rls;

use rls::Rls;

/// Prior TTFT coefficients: 20 ms, 50 ms per 1 000 prompt tokens queued or its own (20 000
/// tokens/s of prefill), 1 ms per stream decoding.
const TTFT_PRIOR: [f64; 4] = [0.020, 0.050, 0.050, 0.001];
/// Prior TPOT coefficients: 8 ms, 0.3 ms per stream in the batch, 1 ms per 1 000 tokens of
/// prefill mixed in.
const TPOT_PRIOR: [f64; 3] = [0.008, 0.0003, 0.001];
/// How far the first samples may move each coefficient (its prior variance, in seconds²).
const VARIANCE: [f64; 4] = [1.0, 1.0, 1.0, 1.0];
/// The TTFT below which a request weighs no more in the fit: a first token within a step of the
/// dispatch says little about the backend's rate, and `1 / TTFT` would let it outweigh hundreds.
const WEIGHT_FLOOR: f64 = 0.010;

/// A backend's load when a request is placed on it, not counting that request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Prompt tokens sent to it and not yet past their first response byte, less what its
    /// prompt cache held of each as the placement estimated it.
    pub queued_tokens: u64,
    /// Requests whose response stream has not ended.
    pub streams: u64,
}

/// What a request asks of a backend: its prompt, and how much of it the backend's prompt cache
/// holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
}

impl Ask {
    /// The prompt tokens the backend must prefill.
    pub fn uncached(self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }
}

/// What a request placed with `load` and `ask` turned out to take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// From the dispatch to the first token.
    pub ttft: Duration,
    /// The mean gap between its tokens; `None` with fewer than two.
    pub tpot: Option<Duration>,
}

/// What a backend's model predicts for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Predicted {
    /// From the dispatch to the first token, under the backend's load.
    pub ttft: Duration,
    /// The mean gap between tokens of the streams there once the request joins them.
    pub tpot: Duration,
    /// The first token on the backend with nothing else to do: the request's own prefill, what
    /// no placement can beat.
    pub alone: Duration,
    /// What the request's prefill adds to the decode step it joins: the gap every stream already
    /// on the backend sees once (`a₂` times its uncached prompt, as one step; a step budget
    /// smaller than the prompt spreads it over several steps, each still as long as the budget
    /// allows).
    pub stall: Duration,
}

/// One backend's TTFT and TPOT models.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LatencyModel {
    ttft: Rls<4>,
    tpot: Rls<3>,
    memory: u32,
}

impl LatencyModel {
    /// A model at the priors that remembers about `memory` requests (`routing.prediction_memory`).
    pub fn new(memory: u32) -> Self {
        let lambda = 1.0 - 1.0 / f64::from(memory.max(2));
        Self {
            ttft: Rls::new(TTFT_PRIOR, VARIANCE, lambda),
            tpot: Rls::new(TPOT_PRIOR, [1.0; 3], lambda),
            memory,
        }
    }

    /// The memory it was made with.
    pub fn memory(&self) -> u32 {
        self.memory
    }

    /// What a request asking `ask` of a backend with `load` is predicted to see.
    pub fn predict(&self, load: Load, ask: Ask) -> Predicted {
        Predicted {
            ttft: self.ttft(load, ask),
            tpot: self.tpot(load, ask),
            alone: self.ttft(Load::default(), ask),
            stall: self.stall(ask),
        }
    }

    /// Predicted time from the dispatch to the first token of a request asking `ask` of a backend
    /// with `load`.
    pub fn ttft(&self, load: Load, ask: Ask) -> Duration {
        seconds(clamped(&self.ttft, &ttft_features(load, ask)))
    }

    /// What the prefill of a request asking `ask` adds to the decode step it joins: its
    /// uncached tokens at the backend's learned prefill rate.
    pub fn stall(&self, ask: Ask) -> Duration {
        let rate = self.ttft.theta()[2].max(0.0);
        seconds(rate * ask.uncached() as f64 / 1000.0)
    }

    /// The prompt tokens the backend prefills in `busy` at its learned rate (`1 / a₂`); none
    /// while the rate is not positive.
    pub(crate) fn prefilled_in(&self, busy: Duration) -> u64 {
        let per_thousand = self.ttft.theta()[2];
        if per_thousand <= 0.0 {
            return 0;
        }
        let tokens = (busy.as_secs_f64() / per_thousand * 1000.0).round();
        // Saturating: a float beyond u64 casts to u64::MAX.
        tokens as u64
    }

    /// The prompt tokens per second the backend prefills at its learned rate (`1 / a₂`); the
    /// priors' rate while the learned one is not positive.
    pub(crate) fn prefill_rate(&self) -> f64 {
        let per_thousand = self.ttft.theta()[2];
        let per_thousand = if per_thousand > 0.0 {
            per_thousand
        } else {
            TTFT_PRIOR[2]
        };
        1000.0 / per_thousand
    }

    /// The seconds each thousand uncached prompt tokens add to its TTFT (`a₂`), and how sure the
    /// model is of it (its precision, `1 / variance`): what a fleet's replicas average for the
    /// designation, each weighted by its precision. A document teaches a prefill's cost; a
    /// hundred chats of a few hundred tokens hardly do (their TTFT is mostly the fixed part).
    /// Weighted by requests instead, a gateway that had placed the first documents on a
    /// half-speed replica was outvoted by three that had placed chats there, and four gateways
    /// kept two half-speed replicas designated for 50 s that one gateway swapped within a
    /// second (docs/deploying.md). `None` before it learned anything, or a positive cost.
    pub(crate) fn prefill_cost(&self) -> Option<(f64, f64)> {
        let per_thousand = self.ttft.theta()[2];
        let precision = 1.0 / self.ttft.variance(2);
        let usable = per_thousand > 0.0 && precision.is_finite() && precision > 0.0;
        (usable && self.samples() > 0).then_some((per_thousand, precision))
    }

    /// Predicted mean gap between tokens of the streams on a backend with `load` once a request
    /// asking `ask` joins them (its own included).
    pub fn tpot(&self, load: Load, ask: Ask) -> Duration {
        seconds(clamped(&self.tpot, &tpot_features(load, ask)))
    }

    /// Learns from a request placed with `load` and `ask` that took `outcome`.
    pub fn learn(&mut self, load: Load, ask: Ask, outcome: Outcome) {
        let ttft = outcome.ttft.as_secs_f64();
        let weight = 1.0 / ttft.max(WEIGHT_FLOOR);
        self.ttft
            .update_weighted(&ttft_features(load, ask), ttft, weight);
        if let Some(tpot) = outcome.tpot {
            self.tpot
                .update(&tpot_features(load, ask), tpot.as_secs_f64());
        }
    }

    /// Mean TTFT and TPOT, in seconds, of a backend in a steady state: `queued` thousand prompt
    /// tokens queued and `streams` streams in flight on average (fractions allowed), each request
    /// asking `uncached` thousand tokens of prefill. What [`crate::route::placement::headroom`]
    /// iterates to find the rate a backend sustains: the same model, read at the means.
    pub(crate) fn steady(&self, queued: f64, streams: f64, uncached: f64) -> (f64, f64) {
        let ttft = clamped(&self.ttft, &[1.0, queued, uncached, streams]);
        let tpot = clamped(&self.tpot, &[1.0, streams + 1.0, queued + uncached]);
        (ttft, tpot)
    }

    /// Requests learned from (each teaches TTFT; those with two tokens or more, TPOT too).
    pub fn samples(&self) -> u64 {
        self.ttft.samples()
    }

    #[cfg(test)]
    /// A model that has learned these coefficients (TTFT's `[a₀, a₁, a₂, a₃]` and TPOT's
    /// `[c₀, c₁, c₂]`, as [`Self::ttft_coefficients`] and [`Self::tpot_coefficients`] give them).
    pub(crate) fn with_coefficients(ttft: [f64; 4], tpot: [f64; 3]) -> Self {
        let memory = 1000;
        let lambda = 1.0 - 1.0 / f64::from(memory);
        Self {
            ttft: Rls::new(ttft, VARIANCE, lambda),
            tpot: Rls::new(tpot, [1.0; 3], lambda),
            memory,
        }
    }

    #[cfg(test)]
    /// The TTFT coefficients `[a₀, a₁, a₂, a₃]` (seconds; per 1 000 tokens queued; per 1 000
    /// of its own; per stream).
    pub(crate) fn ttft_coefficients(&self) -> [f64; 4] {
        *self.ttft.theta()
    }

    #[cfg(test)]
    /// The TPOT coefficients `[c₀, c₁, c₂]` (seconds; per stream; per 1 000 tokens).
    pub(crate) fn tpot_coefficients(&self) -> [f64; 3] {
        *self.tpot.theta()
    }
}

/// Prefill work ahead of the first token, in thousands of tokens.
fn work(load: Load, ask: Ask) -> f64 {
    (load.queued_tokens + ask.uncached()) as f64 / 1000.0
}

fn ttft_features(load: Load, ask: Ask) -> [f64; 4] {
    [
        1.0,
        load.queued_tokens as f64 / 1000.0,
        ask.uncached() as f64 / 1000.0,
        load.streams as f64,
    ]
}

fn tpot_features(load: Load, ask: Ask) -> [f64; 3] {
    [1.0, (load.streams + 1) as f64, work(load, ask)]
}

/// The model's value with a negative slope's feature read at its mean (see the module docs), and
/// never below zero.
fn clamped<const N: usize>(model: &Rls<N>, x: &[f64; N]) -> f64 {
    let (theta, mean) = (model.theta(), model.mean());
    let term = |k: usize| theta[k] * if theta[k] >= 0.0 { x[k] } else { mean[k] };
    let value = theta[0] + (1..N).map(term).sum::<f64>();
    value.max(0.0)
}

fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests;
