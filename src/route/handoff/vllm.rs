//! vLLM's KV-connector protocol (NIXL, LMCache, Mooncake, P2P-NCCL), as vLLM's own proxy
//! (`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`) and its router speak it:
//! 1. the client's request goes to a prefill replica with `kv_transfer_params` asking for a remote
//!    decode, `stream` false, `max_tokens` (and `max_completion_tokens`) 1, no `stream_options`,
//!    and without `min_tokens` / `min_completion_tokens` (which a one-token prefill cannot meet);
//! 2. the prefill's JSON answer carries `kv_transfer_params` naming the KV blocks it holds for
//!    the decode side (engine id, block ids, host, port);
//! 3. the client's request, byte for byte but for that one member added, goes to the decode
//!    replica, which pulls the blocks and streams the answer the client reads.
//!
//! The decode body keeps every byte the client sent: the member is spliced in after the opening
//! brace rather than the body re-serialised. A body that already names `kv_transfer_params` is not
//! handed off (the client speaks the protocol itself, or its prompt quotes it).
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{prefill, splice};

/// The member the protocol adds to both requests.
pub(crate) const MEMBER: &str = "kv_transfer_params";

/// What the prefill request asks for: a prefill whose KV a remote decode will pull.
const REMOTE_DECODE: &str = r#"{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}"#;

/// Whether `body` mentions the protocol's member anywhere (then it is not handed off).
pub(crate) fn mentions_params(body: &[u8]) -> bool {
    splice::mentions(body, MEMBER)
}

/// The prefill request's body from the client's (a JSON object).
pub(crate) fn prefill_body(body: &[u8]) -> Result<Bytes, serde_json::Error> {
    let mut object: Map<String, Value> = serde_json::from_slice(body)?;
    let params: Value = serde_json::from_str(REMOTE_DECODE)?;
    object.insert(MEMBER.to_owned(), params);
    prefill::one_unstreamed_token(&mut object);
    // A one-token prefill cannot meet them.
    for gone in ["min_tokens", "min_completion_tokens"] {
        object.remove(gone);
    }
    serde_json::to_vec(&object).map(Bytes::from)
}

/// The `kv_transfer_params` object of a prefill's answer; `None` when it offers none (absent,
/// `null`, not an object, or an answer that is not JSON).
pub fn offered(answer: &[u8]) -> Option<Box<RawValue>> {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow, default)]
        kv_transfer_params: Option<&'a RawValue>,
    }
    let answer: Answer<'_> = serde_json::from_slice(answer).ok()?;
    let params = answer.kv_transfer_params?;
    params.get().starts_with('{').then(|| params.to_owned())
}

/// The decode request's body: the client's, with `"kv_transfer_params":PARAMS` as its first
/// member. `None` when the body does not start with a JSON object.
pub(crate) fn decode_body(body: &[u8], params: &RawValue) -> Option<Bytes> {
    splice::first_member(body, MEMBER, params.get())
}

#[cfg(test)]
mod tests;
