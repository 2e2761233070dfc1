//! Metric names, buckets, bounded labels and the Prometheus exporter.
//!
//! Names follow the OpenTelemetry GenAI semantic conventions where one exists (Prometheus spelling),
//! `tokenmeter_` otherwise. Every latency and size is a real histogram with configured buckets (never a
//! summary: many sidecars must be aggregated in PromQL), and each SLO target is inserted as an exact
//! bucket edge so attainment can be read from the histogram too.
//!
//! Each [`Metrics`] owns its own recorder instead of installing the process-global one, so a test or the
//! demo can run several proxies (and simulated replicas) in one process without their series mixing.
//! Handles are resolved once per request ([`Metrics::stream`]) and only touched per token after that.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::config::Config;
use crate::dialect::Dialect;
use crate::tls::HandshakeFailure;

pub mod admission;
pub mod exemplar;
pub mod exposition;
mod histogram;
pub mod native;
pub mod protobuf;

use exemplar::TraceId;
use histogram::Histograms;
pub use histogram::LatencyHistogram;

/// Time from the request head to the first token event (OpenTelemetry GenAI).
pub const TTFT: &str = "gen_ai_server_time_to_first_token_seconds";
/// Per request: (last token - first token) / (output tokens - 1) (OpenTelemetry GenAI).
pub const TPOT: &str = "gen_ai_server_time_per_output_token_seconds";
/// Time from the request head to the end of the response stream (OpenTelemetry GenAI).
pub const E2E: &str = "gen_ai_server_request_duration_seconds";
/// Tokens per request, by `gen_ai_token_type` = input | output (OpenTelemetry GenAI).
pub const TOKEN_USAGE: &str = "gen_ai_client_token_usage";
/// Every gap between two consecutive token events: one observation per gap.
pub const ITL: &str = "tokenmeter_inter_token_latency_seconds";
/// Time from the request head to the first response body byte.
pub const TTFB: &str = "tokenmeter_time_to_first_byte_seconds";
/// Finished requests by `outcome`.
pub const REQUESTS: &str = "tokenmeter_requests_total";
/// Requests between their head arriving and their stream finishing.
pub const STREAMS_ACTIVE: &str = "tokenmeter_streams_active";
/// Successful token streams by `slo` (ttft, tpot, all) and `result` (met, missed): goodput.
pub const SLO_REQUESTS: &str = "tokenmeter_slo_requests_total";
/// Tokens by `gen_ai_token_type`, for tokens/s panels.
pub const TOKENS: &str = "tokenmeter_tokens_total";
/// Where a request's output token count came from: `usage` (exact) or `events` (counted fallback).
pub const TOKEN_COUNT_SOURCE: &str = "tokenmeter_token_count_source_total";
/// Inter-token gaps at least the configured stall threshold long.
pub const STALLS: &str = "tokenmeter_stalls_total";
/// SSE lines longer than the configured cap (skipped by the scanner, forwarded untouched).
pub const SSE_OVERFLOWS: &str = "tokenmeter_sse_overflows_total";
/// Prompt tokens by `result`: `hit` (the server served them from its prompt cache) and `miss` (the
/// rest of the prompt), for servers that report a cache figure.
pub const PROMPT_CACHE: &str = "tokenmeter_prompt_cache_tokens_total";
/// Usage injection outcomes by `result`: `injected` (the backend took the injected request),
/// `rejected` (it answered it with an error status), `unanswered` (no response), `not_needed`
/// (the client asked for usage, or the request is not a stream), `declined` (a body shape the
/// proxy does not edit).
pub const USAGE_INJECTIONS: &str = "tokenmeter_usage_injections_total";

/// Client TLS handshakes that failed, by `listener` (traffic, admin) and `reason` (timeout,
/// certificate, protocol, io).
pub const TLS_HANDSHAKE_FAILURES: &str = "tokenmeter_tls_handshake_failures_total";
/// Certificate reloads after a listener's TLS files changed, by `listener` and `result` (ok, error).
pub const TLS_RELOADS: &str = "tokenmeter_tls_certificate_reloads_total";

