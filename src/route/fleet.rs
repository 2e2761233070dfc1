//! Gateway replicas that act as one fleet (`[fleet]`): each publishes its load on every backend
//! to a shared Redis and reads the others', so that every replica weighs a backend by the
//! streams and queued prefill the whole fleet put there, not by its own share of them.
//!
//! One round trip per `interval` ([`sync.lua`](./fleet/sync.lua)): the replica writes its
//! figures (streams in flight and prompt tokens queued per backend, [`payload`]) into one hash
//! with an expiry on the store's clock, and gets every other live replica's back. Nothing of it
//! is on the request path: a request reads the backend's atomics as before, the others' load is
//! one more atomic added ([`super::backend::Backend::load`]). So the shared view is at most an
//! interval old; what this replica itself sent since counts at once, as ever.
//!
//! Faults: a replica that stops publishing (killed, or cut off) drops out of the others' view
//! two intervals after its last write, decided by the store's clock, so replicas whose clocks
//! differ agree. A replica that cannot reach the store for two intervals forgets the others'
//! figures and routes on its own view until the store answers again; each round is counted by
//! outcome (`tokenmeter_fleet_syncs_total`), and `tokenmeter_fleet_own_view` is 1 meanwhile
//! (alerted on: deploy/prometheus).
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Label};
use redis::Script;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::backend::Backend;
use super::members::Members;
use crate::config::FleetConfig;
use crate::metrics::{shared_label, Metrics, LABEL_BACKEND, LABEL_POOL};
use crate::store::{self, Connection, OpenError, StoreSettings};
use payload::Figures;

pub mod payload;

/// Rounds of the sync, by outcome.
pub(crate) const FLEET_SYNCS: &str = "tokenmeter_fleet_syncs_total";
/// Other replicas in the last view read.
pub(crate) const FLEET_REPLICAS: &str = "tokenmeter_fleet_replicas";
/// 1 while the replica routes on its own view (the store has not answered for two intervals).
pub(crate) const FLEET_OWN_VIEW: &str = "tokenmeter_fleet_own_view";
/// The other replicas' streams on a backend, as the last sync read them.
pub(crate) const BACKEND_FLEET_STREAMS: &str = "tokenmeter_backend_fleet_streams";

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
        let (_, connection) = store::open(&StoreSettings {
            table: "fleet",
            url: config.store.trim(),
            tls: &config.store_tls,
            cluster: config.store_cluster,
            timeout: config.interval,
        })?;
        let replica = config.replica_name();
        tracing::info!(%replica, interval = ?config.interval, "fleet: sharing the load through the store");
        Ok(Some(Arc::new(Self {
            connection,
            script: Script::new(include_str!("fleet/sync.lua")),
            key: format!("{}:fleet:{{load}}", config.key_prefix),
            replica,
            interval: config.interval,
            series: Series::new(metrics),
            metrics: Arc::clone(metrics),
        })))
    }

    /// Starts the sync of `pools`' backends with the fleet, until aborted (a reload starts the
    /// next router's).
    pub fn spawn(self: &Arc<Self>, pools: Vec<Arc<Members>>) -> JoinHandle<()> {
        tokio::spawn(Arc::clone(self).run(pools))
    }

    async fn run(self: Arc<Self>, pools: Vec<Arc<Members>>) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut answered = Instant::now();
        // Routing on its own view (the store unanswered for two intervals).
        let mut alone = false;
        loop {
            tick.tick().await;
            let backends = backends(&pools);
            if self.round(&backends).await {
                answered = Instant::now();
                if alone {
                    alone = false;
                    self.series.own_view.set(0.0);
                    tracing::info!("fleet: the store answers again; routing on the fleet's load");
                }
            } else if !alone && answered.elapsed() >= self.interval * INTERVALS_KEPT {
                alone = true;
                self.go_alone(&backends);
            }
        }
    }

    /// One round: publishes this replica's figures on `backends` and takes the others'. Whether
    /// the store answered in time.
    async fn round(&self, backends: &[Arc<Backend>]) -> bool {
        let now = Instant::now();
        let published = payload::encode(backends.iter().map(|backend| {
            let load = backend.own_load(now);
            (
                &*backend.pool,
                &*backend.target.label,
                Figures {
                    streams: load.streams,
                    queued_tokens: load.queued_tokens,
                },
            )
        }));
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
        self.series.replicas.set((others.len() / 2) as f64);
        let sums = payload::sum(others.iter().skip(1).step_by(2).map(String::as_str));
        let read = Instant::now();
        for backend in backends {
            let figures = sums
                .get(&(&*backend.pool, &*backend.target.label))
                .copied()
                .unwrap_or_default();
            self.take(backend, figures, read);
        }
        true
    }

    /// Forgets the others' figures: routing on this replica's own view until the store answers.
    fn go_alone(&self, backends: &[Arc<Backend>]) {
        let now = Instant::now();
        for backend in backends {
            self.take(backend, Figures::default(), now);
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
        backend.set_others(figures.streams, figures.queued_tokens, at);
        let labels = vec![
            shared_label(LABEL_POOL, &backend.pool),
            shared_label(LABEL_BACKEND, &backend.target.label),
        ];
        self.metrics
            .gauge(BACKEND_FLEET_STREAMS, labels)
            .set(figures.streams as f64);
    }
}

/// Every backend of `pools` now (DNS may have changed them since the last round).
fn backends(pools: &[Arc<Members>]) -> Vec<Arc<Backend>> {
    pools
        .iter()
        .flat_map(|pool| pool.backends().iter().cloned().collect::<Vec<_>>())
        .collect()
}

/// The sync's series.
struct Series {
    ok: Counter,
    error: Counter,
    timeout: Counter,
    replicas: Gauge,
    own_view: Gauge,
}

impl Series {
    fn new(metrics: &Metrics) -> Self {
        metrics.describe_counter(
            FLEET_SYNCS,
            "Rounds of the fleet's load sync by outcome: ok, error (the store refused or was unreachable), timeout (no answer within [fleet] interval).",
        );
        metrics.describe_gauge(
            FLEET_REPLICAS,
            "Other gateway replicas of the fleet whose load the last sync read.",
        );
        metrics.describe_gauge(
            BACKEND_FLEET_STREAMS,
            "Streams in flight on the backend from the fleet's other gateway replicas, as the last sync read them ([fleet]).",
        );
        metrics.describe_gauge(
            FLEET_OWN_VIEW,
            "1 while this replica routes on its own load only: the fleet's store has not answered for two intervals.",
        );
        let outcome = |outcome: &'static str| {
            metrics.counter(FLEET_SYNCS, vec![Label::new("outcome", outcome)])
        };
        Self {
            ok: outcome("ok"),
            error: outcome("error"),
            timeout: outcome("timeout"),
            replicas: metrics.gauge(FLEET_REPLICAS, Vec::new()),
            own_view: metrics.gauge(FLEET_OWN_VIEW, Vec::new()),
        }
    }
}
