//! `balance = "slo"`: latency-predicting placement.
//!
//! Long on purpose: about seventy lines of module docs are the placement's design and its
//! measurements; the code is one choice (`choose`) and its scoring.
//!
//! Power of two choices on streams in flight treats every backend as equally fast and every
//! request as equally heavy; length rules treat every prefill pool as free. Neither sees that a
//! backend is slow today, that a document queued on it will hold back the next chat's first token
//! for half a second, or that its prompt cache already holds most of this conversation. A pool
//! with `balance = "slo"` asks each healthy backend's latency model ([`super::backend::predict`]) instead:
//!
//! - its predicted TTFT for this request: the time the request has already spent in the proxy,
//!   plus the prefill work queued on the backend and the request's own, less what the backend's
//!   prompt cache is known to hold (the pool's prefix index, with `affinity = "prefix"`: affinity
//!   is a term of the prediction here, not a preference), at the backend's measured rate;
//! - its predicted TPOT there, which is also what the streams already on the backend will see
//!   once its prefill joins their batch.
//!
//! A request is held to its own targets: its class's or its model's (`[slo.classes]`,
//! `[slo.models]`), else the `[slo]` defaults. A backend **fits** when its predicted TPOT is
//! within the tpot target: the request would not push the streams there past it. Among the
//! backends that fit, the request goes to the one with the most TTFT **headroom**,
//! `1 - TTFT / ttft target`; it is `met` when that is not negative. The search starts at a random
//! backend, so equal predictions (a cold pool) spread.
//!
//! **Misses.** When no backend is predicted to meet both targets, the request is `missed` and goes
//! to the backend with the fewest streams in flight (the requests queued there count), the lesser
//! of the worse margins (TTFT or TPOT) between equals. The request misses wherever it goes; what a
//! placement can still spare is the streams it joins, each of which its prefill and its decoding
//! slow. And when every placement misses, the pool is where the models are least accurate (a
//! median absolute error of 30-40 % at 32 requests/s on the simulated fleet, against 16-21 % at
//! half the load). Measured there (docs/routing.md): ranked by the lesser worse margin, the
//! placement put the requests beside the least queued prefill, streams piled up where it was
//! short, the TPOT of most of them passed its target, and goodput fell to 11.0 requests/s; ranked
//! with the backends within the TPOT target first, 9.0; by the fewest streams, 17.2-18.1 (power
//! of two choices: 17.0-17.7).
//!
//! A request whose own prefill misses the TTFT target even on the fastest idle backend (a long
//! document) is held to [`LONG_PROMPT_SLACK`] times that instead ([`for_prompt`]).
//!
//! **Stalls.** TPOT is a mean: it does not see that a document's prefill, joining a decode step,
//! makes that one gap as long as the prefill — 400 ms where the target is 35 — in every stream on
//! the backend. A request whose predicted prefill there ([`Predicted::stall`]) exceeds
//! [`STALL_SHARE`] of [`STALL_TARGETS`] TPOT targets *stalls* that backend. Among the backends predicted to meet
//! its targets, such a request goes to the one with the fewest streams to stall, and the backend
//! is marked as stalling until [`STALL_LINGER`] after its predicted first token. A request that
//! does not stall prefers, among the backends that meet its targets, one not marked: a chat
//! started beside the documents would be stalled by the next one. The two preferences feed each
//! other: the backends that take documents lose their chats, and so have the fewest streams when
//! the next document comes. Long prefills gather on a few backends while they meet their target,
//! as a prefill pool would, without a fixed split; headroom decides only between equals. With a
//! gap target (`[slo] max_gap`), a stall is a prefill longer than [`STALL_SHARE`] of it
//! ([`stall_limit`]: the step that carries the prefill decodes the batch too, and the learned rate
//! reads a long prompt short).
//!
//! **Prefill-heavy replicas.** Preference alone still spread the documents over every replica on
//! the simulated fleet, and chats started beside them. So a pool names the replicas that take them
//! from the measured load ([`designate`], `prefill_heavy = "auto"`): while some are designated, a
//! request that would stall a backend goes only to a designated one, or (when none of those meets
//! its targets) to one with no stream to stall; and a request that would not prefers, before
//! headroom, a backend where no stall is expected while it decodes.
//!
//! **Prefills handed off.** In a pool with a prefill pool (`[pools.handoff]`), each decode replica
//! is scored on the path the request's prefill will take from there ([`handed`]): where it decodes,
//! or through the prefill pool (its first token after the prefill pool's predicted prefill and the
//! replica's first step; no stall, and the batch's TPOT without it). A document goes where its
//! first step comes soonest, not where its prefill would stall the fewest streams it will not
//! stall.
//!
//! A backend the pool has not learned yet (fewer than [`EXPLORE`] requests: new, or just joined
//! from DNS) speaks with the priors, which may be slower than a learned backend's measurements
//! and would then never be tried while the pool is quiet. So an idle, unlearned backend that the
//! priors say meets the targets is chosen first: the cost is a few requests on a backend with
//! nothing else to do. The same goes for an idle backend whose model has not learned for
//! [`RELEARN_AFTER`]: a model that learned a bad moment (a burst, a few requests during a cold
//! start) predicts misses, so the backend is never chosen and its model never corrected — seen
//! under overload as a replica left idle while the others shed.
//!
//! Every backend is scored — a handful of multiplications and a lock each — as a pool has a few
//! to a few dozen backends; power of two choices samples two because its load signal is noisy,
//! while the prediction already weighs what the noise hid.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::backend::predict::{Ask, Load, Predicted};
use super::backend::Backend;
use super::members::Members;
use super::series::SloMetrics;
use crate::config::{AutoscaleConfig, Config, SloTargets};
use crate::context::RequestContext;
use crate::metrics::Metrics;
use crate::route::placement::record::Prediction;
use designate::Designation;
use handed::{Handing, PrefillPool};
use headroom::{Headroom, HeadroomMetrics};

