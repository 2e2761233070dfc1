//! What every subsystem's series share: the recorder and the exporter, histograms on atomics
//! with native buckets and exemplars, the protobuf and text expositions, bucket layouts with SLO
//! edges, and bounded label values.
//!
//! The series themselves live with the code that records them, each subsystem declaring its names
//! and help texts and resolving its handles through [`Metrics`]: the meter's per-request series in
//! [`crate::meter::series`], the router's in [`crate::route::series`], TLS's in
//! [`crate::tls::series`], the server's in [`crate::server::series`]. This module knows none of
//! them. Names follow the OpenTelemetry GenAI semantic conventions where one exists (Prometheus
//! spelling), `tokenmeter_` otherwise. Every latency and size is a real histogram with configured
//! buckets (never a summary: many sidecars must be aggregated in PromQL).
//!
//! Each [`Metrics`] owns its own recorder instead of installing the process-global one, so a test or the
//! demo can run several proxies (and simulated replicas) in one process without their series mixing.
//! Handles are resolved once per request (or per backend) and only touched per token after that.
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::config::Config;

pub mod exemplar;
pub mod exposition;
mod histogram;
mod labels;
pub mod native;
pub mod protobuf;

use histogram::Histograms;
pub use histogram::LatencyHistogram;
use labels::labelled_models;
pub use labels::BoundedLabels;
pub(crate) use labels::{MODEL_OTHER, MODEL_UNKNOWN};

/// Label names more than one subsystem's series carry.
pub const LABEL_MODEL: &str = "gen_ai_request_model";
pub const LABEL_BACKEND: &str = "backend";
pub const LABEL_POOL: &str = "pool";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The proxy's metrics: a private recorder, its render handle, the histograms, and the label
/// budget.
pub struct Metrics {
    /// Counters and gauges.
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Every histogram: fixed buckets on atomics, so a token costs no clock read or allocation.
    histograms: Histograms,
    models: BoundedLabels,
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
    /// The recorder, with the model label budget of `config` (`metering.models`,
    /// `metering.max_observed_models`).
    pub fn new(config: &Config) -> Result<Self, MetricsError> {
        // The exporter's own default buckets are set (and validated) so that a histogram
        // registered through its recorder could never fall back to a summary; every histogram of
        // ours lives in `histograms`, whose families their owners define.
        let recorder = PrometheusBuilder::new()
            .set_buckets(&config.buckets.e2e)
            .map_err(|err| MetricsError(err.to_string()))?
            .build_recorder();
        let handle = recorder.handle();
        Ok(Self {
            recorder,
            handle,
            histograms: Histograms::new(&config.buckets.e2e),
            models: BoundedLabels::new(
                &labelled_models(config),
                config.metering.max_observed_models,
                MODEL_OTHER,
                MODEL_UNKNOWN,
            ),
        })
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut text = self.handle.render();
        self.histograms.render_into(&mut text);
        text
    }

    /// The protobuf exposition ([`protobuf`]): every family of [`Metrics::render`], the latency
    /// histograms with their native buckets, and the families of `extra` (text, as the server
    /// renders its scrape-time series).
    pub fn render_protobuf(&self, extra: &str) -> Vec<u8> {
        let text = self.handle.render() + extra;
        protobuf::encode(&text, &self.histograms.snapshot())
    }

    /// Folds recorded histogram samples into buckets; call periodically so memory stays flat between
    /// scrapes (the server does every 5 s).
    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// Runs the upkeep `every` so often, for as long as the task lives (the server aborts it).
    pub async fn upkeep(self: std::sync::Arc<Self>, every: std::time::Duration) {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            self.run_upkeep();
        }
    }

    /// Applies a reloaded config's model lists (`metering.models`, `routing.model_tokens_per_byte`)
    /// to the label values of requests from now on.
    pub fn reload_models(&self, config: &Config) {
        self.models.set_fixed(&labelled_models(config));
    }

    /// The bounded label value for a request's model name.
    pub fn model_label(&self, model: Option<&str>) -> Arc<str> {
        self.models.label(model)
    }

    /// The counter `name` with `labels`, created on first use.
    pub fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    /// The gauge `name` with `labels`, created on first use.
    pub fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &METADATA)
    }

    /// Defines the histogram family `name` with its bucket `bounds` (see [`with_edges`]), before
    /// any of its series is made; `native` families also keep native buckets and exemplars
    /// ([`native`], [`exemplar`]) and are resolved with [`Metrics::latency`]. The first definition
    /// stands. A family nobody defined gets the default (E2E) buckets.
    pub fn define_histogram(&self, name: &'static str, bounds: &[f64], native: bool) {
        self.histograms.define(name, bounds, native);
    }

    /// Defines the classic histogram family `name` with its bucket `bounds` and gives it its
    /// `# HELP` text: what a subsystem does for each of its families when it is built.
    pub fn define_described_histogram(&self, name: &'static str, bounds: &[f64], help: &str) {
        self.define_histogram(name, bounds, false);
        self.describe_histogram(name, help);
    }

    /// A series of the histogram family `name`, created on first use.
    pub fn histogram(&self, name: &'static str, labels: &[Label]) -> Histogram {
        self.histograms.register(name, labels)
    }

    /// A series of the latency family `name`, which records exemplars.
    pub fn latency(&self, name: &'static str, labels: &[Label]) -> LatencyHistogram {
        self.histograms.latency(name, labels)
    }

    /// The `# HELP` text of counter `name`.
    pub fn describe_counter(&self, name: &'static str, help: &'static str) {
        self.recorder
            .describe_counter(name.into(), None, SharedString::from(help));
    }

    /// The `# HELP` text of gauge `name`.
    pub fn describe_gauge(&self, name: &'static str, help: &'static str) {
        self.recorder
            .describe_gauge(name.into(), None, SharedString::from(help));
    }

    /// The `# HELP` text of histogram family `name`.
    pub fn describe_histogram(&self, name: &'static str, help: &str) {
        self.histograms.describe(name, help);
    }
}

/// A label of a value shared by many series (a pool, a backend, a model label), without a copy.
pub fn shared_label(key: &'static str, value: &Arc<str>) -> Label {
    Label::new(key, SharedString::from(Arc::clone(value)))
}

/// The configured TTFT buckets with every TTFT target an exact edge: the buckets of each family
/// that measures a TTFT or a part of one, so that each reads against the same targets.
pub fn ttft_buckets(config: &Config) -> Vec<f64> {
    with_edges(&config.buckets.ttft, &config.slo.ttft_targets())
}

/// The configured TPOT buckets with every TPOT target an exact edge.
pub fn tpot_buckets(config: &Config) -> Vec<f64> {
    with_edges(&config.buckets.tpot, &config.slo.tpot_targets())
}

/// The configured ITL buckets with every TPOT target and every gap target an exact edge: the
/// share of gaps over either reads from the histogram exactly.
pub fn itl_buckets(config: &Config) -> Vec<f64> {
    let mut edges = config.slo.tpot_targets();
    edges.extend(config.slo.gap_targets());
    with_edges(&config.buckets.itl, &edges)
}

/// The bucket list with `edges` (SLO targets: [`crate::config::SloConfig::ttft_targets`])
/// inserted, kept sorted and free of duplicates, so that attainment can be read from the histogram
/// too.
pub fn with_edges(buckets: &[f64], edges: &[Duration]) -> Vec<f64> {
    let mut out = buckets.to_vec();
    for edge in edges {
        let edge = edge.as_secs_f64();
        if !out.iter().any(|b| (b - edge).abs() < 1e-12) {
            out.push(edge);
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

#[cfg(test)]
mod tests;
