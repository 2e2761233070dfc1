//! The zero-allocation JSON walk every dialect classifier is built on.
//!
//! A classifier runs once per streamed event, so it must not build a `serde_json::Value`: it
//! walks the payload with serde visitors that keep a few booleans and counters. A [`Pick`] says
//! what to extract from a value of the expected shape; [`Lenient`] runs it on any value and turns
//! every other shape into "nothing here" (`Out::default()`), so one quirky field (a count sent as a
//! string, `null` where an object was expected) cannot discard the whole event. Strings are never
//! decoded: they are borrowed as [`RawValue`]s (slices of the input) and compared in their quoted
//! form, so a key or value spelled with escapes simply does not match.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Walks a whole JSON document with `pick`. `None` when the bytes are not one JSON value (a
/// syntax error, or trailing garbage after the value).
pub(super) fn parse<'de, P: Pick<'de>>(data: &'de [u8], pick: P) -> Option<P::Out> {
    // One UTF-8 check of the whole event is cheaper than serde_json's check of every key and
    // string it borrows from a byte slice (a `StrRead` trusts its input; measured with callgrind,
    // docs/performance.md). Bytes that are not UTF-8 keep the byte reader, which still accepts
    // them inside strings it only skips, so the result is the same either way.
    match std::str::from_utf8(data) {
        Ok(text) => walk(serde_json::Deserializer::from_str(text), pick),
        Err(_) => walk(serde_json::Deserializer::from_slice(data), pick),
    }
}

fn walk<'de, R, P>(mut de: serde_json::Deserializer<R>, pick: P) -> Option<P::Out>
where
    R: serde_json::de::Read<'de>,
    P: Pick<'de>,
{
    let out = Lenient(pick).deserialize(&mut de).ok()?;
    // Trailing garbage means this is not the JSON document we think it is.
    de.end().ok()?;
    Some(out)
}

/// A string value with at least one character. The raw text of a JSON string is its quoted,
/// still-escaped form, so `""` is the only raw string that decodes to the empty string.
pub(super) fn is_nonempty_string(raw: &RawValue) -> bool {
    let text = raw.get().as_bytes();
    text.first() == Some(&b'"') && text.len() > 2
}

/// An array with at least one element (`[]` and `[ ]` are empty; `[[]]` is not).
pub(super) fn is_nonempty_array(raw: &RawValue) -> bool {
    match raw.get().as_bytes().split_first() {
        Some((b'[', rest)) => rest.trim_ascii_start().first() != Some(&b']'),
        _ => false,
    }
}

/// The text of a JSON string as written, quotes removed (escapes kept). Event type names are
/// plain ASCII identifiers, which servers never escape, so this is enough to match them.
pub(super) fn raw_str(raw: &RawValue) -> Option<&str> {
    raw.get().strip_prefix('"')?.strip_suffix('"')
}

/// The value is present and not `null` (how servers signal an error member).
pub(super) fn is_non_null(raw: &RawValue) -> bool {
    raw.get() != "null"
}

/// Declares the member names a pick reads: a serde key enum of the given variants (each the
/// `snake_case` spelling of its name, unless a `#[serde(rename = ...)]` says otherwise) plus an
/// `Other` that stands for every other name, so a member the pick does not want is read as
/// `Other` and [`skip`]ped rather than failing the walk. Every dialect reads its objects under
/// this one policy; the macro states it once.
///
/// ```ignore
/// keys! {
///     /// The members of the top-level object.
///     enum TopKey { Content, Stop }
/// }
/// ```
macro_rules! keys {
    ($(#[$attr:meta])* enum $name:ident { $($(#[$variant_attr:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$attr])*
        #[derive(serde::Deserialize)]
        #[serde(field_identifier, rename_all = "snake_case")]
        enum $name {
            $($(#[$variant_attr])* $variant,)+
            #[serde(other)]
            Other,
        }
    };
}
pub(super) use keys;

/// Walks an object member by member, the one loop of every pick of an object: `read` is handed
/// each key (an enum whose `#[serde(other)]` variant stands for every key the pick does not
/// want) with the map to read its value from, and fills `out`; it must read or [`skip`] exactly
/// one value per key. A repeated key is simply read again.
pub(super) fn members<'de, K, A, O>(
    map: A,
    out: O,
    read: impl FnMut(&mut O, K, &mut A) -> Result<(), A::Error>,
) -> Result<O, A::Error>
where
    K: Deserialize<'de>,
    A: MapAccess<'de>,
{
    members_read_by(map, PhantomData::<K>, out, read)
}

/// [`members`] with each key read by `seed` instead of a key enum: for a table of names that
/// the fast path reads too (see [`super::output`]).
pub(super) fn members_read_by<'de, S, A, O>(
    mut map: A,
    seed: S,
    mut out: O,
    mut read: impl FnMut(&mut O, S::Value, &mut A) -> Result<(), A::Error>,
) -> Result<O, A::Error>
where
    S: DeserializeSeed<'de> + Copy,
    A: MapAccess<'de>,
{
    while let Some(key) = map.next_key_seed(seed)? {
        read(&mut out, key, &mut map)?;
    }
    Ok(out)
}

/// What an object is read into, member by member: `Self` starts as `Self::default()` and each
/// member keyed by a [`Key`](Members::Key) is handed to [`member`](Members::member). Its pick
/// is [`Object`], so a struct that says how its members are read needs no pick of its own.
pub(super) trait Members<'de>: Default {
    /// The member names worth reading: an enum whose `#[serde(other)]` variant stands for every
    /// other name.
    type Key: Deserialize<'de>;

    /// Reads the value of the member `key`, or [`skip`]s it: exactly one value per key.
    fn member<A: MapAccess<'de>>(&mut self, key: Self::Key, map: &mut A) -> Result<(), A::Error>;
}

