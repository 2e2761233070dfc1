//! The vocabulary the sim's four generation APIs share: which endpoint a request came in on,
//! the request as the engine needs it, the 400, message content, the generated text, response
//! ids and timestamps, JSON string literals.
//!
//! It depends on no other part of the sim but the leaf [`super::kv_transfer`] (a request's
//! `kv_transfer_params`), so the modules that speak the APIs all point here and the arrows between
//! them go one way: `request` and `stream` (the two OpenAI-compatible
//! endpoints, and the entry points for all four) hand the Responses and Messages shapes to
//! `responses` and `messages`, which never look back.

use serde::Deserialize;

use super::kv_transfer::KvTransfer;
use super::tokenizer::chat_token_ids;

/// The generation endpoints the sim serves. `stream` formats the two OpenAI-compatible ones;
/// `responses` and `messages` format the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completions,
    /// `/v1/responses` (OpenAI Responses)
    Responses,
    /// `/v1/messages` (Anthropic Messages)
    Messages,
}

/// The usage options of a streaming request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageOptions {
    /// `stream_options.include_usage`: a final usage chunk.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`: cumulative usage on every chunk.
    pub continuous: bool,
}

/// Output length when the request names none (vLLM's completions default).
pub const DEFAULT_MAX_TOKENS: u64 = 16;

/// A request as the engine needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRequest {
    pub endpoint: Endpoint,
    /// `model` from the request, echoed in responses.
    pub model: Option<String>,
    pub prompt_tokens: u64,
    /// The prompt's token ids (see [`super::tokenizer`]), `prompt_tokens` of them: what the
    /// prefix cache matches.
    pub prompt_ids: Vec<u64>,
    pub max_tokens: u64,
    pub stream: bool,
    pub usage: UsageOptions,
    /// What the request's `kv_transfer_params` ask (prefill/decode disaggregation; chat and
    /// completions only).
    pub kv_transfer: KvTransfer,
}

impl SimRequest {
    /// A request of the Responses or Messages API: its prompt is the chat template over `texts`
    /// (role, text) and its usage is always reported at the end (these APIs have no
    /// `stream_options`); it asks no KV transfer, the KV-connector protocol being vLLM's OpenAI
    /// endpoints' only.
    pub(super) fn chat(
        endpoint: Endpoint,
        model: Option<String>,
        texts: &[(String, String)],
        max_tokens: u64,
        stream: bool,
    ) -> SimRequest {
        let prompt_ids = chat_token_ids(
            texts
                .iter()
                .map(|(role, text)| (role.as_str(), text.as_str())),
        );
        SimRequest {
            endpoint,
            model,
            prompt_tokens: prompt_ids.len() as u64,
            prompt_ids,
            max_tokens,
            stream,
            usage: UsageOptions::default(),
            kv_transfer: KvTransfer::default(),
        }
    }
}

/// Why a request is a 400.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// Message content as the chat, Responses and Messages APIs all send it: a string, or a list of
/// parts (text parts carry `text`; images and the like count for nothing).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
pub(super) struct Part {
    #[serde(default)]
    text: Option<String>,
}

impl Content {
    /// The text the model reads: the string, or the parts' texts joined by spaces.
    pub(super) fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|part| part.text.as_deref())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// Parses a JSON request body. The 400 names the field at fault (`messages[0].content: ...`), as
/// vLLM's validation errors do, or says that the body is not JSON at all.
pub(super) fn from_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, BadRequest> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let malformed = matches!(
            inner.classify(),
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof
        );
        if malformed || path == "." {
            BadRequest(format!("invalid request body: {inner}"))
        } else {
            BadRequest(format!("{path}: {inner}"))
        }
    })
}

/// The text of output token `index`.
pub fn token_text(index: u64) -> String {
    format!(" tok{index}")
}

/// A fresh response id: vLLM's prefix and 32 random hex digits.
pub fn response_id(endpoint: Endpoint) -> String {
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl-",
        Endpoint::Completions => "cmpl-",
        Endpoint::Responses => "resp_",
        Endpoint::Messages => "msg_",
    };
    format!("{prefix}{:032x}", rand::random::<u128>())
}

/// Seconds since the Unix epoch, for `created`.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A JSON string literal (quotes included).
pub fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}