pub(crate) mod designate;
pub mod gate;
pub mod handed;
pub mod headroom;
pub mod hook;
pub mod queue;
pub mod record;
pub mod share;
mod shed;

pub use shed::Shed;

/// How much longer than its own prefill a request whose prompt alone misses the TTFT target may
/// take to its first token ([`for_prompt`]).
pub(crate) const LONG_PROMPT_SLACK: f64 = 1.5;

/// The targets a request is held to when its first token, on the fastest idle backend, would
/// come `alone` after its dispatch. A prompt so long that its own prefill misses the TTFT target
/// (a document) cannot meet it anywhere; held to it, every placement would look equally bad and a
/// gateway queue would shed every document. It is held instead to [`LONG_PROMPT_SLACK`] times
/// that: it may wait behind some work, not behind any.
pub(crate) fn for_prompt(targets: SloTargets, alone: Duration) -> SloTargets {
    SloTargets {
        ttft: targets.ttft.max(alone.mul_f64(LONG_PROMPT_SLACK)),
        ..targets
    }
}

/// What the placement needs to know of a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    /// Its estimated prompt tokens.
    pub prompt_tokens: u64,
    /// Time it has spent in the proxy so far: part of its TTFT already.
    pub waited: Duration,
    /// Its own targets (its model's or class's); `None`: the pool's.
    pub targets: Option<SloTargets>,
}

impl Demand {
    /// The demand of the request in `context` at `now`.
    pub fn of(context: &RequestContext, now: Instant) -> Self {
        Self {
            prompt_tokens: context.route.estimate.map_or(0, |estimate| estimate.tokens),
            waited: now.saturating_duration_since(context.received),
            targets: context.request.slo,
        }
    }
}

/// The backend a request is placed on, and what was predicted for it there.
#[derive(Debug, Clone)]
pub struct Placed {
    pub backend: Arc<Backend>,
    pub prediction: Prediction,
    /// Predicted to meet both targets.
    pub met: bool,
    /// Its first token on the fastest backend with nothing else to do: a request that waits
    /// must be sent by `ttft_target - alone` after it was received, or miss.
    pub alone: Duration,
    /// The TTFT it is held to ([`for_prompt`]).
    pub ttft_target: Duration,
    /// The TPOT it is held to.
    pub tpot_target: Duration,
    /// Its prefill stalls the streams on the backend: the backend is marked stalling until then
    /// once the request is sent there ([`Backend::stall_until`]).
    pub stalls_until: Option<Instant>,
}

/// A prefill longer than this many TPOT targets stalls the streams beside it: one gap that long
/// is one a user sees, and a stream of a hundred tokens with one such gap has spent its mean's
/// margin.
pub(crate) const STALL_TARGETS: f64 = 4.0;

