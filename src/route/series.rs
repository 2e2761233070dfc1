//! The router's series: routing decisions, affinity, backend health and load, and the prompt
//! estimate's calibration; their names and help texts, and the handles the router resolves once
//! per backend, pool or model.
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Label, SharedString};

use crate::metrics::{shared_label, Metrics, LABEL_BACKEND, LABEL_MODEL, LABEL_POOL};

/// Routing decisions by `pool` and `reason` (rule, fallback, spill, panic).
pub const ROUTE_DECISIONS: &str = "tokenmeter_route_decisions_total";
/// Affinity decisions of pools with an `affinity`, by `pool` and `result` (hit, miss, overloaded).
pub(crate) const AFFINITY_DECISIONS: &str = "tokenmeter_affinity_decisions_total";
/// Prompt blocks a pool's prefix index holds, by `pool`.
pub(crate) const AFFINITY_INDEX_BLOCKS: &str = "tokenmeter_affinity_index_blocks";
/// Requests retried on another backend after a failure before any response byte, by the failed
/// backend's `pool` and `backend`.
pub(crate) const ROUTE_RETRIES: &str = "tokenmeter_route_retries_total";
/// 1 while a backend takes traffic, 0 while it is ejected, by `pool` and `backend`.
pub(crate) const BACKEND_HEALTHY: &str = "tokenmeter_backend_healthy";
/// Requests sent to a backend whose stream has not ended, by `pool` and `backend`.
pub(crate) const BACKEND_INFLIGHT: &str = "tokenmeter_backend_inflight";
/// 1 while a backend is one of its pool's prefill-heavy replicas (`balance = "slo"`: designated
/// from the measured prefill demand), 0 otherwise; by `pool` and `backend`.
pub(crate) const BACKEND_PREFILL_HEAVY: &str = "tokenmeter_backend_prefill_heavy";
/// The prompt tokens per second a backend prefills, as its latency model learned it: the supply
/// the designation weighs (`balance = "slo"` pools that designate; refreshed with it).
pub(crate) const BACKEND_PREFILL_RATE: &str = "tokenmeter_backend_prefill_rate_tokens_per_second";
/// Changes of a pool's prefill-heavy replicas, by `pool` and `move` (`in`: a replica became one;
/// `out`: one stopped being one, its demand gone or the replica failed).
pub(crate) const PREFILL_HEAVY_MOVES: &str = "tokenmeter_prefill_heavy_moves_total";
/// The prompt tokens per second of a pool's long prompts (those whose prefill would stall the
/// streams beside it), less what the prompt caches held, as the designation measures it.
pub(crate) const PREFILL_DEMAND: &str = "tokenmeter_prefill_demand_tokens_per_second";
/// Ejections of a backend by passive or active health checking.
pub(crate) const BACKEND_EJECTIONS: &str = "tokenmeter_backend_ejections_total";
/// Health checks that a run of answer failures asked for, by `result`: `ejected` (the check
/// failed too), `kept` (it passed: the requests were at fault), `unavailable` (no health endpoint).
pub(crate) const BACKEND_CONFIRMATIONS: &str = "tokenmeter_backend_health_confirmations_total";
/// (estimated - actual) / actual prompt tokens, per finished request that reported
/// `usage.prompt_tokens`.
pub(crate) const PROMPT_ESTIMATE_ERROR: &str = "tokenmeter_prompt_estimate_error_ratio";
/// The calibrated tokens-per-byte ratio of each model's prompts.
pub(crate) const PROMPT_TOKENS_PER_BYTE: &str = "tokenmeter_prompt_tokens_per_byte";
/// The router's calls to a backend's `/tokenize` for an untrusted model, by `mode` (`wait`: the
/// request's pool depended on the count; `background`: a calibration sample) and `result` (`ok`,
/// `unsupported`, `error`, `timeout`).
pub(crate) const PROMPT_TOKENIZE: &str = "tokenmeter_prompt_tokenize_total";
/// predicted / measured latency of requests placed by `balance = "slo"`, by `pool` and `kind`
/// (`ttft`: from the dispatch to the first token; `tpot`: the mean gap between tokens).
pub(crate) const PREDICTION_ERROR: &str = "tokenmeter_prediction_error_ratio";
/// Placements of `balance = "slo"` pools, by `pool` and `decision` (`met`: predicted to meet both
/// targets; `missed`: no backend was, the request went to the one with the fewest streams).
pub(crate) const SLO_DECISIONS: &str = "tokenmeter_slo_decisions_total";
/// Requests waiting in a pool's gateway queue, by `pool`.
pub(crate) const QUEUE_DEPTH: &str = "tokenmeter_queue_depth";
/// Time from joining a pool's gateway queue to leaving it (placed, late or shed), by `pool`.
pub(crate) const QUEUE_WAIT: &str = "tokenmeter_queue_wait_seconds";
/// Requests through a pool's gateway queue, by `pool` and how they left it (`exit`): `direct`
/// (nothing waiting and a backend had room: never queued), `placed` (after waiting), `late` (sent
/// after its deadline could no longer be met, `on_deadline = "send"`), `shed_deadline`,
/// `shed_full`, `cancelled` (the client left while it waited).
pub(crate) const QUEUE_EXITS: &str = "tokenmeter_queue_exits_total";

