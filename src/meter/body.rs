//! The response body on its way to the client, and the end of its request.
//!
//! Long on purpose: the body's one state, taken exactly once (at the end, on an error, or on drop),
//! and every path that ends it.
//!
//! In the linkerd style: a small wrapper whose request lives in a state that is taken exactly
//! once — at the end of the stream, on an upstream error, or on drop (the client went away:
//! `cancelled`) — and handed to the one finish point ([`crate::context::finish`]). A generation
//! response is metered: each data frame is stamped with the monotonic clock when it arrives,
//! scanned for events in place (no copy), its TTFB, TTFT and gaps recorded live, and forwarded at
//! once as the same `Bytes`. The only exception is the usage chunk the proxy itself asked for,
//! which [`UsageStripper`] removes. A non-streaming JSON answer has no events: its frames are kept
//! as `Bytes` clones ([`WholeBody`], bounded) and its usage is read once at the clean end, for
//! N_in / N_out only (no TTFT / ITL / TPOT without token events). Any other response passes
//! through untouched; its request ends with its last byte.
//!
//! **Outcomes by who caused them.** A 2xx that ended cleanly is `ok` (a stream with an error event
//! in it is `upstream_error`). An answer that is not a success is the client's (`client_error`)
//! when the backend refused the request rather than failed: a 4xx, a 501 Not Implemented (the
//! path or feature is not served there, e.g. llama-server's `/v1/embeddings` without
//! `--embeddings`), or any error answer to a generation body the proxy could not read as a JSON
//! object ([`RequestContext::malformed`]: llama-server answers those 500, `parse_error.101`);
//! every other 5xx is `upstream_error`. A 5xx to a body that did read is not second-guessed from
//! its error body: llama-server calls its own request errors `server_error` too, so nothing in
//! the body tells them apart from a real failure without reading its free-text message.
//!
//! **The end from the user's side.** A client that read the stream's terminal event (OpenAI's
//! `[DONE]`, Anthropic's `message_stop`, the Responses API's `response.completed` / `failed`,
//! Ollama's `done` line, TGI's `generated_text`, llama.cpp's `stop`) has the whole stream, and
//! the OpenAI SDK closes its connection right there: when that close reaches the proxy before
//! the upstream body's own end (the terminating chunk, often a separate write), the body is
//! dropped with the stream complete. Such a stream is counted by what it showed (`ok` when
//! nothing went wrong), not `cancelled`; its E2E ends at the drop.
//!
//! A stream the upstream cut after its head writes one rate-limited WARN line ([`super::cut`]).
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::cut::{Cut, CutLog, Phase};
use super::series::StreamMetrics;
use super::strip::{EventRole, UsageStripper};
use super::whole::WholeBody;
use crate::context::{Outcome, RequestContext};
use crate::dialect::{Dialect, EventSummary};
use crate::meter::record::{StreamRecord, TokenMark};
use crate::metrics::exemplar::TraceId;
use crate::proxy::BodyError;
use crate::sse::Framer;

/// A response body on its way to the client, which ends its request: metered (a generation
/// response), or passed through and only timed to its end.
#[derive(Debug)]
pub struct MeteredBody<B> {
    inner: B,
    /// The request this body ends: taken exactly once, at the end, on an error, or at drop.
    /// `None` once ended (or when a layer below lost it: a bug, counted where it was lost).
    context: Option<Box<RequestContext>>,
    /// `Some` for a generation response: how each frame is observed.
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
    /// Where a stream the upstream cut is logged.
    cuts: &'static CutLog,
}

/// Everything one stream's metering needs, resolved once when the response head arrived. What
/// the frames show goes into the request's record (`context.stream`).
#[derive(Debug)]
pub struct StreamMeter {
    /// The stream's live series (TTFB, TTFT, ITL), resolved once.
    pub handles: StreamMetrics,
    /// The API the stream speaks: what counts as a token event.
    pub dialect: Dialect,
    /// `Some` for a streaming response of that dialect (SSE or NDJSON): finds the events.
    pub framer: Option<Framer>,
    /// `Some` when the proxy injected `include_usage` and must strip the usage chunk.
    pub stripper: Option<UsageStripper>,
    /// `Some` for a non-streaming JSON answer of a known dialect (no framer): its frames, kept
    /// to read its usage at the end (see [`WholeBody::for_response`]).
    pub whole: Option<WholeBody>,
}