/// Config reloads (SIGHUP, the file watch), by `result` (ok, error).
pub const CONFIG_RELOADS: &str = "tokenmeter_config_reloads_total";
/// 1 while the last reload changed a key that takes effect only on restart.
pub const CONFIG_RESTART_REQUIRED: &str = "tokenmeter_config_restart_required";

/// Routing decisions by `pool` and `reason` (rule, fallback, spill).
pub const ROUTE_DECISIONS: &str = "tokenmeter_route_decisions_total";
/// Affinity decisions of pools with an `affinity`, by `pool` and `result` (hit, miss, overloaded).
pub const AFFINITY_DECISIONS: &str = "tokenmeter_affinity_decisions_total";
/// Prompt blocks a pool's prefix index holds, by `pool`.
pub const AFFINITY_INDEX_BLOCKS: &str = "tokenmeter_affinity_index_blocks";
/// Requests retried on another backend after a failure before any response byte, by the failed
/// backend's `pool` and `backend`.
pub const ROUTE_RETRIES: &str = "tokenmeter_route_retries_total";
/// 1 while a backend takes traffic, 0 while it is ejected, by `pool` and `backend`.
pub const BACKEND_HEALTHY: &str = "tokenmeter_backend_healthy";
/// Requests sent to a backend whose stream has not ended, by `pool` and `backend`.
pub const BACKEND_INFLIGHT: &str = "tokenmeter_backend_inflight";
/// Ejections of a backend by passive or active health checking.
pub const BACKEND_EJECTIONS: &str = "tokenmeter_backend_ejections_total";
/// Health checks that a run of answer failures asked for, by `result`: `ejected` (the check
/// failed too), `kept` (it passed: the requests were at fault), `unavailable` (no health endpoint).
pub const BACKEND_CONFIRMATIONS: &str = "tokenmeter_backend_health_confirmations_total";
/// (estimated - actual) / actual prompt tokens, per response that reported `usage.prompt_tokens`.
pub const PROMPT_ESTIMATE_ERROR: &str = "tokenmeter_prompt_estimate_error_ratio";
/// The calibrated tokens-per-byte ratio of each model's prompts.
pub const PROMPT_TOKENS_PER_BYTE: &str = "tokenmeter_prompt_tokens_per_byte";
/// The router's calls to a backend's `/tokenize` for an untrusted model, by `mode` (`wait`: the
/// request's pool depended on the count; `background`: a calibration sample) and `result` (`ok`,
/// `unsupported`, `error`, `timeout`).
pub const PROMPT_TOKENIZE: &str = "tokenmeter_prompt_tokenize_total";
/// HTTP/2 client connections closed for abusing the protocol, by `kind` (the budgets of
/// `crate::server::h2guard`).
pub const HTTP2_ABUSE: &str = "tokenmeter_http2_abuse_total";

/// Label names shared by all per-request series.
pub const LABEL_OPERATION: &str = "gen_ai_operation_name";
pub const LABEL_PROVIDER: &str = "gen_ai_provider_name";
pub const LABEL_MODEL: &str = "gen_ai_request_model";
pub const LABEL_BACKEND: &str = "backend";
pub const LABEL_POOL: &str = "pool";
pub const LABEL_OUTCOME: &str = "outcome";
pub const LABEL_TOKEN_TYPE: &str = "gen_ai_token_type";

/// Label value for models beyond the label budget.
pub const MODEL_OTHER: &str = "other";
/// Label value when a request names no model.
pub const MODEL_UNKNOWN: &str = "unknown";
/// Longest model name given its own label value.
const MAX_MODEL_LABEL_BYTES: usize = 128;

/// Relative error edges of the prompt estimate: symmetric around 0, finer near it.
const ESTIMATE_ERROR_BUCKETS: [f64; 13] = [
    -0.5, -0.25, -0.1, -0.05, -0.02, -0.01, 0.0, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5,
];

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// What kind of request a stream answers: `gen_ai_operation_name` and `gen_ai_provider_name`, from
/// the request's [`Dialect`] (OpenTelemetry GenAI values), or [`Operation::PASSTHROUGH`] for paths
/// that are proxied and counted but are not generation endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operation {
    name: &'static str,
    provider: &'static str,
}

