//! A pool's SLO headroom: how much more load its backends take while meeting its targets, and
//! the replica count an autoscaler should run (#41, docs/autoscaling.md).
//!
//! What a fleet scales on today is a queue (vLLM's production stack: KEDA on
//! `vllm:num_requests_waiting`) or a predicted latency against its target (llm-d). A queue says
//! nothing until the replicas are already behind, and a latency ratio is not proportional to the
//! load (a pool's TTFT is flat until it is not), so an autoscaler's proportional rule reads it
//! wrong both ways. A `balance = "slo"` pool has what neither has: a latency model per backend,
//! learned from what its requests measured ([`crate::route::backend::predict`]). So, every
//! [`TICK`]:
//!
//! - **offered**: the requests a second offered to the pool (placed, queued or shed alike: the
//!   demand, not what got through), and its mix (uncached prompt tokens per request as placed and
//!   the mean of their square, output tokens per request as finished), each a moving average
//!   over `window`;
//! - **capacity**: the sum over the pool's available backends of the rate each sustains with its
//!   pool's targets met, read off its model at that mix ([`capacity`]; a backend whose model has
//!   not learned from [`LEARNED`] requests yet counts as the learned ones' mean), times the
//!   **calibration** below;
//! - **headroom** `= capacity / offered` (at most [`MOST_RATIO`]): above 1 the pool has room,
//!   below it the pool is over what it sustains;
//! - **forecast**: the offered load one `cold_start` ahead, `offered + rise · (window +
//!   cold_start)`, where `rise` is the load's trend when it rises by more than its noise
//!   ([`trend`]; the `window` term undoes the average's lag behind a ramp), at most twice the
//!   offered load; the offered load itself when it does not rise;
//! - **desired replicas** `= ⌈forecast · headroom target / (capacity / ready)⌉`, within
//!   `[min_replicas, max_replicas]`: the least count whose capacity, at the mean capacity per
//!   replica now, is `headroom` times the load when a replica asked now would serve. It rises at
//!   once; it falls only to a count that keeps `headroom · (1 + tolerance)`, and only once the
//!   count has been lower for `scale_down_after` (the highest count within that window holds).
//!
//! **Calibrated by what the requests measured** ([`calibration`]): a model predicts a mean request
//! on one backend, while a pool misses its SLO in its tails and its mix first; the requests'
//! measured attainment against the objective scales the models' capacity down to the load it
//! was breached at, and up to a load it was sustained at.
//!
//! The capacity and the offered load are exported apart, so a fleet of gateways (each sees a
//! share of the load and the whole pool) and a fleet of sidecars (each sees its own backend and
//! its load) are both summed right in PromQL (deploy/prometheus/tokenmeter-rules.yaml).
//!
//! **Missing data says so.** Before any backend's model learned from [`LEARNED`] requests, and
//! before [`LEARNED`] requests finished (no mix yet), or with no backend available, the capacity
//! and the headroom are NaN and the desired count holds: at the count asked last, or at first at
//! the replicas available (within the bounds). A signal never asks for fewer replicas because it
//! knows less.
//!
//! A reload keeps the signal while the pool's `[pools.autoscale]` and targets are the same
//! ([`super::PoolSlo::with_headroom`]): an autoscaler must not read a config reload, or the
//! replica it added through one, as a cold start.
//!
//! None of this is on the request path: placing a request adds to three counters and finishing
//! one to two more (relaxed atomics); the models are read on the tick, off it.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{AutoscaleConfig, SloTargets};
use crate::route::backend::Backend;
use average::Average;
use calibration::{Calibration, Judged, Modelled};
use capacity::{Limits, Mix};
use counts::{Counts, Totals};
use trend::Trend;

mod average;
pub(crate) mod calibration;
pub(crate) mod capacity;
mod count;
mod counts;
mod reading;
mod series;
mod trend;

pub use reading::Reading;
pub(crate) use series::HeadroomMetrics;

/// How often the signal is computed: a few microseconds a backend, and Prometheus reads it at
/// its scrape interval.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// Requests a backend's model must have learned from before its capacity counts: the
/// placement's own `EXPLORE` (before it, the priors speak for the backend there too).
pub(crate) const LEARNED: u64 = 8;

/// The highest headroom reported: an idle pool's is unbounded, and an autoscaler's arithmetic
/// wants a number.
pub(crate) const MOST_RATIO: f64 = 10.0;

/// The span the trend is fitted over, in `window`s: long enough that a Poisson load's noise
/// rarely passes for a rise, short enough to see a ramp within half a minute at the defaults.
const TREND_WINDOWS: u32 = 4;

/// The most a forecast is, as a multiple of the load offered now: a trend extrapolated past a
/// doubling is a burst's, not a ramp's.
const MOST_FORECAST: f64 = 2.0;

