//! The replica's `/metrics`: vLLM's metric names and bucket edges, one registry per replica.
//!
//! The demo runs several replicas and the proxy in one process, so the global `metrics`
//! recorder is out. The exposition is small enough to write by hand, which also keeps it the
//! way vLLM's Python client renders it (`le="1.0"`, `model_name` before `le`) and needs no
//! upkeep task. The engine updates everything under one lock once per step.
//!
//! Prompt tokens, and where their KV came from (prefill/decode disaggregation,
//! [`super::kv_transfer`]):
//! - `vllm:prompt_tokens_total`: every prompt token of the requests that produced their first
//!   token, computed here or not (vLLM's meaning);
//! - `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`: the local prefix cache
//!   only (a decode replica looks its prompt up there too; received KV is no hit);
//! - `vllm:prompt_tokens_by_source_total{source="local_compute"|"local_cache_hit"|"external_kv_transfer"}`:
//!   vLLM's split of the same tokens, with its arithmetic ([`PromptSources::record`]): a decode
//!   replica's pulled request counts 1 token computed, its prompt but that token received;
//! - `vllm:kv_transfer_tokens_total{direction="sent"|"received"}` (the sim's own; vLLM has no
//!   such counter): prompt tokens whose KV a prefill replica offered in an answer, and those a
//!   decode replica pulled successfully (the whole prompt, what the transfer time is paid for).
//!   Summed over replicas, sent equals received when every offer is pulled once.
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};

/// `vllm:time_to_first_token_seconds` edges.
pub const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// `vllm:inter_token_latency_seconds` and `vllm:request_time_per_output_token_seconds` edges.
pub const ITL_BUCKETS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// `vllm:e2e_request_latency_seconds` and `vllm:request_queue_time_seconds` edges.
pub const REQUEST_BUCKETS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A fixed-bucket histogram.
#[derive(Debug, Clone)]
pub struct Histogram {
    edges: &'static [f64],
    /// Per-bucket (non-cumulative) counts; the last slot is `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(edges: &'static [f64]) -> Self {
        Histogram {
            edges,
            counts: vec![0; edges.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value (seconds).
    pub fn observe(&mut self, value: f64) {
        let slot = self.edges.partition_point(|&edge| edge < value);
        self.counts[slot] += 1;
        self.sum += value;
        self.count += 1;
    }
}

/// Prompt tokens by where their KV came from (vLLM's `prompt_tokens_by_source`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptSources {
    pub local_compute: u64,
    pub local_cache_hit: u64,
    pub external_kv_transfer: u64,
}

impl PromptSources {
    /// Adds one request's prompt of `prompt` tokens, of which `cached` were not computed here and
    /// `external` (of those) were received, as vLLM's `PromptTokenStats` does: a prompt whose every
    /// token but the last is cached recomputes that last one, which vLLM counts both as computed
    /// and as a local cache hit (so the three sum to the prompt plus that token).
    pub fn record(&mut self, prompt: u64, cached: u64, external: u64) {
        let recomputed = u64::from(cached + 1 == prompt);
        self.local_compute += prompt.saturating_sub(cached);
        self.external_kv_transfer += external;
        self.local_cache_hit += (cached + recomputed).saturating_sub(external);
    }
}

/// Everything `/metrics` shows; the engine mutates it through [`SimMetrics::update`].
#[derive(Debug, Clone)]
pub struct MetricsState {
    pub running: u64,
    pub waiting: u64,
    /// KV-cache usage, 0 to 1.
    pub kv_usage: f64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    /// Prompt tokens looked up in the prefix cache, and those it served (vLLM's counters).
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    /// The same prompt tokens as `prompt_tokens`, by source.
    pub prompt_sources: PromptSources,
    /// Prompt tokens whose KV this replica offered to decode replicas (in prefill answers).
    pub kv_transfer_sent: u64,
    /// Prompt tokens whose KV this replica pulled from prefill replicas.
    pub kv_transfer_received: u64,
    pub success: u64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub tpot: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
}

/// One replica's metrics.
#[derive(Debug)]
pub struct SimMetrics {
    /// `model_name="..."`, escaped once.
    label: String,
    state: Mutex<MetricsState>,
}

impl SimMetrics {
    pub fn new(model_name: &str) -> Self {
        let escaped = model_name
            .replace('\\', r"\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        SimMetrics {
            label: format!("model_name=\"{escaped}\""),
            state: Mutex::new(MetricsState {
                running: 0,
                waiting: 0,
                kv_usage: 0.0,
                prompt_tokens: 0,
                generation_tokens: 0,
                prefix_cache_queries: 0,
                prefix_cache_hits: 0,
                prompt_sources: PromptSources::default(),
                kv_transfer_sent: 0,
                kv_transfer_received: 0,
                success: 0,
                ttft: Histogram::new(&TTFT_BUCKETS),
                itl: Histogram::new(&ITL_BUCKETS),
                tpot: Histogram::new(&ITL_BUCKETS),
                e2e: Histogram::new(&REQUEST_BUCKETS),
                queue: Histogram::new(&REQUEST_BUCKETS),
            }),
        }
    }

    /// Applies `f` under the lock (a poisoned lock still holds valid numbers, so it is used).
    pub fn update(&self, f: impl FnOnce(&mut MetricsState)) {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let s = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let label = &self.label;
        let mut out = String::with_capacity(8 * 1024);
        let gauges = [
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                s.running as f64,
            ),
            (
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                s.waiting as f64,
            ),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                s.kv_usage,
            ),
        ];
        for (name, help, value) in gauges {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{label}}} {value:?}\n"
            );
        }
        let counters = [
            (
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
                s.prompt_tokens,
                "",
            ),
            (
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
                s.generation_tokens,
                "",
            ),
            (
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
                s.prefix_cache_queries,
                "",
            ),
            (
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
                s.prefix_cache_hits,
                "",
            ),
            (
                "vllm:request_success_total",
                "Count of successfully processed requests.",
                s.success,
                ",finished_reason=\"length\"",
            ),
        ];
        for (name, help, value, extra) in counters {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{label}{extra}}} {value}\n"
            );
        }
        let sources = &s.prompt_sources;
        let by_source = [
            ("local_compute", sources.local_compute),
            ("local_cache_hit", sources.local_cache_hit),
            ("external_kv_transfer", sources.external_kv_transfer),
        ];
        let by_direction = [
            ("sent", s.kv_transfer_sent),
            ("received", s.kv_transfer_received),
        ];
        let families = [
            (
                "vllm:prompt_tokens_by_source_total",
                "Number of prompt tokens by source.",
                "source",
                by_source.as_slice(),
            ),
            (
                "vllm:kv_transfer_tokens_total",
                "Prompt tokens whose KV cache was sent to or received from another replica.",
                "direction",
                by_direction.as_slice(),
            ),
        ];
        for (name, help, key, samples) in families {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n");
            for (value_label, value) in samples {
                let _ = writeln!(out, "{name}{{{label},{key}=\"{value_label}\"}} {value}");
            }
        }
        let histograms = [
            (
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &s.ttft,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &s.itl,
            ),
            (
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                &s.tpot,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                &s.e2e,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                &s.queue,
            ),
        ];
        for (name, help, h) in histograms {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            let mut cumulative = 0;
            for (edge, count) in h.edges.iter().zip(&h.counts) {
                cumulative += count;
                let _ = writeln!(out, "{name}_bucket{{{label},le=\"{edge:?}\"}} {cumulative}");
            }
            let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_count{{{label}}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{label}}} {:?}", h.sum);
        }
        out
    }
}

#[cfg(test)]
mod tests;
