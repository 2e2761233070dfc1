//! The request context: one value per request that the phases fill in as the request moves down
//! the stack, that comes back up with the answer (or the failure), and that ends the request.
//!
//! In the pingora style: each phase writes what it learned and reads what the phases before it
//! wrote, so per-request state has one home and one type. The head is the context's own; each
//! subsystem's part is a record defined in the subsystem's folder (`route/record.rs`,
//! `meter/record.rs`...), so adding a subsystem adds a record there and one field here. A record
//! names only the shared vocabulary, which is what lets the context hold it while every layer reads
//! it (`tests/e2e/module_graph.rs`). Who writes what, outside in:
//!
//! | phase | writes |
//! |---|---|
//! | server (the head is in: `server/head.rs`, with [`RequestContext::for_head`]) | `received`, `client`, `client_tls`, `dialect`, `trace`, `tracing` (the span ids and the sampling decision: [`crate::trace::record`]), `tenant` ([`TenantRecord`], when the gate named one), `refused` (a [`Refusal`] of the smuggling guard or the tenant gate), the finish hooks |
//! | meter, head ([`crate::meter::layer`]) | `marks.admitted`, `marks.body_read`, `request` ([`RequestRecord`]: the buffered body and the one walk over it, the model and its label, the request's SLO targets, `usage_injected`, `active`); `upstream_status` and `status` from the response head (where it lets the body go), or `status` of its own error answer |
//! | route, plan ([`crate::route::plan`]) | `route` ([`RouteRecord`]): `estimate`, `plan`, `pool` (the first planned pool) |
//! | tenant, budget ([`crate::tenant::budget`]) | `budget` ([`BudgetHold`]): the reservation the request holds on its tenant's budget |
//! | route, dispatch ([`crate::route::dispatch`]) | `route`: `pool` (the pool of the attempt), `backend`, `in_flight`, `attempts`, `cached_prompt_bytes`, `decision`, `prediction` (`balance = "slo"`); `marks.dispatched` |
//! | route, handoff ([`crate::route::handoff`]) | `handoff` ([`HandoffRecord`]): where the prefill ran and when each phase ended |
//! | forward ([`crate::proxy::Forward`]) | takes `route.in_flight` into the response body; `marks` of the attempt (started, connected, written, head); each attempt's span in `tracing`; returns the context in the response's extensions, or in a [`crate::proxy::Failure`] |
//! | meter, body ([`crate::meter::body`]) | `stream` ([`StreamRecord`]): what the body showed (first byte, tokens, usage); `marks.first_token_sent` |
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
use crate::meter::record::{RequestRecord, StreamRecord};
use crate::metrics::exemplar::TraceId;
use crate::route::handoff::record::HandoffRecord;
use crate::route::record::RouteRecord;
use crate::tenant::budget::record::BudgetHold;
use crate::tenant::record::TenantRecord;
use crate::trace::record::{self as trace, Marks, TraceParent, TraceState};

pub mod finish;
pub mod outcome;
pub mod phases;
pub mod refusal;

pub use finish::{FinishHook, FinishHooks, Finished};
pub use outcome::Outcome;
pub use refusal::{Refusal, RefusedBy};

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
    /// The request's tenant ([`TenantRecord`]: its bounded label, its name, whether it is
    /// tracked), when tenants are on ([`crate::tenant`]) and the gate named it.
    pub tenant: Option<TenantRecord>,
    /// Why the request is refused at its head (its framing is in doubt, no tenant named it):
    /// the meter answers it before reading its body ([`Refusal`]). Boxed: rare, and the
    /// context stays small.
    pub refused: Option<Box<Refusal>>,
    /// The proxy's spans of the request, when tracing is on ([`trace`]).
    pub tracing: Option<Box<TraceState>>,
    /// When the request passed each phase before its first token ([`Marks`]).
    pub marks: Marks,
    /// What the meter read of the request: its body and the walk over it, its model and
    /// targets, and its own flags ([`RequestRecord`]), once it read the body.
    pub request: RequestRecord,
    /// What the route phases wrote: the estimate and plan, and the pool, backend, load guard,
    /// reason and prediction of the current (or last) attempt ([`RouteRecord`]).
    pub route: RouteRecord,
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
            refused: None,
            tracing: None,
            marks: Marks::default(),
            request: RequestRecord::default(),
            route: RouteRecord::default(),
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
        if let Some(generation) = self.request.generation.as_mut() {
            generation.body = Bytes::new();
        }
    }

    /// A generation body that did not read as a JSON object: whatever the backend answers, the
    /// request was at fault (its health does not pay for it).
    pub fn malformed(&self) -> bool {
        self.request
            .generation
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