/// What the tick keeps between ticks.
#[derive(Debug, Default)]
struct State {
    last: Option<(Instant, Totals)>,
    offered: Average,
    offered_tokens: Average,
    offered_token_squares: Average,
    finished: Average,
    output_tokens: Average,
    /// The models' capacity a replica available, averaged. Not the pool's sum: averaged, a sum
    /// lags a replica that joins by a window, and spread over the new count it reads as less a
    /// replica, which asks for more replicas still (a simulated pool went from 1 to its 6
    /// replicas on a ramp to 9 requests a second, each one that joined asking for more).
    per_replica: Average,
    calibration: Calibration,
    mix: Option<Mix>,
    /// When the mix was first known: the averages hold a `window` of requests only after that.
    mix_since: Option<Instant>,
    /// The offered rate's trend, its samples timed from `origin`.
    trend: Trend,
    origin: Option<Instant>,
    /// The models' capacity at each tick of the last minute (or `window`, if longer), oldest
    /// first.
    recent: VecDeque<(Instant, f64)>,
    /// The counts asked for.
    asked: count::Asked,
}

impl State {
    /// The models' capacity as the calibration reads it: the least over the last `window`,
    /// `modelled` now included, and the most over the last minute (see [`calibration`]).
    fn modelled(&mut self, modelled: f64, now: Instant, window: Duration) -> Modelled {
        let kept = window.max(calibration::ATTAINMENT_WINDOW);
        while self
            .recent
            .front()
            .is_some_and(|&(at, _)| now.saturating_duration_since(at) > kept)
        {
            self.recent.pop_front();
        }
        self.recent.push_back((now, modelled));
        let within = |span: Duration| {
            self.recent
                .iter()
                .filter(move |&&(at, _)| now.saturating_duration_since(at) <= span)
                .map(|&(_, capacity)| capacity)
        };
        Modelled {
            least: within(window).fold(modelled, f64::min),
            most: within(calibration::ATTAINMENT_WINDOW).fold(modelled, f64::max),
        }
    }
}

/// A `balance = "slo"` pool's headroom signal.
#[derive(Debug)]
pub struct Headroom {
    settings: AutoscaleConfig,
    counts: Counts,
    state: Mutex<State>,
    metrics: Option<HeadroomMetrics>,
    /// The last claim to tick it ([`Headroom::claim`]).
    claims: AtomicU64,
}

impl Headroom {
    pub(crate) fn new(settings: AutoscaleConfig, metrics: Option<HeadroomMetrics>) -> Self {
        Self {
            settings,
            counts: Counts::default(),
            state: Mutex::new(State::default()),
            metrics,
            claims: AtomicU64::new(0),
        }
    }

    /// What tunes it.
    pub(crate) fn settings(&self) -> &AutoscaleConfig {
        &self.settings
    }

