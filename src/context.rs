//! The request context: one value per request that the phases fill in as the request moves down
//! the stack, and that comes back up with the answer (or the failure).
//!
//! In the pingora style: each phase writes what it learned and reads what the phases before it
//! wrote, so per-request state has one home and one type. Who writes what, outside in:
//!
//! | phase | writes |
//! |---|---|
//! | server (accept, per request) | `received`, `client`, `conflicting_framing` |
//! | meter (head and body) | `dialect`, `generation` (the buffered body and the one walk over it), `model` |
//! | router, plan ([`crate::route::Router::plan`]) | `estimate`, `plan`, `pool` (the first planned pool) |
//! | router, dispatch ([`crate::route::Route`]) | `pool` (the pool of the attempt), `backend`, `in_flight` |
//! | forward ([`crate::proxy::Forward`]) | takes `in_flight` into the response body; returns the context in the response's extensions, or in a [`crate::proxy::Failure`] |
//!
//! The context travels *by value*: down in the request's extensions, back up in the response's
//! (or the failure), so the meter learns the pool and backend that answered without a shared cell.
//! A retry on another backend starts from a clone (its fields are small or shared).
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;

use crate::dialect::Dialect;
use crate::request::Inspection;
use crate::upstream::{InFlight, Target};

/// Everything the proxy knows about one request. See the module docs for who writes what.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// When the proxy had the request head: `t0` of every latency.
    pub received: Instant,
    /// The client connection's peer.
    pub client: Option<SocketAddr>,
    /// The client connection is TLS (`x-forwarded-proto: https` upstream).
    pub client_tls: bool,
    /// The request head had both `transfer-encoding` and `content-length`: it is refused
    /// (see [`crate::server::smuggling`]).
    pub conflicting_framing: bool,
    /// The generation API the method and path name; `None` for any other request (proxied,
    /// counted, not metered).
    pub dialect: Option<Dialect>,
    /// A generation request's buffered body and what one walk read from it.
    pub generation: Option<Generation>,
    /// The request's model name (from the body, or the path for Triton), for labels and rules.
    pub model: Option<String>,
    /// The router's estimate of the prompt.
    pub estimate: Option<Estimate>,
    /// The pools the rules allow, best first.
    pub plan: RoutePlan,
    /// The pool of the current (or last) attempt; before dispatch, the first planned pool.
    pub pool: Option<Arc<str>>,
    /// The backend of the current (or last) attempt.
    pub backend: Option<Target>,
    /// The load guard of the current attempt, until the forwarder moves it into the body.
    pub in_flight: Option<InFlight>,
}

impl RequestContext {
    /// A context for a request whose head arrived at `received`.
    pub fn new(received: Instant, client: Option<SocketAddr>) -> Self {
        Self {
            received,
            client,
            client_tls: false,
            conflicting_framing: false,
            dialect: None,
            generation: None,
            model: None,
            estimate: None,
            plan: RoutePlan::default(),
            pool: None,
            backend: None,
            in_flight: None,
        }
    }

    /// A generation body that did not read as a JSON object: whatever the backend answers, the
    /// request was at fault (its health does not pay for it).
    pub fn malformed(&self) -> bool {
        self.generation
            .as_ref()
            .is_some_and(|generation| generation.read.is_none())
    }
}

/// A generation request's body as forwarded (after any usage injection), and what one walk of
/// the client's body read ([`crate::request::read`]); `read` is `None` when the body is not a
/// JSON object.
#[derive(Debug, Clone)]
pub struct Generation {
    pub body: Bytes,
    pub read: Option<Inspection>,
}

/// The router's prompt estimate: what it measured and the tokens it estimated, for the meter to
/// calibrate with (and to use as N_in when the stream reports no `usage.prompt_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub size: crate::request::PromptSize,
    pub tokens: u64,
}

/// The pools a request may go to (indices into the router's pools), best first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutePlan {
    pub pools: Vec<usize>,
    /// Spill from `pools[0]` to `pools[1]` when the shortest queue of `pools[0]` is deeper.
    pub spill_queue_tokens: Option<u64>,
}