/// Relative error edges of the prompt estimate: symmetric around 0, finer near it.
const ESTIMATE_ERROR_BUCKETS: [f64; 13] = [
    -0.5, -0.25, -0.1, -0.05, -0.02, -0.01, 0.0, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5,
];

/// Ratio edges of predicted / measured latency: symmetric around 1 in log scale, finer near it.
const PREDICTION_ERROR_BUCKETS: [f64; 15] = [
    0.25, 0.5, 0.67, 0.77, 0.83, 0.91, 0.95, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0, 4.0,
];

/// Edges of the queue wait, in seconds: a TTFT target's worth, finer at the start.
const QUEUE_WAIT_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Defines the estimate-error histogram and describes every series of the router; the router
/// does this whenever it is built (again on reload: the first definition stands).
/// Requests a second offered to a `balance = "slo"` pool (placed, queued or shed), a moving
/// average; by `pool`.
pub(crate) const POOL_OFFERED: &str = "tokenmeter_pool_offered_requests_per_second";
/// The offered load one `[pools.autoscale] cold_start` ahead, from its trend: what the desired
/// count is asked for. By `pool`.
pub(crate) const POOL_FORECAST: &str = "tokenmeter_pool_forecast_requests_per_second";
/// Requests a second a pool's available backends sustain with its SLO targets met, as their
/// latency models predict at the pool's mix; NaN before they are known. By `pool`.
pub(crate) const POOL_CAPACITY: &str = "tokenmeter_pool_capacity_requests_per_second";
/// A pool's capacity over its offered load (at most 10); NaN with the capacity. By `pool`.
pub(crate) const POOL_HEADROOM: &str = "tokenmeter_pool_slo_headroom_ratio";
/// The replicas a pool should run to keep its headroom target (`[pools.autoscale]`). By `pool`.
pub(crate) const POOL_DESIRED: &str = "tokenmeter_pool_desired_replicas";
/// A pool's backends available now (healthy, not ejected). By `pool`.
pub(crate) const POOL_READY: &str = "tokenmeter_pool_ready_replicas";
/// What a pool's models' capacity is multiplied by, from the attainment its requests measured
/// (1 until they say otherwise). By `pool`.
pub(crate) const POOL_CALIBRATION: &str = "tokenmeter_pool_capacity_calibration_ratio";