impl Operation {
    /// Not a generation endpoint (`GET /v1/models`, embeddings, ...): proxied and counted only.
    pub const PASSTHROUGH: Operation = Operation {
        name: "other",
        provider: "other",
    };

    pub fn of(dialect: Dialect) -> Self {
        Operation {
            name: dialect.operation(),
            provider: dialect.provider(),
        }
    }

    pub fn as_str(self) -> &'static str {
        self.name
    }

    pub fn provider(self) -> &'static str {
        self.provider
    }
}

/// How a request ended (`outcome` label), named by where it went wrong (client / upstream / proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx and a cleanly ended stream with no error event.
    Ok,
    /// The client went away before the end.
    Cancelled,
    /// The upstream answered 4xx, or the proxy rejected the request (413 ...).
    ClientError,
    /// Upstream unreachable, 5xx, an error event in a 200 stream, or the stream broke.
    UpstreamError,
    /// A connect, response, idle or total timeout fired.
    Timeout,
    /// tokenmeter's own limits turned it away (`server.max_streams`, `server.max_connections`):
    /// answered 503 with `retry-after`, never sent upstream.
    Overloaded,
}

impl Outcome {
    /// How many outcomes there are: per-outcome arrays are indexed by `outcome as usize`.
    pub const COUNT: usize = 6;

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Cancelled => "cancelled",
            Outcome::ClientError => "client_error",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Timeout => "timeout",
            Outcome::Overloaded => "overloaded",
        }
    }
}

