//! What counts as output in a delta object (an OpenAI chat `delta`, an Anthropic content block
//! `delta`, an Ollama `message`): some member holds a non-empty string, or a non-empty list of
//! tool calls. Every API judges its deltas this way and only the member names differ, so the rule
//! is written once here for both readings of an event, the serde walk ([`Output`]) and the
//! skimming fast path ([`skimmed`]).

use std::marker::PhantomData;

use serde::de::MapAccess;
use serde::Deserialize;

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

/// The member names of a delta object (a serde key enum), each saying what its value [`Holds`].
pub(super) trait OutputKey {
    fn holds(&self) -> Holds;
}

/// The walk's pick of a delta object keyed by `K`: `true` when some member holds output.
pub(super) struct Output<K>(PhantomData<fn() -> K>);

impl<K> Output<K> {
    pub(super) fn pick() -> Self {
        Output(PhantomData)
    }
}

impl<'de, K: OutputKey + Deserialize<'de>> Pick<'de> for Output<K> {
    type Out = bool;

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        walk::members(map, false, |output, key: K, map| {
            match key.holds() {
                Holds::Text => *output |= is_nonempty_string(map.next_value()?),
                Holds::List => *output |= is_nonempty_array(map.next_value()?),
                Holds::Nothing => walk::skip(map)?,
            }
            Ok(())
        })
    }
}

/// The fast path's reading of a delta, as the walk reads it with `Lenient(Output)`: whether the
/// object holds output, `holds` naming its members as the dialect's [`OutputKey`] does; `null`, a
/// boolean or an array is nothing. `None` when the walk must decide (a string or a number among
/// them, see [`Skim::skip_lenient`]).
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
