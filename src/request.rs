//! What a generation request's body says, read in one walk: the facts metering labels with
//! ([`RequestFacts`]), the prompt's size for the router's estimate ([`PromptSize`]), and where
//! `stream_options.include_usage` would go ([`UsageSplice`]) for the meter's usage injection.
//!
//! OpenAI-compatible `POST /v1/chat/completions` and `/v1/completions` bodies are read this way;
//! the meter does it once per request ([`read`]) and every later phase uses the result.
//!
//! Why usage injection needs a splice: chunks are not tokens (REFERENCE.md §1: N_out is
//! `usage.completion_tokens` when the stream carries it), so the meter asks the backend for the
//! usage chunk by setting `stream_options.include_usage` to `true`. The proxy must stay
//! transparent, so that is a *textual* splice of the original bytes, never a re-serialization:
//! key order, whitespace, number spelling and string escapes all stay as the client sent them,
//! and the only difference the backend can observe is `include_usage`. The walk borrows the
//! values it needs as [`RawValue`]s (slices of the input), whose byte offsets locate the splice.
//! Anything we cannot edit with certainty (duplicate keys, unexpected types) is declined and
//! forwarded untouched: a missing usage chunk only costs accuracy, a wrong edit costs the
//! request.
//!
//! The prompt is measured in the same walk, without copying a string: the bytes of every chat
//! message's `content` (a string, or the `text` of its parts) and of the completions `prompt`
//! (string or list of strings; token-id prompts are counted exactly). A body whose `messages` or
//! `prompt` has another shape (or whose body is not JSON) is measured whole: an overestimate by
//! its JSON syntax, never a zero that would route a huge prompt to the decode pool.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

pub mod prefix;
#[cfg(test)]
mod tests;

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
}

/// What a request's prompt is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptSize {
    /// Bytes of prompt text (unescaped UTF-8).
    pub text_bytes: u64,
    /// Tokens given directly as token ids (completions `prompt: [1, 2, 3]`).
    pub token_ids: u64,
}

/// Everything one walk of a body yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub facts: RequestFacts,
    pub prompt: PromptSize,
    /// The edit that asks for usage: `Ok(None)` when none is needed (not a stream, or the client
    /// asked already), `Err` with the reason when the body has a shape we do not edit.
    pub usage_splice: Result<Option<UsageSplice>, &'static str>,
}

/// Reads a body in one walk. `None` when it is not a JSON object; the proxy then forwards it
/// untouched and the backend owns validation. A repeated key takes its last value, as Python's
/// `json` (and so vLLM) does.
pub fn read(body: &[u8]) -> Option<Inspection> {
    // A body that is not UTF-8 is not JSON; one check up front also spares serde_json a check of
    // every string it reads.
    let mut de = serde_json::Deserializer::from_str(std::str::from_utf8(body).ok()?);
    let top = de.deserialize_map(TopVisitor).ok()?;
    de.end().ok()?;
    let facts = RequestFacts {
        model: top
            .model
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok()),
        stream: top.stream.last.is_some_and(|raw| raw.get() == "true"),
        client_asked_usage: top.options.last.and_then(options).is_some_and(|options| {
            options
                .include_usage
                .last
                .is_some_and(|raw| raw.get() == "true")
        }),
    };
    let prompt = match top.prompt {
        Some(prompt) => prompt,
        None => whole(body),
    };
    let usage_splice = plan(body, &top.stream, &top.options);
    Some(Inspection {
        facts,
        prompt,
        usage_splice,
    })
}

/// The facts alone (see [`read`]).
pub fn inspect(body: &[u8]) -> Option<RequestFacts> {
    read(body).map(|inspection| inspection.facts)
}

/// The prompt's size, from [`read`] when the body reads, else the whole body.
pub fn prompt_size(body: &[u8]) -> PromptSize {
    Inspection::prompt_of(read(body).as_ref(), body)
}

fn whole(body: &[u8]) -> PromptSize {
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

/// The outcome of [`inject_include_usage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    /// The body was rewritten to ask for usage; forward this instead (the only change:
    /// `include_usage` set to `true`).
    Injected(Bytes),
    /// Nothing to do: not a stream, or the client already asked for usage.
    NotNeeded,
    /// Injection would change more than the usage chunk (e.g. `continuous_usage_stats: true`
    /// without `include_usage` would then put usage on every chunk), or the body has a shape we do
    /// not rewrite. The reason is for logs.
    Declined(&'static str),
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
        Some(inspection) => inspection.inject(body),
        None => Injection::Declined("body is not a JSON object"),
    }
}

