//! The meter's series: the per-request latencies, tokens, outcomes and SLO verdicts, their names,
//! help texts and buckets, and the per-stream handles resolved once per label set.
//!
//! Long on purpose: every series of the meter with its name, help text and buckets, read together
//! when a dashboard, a rule or the docs name one.
//!
//! Names follow the OpenTelemetry GenAI semantic conventions where one exists (Prometheus
//! spelling), `tokenmeter_` otherwise. The latency histograms (TTFT, TPOT, E2E, ITL, TTFB) keep
//! native buckets and exemplars, and each SLO target is an exact bucket edge of the classic ones,
//! so attainment can be read from the histogram too. The body records TTFB, TTFT and the gaps live
//! ([`super::body`]); the finish hook the rest ([`super::finish`]).
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label};

use crate::config::Config;
use crate::context::Outcome;
use crate::dialect::Operation;
use crate::metrics::exemplar::TraceId;
use crate::metrics::{
    itl_buckets, shared_label, tpot_buckets, ttft_buckets, LatencyHistogram, Metrics,
    LABEL_BACKEND, LABEL_MODEL, LABEL_POOL,
};

/// Time from the request head to the first token event (OpenTelemetry GenAI).
pub const TTFT: &str = "gen_ai_server_time_to_first_token_seconds";
/// Per request: (last token - first token) / (output tokens - 1) (OpenTelemetry GenAI).
pub const TPOT: &str = "gen_ai_server_time_per_output_token_seconds";
/// Time from the request head to the end of the response stream (OpenTelemetry GenAI).
pub const E2E: &str = "gen_ai_server_request_duration_seconds";
/// Tokens per request, by `gen_ai_token_type` = input | output (OpenTelemetry GenAI).
pub(crate) const TOKEN_USAGE: &str = "gen_ai_client_token_usage";
/// Every gap between two consecutive token events: one observation per gap.
pub const ITL: &str = "tokenmeter_inter_token_latency_seconds";
/// The gaps of the tracked tenants' streams, by `tenant` (`tenants.tracked`): recorded by the
/// meter, which sees each gap; the tenant's other series are the tenant subsystem's.
pub(crate) const TENANT_ITL: &str = "tokenmeter_tenant_inter_token_latency_seconds";
/// Time from the request head to the first response body byte.
pub const TTFB: &str = "tokenmeter_time_to_first_byte_seconds";
/// Finished requests by `outcome`.
pub const REQUESTS: &str = "tokenmeter_requests_total";
/// Requests between their head arriving and their stream finishing.
pub(crate) const STREAMS_ACTIVE: &str = "tokenmeter_streams_active";
/// Successful token streams by `slo` (ttft, tpot, gap where `slo.max_gap` is set, all) and
/// `result` (met, missed): goodput.
pub const SLO_REQUESTS: &str = "tokenmeter_slo_requests_total";
/// Tokens by `gen_ai_token_type`, for tokens/s panels.
pub const TOKENS: &str = "tokenmeter_tokens_total";
/// Where a request's output token count came from: `usage` (exact) or `events` (counted fallback).
pub(crate) const TOKEN_COUNT_SOURCE: &str = "tokenmeter_token_count_source_total";
/// Inter-token gaps at least the configured stall threshold long.
pub(crate) const STALLS: &str = "tokenmeter_stalls_total";
/// SSE lines longer than the configured cap (skipped by the scanner, forwarded untouched).
pub(crate) const SSE_OVERFLOWS: &str = "tokenmeter_sse_overflows_total";
/// Prompt tokens by `result`: `hit` (the server served them from its prompt cache) and `miss` (the
/// rest of the prompt), for servers that report a cache figure.
pub(crate) const PROMPT_CACHE: &str = "tokenmeter_prompt_cache_tokens_total";
/// Usage injection outcomes by `result`: `injected` (the backend took the injected request),
/// `rejected` (it answered it with an error status), `unanswered` (no response), `not_needed`
/// (the client asked for usage, or the request is not a stream), `declined` (a body shape the
/// proxy does not edit).
pub(crate) const USAGE_INJECTIONS: &str = "tokenmeter_usage_injections_total";

/// Label names of the per-request series (besides model, backend and pool).
pub(crate) const LABEL_OPERATION: &str = "gen_ai_operation_name";
pub(crate) const LABEL_PROVIDER: &str = "gen_ai_provider_name";
pub(crate) const LABEL_OUTCOME: &str = "outcome";
pub(crate) const LABEL_TOKEN_TYPE: &str = "gen_ai_token_type";

