//! The simulator's `POST /tokenize`, in vLLM's shape: `{"prompt": "..."}` (text as is) or
//! `{"messages": [...]}` (with the chat template's overhead), answered with
//! `{"count": N, "max_model_len": M, "tokens": [...]}`. Counts follow [`super::tokenizer`], so
//! they agree with the `usage.prompt_tokens` the simulator reports.
use serde::Deserialize;

use super::tokenizer::{count_chat_tokens, count_prompt_tokens};

#[derive(Deserialize)]
struct Request {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<serde_json::Value>,
}

/// The token count of a `/tokenize` body, or the reason it cannot be counted.
pub fn count(body: &[u8]) -> Result<u64, String> {
    let request: Request =
        serde_json::from_slice(body).map_err(|err| format!("invalid request: {err}"))?;
    match (request.prompt, request.messages) {
        (Some(prompt), _) => Ok(count_prompt_tokens(&prompt)),
        (None, Some(messages)) => {
            let texts: Vec<String> = messages
                .iter()
                .map(|message| match &message.content {
                    Some(serde_json::Value::String(text)) => text.clone(),
                    Some(serde_json::Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|part| part.get("text")?.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                })
                .collect();
            Ok(count_chat_tokens(texts.iter().map(String::as_str)))
        }
        (None, None) => Err("either `prompt` or `messages` is required".to_owned()),
    }
}

/// The answer body for `count` tokens (token ids are stand-ins: the simulator has no vocabulary).
pub fn answer(count: u64, max_model_len: u64) -> String {
    let tokens: Vec<u64> = (0..count).map(|i| 1000 + i % 30_000).collect();
    serde_json::json!({"count": count, "max_model_len": max_model_len, "tokens": tokens})
        .to_string()
}

#[cfg(test)]
mod tests;
