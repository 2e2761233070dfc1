//! The headroom's calibration: the models' capacity held to what the pool's requests measured.
//!
//! A model predicts a mean request on one backend; a pool misses its SLO in its tails and its mix
//! first (on the simulated fleet, the documents queued on the prefill-heavy replicas miss long
//! before the pool's mean request does). So the pool's requests, judged as they finish against
//! their targets (a document whose own prefill misses the TTFT target anywhere, which the
//! placement holds to 1.5x that prefill ([`super::super::for_prompt`]), by its TPOT alone: more
//! replicas would not bring its first token sooner; the gap target is never judged here, it is
//! placement's), and a request its gateway queue sheds as a miss, hold the models to account:
//!
//! - below the objective (`[pools.autoscale] objective`, 95 %) over the last `window` by more
//!   than the objective's own noise at that many requests (two standard deviations), at a load
//!   of `u` times the models' capacity that is not falling and is at least [`BUSY`] of the
//!   calibrated capacity, the pool sustains at most `u · attainment / objective` of it (an
//!   attainment under [`LEAST_ATTAINMENT`] read as that), and the calibration falls toward that
//!   (time constant [`LOWERING`]);
//! - within the objective over the last minute ([`ATTAINMENT_WINDOW`]) at a load `u`, the pool
//!   sustained `u`, and the calibration rises to it if it was lower.
//!
//! Each reads the models' capacity the way that moves the calibration least: a breach against
//! the least they said over the last `window` (the requests judged now were placed up to a window
//! ago, some on a smaller pool: a shortage that a replica joining ends is the smaller pool's),
//! and a minute met against the most they said over that minute, and only once the calibration
//! has watched a whole minute. A capacity read low for a tick (the first window's mix, a few
//! documents more than usual) is not a pool that sustained more than its models: read so, a
//! simulated pool's first 20 s raised the calibration to 1.77, and the replicas it asked for came
//! 30 s late at the peak (docs/autoscaling.md).
//!
//! It never rises without such evidence (a pool kept within its capacity shows none above it),
//! so a calibration learned in a breach holds: the fleet it asks for is the larger, never the
//! smaller. Misses that no load causes would ratchet it down (measured on the simulated fleet
//! before the noise and [`BUSY`] bounds: 0.9 at a fifth of the models' capacity); those bounds
//! keep them out, which docs/autoscaling.md measures. Each window must hold [`EVIDENCE`] judgements (a pool of a request or two a second is
//! judged by its models alone). A restart starts it again at 1; a reload keeps it while the
//! pool's `[pools.autoscale]` and targets stay the same.
use std::time::Duration;

use super::average::Average;

/// How long the attainment the calibration reads is averaged over: a minute holds a few hundred
/// requests at a few a second, enough for a share of misses to mean something.
pub(crate) const ATTAINMENT_WINDOW: Duration = Duration::from_secs(60);

/// Judgements a window must hold before the calibration reads its attainment.
pub(crate) const EVIDENCE: f64 = 30.0;

/// A load counts as not falling while its recent average is at least this share of its average
/// over [`ATTAINMENT_WINDOW`].
const STEADY: f64 = 0.9;

/// The least attainment a breach is read at. Deep in an overload every request waits behind a
/// queue that grows for as long as the overload lasts: the share met then says how long the
/// queue has grown, not how far the load is past the capacity. Read whole, a breach of a few
/// minutes at 1.2x the models' capacity on the simulated fleet (40 requests/s, 52 % met) took
/// the calibration to 0.2 and the count asked to its bound of 64, five times what the load
/// needed; read at half at least, a breach lowers the capacity by at most half its load each
/// time.
const LEAST_ATTAINMENT: f64 = 0.5;

/// The least load, as a share of the calibrated capacity, whose misses lower the calibration.
const BUSY: f64 = 0.5;

/// The time constant of the calibration's fall toward a measured shortfall: a breach of a few
/// seconds moves it a little, one of a minute most of the way.
pub(crate) const LOWERING: Duration = Duration::from_secs(30);

/// The calibration's bounds: the models may be optimistic or pessimistic by this much at most.
const LEAST_CALIBRATION: f64 = 0.05;
const MOST_CALIBRATION: f64 = 4.0;

