//! Request inspection and usage injection for OpenAI-compatible `POST /v1/chat/completions` and
//! `/v1/completions` bodies.
//!
//! The meter needs two things from a request: the facts that label its metrics ([`inspect`]), and
//! a stream that ends with a `usage` chunk, because chunks are not tokens (REFERENCE.md §1: N_out
//! is `usage.completion_tokens` when the stream carries it). [`inject_include_usage`] asks the
//! backend for that chunk by setting `stream_options.include_usage` to `true`.
//!
//! The proxy must stay transparent, so the injection is a *textual* splice of the original bytes,
//! never a re-serialization: key order, whitespace, number spelling and string escapes all stay as
//! the client sent them, and the only difference the backend can observe is `include_usage`. The
//! body is parsed into borrowed [`RawValue`]s (slices of the input), whose byte offsets locate the
//! splice. Anything we cannot edit with certainty (duplicate keys, unexpected types) is declined
//! and forwarded untouched: a missing usage chunk only costs accuracy, a wrong edit costs the
//! request.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

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

/// Reads the facts the meter needs from a request body.
///
/// `None` when the body is not a JSON object; the proxy then forwards it untouched and the backend
/// owns validation. A repeated key takes its last value, as Python's `json` (and so vLLM) does.
pub fn inspect(body: &[u8]) -> Option<RequestFacts> {
    let top = members::<TopKey>(body)?;
    let model =
        last(&top, TopKey::Model).and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
    let stream = last(&top, TopKey::Stream).is_some_and(|raw| raw.get() == "true");
    let client_asked_usage = last(&top, TopKey::StreamOptions)
        .and_then(|raw| members::<OptionKey>(raw.get().as_bytes()))
        .and_then(|options| last(&options, OptionKey::IncludeUsage))
        .is_some_and(|raw| raw.get() == "true");
    Some(RequestFacts {
        model,
        stream,
        client_asked_usage,
    })
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
    match plan(body) {
        Ok(Plan::Splice(edit)) => edit.apply(body),
        Ok(Plan::NotNeeded) => Injection::NotNeeded,
        Err(reason) => Injection::Declined(reason),
    }
}

const INSERT_STREAM_OPTIONS: &str = r#","stream_options":{"include_usage":true}"#;
const STREAM_OPTIONS_VALUE: &str = r#"{"include_usage":true}"#;
const INCLUDE_USAGE_FIRST: &str = r#""include_usage":true,"#;
const INCLUDE_USAGE_ONLY: &str = r#""include_usage":true"#;

enum Plan {
    Splice(Edit),
    NotNeeded,
}

/// Replace `range` of the body with `text` (an empty range inserts).
struct Edit {
    range: Range<usize>,
    text: &'static str,
}

impl Edit {
    fn insert(at: usize, text: &'static str) -> Self {
        Self {
            range: at..at,
            text,
        }
    }

    fn apply(self, body: &[u8]) -> Injection {
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

/// Decides the edit; `Err` is the reason to decline.
fn plan(body: &[u8]) -> Result<Plan, &'static str> {
    let top = members::<TopKey>(body).ok_or("body is not a JSON object")?;
    match unique(&top, TopKey::Stream)?.map(RawValue::get) {
        Some("true") => {}
        None | Some("false" | "null") => return Ok(Plan::NotNeeded),
        Some(_) => return Err("\"stream\" is not a boolean"),
    }
    let Some(options) = unique(&top, TopKey::StreamOptions)? else {
        // `stream` is present, so the object has a last member to append after.
        let last_value = top.last().map(|(_, raw)| *raw).ok_or("empty object")?;
        let at = span(body, last_value)?.end;
        return Ok(Plan::Splice(Edit::insert(at, INSERT_STREAM_OPTIONS)));
    };
    if options.get() == "null" {
        return Ok(Plan::Splice(Edit {
            range: span(body, options)?,
            text: STREAM_OPTIONS_VALUE,
        }));
    }
    let inner = members::<OptionKey>(options.get().as_bytes())
        .ok_or("\"stream_options\" is not an object")?;
    let include = unique(&inner, OptionKey::IncludeUsage)?;
    if include.is_some_and(|raw| raw.get() == "true") {
        return Ok(Plan::NotNeeded);
    }
    match unique(&inner, OptionKey::ContinuousUsageStats)?.map(RawValue::get) {
        None | Some("false" | "null") => {}
        Some("true") => return Err("continuous_usage_stats without include_usage"),
        Some(_) => return Err("\"continuous_usage_stats\" is not a boolean"),
    }
    match include {
        Some(raw) if matches!(raw.get(), "false" | "null") => Ok(Plan::Splice(Edit {
            range: span(body, raw)?,
            text: "true",
        })),
        Some(_) => Err("\"include_usage\" is not a boolean"),
        None => {
            // The raw object starts with its `{` (RawValue excludes leading whitespace).
            let at = span(body, options)?.start + 1;
            let text = if inner.is_empty() {
                INCLUDE_USAGE_ONLY
            } else {
                INCLUDE_USAGE_FIRST
            };
            Ok(Plan::Splice(Edit::insert(at, text)))
        }
    }
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

/// The members of a JSON object in order, keys classified (escaped keys are compared unescaped,
/// as the backend will read them) and values borrowed. `None` unless `json` is exactly one object.
fn members<'a, K: Deserialize<'a>>(json: &'a [u8]) -> Option<Vec<(K, &'a RawValue)>> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let members = de.deserialize_map(Members(PhantomData)).ok()?;
    de.end().ok()?;
    Some(members)
}

/// The value of `key`, `Err` when it appears more than once (which copy the backend honours
/// depends on its parser, so we do not edit such a body).
fn unique<'a, K: PartialEq>(
    members: &[(K, &'a RawValue)],
    key: K,
) -> Result<Option<&'a RawValue>, &'static str> {
    let mut found = members.iter().filter(|(k, _)| *k == key).map(|(_, v)| *v);
    let first = found.next();
    match found.next() {
        None => Ok(first),
        Some(_) => Err("duplicate key"),
    }
}

/// The value of the last `key`, the one a Python backend keeps.
fn last<'a, K: PartialEq>(members: &[(K, &'a RawValue)], key: K) -> Option<&'a RawValue> {
    members
        .iter()
        .rev()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
}

struct Members<K>(PhantomData<K>);

impl<'de, K: Deserialize<'de>> Visitor<'de> for Members<K> {
    type Value = Vec<(K, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8).min(64));
        while let Some(key) = map.next_key::<K>()? {
            members.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(members)
    }
}
