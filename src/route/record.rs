//! What the route phases wrote of a request ([`RouteRecord`], `context.route`): the plan layer its
//! estimate and plan, the dispatch the pool, backend and reason of each attempt, and the
//! placement its prediction. The dispatch reads what the plan wrote, the forwarder takes the load
//! guard, and the finish point reads the rest (the route's series, the calibration, the
//! placement's models, the trace's attributes).
//!
//! A record, not a layer: it names only the shared vocabulary (and other records), so the context
//! can hold it and every layer can read it (`tests/e2e/module_graph.rs`).
use std::sync::Arc;

use crate::route::placement::record::Prediction;
use crate::upstream::{InFlight, Target};

/// The route's part of a request's context. Written by [`crate::route::plan`] (`estimate`,
/// `plan`, and `pool` before dispatch) and [`crate::route::dispatch`] (the rest).
#[derive(Debug, Clone, Default)]
pub struct RouteRecord {
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
    pub decision: Option<RouteDecision>,
    /// What a latency-predicting placement predicted for the current (or last) attempt's backend.
    pub prediction: Option<Prediction>,
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
