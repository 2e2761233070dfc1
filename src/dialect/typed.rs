//! The dialects whose events name their type in a `type` member (Anthropic Messages, OpenAI
//! Responses): what a dialect's event types must say ([`EventType`]), and the fast path's skim of
//! such an event ([`classify`]): the type, whether the `delta` holds output, and which members only
//! the serde walk reads. Both APIs' frequent events are read this way; what each type means is each
//! dialect's `Kind`.

use serde_json::value::RawValue;

use super::skim::Skim;
use super::walk;
use super::EventSummary;

/// The event types a dialect tells apart, by the event's `type` (or its SSE `event:` name), and
/// what each means to the meter.
pub(super) trait EventType: Sized {
    /// The type an event's name stands for.
    fn of(name: &[u8]) -> Self;

    /// What an event of this type means to the meter, its `delta` holding output or not; the
    /// usage, where an event carries any, is the walk's to add.
    fn summary(self, delta: bool) -> EventSummary;

    /// The type named by a raw JSON string (`None` when the value is not a plain string).
    fn of_raw(raw: &RawValue) -> Option<Self> {
        walk::raw_str(raw).map(|name| Self::of(name.as_bytes()))
    }
}

/// The fast path of a typed event whose SSE `event:` name is `event`: skims `type`, `delta` (read
/// by `delta`), and the `walked` members, objects only the serde walk reads (usage, once per
/// stream), which may only be `null` here; every other member is skipped. `None` when the walk
/// must decide.
pub(super) fn classify<'a, K: EventType>(
    event: &[u8],
    data: &'a [u8],
    walked: &[&[u8]],
    delta: impl Fn(&mut Skim<'a>) -> Option<bool>,
) -> Option<EventSummary> {
    let mut skim = Skim::new(data);
    skim.enter_object()?;
    let mut kind = None;
    let mut output = false;
    let mut first = true;
    while let Some(name) = skim.next_member(&mut first)? {
        match name {
            b"type" => kind = skim.raw_str_or_skip()?,
            b"delta" => output = delta(&mut skim)?,
            name if walked.contains(&name) => {
                if !skim.null()? {
                    return None;
                }
            }
            _ => skim.skip()?,
        }
    }
    skim.finish()?;
    Some(K::of(kind.unwrap_or(event)).summary(output))
}