/// The meter's series over the proxy's [`Metrics`]: one per server, shared by every stack
/// generation (the handles it resolved stay valid across reloads).
#[derive(Debug)]
pub struct MeterSeries {
    metrics: Arc<Metrics>,
    /// `metering.stall_threshold` in nanoseconds (a reload may change it).
    stall_threshold: AtomicU64,
    /// Every label set's per-stream handles, resolved once (see [`MeterSeries::stream`]).
    streams: Mutex<HashMap<RequestLabels, StreamMetrics, foldhash::fast::RandomState>>,
}

impl MeterSeries {
    /// Defines the meter's histogram families with the buckets of `config` (each SLO target an
    /// exact edge) and describes every series.
    pub fn new(metrics: Arc<Metrics>, config: &Config) -> Self {
        let b = &config.buckets;
        let ttft = ttft_buckets(config);
        let tpot = tpot_buckets(config);
        let itl = itl_buckets(config);
        let families: [(&'static str, &[f64], bool, &str); 7] = [
            (
                TTFT,
                &ttft,
                true,
                "Time from the request head to the first token event.",
            ),
            (
                TTFB,
                &ttft,
                true,
                "Time from the request head to the first response body byte.",
            ),
            (
                TPOT,
                &tpot,
                true,
                "Per request: (last token event - first token event) / (output tokens - 1).",
            ),
            (
                ITL,
                &itl,
                true,
                "Every gap between two consecutive token events (one observation per gap).",
            ),
            (
                TENANT_ITL,
                &itl,
                false,
                "Every gap between two consecutive token events of a tracked tenant's streams, by tenant.",
            ),
            (
                E2E,
                &b.e2e,
                true,
                "Time from the request head to the end of the response stream.",
            ),
            (
                TOKEN_USAGE,
                &b.tokens,
                false,
                "Tokens per request by gen_ai_token_type (input, output).",
            ),
        ];
        for (name, bounds, native, help) in families {
            metrics.define_histogram(name, bounds, native);
            metrics.describe_histogram(name, help);
        }
        let counters = [
            (REQUESTS, "Finished requests by outcome."),
            (SLO_REQUESTS, "Successful token streams by SLO (ttft, tpot, all) and result (met, missed)."),
            (TOKENS, "Tokens by gen_ai_token_type (input, output)."),
            (TOKEN_COUNT_SOURCE, "Requests by where the output token count came from: usage (exact) or events (counted)."),
            (STALLS, "Inter-token gaps at or above the stall threshold."),
            (SSE_OVERFLOWS, "SSE lines over the configured cap, skipped by the scanner (bytes still forwarded)."),
            (USAGE_INJECTIONS, "Usage-injection outcomes by result (injected, rejected, unanswered, not_needed, declined)."),
            (PROMPT_CACHE, "Prompt tokens by result: hit (served from the server's prompt cache) or miss (computed), where the server reports a cache figure."),
        ];
        for (name, help) in counters {
            metrics.describe_counter(name, help);
        }
        metrics.describe_gauge(
            STREAMS_ACTIVE,
            "Requests between their head arriving and their stream finishing.",
        );
        Self {
            metrics,
            stall_threshold: AtomicU64::new(nanos(config.metering.stall_threshold)),
            streams: Mutex::new(HashMap::default()),
        }
    }

    /// The proxy's metrics these series live in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Applies a reloaded `metering.stall_threshold` to streams from now on.
    pub fn reload(&self, config: &Config) {
        self.stall_threshold
            .store(nanos(config.metering.stall_threshold), Ordering::Relaxed);
    }

    /// The gauge of streams in flight for an operation and model.
    pub fn streams_active(&self, operation: Operation, model: &Arc<str>) -> Gauge {
        let labels = vec![
            Label::new(LABEL_OPERATION, operation.as_str()),
            shared_label(LABEL_MODEL, model),
        ];
        self.metrics.gauge(STREAMS_ACTIVE, labels)
    }

    /// Every per-stream handle of a label set, for a stream whose response head named its backend.
    ///
    /// Resolving a handle is a registry lookup that builds, hashes and compares its label set
    /// (thousands of instructions each; a stream needs about twenty, a third of a request's cost
    /// in the proxy, measured with callgrind). So each label set is resolved the first time it
    /// is seen and kept; later streams clone the handles. The set of label sets is bounded as the
    /// series are: operations x bounded model labels x backends x pools, so a fast hash (not a
    /// DoS-resistant one) serves: every key is a label value the proxy bounded.
    pub fn stream(&self, labels: &RequestLabels) -> StreamMetrics {
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        let mut handles = match streams.get(labels) {
            Some(known) => known.clone(),
            None => {
                let resolved = self.resolve_stream(labels.clone());
                streams.insert(labels.clone(), resolved.clone());
                resolved
            }
        };
        handles.stall_threshold =
            Duration::from_nanos(self.stall_threshold.load(Ordering::Relaxed));
        handles
    }

    /// The gap histogram of a tracked tenant's streams.
    pub(crate) fn tenant_itl(&self, tenant: &Arc<str>) -> Histogram {
        self.metrics.histogram(
            TENANT_ITL,
            &[crate::metrics::shared_label("tenant", tenant)],
        )
    }

    fn resolve_stream(&self, labels: RequestLabels) -> StreamMetrics {
        let metrics = &self.metrics;
        let latency = |name: &'static str| metrics.latency(name, &labels.base());
        let tokens = |kind: &'static str| {
            let mut set = labels.base();
            set.push(Label::new(LABEL_TOKEN_TYPE, kind));
            set
        };
        StreamMetrics {
            ttfb: latency(TTFB),
            ttft: latency(TTFT),
            itl: latency(ITL),
            tpot: latency(TPOT),
            e2e: latency(E2E),
            input_tokens: metrics.histogram(TOKEN_USAGE, &tokens("input")),
            output_tokens: metrics.histogram(TOKEN_USAGE, &tokens("output")),
            input_total: metrics.counter(TOKENS, tokens("input")),
            output_total: metrics.counter(TOKENS, tokens("output")),
            stalls: metrics.counter(STALLS, labels.base()),
            stall_threshold: Duration::from_nanos(self.stall_threshold.load(Ordering::Relaxed)),
            ends: Arc::default(),
            tenant_itl: None,
            labels,
        }
    }

