//! Each tenant's token budgets and rate limits (`[tenants.budgets]`): tokens per minute and per
//! day (counting input, output or both), requests per minute and streams in flight.
//!
//! **Reservation and settlement.** A request is admitted against what it may use: its prompt
//! (the router's estimate) plus its output limit (`max_tokens`, else
//! `default_max_tokens`), as the limits' `counts` says. The reservation is charged when it is
//! admitted ([`layer`], after the plan, so the estimate is known, and before the dispatch, so a
//! refused request never reaches a backend); at the finish point ([`settle`]) the difference
//! between the exact usage (as the tenant counters count it) and the reservation is charged to
//! the same windows, and the stream's slot is freed. A request over a limit is answered 429
//! with `retry-after` and an OpenAI-style error; a stream already admitted is never cut, so a
//! tenant can overshoot a token limit by what its requests use beyond their reservations (a
//! prompt the estimate undercounted; output past `default_max_tokens` when a request named no
//! limit).
//!
//! **Stores.** [`memory`] keeps the counts in this process; [`redis`] shares them between every
//! replica naming the same Redis (one atomic script per admission; settlements pipelined in
//! batches). When the
//! store does not answer within `store_timeout`, `on_store_error` decides: `allow` lets the
//! request through unchecked (its whole usage is settled once the store is back), `deny`
//! answers 503. What the budgets ask a store and what it answers is in `exchange.rs` (the
//! limits in `limit.rs`): this file chooses between the stores, and they use only that.
//!
//! Budgets apply to generation requests (a request the meter reads a body of); the rest pass
//! unchecked. The limits follow reloads; the store is kept for the process's life.
//!
//! **What the used-ratio gauge reads.** `tokenmeter_budget_used_ratio{tenant,limit}` is the
//! share of each limit the tenant has used, as the store last said: at each admission, the
//! counts with the admitted request's reservation; at each refusal, the counts that refused it
//! (a tenant refused at 186 of 200 daily tokens reads 0.93); and, for `tokens_per_day`, the day's
//! count after each settlement (so the figure follows the exact usage, not the reservations,
//! and a tenant that stops sending keeps its last real figure). The gauge once read only the
//! counts *before* each admitted request and moved at nothing else, so a tenant refused at 93 %
//! read what it had used two requests earlier (62 %), and the near-limit alert never fired.
use std::sync::Arc;
use std::time::Duration;

use crate::config::{BudgetsConfig, Counts, Limits, OnStoreError, StoreUrl};
use crate::context::RequestContext;
use crate::tenant::budget::record::BudgetHold;

mod exchange;
pub mod layer;
mod limit;
pub mod memory;
pub mod record;
pub mod redis;
mod refusal;
pub mod series;
pub mod settle;
pub mod window;

#[cfg(test)]
mod tests;

pub(crate) use exchange::DayReport;
pub use exchange::{Ask, Counted, Settlement, StoreError, Verdict};
pub use limit::Limit;
pub use refusal::BudgetRefusal;
use series::{BudgetSeries, Op};
use window::Now;

/// Where the budgets are kept, for the process's life.
#[derive(Debug)]
pub enum Store {
    Memory(memory::MemoryStore),
    /// Boxed: the Redis store holds its client and connection (hundreds of bytes).
    Redis(Box<redis::RedisStore>),
}

impl Store {
    /// The store `config` names (Redis connects on first use). Call from within the runtime.
    pub fn open(config: &BudgetsConfig, series: Arc<BudgetSeries>) -> Result<Self, StoreError> {
        Ok(match config.store_url() {
            StoreUrl::Memory => Store::Memory(memory::MemoryStore::reporting(series)),
            StoreUrl::Redis(url) => {
                Store::Redis(Box::new(redis::RedisStore::open(&url, config, series)?))
            }
        })
    }

