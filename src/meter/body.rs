//! The metered response body: observes every upstream frame as it passes and finishes exactly once.
//!
//! In the linkerd style: a small wrapper whose per-stream state lives in an `Option` that is taken
//! exactly once — at the end of the stream, on an upstream error, or on drop (the client went away:
//! `cancelled`). Each data frame is stamped with the monotonic clock when it arrives, scanned for SSE
//! events in place (no copy), and forwarded at once as the same `Bytes`. The only exception is the
//! usage chunk the proxy itself asked for, which [`UsageStripper`] removes. A non-streaming JSON
//! answer has no events: its frames are kept as `Bytes` clones ([`WholeBody`], bounded) and its
//! usage is read once at the clean end, for N_in / N_out only (no TTFT / ITL / TPOT without token
//! events).
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use metrics::Gauge;
use tokio::time::Instant;

use super::record::{SloTargets, StreamRecord, TokenMark};
use super::strip::{EventRole, UsageStripper};
use super::whole::WholeBody;
use crate::context::Estimate;
use crate::dialect::{Dialect, EventSummary};
use crate::metrics::exemplar::TraceId;
use crate::metrics::{Metrics, Outcome, Slo, StreamMetrics};
use crate::proxy::BodyError;
use crate::route::Calibrator;
use crate::sse::Framer;

/// A response body under metering. `meter` is `None` for bodies that are only passed through.
#[derive(Debug)]
pub struct MeteredBody<B> {
    inner: B,
    meter: Option<StreamMeter>,
    /// Bytes released by the stripper at the end of the stream, sent before the end (or before
    /// the error: they are what the backend sent before it failed).
    tail: Option<Bytes>,
    /// An upstream error held back for one poll: returned at once, hyper would close the client
    /// connection with the bytes that came before it still unflushed in its write buffer (a client
    /// of an upstream that died right after its head would then see no response at all). Returning
    /// `Pending` once (with a wake-up) lets hyper flush them first; `true` once that poll passed.
    failed: Option<(BodyError, bool)>,
    ended: bool,
}

/// Everything one stream's metering needs, resolved once when the response head arrived.
#[derive(Debug)]
pub struct StreamMeter {
    pub record: StreamRecord,
    pub handles: StreamMetrics,
    pub metrics: Arc<Metrics>,
    pub active: Gauge,
    pub status: StatusCode,
    pub slo: SloTargets,
    /// The API the stream speaks: what counts as a token event.
    pub dialect: Dialect,
    /// `Some` for a streaming response of that dialect (SSE or NDJSON): finds the events.
    pub framer: Option<Framer>,
    /// `Some` when the proxy injected `include_usage` and must strip the usage chunk.
    pub stripper: Option<UsageStripper>,
    /// `Some` for a non-streaming JSON answer of a known dialect (no framer): its frames, kept
    /// to read its usage at the end (see [`WholeBody::for_response`]).
    pub whole: Option<WholeBody>,
    /// The router's prompt estimate: calibrated by `usage.prompt_tokens`, or N_in without it.
    pub estimate: Option<Calibration>,
    /// The request's W3C trace (from `traceparent`): its latencies become exemplars.
    pub trace: Option<TraceId>,
}

impl<B> MeteredBody<B> {
    pub fn new(inner: B, meter: StreamMeter) -> Self {
        Self {
            inner,
            meter: Some(meter),
            tail: None,
            failed: None,
            ended: false,
        }
    }

    /// The upstream body ended cleanly: the last events (or the whole answer's usage) are read,
    /// the stripper releases what it held, and the meter finishes. Runs at most once (the meter
    /// is taken).
    fn end_cleanly(&mut self) {
        if let Some(mut meter) = self.meter.take() {
            let now = Instant::now();
            meter.drain(now);
            self.tail = meter.stripper.as_mut().and_then(UsageStripper::finish);
            let outcome = meter.end_outcome();
            meter.finish(outcome, now);
        }
        self.ended = true;
    }

