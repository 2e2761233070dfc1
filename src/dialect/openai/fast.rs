//! The fast path of [`super::classify`]: the ordinary chunk of an OpenAI-compatible stream read
//! with the [`Skim`] cursor instead of the serde walk (~8x less work per chunk; the
//! `chunk/classify_*` micro benchmarks).
//!
//! It answers for the chunks that make up a stream: content, reasoning and tool-call deltas,
//! completions `text`, `finish_reason`, `"usage": null` and `error`. Everything else is handed
//! back (`None`) to the serde walk, which is the definition: a `usage` or `timings` object (one
//! chunk per stream), a member of an unexpected type where the walk would look inside it, and any
//! input outside the skimmer's subset of JSON ([`crate::dialect::skim`]). The lenient rules of
//! the walk are kept member by member, so that whatever this returns, the walk returns too
//! (`tests/dialect_skim.rs`).

use super::{Choices, EventSummary};
use crate::dialect::skim::Skim;

/// The chunk's summary, or `None` when the serde walk must decide.
pub(super) fn classify(data: &[u8]) -> Option<EventSummary> {
    let mut skim = Skim::new(data);
    skim.enter_object()?;
    let mut choices: Option<Choices> = None;
    let mut error = false;
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match name {
            b"choices" => {
                if let Some(found) = choices_value(&mut skim)? {
                    // Repeated `choices` fold as in the walk.
                    let previous = choices.unwrap_or(Choices {
                        empty: true,
                        ..Choices::default()
                    });
                    choices = Some(Choices {
                        empty: previous.empty && found.empty,
                        token: previous.token || found.token,
                        finish: previous.finish || found.finish,
                    });
                }
            }
            // Only `null` here; a usage object is read by the walk.
            b"usage" | b"timings" => {
                if !skim.null()? {
                    return None;
                }
            }
            b"error" => error = skim.skip_is_non_null()?,
            _ => skim.skip()?,
        }
    }
    skim.finish()?;
    Some(EventSummary {
        token: choices.is_some_and(|c| c.token),
        usage: None,
        usage_only: false,
        finish: choices.is_some_and(|c| c.finish),
        error,
        done: false,
        tokens: None,
    })
}

/// Where the walk runs a lenient pick on a value: an array or object goes to the pick, `null`
/// and booleans mean "nothing here", and a string or number (which the walk decodes, with
/// checks the skimmer does not repeat) is handed back.
fn lenient_scalar(skim: &mut Skim<'_>) -> Option<()> {
    match skim.peek()? {
        b'n' | b't' | b'f' | b'{' | b'[' => skim.skip(),
        _ => None,
    }
}

/// The `choices` member: `Some(None)` when it is not an array (the walk ignores it).
fn choices_value(skim: &mut Skim<'_>) -> Option<Option<Choices>> {
    if skim.peek()? != b'[' {
        lenient_scalar(skim)?;
        return Some(None);
    }
    skim.enter_array()?;
    let mut choices = Choices {
        empty: true,
        ..Choices::default()
    };
    let mut first = true;
    while skim.next_element(&mut first)? {
        choices.empty = false;
        if skim.peek()? == b'{' {
            let choice = choice(skim)?;
            choices.token |= choice.token;
            choices.finish |= choice.finish;
        } else {
            lenient_scalar(skim)?;
        }
    }
    Some(Some(choices))
}

/// One choice object: its `delta`, `text` and `finish_reason`.
fn choice(skim: &mut Skim<'_>) -> Option<Choices> {
    skim.enter_object()?;
    let mut choice = Choices::default();
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match name {
            b"delta" => {
                if skim.peek()? == b'{' {
                    choice.token |= delta(skim)?;
                } else {
                    lenient_scalar(skim)?;
                }
            }
            b"text" => choice.token |= skim.skip_is_nonempty_string()?,
            b"finish_reason" => choice.finish |= skim.skip_is_non_null()?,
            _ => skim.skip()?,
        }
    }
    Some(choice)
}

/// A chat delta: whether it carries content, reasoning or tool calls.
fn delta(skim: &mut Skim<'_>) -> Option<bool> {
    skim.enter_object()?;
    let mut token = false;
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match name {
            b"content" | b"reasoning" | b"reasoning_content" => {
                token |= skim.skip_is_nonempty_string()?;
            }
            b"tool_calls" => token |= skim.skip_is_nonempty_array()?,
            _ => skim.skip()?,
        }
    }
    Some(token)
}
