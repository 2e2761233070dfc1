//! What a generation request's body says, read in one walk: the facts metering labels with
//! ([`RequestFacts`]), the prompt's size for the router's estimate ([`PromptSize`]), where
//! `stream_options.include_usage` would go for the meter's usage injection ([`usage`]), and, when
//! prefix affinity asks, where the prompt members lie for naming the prompt's blocks
//! ([`PromptSpans`], [`prefix`]).
//!
//! OpenAI-compatible `POST /v1/chat/completions` and `/v1/completions` bodies (and the other
//! dialects' prompt members) are read this way; the meter does it once per request ([`read`]) and
//! every later phase uses the result.
//!
//! The walk borrows the values it needs as [`RawValue`]s (slices of the input), whose byte
//! offsets locate the usage splice and the prompt members; it copies no string. The prompt is
//! measured in the same walk (`measure.rs`): the bytes of every chat message's `content` (a
//! string, or the `text` of its parts) and of the completions `prompt` (string or list of
//! strings; token-id prompts are counted exactly). A body whose `messages` or `prompt` has another
//! shape (or whose body is not JSON) is measured whole: an overestimate by its JSON syntax, never
//! a zero that would route a huge prompt to the decode pool.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

mod measure;
mod member_name;
mod members;
pub mod prefix;
#[cfg(test)]
mod tests;
pub mod usage;

pub use measure::PromptSize;
use measure::{add, measure_raw, Measure, Shape};
pub(crate) use members::{PromptSpans, PROMPT_MEMBERS};
pub use usage::Injection;
pub(crate) use usage::UsageSplice;
use usage::{usage_edit, Seen};

/// What the proxy learns from a request body before forwarding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFacts {
    /// The top-level `"model"` string (unescaped); `None` when absent or not a string.
    pub model: Option<String>,
    /// Top-level `"stream": true`.
    pub stream: bool,
    /// `stream_options.include_usage == true` as sent by the client. When it is false the proxy
    /// injected the usage chunk itself and should keep it from the client.
    pub client_asked_usage: bool,
    /// The most output the request allows: the largest of the top-level `max_tokens`,
    /// `max_completion_tokens` (OpenAI chat), `max_output_tokens` (Responses) and `n_predict`
    /// (llama.cpp) that is a non-negative integer; `None` when none is (a budget then reserves
    /// its default).
    pub max_tokens: Option<u64>,
}

/// Everything one walk of a body yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub facts: RequestFacts,
    pub prompt: PromptSize,
    /// The edit that asks for usage: `Ok(None)` when none is needed (not a stream, or the client
    /// asked already), `Err` with the reason when the body has a shape we do not edit.
    pub usage_splice: Result<Option<UsageSplice>, &'static str>,
    /// Where the prompt members lie, when the reader asked ([`Read::with_prompt_spans`]): in the
    /// body read, or, once the usage splice was applied ([`Inspection::inject`]), in the body as
    /// forwarded.
    pub prompt_spans: Option<Box<PromptSpans>>,
}

/// What a read takes besides what every read takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Read {
    prompt_spans: bool,
}

impl Read {
    /// Also locates the prompt members, for prefix affinity to name the prompt's blocks: the walk
    /// then borrows every prompt member and measures `messages` / `prompt` from the borrowed text
    /// (a second pass over those values, taken only when a pool names prompts).
    pub fn with_prompt_spans(self) -> Self {
        Self { prompt_spans: true }
    }
}

/// Reads a body in one walk. `None` when it is not a JSON object; the proxy then forwards it
/// untouched and the backend owns validation. A repeated key takes its last value, as Python's
/// `json` (and so vLLM) does.
pub fn read(body: &[u8]) -> Option<Inspection> {
    read_with(body, Read::default())
}

