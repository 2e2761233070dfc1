//! `[pools.handoff]`: a decode pool whose prompts may prefill on another pool, the KV cache moved
//! between them (prefill/decode disaggregation; see [`crate::route::handoff`]).
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a pool's requests hand their prefill off to a prefill pool. In a pool with
/// `balance = "slo"` the latency models decide where each prefill runs, and the token thresholds
/// (`min_prompt_tokens`, `short_queue_tokens`, `spill_queue_tokens`) are not used.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HandoffConfig {
    /// The pool that runs the prefills (a pool without a handoff of its own).
    pub prefill_pool: String,
    /// How the KV cache moves from the prefill replica to the decode replica.
    pub protocol: HandoffProtocol,
    /// A prompt whose uncached part (the estimate, less what the chosen decode backend's prompt
    /// cache is known to hold) is at least this many tokens prefills on the prefill pool.
    pub min_prompt_tokens: u64,
    /// A shorter prompt is handed off too while the prefill pool's least-queued backend has fewer
    /// than this many prompt tokens queued (not yet past their first byte), so that it never
    /// waits behind a long prefill; `0`: shorter prompts always prefill where they decode.
    pub short_queue_tokens: u64,
    /// A long prompt prefills where it decodes after all while the prefill pool's least-queued
    /// backend has more than this many prompt tokens queued: past that its wait there would cost
    /// more TTFT than its prefill costs the decode backend's streams; `0`: never (it always
    /// queues on the prefill pool, bounded by `prefill_timeout`).
    pub spill_queue_tokens: u64,
    /// The prefill phase's deadline (prefill request, and for llama.cpp the save and restore):
    /// past it the decode pool serves the whole request, as it would without a prefill pool. A
    /// decode pool with `balance = "slo"` keeps where it decodes a prefill the prefill pool is
    /// predicted to take longer than this over (`local_busy`).
    #[serde(with = "super::spelling::human_duration")]
    pub prefill_timeout: Duration,
    /// llama.cpp: the directory both servers save and restore slots in (their `--slot-save-path`),
    /// as this process sees it (a shared volume): the proxy removes each transfer's file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_dir: Option<PathBuf>,
    /// llama.cpp: the longest wait for a free slot on a server; past it the request goes without
    /// one (the server queues it).
    #[serde(with = "super::spelling::human_duration")]
    pub slot_wait: Duration,
}

/// The KV-transfer protocol of a handoff.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffProtocol {
    /// vLLM's KV connectors (NIXL, LMCache, Mooncake, P2P-NCCL): the prefill request asks for a
    /// remote decode in `kv_transfer_params`, and the decode request carries the
    /// `kv_transfer_params` the prefill answered with.
    #[default]
    Vllm,
    /// llama.cpp's `llama-server` with `--slot-save-path`: the prefill server's slot is saved to
    /// a file and restored into a slot of the decode server that the proxy reserved.
    Llamacpp,
}

impl HandoffProtocol {
    /// The protocol's name in config and labels.
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffProtocol::Vllm => "vllm",
            HandoffProtocol::Llamacpp => "llamacpp",
        }
    }
}

impl Default for HandoffConfig {
    fn default() -> Self {
        Self {
            prefill_pool: String::new(),
            protocol: HandoffProtocol::default(),
            min_prompt_tokens: 512,
            short_queue_tokens: 0,
            spill_queue_tokens: 0,
            prefill_timeout: Duration::from_secs(10),
            slot_dir: None,
            slot_wait: Duration::from_millis(200),
        }
    }
}