/// The pick of an object read into `T` (see [`Members`]); any other shape is `T::default()`.
pub(super) struct Object<T>(PhantomData<fn() -> T>);

impl<T> Object<T> {
    pub(super) fn pick() -> Self {
        Object(PhantomData)
    }
}

impl<'de, T: Members<'de>> Pick<'de> for Object<T> {
    type Out = T;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        members(map, T::default(), |out, key, map| out.member(key, map))
    }
}

/// Skips the value of a member the pick does not want, unread.
pub(super) fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

/// One level of the walk: what to extract when the value has the expected shape. Every other
/// shape yields `Out::default()` (see [`Lenient`]).
pub(super) trait Pick<'de>: Sized {
    type Out: Default;

    fn u64(self, _value: u64) -> Self::Out {
        Self::Out::default()
    }

    fn bool(self, _value: bool) -> Self::Out {
        Self::Out::default()
    }

    fn f64(self, _value: f64) -> Self::Out {
        Self::Out::default()
    }

    fn seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Out, A::Error> {
        IgnoredAny.visit_seq(seq).map(|_| Self::Out::default())
    }

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error> {
        IgnoredAny.visit_map(map).map(|_| Self::Out::default())
    }
}

/// Runs a [`Pick`] on any JSON value: the expected shape goes to the pick, every other shape is
/// consumed and gives the default, so a wrong type is "nothing here" rather than a parse error.
pub(super) struct Lenient<P>(pub(super) P);

impl<'de, P: Pick<'de>> DeserializeSeed<'de> for Lenient<P> {
    type Value = P::Out;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<P::Out, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, P: Pick<'de>> Visitor<'de> for Lenient<P> {
    type Value = P::Out;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_bool<E>(self, value: bool) -> Result<P::Out, E> {
        Ok(self.0.bool(value))
    }

    fn visit_i64<E>(self, _value: i64) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_u64<E>(self, value: u64) -> Result<P::Out, E> {
        Ok(self.0.u64(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<P::Out, E> {
        Ok(self.0.f64(value))
    }

    fn visit_str<E>(self, _value: &str) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<P::Out, A::Error> {
        self.0.seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<P::Out, A::Error> {
        self.0.map(map)
    }
}

/// A token count: a non-negative integer that fits in `u64`. serde_json hands larger integers,
/// fractions and negative numbers to other visit methods, which give `None`.
pub(super) struct Count;

impl Pick<'_> for Count {
    type Out = Option<u64>;

    fn u64(self, value: u64) -> Option<u64> {
        Some(value)
    }
}

/// A duration in milliseconds (a non-negative number, integer or not) as whole microseconds; any
/// other shape is `None`.
pub(super) struct Millis;

impl Pick<'_> for Millis {
    type Out = Option<u64>;

    fn u64(self, value: u64) -> Option<u64> {
        Some(value.saturating_mul(1000))
    }

    fn f64(self, value: f64) -> Option<u64> {
        (value.is_finite() && value >= 0.0).then(|| (value * 1000.0).round() as u64)
    }
}

/// A boolean flag; any other shape is `None`.
pub(super) struct Flag;

impl Pick<'_> for Flag {
    type Out = Option<bool>;

    fn bool(self, value: bool) -> Option<bool> {
        Some(value)
    }
}

/// An object of which only its `usage` member matters — a whole non-streaming answer (OpenAI,
/// Responses, Anthropic), Anthropic's `message_start.message`, the Responses API's final
/// `response`: `usage` is read with the inner pick, every other member (the generated text above
/// all) is skipped unread. A repeated `usage` key: the last one wins.
pub(super) struct UsageMember<P>(pub(super) P);

keys! {
    enum UsageMemberKey { Usage }
}

impl<'de, P: Pick<'de> + Copy> Pick<'de> for UsageMember<P> {
    type Out = P::Out;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<P::Out, A::Error> {
        members(map, P::Out::default(), |out, key: UsageMemberKey, map| {
            match key {
                UsageMemberKey::Usage => *out = map.next_value_seed(Lenient(self.0))?,
                UsageMemberKey::Other => skip(map)?,
            }
            Ok(())
        })
    }
}
