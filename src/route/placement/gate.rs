//! The gateway queue of a `balance = "slo"` pool (`[pools.queue]`): where a request waits while no
//! backend is predicted to meet its targets, instead of joining a backend's queue and missing
//! them there along with the requests behind it.
//!
//! Long on purpose: the queue is one state machine (enter, release, shed, late) under one lock; its
//! docs are a third of the file.
//!
//! A request enters ([`Gate::enter`]) after the plan:
//! - nothing is waiting in its lane (or, with shares held, nothing of its tenant's, and the tenant
//!   is under its share) and a backend is predicted to meet both targets: it goes there at once;
//! - even a backend with nothing else to do could not give it its first token in time any more:
//!   it leaves at once, see below;
//! - otherwise it waits in a [`FairQueue`](super::queue::FairQueue), ordered by its tenant's fair
//!   share, then its priority, then its deadline. While the pool has prefill-heavy replicas
//!   designated, a long prompt waits in a lane of its own ([`lanes`]): it waits for a designated
//!   replica, a chat for another, and neither holds the other.
//!
//! **Half the slack each.** A request's slack is its TTFT target less its first token on the
//! fastest idle backend (`alone`, its own prefill): what waiting, here and in a backend's queue
//! together, may take. The gate gives each half. A request waits here at most `(target − alone)
//! / 2` (its deadline), and is released only onto a backend where its first token is predicted
//! within `(target + alone) / 2` of its release. So whatever it waited, what it is released to
//! meets its target. Held to the target less what it already waited instead, a request's chance
//! shrinks with every tick, the head blocks the queue, and the queue serves only its newest;
//! released into room for a fresh request, one that waited gets its wait plus the target, and
//! misses.
//!
//! A request is not shed on arrival merely because the backends are busy now. Their queues are
//! full of work the gate released up to its deadlines; the backends drain, and the next request in
//! fair order takes the next room. Shedding whoever arrives while they are full would shed a
//! quiet tenant's requests as readily as a flooding one's, and fairness would only order what is
//! left.
//!
//! One task per gated pool releases the queue ([`Gate::release`]): whenever something was pushed,
//! and every [`TICK`] while anything waits (streams end and prefills finish without telling the
//! queue; a tick costs one prediction per backend). The next entry of each lane in fair order is
//! placed as a dispatch would place it, and released when a backend has room for it: its first
//! token within half its slack, its TPOT within target. Its backend's load is counted at once, so
//! the next entry is predicted against it. An entry is never overtaken within its lane; a large
//! one at the head waits until a backend has room for it, or its deadline.
//!
//! **Shares** (`equal_shares`, off by default). The gate also counts each tenant's work in flight
//! (prompt and output tokens) until its streams end ([`super::share`]). A tenant that holds an
//! equal part of it goes at once, or is released, only into ample room: a backend with no prefill
//! queued, its TPOT within half the target (close to idle). Otherwise it waits behind the other
//! tenants, and leaves at its deadline like any other. A flood is then served from the room the
//! others leave idle, not from the room that would keep their latency where it was. And a tenant
//! under its share with nothing of its own waiting goes at once where a backend meets its
//! targets, whatever of the flood waits: queued behind it, every quiet request would wait as long
//! as the flood's.
//!
//! An entry still waiting at its deadline leaves as `[pools.queue] on_deadline` says: shed (429
//! with `retry-after`) or sent where a missed placement goes (the backend with the fewest
//! streams). A client that leaves takes its entry out. The queue is bounded (`capacity`); a
//! request arriving to a full one is shed.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::share::{ShareSlot, Shares, TenantWork};
use super::{choose, Demand, Placed, PoolSlo, SloTargets};
use crate::config::{OnDeadline, QueueConfig};
use crate::context::RequestContext;
use crate::metrics::Metrics;
use crate::route::affinity::{self, AffinityKeys, PoolAffinity};
use crate::route::backend::LoadGuard;
use crate::route::members::Members;
use crate::route::placement::queue::Entry;
use lanes::{Lane, LaneKey, Lanes};

mod lanes;
use crate::route::series::QueueMetrics;

/// How often the release task looks again while entries wait.
pub const TICK: Duration = Duration::from_millis(5);
/// How long the release task sleeps when nothing waits before it checks that its pool still
/// exists (a reload replaces the gate).
const IDLE: Duration = Duration::from_secs(1);
/// Output tokens a request that names no limit is charged against its tenant's share.
const DEFAULT_OUTPUT_TOKENS: u64 = 256;

