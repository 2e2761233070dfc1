//! What a chunk's `choices` say, as both readings of a chunk find it: the serde walk
//! (`openai.rs`, the definition) and the skimming fast path (`fast.rs`) each fill one, and fold a
//! repeated `choices` the same way, and both read a choice's `delta` by the one table of its
//! members. It lives in neither, so that the walk calls the fast path and the fast path needs
//! nothing of the walk.

use crate::dialect::output::Holds;

/// A chat `delta`'s members: output is content, reasoning (both spellings servers use) or tool
/// calls.
pub(super) fn delta_member(name: &[u8]) -> Holds {
    match name {
        b"content" | b"reasoning" | b"reasoning_content" => Holds::Text,
        b"tool_calls" => Holds::List,
        _ => Holds::Nothing,
    }
}

/// What a `choices` array (or one choice) was found to hold.
#[derive(Clone, Copy, Default)]
pub(super) struct Choices {
    pub(super) empty: bool,
    pub(super) token: bool,
    pub(super) finish: bool,
}
