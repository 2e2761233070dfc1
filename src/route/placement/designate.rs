//! Prefill-heavy replicas chosen by the load: which backends of a `balance = "slo"` pool take its
//! long prompts now.
//!
//! A long prompt is one whose prefill, where it is placed, would stall the streams beside it: one
//! decode step as long as the prefill, past the stall limit (`placement::stall_limit`: three
//! quarters of `[slo] max_gap`, else of four TPOT targets). A static prefill pool keeps such prompts away from the chats and
//! starves them when the documents come faster than its replicas prefill (length routing on the
//! simulated fleet: 60 s document TTFT at 24 requests/s); spreading them over every replica serves
//! them and stalls every chat (the worst chat gap stays at a document's prefill, ~760 ms, at every
//! load). The designation keeps the split and sizes it by the load:
//!
//! - **Demand.** Every long prompt offered adds its uncached tokens ([`Designation::long_prompt`],
//!   two relaxed atomics): as it enters a gated pool's queue, shed or not (counted only once
//!   placed, a burst the designated replicas could not take never showed more than they took),
//!   else as it is placed. Every other prompt placed adds its uncached tokens to the chats'
//!   demand ([`Designation::chat_prompt`], two), and a chat no replica is predicted to serve in
//!   time counts a miss ([`Designation::chat_missed`]: held at a gate, else placed to miss).
//!   Every [`REFRESH`] the first placement folds them into moving rates per second
//!   ([`DEMAND_WINDOW`]).
//! - **Supply.** Each replica prefills at the rate its latency model learned (`1 / a₂`; the
//!   priors' 20 000 tokens/s before it learned one); in a fleet, the rate all the gateways'
//!   models learned together ([`Backend::fleet_prefill_rate`]).
//! - **Designation.** The fastest replica is designated at the first long prompt (between equals,
//!   one already prefilling a long prompt, whose streams meet that stall anyway: in the demo the
//!   first document went to one replica and the designation took the other, and the chats
//!   started on it met the second document). Another is
//!   designated only once the demand exceeds [`HIGH`] (all) of the designated replicas' rate, and
//!   only while the chats can spare it: their prompts would take at most [`CHAT_SHARE`] of the
//!   prefill rate of the replicas left to them, and at most [`CHAT_MISSES`] of them could not be
//!   placed at once within their targets. It is the slowest replica that covers the shortfall,
//!   else the slowest the chats can spare (the next refresh adds another while the demand still
//!   exceeds them): the fast replicas are the last the chats give up. Below that rate their queue
//!   stays bounded, and what waiting there is falls on the long prompts (one request each, held to
//!   1.5 times their own prefill, `LONG_PROMPT_SLACK`) rather than on every chat of a replica taken from the chats; and
//!   the replica added is the one the chats miss least. Measured on the simulated fleet (two
//!   replicas at full speed, two at half, 30 s runs, gated, docs/routing.md): designating at 60 %
//!   of the rate took two fast replicas at 24 requests/s and three at 32, and the chats, left
//!   the rest, met their gap target less often than with no designation at all; at 100 % with the
//!   slowest sufficient replica added, goodput with the gap counted was 23.2 and 32.3 requests/s
//!   against 16.0 and 16.7 with no designation. One is let go (the slowest) only once the
//!   demand has stayed below [`LOW`] of what the rest would give, or the chats above
//!   [`CHAT_SHARE`] / [`LOW`] of their replicas' rate or [`CHAT_MISSES`] of them held, for
//!   [`HOLD`]: a burst designates at once, a lull does not undo it. One replica is always left to the chats; a pool with no
//!   long prompt for [`FORGET`] has none designated. A replica that fails (ejected, or gone from
//!   DNS) loses its role at the next refresh, and the demand designates another. While one
//!   replica is designated, one [`pick::SWAP`] times as fast takes its place: a cold pool designates by
//!   the priors, which rate every replica alike.
//! - **Expected stall.** A designated replica takes, on average, `prompts per second / designated`
//!   long prompts; when a stream started on it may well meet one before it ends (at least
//!   [`LIKELY`] long prompts within [`STREAM_LIFE`]), its expected stall is the mean long prompt's
//!   prefill at its rate. The rate it reads is the larger of the demand's and a slower one
//!   ([`SPARSE_WINDOW`]): documents a few seconds apart leave the 2 s rate near zero between
//!   them, and the chats placed there in the lull met the next one (the demo: 42 of 109 chats on
//!   the designated replica, 12 of them stalled). The placement reads it: a chat prefers a replica that expects none (so a designated
//!   replica takes chats while documents are rare, or when the others cannot meet the targets),
//!   and a long prompt goes only to a designated replica or to one with no stream to stall.
//! - **A fleet** (`[fleet]`). Every gateway replica counts what it offered since it started
//!   ([`Counts`]) and adds what the others offered as their syncs say, so each measures the
//!   fleet's demand; one replica designates and the others [`follow`](Designation::follow) its
//!   choice ([`crate::route::fleet`]), so the fleet keeps one split rather than one per replica.
//!
//! [`DEMAND_WINDOW`]: demand::DEMAND_WINDOW
//! [`HIGH`]: demand::HIGH
//! [`LOW`]: demand::LOW
//! [`HOLD`]: demand::HOLD
//! [`FORGET`]: demand::FORGET
//! [`STREAM_LIFE`]: demand::STREAM_LIFE
//! [`LIKELY`]: demand::LIKELY
//! [`SPARSE_WINDOW`]: demand::SPARSE_WINDOW
//! [`CHAT_SHARE`]: demand::CHAT_SHARE
//! [`CHAT_MISSES`]: demand::CHAT_MISSES
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::route::backend::Backend;
use crate::route::members::Members;
use crate::route::series::SloMetrics;