impl Inspection {
    /// The prompt's size of a body `read` (or could not read: then the whole body).
    pub fn prompt_of(inspection: Option<&Inspection>, body: &[u8]) -> PromptSize {
        inspection.map_or_else(|| whole(body), |inspection| inspection.prompt)
    }

    /// Applies the usage splice to `body` (the bytes this inspection read).
    pub fn inject(&self, body: &[u8]) -> Injection {
        match &self.usage_splice {
            Ok(Some(splice)) => splice.apply(body),
            Ok(None) => Injection::NotNeeded,
            Err(reason) => Injection::Declined(reason),
        }
    }
}

const INSERT_STREAM_OPTIONS: &str = r#","stream_options":{"include_usage":true}"#;
const STREAM_OPTIONS_VALUE: &str = r#"{"include_usage":true}"#;
const INCLUDE_USAGE_FIRST: &str = r#""include_usage":true,"#;
const INCLUDE_USAGE_ONLY: &str = r#""include_usage":true"#;

/// Replace `range` of the body with `text` (an empty range inserts): the edit that sets
/// `stream_options.include_usage` to `true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageSplice {
    range: Range<usize>,
    text: &'static str,
}

impl UsageSplice {
    fn insert(at: usize, text: &'static str) -> Self {
        Self {
            range: at..at,
            text,
        }
    }

    fn apply(&self, body: &[u8]) -> Injection {
        let Self { range, text } = self;
        let (Some(head), Some(tail)) = (body.get(..range.start), body.get(range.end..)) else {
            return Injection::Declined("edit outside the body");
        };
        let mut out = Vec::with_capacity(head.len() + text.len() + tail.len());
        out.extend_from_slice(head);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(tail);
        Injection::Injected(Bytes::from(out))
    }
}

/// A key's last value and how many times it appeared (a repeated key is not edited: which copy
/// the backend honours depends on its parser).
#[derive(Debug, Clone, Copy, Default)]
struct Seen<'a> {
    last: Option<&'a RawValue>,
    count: u32,
}

impl<'a> Seen<'a> {
    fn note(&mut self, raw: &'a RawValue) {
        self.last = Some(raw);
        self.count += 1;
    }

    /// The value, `Err` when it appeared more than once.
    fn unique(&self) -> Result<Option<&'a RawValue>, &'static str> {
        if self.count > 1 {
            Err("duplicate key")
        } else {
            Ok(self.last)
        }
    }
}

/// Decides the usage edit from what the walk saw; `Err` is the reason to decline.
fn plan(
    body: &[u8],
    stream: &Seen<'_>,
    options: &Seen<'_>,
) -> Result<Option<UsageSplice>, &'static str> {
    match stream.unique()?.map(RawValue::get) {
        Some("true") => {}
        None | Some("false" | "null") => return Ok(None),
        Some(_) => return Err("\"stream\" is not a boolean"),
    }
    let Some(raw_options) = options.unique()? else {
        // `stream` is present, so the object has a last member to append after.
        return Ok(Some(UsageSplice::insert(
            last_value_end(body)?,
            INSERT_STREAM_OPTIONS,
        )));
    };
    if raw_options.get() == "null" {
        return Ok(Some(UsageSplice {
            range: span(body, raw_options)?,
            text: STREAM_OPTIONS_VALUE,
        }));
    }
    let inner = self::options(raw_options).ok_or("\"stream_options\" is not an object")?;
    let include = inner.include_usage.unique()?;
    if include.is_some_and(|raw| raw.get() == "true") {
        return Ok(None);
    }
    match inner.continuous_usage_stats.unique()?.map(RawValue::get) {
        None | Some("false" | "null") => {}
        Some("true") => return Err("continuous_usage_stats without include_usage"),
        Some(_) => return Err("\"continuous_usage_stats\" is not a boolean"),
    }
    match include {
        Some(raw) if matches!(raw.get(), "false" | "null") => Ok(Some(UsageSplice {
            range: span(body, raw)?,
            text: "true",
        })),
        Some(_) => Err("\"include_usage\" is not a boolean"),
        None => {
            // The raw object starts with its `{` (RawValue excludes leading whitespace).
            let at = span(body, raw_options)?.start + 1;
            let text = if inner.members == 0 {
                INCLUDE_USAGE_ONLY
            } else {
                INCLUDE_USAGE_FIRST
            };
            Ok(Some(UsageSplice::insert(at, text)))
        }
    }
}

