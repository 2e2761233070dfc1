//! The handoff: prefill/decode disaggregation, as a tower service between the dispatch and
//! forwarding (`admission -> meter -> plan -> dispatch -> handoff -> forward`).
//!
//! A prefill on the replica that is decoding other streams stalls every one of them for as long
//! as it runs; no placement removes that while a request's prefill and decode share a replica.
//! A pool with `[pools.handoff]` decodes, and the prefills of its requests may run on a prefill
//! pool, the KV cache moved between the two replicas (vLLM's KV connectors; see [`vllm`]).
//!
//! Per request, once the dispatch has chosen the decode backend:
//! 1. [`policy`] decides where the prefill runs, from the prompt's estimate, what the decode
//!    backend's prompt cache is known to hold (its pool's prefix index), and the prefill pool's
//!    queue; in a decode pool with `balance = "slo"`, from the latency models' predictions of
//!    both ways instead (`predicted.rs`);
//! 2. for a remote prefill, a prefill backend is picked like any request's (its pool's balancing
//!    and affinity, load counted while the prefill runs), and sent the protocol's prefill request
//!    ([`prefill`]) within `prefill_timeout`;
//! 3. the client's request, with what the prefill answered, goes to the decode backend; the
//!    client reads the decode replica's stream, byte for byte, and TTFT is what it felt.
//!
//! Every failure of the prefill phase falls back to what the request would have had without a
//! prefill pool: the decode backend prefills it (no prefill backend available, a failed or late
//! prefill, no KV offered; a decode replica that answers an error status to the KV it was given
//! is asked again without it, nothing having been streamed). The request carries the same
//! `x-request-id` to both replicas (the client's, or one the proxy adds), as vLLM's proxy does.
//! A client that leaves during the prefill drops this future and with it the prefill request
//! (whose connection closes: vLLM aborts it). What happened is the context's
//! [`HandoffRecord`], counted at the finish point ([`finish`]). A request retried on another
//! decode backend (a connection that failed before any byte) goes through the handoff again.
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower::{Layer, Service};

use super::Router;
use crate::config::{HandoffConfig, HandoffProtocol};
use crate::proxy::{Failure, RequestBody, UpstreamBody};

pub mod finish;
pub mod llamacpp;
pub mod policy;
mod predicted;
pub mod prefill;
mod remote;
pub mod series;
mod serve;
pub mod slots;
pub mod splice;
pub mod vllm;

/// A decode pool's compiled `[pools.handoff]`.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolHandoff {
    /// Index of the prefill pool.
    pub prefill: usize,
    pub protocol: HandoffProtocol,
    pub min_prompt_tokens: u64,
    pub short_queue_tokens: u64,
    pub spill_queue_tokens: u64,
    pub prefill_timeout: Duration,
    /// llama.cpp: the slot directory as this process sees it.
    pub slot_dir: Option<PathBuf>,
    pub slot_wait: Duration,
}

impl PoolHandoff {
    /// Compiles `config` against the pool names (in router order); `None` names no pool.
    pub fn new(config: &HandoffConfig, pools: &[&str]) -> Option<Self> {
        Some(Self {
            prefill: pools.iter().position(|name| *name == config.prefill_pool)?,
            protocol: config.protocol,
            min_prompt_tokens: config.min_prompt_tokens,
            short_queue_tokens: config.short_queue_tokens,
            spill_queue_tokens: config.spill_queue_tokens,
            prefill_timeout: config.prefill_timeout,
            slot_dir: config.slot_dir.clone(),
            slot_wait: config.slot_wait,
        })
    }
}

/// Configures [`Handoff`].
#[derive(Debug, Clone)]
pub struct HandoffLayer {
    router: Arc<Router>,
}

impl HandoffLayer {
    pub fn new(router: Arc<Router>) -> Self {
        Self { router }
    }
}

impl<S> Layer<S> for HandoffLayer {
    type Service = Handoff<S>;

    fn layer(&self, inner: S) -> Handoff<S> {
        Handoff {
            inner,
            router: Arc::clone(&self.router),
        }
    }
}

/// Runs the prefill of a handoff pool's request where the policy says, then forwards it.
#[derive(Debug, Clone)]
pub struct Handoff<S> {
    inner: S,
    router: Arc<Router>,
}

impl<S> Service<Request<RequestBody>> for Handoff<S>
where
    S: Service<Request<RequestBody>, Response = Response<UpstreamBody>, Error = Failure>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<UpstreamBody>;
    type Error = Failure;
    // One allocation per request: the prefill phase is awaited inside.
    type Future = Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, Failure>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Failure>> {
        // The inner service's readiness is awaited per request inside the future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RequestBody>) -> Self::Future {
        let inner = self.inner.clone();
        let router = Arc::clone(&self.router);
        Box::pin(router.handoff(inner, req))
    }
}
