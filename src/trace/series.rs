//! The trace subsystem's series: where each TTFT went, the time the proxy itself adds, and what
//! became of the spans.
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use metrics::{Counter, Gauge, Histogram, Label};

use crate::config::Config;
use crate::context::phases::PHASES;
use crate::metrics::{shared_label, ttft_buckets, Metrics, LABEL_POOL};

/// The phases of each TTFT, by `pool` and `phase` (see [`crate::context::phases`]): for each
/// request that streamed a token, its phases add up to its TTFT.
pub(crate) const TTFT_PHASE: &str = "tokenmeter_ttft_phase_seconds";
/// The time tokenmeter itself adds, by `stage`: `request` (before the backend has the request:
/// planning, backend pick, pool checkout, writing it) and `first_token` (holding the frame of the
/// first token, from the upstream connection to the client's).
pub(crate) const GATEWAY_OVERHEAD: &str = "tokenmeter_gateway_overhead_seconds";
/// The prefill time a backend reports for each request, by `pool` (llama.cpp's
/// `timings.prompt_ms`): the backend's own view of what the proxy's `first_token` phase holds.
pub(crate) const BACKEND_PREFILL: &str = "tokenmeter_backend_prefill_seconds";
/// Spans sent to the collector.
pub(crate) const SPANS_EXPORTED: &str = "tokenmeter_trace_spans_exported_total";
/// Spans lost, by `reason`: `queue_full` (the export queue was at `tracing.max_queue_spans`),
/// `export_failed` (the collector refused or could not be reached), `timeout` (an export passed
/// `tracing.export_timeout`), `shutdown` (still queued when the process stopped).
pub(crate) const SPANS_DROPPED: &str = "tokenmeter_trace_spans_dropped_total";
/// Spans waiting for export.
pub(crate) const QUEUE_SPANS: &str = "tokenmeter_trace_queue_spans";

/// Finer than the latency buckets: the proxy's own time is microseconds.
const OVERHEAD_BUCKETS: [f64; 14] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1,
];

/// Drop reasons, in the order of [`ExportCounters::dropped`].
pub(crate) const DROP_REASONS: [&str; 4] = ["queue_full", "export_failed", "timeout", "shutdown"];

/// Defines and describes every series of the subsystem.
pub fn describe(metrics: &Metrics, config: &Config) {
    let edges = ttft_buckets(config);
    metrics.define_described_histogram(
        TTFT_PHASE,
        &edges,
        "Where each TTFT went, by phase: admission, request_body, routing, handoff, retries, connect, upstream_head, first_token (they add up to the TTFT).",
    );
    metrics.define_described_histogram(
        BACKEND_PREFILL,
        &edges,
        "The prefill time the backend reports per request (llama.cpp's timings.prompt_ms), beside the first_token phase.",
    );
    metrics.define_described_histogram(
        GATEWAY_OVERHEAD,
        &OVERHEAD_BUCKETS,
        "Time tokenmeter itself adds, by stage: request (before the backend has the request), first_token (holding the first token's frame).",
    );
    metrics.describe_counter(SPANS_EXPORTED, "Spans sent to the OTLP collector.");
    metrics.describe_counter(
        SPANS_DROPPED,
        "Spans lost, by reason: queue_full, export_failed, timeout, shutdown.",
    );
    metrics.describe_gauge(QUEUE_SPANS, "Spans waiting for export.");
}

/// The phase and overhead histograms, resolved once per pool.
#[derive(Debug)]
pub(crate) struct PhaseSeries {
    metrics: Arc<Metrics>,
    by_pool: RwLock<HashMap<Arc<str>, Arc<PoolPhases>>>,
    pub overhead_request: Histogram,
    pub overhead_first_token: Histogram,
}

/// One pool's phase histograms, in [`PHASES`] order, and its backends' own prefill times.
#[derive(Debug)]
pub(crate) struct PoolPhases {
    pub phases: [Histogram; 8],
    pub backend_prefill: Histogram,
}

impl PhaseSeries {
    pub fn new(metrics: Arc<Metrics>, config: &Config) -> Self {
        describe(&metrics, config);
        let overhead = |stage: &'static str| {
            metrics.histogram(GATEWAY_OVERHEAD, &[Label::new("stage", stage)])
        };
        Self {
            overhead_request: overhead("request"),
            overhead_first_token: overhead("first_token"),
            by_pool: RwLock::new(HashMap::new()),
            metrics,
        }
    }

    /// `pool`'s phase histograms (pools are configured, so the map is bounded).
    pub fn pool(&self, pool: &Arc<str>) -> Arc<PoolPhases> {
        if let Some(found) = self
            .by_pool
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(pool)
        {
            return Arc::clone(found);
        }
        let made = Arc::new(PoolPhases {
            phases: PHASES.map(|phase| {
                let labels = [shared_label(LABEL_POOL, pool), Label::new("phase", phase)];
                self.metrics.histogram(TTFT_PHASE, &labels)
            }),
            backend_prefill: self
                .metrics
                .histogram(BACKEND_PREFILL, &[shared_label(LABEL_POOL, pool)]),
        });
        self.by_pool
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(Arc::clone(pool))
            .or_insert(made)
            .clone()
    }
}

/// The export's counters.
#[derive(Debug, Clone)]
pub(crate) struct ExportCounters {
    pub exported: Counter,
    /// By [`DROP_REASONS`].
    pub dropped: [Counter; 4],
    pub queued: Gauge,
}

impl ExportCounters {
    pub fn new(metrics: &Metrics) -> Self {
        Self {
            exported: metrics.counter(SPANS_EXPORTED, Vec::new()),
            dropped: DROP_REASONS
                .map(|reason| metrics.counter(SPANS_DROPPED, vec![Label::new("reason", reason)])),
            queued: metrics.gauge(QUEUE_SPANS, Vec::new()),
        }
    }
}
