//! The Ollama native dialect (`POST /api/chat`, `POST /api/generate`): NDJSON, one object per
//! line (`application/x-ndjson`), framed by [`super::ndjson`].
//!
//! `/api/chat` lines carry `message.content` (and `message.thinking`, `message.tool_calls`);
//! `/api/generate` lines carry `response` (and `thinking`). Every line has `done`; the last one
//! has `"done": true`, `done_reason`, `prompt_eval_count` (input tokens) and `eval_count`
//! (output tokens).
//! - **Token event**: a line with non-empty content, thinking or tool calls. Ollama writes one
//!   line per generated token, so a token line that is not the final one carries one token.
//! - **Usage**: `prompt_eval_count` / `eval_count` (the final line).
//! - **Error**: a non-null `error` (`{"error":"..."}` once the 200 is out).
//! - **End**: `"done": true`.

use serde::de::MapAccess;
use serde_json::value::RawValue;

use super::event::{EventSummary, Usage};
use super::output::{Holds, Output};
use super::walk::{
    self, is_non_null, is_nonempty_string, keys, Count, Flag, Lenient, Members, Object,
};

/// Classifies one line.
pub fn classify(data: &[u8]) -> EventSummary {
    let Some(found) = walk::parse(data, Object::<Top>::pick()) else {
        return EventSummary::default();
    };
    let Top {
        output,
        done,
        usage,
        error,
    } = found;
    let readable = usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
    EventSummary {
        token: output,
        usage: readable.then_some(usage),
        error,
        done,
        tokens: (output && !done).then_some(1),
        ..EventSummary::default()
    }
}

/// The usage of a whole non-streaming response (`"stream": false`): Ollama then answers with one
/// JSON object shaped like the stream's final line, so it is the same walk: `prompt_eval_count`
/// (input) and `eval_count` (output). `None` when the body is not one JSON object or carries
/// neither count.
pub fn body_usage(body: &[u8]) -> Option<Usage> {
    classify(body).usage
}

#[derive(Default)]
struct Top {
    output: bool,
    done: bool,
    usage: Usage,
    error: bool,
}

keys! { enum TopKey { Message, Response, Thinking, Done, PromptEvalCount, EvalCount, Error } }

/// A chat `message`'s members: output is content, thinking or tool calls.
fn message_member(name: &[u8]) -> Holds {
    match name {
        b"content" | b"thinking" => Holds::Text,
        b"tool_calls" => Holds::List,
        _ => Holds::Nothing,
    }
}

impl<'de> Members<'de> for Top {
    type Key = TopKey;

    fn member<A: MapAccess<'de>>(&mut self, key: TopKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            TopKey::Message => {
                self.output |= map.next_value_seed(Lenient(Output(message_member)))?;
            }
            TopKey::Response | TopKey::Thinking => {
                self.output |= is_nonempty_string(map.next_value()?);
            }
            TopKey::Done => self.done = map.next_value_seed(Lenient(Flag))? == Some(true),
            TopKey::PromptEvalCount => {
                self.usage.prompt_tokens = map.next_value_seed(Lenient(Count))?;
            }
            TopKey::EvalCount => {
                self.usage.completion_tokens = map.next_value_seed(Lenient(Count))?;
            }
            TopKey::Error => self.error = is_non_null(map.next_value::<&RawValue>()?),
            TopKey::Other => walk::skip(map)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
