//! The request context: one value per request that the phases fill in as the request moves down
//! the stack, that comes back up with the answer (or the failure), and that ends the request.
//!
//! In the pingora style: each phase writes what it learned and reads what the phases before it
//! wrote, so per-request state has one home and one type. Who writes what, outside in:
//!
//! | phase | writes |
//! |---|---|
//! | server (the head is in: `server/head.rs`, with [`RequestContext::for_head`]) | `received`, `client`, `client_tls`, `dialect`, `trace`, `tracing` (the span ids and the sampling decision), `tenant`, `tenant_name` and `tenant_tracked`, `refused` (a [`Refusal`] of the smuggling guard or the tenant gate), the finish hooks |
//! | meter, head ([`crate::meter::layer`]) | `marks.admitted`, `marks.body_read`, `generation` (the buffered body and the one walk over it), `model`, `model_label`, `slo` (the request's targets), `usage_injected`, `active`; `upstream_status` and `status` from the response head (where it lets the body go), or `status` of its own error answer |
//! | route, plan ([`crate::route::plan`]) | `estimate`, `plan`, `pool` (the first planned pool) |
//! | tenant, budget ([`crate::tenant::budget`]) | `budget`: the reservation the request holds on its tenant's budget |
//! | route, dispatch ([`crate::route::dispatch`]) | `pool` (the pool of the attempt), `backend`, `in_flight`, `attempts`, `cached_prompt_bytes`, `route`, `prediction` (`balance = "slo"`), `marks.dispatched` |
//! | route, handoff ([`crate::route::handoff`]) | `handoff`: where the prefill ran and when each phase ended |
//! | forward ([`crate::proxy::Forward`]) | takes `in_flight` into the response body; `marks` of the attempt (started, connected, written, head); each attempt's span in `tracing`; returns the context in the response's extensions, or in a [`crate::proxy::Failure`] |
//! | meter, body ([`crate::meter::body`]) | `stream`: what the body showed (first byte, tokens, usage); `marks.first_token_sent` |
//!
//! The context travels *by value* (boxed, so that each hand-over moves a pointer, not the context):
//! down in the request's extensions, back up in the response's (or the failure), so the meter
//! learns the pool and backend that answered without a shared cell.
//! Every layer takes it with [`RequestContext::take`] and gives it on with
//! [`RequestContext::put`]: a context that is not there is a bug, counted and logged, never a
//! fresh clock (a new `t0` would silently make every latency of the request wrong).
//!
//! **The one place a request ends** is [`RequestContext::finish`] ([`finish`]): the context is
//! the request, and whatever happens to it — a metered stream, a refusal at admission, a
//! passthrough, an upstream failure, the client leaving at any phase — it ends exactly once, and
//! every finish hook of the stack that served it hears of it with the whole context. A context
//! dropped without being finished was abandoned (hyper drops a request's future and its body when
//! the client goes away), so its drop finishes it as `cancelled`, with everything the phases had
//! written by then.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Extensions, HeaderMap, Method, StatusCode, Uri};
use tokio::time::Instant;

use crate::dialect::Dialect;
use crate::metrics::exemplar::TraceId;
use crate::request::Inspection;
use crate::upstream::{InFlight, Target};

pub mod budget;
pub mod finish;
pub mod handoff;
pub mod outcome;
pub mod phases;
pub mod prediction;
pub mod record;
pub mod refusal;
pub mod trace;

pub use budget::BudgetHold;
pub use finish::{FinishHook, FinishHooks, Finished};
pub use handoff::{HandoffRecord, HandoffResult};
pub use outcome::Outcome;
pub use prediction::Prediction;
use record::StreamRecord;
pub use refusal::{Refusal, RefusedBy};
use trace::{Marks, TraceParent, TraceState};

