//! The body of a non-streaming response (`"stream": false`: one `application/json` answer), kept
//! while it passes so that its `usage` can be read once it is complete.
//!
//! A non-streaming answer has no token events, so its only token counts are in its `usage`
//! (REFERENCE §1: N_in / N_out come from usage), and usage sits anywhere in one JSON object, so
//! the object must be whole before it can be read. The frames are kept as `Bytes` clones (a
//! reference count, not a copy) while every one of them is still forwarded at once, unchanged;
//! at the clean end of the body [`WholeBody::usage`] parses it once with the dialect's reader
//! ([`Dialect::body_usage`]). A body split into several frames is joined into one buffer for that
//! single parse (the readers borrow from one slice).
//!
//! Kept only up to [`MAX_WHOLE_BODY`] bytes: a longer body is still forwarded whole, but it is
//! dropped from memory the moment it passes the bound and yields no token counts at all (E2E and
//! the outcome are still recorded), so a huge answer cannot make the proxy hold unbounded memory.
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::{HeaderMap, StatusCode};

use crate::dialect::{media_type, Dialect, Usage};

/// The largest non-streaming body whose usage is read (4 MiB: far above any chat answer's JSON,
/// small enough to hold per request). Past it the body passes through uncounted.
pub const MAX_WHOLE_BODY: usize = 4 * 1024 * 1024;

/// The frames of one non-streaming response body, kept up to a bound.
#[derive(Debug)]
pub struct WholeBody {
    frames: Vec<Bytes>,
    len: usize,
    limit: usize,
    /// The body passed `limit`: nothing is kept any more and no usage will be read.
    over: bool,
}

impl WholeBody {
    /// A collector bounded by [`MAX_WHOLE_BODY`].
    pub fn new() -> Self {
        Self::with_limit(MAX_WHOLE_BODY)
    }

    /// A collector bounded by `limit` bytes (tests use small bounds).
    pub(crate) fn with_limit(limit: usize) -> Self {
        Self {
            frames: Vec::new(),
            len: 0,
            limit,
            over: false,
        }
    }

    /// `Some` when a response's usage is worth reading at its end: a success (an error body
    /// carries no usage) of a known dialect (an unknown API's JSON means nothing to us) whose
    /// content type is `application/json` (with or without parameters; never a stream framing)
    /// and which is not content-encoded (a compressed body is not JSON to a reader of bytes).
    pub(crate) fn for_response(
        dialect: Dialect,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<WholeBody> {
        if !status.is_success() || dialect == Dialect::Unknown {
            return None;
        }
        let json = headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| media_type(value).eq_ignore_ascii_case("application/json"));
        let encoded = headers.get(CONTENT_ENCODING).is_some_and(|value| {
            !value
                .to_str()
                .is_ok_and(|coding| coding.trim().eq_ignore_ascii_case("identity"))
        });
        (json && !encoded).then(WholeBody::new)
    }

    /// Keeps one forwarded frame (a reference-count bump). Past the bound, drops everything kept
    /// so far and keeps nothing more.
    pub fn keep(&mut self, frame: &Bytes) {
        if self.over || frame.is_empty() {
            return;
        }
        match self.len.checked_add(frame.len()) {
            Some(len) if len <= self.limit => {
                self.len = len;
                self.frames.push(frame.clone());
            }
            _ => {
                self.over = true;
                self.len = 0;
                self.frames = Vec::new();
            }
        }
    }

    /// The bytes kept so far (every byte of the body until it passes the bound); `None` past it.
    pub fn kept(&self) -> Option<u64> {
        (!self.over).then_some(self.len as u64)
    }

    /// The usage of the complete body, read once with the dialect's reader; `None` past the
    /// bound, for an empty body, or when the body carries no readable usage.
    pub fn usage(self, dialect: Dialect) -> Option<Usage> {
        let Self {
            frames,
            len,
            limit: _,
            over,
        } = self;
        if over {
            return None;
        }
        match frames.as_slice() {
            [] => None,
            [only] => dialect.body_usage(only),
            many => {
                let mut joined = Vec::with_capacity(len);
                for frame in many {
                    joined.extend_from_slice(frame);
                }
                dialect.body_usage(&joined)
            }
        }
    }
}

impl Default for WholeBody {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