pub fn describe(metrics: &Metrics) {
    metrics.define_described_histogram(
        PROMPT_ESTIMATE_ERROR,
        &ESTIMATE_ERROR_BUCKETS,
        "(estimated - actual) / actual prompt tokens of the router's estimate, per response with usage.",
    );
    metrics.define_described_histogram(
        QUEUE_WAIT,
        &QUEUE_WAIT_BUCKETS,
        "Time requests spent in a pool's gateway queue before they were placed, sent late or shed.",
    );
    metrics.define_described_histogram(
        PREDICTION_ERROR,
        &PREDICTION_ERROR_BUCKETS,
        "predicted / measured latency of requests placed by balance = \"slo\", by kind: ttft (dispatch to first token), tpot (mean gap between tokens) and gap (the largest gap between tokens).",
    );
    let counters = [
        (ROUTE_DECISIONS, "Routing decisions by pool and reason (rule, fallback, spill)."),
        (AFFINITY_DECISIONS, "Affinity decisions by pool and result: hit (the backend known to hold the conversation, or the session key's home), miss (nothing known: the conversation's home), overloaded (the preferred backend was over the load bound; balancing chose)."),
        (ROUTE_RETRIES, "Requests retried elsewhere after this backend failed before any response byte."),
        (BACKEND_EJECTIONS, "Times a backend was ejected by health checking."),
        (BACKEND_CONFIRMATIONS, "Health checks asked for by a run of answer failures, by result (ejected, kept, unavailable)."),
        (SLO_DECISIONS, "Placements of balance = \"slo\" pools by decision: met (the backend chosen is predicted to meet both SLO targets), missed (none was; the one with the fewest streams)."),
        (PREFILL_HEAVY_MOVES, "Changes of a pool's prefill-heavy replicas by move: in (a replica became one, the long prompts' demand grew or one failed), out (one stopped being one)."),
        (QUEUE_EXITS, "Requests through a pool's gateway queue by exit: direct (never waited), placed (after waiting), late (sent past hope, on_deadline = send), shed_deadline, shed_full, cancelled (the client left)."),
        (PROMPT_TOKENIZE, "Calls to a backend's /tokenize for an untrusted model's prompt, by mode (wait, background) and result (ok, unsupported, error, timeout)."),
    ];
    for (name, help) in counters {
        metrics.describe_counter(name, help);
    }
    let gauges = [
        (
            BACKEND_HEALTHY,
            "1 while a backend takes traffic, 0 while it is ejected.",
        ),
        (
            BACKEND_INFLIGHT,
            "Requests sent to a backend whose response stream has not ended.",
        ),
        (
            PROMPT_TOKENS_PER_BYTE,
            "Calibrated tokens per byte of prompt text, by model.",
        ),
        (QUEUE_DEPTH, "Requests waiting in the pool's gateway queue."),
        (
            BACKEND_PREFILL_HEAVY,
            "1 while a backend is one of its pool's prefill-heavy replicas (balance = \"slo\", designated from the measured prefill demand).",
        ),
        (
            BACKEND_PREFILL_RATE,
            "Prompt tokens per second the backend prefills, as its latency model learned it (balance = \"slo\" pools that designate prefill-heavy replicas): the supply the designation weighs against the demand.",
        ),
        (
            PREFILL_DEMAND,
            "Uncached prompt tokens per second of the pool's long prompts (those whose prefill would stall the streams beside it), as the designation measures it.",
        ),
        (
            AFFINITY_INDEX_BLOCKS,
            "Prompt blocks the pool's prefix index holds (bounded by affinity_index_blocks).",
        ),
        (
            POOL_OFFERED,
            "Requests per second offered to a balance = \"slo\" pool (placed, queued or shed), a moving average over [pools.autoscale] window.",
        ),
        (
            POOL_FORECAST,
            "Requests per second a balance = \"slo\" pool is forecast to be offered [pools.autoscale] cold_start ahead, from its trend when it rises by more than its noise (else the offered rate): what the desired replicas are asked for.",
        ),
        (
            POOL_CAPACITY,
            "Requests per second the pool's available backends sustain with its SLO targets met, as their latency models predict at the pool's mix; NaN before the models and the mix are known.",
        ),
        (
            POOL_HEADROOM,
            "The pool's capacity over its offered load (at most 10): below 1 it is over what it sustains within its SLO. NaN with the capacity.",
        ),
        (
            POOL_DESIRED,
            "Replicas the pool should run to keep [pools.autoscale] headroom times its forecast load (within min_replicas and max_replicas; rises at once, falls after scale_down_after to a count that keeps headroom x (1 + tolerance)).",
        ),
        (POOL_READY, "The pool's backends available now."),
        (
            POOL_CALIBRATION,
            "What the pool's latency models' capacity is multiplied by to make its capacity, from the SLO attainment its requests measured over the last minute against [pools.autoscale] objective (1 until they say otherwise; below 1: the models are optimistic for this mix).",
        ),
    ];
    for (name, help) in gauges {
        metrics.describe_gauge(name, help);
    }
}