/// Everything the proxy knows about one request. See the module docs for who writes what.
///
/// A clone is a copy of what the phases wrote, without the duty to finish: only the context the
/// server made ends the request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// When the proxy had the request head: `t0` of every latency.
    pub received: Instant,
    /// The client connection's peer.
    pub client: Option<SocketAddr>,
    /// The client connection is TLS (`x-forwarded-proto: https` upstream).
    pub client_tls: bool,
    /// The generation API the method and path name; `None` for any other request (proxied,
    /// counted, not metered).
    pub dialect: Option<Dialect>,
    /// The request's W3C trace, whose latencies become exemplars: the client's (from a valid
    /// `traceparent`), or the proxy's own when it sampled a request that came without one.
    pub trace: Option<TraceId>,
    /// The request's tenant: its bounded label (`anonymous` when no source named one), when
    /// tenants are on ([`crate::tenant`]).
    pub tenant: Option<Arc<str>>,
    /// The tenant's name (cut at 256 bytes), for the usage records and the span; `None` when
    /// anonymous.
    pub tenant_name: Option<Arc<str>>,
    /// The tenant is tracked (`tenants.tracked`): its latencies get histograms of their own.
    pub tenant_tracked: bool,
    /// Why the request is refused at its head (its framing is in doubt, no tenant named it):
    /// the meter answers it before reading its body ([`Refusal`]). Boxed: rare, and the
    /// context stays small.
    pub refused: Option<Box<Refusal>>,
    /// The proxy's spans of the request, when tracing is on ([`trace`]).
    pub tracing: Option<Box<TraceState>>,
    /// When the request passed each phase before its first token ([`Marks`]).
    pub marks: Marks,
    /// A generation request's buffered body and what one walk read from it.
    pub generation: Option<Generation>,
    /// The request's model name (from the body, or the path for Triton), for labels and rules.
    pub model: Option<String>,
    /// The bounded `gen_ai_request_model` label of `model` (see
    /// [`crate::metrics::Metrics::model_label`]), once the meter has read the body.
    pub model_label: Option<Arc<str>>,
    /// The SLO targets the request is judged against and placed by (its class's, its model's or
    /// the defaults: [`crate::config::SloConfig::targets`]), once the meter has read the body;
    /// `None` before, and for requests the meter does not read.
    pub slo: Option<crate::config::SloTargets>,
    /// The meter asked the backend for usage on the client's behalf (`include_usage` injected).
    pub usage_injected: bool,
    /// The request is counted in `tokenmeter_streams_active` (the meter counts a generation
    /// request once its body is read); the finish takes it off.
    pub active: bool,
    /// The router's estimate of the prompt.
    pub estimate: Option<Estimate>,
    /// The pools the rules allow, best first.
    pub plan: RoutePlan,
    /// The pool of the current (or last) attempt; before dispatch, the first planned pool.
    pub pool: Option<Arc<str>>,
    /// The backend of the current (or last) attempt.
    pub backend: Option<Target>,
    /// Attempts sent to a backend (more than one: retried elsewhere).
    pub attempts: u32,
    /// The load guard of the current attempt, until the forwarder moves it into the body.
    pub in_flight: Option<InFlight>,
    /// Bytes of the prompt's text that the attempt's backend is known to hold in its prompt
    /// cache (its pool's prefix index, before this request), when the pool has prefix affinity and
    /// hands prefills off (the handoff's policy is its one reader).
    pub cached_prompt_bytes: Option<u64>,
    /// Why the dispatch chose the pool and backend of the current (or last) attempt.
    pub route: Option<RouteDecision>,
    /// What a latency-predicting placement predicted for the current (or last) attempt's backend.
    pub prediction: Option<Prediction>,
    /// What the handoff phase did, for a request of a pool with a prefill pool.
    pub handoff: Option<HandoffRecord>,
    /// The request's hold on its tenant's budget, once admitted against it.
    pub budget: Option<Box<BudgetHold>>,
    /// The status of the backend's response head; `None` while (or if) none came back.
    pub upstream_status: Option<StatusCode>,
    /// The status the client was answered with: the backend's, or the proxy's own error's.
    pub status: Option<StatusCode>,
    /// What the response body showed, stamped as it passed.
    pub stream: StreamRecord,
    /// Runs the finish hooks once (see [`finish`]).
    duty: Duty,
}