/// The proxy's metrics: a private recorder, its render handle, and the label budget.
pub struct Metrics {
    /// Counters and gauges.
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Every histogram: fixed buckets on atomics, so a token costs no clock read or allocation.
    histograms: Histograms,
    models: ModelLabels,
    /// `metering.stall_threshold` in nanoseconds (a reload may change it).
    stall_threshold: AtomicU64,
    /// Every label set's per-stream handles, resolved once (see [`Metrics::stream`]).
    streams: Mutex<HashMap<RequestLabels, StreamMetrics>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Errors building the exporter (bad bucket lists).
#[derive(Debug, thiserror::Error)]
#[error("metrics exporter: {0}")]
pub struct MetricsError(String);

impl Metrics {
    /// Builds the recorder with the configured buckets (SLO targets inserted as exact edges).
    pub fn new(config: &Config) -> Result<Self, MetricsError> {
        let b = &config.buckets;
        let ttft = with_edge(&b.ttft, config.slo.ttft);
        let tpot = with_edge(&b.tpot, config.slo.tpot);
        let itl = with_edge(&b.itl, config.slo.tpot);
        let estimate_error = ESTIMATE_ERROR_BUCKETS.to_vec();
        let per_metric: [(&'static str, &[f64]); 7] = [
            (TTFT, &ttft),
            (TTFB, &ttft),
            (TPOT, &tpot),
            (ITL, &itl),
            (E2E, &b.e2e),
            (TOKEN_USAGE, &b.tokens),
            (PROMPT_ESTIMATE_ERROR, &estimate_error),
        ];
        // The exporter's buckets are still set (and validated) so that a histogram registered
        // through its recorder could never fall back to a summary.
        let mut builder = PrometheusBuilder::new()
            .set_buckets(&b.e2e)
            .map_err(|err| MetricsError(err.to_string()))?;
        for (name, buckets) in per_metric {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)
                .map_err(|err| MetricsError(err.to_string()))?;
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let metrics = Self {
            recorder,
            handle,
            histograms: Histograms::new(&b.e2e, &per_metric, &[TTFT, TTFB, TPOT, ITL, E2E]),
            models: ModelLabels::new(
                &labelled_models(config),
                config.metering.max_observed_models,
            ),
            stall_threshold: AtomicU64::new(nanos(config.metering.stall_threshold)),
            streams: Mutex::new(HashMap::new()),
        };
        metrics.describe();
        for result in ["ok", "error"] {
            metrics
                .counter(CONFIG_RELOADS, vec![Label::new("result", result)])
                .increment(0);
        }
        metrics.config_restart_required(false);
        for (listener, tls) in [
            ("traffic", &config.server.tls),
            ("admin", &config.server.admin_tls),
        ] {
            if tls.is_some() {
                metrics.register_tls(listener);
            }
        }
        Ok(metrics)
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut text = self.handle.render();
        self.histograms.render_into(&mut text);
        text
    }

    /// The protobuf exposition ([`protobuf`]): every family of [`Metrics::render`], the latency
    /// histograms with their native buckets, and the families of `extra` (text, as the admission
    /// limits render theirs).
    pub fn render_protobuf(&self, extra: &str) -> Vec<u8> {
        let text = self.handle.render() + extra;
        protobuf::encode(&text, &self.histograms.snapshot())
    }

    /// Folds recorded histogram samples into buckets; call periodically so memory stays flat between
    /// scrapes (the server does every 5 s).
    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// Applies a reloaded config's model lists (`metering.models`, `routing.model_tokens_per_byte`)
    /// to the label values of requests from now on, and its `metering.stall_threshold`.
    pub fn reload_models(&self, config: &Config) {
        self.models.set_fixed(&labelled_models(config));
        self.stall_threshold
            .store(nanos(config.metering.stall_threshold), Ordering::Relaxed);
    }

    /// The bounded label value for a request's model name.
    pub fn model_label(&self, model: Option<&str>) -> Arc<str> {
        self.models.label(model)
    }

    /// The gauge of streams in flight for an operation and model.
    pub fn streams_active(&self, operation: Operation, model: &Arc<str>) -> Gauge {
        let labels = vec![
            Label::new(LABEL_OPERATION, operation.as_str()),
            Label::new(LABEL_MODEL, SharedString::from(Arc::clone(model))),
        ];
        self.recorder
            .register_gauge(&Key::from_parts(STREAMS_ACTIVE, labels), &METADATA)
    }

    /// Every per-stream handle of a label set, for a stream whose response head named its backend.
    ///
    /// Resolving a handle is a registry lookup that builds, hashes and compares its label set
    /// (thousands of instructions each; a stream needs about twenty, a third of a request's cost
    /// in the proxy, measured with callgrind). So each label set is resolved the first time it
    /// is seen and kept; later streams clone the handles. The set of label sets is bounded as the
    /// series are: operations x bounded model labels x backends x pools.
    pub fn stream(
        &self,
        operation: Operation,
        model: &Arc<str>,
        backend: &Arc<str>,
        pool: &Arc<str>,
    ) -> StreamMetrics {
        let labels = RequestLabels {
            operation,
            model: Arc::clone(model),
            backend: Arc::clone(backend),
            pool: Arc::clone(pool),
        };
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        let mut handles = match streams.get(&labels) {
            Some(known) => known.clone(),
            None => {
                let resolved = self.resolve_stream(labels.clone());
                streams.insert(labels, resolved.clone());
                resolved
            }
        };
        handles.stall_threshold =
            Duration::from_nanos(self.stall_threshold.load(Ordering::Relaxed));
        handles
    }

    fn resolve_stream(&self, labels: RequestLabels) -> StreamMetrics {
        let latency = |name: &'static str| self.histograms.latency(name, &labels.base());
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
            input_tokens: self.histogram(TOKEN_USAGE, tokens("input")),
            output_tokens: self.histogram(TOKEN_USAGE, tokens("output")),
            input_total: self.counter(TOKENS, tokens("input")),
            output_total: self.counter(TOKENS, tokens("output")),
            stalls: self.counter(STALLS, labels.base()),
            stall_threshold: Duration::from_nanos(self.stall_threshold.load(Ordering::Relaxed)),
            ends: Arc::default(),
            labels,
        }
    }

