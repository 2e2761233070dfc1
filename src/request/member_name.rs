//! The name of an object member as every walk of a body reads it: unescaped, and borrowed from
//! the body when it has no escapes. The prompt's measure (`measure.rs`) and prefix affinity
//! (`prefix.rs`) both key their maps by it, and the top-level walk (`request.rs`) calls them, so it
//! is in a file of its own rather than in the walk's.
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;

/// An object member's name, unescaped (borrowed when it has no escapes).
pub(crate) struct MemberName<'de>(pub(crate) std::borrow::Cow<'de, str>);

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