    /// Counts one finished request that yielded no stream (refused, failed before a response
    /// head, abandoned before one, or passed through).
    pub(crate) fn request_finished(&self, labels: &RequestLabels, outcome: Outcome) {
        request_finished(&self.metrics, labels, outcome);
    }

    /// Counts SSE lines the scanner skipped for being over the cap.
    pub(crate) fn sse_overflows(&self, labels: &RequestLabels, count: u64) {
        self.metrics
            .counter(SSE_OVERFLOWS, labels.base())
            .increment(count);
    }

    /// Counts a usage-injection decision (`injected`, `not_needed`, `declined`, ...).
    pub(crate) fn usage_injection(&self, operation: Operation, result: &'static str) {
        let set = vec![
            Label::new(LABEL_OPERATION, operation.as_str()),
            Label::new("result", result),
        ];
        self.metrics.counter(USAGE_INJECTIONS, set).increment(1);
    }
}

fn request_finished(metrics: &Metrics, labels: &RequestLabels, outcome: Outcome) {
    let mut set = labels.base();
    set.push(Label::new(LABEL_OUTCOME, outcome.as_str()));
    metrics.counter(REQUESTS, set).increment(1);
}

/// The labels every per-request series carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestLabels {
    pub operation: Operation,
    pub model: Arc<str>,
    pub backend: Arc<str>,
    /// The routing pool (`default` for the implicit pool, `none` when no pool applied).
    pub pool: Arc<str>,
}

impl RequestLabels {
    fn base(&self) -> Vec<Label> {
        vec![
            Label::new(LABEL_OPERATION, self.operation.as_str()),
            Label::new(LABEL_PROVIDER, self.operation.provider()),
            shared_label(LABEL_MODEL, &self.model),
            shared_label(LABEL_BACKEND, &self.backend),
            shared_label(LABEL_POOL, &self.pool),
        ]
    }

    /// The labels of the prompt-cache series: where the cache lives (pool, backend) and for which
    /// model, not which API asked.
    fn cache_base(&self) -> Vec<Label> {
        vec![
            shared_label(LABEL_POOL, &self.pool),
            shared_label(LABEL_BACKEND, &self.backend),
            shared_label(LABEL_MODEL, &self.model),
        ]
    }
}

