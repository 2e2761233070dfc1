//! The fast path of [`super::classify`]: Anthropic's frequent events (`content_block_delta`,
//! `content_block_start` / `_stop`, `ping`, `message_stop`, `error`) read with the [`Skim`]
//! cursor instead of the serde walk. `message_start` and `message_delta`, which carry a `message`
//! or `usage` object (once per stream), and anything outside the skimmer's subset of JSON are
//! handed back (`None`) to the walk, which is the definition; the walk's lenient rules are kept
//! member by member (`tests/e2e/dialect_skim.rs` checks both agree).

use super::kind::Kind;
use crate::dialect::output::{self, Holds};
use crate::dialect::skim::Skim;
use crate::dialect::EventSummary;

/// The event's summary, or `None` when the serde walk must decide.
pub(super) fn classify(event: &[u8], data: &[u8]) -> Option<EventSummary> {
    let mut skim = Skim::new(data);
    skim.enter_object()?;
    let mut kind = None;
    let mut delta = false;
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match name {
            b"type" => kind = skim.raw_str_or_skip()?.map(Kind::of),
            b"delta" => {
                delta = if skim.peek()? == b'{' {
                    delta_output(&mut skim)?
                } else {
                    skim.skip_lenient()?;
                    false
                };
            }
            // Only `null` here; a usage or message object is read by the walk.
            b"usage" | b"message" => {
                if !skim.null()? {
                    return None;
                }
            }
            _ => skim.skip()?,
        }
    }
    skim.finish()?;
    let kind = kind.unwrap_or_else(|| Kind::of(event));
    Some(EventSummary {
        token: kind == Kind::Delta && delta,
        error: kind == Kind::Error,
        done: kind == Kind::Stop,
        ..EventSummary::default()
    })
}

/// A content block delta: whether it carries non-empty text, thinking or tool-input JSON.
fn delta_output(skim: &mut Skim<'_>) -> Option<bool> {
    output::skimmed(skim, |name| match name {
        b"text" | b"thinking" | b"partial_json" => Holds::Text,
        _ => Holds::Nothing,
    })
}