/// How a request leaves the gate.
// One per gated request, moved once from the gate to the dispatch and never stored in bulk:
// boxing the placement would add an allocation per request to save stack bytes for one call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Admission {
    /// Placed on a backend predicted to meet both targets; `guard` already counts its load there,
    /// `slot` its stream in its tenant's share (to be held until the stream ends).
    Placed {
        placed: Placed,
        guard: Option<LoadGuard>,
        slot: Option<ShareSlot>,
    },
    /// Its deadline can no longer be met, and `on_deadline = "send"`: placed as well as it can be.
    Late,
    /// Shed (429): `full` (the queue was) or `deadline`.
    Shed(&'static str),
}

/// What a waiting request needs to be placed.
#[derive(Debug)]
struct Waiter {
    keys: AffinityKeys,
    prompt_tokens: u64,
    /// Its own targets (its model's or class's), if any.
    targets: Option<SloTargets>,
    /// Half its slack, `(target − alone) / 2`: what it may wait here, and so what is held against
    /// the backend it is released to.
    budget: Duration,
    queued: Instant,
    answer: oneshot::Sender<Admission>,
}

/// One pool's gateway queue.
#[derive(Debug)]
pub struct Gate {
    pool: Arc<Members>,
    slo: Arc<PoolSlo>,
    affinity: Option<Arc<PoolAffinity>>,
    config: QueueConfig,
    queue: Mutex<Lanes<Waiter>>,
    /// Wakes the release task; its own `Arc` so the task can wait on it without holding the
    /// gate alive.
    wake: Arc<Notify>,
    running: AtomicBool,
    /// Each tenant's streams let through and not ended.
    shares: Arc<Shares>,
    metrics: Option<QueueMetrics>,
}

impl Gate {
    pub fn new(
        pool: Arc<Members>,
        slo: Arc<PoolSlo>,
        affinity: Option<Arc<PoolAffinity>>,
        config: QueueConfig,
        metrics: Option<&Metrics>,
    ) -> Self {
        let metrics = metrics.map(|m| QueueMetrics::new(m, &pool.name));
        Self {
            queue: Mutex::new(Lanes::new(config.capacity)),
            pool,
            slo,
            affinity,
            config,
            wake: Arc::new(Notify::new()),
            running: AtomicBool::new(false),
            shares: Arc::new(Shares::default()),
            metrics,
        }
    }

    /// The index of the gate's pool in its router.
    pub fn pool(&self) -> usize {
        self.slo.index
    }

    /// The gate's pool's name.
    pub(crate) fn pool_name(&self) -> &Arc<str> {
        &self.pool.name
    }

    /// Each tenant's work in flight and let through, for the fleet's other gateways.
    pub(crate) fn tenants(&self, now: Instant) -> Vec<TenantWork> {
        self.shares.published(now)
    }

    /// What the fleet's other gateways hold per tenant (`in_flight`) and let through since the
    /// last sync (`served`): the shares count the first, the fair queue charges the second.
    pub(crate) fn take_fleet(&self, in_flight: HashMap<Arc<str>, u64>, served: &[(&str, u64)]) {
        self.shares.set_others(in_flight);
        if served.is_empty() {
            return;
        }
        let mut queue = self.lock();
        for &(tenant, tokens) in served {
            queue.charge(tenant, tokens);
        }
    }