/// One tick's judgements and offered load, a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Judged {
    pub judged: f64,
    pub missed: f64,
    pub offered: f64,
}

/// What the calibration keeps between ticks.
#[derive(Debug, Default)]
pub(super) struct Calibration {
    /// The requests judged and missed a second over the headroom's `window`: a breach now.
    judged_now: Average,
    missed_now: Average,
    /// The offered load and the judgements over [`ATTAINMENT_WINDOW`]: a load sustained.
    offered: Average,
    judged: Average,
    missed: Average,
    /// The factor (1 until a measurement says otherwise).
    value: Option<f64>,
}

/// The models' capacity over the windows the calibration reads, requests a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Modelled {
    /// The least over the headroom's `window`: what the requests judged now were placed under.
    pub least: f64,
    /// The most over [`ATTAINMENT_WINDOW`]: what a minute met is read against.
    pub most: f64,
}

impl Calibration {
    /// Takes one tick's judgements, `elapsed` after the last, the headroom averaging over
    /// `window`.
    pub fn observe(&mut self, tick: Judged, elapsed: Duration, window: Duration) {
        self.judged_now.update(tick.judged, elapsed, window);
        self.missed_now.update(tick.missed, elapsed, window);
        self.offered
            .update(tick.offered, elapsed, ATTAINMENT_WINDOW);
        self.judged.update(tick.judged, elapsed, ATTAINMENT_WINDOW);
        self.missed.update(tick.missed, elapsed, ATTAINMENT_WINDOW);
    }

    /// The factor the models' capacity is multiplied by.
    pub fn value(&self) -> f64 {
        self.value.unwrap_or(1.0)
    }

    /// Holds the models' capacity, `modelled`, against what the requests measured at the load
    /// offered (`offered_now` a second, averaged over `window`), to `objective`.
    pub fn hold(
        &mut self,
        modelled: Modelled,
        offered_now: f64,
        objective: f64,
        window: Duration,
        elapsed: Duration,
    ) {
        if modelled.least <= 0.0 || modelled.most <= 0.0 {
            return;
        }
        let calibration = self.value();
        // The attainment a window measured, and how far below it the objective's own noise
        // reaches at that many judgements (two standard deviations of a share).
        let attainment = |judged: Average, missed: Average, window: Duration| {
            let (judged, missed) = (judged.value()?, missed.value()?);
            let count = judged * window.as_secs_f64();
            let noise = 2.0 * (objective * (1.0 - objective) / count.max(1.0)).sqrt();
            (count >= EVIDENCE).then(|| (1.0 - (missed / judged).clamp(0.0, 1.0), noise))
        };
        let now = attainment(self.judged_now, self.missed_now, window);
        let sustained = attainment(self.judged, self.missed, ATTAINMENT_WINDOW)
            // A minute's averages hold a minute only once they have seen one.
            .filter(|_| self.judged.seen() >= ATTAINMENT_WINDOW)
            .map(|(a, _)| a);
        // The load now, and over the attainment's window, as shares of the models' capacity.
        let offered = self.offered.value().unwrap_or(0.0);
        let load_now = offered_now / modelled.least;
        let load = offered / modelled.most;
        let mut next = calibration;
        if let Some((attained, _)) = now.filter(|&(a, noise)| a < objective - noise) {
            // A breach now, past the objective's noise, at a load that is not falling (a falling
            // load's misses are its past's) and is at least half what the pool is believed to
            // sustain (misses at less are not the load's: a request no replica count would
            // serve in time, or a placement's): the pool sustains at most the load it meets its
            // objective at.
            if offered_now >= STEADY * offered && load_now >= BUSY * calibration {
                let target = load_now * attained.max(LEAST_ATTAINMENT) / objective;
                if target < calibration {
                    let weight = 1.0 - (-elapsed.as_secs_f64() / LOWERING.as_secs_f64()).exp();
                    next = calibration + (target - calibration) * weight;
                }
            }
        } else if sustained.is_some_and(|a| a >= objective) {
            // A minute within the objective at `load`: the pool sustains at least that.
            next = calibration.max(load);
        }
        self.value = Some(next.clamp(LEAST_CALIBRATION, MOST_CALIBRATION));
    }
}