impl<B: Body> MeteredBody<B> {
    /// A metered generation response of `context`'s request.
    pub fn new(inner: B, context: Box<RequestContext>, meter: StreamMeter) -> Self {
        Self::watching(inner, Some(context), Some(meter))
    }

    /// A response that is forwarded without metering; its request ends with it.
    pub fn passthrough(inner: B, context: Box<RequestContext>) -> Self {
        Self::watching(inner, Some(context), None)
    }

    /// A response whose request context was lost (a bug, counted where it was lost): forwarded
    /// as it is, ending nothing.
    pub(crate) fn unwatched(inner: B) -> Self {
        Self::watching(inner, None, None)
    }

    fn watching(
        inner: B,
        context: Option<Box<RequestContext>>,
        meter: Option<StreamMeter>,
    ) -> Self {
        let mut body = Self {
            inner,
            context,
            meter,
            tail: None,
            failed: None,
            ended: false,
            cuts: CutLog::global(),
        };
        // A body with nothing in it (a HEAD, a 204, `content-length: 0`) is never polled: hyper
        // sees its end at once and drops it. Its request ends here, with the head.
        if body.inner.is_end_stream() {
            body.end_cleanly();
        }
        body
    }

    /// The same body, logging its cut through `cuts` (a test's own rate limit).
    #[cfg(test)]
    pub(crate) fn with_cut_log(mut self, cuts: &'static CutLog) -> Self {
        self.cuts = cuts;
        self
    }
}

impl<B> MeteredBody<B> {
    /// The upstream body ended cleanly: the last events (or the whole answer's usage) are read,
    /// the stripper releases what it held, and the request ends. Runs at most once (the context
    /// is taken).
    fn end_cleanly(&mut self) {
        self.ended = true;
        let Some(mut context) = self.context.take() else {
            return;
        };
        let now = Instant::now();
        let outcome = match self.meter.as_mut() {
            Some(meter) => {
                meter.drain(&mut context, now);
                self.tail = meter.stripper.as_mut().and_then(UsageStripper::finish);
                stream_outcome(&context)
            }
            None => passthrough_outcome(&context),
        };
        self.finish(context, outcome, now, None);
    }

    /// The upstream body broke (or timed out): the request ends with `err`.
    fn end_in_error(&mut self, err: &BodyError) {
        self.ended = true;
        let Some(context) = self.context.take() else {
            return;
        };
        let outcome = if err.is_timeout() {
            Outcome::Timeout
        } else {
            Outcome::UpstreamError
        };
        if let Some(stripper) = self.meter.as_mut().and_then(|m| m.stripper.as_mut()) {
            self.tail = stripper.finish();
        }
        let now = Instant::now();
        if let Some(meter) = self.meter.as_ref() {
            self.cuts.cut(&meter.cut(&context, outcome, now, err));
        }
        self.finish(context, outcome, now, Some(err));
    }