    /// A body that is forwarded without metering.
    pub fn passthrough(inner: B) -> Self {
        Self {
            inner,
            meter: None,
            tail: None,
            failed: None,
            ended: false,
        }
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes, Error = BodyError> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        loop {
            if let Some(tail) = this.tail.take() {
                return Poll::Ready(Some(Ok(Frame::data(tail))));
            }
            match &mut this.failed {
                Some((_, waited @ false)) => {
                    *waited = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some((_, true)) => {
                    if let Some((err, _)) = this.failed.take() {
                        return Poll::Ready(Some(Err(err)));
                    }
                }
                None => {}
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Some(meter) = this.meter.as_mut() else {
                        return Poll::Ready(Some(Ok(frame)));
                    };
                    match frame.into_data() {
                        Ok(data) => {
                            let forward = meter.observe(data, Instant::now());
                            if this.inner.is_end_stream() {
                                // A length-delimited body has ended with its last byte, and
                                // hyper polls a body that says so no further (it drops it,
                                // which would count the request cancelled): finish now.
                                this.end_cleanly();
                            }
                            match forward {
                                Some(forward) => {
                                    return Poll::Ready(Some(Ok(Frame::data(forward))))
                                }
                                // The whole frame was held back or stripped: the next one, or
                                // the released tail / the end.
                                None => continue,
                            }
                        }
                        Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                    }
                }
                Some(Err(err)) => {
                    let outcome = if err.is_timeout() {
                        Outcome::Timeout
                    } else {
                        Outcome::UpstreamError
                    };
                    if let Some(mut meter) = this.meter.take() {
                        this.tail = meter.stripper.as_mut().and_then(UsageStripper::finish);
                        meter.finish(outcome, Instant::now());
                    }
                    this.ended = true;
                    this.failed = Some((err, false));
                }
                None => this.end_cleanly(),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.tail.is_none() && self.failed.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match &self.meter {
            // Stripping may shorten the body: promise nothing exact.
            Some(StreamMeter {
                stripper: Some(_), ..
            }) => SizeHint::default(),
            _ => self.inner.size_hint(),
        }
    }
}

impl<B> Drop for MeteredBody<B> {
    fn drop(&mut self) {
        // Still metering at drop: the client went away before the end of the stream.
        if let Some(meter) = self.meter.take() {
            meter.finish(Outcome::Cancelled, Instant::now());
        }
    }
}

/// The router's estimate of this request's prompt, and the calibration the backend's count of it
/// teaches.
#[derive(Debug)]
pub struct Calibration {
    pub calibrator: Arc<Calibrator>,
    /// The model label the ratio is kept under.
    pub model: Arc<str>,
    pub estimate: Estimate,
}

impl Calibration {
    /// Reports the backend's count of this prompt.
    pub fn observe(&self, actual_prompt_tokens: u64) {
        self.calibrator.observe(
            &self.model,
            self.estimate.size,
            self.estimate.tokens,
            actual_prompt_tokens,
        );
    }
}

/// Applies one classified event to the record and the live histograms (TTFT, ITL).
fn apply(
    record: &mut StreamRecord,
    handles: &StreamMetrics,
    trace: Option<&TraceId>,
    summary: &EventSummary,
    now: Instant,
) {
    if summary.token {
        match record.on_token(now, summary.tokens) {
            TokenMark::First(ttft) => handles.ttft.record_traced(ttft.as_secs_f64(), trace),
            TokenMark::Gap(gap) => handles.record_gap(gap, trace),
        }
    }
    if let Some(usage) = summary.usage {
        record.on_usage(usage);
    }
    if summary.error {
        record.error_event = true;
    }
}

impl StreamMeter {
    /// Stamps and scans one data frame; returns what to forward now.
    fn observe(&mut self, data: Bytes, now: Instant) -> Option<Bytes> {
        let Self {
            record,
            handles,
            dialect,
            framer,
            stripper,
            whole,
            trace,
            ..
        } = self;
        let trace = trace.as_ref();
        if data.is_empty() {
            return Some(data);
        }
        if let Some(ttfb) = record.on_bytes(now) {
            handles.ttfb.record_traced(ttfb.as_secs_f64(), trace);
        }
        let Some(framer) = framer.as_mut() else {
            if let Some(whole) = whole.as_mut() {
                whole.keep(&data);
            }
            return Some(data);
        };
        let frame_start = framer.position();
        framer.feed(&data, |event| {
            let summary = dialect.classify(event.event, event.data);
            apply(record, handles, trace, &summary, now);
            if let Some(stripper) = stripper.as_mut() {
                let role = if summary.usage_only {
                    EventRole::UsageOnly
                } else if summary.finish {
                    EventRole::Finish
                } else {
                    EventRole::Other
                };
                stripper.on_event(role, &event);
            }
        });
        match stripper {
            Some(stripper) => stripper.process(data, frame_start, framer.block_start()),
            None => Some(data),
        }
    }

    /// At the clean end of the body: the framer's unterminated last event (an NDJSON line without
    /// its newline still counts; an SSE event without its blank line does not, per WHATWG), or the
    /// usage of a whole non-streaming answer. A body that ended in an error or was abandoned is
    /// never parsed: its usage, if any, did not arrive whole.
    fn drain(&mut self, now: Instant) {
        let Self {
            record,
            handles,
            dialect,
            framer,
            whole,
            trace,
            ..
        } = self;
        if let Some(usage) = whole.take().and_then(|whole| whole.usage(*dialect)) {
            record.on_usage(usage);
        }
        if let Some(framer) = framer.as_mut() {
            framer.finish(|event| {
                let summary = dialect.classify(event.event, event.data);
                apply(record, handles, trace.as_ref(), &summary, now);
            });
        }
    }

    /// How a stream that reached its end cleanly is counted.
    fn end_outcome(&self) -> Outcome {
        if self.status.is_success() {
            if self.record.error_event {
                Outcome::UpstreamError
            } else {
                Outcome::Ok
            }
        } else if self.status.is_client_error() {
            Outcome::ClientError
        } else {
            Outcome::UpstreamError
        }
    }

    /// Records everything the stream yields; runs exactly once (the meter is consumed).
    fn finish(self, outcome: Outcome, now: Instant) {
        let Self {
            record,
            handles,
            metrics,
            active,
            status,
            slo,
            dialect,
            framer,
            stripper: _,
            whole: _,
            estimate,
            trace,
        } = self;
        let trace = trace.as_ref();
        let finished = record.finish(now);
        handles.e2e.record_traced(finished.e2e.as_secs_f64(), trace);
        if let Some(overflows) = framer.as_ref().map(Framer::overflows).filter(|&n| n > 0) {
            metrics.sse_overflows(&handles.labels, overflows);
        }
        // Token figures only for a stream of a known dialect (an unknown one is timed only), or for
        // a non-streaming answer whose usage gave N_out: without token events there is no count to
        // fall back on, and without a framer usage can only have come from the whole body.
        let tokens_known =
            dialect != Dialect::Unknown && (framer.is_some() || finished.exact_output);
        if tokens_known {
            if let Some(tpot) = finished.tpot {
                handles.tpot.record_traced(tpot.as_secs_f64(), trace);
            }
            handles.output_tokens.record(finished.output_tokens as f64);
            handles.output_total.increment(finished.output_tokens);
            handles.token_count_source(&metrics, finished.exact_output);
        }
        // N_in: usage.prompt_tokens when known (and it calibrates the estimate), else the estimate.
        let input = match (finished.input_tokens, &estimate) {
            (Some(actual), Some(estimate)) => {
                estimate.observe(actual);
                Some(actual)
            }
            (Some(actual), None) => Some(actual),
            // A rejected request processed no prompt.
            (None, Some(estimate)) if status.is_success() => Some(estimate.estimate.tokens),
            (None, _) => None,
        };
        if let Some(input) = input {
            handles.input_tokens.record(input as f64);
            handles.input_total.increment(input);
        }
        // The prompt cache, where the server reports it: hits are its cached tokens, misses the rest
        // of the prompt it computed.
        if let (Some(prompt), Some(cached)) = (finished.input_tokens, finished.cached_input_tokens)
        {
            handles.prompt_cache(&metrics, cached.min(prompt), prompt.saturating_sub(cached));
        }
        if outcome == Outcome::Ok {
            if let Some(verdict) = finished.verdict(slo) {
                handles.slo_verdict(&metrics, Slo::Ttft, verdict.ttft_met);
                if let Some(tpot_met) = verdict.tpot_met {
                    handles.slo_verdict(&metrics, Slo::Tpot, tpot_met);
                }
                handles.slo_verdict(&metrics, Slo::All, verdict.all_met());
            }
        }
        handles.finished(&metrics, outcome);
        active.decrement(1.0);
        tracing::debug!(
            outcome = outcome.as_str(),
            backend = &*handles.labels.backend,
            model = &*handles.labels.model,
            e2e_ms = finished.e2e.as_millis() as u64,
            output_tokens = finished.output_tokens,
            "stream finished"
        );
    }
}