mod demand;
mod pick;
pub(crate) use demand::{Chats, Demand};
#[cfg(test)]
pub(crate) use demand::{DEMAND_WINDOW, FORGET, LIKELY, STREAM_LIFE};
use pick::Replica;

/// How often the designation looks again (at the first placement after it is due).
pub const REFRESH: Duration = Duration::from_millis(250);
/// One pool's designation.
#[derive(Debug)]
pub struct Designation {
    /// The prompts this replica offered the pool, counted since it started (its fleet reads them
    /// too, `[fleet]`).
    own: Tally,
    /// The prompts the fleet's other gateway replicas offered it, as their syncs said.
    others: Tally,
    /// The fleet's leader's prefill-heavy backends (their labels), while another replica leads:
    /// this one follows them rather than designating its own ([`Designation::follow`]).
    led: Mutex<Option<Vec<String>>>,
    /// When the next refresh is due, in nanoseconds after `born`.
    due: AtomicU64,
    born: Instant,
    state: Mutex<State>,
}

/// The measured demand, and the counts it has folded in so far.
#[derive(Debug, Default)]
struct State {
    demand: Demand,
    folded: Counts,
}

/// Prompts offered to a pool, as counts since a replica started: the uncached tokens and the
/// number of its long prompts, of the other prompts placed, and the chats that could not be
/// placed at once within their targets. Counted since the start rather than since the last
/// look, so that the fleet's replicas can read each other's at any pace and add what moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub tokens: u64,
    pub prompts: u64,
    pub chat_tokens: u64,
    pub chats: u64,
    pub chat_misses: u64,
}

impl Counts {
    fn fields(self) -> [u64; 5] {
        [
            self.tokens,
            self.prompts,
            self.chat_tokens,
            self.chats,
            self.chat_misses,
        ]
    }

    fn from_fields([tokens, prompts, chat_tokens, chats, chat_misses]: [u64; 5]) -> Self {
        Self {
            tokens,
            prompts,
            chat_tokens,
            chats,
            chat_misses,
        }
    }

    /// What moved from `earlier` to `self`; a count that went back (its replica restarted)
    /// moved by all it has.
    pub fn since(self, earlier: Counts) -> Counts {
        let (now, then) = (self.fields(), earlier.fields());
        let back = now.iter().zip(&then).any(|(n, t)| n < t);
        if back {
            return self;
        }
        Self::from_fields(std::array::from_fn(|k| now[k] - then[k]))
    }

    pub fn plus(self, other: Counts) -> Counts {
        let (a, b) = (self.fields(), other.fields());
        Self::from_fields(std::array::from_fn(|k| a[k].saturating_add(b[k])))
    }
}

/// [`Counts`] as atomics, added to on the request path.
#[derive(Debug, Default)]
struct Tally([AtomicU64; 5]);

impl Tally {
    fn add(&self, counts: Counts) {
        for (tally, count) in self.0.iter().zip(counts.fields()) {
            if count > 0 {
                tally.fetch_add(count, Ordering::Relaxed);
            }
        }
    }

