//! The one place a request ends, and what hangs off it.
//!
//! A request is finished exactly once, by [`super::RequestContext::finish_at`] (or, when it was
//! abandoned, by the context's drop, as `cancelled`), and that runs the [`FinishHooks`] of the
//! stack revision that served it (the context carries them as its [`Ending`], a trait of its own,
//! so that the context names no hook while every hook reads the whole context), in order, each with a [`Finished`]: the whole context, how it
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

use super::outcome::Outcome;
use super::{Ending, RequestContext};
use crate::meter::record::Figures;

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
        let input = match (figures.input_tokens, context.route.estimate) {
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

/// The hooks of one stack revision, in the order they run. Cloned into every request's context
/// (one reference count), where they are its [`Ending`].
#[derive(Clone, Default)]
pub struct FinishHooks(Arc<HookList>);

/// The hooks themselves.
#[derive(Default)]
struct HookList(Box<[Arc<dyn FinishHook>]>);

impl fmt::Debug for FinishHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Debug for HookList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl FinishHooks {
    pub fn new(hooks: impl IntoIterator<Item = Arc<dyn FinishHook>>) -> Self {
        Self(Arc::new(HookList(hooks.into_iter().collect())))
    }

    /// How many hooks run at each finish.
    pub fn len(&self) -> usize {
        self.0 .0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0 .0.is_empty()
    }
}

/// What a request's context carries: the same list, no copy.
impl From<FinishHooks> for Arc<dyn Ending> {
    fn from(hooks: FinishHooks) -> Self {
        hooks.0
    }
}

impl Ending for HookList {
    fn run(
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
