//! The NVIDIA Triton generate extension (`POST /v2/models/<model>[/versions/<v>]/generate_stream`).
//!
//! One SSE event per response of the model, `data: {"model_name":..,"model_version":..,
//! "text_output":"..."}` (plus any other output tensors); no usage, no `[DONE]`.
//! - **Token event**: a non-empty `text_output` (a string, or a non-empty array for batched
//!   string tensors). How many tokens a response holds is not said.
//! - **Usage**: none; the meter counts token events.
//! - **Error**: a non-null `error` (Triton sends `{"error": "..."}` once the 200 is out).
//! - **End**: none in band; the body's end.
//!
//! The model is named by the path, not the payload ([`super::Dialect::model_from_path`]).

use serde::de::MapAccess;
use serde_json::value::RawValue;

use super::event::EventSummary;
use super::walk::{self, is_non_null, is_nonempty_array, is_nonempty_string, keys, Pick};

/// Classifies the `data` of one event.
pub fn classify(data: &[u8]) -> EventSummary {
    let Some((token, error)) = walk::parse(data, TopPick) else {
        return EventSummary::default();
    };
    EventSummary {
        token,
        error,
        ..EventSummary::default()
    }
}

keys! { enum TopKey { TextOutput, Error } }

/// `(token, error)`.
struct TopPick;

impl<'de> Pick<'de> for TopPick {
    type Out = (bool, bool);

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<(bool, bool), A::Error> {
        walk::members(map, (false, false), |(token, error), key: TopKey, map| {
            match key {
                TopKey::TextOutput => {
                    let raw: &RawValue = map.next_value()?;
                    *token |= is_nonempty_string(raw) || is_nonempty_array(raw);
                }
                TopKey::Error => *error = is_non_null(map.next_value()?),
                TopKey::Other => walk::skip(map)?,
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
