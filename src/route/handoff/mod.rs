//! The handoff: prefill/decode disaggregation, as the phase between the dispatch and
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
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{HandoffConfig, HandoffProtocol};

pub mod finish;
pub mod llamacpp;
mod phase;
pub mod policy;
mod predicted;
pub mod prefill;
pub mod record;
mod remote;
pub mod series;
mod serve;
pub mod slots;
pub mod splice;
pub mod vllm;

pub use phase::Handoff;

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
