//! Sending spans to the collector, off the token path: a bounded queue that never waits, and one
//! task that batches and exports.
//!
//! A finished request's spans are offered to the queue by its finish hook (on the client's
//! connection task): counted in, or — when `tracing.max_queue_spans` are already waiting —
//! dropped and counted (`tokenmeter_trace_spans_dropped_total{reason="queue_full"}`). Nothing on a
//! request's path ever waits for the collector. The export task sends batches of up to
//! `max_batch_spans` once one is full or its first span has waited `batch_delay`, one export at a
//! time (the exporter's contract), each bounded by `export_timeout`; a batch that fails is dropped
//! and counted, and the next one tries again: the gRPC channel and the HTTP client reconnect by
//! themselves, so a collector that comes back is used again without a restart.
//!
//! The transports are opentelemetry-otlp's: gRPC over tonic, HTTP/protobuf over hyper.
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::series::ExportCounters;
use crate::config::{ExportSettings, OtlpProtocol};
use crate::metrics::Metrics;

/// What the export task is sent.
enum Message {
    Spans(Vec<SpanData>),
    /// Export everything queued now, then answer.
    Flush(oneshot::Sender<()>),
}

/// The queue side of one exporter (shared by the stack revisions whose settings it was built
/// from). Dropping the last handle lets the task export what is queued and end.
#[derive(Debug)]
pub struct Exporter {
    settings: ExportSettings,
    tx: mpsc::UnboundedSender<Message>,
    /// Spans queued and not yet taken by the task: the bound `offer` keeps.
    queued: Arc<AtomicUsize>,
    counters: ExportCounters,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::Spans(spans) => write!(f, "Spans({})", spans.len()),
            Message::Flush(_) => f.write_str("Flush"),
        }
    }
}

impl Exporter {
    /// Builds the OTLP exporter of `settings` and starts its task (on the current Tokio runtime).
    /// Nothing connects yet: a collector that is down at start is only a dropped batch.
    pub fn start(settings: &ExportSettings, metrics: &Metrics) -> Result<Arc<Self>, String> {
        let mut exporter = build(settings)?;
        let mut resource = Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
            );
        resource = resource.with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("telemetry.sdk.name", "opentelemetry"),
            KeyValue::new("telemetry.sdk.language", "rust"),
        ]);
        exporter.set_resource(&resource.build());
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let counters = ExportCounters::new(metrics);
        let task = Batcher {
            exporter,
            rx,
            queued: Arc::clone(&queued),
            counters: counters.clone(),
            max_batch: settings.max_batch_spans,
            delay: settings.batch_delay,
            // The exporter bounds each export itself; this is the backstop.
            timeout: settings.timeout + Duration::from_secs(1),
        };
        tokio::spawn(task.run());
        Ok(Arc::new(Self {
            settings: settings.clone(),
            tx,
            queued,
            counters,
        }))
    }

    /// The settings it was built from (a reload with the same ones keeps it).
    pub fn settings(&self) -> &ExportSettings {
        &self.settings
    }

    /// Queues a request's spans, or drops and counts them when the queue is full. Never waits.
    pub fn offer(&self, spans: Vec<SpanData>) {
        let n = spans.len();
        let before = self.queued.fetch_add(n, Ordering::Relaxed);
        if before + n > self.settings.max_queue_spans {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            self.counters.dropped[0].increment(n as u64);
            return;
        }
        self.counters.queued.set((before + n) as f64);
        if let Err(unsent) = self.tx.send(Message::Spans(spans)) {
            // The task is gone (the runtime is shutting down).
            self.queued.fetch_sub(n, Ordering::Relaxed);
            if let Message::Spans(spans) = unsent.0 {
                self.counters.dropped[3].increment(spans.len() as u64);
            }
        }
    }

    /// Exports everything queued, waiting at most `timeout`; what is still queued then is counted
    /// as dropped at `shutdown`. For a process that is stopping.
    pub async fn flush(&self, timeout: Duration) {
        let (done, answered) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).is_ok()
            && tokio::time::timeout(timeout, answered).await.is_ok()
        {
            return;
        }
        let left = self.queued.swap(0, Ordering::Relaxed);
        self.counters.dropped[3].increment(left as u64);
    }
}

