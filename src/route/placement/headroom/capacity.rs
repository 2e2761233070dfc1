//! The rate of requests one backend sustains within its targets, read off its latency model.
//!
//! The model ([`crate::route::backend::predict`]) says what one request sees under a given load:
//! `TTFT = a₀ + a₁·Q + a₂·U + a₃·S` and `TPOT = c₀ + c₁·(S + 1) + c₂·(Q + U)`. At a steady
//! rate `λ` of requests of the pool's mix (`U` thousand uncached prompt tokens and `O` output
//! tokens each, on average), the load is itself set by the latencies, by Little's law:
//!
//! - the prompt tokens queued are those that arrive while a request waits for its first token:
//!   `Q = λ·U·TTFT`;
//! - the streams in flight are those that arrive while a request lives: `S = λ·(TTFT + (O - 1)·TPOT)`.
//!
//! So the steady state is the fixed point of those four equations. Iterated from an idle backend
//! (`Q = S = 0`), every step's latencies and load are at least the last's (no slope is used below
//! zero), so the iteration climbs to the least fixed point: it either settles, or passes a limit
//! (then the backend does not sustain `λ` within it), or climbs for ever (the backend saturates).
//! The rate sustained is the largest `λ` whose steady state has its mean TTFT within
//! `ttft target / TTFT_TAIL` and its mean TPOT within the TPOT target, found by bisection.
//!
//! A backstop bounds the rate whatever the slopes learned, from the prefill rate alone (taught by
//! every prompt, while the load's slopes are near zero at a light load): a backend spends at most
//! [`MOST_PREFILL_BUSY`] of its time prefilling, and its prefills, served one after another, are
//! a queue whose mean wait is the Pollaczek–Khinchine one, `λ·E[s²] / (2·(1 - ρ))` for a
//! prefill of `s` seconds and `ρ = λ·E[s]`, which with its own prefill must fit the TTFT limit.
//! The wait's `E[s²]` is the mix's spread: a chat that comes behind a document waits for it
//! whole. On the testbed's mix (a tenth documents of 8 000 tokens, most of the rest chats of
//! 400) it credits a replica with about 10 requests a second from its first window, where the
//! busy share alone credited 15 to 18 until the slopes were learned under load; a fleet of two
//! measured 9 to 10 (docs/autoscaling.md, "What a replica sustains").
//!
//! Why a tail factor on TTFT and not on TPOT: TTFT is mostly a wait in a queue, and a queue's
//! waits spread wide (an exponential wait's 95th percentile is 3x its mean), so a mean at the
//! target is half the requests missing it. A request's TPOT is already a mean over its tokens,
//! and spreads little from one request to the next.
use crate::route::backend::predict::LatencyModel;

/// How far below its target a steady state's mean TTFT must be: the 95th percentile of an
/// exponential wait is 3x its mean (see the module docs).
pub(crate) const TTFT_TAIL: f64 = 3.0;

/// The most requests a second any backend is credited with: a bound on a model whose slopes
/// say load costs nothing.
pub(crate) const MOST: f64 = 10_000.0;

/// The most of its time a backend may spend prefilling at a rate it is credited with. A model
/// learned at a light load has seen little variation in its queue and its streams, and their
/// slopes may read near zero (seen on the simulated fleet at 16 requests/s: one backend's slopes
/// credited it with thousands of requests a second); its prefill rate, taught by every prompt,
/// is known by then. At 80 % of its time prefilling, a backend's queue is five times its
/// service time on average (an M/M/1 queue's `ρ / (1 - ρ)`): past any TTFT target of a mix with
/// long prompts.
pub(crate) const MOST_PREFILL_BUSY: f64 = 0.8;

/// Steps of the fixed point before a climb that has not settled counts as saturated.
const STEPS: usize = 400;

/// Halvings of the bisection: the rate to within `2⁻²⁴` of its bracket.
const HALVINGS: usize = 24;

/// What the pool's requests ask, on average.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Mix {
    /// Uncached prompt tokens per request, in thousands.
    pub uncached: f64,
    /// The mean of their square, in thousands squared: at least `uncached²`, and far more for a
    /// mix of chats and documents than for one of the same mean.
    pub square: f64,
    /// Output tokens per request.
    pub output: f64,
}

/// The means a steady state must stay within, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    pub ttft: f64,
    pub tpot: f64,
}

/// A backend's steady state at one rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Steady {
    pub ttft: f64,
    pub tpot: f64,
    pub queued: f64,
    pub streams: f64,
}

/// The steady state of `model` at `rate` requests a second of `mix`, if it settles within
/// `limits`; `None` when it passes them or saturates.
pub(crate) fn steady(model: &LatencyModel, mix: Mix, rate: f64, limits: Limits) -> Option<Steady> {
    // The backstop: no backend prefills more than its learned rate allows, whatever its queue's
    // slope says.
    let per_thousand = 1000.0 / model.prefill_rate();
    if !prefill_fits(per_thousand, mix, rate, limits) {
        return None;
    }
    let (mut queued, mut streams) = (0.0_f64, 0.0_f64);
    for _ in 0..STEPS {
        let (ttft, tpot) = model.steady(queued, streams, mix.uncached);
        if ttft > limits.ttft || tpot > limits.tpot {
            return None;
        }
        let next_queued = rate * mix.uncached * ttft;
        let next_streams = rate * (ttft + (mix.output - 1.0).max(0.0) * tpot);
        let settled = (next_queued - queued).abs() <= 1e-9 * (1.0 + queued)
            && (next_streams - streams).abs() <= 1e-9 * (1.0 + streams);
        (queued, streams) = (next_queued, next_streams);
        if settled {
            return Some(Steady {
                ttft,
                tpot,
                queued,
                streams,
            });
        }
    }
    None
}

/// Whether prefilling `rate` requests a second of `mix` at `per_thousand` seconds a thousand
/// tokens, alone, keeps within [`MOST_PREFILL_BUSY`] and the TTFT limit (see the module docs).
fn prefill_fits(per_thousand: f64, mix: Mix, rate: f64, limits: Limits) -> bool {
    let busy = rate * mix.uncached * per_thousand;
    if busy > MOST_PREFILL_BUSY {
        return false;
    }
    let wait = rate * per_thousand * per_thousand * mix.square / (2.0 * (1.0 - busy));
    wait + per_thousand * mix.uncached <= limits.ttft
}

/// The most requests a second of `mix` that `model` sustains with its steady state within
/// `limits` (0 when not even one trickle does: an idle request already misses).
pub(crate) fn sustained(model: &LatencyModel, mix: Mix, limits: Limits) -> f64 {
    let fits = |rate: f64| steady(model, mix, rate, limits).is_some();
    if !fits(0.0) {
        return 0.0;
    }
    let mut high = 1.0;
    while fits(high) {
        if high >= MOST {
            return MOST;
        }
        high *= 2.0;
    }
    let mut low = high / 2.0;
    if high == 1.0 {
        low = 0.0;
    }
    for _ in 0..HALVINGS {
        let middle = (low + high) / 2.0;
        if fits(middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    low
}

#[cfg(test)]
mod tests;