    /// Counts one finished request.
    pub fn request_finished(&self, labels: &RequestLabels, outcome: Outcome) {
        let mut set = labels.base();
        set.push(Label::new(LABEL_OUTCOME, outcome.as_str()));
        self.counter(REQUESTS, set).increment(1);
    }

    /// Counts SSE lines the scanner skipped for being over the cap.
    pub fn sse_overflows(&self, labels: &RequestLabels, count: u64) {
        self.counter(SSE_OVERFLOWS, labels.base()).increment(count);
    }

    /// Counts a usage-injection decision (`injected`, `not_needed`, `declined`).
    pub fn usage_injection(&self, operation: Operation, result: &'static str) {
        let set = vec![
            Label::new(LABEL_OPERATION, operation.as_str()),
            Label::new("result", result),
        ];
        self.counter(USAGE_INJECTIONS, set).increment(1);
    }

    /// Counts a client's failed TLS handshake on `listener` (`traffic`, `admin`).
    pub fn tls_handshake_failed(&self, listener: &'static str, failure: HandshakeFailure) {
        self.tls_handshake_failed_by(listener, failure, 1);
    }

    /// Counts a config reload by `result` (`ok`, `error`).
    pub fn config_reload(&self, result: &'static str) {
        self.counter(CONFIG_RELOADS, vec![Label::new("result", result)])
            .increment(1);
    }

    /// Sets whether the running config waits for a restart to take a reloaded key.
    pub fn config_restart_required(&self, required: bool) {
        self.recorder
            .register_gauge(&Key::from_name(CONFIG_RESTART_REQUIRED), &METADATA)
            .set(if required { 1.0 } else { 0.0 });
    }

    /// Counts a certificate reload of `listener` by `result` (`ok`, `error`).
    pub fn tls_reload(&self, listener: &'static str, result: &'static str) {
        let set = vec![
            Label::new("listener", listener),
            Label::new("result", result),
        ];
        self.counter(TLS_RELOADS, set).increment(1);
    }

    /// Registers the TLS series of a listener with TLS at zero, so rates and alerts have a
    /// series from the first scrape.
    fn register_tls(&self, listener: &'static str) {
        for failure in HandshakeFailure::ALL {
            self.tls_handshake_failed_by(listener, failure, 0);
        }
        for result in ["ok", "error"] {
            let set = vec![
                Label::new("listener", listener),
                Label::new("result", result),
            ];
            self.counter(TLS_RELOADS, set).increment(0);
        }
    }

    fn tls_handshake_failed_by(&self, listener: &'static str, failure: HandshakeFailure, n: u64) {
        let set = vec![
            Label::new("listener", listener),
            Label::new("reason", failure.as_str()),
        ];
        self.counter(TLS_HANDSHAKE_FAILURES, set).increment(n);
    }

    /// Counts one `/tokenize` call of the router.
    pub fn prompt_tokenize(&self, model: &Arc<str>, mode: &'static str, result: &'static str) {
        let set = vec![
            Label::new(LABEL_MODEL, SharedString::from(Arc::clone(model))),
            Label::new("mode", mode),
            Label::new("result", result),
        ];
        self.counter(PROMPT_TOKENIZE, set).increment(1);
    }

    /// Counts one routing decision (`reason` = rule | fallback | spill).
    pub fn route_decision(&self, pool: &Arc<str>, reason: &'static str) {
        let set = vec![
            Label::new(LABEL_POOL, SharedString::from(Arc::clone(pool))),
            Label::new("reason", reason),
        ];
        self.counter(ROUTE_DECISIONS, set).increment(1);
    }

    /// A pool's affinity handles, resolved once per pool.
    pub fn affinity(&self, pool: &str) -> AffinityMetrics {
        let pool = SharedString::from(pool.to_owned());
        AffinityMetrics {
            decisions: ["hit", "miss", "overloaded"].map(|result| {
                let labels = vec![
                    Label::new(LABEL_POOL, pool.clone()),
                    Label::new("result", result),
                ];
                self.counter(AFFINITY_DECISIONS, labels)
            }),
            blocks: self.gauge(
                AFFINITY_INDEX_BLOCKS,
                vec![Label::new(LABEL_POOL, pool.clone())],
            ),
        }
    }

