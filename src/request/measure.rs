//! Measuring a prompt as it is walked, copying nothing: the bytes of its text, and its token ids
//! ([`PromptSize`], defined here with its measure: the walk in `request.rs` calls this file, and
//! this file needs nothing of the walk).
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::member_name::MemberName;

/// What a request's prompt is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptSize {
    /// Bytes of prompt text (unescaped UTF-8).
    pub text_bytes: u64,
    /// Tokens given directly as token ids (completions `prompt: [1, 2, 3]`).
    pub token_ids: u64,
}

/// Measures a value already borrowed from the body (see [`super::Read::with_prompt_spans`]).
pub(super) fn measure_raw(raw: &RawValue, shape: Shape) -> Option<PromptSize> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    // The value was read as valid JSON already, and measuring never fails on shape.
    Measure(shape).deserialize(&mut de).ok().flatten()
}

pub(super) fn add(total: Option<PromptSize>, part: Option<PromptSize>) -> Option<PromptSize> {
    let (total, part) = (total?, part?);
    Some(PromptSize {
        text_bytes: total.text_bytes + part.text_bytes,
        token_ids: total.token_ids + part.token_ids,
    })
}

/// The shapes a prompt is measured in.
#[derive(Clone, Copy)]
pub(super) enum Shape {
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
pub(super) struct Measure(pub(super) Shape);

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
