//! A finished request's spans, built once at its finish from the context (see
//! [`crate::trace::record`] for which spans there are).
//!
//! Long on purpose: every span of a finished request is built from the same context in one pass,
//! and the GenAI attribute names are one table to check against the conventions.
//!
//! Names and attributes follow the OpenTelemetry GenAI semantic conventions (REFERENCE §11):
//! the server span is `{gen_ai.operation.name} {gen_ai.request.model}` (`chat llama-3-8b`) with
//! `gen_ai.*` request and usage attributes and `server.address` / `server.port` of the backend
//! that answered; tokenmeter's own (`tokenmeter.*`) say where it went and why, what the stream
//! showed, and where its TTFT went. No prompt or completion text is ever recorded. One event marks
//! the response head and one the first token; there is no event per token.
//!
//! Times: the spans carry wall-clock times (OTLP's), derived from the proxy's monotonic marks and
//! one wall-clock reading at the finish, so the phases inside a span are exactly the phases the
//! histograms count.
use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState as W3cTraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use tokio::time::Instant;

use crate::context::finish::Finished;
use crate::context::phases::Phases;
use crate::context::Outcome;
use crate::dialect::Operation;
use crate::route::handoff::record::HandoffResult;
use crate::trace::record::{AttemptSpan, TraceState};
use crate::upstream::Target;

/// Converts the proxy's monotonic instants to wall-clock times, from one reading of both clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    mono: Instant,
    wall: SystemTime,
}

