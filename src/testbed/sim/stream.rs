//! vLLM's response shapes, byte for byte: stream chunks and whole responses.
//!
//! Field order and spelling follow vLLM's OpenAI server (see `tests/fixtures/openai/vllm-*.sse`): a
//! chat stream opens with the role chunk (`"delta":{"role":"assistant","content":""}`), then one
//! chunk per step; the last content chunk carries `"finish_reason":"length","stop_reason":null`
//! (the sim always runs to `max_tokens`); with `stream_options.include_usage` a `"choices":[]`
//! usage chunk follows, and with `continuous_usage_stats` as well every chunk carries the
//! cumulative usage (vLLM only honours the latter together with the former). Completions have
//! no role chunk and put `stop_reason` on every chunk. Then `data: [DONE]`.
//!
//! The generated text is deterministic: token `i` (0-based) is the word `" tok{i}"`.
use std::collections::VecDeque;

use bytes::Bytes;

use super::api::{json_string, Endpoint, UsageOptions};
use super::scheduler::Progress;
use super::tokenizer::tokens_text;

/// The final `data: [DONE]` event.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Turns engine progress into SSE chunks for one streaming request.
#[derive(Debug)]
pub struct StreamFormatter {
    endpoint: Endpoint,
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[`: built once.
    prefix: String,
    usage: UsageOptions,
    prompt_tokens: u64,
    /// `Some` when usage reports `prompt_tokens_details.cached_tokens`: the prefix cache's hits,
    /// known with the first output.
    cached: Option<u64>,
    generated: u64,
}

impl StreamFormatter {
    pub fn new(
        endpoint: Endpoint,
        id: &str,
        created: u64,
        model: &str,
        prompt_tokens: u64,
        usage: UsageOptions,
    ) -> Self {
        let object = match endpoint {
            Endpoint::Completions => "text_completion",
            Endpoint::Chat | Endpoint::Responses | Endpoint::Messages => "chat.completion.chunk",
        };
        let prefix = format!(
            "data: {{\"id\":{},\"object\":\"{object}\",\"created\":{created},\"model\":{},\"choices\":[",
            json_string(id),
            json_string(model)
        );
        let usage = UsageOptions {
            continuous: usage.continuous && usage.include_usage,
            ..usage
        };
        StreamFormatter {
            endpoint,
            prefix,
            usage,
            prompt_tokens,
            cached: None,
            generated: 0,
        }
    }

    /// Reports `usage.prompt_tokens_details.cached_tokens` (vLLM's
    /// `--enable-prompt-tokens-details`).
    pub fn with_prompt_tokens_details(mut self, enabled: bool) -> Self {
        self.cached = enabled.then_some(0);
        self
    }

    /// Appends the chunks for one step's progress to `out`, one `Bytes` per SSE event: the
    /// role chunk before the first content chunk (chat), the usage chunk and `[DONE]` after the
    /// last.
    pub fn push(&mut self, progress: &Progress, out: &mut VecDeque<Bytes>) {
        if progress.first {
            if let Some(cached) = &mut self.cached {
                *cached = progress.cached_tokens;
            }
        }
        if progress.first && self.endpoint == Endpoint::Chat {
            let choice = r#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}"#;
            out.push_back(self.chunk(choice, self.usage.continuous));
        }
        let from = self.generated;
        self.generated += progress.new_tokens;
        let text = json_string(&tokens_text(from, self.generated));
        let finish = if progress.finished {
            r#""length","stop_reason":null"#
        } else {
            "null"
        };
        let choice = match self.endpoint {
            Endpoint::Chat | Endpoint::Responses | Endpoint::Messages => format!(
                r#"{{"index":0,"delta":{{"content":{text}}},"logprobs":null,"finish_reason":{finish}}}"#
            ),
            Endpoint::Completions => {
                let finish = if progress.finished {
                    r#""length""#
                } else {
                    "null"
                };
                format!(
                    r#"{{"index":0,"text":{text},"logprobs":null,"finish_reason":{finish},"stop_reason":null}}"#
                )
            }
        };
        out.push_back(self.chunk(&choice, self.usage.continuous));
        if progress.finished {
            if self.usage.include_usage {
                out.push_back(self.chunk("", true));
            }
            out.push_back(Bytes::from_static(DONE));
        }
    }

    fn chunk(&self, choice: &str, with_usage: bool) -> Bytes {
        let mut event = String::with_capacity(self.prefix.len() + choice.len() + 96);
        event.push_str(&self.prefix);
        event.push_str(choice);
        event.push(']');
        if with_usage {
            event.push_str(&usage_json(self.prompt_tokens, self.generated, self.cached));
        }
        event.push_str("}\n\n");
        Bytes::from(event)
    }
}

/// `,"usage":{...}` in vLLM's key order; with `prompt_tokens_details` when `cached` is known.
fn usage_json(prompt: u64, completion: u64, cached: Option<u64>) -> String {
    let details = cached.map_or(String::new(), |cached| {
        format!(r#","prompt_tokens_details":{{"cached_tokens":{cached}}}"#)
    });
    format!(
        r#","usage":{{"prompt_tokens":{prompt},"total_tokens":{},"completion_tokens":{completion}{details}}}"#,
        prompt + completion
    )
}

/// A whole (non-streaming) response body, as vLLM sends it (Responses and Messages in their own
/// APIs' shapes; the sim always generates `max_tokens`, so that is `completion_tokens`).
/// `cached`: the prefix cache's hits when `prompt_tokens_details` is reported.
pub fn full_response(
    endpoint: Endpoint,
    id: &str,
    created: u64,
    model: &str,
    prompt_tokens: u64,
    completion_tokens: u64,
    cached: Option<u64>,
) -> String {
    let text = json_string(&tokens_text(0, completion_tokens));
    let details = cached.map_or("null".to_owned(), |cached| {
        format!(r#"{{"cached_tokens":{cached}}}"#)
    });
    let usage = format!(
        r#""usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":{},"completion_tokens":{completion_tokens},"prompt_tokens_details":{details}}}"#,
        prompt_tokens + completion_tokens
    );
    let (raw_id, raw_model) = (id, model);
    let (id, model) = (json_string(id), json_string(model));
    match endpoint {
        Endpoint::Chat => format!(
            r#"{{"id":{id},"object":"chat.completion","created":{created},"model":{model},"choices":[{{"index":0,"message":{{"role":"assistant","reasoning_content":null,"content":{text},"tool_calls":[]}},"logprobs":null,"finish_reason":"length","stop_reason":null}}],{usage},"prompt_logprobs":null}}"#
        ),
        Endpoint::Completions => format!(
            r#"{{"id":{id},"object":"text_completion","created":{created},"model":{model},"choices":[{{"index":0,"text":{text},"logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}}],{usage}}}"#
        ),
        Endpoint::Responses => super::responses::full_response(
            raw_id,
            created,
            raw_model,
            prompt_tokens,
            completion_tokens,
            completion_tokens,
        ),
        Endpoint::Messages => {
            super::messages::full_response(raw_id, raw_model, prompt_tokens, completion_tokens)
        }
    }
}

/// Appends `"kv_transfer_params":PARAMS` to a whole chat or completions response from
/// [`full_response`]: vLLM declares it the last member of both response models. `params` is JSON
/// text (an object, or `null`).
pub fn with_kv_transfer_params(mut body: String, params: &str) -> String {
    if body.ends_with('}') {
        body.pop();
        body.reserve(params.len() + 24);
        body.push_str(r#","kv_transfer_params":"#);
        body.push_str(params);
        body.push('}');
    }
    body
}

#[cfg(test)]
mod tests;