/// How long a backend stays marked as stalling after a stalling prefill's predicted first token:
/// about a chat's life (150 tokens at 15 ms), so that a chat does not start where the next
/// document is likely to go.
pub(crate) const STALL_LINGER: Duration = Duration::from_secs(2);

/// The share of [`gap_limit`] a prefill may take before it counts as a stall ([`stall_limit`]).
/// The gap a stream sees is the whole step that carries the prefill (the batch's decode too), and
/// the prefill rate a backend's model learned is a fit over prompts of every size, most of them
/// short: it reads a long prompt's prefill short. Measured on the simulated fleet
/// (`scripts/bench-designation.sh`, docs/routing.md): documents of 6 200-6 700 tokens predicted
/// at 220-247 ms against a 250 ms gap target went to a chat replica beside 11-24 streams, and
/// stalled them about 300 ms (the replica prefills 6 000 tokens alone in 282 ms).
pub(crate) const STALL_SHARE: f64 = 0.75;

/// Whether a prefill that would make one decode step `stall` long stalls the streams held to
/// `targets` (past [`stall_limit`]: a gap a user may see).
pub fn stalls(stall: Duration, targets: SloTargets) -> bool {
    stall > stall_limit(targets)
}

/// The longest predicted prefill that joins streams held to `targets` without stalling them:
/// [`STALL_SHARE`] of [`gap_limit`].
pub fn stall_limit(targets: SloTargets) -> Duration {
    gap_limit(targets).mul_f64(STALL_SHARE)
}

/// The longest decode step the streams held to `targets` take without a stall a user sees: the
/// gap target where there is one (`[slo] max_gap`), else [`STALL_TARGETS`] TPOT targets.
pub fn gap_limit(targets: SloTargets) -> Duration {
    targets
        .max_gap
        .unwrap_or_else(|| targets.tpot.mul_f64(STALL_TARGETS))
}

/// Until when a backend stays marked as stalling, for a stalling prefill whose first token is
/// predicted `first_token` from `now` ([`STALL_LINGER`] after it).
pub(crate) fn stalling_until(now: Instant, first_token: Duration) -> Instant {
    now + first_token.saturating_add(STALL_LINGER)
}

/// Requests a backend's model must have learned from before its predictions alone decide.
pub(crate) const EXPLORE: u64 = 8;

/// How long an idle backend's model may go without learning before the priors speak for it
/// again, once (see the module docs).
pub(crate) const RELEARN_AFTER: Duration = Duration::from_secs(10);

/// A pool's placement: its index, targets and series.
#[derive(Debug)]
pub struct PoolSlo {
    /// Index of the pool in its router.
    pub index: usize,
    /// What a request without targets of its own is placed against (`[slo]`'s defaults).
    pub targets: SloTargets,
    /// The latency models' memory, in requests (`routing.prediction_memory`).
    pub memory: u32,
    /// With a prefill pool: what the pool's handoffs took from the prefill's answer to the first
    /// token (the transfer and the decode replica's first step), a moving mean in nanoseconds;
    /// 0 before the first.
    handoff_overhead: AtomicU64,
    /// With a prefill pool: that pool, whose predicted prefill scores the path through it
    /// ([`handed`]); set once the router has built every pool.
    prefill: OnceLock<PrefillPool>,
    /// Which backends take the long prompts now (`prefill_heavy = "auto"`, in a pool without a
    /// prefill pool).
    designation: Option<Designation>,
    /// Its SLO headroom and the replica count it asks for ([`headroom`]); `None` in a router's
    /// tests that do not build it.
    headroom: Option<Arc<Headroom>>,
    metrics: Option<SloMetrics>,
}

/// The weight of the latest handoff in [`PoolSlo::handoff_overhead`]'s moving mean.
const HANDOFF_OVERHEAD_WEIGHT: f64 = 1.0 / 16.0;

impl PoolSlo {
    /// The placement of pool `index`, named `pool`, that designates prefill-heavy replicas when
    /// `designates` ([`designate`]).
    pub fn new(
        index: usize,
        pool: &str,
        config: &Config,
        designates: bool,
        metrics: Option<&Metrics>,
    ) -> Self {
        Self {
            index,
            targets: config.slo.defaults(),
            memory: config.routing.prediction_memory,
            handoff_overhead: AtomicU64::new(0),
            prefill: OnceLock::new(),
            designation: designates.then(Designation::new),
            headroom: None,
            metrics: metrics.map(|m| SloMetrics::new(m, pool)),
        }
    }

