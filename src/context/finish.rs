//! The one place a request ends, and what hangs off it.
//!
//! A request is finished exactly once, by [`super::RequestContext::finish_at`] (or, when it was
//! abandoned, by the context's drop, as `cancelled`), and that runs the [`FinishHooks`] of the
//! stack revision that served it, in order, each with a [`Finished`]: the whole context, how it
//! ended, and the stream's figures. Everything that wants the finished request hangs off this
//! point and nowhere else: the meter's per-request series, the router's prompt calibration, and
//! whatever a later phase adds (a trace span, a usage record, a budget's settlement, a latency
//! model), each a [`FinishHook`].
//!
//! Hooks run on the task that ended the request (the client's connection task), so each must be
//! short and must never block: anything slow goes through a queue of its own.
use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use super::record::Figures;
use super::RequestContext;

/// How a request ended (`outcome` label), named by where it went wrong (client / upstream / proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx and a cleanly ended stream with no error event (or a client that left after its
    /// terminal event: see [`crate::meter::body`]).
    Ok,
    /// The client went away before the end.
    Cancelled,
    /// The upstream refused the request rather than failed (4xx, 501 Not Implemented), any error
    /// answer to a generation body the proxy could not read as JSON, or the proxy rejected the
    /// request (413 ...).
    ClientError,
    /// Upstream unreachable, any other 5xx, an error event in a 200 stream, or the stream broke.
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

/// Something that wants every finished request.
pub trait FinishHook: Send + Sync + fmt::Debug {
    /// Called once per request as it ends (see the module docs: keep it short, never block).
    fn finished(&self, request: &Finished<'_>);
}

/// A finished request, as every hook sees it.
#[derive(Debug)]
pub struct Finished<'a> {
    /// Everything the phases wrote.
    pub context: &'a RequestContext,
    pub outcome: Outcome,
    /// When it ended: the end of the response stream, the refusal, or the moment it was abandoned.
    pub at: Instant,
    /// What the stream's record yields (E2E, TTFT, TPOT, token counts), computed once for every
    /// hook.
    pub figures: Figures,
    /// Why it did not end well, where the proxy knows: the error the client was answered with,
    /// or what cut the stream.
    pub error: Option<&'a (dyn std::error::Error + 'static)>,
}

impl Finished<'_> {
    /// The request's input and output tokens as every series counts them, so that the meter's
    /// totals, a tenant's and its usage records agree to the token: N_in is usage's prompt tokens,
    /// else the router's estimate of a request the backend answered (a rejected request processed
    /// no prompt); N_out is counted for a stream of a known dialect that showed its tokens (or a
    /// whole answer whose usage gave it). `None`: not counted.
    pub fn counted_tokens(&self) -> (Option<u64>, Option<u64>) {
        let context = self.context;
        let figures = &self.figures;
        let answered_ok = context.upstream_status.is_some_and(|s| s.is_success());
        let input = match (figures.input_tokens, context.estimate) {
            (Some(actual), _) => Some(actual),
            (None, Some(estimate)) if answered_ok => Some(estimate.tokens),
            (None, _) => None,
        };
        let known = context
            .dialect
            .is_some_and(|dialect| dialect != crate::dialect::Dialect::Unknown);
        let output = (known && (context.stream.framed || figures.exact_output))
            .then_some(figures.output_tokens);
        (input, output)
    }
}

/// The hooks of one stack revision, in the order they run.
#[derive(Clone, Default)]
pub struct FinishHooks(Arc<[Arc<dyn FinishHook>]>);

impl fmt::Debug for FinishHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl FinishHooks {
    pub fn new(hooks: impl IntoIterator<Item = Arc<dyn FinishHook>>) -> Self {
        Self(hooks.into_iter().collect())
    }

    /// How many hooks run at each finish.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn run(
        &self,
        context: &RequestContext,
        outcome: Outcome,
        at: Instant,
        error: Option<&(dyn std::error::Error + 'static)>,
    ) {
        if self.0.is_empty() {
            return;
        }
        let finished = Finished {
            context,
            outcome,
            at,
            figures: context.stream.figures(at),
            error,
        };
        for hook in self.0.iter() {
            hook.finished(&finished);
        }
    }
}

/// The duty to run the hooks: armed in the context the server made, taken by the one finish.
/// A clone of a context never carries it (a copy of what the phases wrote is not the request).
#[derive(Debug)]
pub(super) struct Duty(Option<FinishHooks>);

impl Duty {
    pub(super) fn armed(hooks: FinishHooks) -> Self {
        Self(Some(hooks))
    }

    /// The hooks, the first time only.
    pub(super) fn take(&mut self) -> Option<FinishHooks> {
        self.0.take()
    }
}

impl Clone for Duty {
    fn clone(&self) -> Self {
        Self(None)
    }
}
