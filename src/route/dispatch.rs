//! The dispatch: the phase between the plan ([`super::plan`]) and forwarding.
//!
//! In a pool with a gateway queue ([`super::placement::gate`]), a request first waits there until a
//! backend is predicted to meet its targets, or is shed. Then per attempt: pick a backend of the planned pools by power of two choices ([`Router::pick`]),
//! write it and a [`LoadGuard`] into the request's context for [`crate::proxy::Forward`], and
//! forward. A failure before any response byte (connect refused or timed out, a connection that
//! broke before the head) is retried on another backend, of the same pool first, up to
//! `routing.retries` times; nothing was streamed, so a retry cannot duplicate output. Once a
//! response head is back, the request is never retried. Every outcome feeds the backend's passive
//! health ([`super::health`] says what counts): connection failures count outright, answer
//! failures (5xx, a response-head timeout) make a run that the backend's health endpoint must
//! confirm, and a 5xx to a body that is not valid JSON does not count.
use std::future::Future;
use std::sync::Arc;

use http::Request;
use tokio::time::Instant;

use super::backend::{Backend, LoadGuard};
use super::health::Fault;
use super::placement::gate::Admission;
use super::placement::share;
use super::placement::{Demand, Shed};
use super::replay::Replay;
use super::Router;
use crate::context::{answer_failed, Refusal, RequestContext};
use crate::proxy::phase::{Answer, Next, Phase};
use crate::proxy::{Failure, ProxyError, RequestBody};
use crate::route::record::RouteDecision;

/// The dispatch phase: sends each request to a backend of its planned pools.
#[derive(Debug, Clone)]
pub struct Dispatch {
    router: Arc<Router>,
}

impl Dispatch {
    pub fn new(router: Arc<Router>) -> Self {
        Self { router }
    }
}

impl Phase for Dispatch {
    fn run<N: Next>(
        &self,
        context: Box<RequestContext>,
        req: Request<RequestBody>,
        next: &N,
    ) -> impl Future<Output = Answer> + Send {
        self.router.dispatch(context, req, next)
    }
}

impl Router {
    async fn dispatch<N: Next>(
        &self,
        mut context: Box<RequestContext>,
        req: Request<RequestBody>,
        next: &N,
    ) -> Answer {
        let replay = if self.settings.retries > 0 {
            Replay::of(&req, &context)
        } else {
            None
        };
        let estimated = context.route.estimate.map_or(0, |estimate| estimate.tokens);
        let keys = self.affinity_keys(&context, req.headers());
        let malformed = context.malformed();
        let mut pending = Some(req);
        let mut tried: Vec<Arc<Backend>> = Vec::new();
        let mut last_pool = None;
        let mut last_error = None;
        let mut admitted = None;
        // The tenant's share slot a gate gave the request, kept by every attempt's guard.
        let mut share = None;
        // Only generation requests wait: a model list or a health probe costs a backend nothing.
        let gate = self
            .gate(&context.route.plan)
            .filter(|_| context.request.generation.is_some());
        if let (Some(gate), Some(head)) = (gate, pending.as_ref()) {
            // Boxed (a gated pool only): the wait's state stays out of every request's future.
            match Box::pin(gate.enter(&context, keys.clone(), head.headers())).await {
                Admission::Placed {
                    placed,
                    guard,
                    slot,
                } => {
                    admitted = self
                        .admitted(&keys, placed, gate.pool())
                        .map(|pick| (pick, guard, slot));
                }
                Admission::Late => {}
                Admission::Shed(why) => {
                    let pool = Arc::clone(gate.pool_name());
                    let shed = Refusal::from(Shed { pool, why });
                    return Err(Failure::new(shed.into(), context));
                }
            }
        }
        for _attempt in 0..=self.settings.retries {
            let now = Instant::now();
            let (pick, guard, slot) = match admitted.take() {
                Some(admitted) => admitted,
                None => {
                    let demand = Demand::of(&context, now);
                    match self.pick(&context.route.plan, &keys, demand, &tried, now) {
                        Some(pick) => (pick, None, None),
                        None => break,
                    }
                }
            };
            context.marks.dispatched.get_or_insert(now);
            let (index, backend, reason) = (pick.pool, pick.backend, pick.reason);
            let Some(request) = pending
                .take()
                .or_else(|| replay.as_ref().map(Replay::build))
            else {
                break;
            };
            if let Some(failed) = tried.last() {
                failed.retried();
            }
            if last_pool != Some(index) {
                self.decided(index, reason);
                last_pool = Some(index);
            }
            // The context goes down with the attempt and comes back with its answer or failure.
            context.route.pool = Some(Arc::clone(&self.pools[index].name));
            context.route.backend = Some(backend.target.clone());
            // A gate counted the load on its backend already, when it released the request. A
            // latency-predicting placement knew what the backend's cache holds: only the rest
            // queues as prefill work.
            let queued = pick.prediction.map_or(estimated, |p| {
                p.prompt_tokens.saturating_sub(p.cached_tokens)
            });
            let load = guard.unwrap_or_else(|| LoadGuard::new(Arc::clone(&backend), queued));
            // A gate's share slot ends with the stream, as the load does, and outlives an
            // attempt that failed before any byte.
            if let Some(slot) = slot {
                share = Some(Arc::new(slot));
            }
            context.route.in_flight = Some(share::in_flight(load, share.as_ref()));
            context.route.cached_prompt_bytes = pick.cached_bytes;
            context.route.decision = Some(RouteDecision {
                reason: pick.reason,
                affinity: pick.affinity,
            });
            context.route.prediction = pick.prediction;
            context.route.attempts += 1;
            let result = next.call(context, request).await;
            let failure = match result {
                Ok(response) => {
                    // The meter's rule (`answer_failed`): a 501 or a 5xx to a malformed body is
                    // the request's fault; only the rest count against the backend.
                    if answer_failed(response.status(), malformed) {
                        self.report(index, &backend, Fault::Answer);
                    } else if !response.status().is_server_error() {
                        backend.on_success();
                    }
                    return Ok(response);
                }
                Err(failure) => failure,
            };
            let before_head = matches!(
                failure.error,
                ProxyError::Connect { .. } | ProxyError::Upstream { .. }
            );
            if before_head {
                self.report(index, &backend, Fault::Connection);
            } else if matches!(failure.error, ProxyError::ResponseTimeout { .. }) {
                self.report(index, &backend, Fault::Answer);
            }
            if !before_head || replay.is_none() {
                return Err(failure);
            }
            tracing::debug!(error = %failure.error, "failed before any response byte: retrying elsewhere");
            let Some(failed) = failure.context else {
                return Err(failure);
            };
            tried.push(backend);
            context = failed;
            last_error = Some(failure.error);
        }
        Err(Failure::new(
            last_error.unwrap_or(ProxyError::NoUpstream),
            context,
        ))
    }
}
