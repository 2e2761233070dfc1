//! Gateway replicas that act as one fleet (`[fleet]`): each publishes its load on every backend
//! to a shared Redis and reads the others', so that every replica weighs a backend by the
//! streams and queued prefill the whole fleet put there, not by its own share of them.
//!
//! One round trip per `interval` ([`sync.lua`](./fleet/sync.lua)): the replica writes its
//! figures into one hash with an expiry on the store's clock, and gets every other live
//! replica's back ([`payload`]: streams in flight, prompt tokens queued and stall marks per
//! backend; for each designating pool, the prompts it offered, the prefill-heavy replicas it
//! sees, and what its models learned of each backend's prefill). Nothing of it is on the request
//! path: a request reads the backend's atomics as before, the others' load is one more atomic
//! added ([`super::backend::Backend::load`]). So the shared view is at most an interval old;
//! what this replica itself sent since counts at once, as ever. The script stamps each write on
//! the store's clock and returns each entry's age: the others' stall marks are read as run down
//! since they wrote them, not since this replica read them ([`view`]; their queues are not, as
//! measured there).
//!
//! A pool that designates its prefill-heavy replicas measures the fleet's demand and follows
//! one replica's designation, the live one with the least name ([`view`]): designating apart,
//! the gateways chose different replicas and every replica stalled chats.
//!
//! A gated pool's tenants keep their shares across the fleet: each replica publishes its work
//! in flight and let through per tenant, the others count the first in the tenants' shares and
//! charge what the second moved to their fair queues' counters
//! ([`crate::route::placement::share`]).
//!
//! The gateways also split every llama.cpp server's slots among themselves (a handoff pool's
//! slot tables, [`crate::route::handoff::slots`]): each publishes the partition it reserves by
//! and the slots it holds, and takes a slot the partition moved to it once the others agree and
//! none holds it.
//!
//! Between payloads, each replica tells the others at once of every placement's change to its
//! load on a backend ([`news`], over the store's pub/sub; [`board`] keeps whichever of a
//! replica's figures is newer): the gateway queues of four replicas released requests into the
//! room each saw at the last sync, and together filled it up to four times over.
//!
//! Faults: a replica that stops publishing (killed, or cut off) drops out of the others' view
//! two intervals after its last write, decided by the store's clock, so replicas whose clocks
//! differ agree. A replica that cannot reach the store for two intervals forgets the others'
//! figures and routes on its own view until the store answers again; each round is counted by
//! outcome (`tokenmeter_fleet_syncs_total`), and `tokenmeter_fleet_own_view` is 1 meanwhile
//! (alerted on: deploy/prometheus).
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::backend::Backend;
use super::handoff::slots::SlotTables;
use crate::config::FleetConfig;
use crate::metrics::{shared_label, Metrics, LABEL_BACKEND, LABEL_POOL};
use crate::store::{self, Connection, OpenError, StoreSettings};
use board::Board;
use news::NewsLink;
use payload::{Figures, Payload, Stamp};
pub use pool::SharedPool;
use series::{Series, BACKEND_FLEET_STREAMS, FLEET_DESIGNATES, FLEET_SLOTS_OWNED};
use view::{Entry, Seen, View};

mod board;
mod news;
pub mod payload;
mod pool;
mod series;
mod view;

/// How many intervals a replica's entry outlives its last write, and how many a replica goes
/// without an answer before it routes on its own view.
const INTERVALS_KEPT: u32 = 2;

/// A replica's link to its fleet: the store, its name there, and the sync's series.
pub struct Fleet {
    connection: Connection,
    script: Script,
    key: String,
    replica: String,
    interval: Duration,
    /// This run of the replica, and how many payloads and news it wrote: each writing's
    /// [`Stamp`].
    epoch: u64,
    written: AtomicU64,
    /// Where news go and come from; `None` with `news = false` or a cluster.
    news: Option<NewsLink>,
    series: Series,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may carry a password.
        f.debug_struct("Fleet")
            .field("key", &self.key)
            .field("replica", &self.replica)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// The fleet of `config`, not connected yet; `None` when no store is named.
    pub fn open(
        config: &FleetConfig,
        metrics: &Arc<Metrics>,
    ) -> Result<Option<Arc<Self>>, OpenError> {
        if !config.enabled() {
            return Ok(None);
        }
        let (client, connection) = store::open(&StoreSettings {
            table: "fleet",
            url: config.store.trim(),
            tls: &config.store_tls,
            cluster: config.store_cluster,
            timeout: config.interval,
        })?;
        let replica = config.replica_name();
        let key = format!("{}:fleet:{{load}}", config.key_prefix);
        let news = client
            .filter(|_| config.news)
            .map(|client| NewsLink::new(client, &key, metrics));
        tracing::info!(%replica, interval = ?config.interval, news = news.is_some(), "fleet: sharing the load through the store");
        Ok(Some(Arc::new(Self {
            connection,
            script: Script::new(include_str!("fleet/sync.lua")),
            key,
            replica,
            interval: config.interval,
            epoch: rand::random(),
            written: AtomicU64::new(0),
            news,
            series: Series::new(metrics),
            metrics: Arc::clone(metrics),
        })))
    }

