//! What counts as output in a delta object (an OpenAI chat `delta`, an Anthropic content block
//! `delta`, an Ollama `message`): some member holds a non-empty string, or a non-empty list of
//! tool calls. Every API judges its deltas this way and only the member names differ, so the rule
//! is written once here for both readings of an event, the serde walk ([`Output`]) and the
//! skimming fast path ([`skimmed`]), and each API names its delta members once, in a table of
//! names that both readings are given.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::skim::Skim;
use super::walk::{self, is_nonempty_array, is_nonempty_string, Pick};

/// What the value of a delta object's member is, when it is output.
pub(super) enum Holds {
    /// Text: output when it is a non-empty string.
    Text,
    /// A list (tool calls): output when it is a non-empty array.
    List,
    /// Not output: skipped unread.
    Nothing,
}

/// The walk's pick of a delta object: `true` when some member holds output. `.0` is the
/// dialect's table of its delta members (what the value of the member of a given name
/// [`Holds`]), the one the fast path consults too ([`skimmed`]), so the two readings cannot
/// disagree on which member is output.
pub(super) struct Output<T>(pub(super) T);

impl<'de, T: Fn(&[u8]) -> Holds + Copy> Pick<'de> for Output<T> {
    type Out = bool;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        walk::members_read_by(map, Name(self.0), false, |output, holds, map| {
            match holds {
                Holds::Text => *output |= is_nonempty_string(map.next_value()?),
                Holds::List => *output |= is_nonempty_array(map.next_value()?),
                Holds::Nothing => walk::skip(map)?,
            }
            Ok(())
        })
    }
}

/// A member name read into what the table says its value holds. The name is decoded as a serde
/// key enum decodes it (escapes and all), so the table matches where a key enum would.
#[derive(Clone, Copy)]
struct Name<T>(T);

impl<'de, T: Fn(&[u8]) -> Holds> DeserializeSeed<'de> for Name<T> {
    type Value = Holds;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Holds, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<T: Fn(&[u8]) -> Holds> Visitor<'_> for Name<T> {
    type Value = Holds;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Holds, E> {
        Ok((self.0)(name.as_bytes()))
    }

    fn visit_bytes<E>(self, name: &[u8]) -> Result<Holds, E> {
        Ok((self.0)(name))
    }
}

/// The fast path's reading of a delta, as the walk reads it with `Lenient(Output)`: whether the
/// object holds output, `holds` naming its members (the table the walk's [`Output`] is given);
/// `null`, a boolean or an array is nothing. `None` when the walk must decide (a string or a
/// number among them, see [`Skim::skip_lenient`]).
pub(super) fn skimmed(skim: &mut Skim<'_>, holds: impl Fn(&[u8]) -> Holds) -> Option<bool> {
    if skim.peek()? != b'{' {
        skim.skip_lenient()?;
        return Some(false);
    }
    skim.enter_object()?;
    let mut output = false;
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match holds(name) {
            Holds::Text => output |= skim.skip_is_nonempty_string()?,
            Holds::List => output |= skim.skip_is_nonempty_array()?,
            Holds::Nothing => skim.skip()?,
        }
    }
    Some(output)
}