/// What ends a request: the finish hooks of the stack revision it took ([`FinishHooks`] is the
/// one kind), run once. A trait of the context's own: the context carries its hooks and every hook
/// reads the whole context, and with the trait here the two files depend on each other one way.
pub trait Ending: Send + Sync + std::fmt::Debug {
    fn run(
        &self,
        context: &RequestContext,
        outcome: Outcome,
        at: Instant,
        error: Option<&(dyn std::error::Error + 'static)>,
    );
}

/// The duty to run the hooks: armed in the context the server made, taken by the one finish.
/// A clone of a context never carries it (a copy of what the phases wrote is not the request).
#[derive(Debug)]
struct Duty(Option<Arc<dyn Ending>>);

impl Clone for Duty {
    fn clone(&self) -> Self {
        Self(None)
    }
}

/// Requests whose context a layer did not find: each is a bug (see [`RequestContext::take`]).
static MISSING: AtomicU64 = AtomicU64::new(0);

impl RequestContext {
    /// A context for a request whose head arrived at `received`, with no finish hooks (a context
    /// of its own, for a router or a test; the server's come from [`RequestContext::for_head`]).
    pub fn new(received: Instant, client: Option<SocketAddr>) -> Self {
        Self {
            received,
            client,
            client_tls: false,
            dialect: None,
            trace: None,
            tenant: None,
            tenant_name: None,
            tenant_tracked: false,
            refused: None,
            tracing: None,
            marks: Marks::default(),
            generation: None,
            model: None,
            model_label: None,
            slo: None,
            usage_injected: false,
            active: false,
            estimate: None,
            plan: RoutePlan::default(),
            pool: None,
            backend: None,
            attempts: 0,
            in_flight: None,
            cached_prompt_bytes: None,
            route: None,
            prediction: None,
            handoff: None,
            budget: None,
            upstream_status: None,
            status: None,
            stream: StreamRecord::new(received),
            duty: Duty(None),
        }
    }

    /// The same context, ended by `hooks` (a revision's [`FinishHooks`]).
    pub fn with_hooks(mut self, hooks: impl Into<Arc<dyn Ending>>) -> Self {
        self.duty = Duty(Some(hooks.into()));
        self
    }

    /// The context of a request whose head (`method`, `uri`, `headers`) arrived at `received`:
    /// the API it names, its trace, and the hooks its finish runs. Boxed, as it travels.
    pub fn for_head(
        received: Instant,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        hooks: impl Into<Arc<dyn Ending>>,
    ) -> Box<Self> {
        let mut context = Box::new(Self::new(received, None).with_hooks(hooks));
        context.dialect = Dialect::for_request(method, uri.path());
        context.trace = headers
            .get(trace::TRACEPARENT)
            .and_then(|value| value.to_str().ok())
            .and_then(TraceParent::parse)
            .map(|parent| parent.trace);
        context
    }

    /// Takes the context out of a request's (or a response's) extensions. Every request the
    /// server hands to the stack carries one, so `None` is a bug: it is counted
    /// ([`RequestContext::missing`]), logged, and fails a debug build; the caller answers with
    /// an internal error rather than start a clock of its own.
    pub fn take(extensions: &mut Extensions, layer: &'static str) -> Option<Box<RequestContext>> {
        let context = extensions.remove::<Box<RequestContext>>();
        if context.is_none() {
            MISSING.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                layer,
                "a request reached this layer without its context (a bug): answered with an internal error"
            );
            debug_assert!(false, "{layer}: the request context is missing");
        }
        context
    }

    /// Puts the context into a request's (or a response's) extensions for the next phase.
    pub fn put(self: Box<Self>, extensions: &mut Extensions) {
        extensions.insert(self);
    }

