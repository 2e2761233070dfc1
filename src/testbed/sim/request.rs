//! Parsing and validating the OpenAI request bodies the sim accepts.
//!
//! Only what shapes the simulated work is read: the prompt (for its length), `max_tokens` /
//! `max_completion_tokens` (default [`DEFAULT_MAX_TOKENS`]), `stream`, `stream_options` and
//! `kv_transfer_params` (validated against the prompt by [`super::kv_transfer`]).
//! Sampling parameters and `ignore_eos` are accepted and ignored: the sim always generates
//! exactly `max_tokens` tokens.
//!
//! [`parse`] is the entry point for every endpoint: Responses and Messages bodies go to
//! [`super::responses`] and [`super::messages`], which share the types in [`super::api`] with
//! this module rather than importing them from here.
use serde::Deserialize;

use super::api::{
    from_json, BadRequest, Content, Endpoint, SimRequest, UsageOptions, DEFAULT_MAX_TOKENS,
};
use super::kv_transfer::{KvTransfer, WireParams};
use super::tokenizer::{chat_token_ids, token_ids};

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
    #[serde(default)]
    continuous_usage_stats: Option<bool>,
}

/// Both endpoints' fields in one struct (no `flatten`, which would hide error paths).
#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    prompt: Option<Prompt>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    kv_transfer_params: Option<WireParams>,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

/// A completions prompt: text, several texts (their lengths add up: the sim serves one
/// choice), or token ids (their count is the length).
#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u64>),
}

/// Parses a request body for `endpoint`.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<SimRequest, BadRequest> {
    let chat = match endpoint {
        Endpoint::Responses => return super::responses::parse(body),
        Endpoint::Messages => return super::messages::parse(body),
        Endpoint::Chat => true,
        Endpoint::Completions => false,
    };
    let body: WireRequest = from_json(body)?;
    let prompt_ids = match chat {
        true => {
            let Some(messages) = &body.messages else {
                return Err(BadRequest("messages: field required".to_owned()));
            };
            if messages.is_empty() {
                return Err(BadRequest(
                    "messages: must contain at least one message".to_owned(),
                ));
            }
            let texts: Vec<(&str, String)> = messages
                .iter()
                .map(|m| {
                    let text = m.content.as_ref().map(Content::text).unwrap_or_default();
                    (m.role.as_str(), text)
                })
                .collect();
            chat_token_ids(texts.iter().map(|(role, text)| (*role, text.as_str())))
        }
        false => {
            let mut ids = Vec::new();
            match &body.prompt {
                None => return Err(BadRequest("prompt: field required".to_owned())),
                Some(Prompt::Text(text)) => token_ids(text, &mut ids),
                Some(Prompt::Texts(texts)) => {
                    for text in texts {
                        token_ids(text, &mut ids);
                    }
                }
                Some(Prompt::Ids(given)) => ids.extend(given),
            }
            if ids.is_empty() {
                return Err(BadRequest("prompt: the prompt cannot be empty".to_owned()));
            }
            ids
        }
    };
    let WireRequest {
        model,
        stream,
        max_tokens,
        max_completion_tokens,
        stream_options,
        n,
        kv_transfer_params,
        ..
    } = body;
    let max_tokens = max_completion_tokens
        .or(max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return Err(BadRequest(
            "max_tokens must be at least 1, got 0.".to_owned(),
        ));
    }
    if n.is_some_and(|n| n != 1) {
        return Err(BadRequest(
            "n: only n = 1 is supported by the simulated replica".to_owned(),
        ));
    }
    let stream = stream.unwrap_or(false);
    let usage = match stream_options {
        Some(_) if !stream => {
            return Err(BadRequest(
                "Stream options can only be defined when `stream=True`.".to_owned(),
            ))
        }
        Some(o) => UsageOptions {
            include_usage: o.include_usage.unwrap_or(false),
            continuous: o.continuous_usage_stats.unwrap_or(false),
        },
        None => UsageOptions::default(),
    };
    let prompt_tokens = prompt_ids.len() as u64;
    let kv_transfer = KvTransfer::from_wire(kv_transfer_params, prompt_tokens, stream)
        .map_err(|err| BadRequest(err.to_string()))?;
    Ok(SimRequest {
        endpoint,
        model,
        prompt_tokens,
        prompt_ids,
        max_tokens,
        stream,
        usage,
        kv_transfer,
    })
}

#[cfg(test)]
mod tests;