    /// Admits the request of `context` (its prompt prefix in `keys`, its head's `headers`):
    /// placed at once, after a wait, or shed (see the module docs).
    pub async fn enter(
        self: &Arc<Self>,
        context: &RequestContext,
        keys: AffinityKeys,
        headers: &http::HeaderMap,
    ) -> Admission {
        self.start();
        let now = Instant::now();
        let demand = Demand::of(context, now);
        // Predicted outside the lock: the release task and other arrivals need it meanwhile.
        let Some(placed) = self.place(&keys, demand, now) else {
            // No backend is available: the dispatch's own pick decides (its panic mode).
            return Admission::Late;
        };
        // Half its slack to wait here, half for the backend's queue: ordering within its
        // tenant, and when it leaves unserved.
        // The designation's demand is every long prompt offered, shed or not: a burst of
        // documents the designated replicas cannot take in time is what designates another.
        // And a chat no replica is predicted to serve in time now tells it the chats are short.
        self.slo.offered(placed.prediction.uncached_tokens());
        let long = placed.stalls_until.is_some();
        if long {
            self.slo.long_prompt(placed.prediction.uncached_tokens());
        } else if !placed.met {
            self.slo.chat_missed();
        }
        let lane = if long && self.designated() {
            Lane::Long
        } else {
            Lane::Chats
        };
        let budget = placed.ttft_target.saturating_sub(placed.alone) / 2;
        let latest = context.received + budget;
        if latest <= now {
            return self.late();
        }
        let tenant = self.tenant(context, headers);
        let work = demand.prompt_tokens.saturating_add(
            context
                .request
                .generation
                .as_ref()
                .and_then(|generation| generation.read.as_ref())
                .and_then(|read| read.facts.max_tokens)
                .unwrap_or(DEFAULT_OUTPUT_TOKENS),
        );
        let over = self.over_share(&tenant, work);
        let room = placed.met && (!over || ample(&placed));
        let (rx, key) = {
            let mut queue = self.lock();
            // With shares held, a tenant under its share with nothing of its own waiting goes
            // first: what waits is over its share, or waits for the room its longer wait needs.
            let first = queue.is_empty(lane)
                || (self.config.equal_shares && !over && !queue.holds(lane, &tenant));
            if first && room {
                drop(queue);
                self.exit("direct");
                return Admission::Placed {
                    placed,
                    guard: None,
                    slot: Some(self.shares.take(tenant, work)),
                };
            }
            let (tx, rx) = oneshot::channel();
            let entry = Entry {
                tenant,
                priority: self.priority(headers),
                deadline: latest,
                cost: work,
                payload: Waiter {
                    keys,
                    prompt_tokens: demand.prompt_tokens,
                    targets: demand.targets,
                    budget,
                    queued: now,
                    answer: tx,
                },
            };
            match queue.push(lane, entry) {
                Ok(key) => {
                    self.depth(queue.len());
                    (rx, key)
                }
                Err(_) => {
                    drop(queue);
                    self.exit("shed_full");
                    return Admission::Shed("full");
                }
            }
        };
        self.wake.notify_one();
        let mut waiting = Waiting {
            gate: self,
            key: Some(key),
        };
        let admission = rx.await.unwrap_or(Admission::Shed("deadline"));
        waiting.key = None;
        admission
    }

    /// Releases what can go now: entries whose deadline passed leave as `on_deadline` says; then,
    /// in each lane, entries in fair order while the next one is predicted to meet its targets.
    /// Returns whether anything is still waiting.
    pub fn release(&self, now: Instant) -> bool {
        let mut queue = self.lock();
        while let Some(entry) = queue.pop_expired(now) {
            self.answer(entry.payload, self.late(), now);
        }
        for lane in Lane::ALL {
            self.release_lane(&mut queue, lane, now);
        }
        self.depth(queue.len());
        queue.len() > 0
    }

    /// Releases the entries of `lane` in fair order while the next one is predicted to meet its
    /// targets.
    fn release_lane(&self, queue: &mut Lanes<Waiter>, lane: Lane, now: Instant) {
        while let Some(next) = queue.peek(lane) {
            // Released when a backend has room for it after its whole waiting budget, spent or
            // not: its first token within `(target + alone) / 2` (see the module docs).
            // Over its tenant's share, into ample room only.
            let waiter = &next.payload;
            let over = self.over_share(&next.tenant, next.cost);
            let demand = Demand {
                prompt_tokens: waiter.prompt_tokens,
                targets: waiter.targets,
                waited: waiter.budget,
            };
            let Some(placed) = self
                .place(&waiter.keys, demand, now)
                .filter(|p| p.met && (!over || ample(p)))
            else {
                break;
            };
            let Some(entry) = queue.pop(lane) else {
                break;
            };
            let uncached =
                (placed.prediction.prompt_tokens).saturating_sub(placed.prediction.cached_tokens);
            let guard = LoadGuard::new(Arc::clone(&placed.backend), uncached);
            let slot = self.shares.take(Arc::clone(&entry.tenant), entry.cost);
            self.exit("placed");
            let admission = Admission::Placed {
                placed,
                guard: Some(guard),
                slot: Some(slot),
            };
            self.answer(entry.payload, admission, now);
        }
    }

    /// Whether the pool has prefill-heavy replicas designated now: its long prompts then wait for
    /// them, in their own lane.
    fn designated(&self) -> bool {
        self.pool
            .backends()
            .iter()
            .any(|backend| backend.role().prefill_heavy())
    }

