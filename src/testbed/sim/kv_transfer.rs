//! vLLM's prefill/decode disaggregation protocol (its KV connectors: NIXL, LMCache, Mooncake), as
//! the replica speaks it. Every replica plays both roles (vLLM's `kv_role = "kv_both"`); what a
//! request asks for is in its `kv_transfer_params`.
//!
//! 1. A proxy (vLLM's `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`) sends the
//!    client's request to a *prefill* replica with `"do_remote_decode": true`, `stream` false and
//!    `max_tokens` 1. The replica runs it as any request, and its JSON answer gains a last
//!    top-level member that names the prompt's KV blocks ([`Connector::offer`]):
//!
//!    ```text
//!    "kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,
//!    "remote_block_ids":[0,1,2],"remote_engine_id":"<uuid>","remote_host":"127.0.0.1",
//!    "remote_port":8100,"tp_size":1}
//!    ```
//! 2. The proxy sends the client's request with those params to a *decode* replica, which pulls
//!    the blocks (the transfer time, [`super::SimConfig::kv_transfer_time`]) and schedules the
//!    request with every prompt token but the last already computed, so its first token costs a
//!    decode-sized step, not a prefill (see [`super::scheduler`]).
//!
//! The rules held here ([`KvTransfer::from_wire`]):
//! - one block id per [`BLOCK_TOKENS`] prompt tokens, rounding up ([`blocks_for`]), the prefix
//!   cache's block size;
//! - a decode request's params must name an engine (a non-empty string), a host, a port and
//!   exactly the block count of *its own* prompt, so params of another request are a 400;
//! - a streaming request cannot ask for `do_remote_decode` (400): the params travel in the JSON
//!   answer, which a stream does not have. vLLM would stream and offer nothing; the 400 makes a
//!   proxy's mistake visible instead of silently costing a second prefill.
//!
//! Both flags in one request are honoured independently (pull, then offer), as vLLM's connector
//! would. The prefill replica does not pin the offered blocks until they are pulled: they go to
//! its prefix cache like any finished request's.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

pub use super::prefix_cache::BLOCK_TOKENS;

/// Blocks of [`BLOCK_TOKENS`] tokens that a prompt of `prompt_tokens` fills (the last one
/// possibly partly): how many ids a prefill answer lists and a decode request must bring.
pub fn blocks_for(prompt_tokens: u64) -> u64 {
    prompt_tokens.div_ceil(BLOCK_TOKENS as u64)
}

/// `kv_transfer_params` as a request carries it. `null` members count as absent (the proxy sends
/// them so to the prefill side); members the sim does not read (`tp_size`, `remote_request_id`)
/// are ignored.
#[derive(Debug, Default, Deserialize)]
pub struct WireParams {
    #[serde(default)]
    do_remote_decode: Option<bool>,
    #[serde(default)]
    do_remote_prefill: Option<bool>,
    #[serde(default)]
    remote_engine_id: Option<String>,
    #[serde(default)]
    remote_block_ids: Option<Vec<u64>>,
    #[serde(default)]
    remote_host: Option<String>,
    #[serde(default)]
    remote_port: Option<u16>,
}

/// What a request's `kv_transfer_params` ask of this replica (nothing, by default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvTransfer {
    /// `do_remote_decode`: a decode replica will pull this prompt's KV, so the answer offers it.
    pub remote_decode: bool,
    /// `do_remote_prefill`: the prompt's KV is pulled from a prefill replica before scheduling.
    pub remote_prefill: Option<RemotePrefill>,
}

/// Where a decode request's KV is: the prefill replica's answer, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotePrefill {
    pub engine_id: String,
    pub host: String,
    pub port: u16,
    /// Blocks to pull: [`blocks_for`] the request's prompt.
    pub blocks: u64,
}

/// Why a request's `kv_transfer_params` are refused (a 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamsError {
    #[error("kv_transfer_params with do_remote_decode requires stream=false")]
    StreamedRemoteDecode,
    #[error("kv_transfer_params.{field}: {what} is required with do_remote_prefill")]
    Missing {
        field: &'static str,
        what: &'static str,
    },
    #[error(
        "kv_transfer_params.remote_block_ids: {got} block ids, but this request's prompt of \
         {prompt_tokens} tokens fills {want} blocks of {BLOCK_TOKENS} tokens (params of another \
         request?)"
    )]
    BlockCount {
        got: u64,
        want: u64,
        prompt_tokens: u64,
    },
}

