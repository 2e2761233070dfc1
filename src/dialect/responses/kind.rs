//! The event types the meter tells apart in a Responses stream, by the event's `type` (or its SSE
//! `event:` name), and what each means to the meter: the one [`EventType`] both readings of an
//! event go by, the serde walk (the definition) and the fast path's skim
//! ([`crate::dialect::typed::classify`]).
use crate::dialect::typed::EventType;
use crate::dialect::EventSummary;

/// The event types the meter tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A delta of generated output.
    Delta,
    /// `response.completed` / `response.incomplete`.
    Finished,
    /// `response.failed`.
    Failed,
    /// `error`.
    Error,
    Other,
}

impl EventType for Kind {
    fn of(name: &[u8]) -> Kind {
        match name {
            b"response.output_text.delta"
            | b"response.refusal.delta"
            | b"response.reasoning_text.delta"
            | b"response.reasoning_summary_text.delta"
            | b"response.function_call_arguments.delta"
            | b"response.custom_tool_call_input.delta" => Kind::Delta,
            b"response.completed" | b"response.incomplete" => Kind::Finished,
            b"response.failed" => Kind::Failed,
            b"error" => Kind::Error,
            _ => Kind::Other,
        }
    }

    fn summary(self, delta: bool) -> EventSummary {
        EventSummary {
            token: self == Kind::Delta && delta,
            error: matches!(self, Kind::Failed | Kind::Error),
            done: matches!(self, Kind::Finished | Kind::Failed),
            ..EventSummary::default()
        }
    }
}