/// One backend's routing series, resolved when the backend is first seen.
#[derive(Debug, Clone)]
pub(crate) struct BackendMetrics {
    pub healthy: Gauge,
    pub inflight: Gauge,
    pub prefill_heavy: Gauge,
    pub prefill_rate: Gauge,
    pub retries: Counter,
    pub ejections: Counter,
    /// [`BACKEND_CONFIRMATIONS`] by result: kept, ejected, unavailable.
    pub confirmations: [Counter; 3],
}

impl BackendMetrics {
    pub fn new(metrics: &Metrics, pool: &Arc<str>, backend: &Arc<str>) -> Self {
        let set = || {
            vec![
                shared_label(LABEL_POOL, pool),
                shared_label(LABEL_BACKEND, backend),
            ]
        };
        Self {
            healthy: metrics.gauge(BACKEND_HEALTHY, set()),
            inflight: metrics.gauge(BACKEND_INFLIGHT, set()),
            prefill_heavy: metrics.gauge(BACKEND_PREFILL_HEAVY, set()),
            prefill_rate: metrics.gauge(BACKEND_PREFILL_RATE, set()),
            retries: metrics.counter(ROUTE_RETRIES, set()),
            ejections: metrics.counter(BACKEND_EJECTIONS, set()),
            confirmations: ["kept", "ejected", "unavailable"].map(|result| {
                let mut labels = set();
                labels.push(Label::new("result", result));
                metrics.counter(BACKEND_CONFIRMATIONS, labels)
            }),
        }
    }
}

/// A pool's affinity handles.
#[derive(Debug, Clone)]
pub(crate) struct AffinityMetrics {
    /// [`AFFINITY_DECISIONS`] by result: hit, miss, overloaded.
    pub decisions: [Counter; 3],
    pub blocks: Gauge,
}

impl AffinityMetrics {
    pub fn new(metrics: &Metrics, pool: &str) -> Self {
        let pool = SharedString::from(pool.to_owned());
        Self {
            decisions: ["hit", "miss", "overloaded"].map(|result| {
                let labels = vec![
                    Label::new(LABEL_POOL, pool.clone()),
                    Label::new("result", result),
                ];
                metrics.counter(AFFINITY_DECISIONS, labels)
            }),
            blocks: metrics.gauge(
                AFFINITY_INDEX_BLOCKS,
                vec![Label::new(LABEL_POOL, pool.clone())],
            ),
        }
    }
}

/// A `balance = "slo"` pool's handles.
#[derive(Debug, Clone)]
pub(crate) struct SloMetrics {
    /// [`SLO_DECISIONS`] by decision: met, missed.
    pub decisions: [Counter; 2],
    pub ttft_error: Histogram,
    pub tpot_error: Histogram,
    pub gap_error: Histogram,
    /// [`PREFILL_HEAVY_MOVES`] by move: in, out.
    pub moves: [Counter; 2],
    pub demand: Gauge,
}