    /// The placement with its headroom signal, as `settings` tune it (every pool a router
    /// builds has one). A reload keeps `previous`'s signal (its averages, calibration, trend and
    /// the counts it asked within `scale_down_after`) while its settings and targets are the
    /// same: an autoscaler reading it must not see a config reload as a cold start, nor a
    /// replica added through one undo the stabilisation that holds the count.
    pub fn with_headroom(
        mut self,
        pool: &str,
        settings: AutoscaleConfig,
        metrics: Option<&Metrics>,
        previous: Option<&PoolSlo>,
    ) -> Self {
        let kept = previous
            .filter(|old| old.targets == self.targets)
            .and_then(|old| old.headroom.as_ref())
            .filter(|old| old.settings() == &settings)
            .map(Arc::clone);
        self.headroom = Some(kept.unwrap_or_else(|| {
            let metrics = metrics.map(|m| HeadroomMetrics::new(m, pool));
            Arc::new(Headroom::new(settings, metrics))
        }));
        self
    }

    /// Its headroom signal.
    pub fn headroom(&self) -> Option<&Headroom> {
        self.headroom.as_deref()
    }

    /// A request of the pool finished whole with `output` tokens: the headroom's mix.
    pub fn finished(&self, output: u64) {
        if let Some(headroom) = &self.headroom {
            headroom.finished(output);
        }
    }

    /// A request of the pool finished whole and `met` its targets or not: the headroom's
    /// calibration.
    pub fn judged(&self, met: bool) {
        if let Some(headroom) = &self.headroom {
            headroom.judged(met);
        }
    }

    /// A request offered to the pool was shed by its gateway queue.
    pub fn shed(&self) {
        if let Some(headroom) = &self.headroom {
            headroom.shed();
        }
    }

    /// A request asking `uncached` prompt tokens was offered to the pool (placed at once, or
    /// entered its gateway queue): the headroom's load.
    pub fn offered(&self, uncached: u64) {
        if let Some(headroom) = &self.headroom {
            headroom.offered(uncached);
        }
    }

    /// Designates the prefill-heavy replicas of `pool` again, when that is due (at a placement,
    /// and after each of a fleet's syncs: a replica with no request to place still leads).
    pub(crate) fn refresh(&self, pool: &Members, now: Instant) {
        if let Some(designation) = &self.designation {
            designation.refresh(pool, now, self.metrics.as_ref());
        }
    }

    /// Its designation of prefill-heavy replicas, where it designates.
    pub(crate) fn designation(&self) -> Option<&Designation> {
        self.designation.as_ref()
    }

    /// A long prompt of `uncached` tokens was offered (entered the gate, or was placed in a pool
    /// without one): the designation's demand.
    pub fn long_prompt(&self, uncached: u64) {
        if let Some(designation) = &self.designation {
            designation.long_prompt(uncached);
        }
    }

    /// Another prompt, of `uncached` tokens, was placed: what the chats ask of their replicas.
    pub fn chat_prompt(&self, uncached: u64) {
        if let Some(designation) = &self.designation {
            designation.chat_prompt(uncached);
        }
    }

    /// A chat could not be placed at once on a backend predicted to meet its targets: the
    /// replicas left to the chats are short.
    pub fn chat_missed(&self) {
        if let Some(designation) = &self.designation {
            designation.chat_missed();
        }
    }

    /// Hands this pool's prefills to `prefill` (the router, once it has built every pool): each
    /// decode replica is then scored on the path its prefill takes ([`handed`]). Set once.
    pub fn hand_off_to(&self, prefill: PrefillPool) {
        // A pool's placement is built anew with its router, so a second call does not come.
        let _ = self.prefill.set(prefill);
    }

    /// The prefill pool it hands prefills to, in a pool with one.
    pub(crate) fn prefill_pool(&self) -> Option<&PrefillPool> {
        self.prefill.get()
    }

    /// What the pool's handoffs took from the prefill's answer to the first token, lately;
    /// `None` before the first was measured.
    pub(crate) fn handoff_overhead(&self) -> Option<Duration> {
        let nanos = self.handoff_overhead.load(Ordering::Relaxed);
        (nanos != 0).then(|| Duration::from_nanos(nanos))
    }