    /// Claims the ticking for a new pool's watcher: the one that claimed last ticks, an older
    /// one stops (a signal kept through a reload has the old pool's watcher too).
    pub(crate) fn claim(&self) -> u64 {
        self.claims.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The last claim.
    pub(crate) fn claimed(&self) -> u64 {
        self.claims.load(Ordering::Relaxed)
    }

    /// A request asking `uncached` prompt tokens was offered to the pool.
    pub fn offered(&self, uncached: u64) {
        self.counts.offered.fetch_add(1, Ordering::Relaxed);
        self.counts
            .offered_tokens
            .fetch_add(uncached, Ordering::Relaxed);
        self.counts
            .offered_token_squares
            .fetch_add(uncached.saturating_mul(uncached), Ordering::Relaxed);
    }

    /// A request of the pool finished with `output` tokens.
    pub fn finished(&self, output: u64) {
        self.counts.finished.fetch_add(1, Ordering::Relaxed);
        self.counts
            .output_tokens
            .fetch_add(output, Ordering::Relaxed);
    }

    /// A request of the pool finished whole and was judged against its targets: `met` or not.
    pub fn judged(&self, met: bool) {
        self.counts.judged.fetch_add(1, Ordering::Relaxed);
        if !met {
            self.counts.missed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request offered to the pool was shed by its gateway queue: a miss.
    pub fn shed(&self) {
        self.judged(false);
    }

    /// Computes the signal at `now` from `backends` against `targets`, and exports it.
    pub fn tick(&self, backends: &[Arc<Backend>], targets: SloTargets, now: Instant) -> Reading {
        let totals = self.counts.totals();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let window = self.settings.window;
        let (elapsed, before) = match state.last {
            Some((at, before)) => (now.saturating_duration_since(at), before),
            // The first tick starts the count.
            None => (Duration::ZERO, totals),
        };
        state.last = Some((now, totals));
        if !elapsed.is_zero() {
            let per_second = |after: u64, before: u64| {
                after.saturating_sub(before) as f64 / elapsed.as_secs_f64()
            };
            let offered_per_second = per_second(totals.offered, before.offered);
            // Fitted only once the signal is warm: before, the span holds the pool's own start,
            // a step from nothing that reads as a steep rise for a span.
            if Self::warm(&state, now, window) {
                let origin = *state.origin.get_or_insert(now);
                let at = now.saturating_duration_since(origin).as_secs_f64();
                state
                    .trend
                    .observe(at, offered_per_second, window * TREND_WINDOWS);
            }
            let offered_tokens = per_second(totals.offered_tokens, before.offered_tokens);
            let squares = totals
                .offered_token_squares
                .wrapping_sub(before.offered_token_squares) as f64
                / elapsed.as_secs_f64();
            let finished = per_second(totals.finished, before.finished);
            let output_tokens = per_second(totals.output_tokens, before.output_tokens);
            let offered = state.offered.update(offered_per_second, elapsed, window);
            let offered_tokens = state.offered_tokens.update(offered_tokens, elapsed, window);
            let squares = state.offered_token_squares.update(squares, elapsed, window);
            let finished = state.finished.update(finished, elapsed, window);
            let output_tokens = state.output_tokens.update(output_tokens, elapsed, window);
            state.calibration.observe(
                Judged {
                    judged: per_second(totals.judged, before.judged),
                    missed: per_second(totals.missed, before.missed),
                    offered: offered_per_second,
                },
                elapsed,
                window,
            );
            // An idle stretch keeps the last mix: what the next requests will likely ask.
            if offered > 0.0 && finished > 0.0 && totals.finished >= LEARNED {
                state.mix = Some(Mix {
                    uncached: offered_tokens / offered / 1000.0,
                    square: squares / offered / 1e6,
                    output: output_tokens / finished,
                });
                state.mix_since.get_or_insert(now);
            }
        }
        // Not before the averages hold a window of requests: the first tick's rates are taken
        // whole, and one document in a pool's first second read as a mix of 8 000-token prompts
        // (a simulated pool asked for its 6 replicas 5 s after it started, docs/autoscaling.md).
        let warm = Self::warm(&state, now, window);
        let offered = state.offered.value().unwrap_or(0.0);
        let horizon = (window + self.settings.cold_start).as_secs_f64();
        let forecast = (offered + state.trend.rising() * horizon).min(MOST_FORECAST * offered);
        let available: Vec<&Arc<Backend>> = backends.iter().filter(|b| b.available(now)).collect();
        let ready = u32::try_from(available.len()).unwrap_or(u32::MAX);
        let sustained = state
            .mix
            .filter(|_| warm)
            .and_then(|mix| pool_capacity(&available, mix, targets));
        // Averaged a replica, then times the replicas there now (see `State::per_replica`).
        let modelled = sustained.map(|rate| {
            let each = rate / f64::from(ready.max(1));
            let each = if elapsed.is_zero() {
                state.per_replica.value().unwrap_or(each)
            } else {
                state.per_replica.update(each, elapsed, window)
            };
            each * f64::from(ready)
        });
        if let Some(modelled) = modelled {
            let objective = self.settings.objective;
            let read = state.modelled(modelled, now, window);
            state
                .calibration
                .hold(read, offered, objective, window, elapsed);
        }
        let calibration = state.calibration.value();
        let capacity = modelled.map(|modelled| modelled * calibration);
        let headroom = capacity.map(|capacity| ratio(capacity, offered));
        let desired = state
            .asked
            .ask(&self.settings, forecast, capacity, ready, now);
        drop(state);
        let reading = Reading {
            offered,
            forecast,
            capacity,
            ready,
            headroom,
            calibration,
            desired,
        };
        if let Some(metrics) = &self.metrics {
            metrics.show(&reading);
        }
        reading
    }

    /// Whether the averages hold a `window` of requests since the mix was first known.
    fn warm(state: &State, now: Instant, window: Duration) -> bool {
        state
            .mix_since
            .is_some_and(|since| now.saturating_duration_since(since) >= window)
    }
}

/// `capacity / offered`, at most [`MOST_RATIO`] (an idle pool's).
fn ratio(capacity: f64, offered: f64) -> f64 {
    if offered <= 0.0 {
        return MOST_RATIO;
    }
    (capacity / offered).min(MOST_RATIO)
}

/// The rate `available` sustain together with `targets` met at `mix`: each learned backend's
/// own, each other one the learned ones' mean; `None` with none learned or none available.
fn pool_capacity(available: &[&Arc<Backend>], mix: Mix, targets: SloTargets) -> Option<f64> {
    let limits = Limits {
        ttft: targets.ttft.as_secs_f64() / capacity::TTFT_TAIL,
        tpot: targets.tpot.as_secs_f64(),
    };
    let learned: Vec<f64> = available
        .iter()
        .filter(|backend| backend.learned() >= LEARNED)
        .filter_map(|backend| backend.read_model(|model| capacity::sustained(model, mix, limits)))
        .collect();
    if learned.is_empty() {
        return None;
    }
    let mean = learned.iter().sum::<f64>() / learned.len() as f64;
    let unlearned = available.len() - learned.len();
    Some(learned.iter().sum::<f64>() + mean * unlearned as f64)
}

#[cfg(test)]
mod tests;