/// Where the last top-level value of a body that read as one JSON object ends: just before the
/// whitespace that precedes its closing `}` (a value never ends in whitespace).
fn last_value_end(body: &[u8]) -> Result<usize, &'static str> {
    let close = body
        .iter()
        .rposition(|&byte| byte == b'}')
        .ok_or("no closing brace")?;
    let end = body[..close]
        .iter()
        .rposition(|byte| !byte.is_ascii_whitespace())
        .ok_or("empty object")?;
    if body[end] == b'{' {
        return Err("empty object");
    }
    Ok(end + 1)
}

/// Where a borrowed value sits in the body. Every `RawValue` here is a slice of `body`, so the
/// subtraction is exact; the checks only keep a future change from turning into a panic.
fn span(body: &[u8], raw: &RawValue) -> Result<Range<usize>, &'static str> {
    let text = raw.get();
    let start = (text.as_ptr() as usize)
        .checked_sub(body.as_ptr() as usize)
        .ok_or("value outside the body")?;
    let end = start + text.len();
    if end > body.len() {
        return Err("value outside the body");
    }
    Ok(start..end)
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Model,
    Stream,
    StreamOptions,
    Messages,
    Prompt,
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(field_identifier, rename_all = "snake_case")]
enum OptionKey {
    IncludeUsage,
    ContinuousUsageStats,
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
}

struct TopVisitor;

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
                TopKey::StreamOptions => top.options.note(map.next_value()?),
                TopKey::Messages => {
                    messages += 1;
                    let measured = map.next_value_seed(Measure(Shape::Messages))?;
                    top.prompt = add(top.prompt, measured);
                }
                TopKey::Prompt => {
                    prompts += 1;
                    let measured = map.next_value_seed(Measure(Shape::Prompt))?;
                    top.prompt = add(top.prompt, measured);
                }
                TopKey::Other => {
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

fn add(total: Option<PromptSize>, part: Option<PromptSize>) -> Option<PromptSize> {
    let (total, part) = (total?, part?);
    Some(PromptSize {
        text_bytes: total.text_bytes + part.text_bytes,
        token_ids: total.token_ids + part.token_ids,
    })
}

/// The members of `stream_options` the usage edit needs.
#[derive(Default)]
struct Options<'a> {
    include_usage: Seen<'a>,
    continuous_usage_stats: Seen<'a>,
    members: usize,
}

/// Reads a `stream_options` value; `None` unless it is exactly one object.
fn options(raw: &RawValue) -> Option<Options<'_>> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let options = de.deserialize_map(OptionsVisitor).ok()?;
    de.end().ok()?;
    Some(options)
}

struct OptionsVisitor;

impl<'de> Visitor<'de> for OptionsVisitor {
    type Value = Options<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Options<'de>, A::Error> {
        let mut options = Options::default();
        while let Some(key) = map.next_key::<OptionKey>()? {
            let value: &RawValue = map.next_value()?;
            options.members += 1;
            match key {
                OptionKey::IncludeUsage => options.include_usage.note(value),
                OptionKey::ContinuousUsageStats => options.continuous_usage_stats.note(value),
                OptionKey::Other => {}
            }
        }
        Ok(options)
    }
}

/// The shapes a prompt is measured in.
#[derive(Clone, Copy)]
enum Shape {
    /// Chat `messages`: a list of objects whose `content` is a string or a list of parts.
    Messages,
    /// One message (an object with an optional `content`).
    Message,
    /// A message's `content`: a string, a list of parts, or null.
    Content,
    /// A content part (an object with an optional string `text`).
    Part,
    /// A part's `text`: a string or null.
    Text,
    /// Completions `prompt`: a string, a list of strings, of token ids, or of token-id lists.
    Prompt,
    /// A token-id list inside a list.
    TokenIds,
}

/// Measures a value of `Shape` as it is walked, copying nothing. Any other shape (or a null
/// `messages` / `prompt`, which count as absent) is accepted and skipped, with `None` for
/// "not measurable" so the caller can fall back to the whole body. It never fails the walk on
/// shape, only on JSON syntax.
struct Measure(Shape);

impl<'de> DeserializeSeed<'de> for Measure {
    type Value = Option<PromptSize>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_any(self)
    }
}

fn text(bytes: usize) -> Option<PromptSize> {
    Some(PromptSize {
        text_bytes: bytes as u64,
        token_ids: 0,
    })
}