    /// Learns that a handoff took `took` from its prefill's answer to its first token.
    pub fn handed_off(&self, took: Duration) {
        let took = (took.as_nanos() as f64).max(1.0);
        // A lost race between two finishes drops one sample of a moving mean: harmless.
        let old = self.handoff_overhead.load(Ordering::Relaxed) as f64;
        let new = if old == 0.0 {
            took
        } else {
            old + (took - old) * HANDOFF_OVERHEAD_WEIGHT
        };
        self.handoff_overhead.store(new as u64, Ordering::Relaxed);
    }

    /// Counts a placement's decision.
    pub fn decided(&self, decision: Decision) {
        if let Some(m) = &self.metrics {
            m.decisions[decision as usize].increment(1);
        }
    }

    /// Records predicted / measured TTFT, and TPOT and the largest gap where measured, of a
    /// finished request.
    pub fn observed(
        &self,
        prediction: &Prediction,
        ttft: Duration,
        tpot: Option<Duration>,
        gap: Option<Duration>,
    ) {
        let Some(m) = &self.metrics else {
            return;
        };
        if let Some(ratio) = ratio(prediction.ttft, ttft) {
            m.ttft_error.record(ratio);
        }
        if let Some(ratio) = tpot.and_then(|tpot| ratio(prediction.tpot, tpot)) {
            m.tpot_error.record(ratio);
        }
        if let Some(ratio) = gap.and_then(|gap| ratio(prediction.gap, gap)) {
            m.gap_error.record(ratio);
        }
    }
}

/// predicted / measured, when the measurement is above zero.
fn ratio(predicted: Duration, measured: Duration) -> Option<f64> {
    (!measured.is_zero()).then(|| predicted.as_secs_f64() / measured.as_secs_f64())
}

/// How a placement went: the `decision` label of `tokenmeter_slo_decisions_total`, in
/// [`SloMetrics::decisions`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The chosen backend is predicted to meet both targets.
    Met = 0,
    /// No backend is: the request went to the one with the fewest streams.
    Missed = 1,
}

impl Decision {
    pub const ALL: [Decision; 2] = [Decision::Met, Decision::Missed];

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Met => "met",
            Decision::Missed => "missed",
        }
    }
}

/// Places a request of `demand` on a healthy backend of `pool`, not one of `exclude`;
/// `cached_tokens` says how many of its prompt tokens a backend's prompt cache holds. `None` when
/// no backend is left.
pub fn choose(
    pool: &Members,
    slo: &PoolSlo,
    demand: Demand,
    now: Instant,
    exclude: &[Arc<Backend>],
    cached_tokens: impl Fn(&Backend) -> u64,
    rng: &mut impl Rng,
) -> Option<Placed> {
    slo.refresh(pool, now);
    let backends = pool.backends();
    let n = backends.len();
    if n == 0 {
        return None;
    }
    let start = rng.gen_range(0..n);
    // In a pool that hands prefills off, what the prefill pool offers this prompt, once.
    let handing = slo
        .prefill_pool()
        .map(|prefill| Handing::new(prefill, demand.prompt_tokens, now, slo.handoff_overhead()));
    let mut candidates: Vec<Candidate<'_>> = (0..n)
        .map(|k| &backends[(start + k) % n])
        .filter(|backend| {
            backend.available(now) && !exclude.iter().any(|x| Arc::ptr_eq(x, backend))
        })
        .map(|backend| {
            let load = backend.load(now);
            let ask = Ask {
                prompt_tokens: demand.prompt_tokens,
                cached_tokens: cached_tokens(backend).min(demand.prompt_tokens),
            };
            let predicted = backend.predict(load, ask);
            let role = backend.role();
            Candidate {
                backend,
                load,
                ask,
                predicted,
                handed_off: false,
                stalling: backend.stalling(now),
                prefill_heavy: role.prefill_heavy(),
                expected_stall: role.expected_stall(),
            }
        })
        .collect();
    let own = demand.targets.unwrap_or(slo.targets);
    // Its own prefill, what no placement beats. A prompt held to it (a document, see
    // `for_prompt`) is held to the prefill pool's where it would go there.
    let local_alone = candidates.iter().map(|c| c.predicted.alone).min()?;
    let alone = match &handing {
        Some(handing) if local_alone.mul_f64(LONG_PROMPT_SLACK) > own.ttft => handing
            .alone()
            .map_or(local_alone, |through| through.min(local_alone)),
        _ => local_alone,
    };
    let targets = for_prompt(own, alone);
    let stall = stall_limit(own);
    if let Some(handing) = &handing {
        let budget = targets.ttft.saturating_sub(demand.waited);
        for candidate in &mut candidates {
            candidate.take_path(handing, stall, budget);
        }
    }
    // With prefill-heavy replicas designated, a prefill that would stall a backend's streams goes
    // only to one of them, or to a backend with no stream to stall.
    let designated = candidates.iter().any(|c| c.prefill_heavy);
    let mut best: Option<Ranked<'_>> = None;
    for candidate in &candidates {
        if designated && !candidate.takes_long(stall) {
            continue;
        }
        let Predicted { ttft, tpot, .. } = candidate.predicted;
        let score = Score::of(targets, demand.waited + ttft, tpot);
        let ranked = Ranked {
            candidate,
            score,
            harm: candidate.harm(stall, designated),
        };
        // Exploring is free only where it harms nobody: not the request's own streams on a
        // replica where a stall is expected, not a stalling backend's.
        let harmless = ranked.harm == (false, 0, false);
        let local = !candidate.handed_off;
        if harmless && local && candidate.load == Load::default() && candidate.unproven(now) {
            let priors = Backend::predict_by_priors(candidate.load, candidate.ask);
            let score = Score::of(targets, demand.waited + priors.ttft, priors.tpot);
            if score.met() {
                let explored = Ranked { score, ..ranked };
                return Some(explored.placed(slo, targets, alone, stall, now));
            }
        }
        if best.as_ref().map_or(true, |most| ranked.beats(most)) {
            best = Some(ranked);
        }
    }
    best.map(|ranked| ranked.placed(slo, targets, alone, stall, now))
}

