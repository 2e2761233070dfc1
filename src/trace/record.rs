//! A request's place in a distributed trace: the W3C Trace Context it came with, the spans the
//! proxy records for it, and the `traceparent` each upstream attempt carries.
//!
//! W3C Trace Context (REFERENCE §11): `traceparent` is `version-traceid-parentid-flags` in
//! lowercase hex (`00-<32>-<16>-<2>`); a proxy continues the trace with a span of its own (same
//! trace id, new span id) and forwards `tracestate` unchanged. A header that is not a valid one
//! (version `ff`, an all-zero id, a wrong length, uppercase) is not continued: the proxy starts a
//! fresh trace, and the header passes upstream as it came.
//!
//! The spans of one request: a server span (the request as the client saw it, parent: the
//! client's span), one client span per upstream attempt (so retries and failovers show), and a
//! client span for a remote prefill ([`crate::route::handoff`]). Their ids are chosen when the
//! request starts and as each attempt is sent, so the upstream's `traceparent` names the attempt
//! that carried it; the spans themselves are built once, when the request ends
//! ([`crate::context::finish`]), from the context.
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use crate::metrics::exemplar::TraceId;

/// A span id (8 bytes, never all zero).
pub type SpanId = [u8; 8];

/// The W3C `traceparent` header name.
pub const TRACEPARENT: &str = "traceparent";

/// The `sampled` bit of the trace flags.
const SAMPLED: u8 = 0x01;

/// A fresh span id: random, never all zero.
pub fn next_span_id() -> SpanId {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// A fresh trace id: random, never all zero.
pub fn next_trace_id() -> TraceId {
    loop {
        let id: u128 = rand::random();
        if id != 0 {
            return TraceId(id.to_be_bytes());
        }
    }
}

/// A parsed `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace: TraceId,
    /// The caller's span: the parent of the proxy's server span.
    pub parent: SpanId,
    pub flags: u8,
}

impl TraceParent {
    /// The `traceparent` of a header value, `None` if it is not a valid one: version `ff`, an
    /// all-zero trace or parent id, a wrong length, uppercase hex, or (for version 00) anything
    /// after the flags. A later version may append `-...` fields, which are ignored.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let bytes = header.trim().as_bytes();
        if bytes.len() < 55 {
            return None;
        }
        let dashes = [2, 35, 52].iter().all(|&i| bytes[i] == b'-');
        let [version] = hex::<1>(&bytes[0..2])?;
        if !dashes || version == 0xff {
            return None;
        }
        // Version 00 is exactly 55 characters; a later version may append `-...`.
        if (version == 0 && bytes.len() != 55) || (bytes.len() > 55 && bytes[55] != b'-') {
            return None;
        }
        let trace = hex::<16>(&bytes[3..35])?;
        let parent = hex::<8>(&bytes[36..52])?;
        let [flags] = hex::<1>(&bytes[53..55])?;
        if trace == [0; 16] || parent == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace: TraceId(trace),
            parent,
            flags,
        })
    }

    /// The caller sampled its span.
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The header value naming `span` of `trace` (version 00).
    pub fn header(trace: &TraceId, span: &SpanId, sampled: bool) -> HeaderValue {
        let mut text = [0u8; 55];
        text[..3].copy_from_slice(b"00-");
        write_hex(&mut text[3..35], &trace.0);
        text[35] = b'-';
        write_hex(&mut text[36..52], span);
        text[52] = b'-';
        write_hex(&mut text[53..55], &[u8::from(sampled)]);
        // Hex digits and dashes only: always a valid header value.
        HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// `N` bytes from `2N` lowercase hex digits.
fn hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// A lowercase hex digit's value (the header allows no uppercase).
fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
}

/// What the proxy records of a request's trace, when tracing is on (see the module docs).
#[derive(Debug, Clone)]
pub struct TraceState {
    pub trace: TraceId,
    /// The proxy's server span.
    pub span: SpanId,
    /// The client's span (from a valid `traceparent`): the server span's remote parent.
    pub parent: Option<SpanId>,
    /// The spans are recorded and exported; upstream `traceparent`s carry the sampled flag.
    pub sampled: bool,
    /// The request came with a `traceparent` header that is not a valid one: it passes upstream
    /// unchanged (the proxy's spans start a fresh trace).
    pub foreign_header: bool,
    /// Every upstream attempt, in order.
    pub attempts: Vec<AttemptSpan>,
    /// The client span of a remote prefill's request.
    pub prefill: Option<SpanId>,
    /// The request's method and path (`http.request.method`, `url.path`), kept when sampled.
    pub request_line: Option<(http::Method, String)>,
}