impl SloMetrics {
    pub fn new(metrics: &Metrics, pool: &str) -> Self {
        let pool = SharedString::from(pool.to_owned());
        let labels = |name: &'static str, value: &'static str| {
            vec![
                Label::new(LABEL_POOL, pool.clone()),
                Label::new(name, value),
            ]
        };
        metrics.define_histogram(PREDICTION_ERROR, &PREDICTION_ERROR_BUCKETS, false);
        Self {
            decisions: ["met", "missed"]
                .map(|decision| metrics.counter(SLO_DECISIONS, labels("decision", decision))),
            ttft_error: metrics.histogram(PREDICTION_ERROR, &labels("kind", "ttft")),
            tpot_error: metrics.histogram(PREDICTION_ERROR, &labels("kind", "tpot")),
            gap_error: metrics.histogram(PREDICTION_ERROR, &labels("kind", "gap")),
            moves: ["in", "out"]
                .map(|way| metrics.counter(PREFILL_HEAVY_MOVES, labels("move", way))),
            demand: metrics.gauge(PREFILL_DEMAND, vec![Label::new(LABEL_POOL, pool.clone())]),
        }
    }
}

/// A gated pool's queue handles.
#[derive(Debug, Clone)]
pub(crate) struct QueueMetrics {
    pub depth: Gauge,
    pub wait: Histogram,
    /// [`QUEUE_EXITS`] by exit, in [`QueueMetrics::EXITS`] order.
    exits: [Counter; 6],
}

impl QueueMetrics {
    pub(crate) const EXITS: [&'static str; 6] = [
        "direct",
        "placed",
        "late",
        "shed_deadline",
        "shed_full",
        "cancelled",
    ];

    pub fn new(metrics: &Metrics, pool: &str) -> Self {
        let pool = SharedString::from(pool.to_owned());
        let set = || vec![Label::new(LABEL_POOL, pool.clone())];
        metrics.define_histogram(QUEUE_WAIT, &QUEUE_WAIT_BUCKETS, false);
        Self {
            depth: metrics.gauge(QUEUE_DEPTH, set()),
            wait: metrics.histogram(QUEUE_WAIT, &set()),
            exits: Self::EXITS.map(|exit| {
                let mut labels = set();
                labels.push(Label::new("exit", exit));
                metrics.counter(QUEUE_EXITS, labels)
            }),
        }
    }

    /// Counts a request leaving by `exit` (one of [`Self::EXITS`]).
    pub fn exit(&self, exit: &str) {
        if let Some(i) = Self::EXITS.iter().position(|known| *known == exit) {
            self.exits[i].increment(1);
        }
    }
}

/// Counts one routing decision (`reason` = rule | fallback | spill | panic).
pub(crate) fn route_decision(metrics: &Metrics, pool: &Arc<str>, reason: &'static str) {
    let set = vec![shared_label(LABEL_POOL, pool), Label::new("reason", reason)];
    metrics.counter(ROUTE_DECISIONS, set).increment(1);
}

/// Counts one `/tokenize` call of the router.
pub(crate) fn prompt_tokenize(
    metrics: &Metrics,
    model: &Arc<str>,
    mode: &'static str,
    result: &'static str,
) {
    let set = vec![
        shared_label(LABEL_MODEL, model),
        Label::new("mode", mode),
        Label::new("result", result),
    ];
    metrics.counter(PROMPT_TOKENIZE, set).increment(1);
}

/// The estimate-error histogram and the calibrated ratio gauge of one model label.
pub(crate) fn prompt_estimate(metrics: &Metrics, model: &Arc<str>) -> (Histogram, Gauge) {
    let set = || vec![shared_label(LABEL_MODEL, model)];
    // Defined here too, so that a calibrator made without a router has the family's buckets.
    metrics.define_histogram(PROMPT_ESTIMATE_ERROR, &ESTIMATE_ERROR_BUCKETS, false);
    (
        metrics.histogram(PROMPT_ESTIMATE_ERROR, &set()),
        metrics.gauge(PROMPT_TOKENS_PER_BYTE, set()),
    )
}
