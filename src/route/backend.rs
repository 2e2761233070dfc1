//! One backend of a pool: its load (streams in flight, prompt tokens queued), its health and
//! ejections, and the guard that holds a request's load on it until the response ends.
//!
//! Long on purpose: every router path reads one backend's state through this one struct (load,
//! the fleet's share of it, health, latency model, role), and each part is a few atomics with
//! the accessors that read them together.
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::health::{EjectPolicy, Fault, Health, Verdict};
use super::series::BackendMetrics;
use crate::config::BalanceLoad;
use crate::metrics::Metrics;
use crate::upstream::Target;
use news::News;
use others::Others;
use predict::{Ask, LatencyModel, Load, Outcome, Predicted};
use role::Role;

mod guard;
mod news;
mod others;
pub mod predict;
pub mod role;

pub use guard::LoadGuard;

/// A backend as the prefix index names it: its id and its ejection epoch at the time. An entry
/// whose backend has left the pool, or has been ejected since (its epoch moved on), is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub backend: u32,
    pub epoch: u32,
}

/// Ids of backends, unique in the process (the prefix index names owners by them).
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// One backend of one pool.
#[derive(Debug)]
pub struct Backend {
    pub target: Target,
    pub pool: Arc<str>,
    id: u32,
    /// Ejections so far: prefix index entries written before the last one are dead.
    epoch: AtomicU32,
    /// Requests whose response stream has not ended.
    streams: AtomicU64,
    /// Estimated prompt tokens of requests not yet past their first response byte, less the
    /// share its prompt cache held where the placement knew it (`balance = "slo"`, a remote
    /// prefill): the prefill work queued.
    queued_tokens: AtomicU64,
    health: Mutex<Health>,
    /// The load the fleet's other gateway replicas put on it, as the store last said
    /// (`[fleet]`; none without one).
    others: Others,
    /// Whether its load changed since this replica last told its fleet (`[fleet]` news).
    news: News,
    /// Scraped `vllm:num_requests_waiting` (or the engine's like of it).
    waiting: AtomicU64,
    /// Scraped `vllm:num_requests_running` (or the engine's like of it): with `waiting`, a floor
    /// under the streams in flight the fleet's view counts.
    running: AtomicU64,
    /// Scraped `vllm:kv_cache_usage_perc`, as `f64` bits.
    kv_usage: AtomicU64,
    /// A health check asked for by a run of answer failures is under way.
    checking: AtomicBool,
    /// The backend answered `/tokenize` with "no such endpoint": never asked again.
    no_tokenize: AtomicBool,
    /// Its latency model, once a request placed by prediction finished on it (`balance = "slo"`).
    latency: Mutex<Option<LatencyModel>>,
    /// Until when a long prefill placed on it stalls its streams, in nanoseconds after `born`
    /// (`balance = "slo"`; 0: never).
    stalls_until: AtomicU64,
    /// When its latency model last learned, in nanoseconds after `born` (0: never).
    taught_at: AtomicU64,
    /// When its prefill queue last moved, in nanoseconds after `born` (0: never): a queued
    /// request reached its first response byte, or one joined an empty queue. Since then the
    /// backend has been prefilling the queue's head ([`Backend::load`]).
    moved_at: AtomicU64,
    /// Whether it is one of the pool's prefill-heavy replicas now (`balance = "slo"`).
    role: Role,
    born: Instant,
    metrics: Option<BackendMetrics>,
}

