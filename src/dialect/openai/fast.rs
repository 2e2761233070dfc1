//! The fast path of [`super::classify`]: the ordinary chunk of an OpenAI-compatible stream read
//! with the [`Skim`] cursor instead of the serde walk (~8x less work per chunk; the
//! `chunk/classify_*` micro benchmarks).
//!
//! It answers for the chunks that make up a stream: content, reasoning and tool-call deltas,
//! completions `text`, `finish_reason`, `usage` (also when vLLM's `continuous_usage_stats` puts
//! it on every chunk) and `error`. Everything else is handed back (`None`) to the serde walk,
//! which is the definition: llama.cpp's `timings` object (its last chunk), a count written as a
//! float or a negative number, a member of an unexpected type where the walk would decode it,
//! and any input outside the skimmer's subset of JSON ([`crate::dialect::skim`]). The lenient rules of
//! the walk are kept member by member, so that whatever this returns, the walk returns too
//! (`tests/e2e/dialect_skim.rs`).

use super::choices::{delta_member, Choices};
use crate::dialect::output;
use crate::dialect::skim::Skim;
use crate::dialect::{EventSummary, Usage};

/// The chunk's summary, or `None` when the serde walk must decide.
pub(super) fn classify(data: &[u8]) -> Option<EventSummary> {
    let mut skim = Skim::new(data);
    skim.enter_object()?;
    let mut choices: Option<Choices> = None;
    let mut usage: Option<Usage> = None;
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
            b"usage" => usage = usage_value(&mut skim)?,
            // Only `null` here; llama.cpp's timings (its last chunk) are read by the walk.
            b"timings" => {
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
        usage,
        usage_only: usage.is_some() && choices.is_some_and(|c| c.empty),
        finish: choices.is_some_and(|c| c.finish),
        error,
        done: false,
        tokens: None,
    })
}

/// The `usage` member, read as the walk's `UsagePick` reads it: `None` unless it is an object
/// with at least one readable count (a repeated key: the last one wins).
fn usage_value(skim: &mut Skim<'_>) -> Option<Option<Usage>> {
    if skim.peek()? != b'{' {
        skim.skip_lenient()?;
        return Some(None);
    }
    skim.enter_object()?;
    let mut usage = Usage::default();
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match name {
            b"prompt_tokens" => usage.prompt_tokens = skim.count()?,
            b"completion_tokens" => usage.completion_tokens = skim.count()?,
            b"prompt_tokens_details" => usage.cached_tokens = cached_tokens(skim)?,
            _ => skim.skip()?,
        }
    }
    let readable = usage.prompt_tokens.is_some() || usage.completion_tokens.is_some();
    Some(readable.then_some(usage))
}

/// `prompt_tokens_details.cached_tokens`; any other shape is none.
fn cached_tokens(skim: &mut Skim<'_>) -> Option<Option<u64>> {
    if skim.peek()? != b'{' {
        return skim.count().map(|_| None);
    }
    skim.enter_object()?;
    let mut cached = None;
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match name {
            b"cached_tokens" => cached = skim.count()?,
            _ => skim.skip()?,
        }
    }
    Some(cached)
}

/// The `choices` member: `Some(None)` when it is not an array (the walk ignores it).
fn choices_value(skim: &mut Skim<'_>) -> Option<Option<Choices>> {
    if skim.peek()? != b'[' {
        skim.skip_lenient()?;
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
            skim.skip_lenient()?;
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
            b"delta" => choice.token |= delta(skim)?,
            b"text" => choice.token |= skim.skip_is_nonempty_string()?,
            b"finish_reason" => choice.finish |= skim.skip_is_non_null()?,
            _ => skim.skip()?,
        }
    }
    Some(choice)
}

/// A chat delta: whether it carries content, reasoning or tool calls.
fn delta(skim: &mut Skim<'_>) -> Option<bool> {
    output::skimmed(skim, delta_member)
}