/// A backend scored for a request.
struct Candidate<'a> {
    backend: &'a Arc<Backend>,
    load: Load,
    ask: Ask,
    /// What the request meets here on the path its prefill takes: where it decodes, or through
    /// the prefill pool once [`Candidate::take_path`] chose that.
    predicted: Predicted,
    /// Its prefill is handed off from here: `predicted` is the path through the prefill pool.
    handed_off: bool,
    /// The backend is marked as stalling ([`Backend::stalling`]).
    stalling: bool,
    /// It is one of the pool's prefill-heavy replicas now ([`designate`]).
    prefill_heavy: bool,
    /// The stall a stream started on it now is expected to meet ([`designate`]).
    expected_stall: Duration,
}

impl Candidate<'_> {
    /// In a pool that hands prefills off: scores it on the path the handoff will take from here
    /// ([`Handing::hands_off`]), for a request whose prefill longer than `stall` would stall the
    /// streams here, with `budget` left of its TTFT target.
    fn take_path(&mut self, handing: &Handing<'_>, stall: Duration, budget: Duration) {
        let local_stalls = self.load.streams > 0 && self.predicted.stall > stall;
        let (backend, load, ask) = (self.backend, self.load, self.ask);
        let local = &self.predicted;
        if let Some(through) = handing.hands_off(backend, load, ask, local, local_stalls, budget) {
            self.predicted = through;
            self.handed_off = true;
        }
    }

    /// Its model has too few requests to go by, or has not learned for [`RELEARN_AFTER`].
    fn unproven(&self, now: Instant) -> bool {
        self.backend.learned() < EXPLORE
            || self
                .backend
                .taught_ago(now)
                .map_or(true, |ago| ago > RELEARN_AFTER)
    }

    /// What placing the request here costs the streams' gaps, least first. For a prefill longer
    /// than `stall`: whether the backend is not one of the `designated` prefill-heavy replicas
    /// (one with no stream to stall is let take it, but only when no designated replica meets
    /// the targets: it would then repel chats for a while), then the streams it would stall.
    /// For another request: whether it would start beside a stalling prefill, or where one is
    /// expected while it decodes.
    fn harm(&self, stall: Duration, designated: bool) -> (bool, u64, bool) {
        if self.predicted.stall > stall {
            (designated && !self.prefill_heavy, self.load.streams, false)
        } else {
            (false, 0, self.stalling || self.expected_stall > stall)
        }
    }

    /// Whether the request may go here while prefill-heavy replicas are designated: it would not
    /// stall the backend's streams (longer than `stall`), or the backend is designated, or it has
    /// no stream to stall.
    fn takes_long(&self, stall: Duration) -> bool {
        self.predicted.stall <= stall || self.prefill_heavy || self.load.streams == 0
    }
}

