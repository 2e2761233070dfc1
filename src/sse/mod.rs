//! Cutting a response stream into events: the byte-level, incremental Server-Sent Events scanner
//! (WHATWG rules, REFERENCE.md §5), its NDJSON counterpart ([`NdJsonScanner`], one event per line),
//! and the [`Framer`] that is either, chosen by the response's [`StreamFormat`].
//!
//! The proxy passes every upstream body frame through untouched; the meter shows each frame to a
//! [`Scanner`], which reports the events that frame completes. The scanner never modifies or
//! keeps a frame: an event that lies whole inside one frame borrows its data from it, and only
//! events that span frames (or join several `data` lines) are copied, into buffers that are
//! reused for the life of the stream.
//!
//! ```
//! use tokenmeter::sse::Scanner;
//!
//! let mut scanner = Scanner::default();
//! let mut seen = Vec::new();
//! for frame in [&b"data: {\"a\""[..], b":1}\n\nevent: ping\r\ndata:\r\n\r\n"] {
//!     scanner.feed(frame, |event| seen.push((event.event.to_vec(), event.data.to_vec(), event.start, event.end)));
//! }
//! assert_eq!(seen, vec![
//!     (b"".to_vec(), b"{\"a\":1}".to_vec(), 0, 15),
//!     (b"ping".to_vec(), b"".to_vec(), 15, 36),
//! ]);
//! ```
//!
//! Offsets: `start` and `end` count raw stream bytes (a stripped BOM included). A blank line that
//! ends in CR or CRLF dispatches at its CR, so `end` is just past the CR and the LF after it
//! belongs to no event — whether it comes in the same frame or the next. That keeps offsets the
//! same for every way of cutting a stream into frames.

mod framer;
mod ndjson;
mod scanner;

#[cfg(test)]
mod tests;

pub use framer::{FramedEvent, Framer, StreamFormat};
pub use scanner::{Event, Scanner, DEFAULT_MAX_LINE};