impl Clock {
    pub fn now() -> Self {
        Self {
            mono: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    pub fn wall(&self, at: Instant) -> SystemTime {
        if at <= self.mono {
            self.wall - (self.mono - at)
        } else {
            self.wall + (at - self.mono)
        }
    }
}

/// The instrumentation scope every span names.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("tokenmeter")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// The spans of a finished, sampled request: its server span, a client span per upstream attempt
/// and one for a remote prefill.
pub(crate) fn spans_of(
    request: &Finished<'_>,
    state: &TraceState,
    clock: &Clock,
    scope: &InstrumentationScope,
) -> Vec<SpanData> {
    let context = request.context;
    let trace = TraceId::from_bytes(state.trace.0);
    let flags = TraceFlags::SAMPLED;
    let own = |span: [u8; 8]| {
        SpanContext::new(
            trace,
            SpanId::from_bytes(span),
            flags,
            false,
            W3cTraceState::NONE,
        )
    };
    let server_span = SpanId::from_bytes(state.span);
    let operation = Operation::of_request(context.dialect);
    let phases = Phases::of(context);
    let end = clock.wall(request.at);
    let (method, path) = state
        .request_line
        .as_ref()
        .map_or(("", ""), |(method, path)| (method.as_str(), path.as_str()));

    let mut attributes = server_attributes(request, operation, &phases);
    attributes.push(KeyValue::new("http.request.method", method.to_owned()));
    attributes.push(KeyValue::new("url.path", path.to_owned()));
    let name = match (context.dialect, context.request.model.as_deref()) {
        (Some(_), Some(model)) => format!("{} {model}", operation.as_str()),
        (Some(_), None) => operation.as_str().to_owned(),
        (None, _) => method.to_owned(),
    };
    let mut events = Vec::with_capacity(2);
    if let Some(head) = context.marks.head {
        let mut fields = Vec::new();
        if let Some(status) = context.upstream_status {
            fields.push(KeyValue::new(
                "http.response.status_code",
                i64::from(status.as_u16()),
            ));
        }
        events.push(event("response_head", clock.wall(head), fields));
    }
    if let (Some(first), Some(ttft)) = (context.stream.first_token, request.figures.ttft) {
        events.push(event(
            "first_token",
            clock.wall(first),
            vec![KeyValue::new(
                "tokenmeter.time_to_first_token",
                ttft.as_secs_f64(),
            )],
        ));
    }
    let mut spans = Vec::with_capacity(2 + state.attempts.len());
    spans.push(SpanData {
        span_context: own(state.span),
        parent_span_id: state.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: state.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(name),
        start_time: clock.wall(context.received),
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: span_events(events),
        links: SpanLinks::default(),
        status: server_status(request),
        instrumentation_scope: scope.clone(),
    });

    let attempts = state.attempts.len();
    for (i, attempt) in state.attempts.iter().enumerate() {
        let last = i + 1 == attempts;
        let mut attributes = target_attributes(attempt.backend.as_ref());
        attributes.push(KeyValue::new("http.request.method", method.to_owned()));
        attributes.push(KeyValue::new("tokenmeter.attempt", (i + 1) as i64));
        let (end_time, status) = attempt_end(attempt, last, request, clock, &mut attributes);
        spans.push(SpanData {
            span_context: own(attempt.span),
            parent_span_id: server_span,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Owned(format!("{method} {path}")),
            start_time: clock.wall(attempt.started),
            end_time,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope.clone(),
        });
    }

    if let (Some(span), Some(record)) = (state.prefill, &context.handoff) {
        if let Some(started) = record.prefill_started {
            let ended = record.prefill_done.unwrap_or(request.at);
            let mut attributes = target_attributes(record.prefill_backend.as_ref());
            attributes.push(KeyValue::new(
                "tokenmeter.handoff.result",
                record.result.as_str(),
            ));
            let failed = !matches!(
                record.result,
                HandoffResult::Remote | HandoffResult::TransferFailed | HandoffResult::Pending
            );
            spans.push(SpanData {
                span_context: own(span),
                parent_span_id: server_span,
                parent_span_is_remote: false,
                span_kind: SpanKind::Client,
                name: Cow::Owned(format!("prefill {path}")),
                start_time: clock.wall(started),
                end_time: clock.wall(ended),
                attributes,
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status: if failed {
                    Status::error(record.result.as_str())
                } else {
                    Status::Unset
                },
                instrumentation_scope: scope.clone(),
            });
        }
    }
    spans
}

/// The server span's attributes (see the module docs and docs/tracing.md).
fn server_attributes(
    request: &Finished<'_>,
    operation: Operation,
    phases: &Phases,
) -> Vec<KeyValue> {
    let context = request.context;
    let figures = &request.figures;
    let mut out = Vec::with_capacity(40);
    let int = |n: u64| Value::I64(i64::try_from(n).unwrap_or(i64::MAX));
    let seconds = |d: Duration| Value::F64(d.as_secs_f64());
    if context.dialect.is_some() {
        out.push(KeyValue::new("gen_ai.operation.name", operation.as_str()));
        out.push(KeyValue::new("gen_ai.provider.name", operation.provider()));
    }
    if let Some(model) = &context.request.model {
        out.push(KeyValue::new("gen_ai.request.model", model.clone()));
    }
    if let Some(input) = figures.input_tokens {
        out.push(KeyValue::new("gen_ai.usage.input_tokens", int(input)));
    }
    if let Some(cached) = figures.cached_input_tokens {
        out.push(KeyValue::new(
            "gen_ai.usage.cache_read.input_tokens",
            int(cached),
        ));
    }
    if context.stream.framed || figures.output_tokens > 0 {
        out.push(KeyValue::new(
            "gen_ai.usage.output_tokens",
            int(figures.output_tokens),
        ));
        out.push(KeyValue::new(
            "tokenmeter.output_tokens.exact",
            figures.exact_output,
        ));
    }
    out.extend(target_attributes(context.route.backend.as_ref()));
    if let Some(client) = context.client {
        out.push(KeyValue::new("client.address", client.ip().to_string()));
    }
    if let Some(tenant) = context
        .tenant
        .as_ref()
        .and_then(|tenant| tenant.name.as_ref())
    {
        // The name, not the bounded label: a span is one request, not a series.
        out.push(KeyValue::new("tokenmeter.tenant", tenant.to_string()));
    }
    if let Some(status) = context.status {
        out.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
    }
    out.push(KeyValue::new(
        "tokenmeter.outcome",
        request.outcome.as_str(),
    ));
    if request.outcome != Outcome::Ok {
        out.push(KeyValue::new("error.type", request.outcome.as_str()));
    }
    if let Some(pool) = &context.route.pool {
        out.push(KeyValue::new("tokenmeter.pool", pool.to_string()));
    }
    if let Some(route) = context.route.decision {
        out.push(KeyValue::new("tokenmeter.route.reason", route.reason));
        if let Some(affinity) = route.affinity {
            out.push(KeyValue::new("tokenmeter.route.affinity", affinity));
        }
    }
    out.push(KeyValue::new(
        "tokenmeter.attempts",
        i64::from(context.route.attempts),
    ));
    if let Some(estimate) = context.route.estimate {
        out.push(KeyValue::new(
            "tokenmeter.prompt_tokens.estimate",
            int(estimate.tokens),
        ));
    }
    if let Some(record) = &context.handoff {
        out.push(KeyValue::new(
            "tokenmeter.handoff.result",
            record.result.as_str(),
        ));
        out.push(KeyValue::new(
            "tokenmeter.handoff.uncached_tokens",
            int(record.uncached_tokens),
        ));
    }
    for (key, time) in [
        ("tokenmeter.time_to_first_token", figures.ttft),
        ("tokenmeter.time_per_output_token", figures.tpot),
    ] {
        if let Some(time) = time {
            out.push(KeyValue::new(key, seconds(time)));
        }
    }
    if context.stream.token_events > 1 {
        out.push(KeyValue::new(
            "tokenmeter.max_token_gap",
            seconds(context.stream.max_gap),
        ));
        out.push(KeyValue::new(
            "tokenmeter.stalls",
            i64::from(context.stream.stalls),
        ));
    }
    if let Some(micros) = context.stream.usage.prefill_micros {
        out.push(KeyValue::new(
            "tokenmeter.backend.prefill_time",
            micros as f64 / 1e6,
        ));
    }
    out.push(KeyValue::new("tokenmeter.duration", seconds(figures.e2e)));
    for (phase, time) in phases.reached() {
        out.push(KeyValue::new(
            format!("tokenmeter.phase.{phase}"),
            seconds(time),
        ));
    }
    if context.marks.written.is_some() {
        out.push(KeyValue::new(
            "tokenmeter.gateway_overhead.request",
            seconds(phases.overhead_request),
        ));
    }
    if let Some(hold) = phases.overhead_first_token {
        out.push(KeyValue::new(
            "tokenmeter.gateway_overhead.first_token",
            seconds(hold),
        ));
    }
    if let Some(error) = request.error {
        out.push(KeyValue::new("tokenmeter.error", error.to_string()));
    }
    out
}

/// `server.address`, `server.port` and `tokenmeter.backend` of a backend.
fn target_attributes(target: Option<&Target>) -> Vec<KeyValue> {
    let Some(target) = target else {
        return Vec::new();
    };
    let port = target
        .authority
        .port_u16()
        .unwrap_or(if target.tls.is_some() { 443 } else { 80 });
    vec![
        KeyValue::new("server.address", target.authority.host().to_owned()),
        KeyValue::new("server.port", i64::from(port)),
        KeyValue::new("tokenmeter.backend", target.label.to_string()),
    ]
}

/// When an attempt's span ends and its status: a failed attempt at its failure; the one that
/// answered with the request (its stream is the request's body).
fn attempt_end(
    attempt: &AttemptSpan,
    last: bool,
    request: &Finished<'_>,
    clock: &Clock,
    attributes: &mut Vec<KeyValue>,
) -> (SystemTime, Status) {
    if let Some(failure) = &attempt.failed {
        attributes.push(KeyValue::new("error.type", failure.kind));
        return (
            clock.wall(failure.at),
            Status::error(failure.message.clone()),
        );
    }
    let context = request.context;
    if last {
        if let Some(status) = context.upstream_status {
            attributes.push(KeyValue::new(
                "http.response.status_code",
                i64::from(status.as_u16()),
            ));
            if status.is_server_error() {
                attributes.push(KeyValue::new("error.type", status.as_str().to_owned()));
                return (clock.wall(request.at), Status::error(status.to_string()));
            }
        }
    }
    (clock.wall(request.at), Status::Unset)
}

/// The server span's status: an error where the proxy or the backend failed the request (not
/// where the client went away or asked wrongly: HTTP's server-span rule).
fn server_status(request: &Finished<'_>) -> Status {
    match request.outcome {
        Outcome::UpstreamError | Outcome::Timeout | Outcome::Overloaded => {
            let message = request.error.map_or_else(
                || request.outcome.as_str().to_owned(),
                |err| err.to_string(),
            );
            Status::error(message)
        }
        Outcome::Ok | Outcome::Cancelled | Outcome::ClientError => Status::Unset,
    }
}

/// The SDK's event list (a non-exhaustive struct with public fields).
fn span_events(events: Vec<opentelemetry::trace::Event>) -> SpanEvents {
    let mut list = SpanEvents::default();
    list.events = events;
    list
}

fn event(
    name: &'static str,
    at: SystemTime,
    attributes: Vec<KeyValue>,
) -> opentelemetry::trace::Event {
    opentelemetry::trace::Event::new(name, at, attributes, 0)
}
