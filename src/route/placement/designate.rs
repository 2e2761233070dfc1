//! Prefill-heavy replicas chosen by the load: which backends of a `balance = "slo"` pool take its
//! long prompts now.
//!
//! A long prompt is one whose prefill, where it is placed, would stall the streams beside it: one
//! decode step as long as the prefill, past the gap limit (`placement::gap_limit`: `[slo] max_gap`,
//! else four TPOT targets). A static prefill pool keeps such prompts away from the chats and
//! starves them when the documents come faster than its replicas prefill (length routing on the
//! simulated fleet: 60 s document TTFT at 24 requests/s); spreading them over every replica serves
//! them and stalls every chat (the worst chat gap stays at a document's prefill, ~760 ms, at every
//! load). The designation keeps the split and sizes it by the load:
//!
//! - **Demand.** Every long prompt placed adds its uncached tokens ([`Designation::long_prompt`],
//!   two relaxed atomics). Every [`REFRESH`] the first placement folds them into a moving rate of
//!   tokens and prompts per second ([`DEMAND_WINDOW`]).
//! - **Supply.** Each replica prefills at the rate its latency model learned (`1 / a₂`; the
//!   priors' 20 000 tokens/s before it learned one).
//! - **Designation.** The fastest replica is designated at the first long prompt. Another is
//!   designated only once the demand exceeds [`HIGH`] (all) of the designated replicas' rate: the
//!   slowest replica that covers the shortfall, else the fastest left. Below that rate their queue
//!   stays bounded, and what waiting there is falls on the long prompts (one request each, held to
//!   1.5 times their own prefill, `LONG_PROMPT_SLACK`) rather than on every chat of a replica taken from the chats; and
//!   the replica added is the one the chats miss least. Measured on the simulated fleet (two
//!   replicas at full speed, two at half, 30 s runs, gated, docs/routing.md): designating at 60 %
//!   of the rate took two fast replicas at 24 requests/s and three at 32, and the chats, left
//!   the rest, met their gap target less often than with no designation at all; at 100 % with the
//!   slowest sufficient replica added, goodput with the gap counted was 23.2 and 32.3 requests/s
//!   against 16.0 and 16.7 with no designation. One is let go (the slowest) only once the
//!   demand has stayed below [`LOW`] of what the rest would give for [`HOLD`]: a burst designates
//!   at once, a lull does not undo it. One replica is always left to the chats; a pool with no
//!   long prompt for [`FORGET`] has none designated. A replica that fails (ejected, or gone from
//!   DNS) loses its role at the next refresh, and the demand designates another. While one
//!   replica is designated, one [`SWAP`] times as fast takes its place: a cold pool designates by
//!   the priors, which rate every replica alike.
//! - **Expected stall.** A designated replica takes, on average, `prompts per second / designated`
//!   long prompts; when a stream started on it would likely meet one before it ends (at least half
//!   a long prompt within [`STREAM_LIFE`]), its expected stall is the mean long prompt's prefill at
//!   its rate. The placement reads it: a chat prefers a replica that expects none (so a designated
//!   replica takes chats while documents are rare, or when the others cannot meet the targets),
//!   and a long prompt goes only to a designated replica or to one with no stream to stall.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::route::backend::Backend;
use crate::route::members::Members;
use crate::route::series::SloMetrics;

/// How often the designation looks again (at the first placement after it is due).
pub const REFRESH: Duration = Duration::from_millis(250);
/// The time constant of the demand's moving rate: a burst shows within about a second, and a
/// document rate of a few per second is averaged over several.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(2);
/// Designate another replica when the demand exceeds this share of the designated replicas'
/// prefill rate: once the long prompts come faster than they prefill (see the module docs).
pub const HIGH: f64 = 1.0;
/// Let the slowest designated replica go when the demand stays below this share of what the
/// others would give, for [`HOLD`].
pub const LOW: f64 = 0.6;
/// How long the demand must stay low before a designated replica is let go.
pub const HOLD: Duration = Duration::from_secs(5);
/// A pool with no long prompt for this long has no prefill-heavy replica.
pub const FORGET: Duration = Duration::from_secs(30);
/// About a chat's life (150 tokens at 15 ms): what the expected stall looks ahead.
pub const STREAM_LIFE: Duration = Duration::from_secs(2);
/// A stream started on a designated replica is expected to meet a long prompt's prefill when at
/// least this many are expected there within [`STREAM_LIFE`].
const LIKELY: f64 = 0.5;
/// A replica at least this many times as fast as a designated one takes its place ([`swap`]):
/// well past the learned rates' noise between replicas of one kind.
const SWAP: f64 = 1.5;
/// Replicas whose prefill rates are within this factor are equally fast: between them, the one
/// with fewer streams is designated first (fewer chats to stall), the one with more let go first.
const SAME_RATE: f64 = 1.1;

/// One pool's designation.
#[derive(Debug)]
pub struct Designation {
    /// Uncached tokens and count of the long prompts placed since the last refresh.
    pending_tokens: AtomicU64,
    pending_prompts: AtomicU64,
    /// When the next refresh is due, in nanoseconds after `born`.
    due: AtomicU64,
    born: Instant,
    state: Mutex<Demand>,
}

