//! The measured demand of a pool's designation (its moving rates), the step that designates from
//! it, and its thresholds; the reasons are the parent module's docs.
use std::time::Duration;

use tokio::time::Instant;

use super::pick::{
    capacity, chat_capacity, first, heavy, sufficient, swap, trade_down, weakest, Replica,
};

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
/// least this many are expected there within [`STREAM_LIFE`]: about a one-in-ten chance, which
/// is worth a chat's going to a replica with none expected, as long as that one meets its targets.
pub const LIKELY: f64 = 0.1;
/// The time constant of the slower rate of long prompts the expected stall also reads: long
/// enough to see one document every 20 s, as [`FORGET`] is.
pub const SPARSE_WINDOW: Duration = Duration::from_secs(30);
/// Another replica is designated only while the replicas left to the chats keep at least this
/// share of their prefill rate free of the chats' own prompts: each chat's prefill lengthens the
/// decode step it joins, so a replica that spends a share `u` of its time prefilling decodes at
/// about `1 / (1 − u)` times its idle step. At a half, the half-speed replicas of the simulated
/// fleet (a 20 ms step) reach the 35 ms TPOT target. (Counted as they arrive with no such bound,
/// the documents at 32 requests/s took three replicas of four, and the one left to the chats
/// served 2 796 of them: goodput fell from 34.0 to 24.9 requests/s, docs/routing.md.)
pub const CHAT_SHARE: f64 = 0.5;
/// Another replica is designated only while at most this share of the chats placed could not be
/// placed at once on a replica predicted to meet their targets (they waited in the gate, or
/// were placed predicted to miss); past it for [`HOLD`], the slowest designated replica goes back
/// to the chats. The prefill rate does not see decode: in one run at 32 requests/s on the
/// simulated fleet the designation took both fast replicas (the fallback then was the fastest
/// left), the chats' prompts fit half the prefill rate of the two half-speed ones, so nothing
/// took one back while 29 chats a second waited on them: goodput with the gap counted 4.4
/// requests/s (docs/routing.md). In the runs since (16 to 44 requests/s) the share stayed at
/// most 4.2 %.
pub const CHAT_MISSES: f64 = 0.05;

/// The measured demand and the hysteresis' memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Demand {
    pub(super) refreshed: Option<Instant>,
    /// Uncached prompt tokens and long prompts per second.
    pub tokens: f64,
    pub prompts: f64,
    /// Uncached prompt tokens per second of the other prompts (the chats').
    pub chat_tokens: f64,
    /// The other prompts placed per second, and the chats per second that could not be placed
    /// at once within their targets.
    pub chats: f64,
    pub chat_misses: f64,
    /// Long prompts per second over [`SPARSE_WINDOW`], and the weight its looks so far carry (it
    /// starts from nothing: until a window has passed, the rate is this over that weight).
    pub(super) sparse_prompts: f64,
    pub(super) sparse_weight: f64,
    pub(super) last_long: Option<Instant>,
    pub(super) low_since: Option<Instant>,
    /// When a trade last moved a role ([`swap`], [`trade_down`]): the next waits [`HOLD`].
    pub(super) traded_at: Option<Instant>,
}

/// The other prompts since the last refresh: their uncached tokens, how many were placed, and
/// how many chats could not be placed at once within their targets.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Chats {
    pub tokens: u64,
    pub placed: u64,
    pub missed: u64,
}

impl Demand {
    /// Folds `tokens` uncached tokens of `prompts` long prompts offered since the last refresh,
    /// and the `chats`, into the moving rates.
    pub(crate) fn measure(&mut self, now: Instant, tokens: u64, prompts: u64, chats: Chats) {
        if prompts > 0 {
            self.last_long = Some(now);
        }
        let Some(last) = self.refreshed.replace(now) else {
            // The first look: the pending prompts came over an unknown span; take one window.
            let window = DEMAND_WINDOW.as_secs_f64();
            let rate = |count: u64| count as f64 / window;
            self.tokens = rate(tokens);
            self.prompts = rate(prompts);
            self.chat_tokens = rate(chats.tokens);
            self.chats = rate(chats.placed);
            self.chat_misses = rate(chats.missed);
            self.sparse_weight = 1.0 - (-window / SPARSE_WINDOW.as_secs_f64()).exp();
            self.sparse_prompts = self.prompts * self.sparse_weight;
            return;
        };
        let span = now.saturating_duration_since(last).as_secs_f64();
        if span <= 0.0 {
            return;
        }
        let kept = (-span / DEMAND_WINDOW.as_secs_f64()).exp();
        let fold = |rate: f64, count: u64| rate * kept + count as f64 / span * (1.0 - kept);
        self.tokens = fold(self.tokens, tokens);
        self.prompts = fold(self.prompts, prompts);
        self.chat_tokens = fold(self.chat_tokens, chats.tokens);
        self.chats = fold(self.chats, chats.placed);
        self.chat_misses = fold(self.chat_misses, chats.missed);
        let kept = (-span / SPARSE_WINDOW.as_secs_f64()).exp();
        self.sparse_prompts = self.sparse_prompts * kept + prompts as f64 / span * (1.0 - kept);
        self.sparse_weight = self.sparse_weight * kept + (1.0 - kept);
    }

