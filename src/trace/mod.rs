//! Why a request was slow: where its TTFT went, the time the proxy itself adds, and
//! OpenTelemetry spans of each request over OTLP.
//!
//! - [`sampler`]: which requests are recorded (OpenTelemetry's samplers; `parentbased_*` follow a
//!   valid incoming `traceparent`).
//! - [`span`]: a finished request's spans, built at its finish from the context: a server span
//!   (GenAI conventions), a client span per upstream attempt, one for a remote prefill.
//! - [`export`]: a bounded queue that never waits, and the task that batches and sends spans
//!   (opentelemetry-otlp: gRPC or HTTP/protobuf).
//! - [`series`]: `tokenmeter_ttft_phase_seconds`, `tokenmeter_gateway_overhead_seconds`, and what
//!   became of the spans.
//!
//! The split itself (which mark ends which phase) is the shared vocabulary's
//! ([`crate::context::phases`]): the meter answers with it in `server-timing`, this module counts it
//! and puts it on spans.
//!
//! What it costs: with tracing off (the default) nothing but the phase marks (a clock read at each
//! of a few phases per request) and the histograms at the finish; no id, no header, no span. With
//! tracing on, two random ids per request and one per attempt, and the upstream `traceparent`; a
//! sampled request's spans are built at its finish (one allocation per attribute) and queued.
//! Nothing is added per chunk (docs/performance.md).
use std::sync::Arc;

use http::{HeaderMap, Method, Uri};

use crate::config::TracingConfig;
use crate::context::finish::{FinishHook, Finished};
use crate::context::phases::Phases;
use crate::trace::record::{next_span_id, next_trace_id, TraceState, TRACEPARENT};

pub mod export;
pub mod record;
pub mod sampler;
pub mod series;
pub mod span;
pub mod system;

use export::Exporter;
use sampler::Sampling;
use series::PhaseSeries;

/// One stack revision's tracing: its sampler and the exporter its spans go to.
#[derive(Debug)]
pub struct Tracing {
    sampling: Sampling,
    exporter: Arc<Exporter>,
}

impl Tracing {
    pub fn new(config: &TracingConfig, exporter: Arc<Exporter>) -> Self {
        Self {
            sampling: Sampling::new(config.sampler(), config.ratio()),
            exporter,
        }
    }

    /// The trace state of a request whose head this is: its ids, and whether it is recorded.
    pub fn begin(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Box<TraceState> {
        let header = headers.get(TRACEPARENT).map(|value| value.as_bytes());
        let mut state = Box::new(TraceState::new(
            header,
            || (next_trace_id(), next_span_id()),
            |parent, trace| self.sampling.decide(parent, trace),
        ));
        if state.sampled {
            state.request_line = Some((method.clone(), uri.path().to_owned()));
        }
        state
    }
}

/// The finish hook: counts each request's phases and overhead, and queues a sampled request's
/// spans.
#[derive(Debug)]
pub(crate) struct TraceHook {
    series: Arc<PhaseSeries>,
    tracing: Option<Arc<Tracing>>,
    scope: opentelemetry::InstrumentationScope,
    none: Arc<str>,
}

impl TraceHook {
    pub fn new(series: Arc<PhaseSeries>, tracing: Option<Arc<Tracing>>) -> Self {
        Self {
            series,
            tracing,
            scope: span::scope(),
            none: Arc::from("none"),
        }
    }
}

impl FinishHook for TraceHook {
    fn finished(&self, request: &Finished<'_>) {
        let context = request.context;
        let phases = Phases::of(context);
        let backend_prefill = context.stream.usage.prefill_micros;
        let complete = request.figures.ttft.is_some() && phases.reached == phases.times.len();
        if complete || backend_prefill.is_some() {
            let pool = context.route.pool.as_ref().unwrap_or(&self.none);
            let histograms = self.series.pool(pool);
            if complete {
                for (histogram, time) in histograms.phases.iter().zip(phases.times) {
                    histogram.record(time.as_secs_f64());
                }
            }
            if let Some(micros) = backend_prefill {
                histograms.backend_prefill.record(micros as f64 / 1e6);
            }
        }
        if context.marks.written.is_some() {
            self.series
                .overhead_request
                .record(phases.overhead_request.as_secs_f64());
        }
        if let Some(hold) = phases.overhead_first_token {
            self.series.overhead_first_token.record(hold.as_secs_f64());
        }
        let (Some(tracing), Some(state)) = (&self.tracing, &context.tracing) else {
            return;
        };
        if state.sampled {
            let spans = span::spans_of(request, state, &span::Clock::now(), &self.scope);
            tracing.exporter.offer(spans);
        }
    }
}