/// Handles for one stream, resolved once; recording through them is a few atomic operations.
#[derive(Debug, Clone)]
pub struct StreamMetrics {
    pub ttfb: LatencyHistogram,
    pub ttft: LatencyHistogram,
    pub itl: LatencyHistogram,
    pub tpot: LatencyHistogram,
    pub e2e: LatencyHistogram,
    pub input_tokens: Histogram,
    pub output_tokens: Histogram,
    pub input_total: Counter,
    pub output_total: Counter,
    pub stalls: Counter,
    pub stall_threshold: Duration,
    /// Counters of the stream's end, shared by every stream of the label set.
    pub ends: Arc<EndCounters>,
    /// The gaps of a tracked tenant's stream (`None` for any other: one branch per gap).
    pub tenant_itl: Option<Histogram>,
    pub labels: RequestLabels,
}

impl StreamMetrics {
    /// Records one inter-token gap (with the request's trace as its exemplar, if it has one),
    /// counting it as a stall when long enough; says whether it was one.
    pub fn record_gap(&self, gap: Duration, trace: Option<&TraceId>) -> bool {
        self.itl.record_traced(gap.as_secs_f64(), trace);
        if let Some(tenant) = &self.tenant_itl {
            tenant.record(gap.as_secs_f64());
        }
        let stall = gap >= self.stall_threshold;
        if stall {
            self.stalls.increment(1);
        }
        stall
    }

    /// Counts the finished stream (as [`MeterSeries::request_finished`]).
    pub fn finished(&self, metrics: &Metrics, outcome: Outcome) {
        let Some(slot) = self.ends.finished.get(outcome as usize) else {
            // An outcome without a slot (none today) still counts, through the registry.
            return request_finished(metrics, &self.labels, outcome);
        };
        slot.get_or_init(|| {
            let mut set = self.labels.base();
            set.push(Label::new(LABEL_OUTCOME, outcome.as_str()));
            metrics.counter(REQUESTS, set)
        })
        .increment(1);
    }

    /// Counts one SLO verdict (`slo` = ttft | tpot | all, `result` = met | missed).
    pub(crate) fn slo_verdict(&self, metrics: &Metrics, slo: Slo, met: bool) {
        let counter = || {
            let mut set = self.labels.base();
            set.push(Label::new("slo", slo.as_str()));
            set.push(Label::new("result", if met { "met" } else { "missed" }));
            metrics.counter(SLO_REQUESTS, set)
        };
        match self.ends.slo.get(slo as usize) {
            Some(slots) => slots[usize::from(met)].get_or_init(counter).increment(1),
            None => counter().increment(1),
        }
    }

    /// Counts where the output token count came from: `usage` (`exact`) or token `events`.
    pub(crate) fn token_count_source(&self, metrics: &Metrics, exact: bool) {
        let source = if exact { "usage" } else { "events" };
        self.ends.source[usize::from(exact)]
            .get_or_init(|| {
                let mut set = self.labels.base();
                set.push(Label::new("source", source));
                metrics.counter(TOKEN_COUNT_SOURCE, set)
            })
            .increment(1);
    }

    /// Counts the prompt tokens the server's cache served (`hit`) and computed (`miss`).
    pub(crate) fn prompt_cache(&self, metrics: &Metrics, hit: u64, miss: u64) {
        for (slot, (result, tokens)) in [("hit", hit), ("miss", miss)].into_iter().enumerate() {
            self.ends.cache[slot]
                .get_or_init(|| {
                    let mut set = self.labels.cache_base();
                    set.push(Label::new("result", result));
                    metrics.counter(PROMPT_CACHE, set)
                })
                .increment(tokens);
        }
    }
}

/// The SLOs a finished stream is judged on (`slo` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slo {
    Ttft,
    Tpot,
    Gap,
    All,
}

impl Slo {
    /// How many there are: the size of each stream's cached verdict counters, so that a new
    /// verdict gets a slot (not a key built and looked up at every request's end).
    pub const COUNT: usize = 4;

    pub fn as_str(self) -> &'static str {
        match self {
            Slo::Ttft => "ttft",
            Slo::Tpot => "tpot",
            Slo::Gap => "gap",
            Slo::All => "all",
        }
    }
}

/// The counters a stream touches only as it ends, each resolved the first time a stream of the
/// label set needs it (not before: a series appears with its first count, as it always has) and
/// shared by the later ones.
#[derive(Debug, Default)]
pub struct EndCounters {
    finished: [OnceLock<Counter>; Outcome::COUNT],
    slo: [[OnceLock<Counter>; 2]; Slo::COUNT],
    source: [OnceLock<Counter>; 2],
    cache: [OnceLock<Counter>; 2],
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