/// [`read`], taking what `what` asks besides.
pub fn read_with(body: &[u8], what: Read) -> Option<Inspection> {
    // A body that is not UTF-8 is not JSON; one check up front also spares serde_json a check of
    // every string it reads.
    let mut de = serde_json::Deserializer::from_str(std::str::from_utf8(body).ok()?);
    let top = de
        .deserialize_map(TopVisitor {
            prompt_spans: what.prompt_spans,
        })
        .ok()?;
    de.end().ok()?;
    let facts = RequestFacts {
        model: top
            .model
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok()),
        stream: top.stream.last.is_some_and(|raw| raw.get() == "true"),
        client_asked_usage: top
            .options
            .last
            .and_then(usage::options)
            .is_some_and(|options| {
                options
                    .include_usage
                    .last
                    .is_some_and(|raw| raw.get() == "true")
            }),
        max_tokens: top.max_tokens,
    };
    let prompt = match top.prompt {
        Some(prompt) => prompt,
        None => whole(body),
    };
    let usage_splice = usage_edit(body, &top.stream, &top.options);
    let prompt_spans = what
        .prompt_spans
        .then(|| Box::new(PromptSpans::of(body, &top.members)));
    Some(Inspection {
        facts,
        prompt,
        usage_splice,
        prompt_spans,
    })
}

#[cfg(test)]
/// The facts alone (see [`read`]).
pub(crate) fn inspect(body: &[u8]) -> Option<RequestFacts> {
    read(body).map(|inspection| inspection.facts)
}

/// Rewrites a streaming request so that the backend ends the stream with a usage chunk.
///
/// The splice, by case:
/// - no `stream_options`: `,"stream_options":{"include_usage":true}` right after the last
///   top-level value (before any whitespace that precedes the closing `}`);
/// - `stream_options` is `null`: it becomes `{"include_usage":true}`;
/// - `stream_options` is an object without `include_usage`: `"include_usage":true` (plus `,`
///   when the object has members) right after its `{`;
/// - `include_usage` is `false` or `null`: that value becomes `true`.
pub fn inject_include_usage(body: &[u8]) -> Injection {
    match read(body) {
        Some(mut inspection) => inspection.inject(body),
        None => Injection::Declined("body is not a JSON object"),
    }
}

#[cfg(test)]
/// The prompt's size, from [`read`] when the body reads, else the whole body.
pub(crate) fn prompt_size(body: &[u8]) -> PromptSize {
    Inspection::prompt_of(read(body).as_ref(), body)
}

pub(crate) fn whole(body: &[u8]) -> PromptSize {
    PromptSize {
        text_bytes: body.len() as u64,
        token_ids: 0,
    }
}

/// The prompt text (message contents, or the text prompts, joined by newlines), for a backend's
/// tokenizer to count; `None` when the body has no text prompt. A second walk, taken only on the
/// router's rare path (a model whose ratio is not yet trusted), so the first stays copy-free.
pub fn prompt_text(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(default)]
        messages: Option<Vec<Message>>,
        #[serde(default)]
        prompt: Option<serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct Message {
        #[serde(default)]
        content: Option<serde_json::Value>,
    }
    let parsed = serde_json::from_slice::<Body>(body).ok()?;
    let mut texts: Vec<String> = Vec::new();
    let mut take = |value: &serde_json::Value| match value {
        serde_json::Value::String(text) => texts.push(text.clone()),
        serde_json::Value::Array(items) => texts.extend(items.iter().filter_map(|item| {
            item.as_str()
                .or_else(|| item.get("text").and_then(serde_json::Value::as_str))
                .map(str::to_owned)
        })),
        _ => {}
    };
    for message in parsed.messages.iter().flatten() {
        if let Some(content) = &message.content {
            take(content);
        }
    }
    if let Some(prompt) = &parsed.prompt {
        take(prompt);
    }
    (!texts.is_empty()).then(|| texts.join("\n"))
}

impl Inspection {
    /// The prompt's size of a body `read` (or could not read: then the whole body).
    pub fn prompt_of(inspection: Option<&Inspection>, body: &[u8]) -> PromptSize {
        inspection.map_or_else(|| whole(body), |inspection| inspection.prompt)
    }

