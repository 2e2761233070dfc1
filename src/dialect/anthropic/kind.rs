//! The event types the meter tells apart in an Anthropic Messages stream, by the event's `type`
//! (or its SSE `event:` name), and what each means to the meter: the one [`EventType`] both
//! readings of an event go by, the serde walk (the definition) and the fast path's skim
//! ([`crate::dialect::typed::classify`]).
use crate::dialect::typed::EventType;
use crate::dialect::EventSummary;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    MessageStart,
    Delta,
    MessageDelta,
    Stop,
    Error,
    Other,
}

impl EventType for Kind {
    fn of(name: &[u8]) -> Kind {
        match name {
            b"message_start" => Kind::MessageStart,
            b"content_block_delta" => Kind::Delta,
            b"message_delta" => Kind::MessageDelta,
            b"message_stop" => Kind::Stop,
            b"error" => Kind::Error,
            _ => Kind::Other,
        }
    }

    fn summary(self, delta: bool) -> EventSummary {
        EventSummary {
            token: self == Kind::Delta && delta,
            error: self == Kind::Error,
            done: self == Kind::Stop,
            ..EventSummary::default()
        }
    }
}
