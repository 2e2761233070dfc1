//! The fast path of [`super::classify`]: the Responses API's output deltas and other small events
//! read with the [`Skim`] cursor instead of the serde walk. An event with a `response` object (the
//! lifecycle events, the terminal one with `usage`) and anything outside the skimmer's subset of
//! JSON are handed back (`None`) to the walk, which is the definition (`tests/e2e/dialect_skim.rs`
//! checks both agree).

use super::kind::Kind;
use crate::dialect::skim::Skim;
use crate::dialect::typed;
use crate::dialect::EventSummary;

/// The event's summary, or `None` when the serde walk must decide.
pub(super) fn classify(event: &[u8], data: &[u8]) -> Option<EventSummary> {
    // A response object is read by the walk.
    typed::classify::<Kind>(event, data, &[b"response"], Skim::skip_is_nonempty_string)
}