    /// Ends the request with what the stream showed; runs once (the caller took the context).
    fn finish(
        &self,
        mut context: Box<RequestContext>,
        outcome: Outcome,
        at: Instant,
        error: Option<&BodyError>,
    ) {
        if let Some(framer) = self.meter.as_ref().and_then(|m| m.framer.as_ref()) {
            context.stream.framed = true;
            context.stream.overflows = framer.overflows();
        }
        let error = error.map(|err| err as &(dyn std::error::Error + 'static));
        context.finish_at(outcome, at, error);
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
                    let forward = match frame.into_data() {
                        Ok(data) => match (this.meter.as_mut(), this.context.as_mut()) {
                            (Some(meter), Some(context)) => {
                                let forward = meter.observe(context, data, Instant::now());
                                // Once per stream: when the first token's frame leaves.
                                if context.marks.first_token_sent.is_none()
                                    && context.stream.first_token.is_some()
                                {
                                    context.marks.first_token_sent = Some(Instant::now());
                                }
                                forward
                            }
                            _ => Some(data),
                        },
                        Err(trailers) => {
                            if this.inner.is_end_stream() {
                                this.end_cleanly();
                            }
                            return Poll::Ready(Some(Ok(trailers)));
                        }
                    };
                    if this.inner.is_end_stream() {
                        // A length-delimited body has ended with its last byte, and hyper polls a
                        // body that says so no further (it drops it, which would count the
                        // request cancelled): end now.
                        this.end_cleanly();
                    }
                    match forward {
                        Some(forward) => return Poll::Ready(Some(Ok(Frame::data(forward)))),
                        // The whole frame was held back or stripped: the next one, or the
                        // released tail / the end.
                        None => continue,
                    }
                }
                Some(Err(err)) => {
                    this.end_in_error(&err);
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
            Some(meter) if meter.stripper.is_some() => SizeHint::default(),
            _ => self.inner.size_hint(),
        }
    }
}

impl<B> Drop for MeteredBody<B> {
    fn drop(&mut self) {
        // Not ended at drop: the client went away before the end of the stream. After the
        // terminal event it had the whole stream: counted by what the stream showed.
        if let Some(context) = self.context.take() {
            let outcome = if context.stream.terminal_event {
                stream_outcome(&context)
            } else {
                Outcome::Cancelled
            };
            self.finish(context, outcome, Instant::now(), None);
        }
    }
}

/// How a metered stream that reached its end cleanly (or its terminal event) is counted.
fn stream_outcome(context: &RequestContext) -> Outcome {
    match context.upstream_status {
        Some(status) if status.is_success() && !context.stream.error_event => Outcome::Ok,
        Some(status) if !status.is_success() => answer_outcome(context, status),
        _ => Outcome::UpstreamError,
    }
}

/// How a passed-through response that reached its end is counted: by its status.
fn passthrough_outcome(context: &RequestContext) -> Outcome {
    match context.upstream_status {
        Some(status) if status.is_success() || status.is_redirection() => Outcome::Ok,
        Some(status) => answer_outcome(context, status),
        None => Outcome::UpstreamError,
    }
}

/// Who caused an answer that is not a success (see the module docs and
/// [`crate::context::answer_failed`]): the upstream for a 5xx other than 501 to a body the proxy
/// could read; the client for the rest (a 4xx, a 501, any error answer to a malformed body).
fn answer_outcome(context: &RequestContext, status: StatusCode) -> Outcome {
    if context.answer_failed(status) {
        Outcome::UpstreamError
    } else {
        Outcome::ClientError
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
            TokenMark::Gap(gap) => {
                if handles.record_gap(gap, trace) {
                    record.stalls += 1;
                }
            }
        }
    }
    if let Some(usage) = summary.usage {
        record.on_usage(usage);
    }
    if summary.error {
        record.error_event = true;
    }
    if summary.done {
        record.terminal_event = true;
    }
}

impl StreamMeter {
    /// Stamps and scans one data frame of `context`'s response; returns what to forward now.
    fn observe(
        &mut self,
        context: &mut RequestContext,
        data: Bytes,
        now: Instant,
    ) -> Option<Bytes> {
        let Self {
            handles,
            dialect,
            framer,
            stripper,
            whole,
        } = self;
        let record = &mut context.stream;
        let trace = context.trace.as_ref();
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
    fn drain(&mut self, context: &mut RequestContext, now: Instant) {
        let Self {
            handles,
            dialect,
            framer,
            whole,
            ..
        } = self;
        let record = &mut context.stream;
        let trace = context.trace.as_ref();
        if let Some(usage) = whole.take().and_then(|whole| whole.usage(*dialect)) {
            record.on_usage(usage);
        }
        if let Some(framer) = framer.as_mut() {
            framer.finish(|event| {
                let summary = dialect.classify(event.event, event.data);
                apply(record, handles, trace, &summary, now);
            });
        }
    }

    /// What the line of a stream the upstream cut at `now` reports (see [`super::cut`]).
    fn cut<'a>(
        &'a self,
        context: &RequestContext,
        outcome: Outcome,
        now: Instant,
        error: &'a BodyError,
    ) -> Cut<'a> {
        let labels = &self.handles.labels;
        let record = &context.stream;
        let bytes = match (&self.framer, &self.whole) {
            (Some(framer), _) => Some(framer.position()),
            (None, Some(whole)) => whole.kept(),
            (None, None) => None,
        };
        Cut {
            backend: &labels.backend,
            pool: &labels.pool,
            operation: labels.operation.as_str(),
            model: &labels.model,
            phase: if record.first_token.is_some() {
                Phase::MidStream
            } else {
                Phase::BeforeFirstToken
            },
            bytes,
            tokens: record.token_events,
            outcome,
            elapsed: now.saturating_duration_since(context.received),
            error,
        }
    }
}

#[cfg(test)]
mod tests;
