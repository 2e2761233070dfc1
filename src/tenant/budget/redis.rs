//! The shared store: every replica naming the same Redis enforces one budget per tenant.
//!
//! One round trip per admission (`admit.lua`: read the windows, check every limit, charge the
//! reservation, all atomically, so two replicas cannot both take the last of a budget); the
//! settlements (`settle.lua`) share round trips, never one per chunk. The scripts are sent by
//! their SHA-1 (`EVALSHA`, loaded once). A tenant's keys share the hash tag `{tenant}`, so a
//! Redis Cluster keeps them in one slot, as a multi-key script needs.
//!
//! Settlements leave the finish point through a bounded queue to one task, which sends them in
//! pipelined batches (one round trip for up to 64) and retries them while Redis is away (so the
//! counts reconcile once it is back: a request let through unchecked is charged its whole usage
//! then), and drops, counted, what does not fit. Each settlement's script answers the tenant's
//! tokens of the day after it, which the task reports in the `tokens_per_day` used-ratio gauge
//! (the fleet's figure: every replica's settlements are in it).
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::exchange::{Ask, Counted, Settlement, StoreError, Verdict};
use super::limit::Limit;
use super::series::{BudgetSeries, Op};
use crate::config::BudgetsConfig;
use crate::store::{self, Connection, StoreSettings};
use keys::{member, Keys};
use settler::Settler;

mod keys;
mod settler;

/// At most one diagnosis of timed-out admissions this often.
const DIAGNOSE_EVERY: Duration = Duration::from_secs(5);