impl KvTransfer {
    /// Validates a request's params against its own prompt (see the module docs).
    pub fn from_wire(
        wire: Option<WireParams>,
        prompt_tokens: u64,
        stream: bool,
    ) -> Result<KvTransfer, ParamsError> {
        let Some(WireParams {
            do_remote_decode,
            do_remote_prefill,
            remote_engine_id,
            remote_block_ids,
            remote_host,
            remote_port,
        }) = wire
        else {
            return Ok(KvTransfer::default());
        };
        let remote_decode = do_remote_decode.unwrap_or(false);
        if remote_decode && stream {
            return Err(ParamsError::StreamedRemoteDecode);
        }
        if !do_remote_prefill.unwrap_or(false) {
            return Ok(KvTransfer {
                remote_decode,
                remote_prefill: None,
            });
        }
        let missing = |field, what| ParamsError::Missing { field, what };
        let engine_id = remote_engine_id
            .filter(|id| !id.is_empty())
            .ok_or(missing("remote_engine_id", "a non-empty string"))?;
        let block_ids =
            remote_block_ids.ok_or(missing("remote_block_ids", "an array of block ids"))?;
        let host = remote_host.ok_or(missing("remote_host", "a string"))?;
        let port = remote_port.ok_or(missing("remote_port", "an integer port"))?;
        let (got, want) = (block_ids.len() as u64, blocks_for(prompt_tokens));
        if got != want {
            return Err(ParamsError::BlockCount {
                got,
                want,
                prompt_tokens,
            });
        }
        Ok(KvTransfer {
            remote_decode,
            remote_prefill: Some(RemotePrefill {
                engine_id,
                host,
                port,
                blocks: want,
            }),
        })
    }
}

/// Fault injection for the protocol (the `kv_transfer_fault` knob).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KvTransferFault {
    /// Transfers work.
    #[default]
    None,
    /// The prefill side offers nothing: its answer carries `"kv_transfer_params":null` (what
    /// vLLM answers when its connector has no blocks to hand over).
    Prefill,
    /// The decode side fails to pull: HTTP 500 once the transfer time has passed, before any
    /// byte of the answer.
    Decode,
}

/// This replica's end of the KV link: the identity a prefill answer gives out, and the block ids
/// it hands out (fresh for every offer, as physical blocks would be).
#[derive(Debug)]
pub struct Connector {
    /// Everything of the params after the block ids, built once.
    tail: String,
    engine_id: String,
    next_block: AtomicU64,
}

impl Connector {
    /// The connector of a replica listening on `addr`, with a random engine id (vLLM: a uuid4 per
    /// engine). A wildcard address is offered as 127.0.0.1, where a local decode replica finds it.
    pub fn new(addr: SocketAddr) -> Self {
        let bits = rand::random::<u128>();
        let engine_id = format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            bits >> 96,
            (bits >> 80) & 0xffff,
            (bits >> 68) & 0xfff,
            0x8000 | ((bits >> 48) & 0x3fff),
            bits & 0xffff_ffff_ffff
        );
        let ip = match addr.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_owned(),
            ip => ip.to_string(),
        };
        let tail = format!(
            r#"],"remote_engine_id":"{engine_id}","remote_host":"{ip}","remote_port":{},"tp_size":1}}"#,
            addr.port()
        );
        Connector {
            tail,
            engine_id,
            next_block: AtomicU64::new(0),
        }
    }

    /// The engine id every offer names.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// The `kv_transfer_params` value of a prefill answer for a prompt of `prompt_tokens`:
    /// [`blocks_for`] fresh block ids, in vLLM's member order.
    pub fn offer(&self, prompt_tokens: u64) -> String {
        use std::fmt::Write;
        let blocks = blocks_for(prompt_tokens);
        let first = self.next_block.fetch_add(blocks, Ordering::Relaxed);
        let mut out = String::with_capacity(96 + 8 * blocks as usize + self.tail.len());
        out.push_str(r#"{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":["#);
        for (i, id) in (first..first + blocks).enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(out, "{comma}{id}");
        }
        out.push_str(&self.tail);
        out
    }
}

#[cfg(test)]
mod tests;