/// The measured demand and the hysteresis' memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Demand {
    refreshed: Option<Instant>,
    /// Uncached prompt tokens and long prompts per second.
    pub tokens: f64,
    pub prompts: f64,
    last_long: Option<Instant>,
    low_since: Option<Instant>,
}

/// One available backend as the designation weighs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Replica {
    /// Prompt tokens per second it prefills.
    pub rate: f64,
    pub streams: u64,
    /// Prefill-heavy: before the step, as it was; after, as it is now.
    pub heavy: bool,
    /// The stall a stream started on it is expected to meet (set by the step).
    pub expected_stall: Duration,
}

impl Designation {
    pub fn new() -> Self {
        Self {
            pending_tokens: AtomicU64::new(0),
            pending_prompts: AtomicU64::new(0),
            due: AtomicU64::new(0),
            born: Instant::now(),
            state: Mutex::new(Demand::default()),
        }
    }

    /// A long prompt of `uncached` tokens was placed.
    pub fn long_prompt(&self, uncached: u64) {
        self.pending_tokens.fetch_add(uncached, Ordering::Relaxed);
        self.pending_prompts.fetch_add(1, Ordering::Relaxed);
    }

    /// Designates `pool`'s prefill-heavy replicas again when a refresh is due at `now`: one
    /// relaxed load otherwise. A refresh another placement holds is not waited for.
    pub(crate) fn refresh(&self, pool: &Members, now: Instant, metrics: Option<&SloMetrics>) {
        let at = self.nanos(now);
        let due = self.due.load(Ordering::Relaxed);
        if at < due {
            return;
        }
        if self
            .due
            .compare_exchange(
                due,
                at + nanos(REFRESH),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return;
        }
        let Ok(mut demand) = self.state.try_lock() else {
            return;
        };
        let tokens = self.pending_tokens.swap(0, Ordering::Relaxed);
        let prompts = self.pending_prompts.swap(0, Ordering::Relaxed);
        demand.measure(now, tokens, prompts);
        let backends = pool.backends();
        let mut replicas = Vec::with_capacity(backends.len());
        let mut available = Vec::with_capacity(backends.len());
        for backend in backends.iter() {
            let role = backend.role();
            if backend.available(now) {
                available.push(backend);
                replicas.push(Replica {
                    rate: backend.prefill_rate(),
                    streams: backend.streams(),
                    heavy: role.prefill_heavy(),
                    expected_stall: Duration::ZERO,
                });
            } else if role.prefill_heavy() {
                moved(backend, false, &demand, metrics);
                backend.designate(false, Duration::ZERO);
            }
        }
        let before: Vec<bool> = replicas.iter().map(|r| r.heavy).collect();
        demand.step(&mut replicas, now);
        if let Some(m) = metrics {
            m.demand.set(demand.tokens);
        }
        for ((backend, replica), was) in available.iter().zip(&replicas).zip(before) {
            if replica.heavy != was {
                moved(backend, replica.heavy, &demand, metrics);
            }
            backend.designate(replica.heavy, replica.expected_stall);
        }
    }