/// The Redis store.
pub struct RedisStore {
    /// For [`RedisStore::verify`]'s one connection of its own (`None`: a cluster, verified
    /// through its connection).
    client: Option<redis::Client>,
    connection: Connection,
    /// When the next diagnosis may run (ms since `opened`), at most one per [`DIAGNOSE_EVERY`].
    next_diagnosis: Arc<std::sync::atomic::AtomicU64>,
    opened: Instant,
    admit: Script,
    keys: Keys,
    lease: Duration,
    timeout: Duration,
    settlements: mpsc::Sender<Settlement>,
    /// Settlements queued or being retried.
    pending: Arc<AtomicUsize>,
    series: Arc<BudgetSeries>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may carry a password.
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store over the Redis at `url`, connecting on first use (a Redis that is down at start
    /// is one more store error, decided by the policy, not a failed start). Spawns the
    /// settlement task: call from within the runtime.
    pub fn open(
        url: &str,
        config: &BudgetsConfig,
        series: Arc<BudgetSeries>,
    ) -> Result<Self, StoreError> {
        let timeout = config.store_timeout;
        let (client, connection) = store::open(&StoreSettings {
            table: "tenants.budgets",
            url,
            tls: &config.store_tls,
            cluster: config.store_cluster,
            timeout,
        })?;
        let (settlements, queue) = mpsc::channel(config.settle_queue);
        let pending = Arc::new(AtomicUsize::new(0));
        let keys = Keys {
            prefix: config.key_prefix.clone(),
        };
        tokio::spawn(
            Settler {
                connection: connection.clone(),
                script: Script::new(include_str!("settle.lua")),
                keys: keys.clone(),
                lease: config.stream_lease,
                pending: Arc::clone(&pending),
                series: Arc::clone(&series),
            }
            .run(queue),
        );
        Ok(Self {
            client,
            connection,
            next_diagnosis: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            opened: Instant::now(),
            admit: Script::new(include_str!("admit.lua")),
            keys,
            lease: config.stream_lease,
            timeout,
            settlements,
            pending,
            series,
        })
    }

    /// At start: connects once and asks `PING`, within `store_timeout`. A TLS handshake Redis or
    /// tokenmeter refused is a configuration error, and its error says so; a Redis that is down or
    /// slow is not (it is one more store error, decided by the policy), and this answers `Ok`
    /// after a warning.
    pub async fn verify(&self) -> Result<(), StoreError> {
        match self.connect_once().await {
            Err(StoreError::Tls(detail)) => Err(StoreError::Config(format!(
                "the TLS handshake with Redis failed ({detail}): check tenants.budgets.store_tls (ca, cert, key) and the URL's host"
            ))),
            Err(other) => {
                tracing::warn!(error = %other, "budget store: Redis did not answer at start; serving by on_store_error until it does");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// After an admission timed out: why, at most once per [`DIAGNOSE_EVERY`], on a task of its
    /// own. The shared connection keeps retrying a connection that fails, so what a request sees
    /// is only a timeout; a handshake refused on a connection of its own is counted
    /// (`op="connect", error="tls"`) and logged with what rustls said.
    fn diagnose(&self) {
        let Some(client) = self.client.clone() else {
            return;
        };
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_diagnosis.load(Ordering::Relaxed);
        let every = u64::try_from(DIAGNOSE_EVERY.as_millis()).unwrap_or(u64::MAX);
        if now < next
            || self
                .next_diagnosis
                .compare_exchange(
                    next,
                    now.saturating_add(every),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let (series, timeout) = (Arc::clone(&self.series), self.timeout);
        tokio::spawn(async move {
            if let Err(StoreError::Tls(detail)) = connect(&client, timeout).await {
                series.store_error(Op::Connect, "tls");
                tracing::warn!(error = %detail, "budget store: the TLS handshake with Redis failed; check tenants.budgets.store_tls and the URL's host");
            }
        });
    }

    /// One connection of its own and a `PING`, within `store_timeout`.
    async fn connect_once(&self) -> Result<(), StoreError> {
        match &self.client {
            Some(client) => connect(client, self.timeout).await,
            None => {
                let mut connection = self.connection.clone();
                let command = redis::cmd("PING");
                let ping = command.query_async::<String>(&mut connection);
                match tokio::time::timeout(self.timeout, ping).await {
                    Ok(Ok(_pong)) => Ok(()),
                    Ok(Err(err)) => Err(StoreError::from_redis(&err)),
                    Err(_elapsed) => Err(StoreError::Timeout),
                }
            }
        }
    }

    /// One round trip: checks and charges, or says which limit refused (within `store_timeout`).
    pub async fn admit(&self, ask: &Ask<'_>) -> Result<Verdict, StoreError> {
        let now = ask.now;
        let minute = now.minute();
        let tenant = self.keys.tenant(ask.tenant);
        let limit =
            |limit: Option<u64>| limit.map_or(-1, |limit| limit.min(i64::MAX as u64) as i64);
        let limits = ask.limits;
        let mut invocation = self.admit.prepare_invoke();
        invocation
            .key(tenant.tokens(minute.saturating_sub(1)))
            .key(tenant.tokens(minute))
            .key(tenant.requests(minute.saturating_sub(1)))
            .key(tenant.requests(minute))
            .key(tenant.day(now.day()))
            .key(tenant.slots())
            .key(tenant.marker(ask.id))
            .arg(now.into_minute())
            .arg(limit(limits.tokens_per_minute))
            .arg(limit(limits.tokens_per_day))
            .arg(limit(limits.requests_per_minute))
            .arg(limit(limits.concurrent_streams))
            .arg(ask.reserve)
            .arg(member(ask.id, ask.reserve))
            .arg(now.0)
            .arg(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX));
        let mut connection = self.connection.clone();
        let started = Instant::now();
        let reply: Vec<i64> = match tokio::time::timeout(
            self.timeout,
            invocation.invoke_async(&mut connection),
        )
        .await
        {
            Ok(Ok(reply)) => reply,
            Ok(Err(err)) => return Err(StoreError::from_redis(&err)),
            Err(_elapsed) => {
                self.diagnose();
                return Err(StoreError::Timeout);
            }
        };
        self.series.round_trip(Op::Admit, started.elapsed());
        let count = |at: usize| {
            reply
                .get(at)
                .copied()
                .and_then(|value| u64::try_from(value).ok())
                .ok_or_else(|| StoreError::Reply(format!("admit.lua answered {reply:?}")))
        };
        let counted = Counted {
            tokens: [count(1)?, count(2)?],
            requests: [count(3)?, count(4)?],
            day_tokens: count(5)?,
            streams: count(6)?,
        };
        Ok(match count(0)? {
            0 => Verdict::Admitted(counted),
            1 => Verdict::Over(Limit::TokensPerMinute, counted),
            2 => Verdict::Over(Limit::TokensPerDay, counted),
            3 => Verdict::Over(Limit::RequestsPerMinute, counted),
            4 => Verdict::Over(Limit::ConcurrentStreams, counted),
            // Settled or withdrawn before its admission came: only a late or repeated copy of
            // an admission gets this, and nothing waits on its answer any more.
            5 => {
                return Err(StoreError::Reply(
                    "admit.lua: the request was settled before its admission arrived".to_owned(),
                ))
            }
            other => {
                return Err(StoreError::Reply(format!(
                    "admit.lua answered limit {other}"
                )))
            }
        })
    }

    /// Queues a settlement for the settlement task; a full queue drops it, counted.
    pub fn settle(&self, settlement: Settlement) {
        match self.settlements.try_send(settlement) {
            Ok(()) => {
                let pending = self.pending.fetch_add(1, Ordering::Relaxed) + 1;
                self.series.pending.set(pending as f64);
            }
            Err(_full_or_closed) => self.series.dropped.increment(1),
        }
    }

    /// Settlements not yet in Redis.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Waits, at most `within`, for every queued settlement to be in Redis (at shutdown, after the
    /// drain); returns how many were not.
    pub async fn flush(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        while self.pending() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.pending()
    }
}

/// A connection to `client` of its own and a `PING`, within `timeout`.
async fn connect(client: &redis::Client, timeout: Duration) -> Result<(), StoreError> {
    let ping = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
    };
    match tokio::time::timeout(timeout, ping).await {
        Ok(Ok(_pong)) => Ok(()),
        Ok(Err(err)) => Err(StoreError::from_redis(&err)),
        Err(_elapsed) => Err(StoreError::Timeout),
    }
}