/// The OTLP exporter of `settings`.
fn build(settings: &ExportSettings) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let built = match settings.protocol {
        OtlpProtocol::Grpc => {
            let mut metadata = http::HeaderMap::new();
            for (key, value) in &settings.headers {
                let name = http::HeaderName::from_bytes(key.as_bytes())
                    .map_err(|err| format!("tracing.headers.{key}: {err}"))?;
                let value = http::HeaderValue::from_str(value)
                    .map_err(|err| format!("tracing.headers.{key}: {err}"))?;
                metadata.insert(name, value);
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(settings.timeout)
                .with_metadata(MetadataMap::from_headers(metadata))
                .build()
        }
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.timeout)
            .with_headers(settings.headers.iter().cloned().collect::<HashMap<_, _>>())
            .build(),
    };
    built.map_err(|err| format!("tracing.endpoint {:?}: {err}", settings.endpoint))
}

/// The export task.
struct Batcher {
    exporter: opentelemetry_otlp::SpanExporter,
    rx: mpsc::UnboundedReceiver<Message>,
    queued: Arc<AtomicUsize>,
    counters: ExportCounters,
    max_batch: usize,
    delay: Duration,
    timeout: Duration,
}

impl Batcher {
    async fn run(mut self) {
        let mut batch: Vec<SpanData> = Vec::new();
        // When the oldest span of `batch` must be sent.
        let mut due: Option<Instant> = None;
        loop {
            let message = match due {
                Some(at) => tokio::select! {
                    message = self.rx.recv() => message,
                    () = tokio::time::sleep_until(at) => {
                        self.export(&mut batch).await;
                        due = None;
                        continue;
                    }
                },
                None => self.rx.recv().await,
            };
            match message {
                Some(Message::Spans(spans)) => {
                    self.take(spans, &mut batch).await;
                    if batch.is_empty() {
                        due = None;
                    } else {
                        due.get_or_insert_with(|| Instant::now() + self.delay);
                    }
                }
                Some(Message::Flush(done)) => {
                    while let Ok(message) = self.rx.try_recv() {
                        match message {
                            Message::Spans(spans) => self.take(spans, &mut batch).await,
                            Message::Flush(other) => {
                                let _ = other.send(());
                            }
                        }
                    }
                    self.export(&mut batch).await;
                    due = None;
                    let _ = done.send(());
                }
                None => {
                    // Every handle is gone: the revisions that used this exporter have ended.
                    self.export(&mut batch).await;
                    let _ = self.exporter.shutdown();
                    return;
                }
            }
        }
    }

    /// Moves queued spans into the batch, exporting each batch that fills.
    async fn take(&mut self, spans: Vec<SpanData>, batch: &mut Vec<SpanData>) {
        let left = self
            .queued
            .fetch_sub(spans.len(), Ordering::Relaxed)
            .saturating_sub(spans.len());
        self.counters.queued.set(left as f64);
        batch.extend(spans);
        while batch.len() >= self.max_batch {
            let rest = batch.split_off(self.max_batch);
            self.export(batch).await;
            *batch = rest;
        }
    }

    /// Sends `batch` (emptying it), counting its spans exported or dropped.
    async fn export(&mut self, batch: &mut Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let n = spans.len() as u64;
        match tokio::time::timeout(self.timeout, self.exporter.export(spans)).await {
            Ok(Ok(())) => self.counters.exported.increment(n),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, spans = n, "span export failed: dropped");
                self.counters.dropped[1].increment(n);
            }
            Err(_elapsed) => {
                tracing::warn!(spans = n, "span export timed out: dropped");
                self.counters.dropped[2].increment(n);
            }
        }
    }
}