    /// Long prompts per second over [`SPARSE_WINDOW`] (over the time measured, while that is
    /// shorter).
    pub(crate) fn sparse_prompts(&self) -> f64 {
        if self.sparse_weight > 0.0 {
            self.sparse_prompts / self.sparse_weight
        } else {
            0.0
        }
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
            if let Some(first) = first(replicas) {
                replicas[first].heavy = true;
            }
        }
        while heavy(replicas) < most && self.tokens > HIGH * capacity(replicas) {
            let short = self.tokens / HIGH - capacity(replicas);
            let spare = |r: &Replica| self.chats_fit(chat_capacity(replicas) - r.rate);
            // Short of one that covers it, the slowest: the next refresh adds another while
            // the demand still exceeds them and the chats can spare it.
            let Some(next) =
                sufficient(replicas, short, spare).or_else(|| sufficient(replicas, 0.0, spare))
            else {
                break;
            };
            replicas[next].heavy = true;
            self.low_since = None;
        }
        self.let_go(replicas, now);
        self.trade(replicas, now);
        self.expect(replicas);
    }

    /// Trades one role, at most once per [`HOLD`]: the slowest designated for a replica
    /// [`SWAP`](super::pick::SWAP) times as fast as the fastest designated ([`swap`]), else a
    /// fast one designated besides the fastest for a slower one that still covers the demand
    /// ([`trade_down`]). The rates a trade reads are learned while the roles move the load: a
    /// fast replica taking every document learned a slower rate than an idle one's priors, and
    /// four gateways traded back and forth 16 times in a minute (docs/deploying.md).
    fn trade(&mut self, replicas: &mut [Replica], now: Instant) {
        let resting = self
            .traded_at
            .is_some_and(|at| now.saturating_duration_since(at) < HOLD);
        if resting {
            return;
        }
        if swap(replicas) || trade_down(replicas, self.tokens / HIGH) {
            self.traded_at = Some(now);
        }
    }

    /// Follows a fleet leader's designation, already set on `replicas`: forgets its own
    /// hysteresis (were it to lead next, it starts from the leader's choice) and sets each
    /// replica's expected stall from the demand, which is the fleet's.
    pub(crate) fn led(&mut self, replicas: &mut [Replica]) {
        self.low_since = None;
        self.expect(replicas);
    }

    /// Whether the chats' prompts take at most [`CHAT_SHARE`] of `rate` tokens per second of
    /// prefill, and at most [`CHAT_MISSES`] of them could not be placed at once within their
    /// targets.
    fn chats_fit(&self, rate: f64) -> bool {
        self.chat_tokens <= CHAT_SHARE * rate && self.missed_share() <= CHAT_MISSES
    }

    /// The share of the chats placed lately that could not be placed at once within their
    /// targets.
    pub(crate) fn missed_share(&self) -> f64 {
        if self.chats > 0.0 {
            self.chat_misses / self.chats
        } else {
            0.0
        }
    }

    /// Lets the slowest designated replica go once, for [`HOLD`], the demand has stayed below
    /// [`LOW`] of what the others give, or the chats have taken more than [`CHAT_SHARE`] /
    /// [`LOW`] of their replicas' prefill rate or more than [`CHAT_MISSES`] of them were held:
    /// they need it back.
    fn let_go(&mut self, replicas: &mut [Replica], now: Instant) {
        let weakest = match weakest(replicas) {
            Some(weakest) if heavy(replicas) > 1 => weakest,
            _ => {
                self.low_since = None;
                return;
            }
        };
        let rest = capacity(replicas) - replicas[weakest].rate;
        let crowded = !self.chats_fit(chat_capacity(replicas) / LOW);
        if self.tokens >= LOW * rest && !crowded {
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
        let prompts = self.prompts.max(self.sparse_prompts());
        let likely =
            designated > 0 && prompts / designated as f64 * STREAM_LIFE.as_secs_f64() >= LIKELY;
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
