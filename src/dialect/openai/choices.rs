//! What a chunk's `choices` say, as both readings of a chunk find it: the serde walk
//! (`openai.rs`, the definition) and the skimming fast path (`fast.rs`) each fill one, and fold a
//! repeated `choices` the same way. It lives in neither, so that the walk calls the fast path and
//! the fast path needs nothing of the walk.

/// What a `choices` array (or one choice) was found to hold.
#[derive(Clone, Copy, Default)]
pub(super) struct Choices {
    pub(super) empty: bool,
    pub(super) token: bool,
    pub(super) finish: bool,
}