/// A candidate with its score and harm.
struct Ranked<'a> {
    candidate: &'a Candidate<'a>,
    score: Score,
    harm: (bool, u64, bool),
}

impl Ranked<'_> {
    /// Whether this is a better place than `other`: one predicted to meet the targets beats one
    /// that is not; between two that meet, the lesser harm, then the larger headroom; between two
    /// that miss, the fewer streams, then the lesser of their worse misses (see *Misses* in the
    /// module docs).
    fn beats(&self, other: &Ranked<'_>) -> bool {
        match (self.score.met(), other.score.met()) {
            (true, false) => true,
            (false, true) => false,
            (true, true) if self.harm != other.harm => self.harm < other.harm,
            (true, true) => self.score > other.score,
            (false, false) => {
                let (mine, theirs) = (self.candidate.load.streams, other.candidate.load.streams);
                mine < theirs || (mine == theirs && self.score.worst > other.score.worst)
            }
        }
    }

    fn placed(
        &self,
        slo: &PoolSlo,
        targets: SloTargets,
        alone: Duration,
        stall: Duration,
        now: Instant,
    ) -> Placed {
        let candidate = self.candidate;
        let predicted = candidate.predicted;
        Placed {
            backend: Arc::clone(candidate.backend),
            prediction: Prediction {
                pool: slo.index,
                queued_tokens: candidate.load.queued_tokens,
                streams: candidate.load.streams,
                prompt_tokens: candidate.ask.prompt_tokens,
                cached_tokens: candidate.ask.cached_tokens,
                ttft: predicted.ttft,
                tpot: predicted.tpot,
                gap: predicted.tpot.saturating_add(candidate.expected_stall),
                ttft_target: targets.ttft,
            },
            met: self.score.met(),
            alone,
            ttft_target: targets.ttft,
            tpot_target: targets.tpot,
            stalls_until: (predicted.stall > stall).then(|| stalling_until(now, predicted.ttft)),
        }
    }
}

/// How well a backend serves a request: whether it fits (its TPOT within target), then its
/// margin. Ordered: every backend that fits beats every one that does not.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub(crate) struct Score {
    /// The predicted TPOT is within the target.
    pub fits: bool,
    /// If it fits, the TTFT headroom `1 - TTFT / target`; if not, the worse of the TTFT and TPOT
    /// margins (both negative when missed).
    pub margin: f64,
    /// The worse of the TTFT and TPOT margins, whether it fits or not: what a miss is ranked by.
    pub worst: f64,
}

impl Score {
    pub fn of(targets: SloTargets, ttft: Duration, tpot: Duration) -> Self {
        let margin = |value: Duration, target: Duration| {
            1.0 - value.as_secs_f64() / target.as_secs_f64().max(f64::MIN_POSITIVE)
        };
        let (ttft, tpot) = (margin(ttft, targets.ttft), margin(tpot, targets.tpot));
        let fits = tpot >= 0.0;
        Self {
            fits,
            margin: if fits { ttft } else { ttft.min(tpot) },
            worst: ttft.min(tpot),
        }
    }

    /// Predicted to meet both targets.
    pub fn met(self) -> bool {
        self.fits && self.margin >= 0.0
    }
}

/// Ticks `slo`'s headroom every [`headroom::TICK`] over `members`' backends, for as long as the pool's
/// placement lives (a reload builds another, and this task ends at its next tick).
///
/// A signal kept through a reload is ticked by the newest pool's watcher alone (`claim`, taken
/// as the pool was built, [`Headroom::claim`]): an older pool lives on while its requests
/// finish, and would tick it with its old members.
pub(crate) async fn watch_headroom(slo: Weak<PoolSlo>, members: Arc<Members>, claim: u64) {
    let mut tick = tokio::time::interval(headroom::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(slo) = slo.upgrade() else {
            return;
        };
        let Some(headroom) = slo.headroom() else {
            return;
        };
        if headroom.claimed() != claim {
            return;
        }
        headroom.tick(&members.backends(), slo.targets, Instant::now());
    }
}

#[cfg(test)]
mod tests;