    /// Applies the usage splice to `body` (the bytes this inspection read). Once it injected, the
    /// prompt spans locate the members in the body it returned.
    pub fn inject(&mut self, body: &[u8]) -> Injection {
        let injection = match &self.usage_splice {
            Ok(Some(splice)) => splice.apply(body),
            Ok(None) => Injection::NotNeeded,
            Err(reason) => Injection::Declined(reason),
        };
        if let (Injection::Injected(_), Ok(Some(splice)), Some(spans)) =
            (&injection, &self.usage_splice, self.prompt_spans.as_mut())
        {
            spans.moved_by(&splice.range, splice.text.len());
        }
        injection
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Model,
    Stream,
    StreamOptions,
    Messages,
    Prompt,
    Instructions,
    System,
    Input,
    Inputs,
    MaxTokens,
    MaxCompletionTokens,
    MaxOutputTokens,
    NPredict,
    #[serde(other)]
    Other,
}

/// What the walk keeps of the top level: the values it needs borrowed, the prompt measured.
#[derive(Default)]
struct Top<'a> {
    model: Option<&'a RawValue>,
    stream: Seen<'a>,
    options: Seen<'a>,
    /// `None` when `messages` or `prompt` did not have a shape we measure (then the body is
    /// measured whole).
    prompt: Option<PromptSize>,
    /// The prompt members' last values, in [`PROMPT_MEMBERS`] order, when asked for.
    members: [Option<&'a RawValue>; PROMPT_MEMBERS.len()],
    /// The largest output limit named (see [`RequestFacts::max_tokens`]).
    max_tokens: Option<u64>,
}

struct TopVisitor {
    prompt_spans: bool,
}

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        let mut top = Top {
            prompt: Some(PromptSize::default()),
            ..Top::default()
        };
        let (mut messages, mut prompts) = (0, 0);
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::Model => top.model = Some(map.next_value()?),
                TopKey::Stream => top.stream.note(map.next_value()?),
                TopKey::MaxTokens
                | TopKey::MaxCompletionTokens
                | TopKey::MaxOutputTokens
                | TopKey::NPredict => {
                    // Any other value (a float, -1 for "no limit", null) names no limit.
                    let raw: &RawValue = map.next_value()?;
                    if let Ok(limit) = raw.get().parse::<u64>() {
                        top.max_tokens = Some(top.max_tokens.map_or(limit, |seen| seen.max(limit)));
                    }
                }
                TopKey::StreamOptions => top.options.note(map.next_value()?),
                TopKey::Messages | TopKey::Prompt => {
                    let (shape, member) = match key {
                        TopKey::Messages => {
                            messages += 1;
                            (Shape::Messages, members::MESSAGES)
                        }
                        _ => {
                            prompts += 1;
                            (Shape::Prompt, members::PROMPT)
                        }
                    };
                    let measured = if self.prompt_spans {
                        let raw: &RawValue = map.next_value()?;
                        top.members[member] = Some(raw);
                        measure_raw(raw, shape)
                    } else {
                        map.next_value_seed(Measure(shape))?
                    };
                    top.prompt = add(top.prompt, measured);
                }
                TopKey::Instructions | TopKey::System | TopKey::Input | TopKey::Inputs
                    if self.prompt_spans =>
                {
                    let member = match key {
                        TopKey::Instructions => members::INSTRUCTIONS,
                        TopKey::System => members::SYSTEM,
                        TopKey::Input => members::INPUT,
                        _ => members::INPUTS,
                    };
                    top.members[member] = Some(map.next_value()?);
                }
                TopKey::Instructions
                | TopKey::System
                | TopKey::Input
                | TopKey::Inputs
                | TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // A repeated `messages` or `prompt`: which one the backend reads is its parser's choice.
        if messages > 1 || prompts > 1 {
            top.prompt = None;
        }
        Ok(top)
    }
}
