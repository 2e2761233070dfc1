//! The OpenAI Responses API on the simulated replica (`POST /v1/responses`).
//!
//! Request: `input` (a string, or a list of messages whose `content` is a string or a list of
//! parts with `text`), optional `instructions` (counted as a system message), `model`,
//! `max_output_tokens` (default [`DEFAULT_MAX_TOKENS`]), `stream`. The prompt is counted with
//! the chat template rule ([`super::tokenizer::count_chat_tokens`]).
//!
//! Stream, in OpenAI's event order (`event: <type>` + `data: {"type": "<type>", ...}`, a
//! `sequence_number` on each): `response.created` and `response.in_progress` as soon as the
//! request is accepted (before prefill, as OpenAI does, so TTFB < TTFT); at the first output
//! `response.output_item.added` and `response.content_part.added`; one
//! `response.output_text.delta` per engine step; at the end `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done` and `response.completed` with
//! `usage` (`input_tokens`, `output_tokens`). The sim always runs to `max_output_tokens` but
//! reports `completed` (OpenAI would say `incomplete`): clients and the meter read the same usage
//! from either.
use std::collections::VecDeque;

use bytes::Bytes;
use serde::Deserialize;

use super::api::{
    from_json, json_string, BadRequest, Content, Endpoint, SimRequest, DEFAULT_MAX_TOKENS,
};
use super::scheduler::Progress;
use super::tokenizer::tokens_text;

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input: Option<Input>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Item>),
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Content>,
}

/// Parses a `/v1/responses` request body.
pub fn parse(body: &[u8]) -> Result<SimRequest, BadRequest> {
    let body: Body = from_json(body)?;
    let Body {
        model,
        input,
        instructions,
        max_output_tokens,
        stream,
    } = body;
    let mut texts: Vec<(String, String)> = instructions
        .into_iter()
        .map(|text| ("system".to_owned(), text))
        .collect();
    match input {
        None => return Err(BadRequest("input: field required".to_owned())),
        Some(Input::Text(text)) => texts.push(("user".to_owned(), text)),
        Some(Input::Items(items)) => {
            if items.is_empty() {
                return Err(BadRequest("input: must not be empty".to_owned()));
            }
            texts.extend(items.into_iter().map(|item| {
                let text = item.content.as_ref().map(Content::text).unwrap_or_default();
                (item.role.unwrap_or_else(|| "user".to_owned()), text)
            }));
        }
    }
    let max_tokens = max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return Err(BadRequest(
            "max_output_tokens must be at least 1, got 0.".to_owned(),
        ));
    }
    Ok(SimRequest::chat(
        Endpoint::Responses,
        model,
        &texts,
        max_tokens,
        stream.unwrap_or(false),
    ))
}

/// What every event of one response repeats.
#[derive(Debug, Clone)]
struct Ids {
    /// `"resp_..."`, quoted.
    id: String,
    /// `"msg_..."`, quoted: the one output message.
    item_id: String,
    created_at: u64,
    /// The model, quoted.
    model: String,
    max_output_tokens: u64,
}

impl Ids {
    fn new(id: &str, created_at: u64, model: &str, max_output_tokens: u64) -> Self {
        Ids {
            id: json_string(id),
            item_id: json_string(&format!("msg_{:032x}", rand::random::<u128>())),
            created_at,
            model: json_string(model),
            max_output_tokens,
        }
    }

    /// The `response` object in OpenAI's key order.
    fn response(&self, status: &str, output: &str, usage: &str) -> String {
        let Ids {
            id,
            item_id: _,
            created_at,
            model,
            max_output_tokens,
        } = self;
        format!(
            r#"{{"id":{id},"object":"response","created_at":{created_at},"status":"{status}","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":{max_output_tokens},"model":{model},"output":[{output}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{{"effort":null,"summary":null}},"store":false,"temperature":1.0,"text":{{"format":{{"type":"text"}}}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{usage},"user":null,"metadata":{{}}}}"#
        )
    }

    /// The finished output message holding `text` (a JSON string).
    fn message(&self, text: &str) -> String {
        format!(
            r#"{{"id":{},"type":"message","status":"completed","role":"assistant","content":[{{"type":"output_text","text":{text},"annotations":[]}}]}}"#,
            self.item_id
        )
    }
}