impl Backend {
    pub fn new(target: Target, pool: Arc<str>, metrics: Option<&Metrics>) -> Self {
        let metrics = metrics.map(|m| BackendMetrics::new(m, &pool, &target.label));
        if let Some(m) = &metrics {
            m.healthy.set(1.0);
        }
        Self {
            target,
            pool,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            epoch: AtomicU32::new(0),
            streams: AtomicU64::new(0),
            queued_tokens: AtomicU64::new(0),
            health: Mutex::new(Health::default()),
            others: Others::default(),
            news: News::default(),
            waiting: AtomicU64::new(0),
            running: AtomicU64::new(0),
            kv_usage: AtomicU64::new(0f64.to_bits()),
            checking: AtomicBool::new(false),
            no_tokenize: AtomicBool::new(false),
            latency: Mutex::new(None),
            stalls_until: AtomicU64::new(0),
            taught_at: AtomicU64::new(0),
            moved_at: AtomicU64::new(0),
            role: Role::default(),
            born: Instant::now(),
            metrics,
        }
    }

    /// Whether the backend takes traffic now (and the `healthy` gauge says so).
    pub fn available(&self, now: Instant) -> bool {
        let available = self.lock_health().available(now);
        if let Some(m) = &self.metrics {
            m.healthy.set(if available { 1.0 } else { 0.0 });
        }
        available
    }

    /// The backend as a prefix index owner: its id and current ejection epoch.
    pub fn owner(&self) -> Owner {
        Owner {
            backend: self.id,
            epoch: self.epoch.load(Ordering::Relaxed),
        }
    }

    /// Its streams in flight. In a fleet (`[fleet]`), the whole fleet's: this replica's and
    /// the other replicas' as last read, and at least what the engine last said it runs and
    /// queues (when its `/metrics` are scraped: so with the store down, the engine's gauges
    /// still carry the others' load). Alone, this replica's.
    pub fn streams(&self) -> u64 {
        let own = self.own_streams();
        if !self.others.joined() {
            return own;
        }
        let fleet = own.saturating_add(self.others.streams());
        let engine = self
            .running
            .load(Ordering::Relaxed)
            .saturating_add(self.waiting.load(Ordering::Relaxed));
        fleet.max(engine)
    }

    /// The streams in flight this replica sent.
    pub fn own_streams(&self) -> u64 {
        self.streams.load(Ordering::Relaxed)
    }

    /// Its prompt tokens queued, this replica's and the others' as last read.
    pub fn queued_tokens(&self) -> u64 {
        self.own_queued_tokens()
            .saturating_add(self.others.queued().0)
    }

    fn own_queued_tokens(&self) -> u64 {
        self.queued_tokens.load(Ordering::Relaxed)
    }

    /// Takes the other replicas' load on it, read at `at` (the fleet's sync), and how much
    /// longer a long prefill one of them placed there stalls its streams.
    pub fn set_others(&self, streams: u64, queued_tokens: u64, at: Instant, stall: Duration) {
        let stalls_until = if stall.is_zero() {
            0
        } else {
            self.nanos(at + stall)
        };
        self.others
            .set(streams, queued_tokens, self.nanos(at), stalls_until);
    }

    /// Its load at `now`, as its latency model weighs it: the streams in flight, and the prefill
    /// work queued less what it has done of it since the queue last moved, at its learned prefill
    /// rate.
    ///
    /// The queue counts a request's prompt whole until its first token, yet a backend works
    /// through it as it waits: a 10 000-token document sent 300 ms ago to a replica that prefills
    /// 20 000 tokens/s is 6 000 tokens into its prefill. Counted whole, the queue looked longest
    /// just as it was about to clear, and predictions past capacity were 1.1-1.2x too slow at the
    /// median. Draining it this way took the median absolute error of the simulated fleet at
    /// 32 requests/s from 22 % to 17 % (a replay of one run's placements, docs/routing.md).
    ///
    /// With a fleet (`[fleet]`), the other replicas' streams and queue are added, their queue
    /// drained the same way since it was read; and the streams are at least what the engine
    /// reports running and waiting.
    pub fn load(&self, now: Instant) -> Load {
        let (own, busy) = self.own_queue(now);
        let (others, at) = self.others.queued();
        let since = match at {
            0 => Duration::ZERO,
            at => Duration::from_nanos(self.nanos(now).saturating_sub(at)),
        };
        let [own_done, others_done] = self.prefilled_in([busy, since]);
        Load {
            queued_tokens: own
                .saturating_sub(own_done)
                .saturating_add(others.saturating_sub(others_done)),
            streams: self.streams(),
        }
    }