    async fn admit(&self, ask: &Ask<'_>) -> Result<Verdict, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.admit(ask)),
            Store::Redis(store) => store.admit(ask).await,
        }
    }

    /// Settles a finished request; the store reports the tenant's day where the settlement asks
    /// (the memory store at once, Redis once its settlement task has charged it).
    fn settle(&self, settlement: Settlement) {
        match self {
            Store::Memory(store) => {
                store.settle(&settlement, Now::wall());
            }
            Store::Redis(store) => store.settle(settlement),
        }
    }

    /// Takes back the reservation of a request refused after its admission failed, should the
    /// admission have reached the store after all (only a shared store can fail).
    fn withdraw(&self, settlement: Settlement) {
        match self {
            Store::Memory(_) => {}
            Store::Redis(store) => store.settle(settlement),
        }
    }

    /// At start: a shared store refuses to start over a TLS handshake it cannot make (see
    /// [`redis::RedisStore::verify`]); anything else waits for the requests.
    pub async fn verify(&self) -> Result<(), StoreError> {
        match self {
            Store::Memory(_) => Ok(()),
            Store::Redis(store) => store.verify().await,
        }
    }

    /// At shutdown: waits, at most `within`, for the settlements still queued; returns how many
    /// were left.
    pub async fn flush(&self, within: Duration) -> usize {
        match self {
            Store::Memory(_) => 0,
            Store::Redis(store) => store.flush(within).await,
        }
    }
}

/// One stack revision's budgets: its limits over the process's store.
#[derive(Debug)]
pub struct Budgets {
    config: BudgetsConfig,
    store: Arc<Store>,
    series: Arc<BudgetSeries>,
}

/// The budget key of a request without a tenant name.
const ANONYMOUS: &str = super::series::ANONYMOUS;

impl Budgets {
    /// The budgets of `config` over `store`; `None` when no tenant has a limit.
    pub fn new(
        config: &BudgetsConfig,
        store: &Arc<Store>,
        series: &Arc<BudgetSeries>,
    ) -> Option<Self> {
        config.enabled().then(|| Self {
            config: config.clone(),
            store: Arc::clone(store),
            series: Arc::clone(series),
        })
    }

    /// Admits the request of `context` against its tenant's budget, writing its hold, or says
    /// why not. A request that is not a generation, or whose tenant has no limit, passes.
    pub async fn admit(&self, context: &mut RequestContext) -> Result<(), BudgetRefusal> {
        let Some(generation) = &context.request.generation else {
            return Ok(());
        };
        let named = context.tenant.as_ref();
        let tenant: Arc<str> = named
            .and_then(|named| named.name.clone())
            .unwrap_or_else(|| Arc::from(ANONYMOUS));
        let Some(limits) = self.config.limits_for(&tenant) else {
            return Ok(());
        };
        let label = named.map_or_else(|| Arc::clone(&tenant), |named| Arc::clone(&named.label));
        let max_tokens = generation
            .read
            .as_ref()
            .and_then(|read| read.facts.max_tokens)
            .unwrap_or(self.config.default_max_tokens);
        let prompt = context.route.estimate.map_or(0, |estimate| estimate.tokens);
        let reserve = match limits.counts {
            Counts::Input => prompt,
            Counts::Output => max_tokens,
            Counts::Total => prompt.saturating_add(max_tokens),
        };
        let now = Now::wall();
        let ask = Ask {
            tenant: &tenant,
            limits,
            reserve,
            id: rand::random(),
            now,
        };
        let report = |counted: &Counted, admitted: bool| {
            for limit in Limit::ALL {
                if let Some(cap) = limit.of(limits) {
                    // Admitted, its reservation (or its one request, its slot) is charged now.
                    let charged = if admitted {
                        Counted::need(limit, reserve)
                    } else {
                        0
                    };
                    let used = counted.used(limit, now).saturating_add(charged);
                    self.series.used(&label, limit, used as f64 / cap as f64);
                }
            }
        };
        let hold = |in_store: bool| {
            Box::new(BudgetHold {
                tenant: Arc::clone(&tenant),
                counts: limits.counts,
                reserved: reserve,
                in_store,
                minute: now.minute(),
                day: now.day(),
                id: ask.id,
            })
        };
        match self.store.admit(&ask).await {
            Ok(Verdict::Admitted(counted)) => {
                report(&counted, true);
                context.budget = Some(hold(true));
                Ok(())
            }
            Ok(Verdict::Over(limit, counted)) => {
                // What the store counted is the tenant's real use, settled usage included:
                // the gauge says how close to its limits the refused tenant is.
                report(&counted, false);
                self.series.rejected(&label, limit.as_str());
                let retry_after = counted.wait(limit, limits, reserve, now);
                Err(BudgetRefusal::Over {
                    limit: limit.as_str(),
                    message: refusal(limit, limits, &counted, reserve, now, retry_after),
                    retry_after,
                })
            }
            Err(err) => {
                tracing::warn!(error = %err, "budget admission unchecked");
                self.series.store_error(Op::Admit, err.as_str());
                match self.config.on_store_error {
                    OnStoreError::Allow => {
                        self.series.fallback("allow");
                        context.budget = Some(hold(false));
                        Ok(())
                    }
                    OnStoreError::Deny => {
                        self.series.fallback("deny");
                        self.series.rejected(&label, "store_unavailable");
                        // The admission may have reached the store with only its answer lost:
                        // take back the reservation if it is there (a no-op if it is not).
                        self.store.withdraw(Settlement {
                            tenant: Arc::clone(&tenant),
                            minute: now.minute(),
                            day: now.day(),
                            used: 0,
                            reserved: reserve,
                            in_store: true,
                            withdrawn: true,
                            id: ask.id,
                            report: None,
                        });
                        Err(BudgetRefusal::StoreUnavailable)
                    }
                }
            }
        }
    }

