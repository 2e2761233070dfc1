//! The fast path of [`super::classify`]: Anthropic's frequent events (`content_block_delta`,
//! `content_block_start` / `_stop`, `ping`, `message_stop`, `error`) read with the [`Skim`]
//! cursor instead of the serde walk. `message_start` and `message_delta`, which carry a `message`
//! or `usage` object (once per stream), and anything outside the skimmer's subset of JSON are
//! handed back (`None`) to the walk, which is the definition; the walk's lenient rules are kept
//! member by member (`tests/e2e/dialect_skim.rs` checks both agree).

use super::kind::Kind;
use crate::dialect::output::{self, Holds};
use crate::dialect::skim::Skim;
use crate::dialect::{typed, EventSummary};

/// The event's summary, or `None` when the serde walk must decide.
pub(super) fn classify(event: &[u8], data: &[u8]) -> Option<EventSummary> {
    // A usage or message object is read by the walk.
    typed::classify::<Kind>(event, data, &[b"usage", b"message"], |skim| {
        if skim.peek()? == b'{' {
            delta_output(skim)
        } else {
            skim.skip_lenient()?;
            Some(false)
        }
    })
}

/// A content block delta: whether it carries non-empty text, thinking or tool-input JSON.
fn delta_output(skim: &mut Skim<'_>) -> Option<bool> {
    output::skimmed(skim, |name| match name {
        b"text" | b"thinking" | b"partial_json" => Holds::Text,
        _ => Holds::Nothing,
    })
}