impl<'de> Visitor<'de> for Measure {
    type Value = Option<PromptSize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt")
    }

    fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
        Ok(match self.0 {
            Shape::Content | Shape::Prompt | Shape::Text => text(value.len()),
            _ => None,
        })
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        // `null` is absent for `messages`, `prompt` and `content` (serde's `Option`).
        Ok(match self.0 {
            Shape::Messages | Shape::Prompt | Shape::Content | Shape::Text => {
                Some(PromptSize::default())
            }
            _ => None,
        })
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        match self.0 {
            Shape::Messages | Shape::Content => {
                let element = match self.0 {
                    Shape::Messages => Shape::Message,
                    _ => Shape::Part,
                };
                let mut total = Some(PromptSize::default());
                while let Some(measured) = seq.next_element_seed(Measure(element))? {
                    total = add(total, measured);
                }
                Ok(total)
            }
            Shape::Prompt => prompt_list(seq),
            Shape::TokenIds => {
                let mut ids = 0u64;
                let mut all_ids = true;
                while let Some(item) = seq.next_element::<serde_json::Value>()? {
                    all_ids &= item.is_u64();
                    ids += 1;
                }
                Ok(all_ids.then_some(PromptSize {
                    text_bytes: 0,
                    token_ids: ids,
                }))
            }
            Shape::Message | Shape::Part | Shape::Text => {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(None)
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (wanted, inner) = match self.0 {
            Shape::Message => ("content", Shape::Content),
            Shape::Part => ("text", Shape::Text),
            _ => {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return Ok(None);
            }
        };
        let mut measured = Some(PromptSize::default());
        let mut seen = 0;
        while let Some(key) = map.next_key::<MemberName<'de>>()? {
            if key.0 == wanted {
                seen += 1;
                measured = map.next_value_seed(Measure(inner))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        // A repeated member is a parse error for the typed reader this replaces.
        Ok(if seen > 1 { None } else { measured })
    }
}

/// A `prompt` list: all strings (texts), all token ids, or all token-id lists; an empty list
/// holds nothing. A mixed list is not measurable.
fn prompt_list<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Option<PromptSize>, A::Error> {
    #[derive(PartialEq)]
    enum Kind {
        Unknown,
        Texts,
        Ids,
        Lists,
        Mixed,
    }
    let mut kind = Kind::Unknown;
    let mut size = PromptSize::default();
    while let Some(item) = seq.next_element_seed(PromptItem)? {
        let item_kind = match item {
            Item::Text(bytes) => {
                size.text_bytes += bytes;
                Kind::Texts
            }
            Item::Id => {
                size.token_ids += 1;
                Kind::Ids
            }
            Item::Ids(Some(ids)) => {
                size.token_ids += ids;
                Kind::Lists
            }
            Item::Ids(None) | Item::Other => Kind::Mixed,
        };
        if kind == Kind::Unknown {
            kind = item_kind;
        } else if kind != item_kind {
            kind = Kind::Mixed;
        }
    }
    Ok((kind != Kind::Mixed).then_some(size))
}

/// One element of a `prompt` list.
enum Item {
    Text(u64),
    Id,
    Ids(Option<u64>),
    Other,
}

struct PromptItem;

impl<'de> DeserializeSeed<'de> for PromptItem {
    type Value = Item;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Item, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PromptItem {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt item")
    }

    fn visit_str<E>(self, value: &str) -> Result<Item, E> {
        Ok(Item::Text(value.len() as u64))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Item, E> {
        Ok(Item::Id)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Item, E> {
        Ok(Item::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Item, E> {
        Ok(Item::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Item, E> {
        Ok(Item::Other)
    }

    fn visit_unit<E>(self) -> Result<Item, E> {
        Ok(Item::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Item, A::Error> {
        let measured = Measure(Shape::TokenIds).visit_seq(seq)?;
        Ok(Item::Ids(measured.map(|size| size.token_ids)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Item::Other)
    }
}

/// An object member's name, unescaped (borrowed when it has no escapes).
struct MemberName<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for MemberName<'de> {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Name<'de>(PhantomData<&'de ()>);
        impl<'de> Visitor<'de> for Name<'de> {
            type Value = MemberName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, name: &'de str) -> Result<Self::Value, E> {
                Ok(MemberName(std::borrow::Cow::Borrowed(name)))
            }
            fn visit_str<E>(self, name: &str) -> Result<Self::Value, E> {
                Ok(MemberName(std::borrow::Cow::Owned(name.to_owned())))
            }
        }
        de.deserialize_str(Name(PhantomData))
    }
}