    /// The per-backend routing handles, resolved once per backend.
    pub fn backend(&self, pool: &Arc<str>, backend: &Arc<str>) -> BackendMetrics {
        let set = || {
            vec![
                Label::new(LABEL_POOL, SharedString::from(Arc::clone(pool))),
                Label::new(LABEL_BACKEND, SharedString::from(Arc::clone(backend))),
            ]
        };
        BackendMetrics {
            healthy: self.gauge(BACKEND_HEALTHY, set()),
            inflight: self.gauge(BACKEND_INFLIGHT, set()),
            retries: self.counter(ROUTE_RETRIES, set()),
            ejections: self.counter(BACKEND_EJECTIONS, set()),
            confirmations: ["kept", "ejected", "unavailable"].map(|result| {
                let mut labels = set();
                labels.push(Label::new("result", result));
                self.counter(BACKEND_CONFIRMATIONS, labels)
            }),
        }
    }

    /// One [`HTTP2_ABUSE`] counter per `kind`, registered now so that each is exposed from 0.
    pub fn http2_abuse<const N: usize>(&self, kinds: [&'static str; N]) -> [Counter; N] {
        kinds.map(|kind| self.counter(HTTP2_ABUSE, vec![Label::new("kind", kind)]))
    }

    /// The estimate-error histogram and the calibrated ratio gauge of one model label.
    pub fn prompt_estimate(&self, model: &Arc<str>) -> (Histogram, Gauge) {
        let set = || {
            vec![Label::new(
                LABEL_MODEL,
                SharedString::from(Arc::clone(model)),
            )]
        };
        (
            self.histogram(PROMPT_ESTIMATE_ERROR, set()),
            self.gauge(PROMPT_TOKENS_PER_BYTE, set()),
        )
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &METADATA)
    }

    fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.histograms.register(name, &labels)
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    fn describe(&self) {
        let seconds = Some(Unit::Seconds);
        let describe = [
            (
                TTFT,
                seconds,
                "Time from the request head to the first token event.",
            ),
            (
                TPOT,
                seconds,
                "Per request: (last token event - first token event) / (output tokens - 1).",
            ),
            (
                E2E,
                seconds,
                "Time from the request head to the end of the response stream.",
            ),
            (
                ITL,
                seconds,
                "Every gap between two consecutive token events (one observation per gap).",
            ),
            (
                TTFB,
                seconds,
                "Time from the request head to the first response body byte.",
            ),
            (
                TOKEN_USAGE,
                Some(Unit::Count),
                "Tokens per request by gen_ai_token_type (input, output).",
            ),
            (
                PROMPT_ESTIMATE_ERROR,
                None,
                "(estimated - actual) / actual prompt tokens of the router's estimate, per response with usage.",
            ),
        ];
        for (name, _unit, help) in describe {
            self.histograms.describe(name, help);
        }
        let counters = [
            (REQUESTS, "Finished requests by outcome."),
            (SLO_REQUESTS, "Successful token streams by SLO (ttft, tpot, all) and result (met, missed)."),
            (TOKENS, "Tokens by gen_ai_token_type (input, output)."),
            (TOKEN_COUNT_SOURCE, "Requests by where the output token count came from: usage (exact) or events (counted)."),
            (STALLS, "Inter-token gaps at or above the stall threshold."),
            (SSE_OVERFLOWS, "SSE lines over the configured cap, skipped by the scanner (bytes still forwarded)."),
            (USAGE_INJECTIONS, "Usage-injection outcomes by result (injected, rejected, unanswered, not_needed, declined)."),
            (ROUTE_DECISIONS, "Routing decisions by pool and reason (rule, fallback, spill)."),
            (CONFIG_RELOADS, "Config reloads (SIGHUP, the file watch) by result: ok (new requests use it), error (refused; the running config stays)."),
            (TLS_HANDSHAKE_FAILURES, "Client TLS handshakes that failed, by listener and reason (timeout, certificate, protocol, io)."),
            (TLS_RELOADS, "Certificate reloads after a listener's TLS files changed, by listener and result (ok, error)."),
            (AFFINITY_DECISIONS, "Affinity decisions by pool and result: hit (the backend known to hold the conversation, or the session key's home), miss (nothing known: the conversation's home), overloaded (the preferred backend was over the load bound; balancing chose)."),
            (ROUTE_RETRIES, "Requests retried elsewhere after this backend failed before any response byte."),
            (BACKEND_EJECTIONS, "Times a backend was ejected by health checking."),
            (BACKEND_CONFIRMATIONS, "Health checks asked for by a run of answer failures, by result (ejected, kept, unavailable)."),
            (PROMPT_CACHE, "Prompt tokens by result: hit (served from the server's prompt cache) or miss (computed), where the server reports a cache figure."),
            (HTTP2_ABUSE, "HTTP/2 client connections closed for abusing the protocol, by kind (rapid_reset, continuation_flood, settings_flood, ping_flood, window_update_flood, header_list_too_large)."),
            (PROMPT_TOKENIZE, "Calls to a backend's /tokenize for an untrusted model's prompt, by mode (wait, background) and result (ok, unsupported, error, timeout)."),
        ];
        for (name, help) in counters {
            self.recorder
                .describe_counter(name.into(), None, help.into());
        }
        self.recorder.describe_gauge(
            STREAMS_ACTIVE.into(),
            None,
            "Requests between their head arriving and their stream finishing.".into(),
        );
        let gauges = [
            (
                CONFIG_RESTART_REQUIRED,
                "1 while the last config reload changed a key that takes effect only on restart (the running value stays).",
            ),
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
            (
                AFFINITY_INDEX_BLOCKS,
                "Prompt blocks the pool's prefix index holds (bounded by affinity_index_blocks).",
            ),
        ];
        for (name, help) in gauges {
            self.recorder.describe_gauge(name.into(), None, help.into());
        }
    }
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
            Label::new(LABEL_MODEL, SharedString::from(Arc::clone(&self.model))),
            Label::new(LABEL_BACKEND, SharedString::from(Arc::clone(&self.backend))),
            Label::new(LABEL_POOL, SharedString::from(Arc::clone(&self.pool))),
        ]
    }

    /// The labels of the prompt-cache series: where the cache lives (pool, backend) and for which
    /// model, not which API asked.
    fn cache_base(&self) -> Vec<Label> {
        vec![
            Label::new(LABEL_POOL, SharedString::from(Arc::clone(&self.pool))),
            Label::new(LABEL_BACKEND, SharedString::from(Arc::clone(&self.backend))),
            Label::new(LABEL_MODEL, SharedString::from(Arc::clone(&self.model))),
        ]
    }
}

/// One backend's routing series, resolved when the backend is first seen.
#[derive(Debug, Clone)]
pub struct BackendMetrics {
    pub healthy: Gauge,
    pub inflight: Gauge,
    pub retries: Counter,
    pub ejections: Counter,
    /// [`BACKEND_CONFIRMATIONS`] by result: kept, ejected, unavailable.
    pub confirmations: [Counter; 3],
}

/// A pool's affinity handles.
#[derive(Debug, Clone)]
pub struct AffinityMetrics {
    /// [`AFFINITY_DECISIONS`] by result: hit, miss, overloaded.
    pub decisions: [Counter; 3],
    pub blocks: Gauge,
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
    pub labels: RequestLabels,
}

impl StreamMetrics {
    /// Records one inter-token gap (with the request's trace as its exemplar, if it has one),
    /// counting it as a stall when long enough.
    pub fn record_gap(&self, gap: Duration, trace: Option<&TraceId>) {
        self.itl.record_traced(gap.as_secs_f64(), trace);
        if gap >= self.stall_threshold {
            self.stalls.increment(1);
        }
    }

