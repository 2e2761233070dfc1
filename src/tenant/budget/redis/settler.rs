//! The settlement task: settlements leave the finish point through a bounded queue to it, and it
//! sends them to Redis in pipelined batches, retried while Redis is away.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::keys::{member, Keys};
use crate::store::{Connection, RETRY_MAX};
use crate::tenant::budget::exchange::{Settlement, StoreError};
use crate::tenant::budget::series::{BudgetSeries, Op};
use crate::tenant::budget::window::Now;

/// Settlements the task takes from its queue at a time.
const SETTLE_BATCH: usize = 64;

/// The task's pause after Redis failed it, doubling up to the store's [`RETRY_MAX`] (the
/// connection's reconnection back-off).
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The settlement task.
pub(super) struct Settler {
    pub(super) connection: Connection,
    pub(super) script: Script,
    pub(super) keys: Keys,
    /// How long a request's marker is kept after its settlement.
    pub(super) lease: Duration,
    pub(super) pending: Arc<AtomicUsize>,
    pub(super) series: Arc<BudgetSeries>,
}

impl Settler {
    /// Settles what the queue brings, a batch at a time in one pipelined round trip; a batch
    /// Redis fails is retried whole (after a pause that doubles) until it is in, so that usage is
    /// never lost to an outage shorter than the queue. Retrying whole is safe: each settlement
    /// applies once however often it is sent (`settle.lua`).
    pub(super) async fn run(self, mut queue: mpsc::Receiver<Settlement>) {
        let mut batch = Vec::with_capacity(SETTLE_BATCH);
        let mut pause = RETRY_FIRST;
        loop {
            if batch.is_empty() && queue.recv_many(&mut batch, SETTLE_BATCH).await == 0 {
                return;
            }
            match self.settle(&batch).await {
                Ok(()) => {
                    let done = batch.len();
                    batch.clear();
                    let pending = self.pending.fetch_sub(done, Ordering::Relaxed) - done;
                    self.series.pending.set(pending as f64);
                    pause = RETRY_FIRST;
                }
                Err(err) => {
                    tracing::warn!(error = %err, settlements = batch.len(), "budget settlement failed; retrying");
                    self.series.store_error(Op::Settle, err.as_str());
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// The batch in one round trip (one per tenant on a cluster).
    async fn settle(&self, batch: &[Settlement]) -> Result<(), StoreError> {
        if !self.connection.is_cluster() {
            return self.settle_pipelined(batch).await;
        }
        // A cluster's pipeline stays within one slot: one per tenant, in the batch's order.
        let mut tenants: Vec<Arc<str>> = Vec::new();
        for settlement in batch {
            if !tenants.contains(&settlement.tenant) {
                tenants.push(Arc::clone(&settlement.tenant));
            }
        }
        for tenant in tenants {
            let theirs: Vec<Settlement> = batch
                .iter()
                .filter(|settlement| settlement.tenant == tenant)
                .cloned()
                .collect();
            self.settle_pipelined(&theirs).await?;
        }
        Ok(())
    }

    /// One round trip for `batch`: `EVALSHA settle.lua` per settlement, pipelined; a Redis that
    /// lost its scripts (restarted) is given it again and asked once more. Each settlement that
    /// asks for it, and whose day is today's, reports the day's tokens the script answered.
    async fn settle_pipelined(&self, batch: &[Settlement]) -> Result<(), StoreError> {
        let now = Now::wall();
        let mut pipe = redis::pipe();
        for settlement in batch {
            pipe.add_command(self.command(settlement, now));
        }
        let mut connection = self.connection.clone();
        let started = Instant::now();
        let mut result: redis::RedisResult<Vec<i64>> = pipe.query_async(&mut connection).await;
        if matches!(&result, Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
        {
            self.script
                .load_async(&mut connection)
                .await
                .map_err(|err| StoreError::from_redis(&err))?;
            result = pipe.query_async(&mut connection).await;
        }
        match result {
            Ok(days) => {
                self.series.round_trip(Op::Settle, started.elapsed());
                for (settlement, day_tokens) in batch.iter().zip(days) {
                    if let (Some(report), Ok(day_tokens)) =
                        (&settlement.report, u64::try_from(day_tokens))
                    {
                        if settlement.day == now.day() {
                            report.report(&self.series, day_tokens);
                        }
                    }
                }
                Ok(())
            }
            Err(err) => Err(StoreError::from_redis(&err)),
        }
    }

    /// `EVALSHA settle.lua` for one settlement.
    fn command(&self, settlement: &Settlement, now: Now) -> redis::Cmd {
        let tenant = self.keys.tenant(&settlement.tenant);
        let minute_counts = now.minute() <= settlement.minute + 1;
        let mut command = redis::cmd("EVALSHA");
        command
            .arg(self.script.get_hash())
            .arg(5)
            .arg(tenant.tokens(settlement.minute))
            .arg(tenant.day(settlement.day))
            .arg(tenant.slots())
            .arg(tenant.marker(settlement.id))
            .arg(tenant.requests(settlement.minute))
            .arg(settlement.used)
            .arg(settlement.reserved)
            .arg(member(settlement.id, settlement.reserved))
            .arg(u8::from(settlement.in_store))
            .arg(u8::from(minute_counts))
            .arg(u8::from(settlement.withdrawn))
            .arg(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX));
        command
    }
}