    fn load(&self) -> Counts {
        Counts::from_fields(std::array::from_fn(|k| self.0[k].load(Ordering::Relaxed)))
    }
}

impl Designation {
    pub fn new() -> Self {
        Self {
            own: Tally::default(),
            others: Tally::default(),
            led: Mutex::new(None),
            due: AtomicU64::new(0),
            born: Instant::now(),
            state: Mutex::new(State::default()),
        }
    }

    /// A long prompt of `uncached` tokens was offered (entered the gate, or was placed in a pool
    /// without one).
    pub fn long_prompt(&self, uncached: u64) {
        self.own.add(Counts {
            tokens: uncached,
            prompts: 1,
            ..Counts::default()
        });
    }

    /// Another prompt, of `uncached` tokens, was placed.
    pub fn chat_prompt(&self, uncached: u64) {
        self.own.add(Counts {
            chat_tokens: uncached,
            chats: 1,
            ..Counts::default()
        });
    }

    /// A chat could not be placed at once on a replica predicted to meet its targets.
    pub fn chat_missed(&self) {
        self.own.add(Counts {
            chat_misses: 1,
            ..Counts::default()
        });
    }

    /// The prompts this replica offered the pool since it started (what it publishes to its
    /// fleet).
    pub fn own_counts(&self) -> Counts {
        self.own.load()
    }

    /// Adds prompts the fleet's other replicas offered the pool since their last sync: the
    /// next refresh measures the fleet's demand, not this replica's share of it.
    pub fn others_offered(&self, counts: Counts) {
        self.others.add(counts);
    }

    /// Follows the fleet leader's prefill-heavy backends (by label), or (`None`: this replica
    /// leads, or is alone) designates its own from the demand.
    pub fn follow(&self, leader: Option<Vec<String>>) {
        *self.led.lock().unwrap_or_else(PoisonError::into_inner) = leader;
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
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        let offered = self.own.load().plus(self.others.load());
        let counts = offered.since(state.folded);
        state.folded = offered;
        let demand = &mut state.demand;
        let chats = Chats {
            tokens: counts.chat_tokens,
            placed: counts.chats,
            missed: counts.chat_misses,
        };
        demand.measure(now, counts.tokens, counts.prompts, chats);
        tracing::debug!(
            pool = &*pool.name,
            tokens_per_second = demand.tokens.round(),
            chat_tokens_per_second = demand.chat_tokens.round(),
            chats_per_second = demand.chats,
            chats_missed_per_second = demand.chat_misses,
            "prefill demand measured"
        );
        let backends = pool.backends();
        let mut replicas = Vec::with_capacity(backends.len());
        let mut available = Vec::with_capacity(backends.len());
        for backend in backends.iter() {
            let role = backend.role();
            if backend.available(now) {
                available.push(backend);
                let rate = backend.fleet_prefill_rate();
                backend.show_prefill_rate(rate);
                replicas.push(Replica {
                    rate,
                    streams: backend.streams(),
                    prefilling: backend.stalling(now),
                    heavy: role.prefill_heavy(),
                    expected_stall: Duration::ZERO,
                });
            } else if role.prefill_heavy() {
                moved(backend, false, demand, metrics);
                backend.designate(false, Duration::ZERO);
            }
        }
        let before: Vec<bool> = replicas.iter().map(|r| r.heavy).collect();
        match &*self.led.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(leader) => {
                for (replica, backend) in replicas.iter_mut().zip(&available) {
                    replica.heavy = leader.iter().any(|label| **label == *backend.target.label);
                }
                demand.led(&mut replicas);
            }
            None => demand.step(&mut replicas, now),
        }
        if let Some(m) = metrics {
            m.demand.set(demand.tokens);
        }
        for ((backend, replica), was) in available.iter().zip(&replicas).zip(before) {
            if replica.heavy != was {
                moved(backend, replica.heavy, demand, metrics);
            }
            backend.designate(replica.heavy, replica.expected_stall);
        }
    }

    /// The demand as last measured.
    #[cfg(test)]
    pub(crate) fn demand(&self) -> Demand {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .demand
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
        chat_tokens_per_second = demand.chat_tokens.round(),
        chats_missed = format_args!("{:.1} %", 100.0 * demand.missed_share()),
        "prefill-heavy replicas changed"
    );
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
