//! The budget subsystem's series: what each tenant was refused and how much of its limits it has
//! used, and how the store answers.
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label};

use super::limit::Limit;
use crate::metrics::Metrics;
use crate::tenant::series::labels;

/// Requests refused by a budget, by `tenant` and `limit` (a [`Limit`], or `store_unavailable`
/// when the store did not answer and `on_store_error = "deny"`).
pub(crate) const REJECTIONS: &str = "tokenmeter_budget_rejections_total";
/// The share of each of a tenant's limits used, by `tenant` and `limit`, as the store last said:
/// at each admission (with the admitted request's reservation), at each refusal, and for
/// `tokens_per_day` after each settlement (see [`super`]; with Redis, the fleet's figure:
/// aggregate with `max by (tenant)`).
pub(crate) const USED_RATIO: &str = "tokenmeter_budget_used_ratio";
/// The store's round trip, by `op` (`admit`, `settle`): Redis only.
pub(crate) const STORE_SECONDS: &str = "tokenmeter_budget_store_seconds";
/// The store's failures, by `op` and `error` (`timeout`, `unavailable`, `reply`).
pub(crate) const STORE_ERRORS: &str = "tokenmeter_budget_store_errors_total";
/// Requests the `on_store_error` policy decided, by `policy` (`allow`, `deny`).
pub(crate) const STORE_FALLBACKS: &str = "tokenmeter_budget_store_fallbacks_total";
/// Settlements waiting for the store.
pub(crate) const SETTLEMENTS_PENDING: &str = "tokenmeter_budget_settlements_pending";
/// Settlements dropped because their queue was full.
pub(crate) const SETTLEMENTS_DROPPED: &str = "tokenmeter_budget_settlements_dropped_total";

/// A Redis round trip is a fraction of a millisecond in a cluster; the top edges show the
/// timeouts.
const STORE_BUCKETS: [f64; 13] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// The store's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Admit,
    Settle,
    /// A connection of its own that the store makes to find out why admissions time out (a
    /// TLS handshake refused, which the reconnecting connection would only show as waiting).
    Connect,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Admit => "admit",
            Op::Settle => "settle",
            Op::Connect => "connect",
        }
    }
}

/// The budget series, resolved once (the tenant-labelled ones per use: a budget decision is per
/// request, never per chunk).
#[derive(Debug)]
pub struct BudgetSeries {
    metrics: Arc<Metrics>,
    admit_seconds: Histogram,
    settle_seconds: Histogram,
    pub pending: Gauge,
    pub dropped: Counter,
    /// Each tenant label's used-ratio gauges, by [`Limit::ALL`] order, made on first use: an
    /// admission sets up to four, which a registry lookup each would make the larger part of
    /// its cost. Bounded as the label is.
    used: RwLock<HashMap<Arc<str>, Arc<UsedGauges>>>,
}

type UsedGauges = [OnceLock<Gauge>; 4];

impl BudgetSeries {
    /// The series; the store's own (round trip, settlements) exist only with a shared store
    /// (`shared`), the only one that records them.
    pub fn new(metrics: Arc<Metrics>, shared: bool) -> Self {
        metrics.define_described_histogram(
            STORE_SECONDS,
            &STORE_BUCKETS,
            "The budget store's round trip (Redis), by op: admit, settle.",
        );
        metrics.describe_counter(
            REJECTIONS,
            "Requests refused by a tenant budget, by tenant and limit (tokens_per_minute, tokens_per_day, requests_per_minute, concurrent_streams, store_unavailable).",
        );
        metrics.describe_gauge(
            USED_RATIO,
            "The share of each of a tenant's limits used, by tenant and limit: set at each admission (with its reservation), each refusal, and for tokens_per_day each settlement.",
        );
        metrics.describe_counter(
            STORE_ERRORS,
            "Budget store failures, by op (admit, settle) and error (timeout, unavailable, reply).",
        );
        metrics.describe_counter(
            STORE_FALLBACKS,
            "Requests decided by tenants.budgets.on_store_error because the store did not answer, by policy.",
        );
        metrics.describe_gauge(
            SETTLEMENTS_PENDING,
            "Budget settlements waiting for the store.",
        );
        metrics.describe_counter(
            SETTLEMENTS_DROPPED,
            "Budget settlements dropped because their queue was full.",
        );
        let op = |op: Op| vec![Label::new("op", op.as_str())];
        if !shared {
            return Self {
                admit_seconds: Histogram::noop(),
                settle_seconds: Histogram::noop(),
                pending: Gauge::noop(),
                dropped: Counter::noop(),
                used: RwLock::default(),
                metrics,
            };
        }
        Self {
            admit_seconds: metrics.histogram(STORE_SECONDS, &op(Op::Admit)),
            settle_seconds: metrics.histogram(STORE_SECONDS, &op(Op::Settle)),
            pending: metrics.gauge(SETTLEMENTS_PENDING, Vec::new()),
            dropped: metrics.counter(SETTLEMENTS_DROPPED, Vec::new()),
            used: RwLock::default(),
            metrics,
        }
    }

    /// Makes the store's error and fallback series exist at zero, so that a rate over them (an
    /// alert, a panel) reads 0 rather than nothing before the first error.
    pub(crate) fn prime(&self) {
        for op in [Op::Admit, Op::Settle, Op::Connect] {
            for error in ["timeout", "unavailable", "reply", "tls"] {
                self.metrics
                    .counter(
                        STORE_ERRORS,
                        vec![Label::new("op", op.as_str()), Label::new("error", error)],
                    )
                    .increment(0);
            }
        }
        for policy in ["allow", "deny"] {
            self.metrics
                .counter(STORE_FALLBACKS, vec![Label::new("policy", policy)])
                .increment(0);
        }
    }

    /// A store round trip that answered.
    pub(crate) fn round_trip(&self, op: Op, took: Duration) {
        let histogram = match op {
            Op::Admit => &self.admit_seconds,
            Op::Settle => &self.settle_seconds,
            Op::Connect => return,
        };
        histogram.record(took.as_secs_f64());
    }

    pub(crate) fn store_error(&self, op: Op, error: &'static str) {
        self.metrics
            .counter(
                STORE_ERRORS,
                vec![Label::new("op", op.as_str()), Label::new("error", error)],
            )
            .increment(1);
    }

    pub fn fallback(&self, policy: &'static str) {
        self.metrics
            .counter(STORE_FALLBACKS, vec![Label::new("policy", policy)])
            .increment(1);
    }

    pub fn rejected(&self, tenant: &Arc<str>, limit: &'static str) {
        self.metrics
            .counter(REJECTIONS, labels(tenant, &[("limit", limit)]))
            .increment(1);
    }

    pub fn used(&self, tenant: &Arc<str>, limit: Limit, ratio: f64) {
        let known = self
            .used
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(tenant)
            .cloned();
        let gauges = known.unwrap_or_else(|| {
            Arc::clone(
                self.used
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .entry(Arc::clone(tenant))
                    .or_default(),
            )
        });
        let slot = Limit::ALL
            .iter()
            .position(|&each| each == limit)
            .unwrap_or_default();
        gauges[slot]
            .get_or_init(|| {
                self.metrics
                    .gauge(USED_RATIO, labels(tenant, &[("limit", limit.as_str())]))
            })
            .set(ratio);
    }
}