    /// How many times a layer did not find a request's context since the process started
    /// (`tokenmeter_internal_errors_total{kind="context_missing"}`).
    pub fn missing() -> u64 {
        MISSING.load(Ordering::Relaxed)
    }

    /// Lets go of the request body once a response head is back. Until then a retry may replay
    /// it; after, nothing needs it, while a stream can last minutes and a prompt can be large
    /// (and a body read in one frame is a slice of the connection's read buffer, which it would
    /// keep alive). What the walk read of it stays.
    pub fn release_body(&mut self) {
        if let Some(generation) = self.generation.as_mut() {
            generation.body = Bytes::new();
        }
    }

    /// A generation body that did not read as a JSON object: whatever the backend answers, the
    /// request was at fault (its health does not pay for it).
    pub fn malformed(&self) -> bool {
        self.generation
            .as_ref()
            .is_some_and(|generation| generation.read.is_none())
    }

    /// Whether an answer with `status` says the backend failed (see [`answer_failed`]).
    pub fn answer_failed(&self, status: StatusCode) -> bool {
        answer_failed(status, self.malformed())
    }

    /// Ends the request now: see [`RequestContext::finish_at`].
    pub fn finish(self, outcome: Outcome, error: Option<&(dyn std::error::Error + 'static)>) {
        self.finish_at(outcome, Instant::now(), error);
    }

    /// Ends the request at `at` with `outcome` (and the error the client was answered with, or
    /// that cut its stream): every finish hook runs, once, with the whole context.
    pub fn finish_at(
        mut self,
        outcome: Outcome,
        at: Instant,
        error: Option<&(dyn std::error::Error + 'static)>,
    ) {
        if let Some(hooks) = self.duty.0.take() {
            hooks.run(&self, outcome, at, error);
        }
    }
}

impl Drop for RequestContext {
    /// A context dropped unfinished was abandoned: the client went away (hyper dropped the
    /// request's future, or its response body), or the server cut it at shutdown.
    fn drop(&mut self) {
        if let Some(hooks) = self.duty.0.take() {
            hooks.run(self, Outcome::Cancelled, Instant::now(), None);
        }
    }
}

/// A generation request's body as forwarded (after any usage injection; empty once a response
/// head is back: [`RequestContext::release_body`]), and what one walk of the client's body read
/// ([`crate::request::read`]); `read` is `None` when the body is not a JSON object.
#[derive(Debug, Clone)]
pub struct Generation {
    pub body: Bytes,
    pub read: Option<Inspection>,
}

/// The router's prompt estimate: what it measured and the tokens it estimated, for the
/// calibration (and as N_in when the stream reports no `usage.prompt_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub size: crate::request::PromptSize,
    pub tokens: u64,
}

/// Why a request went where it went: the `reason` of `tokenmeter_route_decisions_total` and the
/// pool's affinity `result`, for its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteDecision {
    /// `rule`, `spill`, `fallback` or `panic`.
    pub reason: &'static str,
    /// `hit`, `miss` or `overloaded` in a pool with affinity.
    pub affinity: Option<&'static str>,
}

/// The pools a request may go to (indices into the router's pools), best first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutePlan {
    pub pools: Vec<usize>,
    /// Spill from `pools[0]` to `pools[1]` when the shortest queue of `pools[0]` is deeper.
    pub spill_queue_tokens: Option<u64>,
}

#[cfg(test)]
mod tests;

/// Whether an answer with `status` says the backend failed rather than the request: a 5xx other
/// than 501 Not Implemented (the backend does not do what was asked: an unsupported path or
/// feature), to a body the proxy could read (`malformed`: see
/// [`RequestContext::malformed`]). The meter counts every other error answer as `client_error`,
/// and passive health does not hold it against the backend: one rule for both, so a client's bad
/// requests neither page anyone nor eject a healthy backend.
pub fn answer_failed(status: StatusCode, malformed: bool) -> bool {
    status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED && !malformed
}