    /// Where the settlement of `hold` reports the tenant's day: under `label`, when the tenant
    /// has a day limit in this revision.
    pub(crate) fn day_report(&self, hold: &BudgetHold, label: Arc<str>) -> Option<DayReport> {
        let limit = self.config.limits_for(&hold.tenant)?.tokens_per_day?;
        Some(DayReport { label, limit })
    }
}

/// Settles `hold` in `store`, given what the request used; `report` says where the tenant's day
/// is reported once it is charged.
pub(crate) fn settle_with(
    store: &Store,
    hold: &BudgetHold,
    input: u64,
    output: u64,
    report: Option<DayReport>,
) {
    let used = match hold.counts {
        Counts::Input => input,
        Counts::Output => output,
        Counts::Total => input.saturating_add(output),
    };
    store.settle(Settlement {
        tenant: Arc::clone(&hold.tenant),
        minute: hold.minute,
        day: hold.day,
        used,
        reserved: hold.reserved,
        in_store: hold.in_store,
        withdrawn: false,
        id: hold.id,
        report,
    });
}

/// The 429's message: which limit, how much is used, what was asked, when to come back.
fn refusal(
    limit: Limit,
    limits: &Limits,
    counted: &Counted,
    reserve: u64,
    now: Now,
    retry_after: Option<Duration>,
) -> String {
    let cap = limit.of(limits).unwrap_or_default();
    let used = counted.used(limit, now);
    let asked = Counted::need(limit, reserve);
    let unit = match limit {
        Limit::TokensPerMinute | Limit::TokensPerDay => "tokens",
        Limit::RequestsPerMinute | Limit::ConcurrentStreams => "requests",
    };
    match retry_after {
        Some(wait) => format!(
            "tenant budget exceeded: {} limit {cap}, used {used}, this request needs {asked} {unit}; retry in {:.1}s",
            limit.as_str(),
            wait.as_secs_f64()
        ),
        None => format!(
            "this request needs {asked} {unit}, more than the tenant's {} limit of {cap}; lower max_tokens or the prompt",
            limit.as_str()
        ),
    }
}
