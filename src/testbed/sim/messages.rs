//! The Anthropic Messages API on the simulated replica (`POST /v1/messages`).
//!
//! Request: `messages` (each `content` a string or a list of blocks with `text`), optional
//! `system` (a string or blocks; counted as one more message), `model`, `max_tokens`
//! (required, as Anthropic requires it), `stream`. The prompt is counted with the chat template
//! rule ([`super::tokenizer::count_chat_tokens`]).
//!
//! Stream, in Anthropic's event order (`event: <type>` + `data: {"type": "<type>", ...}`):
//! `message_start` (with `usage.input_tokens`), `content_block_start` and `ping` as soon as the
//! request is accepted (so TTFB < TTFT); one `content_block_delta` (`text_delta`) per engine
//! step; at the end `content_block_stop`, `message_delta` (`stop_reason: "max_tokens"`, the
//! cumulative `usage.output_tokens`) and `message_stop`. Errors use Anthropic's body
//! `{"type":"error","error":{"type":"invalid_request_error","message":...}}`.
use std::collections::VecDeque;

use bytes::Bytes;
use serde::Deserialize;

use super::api::{from_json, json_string, BadRequest, Content, Endpoint, SimRequest};
use super::scheduler::Progress;
use super::tokenizer::tokens_text;

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    system: Option<Content>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

/// Parses a `/v1/messages` request body.
pub fn parse(body: &[u8]) -> Result<SimRequest, BadRequest> {
    let body: Body = from_json(body)?;
    let Body {
        model,
        messages,
        system,
        max_tokens,
        stream,
    } = body;
    let Some(messages) = messages else {
        return Err(BadRequest("messages: Field required".to_owned()));
    };
    if messages.is_empty() {
        return Err(BadRequest(
            "messages: at least one message is required".to_owned(),
        ));
    }
    let Some(max_tokens) = max_tokens else {
        return Err(BadRequest("max_tokens: Field required".to_owned()));
    };
    if max_tokens == 0 {
        return Err(BadRequest(
            "max_tokens: must be at least 1, got 0".to_owned(),
        ));
    }
    let texts: Vec<(String, String)> = system
        .as_ref()
        .map(|system| ("system".to_owned(), system.text()))
        .into_iter()
        .chain(messages.into_iter().map(|m| {
            let text = m.content.as_ref().map(Content::text).unwrap_or_default();
            (m.role, text)
        }))
        .collect();
    Ok(SimRequest::chat(
        Endpoint::Messages,
        model,
        &texts,
        max_tokens,
        stream.unwrap_or(false),
    ))
}

/// `usage` in Anthropic's key order.
fn usage_json(input: u64, output: u64) -> String {
    format!(
        r#"{{"input_tokens":{input},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{output}}}"#
    )
}

/// The message object; `content` and `stop_reason` are JSON.
fn message_json(id: &str, model: &str, content: &str, stop_reason: &str, usage: &str) -> String {
    format!(
        r#"{{"id":{},"type":"message","role":"assistant","content":[{content}],"model":{},"stop_reason":{stop_reason},"stop_sequence":null,"usage":{usage}}}"#,
        json_string(id),
        json_string(model)
    )
}

/// Turns engine progress into Messages events for one streaming request.
#[derive(Debug)]
pub struct MessagesFormatter {
    /// The `message_start` payload, built once.
    start: String,
    generated: u64,
}

impl MessagesFormatter {
    pub fn new(id: &str, model: &str, prompt_tokens: u64) -> Self {
        // Anthropic reports a placeholder output count of 1 at the start.
        let message = message_json(id, model, "", "null", &usage_json(prompt_tokens, 1));
        MessagesFormatter {
            start: format!(r#"{{"type":"message_start","message":{message}}}"#),
            generated: 0,
        }
    }

    /// The events sent as soon as the request is accepted.
    pub fn start(&mut self, out: &mut VecDeque<Bytes>) {
        let start = std::mem::take(&mut self.start);
        event("message_start", &start, out);
        event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            out,
        );
        event("ping", r#"{"type": "ping"}"#, out);
    }

    /// The events for one step's progress.
    pub fn push(&mut self, progress: &Progress, out: &mut VecDeque<Bytes>) {
        let from = self.generated;
        self.generated += progress.new_tokens;
        let text = json_string(&tokens_text(from, self.generated));
        event(
            "content_block_delta",
            &format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{text}}}}}"#
            ),
            out,
        );
        if !progress.finished {
            return;
        }
        event(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
            out,
        );
        event(
            "message_delta",
            &format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"max_tokens","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
                self.generated
            ),
            out,
        );
        event("message_stop", r#"{"type":"message_stop"}"#, out);
    }
}

fn event(kind: &str, data: &str, out: &mut VecDeque<Bytes>) {
    out.push_back(Bytes::from(format!("event: {kind}\ndata: {data}\n\n")));
}

/// A whole (non-streaming) message.
pub fn full_response(id: &str, model: &str, prompt_tokens: u64, generated: u64) -> String {
    let text = json_string(&tokens_text(0, generated));
    message_json(
        id,
        model,
        &format!(r#"{{"type":"text","text":{text}}}"#),
        r#""max_tokens""#,
        &usage_json(prompt_tokens, generated),
    )
}

/// Anthropic's error body.
pub fn error_body(message: &str) -> String {
    format!(
        r#"{{"type":"error","error":{{"type":"invalid_request_error","message":{}}}}}"#,
        json_string(message)
    )
}

#[cfg(test)]
mod tests;
