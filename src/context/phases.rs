//! Where a request's TTFT went: its time from the request head to the first token, cut at the
//! [`Marks`] the phases stamped, on the proxy's own monotonic clock.
//!
//! | phase | from | to | whose time |
//! |---|---|---|---|
//! | `admission` | request head (`t0`) | the meter has the request | the proxy's (admission never queues: it refuses at once) |
//! | `request_body` | the meter has it | the body is read and walked | the client's upload, and the proxy's one walk |
//! | `routing` | body read | the dispatch sends the first attempt | the proxy's (plan, estimate, backend pick) |
//! | `handoff` | first attempt dispatched | the decode request starts | a remote prefill and its KV transfer ([`crate::route::handoff`]) |
//! | `retries` | the first attempt starts | the attempt that answered starts | failed attempts |
//! | `connect` | that attempt starts | its connection is ready | TCP and TLS for a new connection; the proxy's pool checkout otherwise |
//! | `upstream_head` | connection ready | response head in | writing the request, and the backend until its head (a vLLM stream's head comes at once) |
//! | `first_token` | response head | first token seen | the backend's queue and prefill, and the network |
//!
//! Consecutive marks, so for a request that streamed a token the phases add up to its TTFT
//! exactly: a mark a request did not pass (a passthrough reads no body, a request without a prefill
//! pool has no handoff) is the one before it, and so is a mark earlier than the one before it.
//!
//! The time the proxy itself adds (`tokenmeter_gateway_overhead_seconds`): before the backend has
//! the request, `routing` (and the gap a handoff layer leaves when it hands nothing off), the
//! pool checkout of a reused connection, and writing the request; and the time it holds the frame
//! of the first token, from the frame coming off the upstream connection to its hand-over to the
//! client's (`first_token_sent - first_token`).
use std::fmt::Write as _;
use std::time::Duration;

use http::HeaderValue;

use super::trace::Marks;
use super::RequestContext;

/// The phases of the TTFT split, in order, by their label.
pub const PHASES: [&str; 8] = [
    "admission",
    "request_body",
    "routing",
    "handoff",
    "retries",
    "connect",
    "upstream_head",
    "first_token",
];

/// One request's split (see the module docs): each phase's time, in [`PHASES`] order, up to the
/// last mark the request reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    pub times: [Duration; 8],
    /// How many phases the request completed: 8 once it had a first token, 7 with only a response
    /// head, fewer for a request that ended before.
    pub reached: usize,
    /// The proxy's own time before the backend had the request.
    pub overhead_request: Duration,
    /// The proxy's hold of the first token's frame, once it was sent.
    pub overhead_first_token: Option<Duration>,
}

impl Phases {
    /// The split of `context` as far as it went.
    pub fn of(context: &RequestContext) -> Self {
        let marks = &context.marks;
        // A handoff phase only where a prefill ran remotely: a local decision's time in the
        // handoff layer is routing's.
        let handed_off = context
            .handoff
            .as_ref()
            .is_some_and(|record| record.prefill_started.is_some());
        let points = [
            marks.admitted,
            marks.body_read,
            marks.dispatched,
            // Without a handoff the gap to the first attempt is the dispatch's own call: routing.
            if handed_off {
                marks.first_attempt
            } else {
                marks.first_attempt.or(marks.dispatched)
            },
            marks.attempt,
            marks.connected,
            marks.head,
            context.stream.first_token,
        ];
        let mut times = [Duration::ZERO; 8];
        let mut reached = 0;
        let mut previous = context.received;
        for (i, point) in points.iter().enumerate() {
            if point.is_some() {
                reached = i + 1;
            }
            let at = point.map_or(previous, |at| at.max(previous));
            times[i] = at - previous;
            previous = at;
        }
        if !handed_off {
            times[2] += times[3];
            times[3] = Duration::ZERO;
        }
        let overhead_request = if marks.written.is_some() {
            let checkout = if marks.new_connection {
                Duration::ZERO
            } else {
                times[5]
            };
            let write = Marks::between(marks.connected, marks.written);
            let unhanded = if handed_off { Duration::ZERO } else { times[3] };
            times[2] + unhanded + checkout + write
        } else {
            Duration::ZERO
        };
        let overhead_first_token = match (context.stream.first_token, marks.first_token_sent) {
            (Some(first), Some(sent)) => Some(sent.saturating_duration_since(first)),
            _ => None,
        };
        Self {
            times,
            reached,
            overhead_request,
            overhead_first_token,
        }
    }

    /// Each phase reached, by label.
    pub fn reached(&self) -> impl Iterator<Item = (&'static str, Duration)> + '_ {
        PHASES
            .iter()
            .copied()
            .zip(self.times.iter().copied())
            .take(self.reached)
    }

    /// The sum of the phases reached: the TTFT of a request that had a first token.
    pub fn total(&self) -> Duration {
        self.times[..self.reached].iter().sum()
    }

    /// A `server-timing` header value (W3C Server Timing) of the phases up to the response head
    /// (the first token comes after the head, so it cannot be in it), in milliseconds, with the
    /// request's trace id when it has one: `tm-routing;dur=0.041, ..., tm-trace;desc="<id>"`.
    pub fn server_timing(&self, trace: Option<&crate::metrics::exemplar::TraceId>) -> HeaderValue {
        let mut text = String::with_capacity(256);
        for (name, time) in self.reached().take(7) {
            if !text.is_empty() {
                text.push_str(", ");
            }
            let _ = write!(text, "tm-{name};dur={:.3}", time.as_secs_f64() * 1e3);
        }
        if let Some(trace) = trace {
            if !text.is_empty() {
                text.push_str(", ");
            }
            let _ = write!(text, "tm-trace;desc=\"{}\"", trace.hex());
        }
        // Token characters, digits and hex only: always a valid header value.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

#[cfg(test)]
mod tests;
