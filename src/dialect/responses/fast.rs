//! The fast path of [`super::classify`]: the Responses API's output deltas and other small events
//! read with the [`Skim`] cursor instead of the serde walk. An event with a `response` object (the
//! lifecycle events, the terminal one with `usage`) and anything outside the skimmer's subset of
//! JSON are handed back (`None`) to the walk, which is the definition (`tests/e2e/dialect_skim.rs`
//! checks both agree).

use super::kind::Kind;
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
            b"delta" => delta = skim.skip_is_nonempty_string()?,
            // Only `null` here; a response object is read by the walk.
            b"response" => {
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
        usage: None,
        error: matches!(kind, Kind::Failed | Kind::Error),
        done: matches!(kind, Kind::Finished | Kind::Failed),
        ..EventSummary::default()
    })
}