    /// Starts the release task on the first request (there is a runtime then).
    fn start(self: &Arc<Self>) {
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(run(Arc::downgrade(self)));
        }
    }

    /// The placement a dispatch would make now for a request of `demand`.
    fn place(&self, keys: &AffinityKeys, demand: Demand, now: Instant) -> Option<Placed> {
        let cached_tokens =
            affinity::cached_tokens(self.affinity.as_deref(), keys, demand.prompt_tokens);
        choose(
            &self.pool,
            &self.slo,
            demand,
            now,
            &[],
            cached_tokens,
            &mut rand::thread_rng(),
        )
    }

    /// Whether `tenant` holds its share of the work in flight with a request of `work` tokens,
    /// when shares are held (`equal_shares`).
    fn over_share(&self, tenant: &str, work: u64) -> bool {
        self.config.equal_shares && self.shares.over(tenant, work)
    }

    /// What a request whose deadline can no longer be met gets.
    fn late(&self) -> Admission {
        match self.config.on_deadline {
            OnDeadline::Shed => {
                self.exit("shed_deadline");
                Admission::Shed("deadline")
            }
            OnDeadline::Send => {
                self.exit("late");
                Admission::Late
            }
        }
    }

    fn answer(&self, waiter: Waiter, admission: Admission, now: Instant) {
        if let Some(m) = &self.metrics {
            m.wait
                .record(now.saturating_duration_since(waiter.queued).as_secs_f64());
        }
        // A client that left meanwhile drops the answer, and with it any load guard.
        let _ = waiter.answer.send(admission);
    }

    /// The request's tenant for its fair share: the one `[tenants]` named (its name, not its
    /// bounded label: tenants past the label cap still get a share each), else the
    /// `tenant_header`'s value (cut at 256 bytes), else one shared by all.
    fn tenant(&self, context: &RequestContext, headers: &http::HeaderMap) -> Arc<str> {
        if let Some(tenant) = context
            .tenant
            .as_ref()
            .and_then(|tenant| tenant.name.as_ref())
        {
            return Arc::clone(tenant);
        }
        self.config
            .tenant_header
            .as_ref()
            .and_then(|name| headers.get(name))
            .and_then(|value| value.to_str().ok())
            .map_or_else(
                || Arc::from("anonymous"),
                |value| Arc::from(value.get(..256).unwrap_or(value)),
            )
    }

    fn priority(&self, headers: &http::HeaderMap) -> u8 {
        self.config
            .priority_header
            .as_ref()
            .and_then(|name| headers.get(name))
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    }

    fn exit(&self, how: &'static str) {
        if how.starts_with("shed") {
            self.slo.shed();
        }
        if let Some(m) = &self.metrics {
            m.exit(how);
        }
    }

    fn depth(&self, depth: usize) {
        if let Some(m) = &self.metrics {
            m.depth.set(depth as f64);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Lanes<Waiter>> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A request's place in the queue while it waits: dropped before its answer (the client left),
/// it takes the entry out.
struct Waiting<'a> {
    gate: &'a Gate,
    key: Option<LaneKey>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let Some(key) = self.key else {
            return;
        };
        let mut queue = self.gate.lock();
        if queue.remove(key).is_some() {
            self.gate.depth(queue.len());
            drop(queue);
            self.gate.exit("cancelled");
        }
    }
}

/// Whether `placed` leaves ample room for a request of a tenant over its share: a backend with no
/// prefill queued before it, and its TPOT within half the target (that it meets its TTFT target
/// is `placed.met`). A backend that close to idle serves the flood from capacity the others do
/// not use; any fuller, and each quiet request that follows would wait behind the flood's
/// prefills and decode beside its streams. (Measured under a 5x flood: held to a first token
/// within a quarter of its slack instead, the flood kept the replicas' queues at that quarter,
/// and the quiet tenants' TTFT p50 went from 40 to 220 ms; docs/routing.md.)
fn ample(placed: &Placed) -> bool {
    placed.prediction.queued_tokens == 0 && placed.prediction.tpot <= placed.tpot_target / 2
}

/// The release task of one gate, until the gate is gone (its router was replaced and every request
/// that held it has left).
async fn run(gate: Weak<Gate>) {
    loop {
        let Some(strong) = gate.upgrade() else {
            return;
        };
        let waiting = strong.release(Instant::now());
        let wake = Arc::clone(&strong.wake);
        drop(strong);
        let pause = if waiting { TICK } else { IDLE };
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests;