/// `usage` in OpenAI's key order.
fn usage_json(input: u64, output: u64) -> String {
    format!(
        r#"{{"input_tokens":{input},"input_tokens_details":{{"cached_tokens":0}},"output_tokens":{output},"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}}"#,
        input + output
    )
}

/// Turns engine progress into Responses events for one streaming request.
#[derive(Debug)]
pub struct ResponsesFormatter {
    ids: Ids,
    prompt_tokens: u64,
    generated: u64,
    sequence: u64,
}

impl ResponsesFormatter {
    pub fn new(
        id: &str,
        created_at: u64,
        model: &str,
        prompt_tokens: u64,
        max_tokens: u64,
    ) -> Self {
        ResponsesFormatter {
            ids: Ids::new(id, created_at, model, max_tokens),
            prompt_tokens,
            generated: 0,
            sequence: 0,
        }
    }

    /// The events sent as soon as the request is accepted.
    pub fn start(&mut self, out: &mut VecDeque<Bytes>) {
        let response = self.ids.response("in_progress", "", "null");
        for kind in ["response.created", "response.in_progress"] {
            self.event(kind, &format!(r#","response":{response}"#), out);
        }
    }

    /// The events for one step's progress.
    pub fn push(&mut self, progress: &Progress, out: &mut VecDeque<Bytes>) {
        let item_id = self.ids.item_id.clone();
        let part = r#"{"type":"output_text","text":"","annotations":[]}"#;
        if progress.first {
            let item = format!(
                r#"{{"id":{item_id},"type":"message","status":"in_progress","role":"assistant","content":[]}}"#
            );
            self.event(
                "response.output_item.added",
                &format!(r#","output_index":0,"item":{item}"#),
                out,
            );
            self.event(
                "response.content_part.added",
                &format!(
                    r#","item_id":{item_id},"output_index":0,"content_index":0,"part":{part}"#
                ),
                out,
            );
        }
        let from = self.generated;
        self.generated += progress.new_tokens;
        let delta = json_string(&tokens_text(from, self.generated));
        self.event(
            "response.output_text.delta",
            &format!(
                r#","item_id":{item_id},"output_index":0,"content_index":0,"delta":{delta},"logprobs":[]"#
            ),
            out,
        );
        if !progress.finished {
            return;
        }
        let text = json_string(&tokens_text(0, self.generated));
        let at = format!(r#","item_id":{item_id},"output_index":0,"content_index":0"#);
        self.event(
            "response.output_text.done",
            &format!(r#"{at},"text":{text},"logprobs":[]"#),
            out,
        );
        self.event(
            "response.content_part.done",
            &format!(r#"{at},"part":{{"type":"output_text","text":{text},"annotations":[]}}"#),
            out,
        );
        let message = self.ids.message(&text);
        self.event(
            "response.output_item.done",
            &format!(r#","output_index":0,"item":{message}"#),
            out,
        );
        let usage = usage_json(self.prompt_tokens, self.generated);
        let response = self.ids.response("completed", &message, &usage);
        self.event(
            "response.completed",
            &format!(r#","response":{response}"#),
            out,
        );
    }

    /// One SSE event: `event: kind`, data `{"type":kind,"sequence_number":n<fields>}`.
    fn event(&mut self, kind: &str, fields: &str, out: &mut VecDeque<Bytes>) {
        let sequence = self.sequence;
        self.sequence += 1;
        out.push_back(Bytes::from(format!(
            "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{sequence}{fields}}}\n\n"
        )));
    }
}

/// A whole (non-streaming) response object.
pub fn full_response(
    id: &str,
    created_at: u64,
    model: &str,
    prompt_tokens: u64,
    max_tokens: u64,
    generated: u64,
) -> String {
    let ids = Ids::new(id, created_at, model, max_tokens);
    let message = ids.message(&json_string(&tokens_text(0, generated)));
    ids.response("completed", &message, &usage_json(prompt_tokens, generated))
}

/// OpenAI's error body.
pub fn error_body(message: &str) -> String {
    format!(
        r#"{{"error":{{"message":{},"type":"invalid_request_error","param":null,"code":null}}}}"#,
        json_string(message)
    )
}

#[cfg(test)]
mod tests;