    /// Starts the sync of `pools` and of the llama.cpp `slots` with the fleet, until aborted (a
    /// reload starts the next router's).
    pub(crate) fn spawn(
        self: &Arc<Self>,
        pools: Vec<SharedPool>,
        slots: Arc<SlotTables>,
    ) -> JoinHandle<()> {
        tokio::spawn(Arc::clone(self).run(Shared { pools, slots }))
    }

    async fn run(self: Arc<Self>, shared: Shared) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut answered = Instant::now();
        // Routing on its own view (the store unanswered for two intervals).
        let mut alone = false;
        let mut seen = Seen::new();
        let mut board = Board::new(self.interval * INTERVALS_KEPT);
        let (_listener, mut news_heard, desk) = match &self.news {
            Some(link) => link.newsroom(self.interval),
            None => (None, None, None),
        };
        let mut told = Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Some(desk) = &desk {
                        news::attach(&shared.pools, desk);
                    }
                    if self.round(&shared, &mut seen, &mut board).await {
                        answered = Instant::now();
                        if alone {
                            alone = false;
                            self.series.own_view.set(0.0);
                            tracing::info!("fleet: the store answers again; routing on the fleet's load");
                        }
                    } else if !alone && answered.elapsed() >= self.interval * INTERVALS_KEPT {
                        alone = true;
                        seen.clear();
                        board.clear();
                        self.go_alone(&shared);
                    }
                }
                Some(message) = news::heard(&mut news_heard) => {
                    if !alone {
                        self.hear(&shared, &mut board, &message);
                    }
                }
                () = news::placed(desk.as_deref()) => {
                    tokio::time::sleep_until(told + news::GAP).await;
                    told = Instant::now();
                    self.tell(&shared).await;
                }
            }
        }
    }

    /// This replica's next writing.
    fn stamp(&self) -> Stamp {
        Stamp {
            epoch: self.epoch,
            n: self.written.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    /// Tells the others of every backend this replica placed a request on since it last did.
    async fn tell(&self, shared: &Shared) {
        if let Some(link) = &self.news {
            let (stamp, pools) = (self.stamp(), &shared.pools);
            link.tell(&self.replica, stamp, pools, &self.connection, self.interval)
                .await;
        }
    }

    /// Takes a news heard from another replica: its load on the backends it names.
    fn hear(&self, shared: &Shared, board: &mut Board, message: &str) {
        let Some(link) = &self.news else {
            return;
        };
        let now = Instant::now();
        let named = link.hear(&self.replica, board, message, now);
        if named.is_empty() {
            return;
        }
        for pool in &shared.pools {
            for backend in pool.members.backends().iter() {
                let key = (&*backend.pool, &*backend.target.label);
                if named.contains(&key) {
                    self.take(backend, board.sum(key.0, key.1, now), now);
                }
            }
        }
    }

    /// One round: publishes this replica's figures and takes the others'. Whether the store
    /// answered in time.
    async fn round(&self, shared: &Shared, seen: &mut Seen, board: &mut Board) -> bool {
        let Shared { pools, slots } = shared;
        // Taken before the figures are read: a news stamped later was written after them.
        let stamp = self.stamp();
        let now = Instant::now();
        let mut published = Payload::default();
        published.stamp(stamp);
        for pool in pools {
            pool.publish(&mut published, now);
        }
        if let Some(partition) = slots.partition() {
            published.partition(partition);
        }
        for (backend, held) in slots.held() {
            published.held(&backend, &held);
        }
        let published = published.into_string();
        let ttl = (self.interval * INTERVALS_KEPT).as_millis().max(1) as u64;
        let mut connection = self.connection.clone();
        let mut invocation = self.script.key(&self.key);
        invocation.arg(&self.replica).arg(published).arg(ttl);
        let reply = tokio::time::timeout(
            self.interval,
            invocation.invoke_async::<Vec<String>>(&mut connection),
        )
        .await;
        let others = match reply {
            Ok(Ok(others)) => others,
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "fleet: the store refused a round");
                self.series.error.increment(1);
                return false;
            }
            Err(_) => {
                self.series.timeout.increment(1);
                return false;
            }
        };
        self.series.ok.increment(1);
        self.series.replicas.set((others.len() / 3) as f64);
        let entries: Vec<Entry> = others
            .chunks_exact(3)
            .map(|entry| Entry {
                name: &entry[0],
                age: Duration::from_millis(entry[1].parse().unwrap_or(0)),
                payload: &entry[2],
            })
            .collect();
        let view = View::read(&self.replica, &entries, seen);
        let read = Instant::now();
        board.read(&view, read);
        for pool in pools {
            let designates = pool.designation().is_some();
            for backend in pool.members.backends().iter() {
                let key = (&*backend.pool, &*backend.target.label);
                self.take(backend, board.sum(key.0, key.1, read), read);
                if designates {
                    let (weighted, weight) = view.prefill.get(&key).copied().unwrap_or_default();
                    backend.set_others_prefill_cost(weighted, weight);
                }
            }
            self.designate(pool, &view, read);
            if let Some(gate) = &pool.gate {
                let name = &*pool.members.name;
                let in_flight = view.in_flight.get(name).into_iter().flatten();
                let in_flight = in_flight.map(|(tenant, work)| (Arc::from(*tenant), *work));
                let served = view.served.get(name).into_iter().flatten();
                let served: Vec<(&str, u64)> = served.map(|(t, w)| (*t, *w)).collect();
                gate.take_fleet(in_flight.collect(), &served);
            }
        }
        slots.read(&self.replica, &view.gateways, &view.held);
        for (backend, owned) in slots.owned() {
            let labels = vec![shared_label(LABEL_BACKEND, &backend)];
            self.metrics
                .gauge(FLEET_SLOTS_OWNED, labels)
                .set(owned as f64);
        }
        true
    }

    /// Gives `pool`'s designation, where it has one, the prompts the others offered and the
    /// leader's choice in `view`, and lets it designate again (due or not: a replica without
    /// requests to place leads too).
    fn designate(&self, pool: &SharedPool, view: &View, now: Instant) {
        let Some((slo, designation)) = pool.designation() else {
            return;
        };
        let name = &*pool.members.name;
        if let Some(&offered) = view.offered.get(name) {
            designation.others_offered(offered);
        }
        let leader = view.leaders.get(name);
        designation.follow(
            leader
                .map(|(_, backends)| backends.iter().map(|&backend| backend.to_owned()).collect()),
        );
        self.metrics
            .gauge(
                FLEET_DESIGNATES,
                vec![shared_label(LABEL_POOL, &pool.members.name)],
            )
            .set(if leader.is_some() { 0.0 } else { 1.0 });
        slo.refresh(&pool.members, now);
    }

    /// Forgets the others' figures and leader: routing on this replica's own view until the
    /// store answers.
    fn go_alone(&self, shared: &Shared) {
        let now = Instant::now();
        shared.slots.alone();
        for pool in &shared.pools {
            for backend in pool.members.backends().iter() {
                self.take(backend, Figures::default(), now);
                backend.set_others_prefill_cost(0.0, 0.0);
            }
            self.designate(pool, &View::default(), now);
            if let Some(gate) = &pool.gate {
                gate.take_fleet(HashMap::new(), &[]);
            }
        }
        self.series.replicas.set(0.0);
        self.series.own_view.set(1.0);
        tracing::warn!(
            "fleet: the store has not answered for two intervals; routing on this replica's own load"
        );
    }

    /// Gives `backend` the other replicas' `figures`, read at `at`, and says their streams (a
    /// gauge made on first use: a replica without a fleet shows none).
    fn take(&self, backend: &Backend, figures: Figures, at: Instant) {
        backend.set_others(figures.streams, figures.queued_tokens, at, figures.stall);
        let labels = vec![
            shared_label(LABEL_POOL, &backend.pool),
            shared_label(LABEL_BACKEND, &backend.target.label),
        ];
        self.metrics
            .gauge(BACKEND_FLEET_STREAMS, labels)
            .set(figures.streams as f64);
    }
}

/// What a replica shares with its fleet.
struct Shared {
    pools: Vec<SharedPool>,
    slots: Arc<SlotTables>,
}