    /// Counts the finished stream (as [`Metrics::request_finished`]).
    pub fn finished(&self, metrics: &Metrics, outcome: Outcome) {
        let Some(slot) = self.ends.finished.get(outcome as usize) else {
            // An outcome without a slot (none today) still counts, through the registry.
            return metrics.request_finished(&self.labels, outcome);
        };
        slot.get_or_init(|| {
            let mut set = self.labels.base();
            set.push(Label::new(LABEL_OUTCOME, outcome.as_str()));
            metrics.counter(REQUESTS, set)
        })
        .increment(1);
    }

    /// Counts one SLO verdict (`slo` = ttft | tpot | all, `result` = met | missed).
    pub fn slo_verdict(&self, metrics: &Metrics, slo: Slo, met: bool) {
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
    pub fn token_count_source(&self, metrics: &Metrics, exact: bool) {
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
    pub fn prompt_cache(&self, metrics: &Metrics, hit: u64, miss: u64) {
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
    All,
}

impl Slo {
    pub fn as_str(self) -> &'static str {
        match self {
            Slo::Ttft => "ttft",
            Slo::Tpot => "tpot",
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
    slo: [[OnceLock<Counter>; 2]; 3],
    source: [OnceLock<Counter>; 2],
    cache: [OnceLock<Counter>; 2],
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The models that always get their own label value. A model with its own prompt prior needs its
/// own label: the calibration is keyed by it.
fn labelled_models(config: &Config) -> Vec<String> {
    config
        .metering
        .models
        .iter()
        .chain(config.routing.model_tokens_per_byte.keys())
        .cloned()
        .collect()
}

/// Bounded model label values: configured names, then the first `max_observed` names seen, then
/// `other`. A client sending 10 000 model names creates at most `configured + max_observed + 2` values.
#[derive(Debug)]
struct ModelLabels {
    /// `metering.models` (and the models with their own prompt prior): replaced on reload.
    fixed: RwLock<Arc<HashMap<String, Arc<str>>>>,
    observed: RwLock<HashMap<String, Arc<str>>>,
    max_observed: usize,
    other: Arc<str>,
    unknown: Arc<str>,
}

impl ModelLabels {
    fn new(configured: &[String], max_observed: usize) -> Self {
        Self {
            fixed: RwLock::new(Arc::new(Self::fixed_map(configured))),
            observed: RwLock::new(HashMap::new()),
            max_observed,
            other: Arc::from(MODEL_OTHER),
            unknown: Arc::from(MODEL_UNKNOWN),
        }
    }

    fn fixed_map(configured: &[String]) -> HashMap<String, Arc<str>> {
        configured
            .iter()
            .map(|name| (name.clone(), Arc::from(name.as_str())))
            .collect()
    }

    /// Replaces the configured names (a reload); names observed so far keep their labels.
    fn set_fixed(&self, configured: &[String]) {
        *self
            .fixed
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Arc::new(Self::fixed_map(configured));
    }

    fn label(&self, model: Option<&str>) -> Arc<str> {
        let Some(name) = model else {
            return Arc::clone(&self.unknown);
        };
        if let Some(label) = self
            .fixed
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
        {
            return Arc::clone(label);
        }
        if name.len() > MAX_MODEL_LABEL_BYTES || name.is_empty() {
            return Arc::clone(&self.other);
        }
        // A poisoned lock only means another thread panicked mid-insert; the map is still usable.
        if let Some(label) = self
            .observed
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
        {
            return Arc::clone(label);
        }
        let mut observed = self
            .observed
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(label) = observed.get(name) {
            return Arc::clone(label);
        }
        if observed.len() >= self.max_observed {
            return Arc::clone(&self.other);
        }
        let label: Arc<str> = Arc::from(name);
        observed.insert(name.to_owned(), Arc::clone(&label));
        label
    }
}

/// The bucket list with `edge` (an SLO target) inserted, kept sorted and free of duplicates.
fn with_edge(buckets: &[f64], edge: Duration) -> Vec<f64> {
    let edge = edge.as_secs_f64();
    let mut out = buckets.to_vec();
    if !out.iter().any(|b| (b - edge).abs() < 1e-12) {
        out.push(edge);
        out.sort_by(f64::total_cmp);
    }
    out
}

#[cfg(test)]
mod tests;
