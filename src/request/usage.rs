//! The usage splice: the minimal textual edit that asks a backend for the usage chunk.
//!
//! Why a splice: chunks are not tokens (REFERENCE.md §1: N_out is `usage.completion_tokens` when
//! the stream carries it), so the meter asks the backend for the usage chunk by setting
//! `stream_options.include_usage` to `true`. The proxy must stay transparent, so that is a
//! *textual* splice of the original bytes, never a re-serialization: key order, whitespace,
//! number spelling and string escapes all stay as the client sent them, and the only difference
//! the backend can observe is `include_usage`. The one walk ([`super::read`]) borrows the values
//! it needs as [`RawValue`]s, whose byte offsets locate the splice. Anything we cannot edit with
//! certainty (duplicate keys, unexpected types) is declined and forwarded untouched: a missing
//! usage chunk only costs accuracy, a wrong edit costs the request.
//!
//! Applying the splice a read found ([`super::Inspection::inject`], [`super::inject_include_usage`])
//! is the walk's, in `request.rs`: the walk calls this file to find the edit, and this file needs
//! nothing of the walk.
use std::fmt;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The outcome of [`super::inject_include_usage`].
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

const INSERT_STREAM_OPTIONS: &str = r#","stream_options":{"include_usage":true}"#;
const STREAM_OPTIONS_VALUE: &str = r#"{"include_usage":true}"#;
const INCLUDE_USAGE_FIRST: &str = r#""include_usage":true,"#;
const INCLUDE_USAGE_ONLY: &str = r#""include_usage":true"#;

/// Replace `range` of the body with `text` (an empty range inserts): the edit that sets
/// `stream_options.include_usage` to `true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageSplice {
    pub(super) range: Range<usize>,
    pub(super) text: &'static str,
}

impl UsageSplice {
    fn insert(at: usize, text: &'static str) -> Self {
        Self {
            range: at..at,
            text,
        }
    }

    pub(super) fn apply(&self, body: &[u8]) -> Injection {
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
pub(super) struct Seen<'a> {
    pub(super) last: Option<&'a RawValue>,
    count: u32,
}

impl<'a> Seen<'a> {
    pub(super) fn note(&mut self, raw: &'a RawValue) {
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
pub(super) fn usage_edit(
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
pub(super) fn span(body: &[u8], raw: &RawValue) -> Result<Range<usize>, &'static str> {
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
enum OptionKey {
    IncludeUsage,
    ContinuousUsageStats,
    #[serde(other)]
    Other,
}

/// The members of `stream_options` the usage edit needs.
#[derive(Default)]
pub(super) struct Options<'a> {
    pub(super) include_usage: Seen<'a>,
    continuous_usage_stats: Seen<'a>,
    members: usize,
}

/// Reads a `stream_options` value; `None` unless it is exactly one object.
pub(super) fn options(raw: &RawValue) -> Option<Options<'_>> {
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