    /// Its load at `now` from this replica's requests alone (what it publishes to its fleet).
    pub fn own_load(&self, now: Instant) -> Load {
        let (queued, busy) = self.own_queue(now);
        let [done] = self.prefilled_in([busy]);
        Load {
            queued_tokens: queued.saturating_sub(done),
            streams: self.own_streams(),
        }
    }

    /// This replica's prompt tokens queued, and how long the backend has been prefilling them
    /// since the queue last moved.
    fn own_queue(&self, now: Instant) -> (u64, Duration) {
        let queued = self.own_queued_tokens();
        let moved = self.moved_at.load(Ordering::Relaxed);
        let busy = if queued == 0 || moved == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.nanos(now).saturating_sub(moved))
        };
        (queued, busy)
    }

    /// The prompt tokens it prefills in each of `busy`, at its learned rate (the priors' before
    /// it has learned one); its model locked once, and not at all when there is nothing to drain.
    fn prefilled_in<const N: usize>(&self, busy: [Duration; N]) -> [u64; N] {
        if busy.iter().all(Duration::is_zero) {
            return [0; N];
        }
        let model = self.lock_latency();
        busy.map(|busy| match model.as_ref() {
            Some(model) => model.prefilled_in(busy),
            None => LatencyModel::new(2).prefilled_in(busy),
        })
    }

    /// Says that its prefill queue moved at `at` (see `moved_at`).
    fn queue_moved(&self, at: Instant) {
        self.moved_at.store(self.nanos(at), Ordering::Relaxed);
    }

    /// The load power-of-two-choices compares, weighted by scraped gauges when there are any: a
    /// backend with a queue or a full KV cache looks proportionally busier.
    pub fn score(&self, kind: BalanceLoad) -> f64 {
        let load = match kind {
            BalanceLoad::PromptTokens => self.queued_tokens() as f64,
            // `Auto` is resolved before a pool is built; were it not, streams is its fallback.
            BalanceLoad::Auto
            | BalanceLoad::Streams
            | BalanceLoad::RoundRobin
            | BalanceLoad::Slo => self.streams() as f64,
        };
        let waiting = self.waiting.load(Ordering::Relaxed) as f64;
        let kv = f64::from_bits(self.kv_usage.load(Ordering::Relaxed));
        (load + 1.0) * (1.0 + waiting) * (1.0 + kv)
    }

    /// What a request asking `ask` of this backend under `load` is predicted to see: its latency
    /// model's prediction, or the priors' before it has one.
    pub fn predict(&self, load: Load, ask: Ask) -> Predicted {
        match self.lock_latency().as_ref() {
            Some(model) => model.predict(load, ask),
            None => Self::predict_by_priors(load, ask),
        }
    }

    /// What the priors predict, whatever the backend's model learned ([`LatencyModel::new`]).
    pub(crate) fn predict_by_priors(load: Load, ask: Ask) -> Predicted {
        LatencyModel::new(2).predict(load, ask)
    }

    /// The prompt tokens per second it prefills, as its latency model learned (the priors'
    /// before it has one).
    pub fn prefill_rate(&self) -> f64 {
        match self.lock_latency().as_ref() {
            Some(model) => model.prefill_rate(),
            None => LatencyModel::new(2).prefill_rate(),
        }
    }

    /// The prompt tokens per second it prefills as its fleet learned it (`[fleet]`): the mean of
    /// every replica's learned cost per token, each weighted by its precision (what a fit of
    /// independent samples would give; [`LatencyModel::prefill_cost`]). A gateway of four sees a
    /// quarter of the requests, and its rates were that much noisier (a half-speed replica read
    /// 5 900 to 36 500 tokens/s on four gateways at the end of one run, docs/deploying.md); the
    /// designation reads this one. Alone, [`Self::prefill_rate`].
    pub fn fleet_prefill_rate(&self) -> f64 {
        let (others, others_weight) = self.others.prefill_cost();
        if others_weight <= 0.0 {
            return self.prefill_rate();
        }
        let (own, own_weight) = self
            .lock_latency()
            .as_ref()
            .and_then(LatencyModel::prefill_cost)
            .unwrap_or((0.0, 0.0));
        let weight = others_weight + own_weight;
        let cost = (others + own * own_weight) / weight;
        if cost > 0.0 {
            1000.0 / cost
        } else {
            self.prefill_rate()
        }
    }

    /// What this replica's model learned of its prefill cost (seconds per thousand prompt tokens)
    /// and its precision; what it publishes to its fleet.
    pub(crate) fn own_prefill_cost(&self) -> Option<(f64, f64)> {
        self.lock_latency()
            .as_ref()
            .and_then(LatencyModel::prefill_cost)
    }

    /// Takes the other replicas' prefill cost (see [`Self::fleet_prefill_rate`]).
    pub fn set_others_prefill_cost(&self, weighted: f64, weight: f64) {
        self.others.set_prefill_cost(weighted, weight);
    }

    /// Its role in the pool's placement now.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// Makes it one of the pool's prefill-heavy replicas, or not, expecting streams started on
    /// it to meet `expected_stall` (see [`Role`]); the gauge follows.
    pub(crate) fn designate(&self, prefill_heavy: bool, expected_stall: Duration) {
        let changed = self.role.set(prefill_heavy, expected_stall);
        if let (true, Some(m)) = (changed, &self.metrics) {
            m.prefill_heavy.set(if prefill_heavy { 1.0 } else { 0.0 });
        }
    }

    /// Says the prefill rate the designation read of it (the gauge).
    pub(crate) fn show_prefill_rate(&self, rate: f64) {
        if let Some(m) = &self.metrics {
            m.prefill_rate.set(rate);
        }
    }

    /// Requests its latency model learned from.
    pub fn learned(&self) -> u64 {
        self.lock_latency()
            .as_ref()
            .map_or(0, LatencyModel::samples)
    }

    /// What `read` makes of its latency model; `None` before it has one.
    pub(crate) fn read_model<R>(&self, read: impl FnOnce(&LatencyModel) -> R) -> Option<R> {
        self.lock_latency().as_ref().map(read)
    }

    /// Learns what a request placed on it with `load` and `ask` took; a model of another
    /// `memory` (a reload changed it) starts again from the priors.
    pub fn learn(&self, memory: u32, load: Load, ask: Ask, outcome: Outcome) {
        let mut latency = self.lock_latency();
        let model = match latency.as_mut() {
            Some(model) if model.memory() == memory => model,
            _ => latency.insert(LatencyModel::new(memory)),
        };
        model.learn(load, ask, outcome);
        drop(latency);
        self.taught_at
            .store(self.nanos(Instant::now()), Ordering::Relaxed);
    }

    /// How long ago its latency model last learned at `now`; `None` before it ever did.
    pub(crate) fn taught_ago(&self, now: Instant) -> Option<Duration> {
        let at = self.taught_at.load(Ordering::Relaxed);
        (at != 0).then(|| Duration::from_nanos(self.nanos(now).saturating_sub(at)))
    }

    /// `at` in nanoseconds after `born`, at least 1 (0 means never).
    fn nanos(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.born).as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
    }

    /// Says that a prefill placed on it stalls the streams beside it until `until`.
    pub(crate) fn stall_until(&self, until: Instant) {
        self.stalls_until
            .fetch_max(self.nanos(until), Ordering::Relaxed);
        self.news.mark();
    }

    /// Wakes `desk` whenever this replica places a request on it, for the fleet's news.
    pub(crate) fn attach_news(&self, desk: &Arc<tokio::sync::Notify>) {
        self.news.attach(desk);
    }

    /// Whether this replica placed a request on it, or marked it stalling, since the last call
    /// (the fleet's news tell the others).
    pub(crate) fn take_news(&self) -> bool {
        self.news.take()
    }

    /// Whether a long prefill placed on it, by this replica or (`[fleet]`) another, may still
    /// stall a stream that starts at `now`.
    pub(crate) fn stalling(&self, now: Instant) -> bool {
        let until = self
            .stalls_until
            .load(Ordering::Relaxed)
            .max(self.others.stalls_until());
        until != 0 && until > self.nanos(now)
    }

    /// How much longer after `now` a long prefill this replica placed on it stalls its streams
    /// (what it publishes to its fleet; the others' marks are theirs to publish).
    pub(crate) fn own_stall_left(&self, now: Instant) -> Duration {
        let until = self.stalls_until.load(Ordering::Relaxed);
        Duration::from_nanos(until.saturating_sub(self.nanos(now)))
    }

    fn lock_latency(&self) -> std::sync::MutexGuard<'_, Option<LatencyModel>> {
        self.latency
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records scraped gauges.
    pub(crate) fn set_scraped(&self, running: u64, waiting: u64, kv_usage: f64) {
        self.running.store(running, Ordering::Relaxed);
        self.waiting.store(waiting, Ordering::Relaxed);
        self.kv_usage.store(kv_usage.to_bits(), Ordering::Relaxed);
    }

    pub(crate) fn on_success(&self) {
        self.lock_health().on_success();
    }

    /// A failed request; see [`Verdict`] for what the caller must do with `Confirm`.
    pub(crate) fn on_failure(&self, now: Instant, policy: &EjectPolicy, fault: Fault) -> Verdict {
        let verdict = self.lock_health().on_failure(now, policy, fault);
        if let Verdict::Ejected(length) = verdict {
            self.ejected(length);
        }
        verdict
    }

    /// Claims the one confirming health check a backend may have under way; `false` when one
    /// already is. Released by [`Self::end_check`].
    pub(crate) fn start_check(&self) -> bool {
        !self.checking.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn end_check(&self) {
        self.checking.store(false, Ordering::Release);
    }

    /// Counts the result of a confirming health check (see [`super::probe::confirm`]).
    pub fn confirmed(&self, result: Confirmation) {
        if let Some(m) = &self.metrics {
            m.confirmations[result as usize].increment(1);
        }
    }

    /// Whether `/tokenize` may be asked of this backend.
    pub fn tokenizes(&self) -> bool {
        !self.no_tokenize.load(Ordering::Relaxed)
    }

    /// The backend has no `/tokenize`.
    pub(crate) fn no_tokenize(&self) {
        self.no_tokenize.store(true, Ordering::Relaxed);
    }

    /// A failed active check: eject now (unless already ejected).
    pub fn eject(&self, now: Instant, policy: &EjectPolicy) {
        let mut health = self.lock_health();
        if health.available(now) {
            let length = health.eject(now, policy);
            drop(health);
            self.ejected(length);
        }
    }

    fn ejected(&self, length: Duration) {
        // Whatever the backend cached may be gone (a restart) and it takes no traffic now: its
        // prefix index entries die with this epoch.
        self.epoch.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            pool = &*self.pool,
            backend = &*self.target.label,
            seconds = length.as_secs_f64(),
            "backend ejected"
        );
        if let Some(m) = &self.metrics {
            m.healthy.set(0.0);
            m.ejections.increment(1);
        }
    }

    /// Counts a retry away from this backend.
    pub fn retried(&self) {
        if let Some(m) = &self.metrics {
            m.retries.increment(1);
        }
    }

    fn lock_health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a confirming health check found (the order of [`BackendMetrics::confirmations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// The check passed: the failed answers were the requests' doing.
    Kept = 0,
    /// The check failed too: ejected.
    Ejected = 1,
    /// The backend has no health endpoint: kept, answers alone never eject.
    Unavailable = 2,
}

#[cfg(test)]
mod tests;