    /// The demand as last measured.
    #[cfg(test)]
    pub(crate) fn demand(&self) -> Demand {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn nanos(&self, at: Instant) -> u64 {
        nanos(at.saturating_duration_since(self.born))
    }
}

impl Default for Designation {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts and logs one replica's move in or out.
fn moved(backend: &Backend, heavy: bool, demand: &Demand, metrics: Option<&SloMetrics>) {
    if let Some(m) = metrics {
        m.moves[usize::from(!heavy)].increment(1);
    }
    tracing::info!(
        pool = &*backend.pool,
        backend = &*backend.target.label,
        prefill_heavy = heavy,
        demand_tokens_per_second = demand.tokens.round(),
        "prefill-heavy replicas changed"
    );
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Demand {
    /// Folds `tokens` uncached tokens of `prompts` long prompts placed since the last refresh into
    /// the moving rates.
    pub(crate) fn measure(&mut self, now: Instant, tokens: u64, prompts: u64) {
        if prompts > 0 {
            self.last_long = Some(now);
        }
        let Some(last) = self.refreshed.replace(now) else {
            // The first look: the pending prompts came over an unknown span; take one window.
            let window = DEMAND_WINDOW.as_secs_f64();
            self.tokens = tokens as f64 / window;
            self.prompts = prompts as f64 / window;
            return;
        };
        let span = now.saturating_duration_since(last).as_secs_f64();
        if span <= 0.0 {
            return;
        }
        let kept = (-span / DEMAND_WINDOW.as_secs_f64()).exp();
        self.tokens = self.tokens * kept + tokens as f64 / span * (1.0 - kept);
        self.prompts = self.prompts * kept + prompts as f64 / span * (1.0 - kept);
    }

    /// Designates among the available `replicas` (see the module docs) and sets each one's
    /// expected stall.
    pub(crate) fn step(&mut self, replicas: &mut [Replica], now: Instant) {
        let most = replicas.len().saturating_sub(1);
        let forgotten = self
            .last_long
            .map_or(true, |at| now.saturating_duration_since(at) > FORGET);
        if forgotten || most == 0 {
            for replica in replicas.iter_mut() {
                replica.heavy = false;
                replica.expected_stall = Duration::ZERO;
            }
            self.low_since = None;
            return;
        }
        while heavy(replicas) > most {
            let Some(weakest) = weakest(replicas) else {
                break;
            };
            replicas[weakest].heavy = false;
        }
        if heavy(replicas) == 0 {
            if let Some(strongest) = strongest(replicas) {
                replicas[strongest].heavy = true;
            }
        }
        while heavy(replicas) < most && self.tokens > HIGH * capacity(replicas) {
            let short = self.tokens / HIGH - capacity(replicas);
            let Some(next) = sufficient(replicas, short).or_else(|| strongest(replicas)) else {
                break;
            };
            replicas[next].heavy = true;
            self.low_since = None;
        }
        self.let_go(replicas, now);
        swap(replicas);
        self.expect(replicas);
    }

    /// Lets the slowest designated replica go once the demand has stayed below [`LOW`] of what
    /// the others give for [`HOLD`].
    fn let_go(&mut self, replicas: &mut [Replica], now: Instant) {
        let weakest = match weakest(replicas) {
            Some(weakest) if heavy(replicas) > 1 => weakest,
            _ => {
                self.low_since = None;
                return;
            }
        };
        let rest = capacity(replicas) - replicas[weakest].rate;
        if self.tokens >= LOW * rest {
            self.low_since = None;
            return;
        }
        let since = *self.low_since.get_or_insert(now);
        if now.saturating_duration_since(since) >= HOLD {
            replicas[weakest].heavy = false;
            self.low_since = None;
        }
    }

    /// Sets each replica's expected stall: the mean long prompt's prefill at its rate, on a
    /// designated replica likely to take one within a stream's life.
    fn expect(&self, replicas: &mut [Replica]) {
        let designated = heavy(replicas);
        let likely = designated > 0
            && self.prompts / designated as f64 * STREAM_LIFE.as_secs_f64() >= LIKELY;
        let mean = if self.prompts > 0.0 {
            self.tokens / self.prompts
        } else {
            0.0
        };
        for replica in replicas.iter_mut() {
            replica.expected_stall = if replica.heavy && likely && replica.rate > 0.0 {
                Duration::try_from_secs_f64(mean / replica.rate).unwrap_or(Duration::MAX)
            } else {
                Duration::ZERO
            };
        }
    }
}

/// Trades the slowest designated replica for the fastest other one when that is at least
/// [`SWAP`] times as fast: a cold pool designates by the priors, which rate every replica alike,
/// and a replica that slowed down (a noisy neighbour) should not keep the documents.
fn swap(replicas: &mut [Replica]) {
    if heavy(replicas) != 1 {
        return;
    }
    let (Some(weakest), Some(strongest)) = (weakest(replicas), strongest(replicas)) else {
        return;
    };
    if replicas[strongest].rate >= SWAP * replicas[weakest].rate {
        replicas[weakest].heavy = false;
        replicas[strongest].heavy = true;
    }
}

fn heavy(replicas: &[Replica]) -> usize {
    replicas.iter().filter(|r| r.heavy).count()
}

/// The designated replicas' prefill rate, tokens per second.
fn capacity(replicas: &[Replica]) -> f64 {
    replicas.iter().filter(|r| r.heavy).map(|r| r.rate).sum()
}

/// The slowest replica not designated that prefills `short` tokens per second, the fewest
/// streams between equals: what covers the demand and takes the least from the chats.
fn sufficient(replicas: &[Replica], short: f64) -> Option<usize> {
    replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.heavy && r.rate >= short)
        .min_by(|(_, a), (_, b)| a.rate.total_cmp(&b.rate).then(a.streams.cmp(&b.streams)))
        .map(|(k, _)| k)
}

/// The replica to designate next: among the fastest not designated (within [`SAME_RATE`]), the
/// one with the fewest streams.
fn strongest(replicas: &[Replica]) -> Option<usize> {
    let fastest = replicas
        .iter()
        .filter(|r| !r.heavy)
        .map(|r| r.rate)
        .fold(f64::NAN, f64::max);
    replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.heavy && r.rate * SAME_RATE >= fastest)
        .min_by_key(|(_, r)| r.streams)
        .map(|(k, _)| k)
}

/// The designated replica to let go first: among the slowest designated (within
/// [`SAME_RATE`]), the one with the most streams (it already serves chats).
fn weakest(replicas: &[Replica]) -> Option<usize> {
    let slowest = replicas
        .iter()
        .filter(|r| r.heavy)
        .map(|r| r.rate)
        .fold(f64::NAN, f64::min);
    replicas
        .iter()
        .enumerate()
        .filter(|(_, r)| r.heavy && r.rate <= slowest * SAME_RATE)
        .max_by_key(|(_, r)| r.streams)
        .map(|(k, _)| k)
}

#[cfg(test)]
mod tests;