/// One upstream attempt's client span.
#[derive(Debug, Clone)]
pub struct AttemptSpan {
    pub span: SpanId,
    pub started: Instant,
    /// `None` while the attempt is the one streaming (it ends with the request).
    pub failed: Option<AttemptFailure>,
    /// The backend's label, `server.address` and `server.port`.
    pub backend: Option<crate::upstream::Target>,
}

/// How an attempt failed: when, and the error's type (`error.type`) and text.
#[derive(Debug, Clone)]
pub struct AttemptFailure {
    pub at: Instant,
    pub kind: &'static str,
    pub message: String,
}

impl TraceState {
    /// The state of a request whose `traceparent` header is `header`, with `sampled` deciding a
    /// root's sampling (a valid header's sampled flag decides otherwise; see
    /// [`TraceState::decide`]).
    pub fn new(
        header: Option<&[u8]>,
        ids: impl FnOnce() -> (TraceId, SpanId),
        decide: impl FnOnce(Option<&TraceParent>, &TraceId) -> bool,
    ) -> Self {
        let parsed = header
            .and_then(|value| std::str::from_utf8(value).ok())
            .and_then(TraceParent::parse);
        let (fresh_trace, span) = ids();
        let trace = parsed.map_or(fresh_trace, |parent| parent.trace);
        Self {
            trace,
            span,
            parent: parsed.map(|parent| parent.parent),
            sampled: decide(parsed.as_ref(), &trace),
            foreign_header: header.is_some() && parsed.is_none(),
            attempts: Vec::new(),
            prefill: None,
            request_line: None,
        }
    }

    /// Starts an attempt's span with `span` as its id, and sets the upstream request's
    /// `traceparent` to it, unless the client's header was not a valid one (it passes unchanged)
    /// or the request is not sampled and came with a header of its own (passed as it came: a
    /// span that is not recorded adds nothing to the trace).
    pub fn start_attempt(
        &mut self,
        span: SpanId,
        started: Instant,
        backend: Option<crate::upstream::Target>,
        headers: &mut HeaderMap,
    ) {
        self.attempts.push(AttemptSpan {
            span,
            started,
            failed: None,
            backend,
        });
        if let Some(value) = self.upstream_header(&span) {
            headers.insert(TRACEPARENT, value);
        }
    }

    /// Starts the span of a remote prefill's request; the `traceparent` that request carries
    /// (under the rules of [`TraceState::start_attempt`]; `None`: the client's passes as it came).
    pub fn start_prefill(&mut self) -> Option<HeaderValue> {
        let span = next_span_id();
        self.prefill = Some(span);
        self.upstream_header(&span)
    }

    /// The `traceparent` naming `span` upstream, unless the client's header must pass as it came.
    fn upstream_header(&self, span: &SpanId) -> Option<HeaderValue> {
        if self.foreign_header || (!self.sampled && self.parent.is_some()) {
            return None;
        }
        Some(TraceParent::header(&self.trace, span, self.sampled))
    }

    /// The current attempt failed at `at`.
    pub fn fail_attempt(&mut self, at: Instant, kind: &'static str, message: String) {
        if let Some(attempt) = self.attempts.last_mut() {
            attempt.failed = Some(AttemptFailure { at, kind, message });
        }
    }
}

/// The instants at which a request passed each phase before its first token: the marks the TTFT
/// split is cut at ([`crate::trace`] turns them into phases). Every mark is on the proxy's
/// monotonic clock, `None` where the request did not pass (a passthrough has no body read, a
/// refused request was never dispatched).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// The meter had the request (admission passed).
    pub admitted: Option<Instant>,
    /// The meter had the whole request body and had read it.
    pub body_read: Option<Instant>,
    /// The dispatch sent its first attempt on (the plan and the backend pick were done).
    pub dispatched: Option<Instant>,
    /// The forwarder started the first attempt (after a remote prefill, for a handoff).
    pub first_attempt: Option<Instant>,
    /// The forwarder started the attempt that answered.
    pub attempt: Option<Instant>,
    /// That attempt had its connection (pooled, or connected: TCP and TLS).
    pub connected: Option<Instant>,
    /// The connection was a new one (the time to `connected` was a connect).
    pub new_connection: bool,
    /// The request (head and body) was written on it.
    pub written: Option<Instant>,
    /// Its response head was in.
    pub head: Option<Instant>,
    /// The frame that carried the first token was handed to the client's connection (after the
    /// meter read it): the proxy's hold of the first token is `first_token_sent - first_token`.
    pub first_token_sent: Option<Instant>,
}

impl Marks {
    /// The time from `from` to `to`, zero when either is missing or they are out of order.
    pub fn between(from: Option<Instant>, to: Option<Instant>) -> Duration {
        match (from, to) {
            (Some(from), Some(to)) => to.saturating_duration_since(from),
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests;
